//! `/healthz`, `/readyz` and `/metrics` on one port, over HTTP or [`tls`]; what the probes say is decided in
//! [`crate::health`].

pub mod tls;

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
    match tls {
        Some(acceptor) => tls::serve(listener, acceptor, app, shutdown).await,
        None => axum::serve(listener, app).with_graceful_shutdown(shutdown).await,
    }
}

fn probe(result: Result<(), String>) -> impl IntoResponse {
    match result {
        Ok(()) => (StatusCode::OK, "ok\n".to_string()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}

/// Binds early so a taken port is reported before the controller starts.
pub async fn bind(address: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(address).await
}
