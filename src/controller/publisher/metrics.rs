//! What the publisher counts of its own: its reaction time, what readers see, and the published ConfigMap's writes
//! and conflicts.

use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::metrics::OperationLabels;

use crate::hosting::LocalRegistryHostingV1;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PublishedLabels {
    host: String,
    host_from_container_runtime: String,
    host_from_cluster_network: String,
    help: String,
    registry: String,
}

/// The publisher's own metrics; cheap to clone (shared handles).
#[derive(Clone, Debug)]
pub struct PublisherMetrics {
    reaction_time: Histogram,
    published: Family<PublishedLabels, Gauge>,
    last_publish: Gauge<f64, AtomicU64>,
    writes: Family<OperationLabels, Counter>,
    conflicts: Counter,
}

impl Default for PublisherMetrics {
    fn default() -> Self {
        Self {
            // 100 µs to 1 s: the controller's own share of a change's latency is well under a millisecond.
            reaction_time: Histogram::new([0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1.0]),
            published: Family::default(),
            last_publish: Gauge::default(),
            writes: Family::default(),
            conflicts: Counter::default(),
        }
    }
}

impl PublisherMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register_with_unit(
            "local_registry_publisher_reaction_time",
            "From receiving the watch event of a change to sending the write it calls for",
            Unit::Seconds,
            self.reaction_time.clone(),
        );
        registry.register(
            "local_registry_publisher_published_info",
            "The document currently published (1), by field; empty labels are fields left out",
            self.published.clone(),
        );
        registry.register_with_unit(
            "local_registry_publisher_last_publish_timestamp",
            "Unix time of the last successful write of the ConfigMap",
            Unit::Seconds,
            self.last_publish.clone(),
        );
        registry.register(
            "local_registry_publisher_configmap_writes",
            "Writes of the published ConfigMap, by operation",
            self.writes.clone(),
        );
        registry.register(
            "local_registry_publisher_write_conflicts",
            "Times another writer kept undoing the published ConfigMap and writes were held back",
            self.conflicts.clone(),
        );
    }

    /// The task started: its writes by operation at 0.
    pub fn started(&self) {
        for operation in ["apply", "delete"] {
            self.writes.get_or_create(&OperationLabels { operation }).inc_by(0);
        }
    }

    pub fn reacted(&self, took: Duration) {
        self.reaction_time.observe(took.as_secs_f64());
    }

    /// Records what readers now see of ours, and the registry it describes; `None` when we publish nothing.
    pub fn published(&self, document: Option<&LocalRegistryHostingV1>, registry: Option<String>) {
        self.published.clear();
        if let Some(document) = document {
            // Destructured whole: a new field of the document is a new label.
            let LocalRegistryHostingV1 { host, host_from_container_runtime, host_from_cluster_network, help } =
                document;
            let field = |value: &Option<String>| value.clone().unwrap_or_default();
            let labels = PublishedLabels {
                host: field(host),
                host_from_container_runtime: field(host_from_container_runtime),
                host_from_cluster_network: field(host_from_cluster_network),
                help: field(help),
                registry: registry.unwrap_or_default(),
            };
            self.published.get_or_create(&labels).set(1);
        }
    }

    /// A write of the published ConfigMap (`apply`, `delete`) went through.
    pub fn wrote(&self, operation: &'static str) {
        self.writes.get_or_create(&OperationLabels { operation }).inc();
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        self.last_publish.set(now.as_secs_f64());
    }

    pub fn conflict(&self) {
        self.conflicts.inc();
    }
}
