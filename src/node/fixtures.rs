//! Fixtures of the node concern, for its tests and for those of the agent and doctor that read a node plan.

use super::{HostEntry, NodePlan, NodePlanTarget, Rules};
use crate::publish::Published;
use crate::registry::fixtures::{ServiceBuilder, allowed_registries};
use crate::registry::{Cluster, Registry};
use crate::settings::Settings;

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
    NodePlanTarget { namespace: "lrp".into(), name: "lrp-node-plan".into(), rules: Rules::default(), stamp: None }
}

/// What the publisher would hand on for this one registry Service.
pub fn published(service: ServiceBuilder) -> Published {
    published_with(service, &Settings::default())
}

/// What the publisher would hand on for this one registry Service, with `settings`.
pub fn published_with(service: ServiceBuilder, settings: &Settings) -> Published {
    let cluster = Cluster { labelled_services: vec![service.build()], ..Cluster::default() };
    let registries: Vec<Registry> = allowed_registries(&cluster, settings);
    let registry = &registries[0];
    let document = registry.document.as_ref().expect("publishable");
    Published::of(registry, document)
}
