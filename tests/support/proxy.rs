//! A TCP proxy on loopback that can freeze: connections stay open, but no byte moves either way, as when a
//! network path silently drops traffic. It counts the bytes clients send, so a test can see a request go by
//! though TLS hides it. Bounded to this machine: it only ever dials the upstream it is given.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub struct FreezingProxy {
    pub address: SocketAddr,
    frozen: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl FreezingProxy {
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let address = listener.local_addr().expect("proxy address");
        let frozen = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let (flag, counted) = (frozen.clone(), sent.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(upstream).await else { continue };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(pump(client_read, server_write, flag.clone(), Some(counted.clone())));
                tokio::spawn(pump(server_read, client_write, flag.clone(), None));
            }
        });
        Self { address, frozen, sent, task }
    }

    pub fn freeze(&self) {
        self.frozen.store(true, Ordering::SeqCst);
    }

    /// Bytes clients have sent towards the API server so far.
    pub fn bytes_sent(&self) -> u64 {
        self.sent.load(Ordering::SeqCst)
    }
}

impl Drop for FreezingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pump(
    mut from: impl AsyncReadExt + Unpin,
    mut to: impl AsyncWriteExt + Unpin,
    frozen: Arc<AtomicBool>,
    counted: Option<Arc<AtomicU64>>,
) {
    let mut buffer = vec![0; 64 * 1024];
    loop {
        let Ok(read) = from.read(&mut buffer).await else { return };
        if read == 0 {
            return;
        }
        // Frozen: hold what was read and never deliver it; the connection stays open.
        while frozen.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
        if let Some(counted) = &counted {
            counted.fetch_add(read as u64, Ordering::SeqCst);
        }
    }
}
