//! One port's connections, plain HTTP or TLS, each on a task of its own and each bounded.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, warn};

/// Connections held at once; one more is closed at once. Kubelet's probes and a scraper or two need a handful.
pub const MAX_CONNECTIONS: usize = 256;
/// Connections held at once from one address: a client that holds its share cannot crowd out the kubelet's
/// probes, which come from the node's own address.
pub const MAX_PER_PEER: usize = 16;
/// How long a client has to send a request's headers (and, over TLS, to finish its handshake), idle keep-alive
/// connections included.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest a connection is served, however busy: a scraper that keeps one open reconnects.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(120);

/// The first byte of every TLS connection: a handshake record.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// What a client that speaks plain HTTP to an HTTPS port is told, instead of a reset it cannot explain.
const PLAIN_HTTP_ANSWER: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n\
Connection: close\r\n\r\nThis port serves HTTPS only (--tls-cert-file): use https://.\n";

/// Serves `app` on `listener`, over TLS with `tls`, until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let peers = Peers::default();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // Out of file descriptors, say: wait rather than spin.
                Err(error) => {
                    warn!("accepting a connection: {error}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => return Ok(()),
        };
        let Some(share) = peers.take(peer.ip()) else {
            debug!(peer = %peer.ip(), "{MAX_PER_PEER} connections from one address are open: one more is closed");
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            debug!("{MAX_CONNECTIONS} connections are open: one more is closed");
            continue;
        };
        let (tls, app) = (tls.clone(), app.clone());
        tokio::spawn(async move {
            let _held = (slot, share);
            let served = tokio::time::timeout(CONNECTION_LIFETIME, connection(stream, tls, app)).await;
            if served.is_err() {
                debug!("a connection was served for {CONNECTION_LIFETIME:?}: closed");
            }
        });
    }
}

/// How many connections each address holds.
#[derive(Clone, Default)]
struct Peers(Arc<Mutex<HashMap<IpAddr, usize>>>);

/// One connection's count against its address, given back when dropped.
struct Share(Peers, IpAddr);

impl Peers {
    fn take(&self, peer: IpAddr) -> Option<Share> {
        let mut held = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = held.entry(peer).or_default();
        if *count >= MAX_PER_PEER {
            return None;
        }
        *count += 1;
        Some(Share(self.clone(), peer))
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut held = (self.0).0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = held.get_mut(&self.1) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.1);
            }
        }
    }
}

async fn connection(stream: TcpStream, tls: Option<TlsAcceptor>, app: Router) {
    let _ = stream.set_nodelay(true);
    let Some(acceptor) = tls else {
        return http(stream, app).await;
    };
    let mut first = [0u8; 1];
    match tokio::time::timeout(HEADER_TIMEOUT, stream.peek(&mut first)).await {
        Ok(Ok(1)) if first[0] == TLS_HANDSHAKE_RECORD => {}
        Ok(Ok(1)) => {
            let mut stream = stream;
            let _ = stream.write_all(PLAIN_HTTP_ANSWER).await;
            let _ = stream.shutdown().await;
            return;
        }
        _ => return,
    }
    match tokio::time::timeout(HEADER_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => http(tls, app).await,
        Ok(Err(error)) => debug!("TLS handshake failed: {error}"),
        Err(_) => debug!("TLS handshake timed out"),
    }
}

/// HTTP/1.1 over `io`, with the header timeout.
async fn http<IO>(io: IO, app: Router)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper_util::service::TowerToHyperService::new(app);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(HEADER_TIMEOUT);
    if let Err(error) = builder.serve_connection(hyper_util::rt::TokioIo::new(io), service).await {
        debug!("serving a connection: {error}");
    }
}

#[cfg(test)]
mod tests;
