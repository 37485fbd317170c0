use super::*;
use crate::keys::service as annotations;
use crate::registry::fixtures::{ServiceBuilder, allowed_registries, service};
use crate::registry::{Cluster, Registry};
use crate::settings::Settings;
use k8s_openapi::api::core::v1::ObjectReference;

/// What the publisher would hand on for this one registry Service.
fn published(service: ServiceBuilder) -> Published {
    let cluster = Cluster { labelled_services: vec![service.build()], ..Cluster::default() };
    let registries: Vec<Registry> = allowed_registries(&cluster, &Settings::default());
    let registry = &registries[0];
    let document = registry.document.as_ref().expect("publishable");
    Published::of(registry, document)
}

fn entries(plan: &NodePlan) -> Vec<(&str, &str)> {
    plan.hosts.iter().map(|entry| (entry.address.as_str(), entry.endpoint.as_str())).collect()
}

#[test]
fn nothing_published_plans_nothing() {
    assert_eq!(plan(None), NodePlan::default());
}

#[test]
fn the_cluster_network_address_goes_to_the_cluster_ip_and_loopback_at_the_node_port_needs_nothing() {
    let nodeport =
        service("registry", "registry").type_("NodePort").cluster_ip("10.96.0.12").port(None, 5000, Some(30500));
    let by_ip = published(nodeport);
    assert_eq!(by_ip.document.host.as_deref(), Some("localhost:30500"));
    // containerd dials every address but loopback over HTTPS, the ClusterIP too.
    assert_eq!(by_ip.document.host_from_cluster_network.as_deref(), Some("10.96.0.12:5000"));
    assert_eq!(entries(&plan(Some(&by_ip))), [("10.96.0.12:5000", "http://10.96.0.12:5000")]);
    // A name given by annotation is mapped the same way.
    let named = service("registry", "registry")
        .cluster_ip("10.96.0.12")
        .port(None, 5000, None)
        .annotation(annotations::HOST_FROM_CLUSTER_NETWORK, "registry.registry.svc.cluster.local:5000");
    assert_eq!(
        entries(&plan(Some(&published(named)))),
        [("registry.registry.svc.cluster.local:5000", "http://10.96.0.12:5000")]
    );
}

#[test]
fn a_registry_that_serves_tls_gets_no_plain_http_endpoint() {
    let tls = service("registry", "registry").cluster_ip("10.96.0.12").port_protocol(5000, "https");
    let published = published(tls);
    assert_eq!(
        published.document.host_from_cluster_network.as_deref(),
        Some("registry.registry.svc.cluster.local:5000")
    );
    assert_eq!(plan(Some(&published)), NodePlan::default());
}

#[test]
fn a_kind_shaped_host_and_a_loopback_port_the_node_does_not_serve_are_mapped() {
    let kind = service("registry", "registry")
        .cluster_ip("10.96.0.12")
        .port(None, 5000, None)
        .annotation(annotations::HOST, "localhost:5001")
        .annotation(annotations::HOST_FROM_CONTAINER_RUNTIME, "kind-registry:5000");
    let plan = plan(Some(&published(kind)));
    assert_eq!(
        entries(&plan),
        [
            ("10.96.0.12:5000", "http://10.96.0.12:5000"),
            ("kind-registry:5000", "http://10.96.0.12:5000"),
            ("localhost:5001", "http://10.96.0.12:5000"),
        ]
    );
}

#[test]
fn an_external_name_is_reached_at_its_target() {
    let external =
        service("registry", "registry").type_("ExternalName").external_name("Registry.Example.").port(None, 5000, None);
    let plan = plan(Some(&published(external)));
    assert_eq!(entries(&plan), [("registry.example:5000", "http://registry.example:5000")]);
}

#[test]
fn a_headless_registry_is_reached_on_the_node_loopback_at_its_node_port_else_not_at_all() {
    let headless = service("registry", "registry").cluster_ip("None").port(None, 5000, None);
    assert_eq!(plan(Some(&published(headless))), NodePlan::default());
    let mut with_node_port = published(service("registry", "registry").cluster_ip("None").port(None, 5000, None));
    with_node_port.ports.node = Some(30500);
    assert_eq!(
        entries(&plan(Some(&with_node_port))),
        [("registry.registry.svc.cluster.local:5000", "http://127.0.0.1:30500")]
    );
}

#[test]
fn an_ipv6_cluster_ip_is_bracketed_and_an_address_given_twice_is_planned_once() {
    let v6 = service("registry", "registry")
        .cluster_ip("fd00::c")
        .port(None, 5000, None)
        .annotation(annotations::HOST, "registry.registry.svc.cluster.local:5000");
    assert_eq!(
        entries(&plan(Some(&published(v6)))),
        [("registry.registry.svc.cluster.local:5000", "http://[fd00::c]:5000")]
    );
}

#[test]
fn the_plan_reads_back_as_written() {
    let published = published(service("registry", "registry").cluster_ip("10.96.0.12").port(None, 5000, None));
    let written = plan(Some(&published));
    assert_eq!(NodePlan::from_json(&written.to_json()).expect("reads back"), written);
}

#[test]
fn the_agent_tells_what_its_node_pulls_and_each_address_it_left_alone_or_could_not_write() {
    let regarding = ObjectReference { name: Some("agent-x".into()), ..ObjectReference::default() };
    let entry = |address: &str| HostEntry { address: address.into(), endpoint: "http://10.96.0.12:5000".into() };
    let plan = NodePlan { hosts: vec![entry("a:5000"), entry("b:5000"), entry("c:5000")] };
    let report = files::Report {
        foreign: vec!["b:5000".into()],
        failed: vec![("c:5000".into(), "read-only file system".into())],
        ..files::Report::default()
    };
    let told: Vec<(Reason, String)> =
        notices(&plan, &report, &regarding).into_iter().map(|n| (n.reason, n.message)).collect();
    assert_eq!(
        told[0],
        (Reason::HostsConfigured, "this node's containerd pulls a:5000 via http://10.96.0.12:5000".into())
    );
    assert_eq!(told[1].0, Reason::ForeignHostsFile);
    assert!(told[1].1.starts_with("b:5000: a hosts.toml this agent did not write is there"), "{}", told[1].1);
    assert_eq!(told[2], (Reason::HostsFileFailed, "hosts.toml not written: c:5000: read-only file system".into()));
    assert!(
        !Reason::HostsConfigured.warning() && Reason::ForeignHostsFile.warning() && Reason::HostsFileFailed.warning()
    );
    let nothing = notices(&NodePlan::default(), &files::Report::default(), &regarding);
    assert_eq!(nothing.len(), 1);
    assert_eq!(nothing[0].message, "no published address needs a hosts.toml on this node");
}
