//! How the process talks to the API server: every watch and write over one HTTP/2 connection with Nagle's
//! algorithm off, as client-go does. kube's default client speaks HTTP/1.1 (a connection per watch, 18 here) with
//! Nagle on; `make bench` measured its reaction's p99 above the Go baseline's in the same run, and level with it
//! on this stack (docs/benchmarks.md). HTTP/2 needs Nagle off: its frames are written separately, and a DATA frame
//! held back for the ACK of its HEADERS frame waited for the peer's delayed ACK, about 40 ms, on every write.

use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::retry::RetryPolicy;
use kube::client::{ClientBuilder, ConfigExt};
use kube::{Client, Config};
use tower::{BoxError, ServiceBuilder};

/// How often an idle connection is pinged, and how long a ping may go unanswered before the connection is
/// dropped and every watch on it restarts (client-go's HTTP/2 health check uses 30 s and 15 s).
const PING_INTERVAL: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(15);

/// A client for `config`. A proxy in the kubeconfig gets kube's own client, which knows how to tunnel.
pub fn client(config: Config) -> Result<Client, kube::Error> {
    if config.proxy_url.is_some() {
        return Client::try_from(config);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(config.connect_timeout);
    let mut tls =
        hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config.rustls_client_config()?).https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = name.clone().try_into().map_err(|e| kube::Error::Service(Box::new(e)))?;
        tls = tls.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
    }
    let https = tls.enable_http1().enable_http2().wrap_connector(http);
    let transport = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .http2_keep_alive_interval(PING_INTERVAL)
        .http2_keep_alive_timeout(PING_TIMEOUT)
        .http2_keep_alive_while_idle(true)
        .build(https);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.default_retry.then(|| tower::retry::RetryLayer::new(RetryPolicy::server_retry())))
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(transport);
    Ok(ClientBuilder::new(service, config.default_namespace).build())
}
