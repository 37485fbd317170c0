//! Prometheus metrics. Names follow controller-runtime's where one exists, so existing dashboards work.

use std::sync::atomic::AtomicU64;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry as MetricsRegistry, Unit};

use crate::hosting::LocalRegistryHostingV1;
use crate::keys::MANAGER;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    controller: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    controller: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PublishedLabels {
    host: String,
    host_from_container_runtime: String,
    host_from_cluster_network: String,
    help: String,
    registry: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReaderLabels {
    reader: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NameLabels {
    name: &'static str,
}

/// What a task counts in families of its own besides every task's, to start at 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskWrites {
    None,
    /// ConfigMap writes by operation.
    ConfigMap,
    /// Pull Secret writes and refusals by operation.
    PullSecrets,
    /// Unserved loopback addresses by reader.
    LoopbackReaders,
}

/// Every metric the controller exports; cheap to clone (shared handles).
#[derive(Clone, Debug)]
pub struct Metrics {
    reconciles: Family<ResultLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    reconcile_time: Family<ControllerLabels, Histogram>,
    reaction_time: Histogram,
    published: Family<PublishedLabels, Gauge>,
    last_publish: Gauge<f64, AtomicU64>,
    leader: Family<NameLabels, Gauge>,
    watch_restarts: Family<ResourceLabels, Counter>,
    watches: Family<ControllerLabels, Gauge>,
    writes: Family<OperationLabels, Counter>,
    pull_writes: Family<OperationLabels, Counter>,
    pull_refusals: Family<OperationLabels, Counter>,
    conflicts: Counter,
    lease_capped: Counter,
    node_refused: Gauge,
    node_mirrors_unusable: Gauge,
    loopback_unserved: Family<ReaderLabels, Gauge>,
    loopback_at_risk: Family<ReaderLabels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            reconciles: Family::default(),
            errors: Family::default(),
            // controller-runtime's buckets: 5 ms to 60 s.
            reconcile_time: Family::new_with_constructor(|| {
                Histogram::new([0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 60.0])
            }),
            // 100 µs to 1 s: the controller's own share of a change's latency is well under a millisecond.
            reaction_time: Histogram::new([0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1.0]),
            published: Family::default(),
            last_publish: Gauge::default(),
            leader: Family::default(),
            watch_restarts: Family::default(),
            watches: Family::default(),
            writes: Family::default(),
            pull_writes: Family::default(),
            pull_refusals: Family::default(),
            conflicts: Counter::default(),
            lease_capped: Counter::default(),
            node_refused: Gauge::default(),
            node_mirrors_unusable: Gauge::default(),
            loopback_unserved: Family::default(),
            loopback_at_risk: Family::default(),
        }
    }
}

