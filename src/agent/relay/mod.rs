//! The loopback relay (`node-agent --relay`): the agent, on the node's network, listens at `127.0.0.1:<port>` and
//! `[::1]:<port>` for each relay the plan holds ([`crate::node::relay`]) and copies every connection's bytes to the
//! registry's ClusterIP and back, as they are: TLS passes through, nothing is read or kept. It binds loopback only,
//! whatever the plan says, and only ports the plan names (the cluster admin's). Connections are bounded
//! (`--relay-max-connections`, all relays together: one over the cap is closed at once and counted) and closed
//! after `--relay-idle-timeout` without a byte either way. A relay the plan no longer names stops listening and its
//! connections are closed at the next pass, which the plan's watch starts at once.

mod connection;
pub mod metrics;

use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};
use tracing::{info, warn};

use crate::node::RelayEntry;
use crate::node::api::state::{Listener, ListenerState, Relay};
pub use metrics::RelayMetrics;

/// How the relays behave, from the agent's flags.
#[derive(Clone, Copy, Debug)]
pub struct RelaySettings {
    /// Open connections across every relay; one more is closed at once.
    pub max_connections: usize,
    /// A connection with no byte either way for this long is closed.
    pub idle_timeout: Duration,
}

/// What a connection needs: where to go, how long it may idle, and what it counts into.
#[derive(Clone)]
struct Route {
    target: Arc<RwLock<SocketAddr>>,
    idle_timeout: Duration,
    metrics: metrics::RelayCounters,
}

/// Every relay this agent serves, by port.
pub struct Relays {
    settings: RelaySettings,
    metrics: RelayMetrics,
    /// Shared by every relay: the cap is the agent's, whatever the plan holds.
    slots: Arc<Semaphore>,
    served: BTreeMap<u16, Served>,
}

/// One relay: its target (changed in place when the registry's ClusterIP moves) and one listener per loopback.
struct Served {
    registry: String,
    target: Arc<RwLock<SocketAddr>>,
    listeners: Vec<Bound>,
}

struct Bound {
    address: SocketAddr,
    outcome: Result<JoinHandle<()>, (ListenerState, String)>,
}

impl Drop for Bound {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts every connection it relays.
        if let Ok(task) = &self.outcome {
            task.abort();
        }
    }
}

impl Relays {
    pub fn new(settings: RelaySettings, metrics: RelayMetrics) -> Self {
        let slots = Arc::new(Semaphore::new(settings.max_connections));
        Self { settings, metrics, slots, served: BTreeMap::new() }
    }

    /// Serves exactly `entries`: stops what they no longer name, moves a relay whose target changed, and binds
    /// what is new or could not be bound before. Returns what each relay listens on, sorted by port.
    pub fn apply(&mut self, entries: &[RelayEntry]) -> Vec<Relay> {
        let wanted: BTreeMap<u16, &RelayEntry> = entries.iter().map(|entry| (entry.port, entry)).collect();
        let gone: Vec<u16> = self
            .served
            .iter()
            .filter(|(port, served)| wanted.get(port).is_none_or(|entry| entry.registry != served.registry))
            .map(|(port, _)| *port)
            .collect();
        for port in gone {
            if let Some(served) = self.served.remove(&port) {
                info!(port, registry = %served.registry, "relay stopped: the plan no longer relays it here");
            }
        }
        for (port, entry) in wanted {
            let served = self.served.entry(port).or_insert_with(|| Served {
                registry: entry.registry.clone(),
                target: Arc::new(RwLock::new(entry.target)),
                listeners: Vec::new(),
            });
            if let Ok(mut target) = served.target.write()
                && *target != entry.target
            {
                info!(port, registry = %served.registry, from = %*target, to = %entry.target, "relay target moved");
                *target = entry.target;
            }
            served.listeners.retain(|bound| bound.outcome.is_ok());
            for ip in [IpAddr::V4(Ipv4Addr::LOCALHOST), IpAddr::V6(Ipv6Addr::LOCALHOST)] {
                let address = SocketAddr::new(ip, port);
                if served.listeners.iter().any(|bound| bound.address == address) {
                    continue;
                }
                let route = Route {
                    target: served.target.clone(),
                    idle_timeout: self.settings.idle_timeout,
                    metrics: self.metrics.counters(&served.registry),
                };
                let outcome = listen(address).map(|listener| {
                    info!(%address, registry = %served.registry, "relay listening");
                    tokio::spawn(accept(listener, route, self.slots.clone()))
                });
                if let Err((_, why)) = &outcome {
                    warn!(%address, registry = %served.registry, "relay not listening: {why}");
                }
                served.listeners.push(Bound { address, outcome });
            }
            served.listeners.sort_by_key(|bound| bound.address.is_ipv6());
        }
        self.metrics.serving(&self.served.values().map(|s| (s.registry.clone(), s.listening())).collect::<Vec<_>>());
        self.served.iter().map(|(port, served)| served.state(*port)).collect()
    }
}

impl Served {
    fn listening(&self) -> usize {
        self.listeners.iter().filter(|bound| bound.outcome.is_ok()).count()
    }

    fn state(&self, port: u16) -> Relay {
        let target = self.target.read().map(|t| t.to_string()).unwrap_or_default();
        let listeners = self
            .listeners
            .iter()
            .map(|bound| {
                let address = bound.address.to_string();
                match &bound.outcome {
                    Ok(_) => Listener { address, state: ListenerState::Serving, message: None },
                    Err((state, why)) => Listener { address, state: *state, message: Some(why.clone()) },
                }
            })
            .collect();
        Relay { port, registry: self.registry.clone(), target, listeners }
    }
}

/// A listener at `address`, or why there is none: taken (another process holds it), unavailable (the node has no
/// such address: no IPv6 loopback), or failed.
fn listen(address: SocketAddr) -> Result<TcpListener, (ListenerState, String)> {
    let bind = || -> io::Result<TcpListener> {
        let socket = if address.is_ipv6() { TcpSocket::new_v6()? } else { TcpSocket::new_v4()? };
        // A port left in TIME_WAIT by a relay just stopped is free to take again.
        socket.set_reuseaddr(true)?;
        socket.bind(address)?;
        socket.listen(1024)
    };
    bind().map_err(|error| match error.raw_os_error() {
        Some(libc::EADDRINUSE) => (ListenerState::Taken, format!("{address} is in use by another process")),
        Some(libc::EADDRNOTAVAIL | libc::EAFNOSUPPORT) => {
            (ListenerState::Unavailable, format!("this node has no {} loopback address ({error})", family(address)))
        }
        _ => (ListenerState::Failed, error.to_string()),
    })
}

fn family(address: SocketAddr) -> &'static str {
    if address.is_ipv6() { "IPv6" } else { "IPv4" }
}

/// Accepts until aborted; each connection is relayed in a task of its own, all aborted with this one.
async fn accept(listener: TcpListener, route: Route, slots: Arc<Semaphore>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => match slots.clone().try_acquire_owned() {
                    Ok(slot) => {
                        connections.spawn(connection::relay(client, route.clone(), slot));
                    }
                    Err(_) => {
                        route.metrics.refused();
                        drop(client);
                    }
                },
                // Out of file descriptors, say: wait a moment rather than spin.
                Err(error) => {
                    warn!(%error, "the relay cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

#[cfg(test)]
mod tests;
