//! The relay on this machine's own loopback, with real sockets: an echo server stands in for the registry.

use super::*;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const REGISTRY: &str = "registry/registry";

/// A port nothing listens on now.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").port()
}

/// An echo server on loopback standing in for the registry: every byte comes back.
async fn echo() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the echo server");
    let address = listener.local_addr().expect("its address");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut read, mut write) = stream.split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
            });
        }
    });
    address
}

fn entry(port: u16, target: SocketAddr) -> RelayEntry {
    RelayEntry { port, registry: REGISTRY.into(), target }
}

fn relays(max_connections: usize, idle_timeout: Duration) -> (Relays, RelayMetrics) {
    let metrics = RelayMetrics::default();
    (Relays::new(RelaySettings { max_connections, idle_timeout }, metrics.clone()), metrics)
}

fn scrape(metrics: &RelayMetrics) -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    crate::metrics::Metrics::encode(&registry)
}

async fn round_trip(address: &str, payload: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(address).await.expect("connect to the relay");
    stream.write_all(payload).await.expect("write");
    stream.shutdown().await.expect("end the request");
    let mut back = Vec::new();
    stream.read_to_end(&mut back).await.expect("read");
    back
}

fn states(relay: &Relay) -> Vec<(String, ListenerState)> {
    relay.listeners.iter().map(|l| (l.address.clone(), l.state)).collect()
}

/// Whether the machine has IPv6 loopback (the relay says Unavailable where it has none).
fn has_ipv6_loopback() -> bool {
    std::net::TcpListener::bind("[::1]:0").is_ok()
}

#[tokio::test]
async fn bytes_go_to_the_registry_and_back_on_both_loopbacks_as_they_are_and_are_counted() {
    let target = echo().await;
    let port = free_port();
    let (mut relays, metrics) = relays(8, Duration::from_secs(60));
    let found = relays.apply(&[entry(port, target)]);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].target, target.to_string());
    let ipv6 = if has_ipv6_loopback() { ListenerState::Serving } else { ListenerState::Unavailable };
    assert_eq!(
        states(&found[0]),
        [(format!("127.0.0.1:{port}"), ListenerState::Serving), (format!("[::1]:{port}"), ipv6)]
    );
    // Not a byte is read or changed: a TLS ClientHello's bytes come back as sent.
    let payload: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(round_trip(&format!("127.0.0.1:{port}"), &payload).await, payload);
    if ipv6 == ListenerState::Serving {
        assert_eq!(round_trip(&format!("[::1]:{port}"), b"over IPv6").await, b"over IPv6");
    }
    let text = scrape(&metrics);
    let connections = if ipv6 == ListenerState::Serving { 2 } else { 1 };
    let sent = payload.len() + if connections == 2 { 9 } else { 0 };
    for line in [
        format!("local_registry_publisher_node_relay_connections_total{{registry=\"{REGISTRY}\"}} {connections}"),
        format!(
            "local_registry_publisher_node_relay_bytes_total{{registry=\"{REGISTRY}\",direction=\"to_registry\"}} {sent}"
        ),
        format!(
            "local_registry_publisher_node_relay_bytes_total{{registry=\"{REGISTRY}\",direction=\"from_registry\"}} {sent}"
        ),
        format!("local_registry_publisher_node_relay_listeners{{registry=\"{REGISTRY}\"}} {connections}"),
    ] {
        assert!(text.contains(&line), "{line} in\n{text}");
    }
}

#[tokio::test]
async fn it_listens_on_loopback_only() {
    let target = echo().await;
    let port = free_port();
    let (mut relays, _) = relays(8, Duration::from_secs(60));
    relays.apply(&[entry(port, target)]);
    // This machine's address towards the rest of the network: the relay is not there.
    let probe = std::net::UdpSocket::bind("0.0.0.0:0").expect("a UDP socket");
    probe.connect("10.255.255.1:9").expect("a route off loopback (no packet is sent)");
    let own = probe.local_addr().expect("its address").ip();
    assert!(!own.is_loopback() && !own.is_unspecified(), "{own} is no address off loopback");
    let refused = TcpStream::connect(SocketAddr::new(own, port)).await;
    assert!(refused.is_err(), "the relay answered at {own}:{port}");
    assert_eq!(round_trip(&format!("127.0.0.1:{port}"), b"ok").await, b"ok");
}