impl Metrics {
    /// A registry holding these metrics and the process collector.
    pub fn registry(&self) -> MetricsRegistry {
        let mut registry = MetricsRegistry::default();
        registry.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller and result",
            self.reconciles.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller and bounded reason",
            self.errors.clone(),
        );
        registry.register_with_unit(
            "controller_runtime_reconcile_time",
            "Length of time per reconciliation per controller",
            Unit::Seconds,
            self.reconcile_time.clone(),
        );
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
            "leader_election_master_status",
            "1 when this replica holds the leader Lease (or leader election is off), else 0",
            self.leader.clone(),
        );
        registry.register(
            "local_registry_publisher_watch_restarts",
            "Watch failures that were retried with backoff, by resource",
            self.watch_restarts.clone(),
        );
        registry.register(
            "local_registry_publisher_watches",
            "Watches running per controller; registries share them, so this does not grow with the number of registries",
            self.watches.clone(),
        );
        registry.register(
            "local_registry_publisher_configmap_writes",
            "Writes of the published ConfigMap, by operation",
            self.writes.clone(),
        );
        registry.register(
            "local_registry_publisher_pull_secret_writes",
            "Writes of pull Secrets and ServiceAccounts (--pull-secrets), by operation",
            self.pull_writes.clone(),
        );
        registry.register(
            "local_registry_publisher_pull_secret_refusals",
            "Pull Secret and ServiceAccount writes the API server refused, by operation",
            self.pull_refusals.clone(),
        );
        registry.register(
            "local_registry_publisher_write_conflicts",
            "Times another writer kept undoing the published ConfigMap and writes were held back",
            self.conflicts.clone(),
        );
        registry.register(
            "local_registry_publisher_lease_duration_capped",
            "Times a Lease claimed a longer duration than this replica's own and was honoured for this replica's only",
            self.lease_capped.clone(),
        );
        registry.register(
            "local_registry_publisher_node_addresses_refused",
            "Addresses the published registry names that get no node file: neither its Service's own nor allowed by \
             the cluster admin (--node-allowed-addresses)",
            self.node_refused.clone(),
        );
        registry.register(
            "local_registry_publisher_node_mirrors_unusable",
            "Mirrors the cluster admin set (--node-mirrors) that get no node file, because their Service cannot be \
             used: nodes pull those upstreams directly",
            self.node_mirrors_unusable.clone(),
        );
        registry.register(
            "local_registry_publisher_loopback_addresses_unserved",
            "Published addresses on a node's loopback at the registry's nodePort that kube-proxy's mode does not serve \
             there, per reader: tools on a node's machine (host), or the node's container runtime where no node agent \
             file maps them",
            self.loopback_unserved.clone(),
        );
        registry.register(
            "local_registry_publisher_loopback_addresses_at_risk",
            "Published addresses on a node's loopback at the registry's nodePort that kube-proxy serves only because \
             it runs its default mode, iptables, and stops serving once its default is nftables (Kubernetes 1.40, \
             KEP-5343), per reader as local_registry_publisher_loopback_addresses_unserved",
            self.loopback_at_risk.clone(),
        );
        registry.register_collector(Box::new(ProcessCollector::start()));
        registry
    }

    /// Encodes every metric in the Prometheus text format.
    pub fn encode(registry: &MetricsRegistry) -> String {
        let mut text = String::new();
        if prometheus_client::encoding::text::encode(&mut text, registry).is_err() {
            text.clear();
        }
        text
    }

    /// A pass of `controller` ended, well or not.
    /// A task started: its bounded series at 0 from the start (its passes by result, its errors by `reasons`, its
    /// pass time and watches, and `writes`, the operations it counts in its own families), so a scrape, `rate()`
    /// and an alert see each before it first moves.
    pub fn task_started(&self, controller: &'static str, reasons: &[&'static str], writes: TaskWrites) {
        for result in ["success", "error"] {
            self.reconciles.get_or_create(&ResultLabels { controller, result }).inc_by(0);
        }
        for &reason in reasons {
            self.errors.get_or_create(&ErrorLabels { controller, reason }).inc_by(0);
        }
        let _ = self.reconcile_time.get_or_create(&ControllerLabels { controller });
        let _ = self.watches.get_or_create(&ControllerLabels { controller });
        match writes {
            TaskWrites::None => {}
            TaskWrites::ConfigMap => {
                for operation in ["apply", "delete"] {
                    self.writes.get_or_create(&OperationLabels { operation }).inc_by(0);
                }
            }
            TaskWrites::PullSecrets => {
                for operation in ["apply", "delete", "patch-serviceaccount"] {
                    self.pull_writes.get_or_create(&OperationLabels { operation }).inc_by(0);
                    self.pull_refusals.get_or_create(&OperationLabels { operation }).inc_by(0);
                }
            }
            TaskWrites::LoopbackReaders => {
                for reader in crate::kube_proxy::Reader::ALL {
                    let _ = self.loopback_unserved.get_or_create(&ReaderLabels { reader: reader.as_str() });
                    let _ = self.loopback_at_risk.get_or_create(&ReaderLabels { reader: reader.as_str() });
                }
            }
        }
    }

    /// A watch of `resource` exists: its restarts count from 0.
    pub fn watch_started(&self, resource: &str) {
        self.watch_restarts.get_or_create(&ResourceLabels { resource: resource.to_string() }).inc_by(0);
    }

    pub fn reconciled(&self, controller: &'static str, success: bool, took: Duration) {
        let result = if success { "success" } else { "error" };
        self.reconciles.get_or_create(&ResultLabels { controller, result }).inc();
        self.reconcile_time.get_or_create(&ControllerLabels { controller }).observe(took.as_secs_f64());
    }

    pub fn reacted(&self, took: Duration) {
        self.reaction_time.observe(took.as_secs_f64());
    }

    pub fn reconcile_failed(&self, controller: &'static str, reason: &'static str) {
        self.errors.get_or_create(&ErrorLabels { controller, reason }).inc();
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

    pub fn wrote(&self, operation: &'static str) {
        self.writes.get_or_create(&OperationLabels { operation }).inc();
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        self.last_publish.set(now.as_secs_f64());
    }

    /// A pull Secret or ServiceAccount write (`apply`, `delete`, `patch-serviceaccount`), done or refused.
    pub fn pull_wrote(&self, operation: &'static str, done: bool) {
        let family = if done { &self.pull_writes } else { &self.pull_refusals };
        family.get_or_create(&OperationLabels { operation }).inc();
    }

    pub fn node_addresses_refused(&self, count: usize) {
        self.node_refused.set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    pub fn node_mirrors_unusable(&self, count: usize) {
        self.node_mirrors_unusable.set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// How many published loopback addresses kube-proxy does not serve, per reader (`tools`, `runtime`).
    pub fn loopback_unserved(&self, counts: impl IntoIterator<Item = (&'static str, usize)>) {
        for (reader, count) in counts {
            let value = i64::try_from(count).unwrap_or(i64::MAX);
            self.loopback_unserved.get_or_create(&ReaderLabels { reader }).set(value);
        }
    }

    /// How many published loopback addresses kube-proxy stops serving when its default becomes nftables.
    pub fn loopback_at_risk(&self, counts: impl IntoIterator<Item = (&'static str, usize)>) {
        for (reader, count) in counts {
            let value = i64::try_from(count).unwrap_or(i64::MAX);
            self.loopback_at_risk.get_or_create(&ReaderLabels { reader }).set(value);
        }
    }

    pub fn conflict(&self) {
        self.conflicts.inc();
    }

    pub fn lease_capped(&self) {
        self.lease_capped.inc();
    }

    pub fn leading(&self, leader: bool) {
        self.leader.get_or_create(&NameLabels { name: MANAGER }).set(i64::from(leader));
    }

    pub fn watching(&self, controller: &'static str, watches: usize) {
        self.watches.get_or_create(&ControllerLabels { controller }).set(i64::try_from(watches).unwrap_or(i64::MAX));
    }

    pub fn watch_restarted(&self, resource: &str) {
        self.watch_restarts.get_or_create(&ResourceLabels { resource: resource.to_string() }).inc();
    }
}

/// The standard process metrics, read from /proc on each scrape.
#[derive(Debug)]
pub(crate) struct ProcessCollector {
    start_time: f64,
}

impl ProcessCollector {
    pub(crate) fn start() -> Self {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        Self { start_time: now.as_secs_f64() }
    }
}

/// Clock ticks per second as Linux reports CPU times in /proc; 100 on every mainstream architecture.
const CLOCK_TICKS: f64 = 100.0;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let resident_kib: i64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0);
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        // Fields after the command name (which may hold spaces): utime and stime are the 12th and 13th.
        let after_name: Vec<&str> =
            stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
        let ticks = |i: usize| after_name.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        let cpu_seconds = (ticks(11) + ticks(12)) / CLOCK_TICKS;
        let open_fds = std::fs::read_dir("/proc/self/fd").map(|d| d.count() as i64).unwrap_or(0);

        let gauge = |encoder: &mut DescriptorEncoder, name, help, unit: Option<&Unit>, value: f64| {
            let metric = ConstGauge::new(value);
            metric.encode(encoder.encode_descriptor(name, help, unit, metric.metric_type())?)
        };
        gauge(
            &mut encoder,
            "process_resident_memory",
            "Resident memory size",
            Some(&Unit::Bytes),
            (resident_kib * 1024) as f64,
        )?;
        gauge(&mut encoder, "process_open_fds", "Number of open file descriptors", None, open_fds as f64)?;
        gauge(
            &mut encoder,
            "process_start_time",
            "Start time of the process since the Unix epoch",
            Some(&Unit::Seconds),
            self.start_time,
        )?;
        let cpu = ConstCounter::new(cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu",
            "Total user and system CPU time spent",
            Some(&Unit::Seconds),
            cpu.metric_type(),
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_started_task_exports_each_bounded_series_at_zero_before_it_first_moves() {
        let metrics = Metrics::default();
        metrics.task_started("publisher", &["read", "apply"], TaskWrites::ConfigMap);
        metrics.task_started("pull-secrets", &["apply"], TaskWrites::PullSecrets);
        metrics.task_started("kube-proxy", &[], TaskWrites::LoopbackReaders);
        metrics.task_started("node-plan", &[], TaskWrites::None);
        metrics.watch_started("Service");
        let text = Metrics::encode(&metrics.registry());
        for line in [
            "controller_runtime_reconcile_total{controller=\"publisher\",result=\"error\"} 0",
            "controller_runtime_reconcile_errors_total{controller=\"publisher\",reason=\"apply\"} 0",
            "controller_runtime_reconcile_time_seconds_count{controller=\"node-plan\"} 0",
            "local_registry_publisher_watches{controller=\"kube-proxy\"} 0",
            "local_registry_publisher_configmap_writes_total{operation=\"delete\"} 0",
            "local_registry_publisher_pull_secret_writes_total{operation=\"patch-serviceaccount\"} 0",
            "local_registry_publisher_pull_secret_refusals_total{operation=\"apply\"} 0",
            "local_registry_publisher_loopback_addresses_unserved{reader=\"runtime\"} 0",
            "local_registry_publisher_watch_restarts_total{resource=\"Service\"} 0",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        // A task counts only its own families' operations.
        assert!(!text.contains("reason=\"delete\""), "{text}");
        // Starting again keeps what was counted.
        metrics.reconciled("publisher", true, Duration::from_millis(1));
        metrics.task_started("publisher", &["read"], TaskWrites::ConfigMap);
        let text = Metrics::encode(&metrics.registry());
        assert!(text.contains("controller_runtime_reconcile_total{controller=\"publisher\",result=\"success\"} 1"));
    }
}
