//! What the pull-Secret task counts of its own: its writes and the API server's refusals, by operation.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use crate::metrics::OperationLabels;

/// Every operation the task writes with.
const OPERATIONS: [&str; 3] = ["apply", "delete", "patch-serviceaccount"];

/// The pull-Secret task's own metrics; cheap to clone (shared handles).
#[derive(Clone, Debug, Default)]
pub struct PullMetrics {
    writes: Family<OperationLabels, Counter>,
    refusals: Family<OperationLabels, Counter>,
}

impl PullMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "local_registry_publisher_pull_secret_writes",
            "Writes of pull Secrets and ServiceAccounts (--pull-secrets), by operation",
            self.writes.clone(),
        );
        registry.register(
            "local_registry_publisher_pull_secret_refusals",
            "Pull Secret and ServiceAccount writes the API server refused, by operation",
            self.refusals.clone(),
        );
    }

    /// The task started: each operation's writes and refusals at 0.
    pub fn started(&self) {
        for operation in OPERATIONS {
            self.writes.get_or_create(&OperationLabels { operation }).inc_by(0);
            self.refusals.get_or_create(&OperationLabels { operation }).inc_by(0);
        }
    }

    /// A pull Secret or ServiceAccount write (`apply`, `delete`, `patch-serviceaccount`), done or refused.
    pub fn wrote(&self, operation: &'static str, done: bool) {
        let family = if done { &self.writes } else { &self.refusals };
        family.get_or_create(&OperationLabels { operation }).inc();
    }
}