#[tokio::test]
async fn a_taken_port_is_said_and_taken_as_soon_as_it_is_free() {
    let target = echo().await;
    let squatter = std::net::TcpListener::bind("127.0.0.1:0").expect("a squatter");
    let port = squatter.local_addr().expect("its address").port();
    let (mut relays, metrics) = relays(8, Duration::from_secs(60));
    let found = relays.apply(&[entry(port, target)]);
    let v4 = &found[0].listeners[0];
    assert_eq!((v4.address.clone(), v4.state), (format!("127.0.0.1:{port}"), ListenerState::Taken));
    assert!(v4.message.as_deref().is_some_and(|m| m.contains("in use")), "{v4:?}");
    let text = scrape(&metrics);
    let listening = if has_ipv6_loopback() { 1 } else { 0 };
    let line = format!("local_registry_publisher_node_relay_listeners{{registry=\"{REGISTRY}\"}} {listening}");
    assert!(text.contains(&line), "{line} in\n{text}");
    drop(squatter);
    let found = relays.apply(&[entry(port, target)]);
    assert_eq!(found[0].listeners[0].state, ListenerState::Serving, "the next pass binds it");
    assert_eq!(round_trip(&format!("127.0.0.1:{port}"), b"back").await, b"back");
}

#[tokio::test]
async fn a_relay_taken_away_stops_listening_and_closes_its_connections_at_once() {
    let target = echo().await;
    let port = free_port();
    let (mut relays, _) = relays(8, Duration::from_secs(60));
    relays.apply(&[entry(port, target)]);
    let mut open = TcpStream::connect(format!("127.0.0.1:{port}")).await.expect("connect");
    open.write_all(b"x").await.expect("write");
    let mut one = [0u8; 1];
    open.read_exact(&mut one).await.expect("relayed");
    assert!(relays.apply(&[]).is_empty());
    tokio::task::yield_now().await;
    let mut rest = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(1), open.read_to_end(&mut rest)).await;
    assert!(ended.is_ok(), "the open connection was not closed within a second");
    assert!(TcpStream::connect(format!("127.0.0.1:{port}")).await.is_err(), "still listening");
}

#[tokio::test]
async fn a_moved_registry_is_relayed_to_where_it_is_now() {
    let (first, second) = (echo().await, echo().await);
    let port = free_port();
    let (mut relays, _) = relays(8, Duration::from_secs(60));
    relays.apply(&[entry(port, first)]);
    let found = relays.apply(&[entry(port, second)]);
    assert_eq!(found[0].target, second.to_string());
    assert_eq!(found[0].listeners[0].state, ListenerState::Serving, "the listener stays");
    assert_eq!(round_trip(&format!("127.0.0.1:{port}"), b"moved").await, b"moved");
}

#[tokio::test]
async fn connections_over_the_cap_are_closed_at_once_and_counted() {
    let target = echo().await;
    let port = free_port();
    let (mut relays, metrics) = relays(1, Duration::from_secs(60));
    relays.apply(&[entry(port, target)]);
    let mut held = TcpStream::connect(format!("127.0.0.1:{port}")).await.expect("connect");
    held.write_all(b"x").await.expect("write");
    let mut one = [0u8; 1];
    held.read_exact(&mut one).await.expect("relayed");
    let mut over = TcpStream::connect(format!("127.0.0.1:{port}")).await.expect("accepted, then closed");
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(2), over.read_to_end(&mut rest)).await;
    assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "the connection over the cap was relayed: {closed:?}");
    let text = scrape(&metrics);
    let line = format!(
        "local_registry_publisher_node_relay_refused_connections_total{{registry=\"{REGISTRY}\",reason=\"limit\"}} 1"
    );
    assert!(text.contains(&line), "{line} in\n{text}");
    drop(held);
}

#[tokio::test]
async fn an_idle_connection_is_closed_after_the_timeout_and_a_busy_one_is_not() {
    let target = echo().await;
    let port = free_port();
    let (mut relays, _) = relays(8, Duration::from_millis(300));
    relays.apply(&[entry(port, target)]);
    let mut busy = TcpStream::connect(format!("127.0.0.1:{port}")).await.expect("connect");
    for _ in 0..8 {
        busy.write_all(b"x").await.expect("still relayed");
        let mut one = [0u8; 1];
        busy.read_exact(&mut one).await.expect("still relayed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(3), busy.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "an idle connection stayed open");
}

#[tokio::test]
async fn an_unreachable_registry_is_counted_and_the_client_closed() {
    let gone = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        listener.local_addr().expect("its address")
    };
    let port = free_port();
    let (mut relays, metrics) = relays(8, Duration::from_secs(60));
    relays.apply(&[entry(port, gone)]);
    let mut client = TcpStream::connect(format!("127.0.0.1:{port}")).await.expect("the relay accepts");
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), client.read_to_end(&mut rest)).await;
    let line = format!(
        "local_registry_publisher_node_relay_refused_connections_total{{registry=\"{REGISTRY}\",reason=\"unreachable\"}} 1"
    );
    assert!(scrape(&metrics).contains(&line), "{line}");
}
