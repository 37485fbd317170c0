//! A mocked API server for the CLI's reads (`tower-test`): each request is asserted (its method, and its path with
//! the query) and each answer scripted, so a test proves which calls a read makes and what it makes of each answer.

use std::pin::Pin;

use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use tower_test::mock::{self, Handle};

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
        let (request, send) = self.handle.next_request().await.unwrap_or_else(|| panic!("no request for {uri}"));
        assert_eq!((request.method().as_str(), request.uri().to_string().as_str()), (method, uri));
        let sent = request.into_body().collect_bytes().await.expect("the request's body");
        let response = Response::builder().status(status).body(Body::from(body.into_bytes()));
        send.send_response(response.expect("a response"));
        serde_json::from_slice(&sent).unwrap_or(serde_json::Value::Null)
    }

    /// Answers the next request, which must be `GET uri`, with `status` and `body`.
    pub async fn get(&mut self, uri: &str, status: u16, body: serde_json::Value) {
        self.answer("GET", uri, status, body).await;
    }
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
