//! A mocked API server for the I/O shells (`tower-test`): each request is asserted (its method, and its path with
//! the query) and each answer scripted, so a test proves which calls a read or a write makes, with which body, and
//! what it makes of each answer. It never stands in for the cluster: what a write does there is proven on the
//! project's control plane.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use tower_test::mock::{self, Handle, SendResponse};

/// The scripted side of a [`Client`].
pub struct Server {
    handle: Pin<Box<Handle<Request<Body>, Response<Body>>>>,
}

/// A client whose every request reaches the returned [`Server`].
pub fn pair() -> (Client, Server) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), Server { handle: Box::pin(handle) })
}

impl Server {
    /// Takes the next request, asserts it is `method` on `uri`, answers it with `status` and `body`, and returns
    /// the request's body as JSON (`Null` when it has none).
    pub async fn answer(&mut self, method: &str, uri: &str, status: u16, body: serde_json::Value) -> serde_json::Value {
        self.respond(method, uri, status, body.to_string()).await
    }

    /// Answers the next request, which must be `GET uri`, with plain `text` (a container's log).
    pub async fn text(&mut self, uri: &str, text: &str) {
        self.respond("GET", uri, 200, text.to_string()).await;
    }

    async fn respond(&mut self, method: &str, uri: &str, status: u16, body: String) -> serde_json::Value {
        let received = self.receive(method, uri).await;
        let sent = received.body.clone();
        received.reply_text(status, body);
        sent
    }

    /// Takes the next request, asserts it is `method` on `uri`, and holds it for a reply.
    pub async fn receive(&mut self, method: &str, uri: &str) -> Received {
        let (request, send) = self.handle.next_request().await.unwrap_or_else(|| panic!("no request for {uri}"));
        assert_eq!((request.method().as_str(), request.uri().to_string().as_str()), (method, uri));
        let content_type = request.headers().get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
        let content_type = content_type.map(str::to_string);
        let sent = request.into_body().collect_bytes().await.expect("the request's body");
        let body = serde_json::from_slice(&sent).unwrap_or(serde_json::Value::Null);
        Received { content_type, body, send }
    }

    /// Answers the next request, which must be `GET uri`, with `status` and `body`.
    pub async fn get(&mut self, uri: &str, status: u16, body: serde_json::Value) {
        self.answer("GET", uri, status, body).await;
    }
}

/// A request taken by [`Server::receive`], not answered yet.
pub struct Received {
    pub content_type: Option<String>,
    /// Its body as JSON (`Null` when it has none).
    pub body: serde_json::Value,
    send: SendResponse<Response<Body>>,
}

impl Received {
    pub fn reply(self, status: u16, body: serde_json::Value) {
        self.reply_text(status, body.to_string());
    }

    fn reply_text(self, status: u16, body: String) {
        let response = Response::builder().status(status).body(Body::from(body.into_bytes()));
        self.send.send_response(response.expect("a response"));
    }
}

/// `call`'s output, which must come without a request: one would wait for an answer that never comes.
pub async fn without_requests<F: Future>(call: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(5), call).await.expect("no request is made, so no answer is awaited")
}

/// A Kubernetes `Status` answer of `code` (`NotFound`, `Forbidden`, ...).
pub fn status(code: u16, reason: &str) -> serde_json::Value {
    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code,
        "message": format!("{reason} (mocked)")})
}

/// A list answer of `kind` holding `items`.
pub fn list(kind: &str, items: Vec<serde_json::Value>) -> serde_json::Value {
    serde_json::json!({"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": items})
}
