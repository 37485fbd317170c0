//! The relay's own metrics, registered into the agent's /metrics: connections, bytes and refusals per registry
//! (the registries the cluster admin relays: a bounded label).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry as MetricsRegistry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RegistryLabels {
    registry: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BytesLabels {
    registry: String,
    direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusedLabels {
    registry: String,
    reason: &'static str,
}

/// Which way bytes went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// From the node (a pull's requests, a push's layers) to the registry.
    ToRegistry,
    FromRegistry,
}

impl Direction {
    fn as_str(self) -> &'static str {
        match self {
            Direction::ToRegistry => "to_registry",
            Direction::FromRegistry => "from_registry",
        }
    }
}

/// Cheap to clone (shared handles).
#[derive(Clone, Debug, Default)]
pub struct RelayMetrics {
    connections: Family<RegistryLabels, Counter>,
    open: Family<RegistryLabels, Gauge>,
    bytes: Family<BytesLabels, Counter>,
    refused: Family<RefusedLabels, Counter>,
    listeners: Family<RegistryLabels, Gauge>,
    /// Every registry relayed since start, whose listener gauge goes to 0 when it stops.
    known: Arc<Mutex<BTreeSet<String>>>,
}

/// One registry's series, held by its connections.
#[derive(Clone, Debug)]
pub struct RelayCounters {
    connections: Counter,
    open: Gauge,
    to_registry: Counter,
    from_registry: Counter,
    over_limit: Counter,
    unreachable: Counter,
}

/// An open connection, counted until dropped.
pub struct Open(Gauge);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl RelayMetrics {
    pub fn register(&self, registry: &mut MetricsRegistry) {
        registry.register(
            "local_registry_publisher_node_relay_connections",
            "Connections the loopback relay relayed to the registry, by registry (namespace/name)",
            self.connections.clone(),
        );
        registry.register(
            "local_registry_publisher_node_relay_open_connections",
            "Connections the loopback relay holds open now, by registry",
            self.open.clone(),
        );
        registry.register(
            "local_registry_publisher_node_relay_bytes",
            "Bytes the loopback relay copied, by registry and direction (to_registry: requests and pushed layers; \
             from_registry: pulled layers)",
            self.bytes.clone(),
        );
        registry.register(
            "local_registry_publisher_node_relay_refused_connections",
            "Connections the loopback relay closed at once, by registry and reason: limit (nodeAgent.relay.\
             maxConnections were open), unreachable (the registry's ClusterIP did not accept within 10 s)",
            self.refused.clone(),
        );
        registry.register(
            "local_registry_publisher_node_relay_listeners",
            "Loopback addresses (127.0.0.1, [::1]) the relay listens on, by registry; 0 when its port is taken",
            self.listeners.clone(),
        );
    }

    /// The series of `registry`, every one started at 0.
    pub fn counters(&self, registry: &str) -> RelayCounters {
        let labels = RegistryLabels { registry: registry.to_string() };
        let bytes = |direction| self.bytes.get_or_create(&BytesLabels { registry: registry.into(), direction }).clone();
        let refused = |reason| self.refused.get_or_create(&RefusedLabels { registry: registry.into(), reason }).clone();
        RelayCounters {
            connections: self.connections.get_or_create(&labels).clone(),
            open: self.open.get_or_create(&labels).clone(),
            to_registry: bytes(Direction::ToRegistry.as_str()),
            from_registry: bytes(Direction::FromRegistry.as_str()),
            over_limit: refused("limit"),
            unreachable: refused("unreachable"),
        }
    }

    /// How many loopback addresses each relayed registry listens on now; registries no longer relayed go to 0.
    pub fn serving(&self, listening: &[(String, usize)]) {
        let Ok(mut known) = self.known.lock() else { return };
        for registry in known.iter() {
            if !listening.iter().any(|(name, _)| name == registry) {
                self.listeners.get_or_create(&RegistryLabels { registry: registry.clone() }).set(0);
            }
        }
        for (registry, count) in listening {
            known.insert(registry.clone());
            let count = i64::try_from(*count).unwrap_or(i64::MAX);
            self.listeners.get_or_create(&RegistryLabels { registry: registry.clone() }).set(count);
        }
    }
}

impl RelayCounters {
    pub fn opened(&self) -> Open {
        self.connections.inc();
        self.open.inc();
        Open(self.open.clone())
    }

    pub fn moved(&self, direction: Direction, bytes: usize) {
        let counter = match direction {
            Direction::ToRegistry => &self.to_registry,
            Direction::FromRegistry => &self.from_registry,
        };
        counter.inc_by(u64::try_from(bytes).unwrap_or(u64::MAX));
    }

    pub fn refused(&self) {
        self.over_limit.inc();
    }

    pub fn unreachable(&self) {
        self.unreachable.inc();
    }
}
