//! The bounds, on this machine's loopback with real sockets.

use std::io::{Read, Write};
use std::time::Instant;

use super::*;
use crate::health::Health;

/// The probes' server on its own thread, as the binaries run it, on a free loopback port; stops when dropped.
struct Server {
    address: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Server {
    fn start() -> Self {
        let listener = crate::http::bind("127.0.0.1:0".parse().unwrap()).expect("a port");
        let address = listener.local_addr().unwrap();
        let (stop, stopping) = tokio::sync::oneshot::channel::<()>();
        let registry = prometheus_client::registry::Registry::default();
        let health = Arc::new(Health::default());
        let shutdown = async move {
            let _ = stopping.await;
        };
        let _finished = crate::http::spawn(listener, health, registry, None, None, shutdown);
        Self { address, stop: Some(stop) }
    }

    fn connect(&self) -> std::net::TcpStream {
        let stream = std::net::TcpStream::connect(self.address).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        stream
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Reads until the server closes the connection; what it sent.
fn until_closed(stream: &mut std::net::TcpStream) -> String {
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

#[test]
fn a_client_that_sends_no_complete_headers_is_closed_after_the_header_timeout() {
    let server = Server::start();
    let (mut silent, mut slow) = (server.connect(), server.connect());
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n").unwrap();
    let started = Instant::now();
    until_closed(&mut silent);
    until_closed(&mut slow);
    let took = started.elapsed();
    // Closed by the server (before the 20 s read timeout here), and not before its header timeout.
    assert!(took >= HEADER_TIMEOUT - Duration::from_secs(1) && took < Duration::from_secs(19), "closed after {took:?}");
    // An idle keep-alive connection too, once its request was answered.
    let mut kept = server.connect();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let started = Instant::now();
    let answer = until_closed(&mut kept);
    assert!(answer.starts_with("HTTP/1.1 "), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(19), "an idle keep-alive connection stayed open");
}

#[test]
fn connections_over_one_addresss_share_are_closed_at_once_and_another_address_is_still_answered() {
    let server = Server::start();
    // All from 127.0.0.2, a loopback address of this machine like any other.
    let from = |source: &str| {
        let socket = connect_from(source, server.address);
        socket.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        socket
    };
    let held: Vec<std::net::TcpStream> = (0..MAX_PER_PEER).map(|_| from("127.0.0.2")).collect();
    std::thread::sleep(Duration::from_millis(300));
    // The kubelet's probe, from another address, is answered while that one holds its share.
    let mut probe = from("127.0.0.1");
    probe.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let answer = until_closed(&mut probe);
    assert!(answer.starts_with("HTTP/1.1 "), "{answer}");
    let mut over = from("127.0.0.2");
    let started = Instant::now();
    assert_eq!(until_closed(&mut over), "", "the connection over the cap was served");
    assert!(started.elapsed() < HEADER_TIMEOUT, "it was held, not closed at once");
    drop(held);
    std::thread::sleep(Duration::from_millis(300));
    let mut again = from("127.0.0.2");
    again.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let answer = until_closed(&mut again);
    assert!(answer.starts_with("HTTP/1.1 "), "its share given back: {answer}");
}

/// A connection to `to` from the loopback address `source` (any port).
fn connect_from(source: &str, to: std::net::SocketAddr) -> std::net::TcpStream {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(format!("{source}:0").parse().unwrap()).expect("bind the source address");
        let stream = socket.connect(to).await.expect("connect").into_std().expect("a std stream");
        stream.set_nonblocking(false).expect("blocking, as the other clients here");
        stream
    })
}

#[test]
fn the_probes_answer_while_the_callers_thread_is_busy() {
    // The server runs on a thread of its own: a caller's runtime that does not yield (a long pass, a flood of
    // handshakes on the controller's thread before) holds none of its answers.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let server = runtime.block_on(async { Server::start() });
    let address = server.address;
    let asked = std::thread::spawn(move || {
        let mut probe = std::net::TcpStream::connect(address).unwrap();
        probe.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
        let mut answer = String::new();
        let _ = probe.read_to_string(&mut answer);
        answer
    });
    runtime.block_on(async {
        // Busy without yielding, as a task that never awaits would be.
        std::thread::sleep(Duration::from_secs(1));
    });
    let answer = asked.join().unwrap();
    assert!(answer.starts_with("HTTP/1.1 "), "{answer}");
}
