use super::*;
use std::sync::Arc;

use crate::keys::service as annotations;
use crate::keys::service::CA_BUNDLE;
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
    assert_eq!(plan(None, None), NodePlan::default());
}

#[test]
fn the_cluster_network_address_goes_to_the_cluster_ip_and_loopback_at_the_node_port_needs_nothing() {
    let nodeport =
        service("registry", "registry").type_("NodePort").cluster_ip("10.96.0.12").port(None, 5000, Some(30500));
    let by_ip = published(nodeport);
    assert_eq!(by_ip.document.host.as_deref(), Some("localhost:30500"));
    // containerd dials every address but loopback over HTTPS, the ClusterIP too.
    assert_eq!(by_ip.document.host_from_cluster_network.as_deref(), Some("10.96.0.12:5000"));
    assert_eq!(entries(&plan(Some(&by_ip), None)), [("10.96.0.12:5000", "http://10.96.0.12:5000")]);
    // A name given by annotation is mapped the same way.
    let named = service("registry", "registry")
        .cluster_ip("10.96.0.12")
        .port(None, 5000, None)
        .annotation(annotations::HOST_FROM_CLUSTER_NETWORK, "registry.registry.svc.cluster.local:5000");
    assert_eq!(
        entries(&plan(Some(&published(named)), None)),
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
    assert_eq!(plan(Some(&published), None), NodePlan::default());
}

const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

#[test]
fn a_registry_that_serves_tls_with_its_ca_bundle_is_reached_over_https_at_every_address_with_that_ca() {
    let tls = service("registry", "registry")
        .type_("NodePort")
        .cluster_ip("10.96.0.12")
        .port_protocol(5000, "https")
        .annotation(CA_BUNDLE, "configmap/registry-ca");
    let mut published = published(tls);
    published.ports.node = Some(30500);
    published.document.host = Some("localhost:30500".into());
    let planned = plan(Some(&published), Some(CA));
    // Loopback too: containerd trusts the registry's certificate only with its CA, wherever it dials.
    assert_eq!(
        entries(&planned),
        [
            ("localhost:30500", "https://10.96.0.12:5000"),
            ("registry.registry.svc.cluster.local:5000", "https://10.96.0.12:5000"),
        ]
    );
    assert!(planned.hosts.iter().all(|entry| entry.ca.as_deref() == Some(CA)));
    assert_eq!(NodePlan::from_json(&planned.to_json()).expect("reads back"), planned);
    // A plain-HTTP registry's plan has no CA whatever it names.
    let plain = published_with(CA_BUNDLE, "configmap/registry-ca", false);
    assert!(plan(Some(&plain), Some(CA)).hosts.iter().all(|entry| entry.ca.is_none()));
}

fn published_with(key: &str, value: &str, tls: bool) -> Published {
    let service = service("registry", "registry").cluster_ip("10.96.0.12").annotation(key, value);
    published(if tls { service.port_protocol(5000, "https") } else { service.port(None, 5000, None) })
}

/// What a settled watch of the CA bundle's object found.
fn observed(source: &CaSource, found: Result<Option<Option<&str>>, &str>) -> Observed {
    let found = found.map(|object| object.map(|ca| Arc::new(CaBundle(ca.map(String::from)))).into_iter().collect());
    let found = found.map_err(String::from);
    let mut observed = Observed::default();
    match source {
        CaSource::ConfigMap(key) => observed.ca_configmaps.insert(key.clone(), found),
        CaSource::Secret(key) => observed.ca_secrets.insert(key.clone(), found),
    };
    observed
}

#[test]
fn the_ca_bundle_is_read_from_the_object_the_annotation_names_and_each_fault_says_what_to_fix() {
    let tls = published_with(CA_BUNDLE, "secret/registry-tls", true);
    let source = ca_source(&tls).expect("named").expect("valid");
    assert_eq!(source, CaSource::Secret(WatchKey::in_namespace("registry").named("registry-tls")));
    assert_eq!(interest(Some(&tls)).ca_secrets.len(), 1);
    assert!(interest(Some(&tls)).ca_configmaps.is_empty());
    assert_eq!(ca_bundle(&tls, &observed(&source, Ok(Some(Some(CA))))), Ok(Some(CA.to_string())));
    let fault = |found| ca_bundle(&tls, &observed(&source, found)).expect_err("a fault");
    assert_eq!(fault(Ok(None)), "secret/registry-tls does not exist in namespace registry");
    assert_eq!(fault(Ok(Some(None))), "secret/registry-tls in namespace registry has no ca.crt");
    assert!(fault(Ok(Some(Some("not a certificate")))).ends_with("its ca.crt holds no PEM certificate"));
    assert!(fault(Err("forbidden")).contains("cannot be read (forbidden): the chart lets"));

    let configmap = published_with(CA_BUNDLE, "configmap/registry-ca", true);
    assert_eq!(
        ca_source(&configmap),
        Some(Ok(CaSource::ConfigMap(WatchKey::in_namespace("registry").named("registry-ca"))))
    );
    for bad in ["registry-ca", "configmap/", "pod/registry-ca", "secret/Registry_CA", "secret/a/b"] {
        let named = published_with(CA_BUNDLE, bad, true);
        let why = ca_source(&named).expect("named").expect_err(bad);
        assert!(why.contains("must be configmap/<name> or secret/<name>"), "{bad}: {why}");
        assert_eq!(interest(Some(&named)), Interest::default(), "{bad}");
        assert_eq!(ca_bundle(&named, &Observed::default()), Err(why));
    }
    // Plain HTTP, or no annotation: no CA, nothing watched.
    let plain = published_with(CA_BUNDLE, "configmap/registry-ca", false);
    assert_eq!(interest(Some(&plain)), Interest::default());
    assert_eq!(ca_bundle(&plain, &Observed::default()), Ok(None));
    let unnamed = published_with(annotations::PRIORITY, "1", true);
    assert_eq!(ca_bundle(&unnamed, &Observed::default()), Ok(None));
}

#[test]
fn a_kind_shaped_host_and_a_loopback_port_the_node_does_not_serve_are_mapped() {
    let kind = service("registry", "registry")
        .cluster_ip("10.96.0.12")
        .port(None, 5000, None)
        .annotation(annotations::HOST, "localhost:5001")
        .annotation(annotations::HOST_FROM_CONTAINER_RUNTIME, "kind-registry:5000");
    let plan = plan(Some(&published(kind)), None);
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
    let plan = plan(Some(&published(external)), None);
    assert_eq!(entries(&plan), [("registry.example:5000", "http://registry.example:5000")]);
}

#[test]
fn a_headless_registry_is_reached_on_the_node_loopback_at_its_node_port_else_not_at_all() {
    let headless = service("registry", "registry").cluster_ip("None").port(None, 5000, None);
    assert_eq!(plan(Some(&published(headless)), None), NodePlan::default());
    let mut with_node_port = published(service("registry", "registry").cluster_ip("None").port(None, 5000, None));
    with_node_port.ports.node = Some(30500);
    assert_eq!(
        entries(&plan(Some(&with_node_port), None)),
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
        entries(&plan(Some(&published(v6)), None)),
        [("registry.registry.svc.cluster.local:5000", "http://[fd00::c]:5000")]
    );
}

#[test]
fn the_plan_reads_back_as_written() {
    let published = published(service("registry", "registry").cluster_ip("10.96.0.12").port(None, 5000, None));
    let written = plan(Some(&published), None);
    assert_eq!(NodePlan::from_json(&written.to_json()).expect("reads back"), written);
}

#[test]
fn the_agent_tells_what_its_node_pulls_and_each_address_it_left_alone_or_could_not_write() {
    let regarding = ObjectReference { name: Some("agent-x".into()), ..ObjectReference::default() };
    let entry =
        |address: &str| HostEntry { address: address.into(), endpoint: "http://10.96.0.12:5000".into(), ca: None };
    let plan = NodePlan { hosts: vec![entry("a:5000"), entry("b:5000"), entry("c:5000")] };
    let report = files::Report {
        foreign: vec!["b:5000".into()],
        failed: vec![("c:5000".into(), "read-only file system".into())],
        ..files::Report::default()
    };
    let checked = RuntimeFinding { check: runtime::RuntimeCheck::Unchecked, said: None };
    let told: Vec<(Reason, String)> =
        notices(&plan, &report, &checked, &regarding).into_iter().map(|n| (n.reason, n.message)).collect();
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
    let nothing = notices(&NodePlan::default(), &files::Report::default(), &checked, &regarding);
    assert_eq!(nothing.len(), 1);
    assert_eq!(nothing[0].message, "no published address needs a hosts.toml on this node");
}

#[test]
fn a_node_whose_containerd_reads_another_directory_is_told_configured_for_nothing() {
    let regarding = ObjectReference { name: Some("agent-x".into()), ..ObjectReference::default() };
    let entry = HostEntry { address: "a:5000".into(), endpoint: "http://10.96.0.12:5000".into(), ca: None };
    let plan = NodePlan { hosts: vec![entry] };
    let written = files::Report { written: vec!["a:5000".into()], ..files::Report::default() };
    let check = runtime::RuntimeCheck::Elsewhere { config_path: Some("/srv/certs.d".into()) };
    let said = runtime::describe(&check, "/etc/containerd/config.toml", "/etc/containerd/certs.d");
    let elsewhere = RuntimeFinding { check, said: said.clone() };
    let told: Vec<(Reason, String)> =
        notices(&plan, &written, &elsewhere, &regarding).into_iter().map(|n| (n.reason, n.message)).collect();
    assert_eq!(told[0].0, Reason::HostsConfigured);
    assert!(!told[0].1.contains(" via "), "nothing is configured: {}", told[0].1);
    assert_eq!(told[1], (Reason::ConfigPathMismatch, said.unwrap_or_default()));
    assert!(Reason::ConfigPathMismatch.warning());
    // containerd 2.2's default directory: configured, with the caveat in words.
    let check = runtime::RuntimeCheck::Reads { config_path: None };
    let said = runtime::describe(&check, "/etc/containerd/config.toml", "/etc/containerd/certs.d");
    let default = RuntimeFinding { check, said };
    let told = notices(&plan, &written, &default, &regarding);
    assert_eq!(told.len(), 1);
    assert!(told[0].message.starts_with("this node's containerd pulls a:5000 via http://10.96.0.12:5000 ("));
    assert!(told[0].message.contains("containerd 2.2 and later"), "{}", told[0].message);
}

#[test]
fn the_decision_is_the_plan_with_the_ca_found_or_no_entry_and_the_reason() {
    let tls = published_with(CA_BUNDLE, "configmap/registry-ca", true);
    let source = ca_source(&tls).expect("named").expect("valid");
    let (planned, problem) = decide(Some(&tls), &observed(&source, Ok(Some(Some(CA)))));
    assert_eq!(problem, None);
    assert!(!planned.hosts.is_empty() && planned.hosts.iter().all(|entry| entry.ca.as_deref() == Some(CA)));
    let (planned, problem) = decide(Some(&tls), &observed(&source, Ok(None)));
    assert_eq!(planned, NodePlan::default());
    assert_eq!(problem.as_deref(), Some("configmap/registry-ca does not exist in namespace registry"));
    assert_eq!(decide(None, &Observed::default()), (NodePlan::default(), None));
}
