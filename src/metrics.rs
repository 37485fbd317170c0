//! Prometheus metrics. Names follow controller-runtime's where one exists, so existing dashboards work.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry as MetricsRegistry, Unit};

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
struct ResourceLabels {
    resource: String,
}

/// A write's operation (`apply`, `delete`, ...), as every writer's counters label it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    pub operation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NameLabels {
    name: &'static str,
}

/// What every task of the controller exports alike (its passes, errors, pass time and watches), leader election's
/// and the process's; cheap to clone (shared handles). What a concern counts of its own is in its own module
/// (`crate::controller::ConcernMetrics`).
#[derive(Clone, Debug)]
pub struct Metrics {
    reconciles: Family<ResultLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    reconcile_time: Family<ControllerLabels, Histogram>,
    leader: Family<NameLabels, Gauge>,
    watch_restarts: Family<ResourceLabels, Counter>,
    watches: Family<ControllerLabels, Gauge>,
    lease_capped: Counter,
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
            leader: Family::default(),
            watch_restarts: Family::default(),
            watches: Family::default(),
            lease_capped: Counter::default(),
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
            "local_registry_publisher_lease_duration_capped",
            "Times a Lease claimed a longer duration than this replica's own and was honoured for this replica's only",
            self.lease_capped.clone(),
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

    /// A task started: its bounded series at 0 from the start (its passes by result, its errors by `reasons`, its
    /// pass time and watches), so a scrape, `rate()` and an alert see each before it first moves. A concern starts
    /// its own families' series likewise.
    pub fn task_started(&self, controller: &'static str, reasons: &[&'static str]) {
        for result in ["success", "error"] {
            self.reconciles.get_or_create(&ResultLabels { controller, result }).inc_by(0);
        }
        for &reason in reasons {
            self.errors.get_or_create(&ErrorLabels { controller, reason }).inc_by(0);
        }
        let _ = self.reconcile_time.get_or_create(&ControllerLabels { controller });
        let _ = self.watches.get_or_create(&ControllerLabels { controller });
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

    pub fn reconcile_failed(&self, controller: &'static str, reason: &'static str) {
        self.errors.get_or_create(&ErrorLabels { controller, reason }).inc();
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

/// A count as a gauge's value.
pub fn gauge_value(count: usize) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_started_task_exports_each_bounded_series_at_zero_before_it_first_moves() {
        let metrics = Metrics::default();
        metrics.task_started("publisher", &["read", "apply"]);
        metrics.task_started("node-plan", &[]);
        metrics.task_started("kube-proxy", &[]);
        metrics.watch_started("Service");
        let text = Metrics::encode(&metrics.registry());
        for line in [
            "controller_runtime_reconcile_total{controller=\"publisher\",result=\"error\"} 0",
            "controller_runtime_reconcile_errors_total{controller=\"publisher\",reason=\"apply\"} 0",
            "controller_runtime_reconcile_time_seconds_count{controller=\"node-plan\"} 0",
            "local_registry_publisher_watches{controller=\"kube-proxy\"} 0",
            "local_registry_publisher_watch_restarts_total{resource=\"Service\"} 0",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        // A task counts only its own reasons.
        assert!(!text.contains("reason=\"delete\""), "{text}");
        // Starting again keeps what was counted.
        metrics.reconciled("publisher", true, Duration::from_millis(1));
        metrics.task_started("publisher", &["read"]);
        let text = Metrics::encode(&metrics.registry());
        assert!(text.contains("controller_runtime_reconcile_total{controller=\"publisher\",result=\"success\"} 1"));
    }
}
