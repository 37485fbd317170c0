//! The node agent's own /metrics: what its node's hosts directory holds of the plan after the last pass, what it
//! changed, and when it last looked.

use std::sync::atomic::AtomicU64;
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry as MetricsRegistry, Unit};

use super::runtime::Report;
use super::state::{Derived, counts};
use crate::metrics::{OperationLabels, ProcessCollector};
use crate::node::api::state::{ConfigPathCheck, Verdict};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

/// Cheap to clone (shared handles).
#[derive(Clone, Debug, Default)]
pub struct AgentMetrics {
    addresses: Family<StateLabels, Gauge>,
    files: Family<OperationLabels, Counter>,
    last_sync: Gauge<f64, AtomicU64>,
    watch_restarts: Counter,
    runtime: Family<StateLabels, Gauge>,
    /// The loopback relay's own series.
    pub relay: super::relay::RelayMetrics,
}

impl AgentMetrics {
    /// A registry holding these metrics, every bounded series started, and the process collector.
    pub fn registry(&self) -> MetricsRegistry {
        let mut registry = MetricsRegistry::default();
        registry.register(
            "local_registry_publisher_node_addresses",
            "Planned addresses on this node after the last pass, by state, as its NodePullState says: configured \
             (the agent's file is there and containerd reads it), unread (the agent's file is there, but containerd \
             reads another directory), foreign (someone else's file is there, left alone), failed (could not be \
             written)",
            self.addresses.clone(),
        );
        registry.register(
            "local_registry_publisher_node_files",
            "node files (hosts.toml or drop-in, each with its CA file, if any) the agent wrote or removed, by operation",
            self.files.clone(),
        );
        registry.register_with_unit(
            "local_registry_publisher_node_last_sync_timestamp",
            "Unix time of the last pass over the hosts directory",
            Unit::Seconds,
            self.last_sync.clone(),
        );
        registry.register(
            "local_registry_publisher_node_plan_watch_restarts",
            "Failures of the node plan's watch that were retried with backoff",
            self.watch_restarts.clone(),
        );
        registry.register(
            "local_registry_publisher_node_runtime_config",
            "1 for what containerd's config file says of the hosts directory: reads (its config_path names it), \
             elsewhere (containerd reads another directory or none: the agent's files go unread), unknown (the \
             file could not be read or understood), unchecked (nodeAgent.runtimeConfig is empty)",
            self.runtime.clone(),
        );
        self.relay.register(&mut registry);
        registry.register_collector(Box::new(ProcessCollector::start()));
        self.start_at_zero();
        registry
    }

    /// Every bounded series from the start (at 0 unless a pass set it), so a scrape, `rate()` and an alert see each
    /// before it first moves.
    fn start_at_zero(&self) {
        for operation in ["write", "remove"] {
            self.files.get_or_create(&OperationLabels { operation }).inc_by(0);
        }
        for verdict in Verdict::ALL {
            let _ = self.addresses.get_or_create(&StateLabels { state: verdict.as_str() });
        }
        for state in ConfigPathCheck::ALL {
            let _ = self.runtime.get_or_create(&StateLabels { state: state.as_str() });
        }
    }

    /// What a pass wrote and removed.
    pub fn files_changed(&self, report: &Report) {
        self.files.get_or_create(&OperationLabels { operation: "write" }).inc_by(report.written.len() as u64);
        self.files.get_or_create(&OperationLabels { operation: "remove" }).inc_by(report.removed.len() as u64);
    }

    /// The node's state after a pass: the same value its NodePullState and Event are made from.
    pub fn observed(&self, derived: &Derived) {
        let (by_verdict, check) = counts(derived);
        for (verdict, count) in by_verdict {
            let state = verdict.as_str();
            self.addresses.get_or_create(&StateLabels { state }).set(i64::try_from(count).unwrap_or(i64::MAX));
        }
        for state in ConfigPathCheck::ALL {
            self.runtime.get_or_create(&StateLabels { state: state.as_str() }).set(i64::from(state == check));
        }
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        self.last_sync.set(now.as_secs_f64());
    }

    pub fn watch_restarted(&self) {
        self.watch_restarts.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::runtime::Reading;
    use crate::node::{HostEntry, NodePlan};

    fn found<'a>(report: &'a Report, runtime: &'a Reading) -> super::super::state::Found<'a> {
        super::super::state::Found { report, runtime, too_new: None, pending: None, relays: None, runtime_files: true }
    }

    #[test]
    fn a_pass_is_counted_by_state_and_operation_from_the_nodes_state() {
        let metrics = AgentMetrics::default();
        let entry = |address: &str| HostEntry::plain(address, "http://10.0.0.1:5000");
        let plan = NodePlan { hosts: vec![entry("a:1"), entry("b:1"), entry("c:1")], ..NodePlan::default() };
        let report = Report {
            written: vec!["a:1".into()],
            removed: vec!["old:1".into()],
            foreign: vec!["b:1".into()],
            failed: vec![("c:1".into(), "read-only".into())],
        };
        let reads = Reading { check: ConfigPathCheck::Reads, ..Reading::UNCHECKED };
        metrics.files_changed(&report);
        metrics.observed(&super::super::state::derive(&plan, found(&report, &reads)));
        let text = crate::metrics::Metrics::encode(&metrics.registry());
        for line in [
            "local_registry_publisher_node_addresses{state=\"configured\"} 1",
            "local_registry_publisher_node_addresses{state=\"unread\"} 0",
            "local_registry_publisher_node_addresses{state=\"foreign\"} 1",
            "local_registry_publisher_node_addresses{state=\"failed\"} 1",
            "local_registry_publisher_node_files_total{operation=\"write\"} 1",
            "local_registry_publisher_node_files_total{operation=\"remove\"} 1",
            "local_registry_publisher_node_runtime_config{state=\"reads\"} 1",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        assert!(text.contains("local_registry_publisher_node_last_sync_timestamp_seconds "), "{text}");

        // containerd reading elsewhere: no address counts as configured, as the node's state says.
        let elsewhere = Reading { check: ConfigPathCheck::Elsewhere, ..Reading::UNCHECKED };
        metrics.observed(&super::super::state::derive(&plan, found(&Report::default(), &elsewhere)));
        let text = crate::metrics::Metrics::encode(&metrics.registry());
        assert!(text.contains("local_registry_publisher_node_addresses{state=\"configured\"} 0"), "{text}");
        assert!(text.contains("local_registry_publisher_node_addresses{state=\"unread\"} 3"), "{text}");
        assert!(text.contains("local_registry_publisher_node_runtime_config{state=\"elsewhere\"} 1"), "{text}");
        assert!(text.contains("local_registry_publisher_node_runtime_config{state=\"reads\"} 0"), "{text}");
    }

    #[test]
    fn every_bounded_series_is_exported_at_zero_before_the_first_pass() {
        let text = crate::metrics::Metrics::encode(&AgentMetrics::default().registry());
        for line in [
            "local_registry_publisher_node_addresses{state=\"failed\"} 0",
            "local_registry_publisher_node_files_total{operation=\"remove\"} 0",
            "local_registry_publisher_node_runtime_config{state=\"unchecked\"} 0",
            "local_registry_publisher_node_plan_watch_restarts_total 0",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }
}
