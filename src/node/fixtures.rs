//! Fixtures of the node concern, for its tests and for those of the agent and doctor that read a node plan.

use super::{HostEntry, NodePlan, NodePlanTarget, Rules};

/// The endpoint fixtures map addresses to: a registry Service's ClusterIP over plain HTTP.
pub const CLUSTER_IP_ENDPOINT: &str = "http://10.96.0.12:5000";

/// `address` mapped to [`CLUSTER_IP_ENDPOINT`], no CA, no fallback.
pub fn entry(address: &str) -> HostEntry {
    HostEntry::plain(address, CLUSTER_IP_ENDPOINT)
}

/// A plan of one [`entry`] per address.
pub fn plan(addresses: &[&str]) -> NodePlan {
    NodePlan { hosts: addresses.iter().map(|a| entry(a)).collect(), ..NodePlan::default() }
}

/// The node plan's ConfigMap `lrp/lrp-node-plan`, with no rule of the admin's.
pub fn plan_target() -> NodePlanTarget {
    NodePlanTarget { namespace: "lrp".into(), name: "lrp-node-plan".into(), rules: Rules::default() }
}
