//! `/healthz`, `/readyz` and `/metrics` on one port.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

use crate::metrics::Metrics;
use crate::metrics_auth::{Decision, MetricsAuth};

/// The reconcile loop beats at least this often; twice this without a beat means it is stuck.
pub const HEARTBEAT: Duration = Duration::from_secs(5);
/// Writes the API server refused in a row before /readyz says so: one may be a conflict that the retry fixes.
pub const FAILED_WRITES_NOT_READY: u32 = 3;

/// What the probes report, written by the watches and the reconcile loop.
#[derive(Debug)]
pub struct Health {
    synced: AtomicBool,
    api_reachable: AtomicBool,
    watches_alive: AtomicBool,
    heartbeat: AtomicU64,
    failed_writes: AtomicU32,
    lease_overdue: AtomicBool,
}

impl Default for Health {
    fn default() -> Self {
        let health = Self {
            synced: AtomicBool::new(false),
            api_reachable: AtomicBool::new(false),
            watches_alive: AtomicBool::new(true),
            heartbeat: AtomicU64::new(0),
            failed_writes: AtomicU32::new(0),
            lease_overdue: AtomicBool::new(false),
        };
        health.beat();
        health
    }
}

impl Health {
    pub fn beat(&self) {
        self.heartbeat.store(now_secs(), Ordering::Release);
    }

    pub fn set_synced(&self, synced: bool) {
        self.synced.store(synced, Ordering::Release);
    }

    pub fn set_api_reachable(&self, reachable: bool) {
        self.api_reachable.store(reachable, Ordering::Release);
    }

    /// Writes of the ConfigMap that failed in a row; zero after one succeeds.
    pub fn set_failed_writes(&self, count: u32) {
        self.failed_writes.store(count, Ordering::Release);
    }

    pub fn failed_writes(&self) -> u32 {
        self.failed_writes.load(Ordering::Acquire)
    }

    /// This replica led and could not renew its Lease by the renew deadline (a frozen connection, most likely):
    /// it stopped writing, and liveness fails so the pod is restarted with a fresh connection.
    pub fn set_lease_overdue(&self, overdue: bool) {
        self.lease_overdue.store(overdue, Ordering::Release);
    }

    pub fn set_watches_alive(&self, alive: bool) {
        self.watches_alive.store(alive, Ordering::Release);
    }

    /// Liveness: the reconcile loop beats and no watch task has died.
    pub fn live(&self) -> Result<(), &'static str> {
        let age = now_secs().saturating_sub(self.heartbeat.load(Ordering::Acquire));
        if age > 12 * HEARTBEAT.as_secs() {
            return Err("the reconcile loop has not run for a minute");
        }
        if !self.watches_alive.load(Ordering::Acquire) {
            return Err("a watch task has stopped");
        }
        if self.lease_overdue.load(Ordering::Acquire) {
            return Err("the leader Lease could not be renewed by the renew deadline; this replica stopped writing");
        }
        Ok(())
    }

    /// Readiness: live, caches synced, and the API server answering.
    pub fn ready(&self) -> Result<(), &'static str> {
        self.live()?;
        if !self.api_reachable.load(Ordering::Acquire) {
            return Err("the API server is not reachable");
        }
        if !self.synced.load(Ordering::Acquire) {
            return Err("the watch caches are not synced yet");
        }
        if self.failed_writes() >= FAILED_WRITES_NOT_READY {
            return Err("the API server refuses every write of the ConfigMap (see the PublishFailed Events)");
        }
        Ok(())
    }
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

/// Serves until `shutdown` completes. With `auth`, /metrics answers only callers it allows; the probes stay open
/// because kubelet calls them without credentials.
pub async fn serve(
    listener: tokio::net::TcpListener,
    health: Arc<Health>,
    registry: Registry,
    auth: Option<Arc<MetricsAuth>>,
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
                        Decision::Allowed => {}
                        Decision::Unauthenticated(why) => {
                            return (StatusCode::UNAUTHORIZED, format!("{why}\n")).into_response();
                        }
                        Decision::Forbidden(why) => return (StatusCode::FORBIDDEN, format!("{why}\n")).into_response(),
                    }
                }
                let content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
                ([(header::CONTENT_TYPE, content_type)], Metrics::encode(&registry)).into_response()
            }),
        );
    axum::serve(listener, app).with_graceful_shutdown(shutdown).await
}

fn probe(result: Result<(), &'static str>) -> impl IntoResponse {
    match result {
        Ok(()) => (StatusCode::OK, "ok\n".to_string()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}

/// Binds early so a taken port is reported before the controller starts.
pub async fn bind(address: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(address).await
}
