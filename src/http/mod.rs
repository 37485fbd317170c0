//! `/healthz`, `/readyz` and `/metrics` on one port, over HTTP or [`tls`]; what the probes say is decided in
//! [`crate::health`]. The port is open to the pod network, so it is bounded whatever a client does: at most
//! [`MAX_CONNECTIONS`] at once and [`MAX_PER_PEER`] from one address (one more is closed at once), [`HEADER_TIMEOUT`] to send a request's headers (an idle
//! keep-alive connection included), [`CONNECTION_LIFETIME`] in all, and it runs on a thread of its own
//! ([`spawn`]), so neither a flood of TLS handshakes nor slow clients take time from the thread that renews the
//! leader's Lease and publishes.

mod connection;
pub mod tls;

pub use connection::{CONNECTION_LIFETIME, HEADER_TIMEOUT, MAX_CONNECTIONS, MAX_PER_PEER};

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry as MetricsRegistry;

use crate::health::Health;
use crate::metrics::Metrics;
use crate::metrics_auth::{Access, MetricsAuth};

/// Serves until `shutdown` completes, over TLS with `tls`. With `auth`, /metrics answers only callers it allows; the
/// probes stay open because kubelet calls them without credentials.
pub async fn serve(
    listener: tokio::net::TcpListener,
    health: Arc<Health>,
    registry: MetricsRegistry,
    auth: Option<Arc<MetricsAuth>>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let registry = Arc::new(registry);
    let (live, ready) = (health.clone(), health);
    let app = Router::new()
        .route("/healthz", get(move || async move { probe(live.live()) }))
        .route("/readyz", get(move || async move { probe(ready.ready()) }))
        .route(
            "/metrics",
            get(move |headers: axum::http::HeaderMap| async move {
                if let Some(auth) = &auth {
                    let authorization = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
                    match auth.decide(authorization).await {
                        Access::Allowed => {}
                        Access::Unauthenticated(why) => {
                            return (StatusCode::UNAUTHORIZED, format!("{why}\n")).into_response();
                        }
                        Access::Forbidden(why) => return (StatusCode::FORBIDDEN, format!("{why}\n")).into_response(),
                        Access::Throttled => {
                            let wait = [(header::RETRY_AFTER, "1")];
                            let why = "too many unknown tokens to review now; try again\n";
                            return (StatusCode::TOO_MANY_REQUESTS, wait, why).into_response();
                        }
                    }
                }
                let content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
                ([(header::CONTENT_TYPE, content_type)], Metrics::encode(&registry)).into_response()
            }),
        );
    connection::serve(listener, tls, app, shutdown).await
}

/// [`serve`] on a thread and runtime of its own, until `shutdown` completes; the handle ends with it.
pub fn spawn(
    listener: std::net::TcpListener,
    health: Arc<Health>,
    registry: MetricsRegistry,
    auth: Option<Arc<MetricsAuth>>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> tokio::sync::oneshot::Receiver<()> {
    let (done, finished) = tokio::sync::oneshot::channel();
    let thread = std::thread::Builder::new().name("http".into()).spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
        match runtime {
            Ok(runtime) => {
                let served = runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener)?;
                    serve(listener, health, registry, auth, tls, shutdown).await
                });
                if let Err(error) = served {
                    tracing::error!("serving the probes and /metrics stopped: {error}");
                }
            }
            Err(error) => tracing::error!("cannot start the probes' runtime: {error}"),
        }
        let _ = done.send(());
    });
    if let Err(error) = thread {
        tracing::error!("cannot start the probes' thread: {error}");
    }
    finished
}

fn probe(result: Result<(), String>) -> impl IntoResponse {
    match result {
        Ok(()) => (StatusCode::OK, "ok\n".to_string()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}

/// Binds early so a taken port is reported before the controller starts; served by [`spawn`] on its own thread.
pub fn bind(address: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(address)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}
