//! One relayed connection: the client's bytes to the registry and back, as they are, until both sides are done or
//! neither has sent a byte for the idle timeout.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tracing::debug;

use super::Route;
use super::metrics::Direction;

/// Per direction: 100 open connections hold 3.2 MiB of buffers (docs/benchmarks.md measures the agent with them).
const BUFFER: usize = 16 * 1024;
/// How long the registry may take to accept.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Relays `client` to the route's target; `slot` is its place under the connection cap, given back as it ends.
pub(super) async fn relay(client: TcpStream, route: Route, slot: OwnedSemaphorePermit) {
    let _slot = slot;
    let target = match route.target.read() {
        Ok(target) => *target,
        Err(_) => return,
    };
    let registry = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target)).await {
        Ok(Ok(registry)) => registry,
        Ok(Err(error)) => {
            debug!(%target, %error, "the relay cannot reach the registry");
            route.metrics.unreachable();
            return;
        }
        Err(_) => {
            debug!(%target, "the registry did not accept the relay's connection in time");
            route.metrics.unreachable();
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = registry.set_nodelay(true);
    let _open = route.metrics.opened();
    let started = Instant::now();
    let last = AtomicU64::new(0);
    let (client_read, client_write) = client.into_split();
    let (registry_read, registry_write) = registry.into_split();
    let both = async {
        tokio::join!(
            copy(client_read, registry_write, &route, Direction::ToRegistry, started, &last),
            copy(registry_read, client_write, &route, Direction::FromRegistry, started, &last),
        )
    };
    tokio::select! {
        _ = both => {}
        () = idle(&last, started, route.idle_timeout) => debug!(%target, "relayed connection closed: idle"),
    }
}

/// Copies `from` into `to` until `from` ends, then ends `to`'s writing half so the other side sees the end too.
async fn copy(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    route: &Route,
    direction: Direction,
    started: Instant,
    last: &AtomicU64,
) {
    let mut buffer = vec![0u8; BUFFER];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        if to.write_all(&buffer[..read]).await.is_err() {
            break;
        }
        route.metrics.moved(direction, read);
        last.store(elapsed_millis(started), Ordering::Relaxed);
    }
    let _ = to.shutdown().await;
}

/// Ends once no byte has moved either way for `timeout`.
async fn idle(last: &AtomicU64, started: Instant, timeout: Duration) {
    let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    loop {
        let quiet = elapsed_millis(started).saturating_sub(last.load(Ordering::Relaxed));
        if quiet >= timeout_ms {
            return;
        }
        tokio::time::sleep(Duration::from_millis(timeout_ms - quiet)).await;
    }
}

fn elapsed_millis(started: Instant) -> u64 {
    u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX)
}
