//! What the node-plan task counts of its own: the plan's writes, and the addresses and mirrors that get no node file.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::metrics::gauge_value;

/// The node-plan task's own metrics; cheap to clone (shared handles).
#[derive(Clone, Debug, Default)]
pub struct NodePlanMetrics {
    writes: Counter,
    refused: Gauge,
    mirrors_unusable: Gauge,
}

impl NodePlanMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "local_registry_publisher_node_plan_writes",
            "Writes of the node plan's ConfigMap (--node-plan-configmap): one per changed plan",
            self.writes.clone(),
        );
        registry.register(
            "local_registry_publisher_node_addresses_refused",
            "Addresses the published registry names that get no node file: neither its Service's own nor allowed by \
             the cluster admin (--node-allowed-addresses)",
            self.refused.clone(),
        );
        registry.register(
            "local_registry_publisher_node_mirrors_unusable",
            "Mirrors the cluster admin set (--node-mirrors) that get no node file, because their Service cannot be \
             used: nodes pull those upstreams directly",
            self.mirrors_unusable.clone(),
        );
    }

    pub fn wrote(&self) {
        self.writes.inc();
    }

    pub fn decided(&self, refused: usize, mirrors_unusable: usize) {
        self.refused.set(gauge_value(refused));
        self.mirrors_unusable.set(gauge_value(mirrors_unusable));
    }
}
