use super::*;
use std::sync::Arc;

use super::fixtures::published;
use crate::keys::service as annotations;
use crate::keys::service::CA_BUNDLE;
use crate::registry::fixtures::service;

/// The plan with no address allowed besides the registry's own.
fn planned(published: Option<&Published>, ca: Option<&str>) -> NodePlan {
    plan(published, ca, &[]).0
}

fn allowing(patterns: &[&str]) -> Vec<AddressPattern> {
    patterns.iter().map(|p| p.parse().expect("a pattern")).collect()
}

fn entries(plan: &NodePlan) -> Vec<(&str, &str)> {
    plan.hosts.iter().map(|entry| (entry.address.as_str(), entry.endpoint.as_str())).collect()
}

#[test]
fn nothing_published_plans_nothing() {
    assert_eq!(plan(None, None, &allowing(&["docker.io"])), Default::default());
}

#[test]
fn the_cluster_network_address_and_loopback_at_the_node_port_go_to_the_cluster_ip() {
    let nodeport =
        service("registry", "registry").type_("NodePort").cluster_ip("10.96.0.12").port(None, 5000, Some(30500));
    let by_ip = published(nodeport);
    assert_eq!(by_ip.document.host.as_deref(), Some("localhost:30500"));
    // containerd dials every address but loopback over HTTPS, the ClusterIP too.
    assert_eq!(by_ip.document.host_from_cluster_network.as_deref(), Some("10.96.0.12:5000"));
    // kube-proxy's nftables mode serves no NodePort on the node's loopback; every mode serves the ClusterIP.
    assert_eq!(
        entries(&planned(Some(&by_ip), None)),
        [("10.96.0.12:5000", "http://10.96.0.12:5000"), ("localhost:30500", "http://10.96.0.12:5000")]
    );
    for loopback in ["127.0.0.1:30500", "[::1]:30500"] {
        let mut at = by_ip.clone();
        at.document.host = Some(loopback.into());
        assert!(entries(&planned(Some(&at), None)).contains(&(loopback, "http://10.96.0.12:5000")), "{loopback}");
    }
    // A name given by annotation is mapped the same way.
    let named = service("registry", "registry")
        .cluster_ip("10.96.0.12")
        .port(None, 5000, None)
        .annotation(annotations::HOST_FROM_CLUSTER_NETWORK, "registry.registry.svc.cluster.local:5000");
    assert_eq!(
        entries(&planned(Some(&published(named)), None)),
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
    assert_eq!(planned(Some(&published), None), NodePlan::default());
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
    published.own_addresses.push("localhost:30500".into());
    let with_ca = planned(Some(&published), Some(CA));
    // Loopback too: containerd trusts the registry's certificate only with its CA, wherever it dials.
    assert_eq!(
        entries(&with_ca),
        [
            ("localhost:30500", "https://10.96.0.12:5000"),
            ("registry.registry.svc.cluster.local:5000", "https://10.96.0.12:5000"),
        ]
    );
    assert!(with_ca.hosts.iter().all(|entry| entry.ca.as_deref() == Some(CA)));
    assert_eq!(NodePlan::from_json(&with_ca.to_json()).expect("reads back"), with_ca);
    // A plain-HTTP registry's plan has no CA whatever it names.
    let plain = published_with(CA_BUNDLE, "configmap/registry-ca", false);
    assert!(planned(Some(&plain), Some(CA)).hosts.iter().all(|entry| entry.ca.is_none()));
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
    assert_eq!(interest(Some(&tls), &Rules::default()).ca_secrets.len(), 1);
    assert!(interest(Some(&tls), &Rules::default()).ca_configmaps.is_empty());
    assert_eq!(ca_bundle(&tls, &observed(&source, Ok(Some(Some(CA))))), Ok(Some(CA.to_string())));
    let fault = |found| ca_bundle(&tls, &observed(&source, found)).expect_err("a fault").to_string();
    assert_eq!(fault(Ok(None)), "secret/registry-tls does not exist in namespace registry");
    assert_eq!(fault(Ok(Some(None))), "secret/registry-tls in namespace registry has no ca.crt");
    assert!(fault(Ok(Some(Some("not a certificate")))).ends_with("its ca.crt holds no PEM certificate"));
    assert!(fault(Err("forbidden")).contains("cannot be read (forbidden): the chart lets"));
    // Too large for the plan: refused for this registry, whose files the plan then leaves out, and the admin's
    // mirrors are planned as ever.
    // A bundle of many CAs (Mozilla's is about 220 KiB; a company's few dozen KiB) up to 64 KiB is taken.
    let many = format!("{CA}{}", "#".repeat(60 * 1024));
    assert_eq!(ca_bundle(&tls, &observed(&source, Ok(Some(Some(many.as_str()))))), Ok(Some(many.clone())));
    let exact = format!("{CA}{}", "#".repeat(CA_LIMIT - CA.len()));
    assert_eq!(
        ca_bundle(&tls, &observed(&source, Ok(Some(Some(exact.as_str()))))),
        Ok(Some(exact.clone())),
        "at the limit"
    );
    let huge = format!("{CA}{}", "#".repeat(CA_LIMIT));
    assert!(fault(Ok(Some(Some(huge.as_str())))).contains(&format!("more than the {CA_LIMIT} the node plan takes")));
    let rules =
        Rules { mirrors: vec!["docker.io=http://cache.example:5000".parse().expect("a mirror")], ..Rules::default() };
    let decision = decide(Some(&tls), &observed(&source, Ok(Some(Some(huge.as_str())))), &rules);
    assert!(matches!(decision.ca_problem, Some(CaProblem::TooLarge(_, bytes)) if bytes == huge.len()));
    assert_eq!(entries(&decision.plan), [("docker.io", "http://cache.example:5000")]);

    let configmap = published_with(CA_BUNDLE, "configmap/registry-ca", true);
    assert_eq!(
        ca_source(&configmap),
        Some(Ok(CaSource::ConfigMap(WatchKey::in_namespace("registry").named("registry-ca"))))
    );
    for bad in ["registry-ca", "configmap/", "pod/registry-ca", "secret/Registry_CA", "secret/a/b"] {
        let named = published_with(CA_BUNDLE, bad, true);
        let why = ca_source(&named).expect("named").expect_err(bad);
        assert!(why.to_string().contains("must be configmap/<name> or secret/<name>"), "{bad}: {why}");
        assert_eq!(interest(Some(&named), &Rules::default()), Interest::default(), "{bad}");
        assert_eq!(ca_bundle(&named, &Observed::default()), Err(why));
    }
    // Plain HTTP, or no annotation: no CA, nothing watched.
    let plain = published_with(CA_BUNDLE, "configmap/registry-ca", false);
    assert_eq!(interest(Some(&plain), &Rules::default()), Interest::default());
    assert_eq!(ca_bundle(&plain, &Observed::default()), Ok(None));
    let unnamed = published_with(annotations::PRIORITY, "1", true);
    assert_eq!(ca_bundle(&unnamed, &Observed::default()), Ok(None));
}

#[test]
fn a_kind_shaped_host_and_a_loopback_port_the_node_does_not_serve_are_mapped_once_the_admin_allows_them() {
    let kind = service("registry", "registry")
        .cluster_ip("10.96.0.12")
        .port(None, 5000, None)
        .annotation(annotations::HOST, "localhost:5001")
        .annotation(annotations::HOST_FROM_CONTAINER_RUNTIME, "kind-registry:5000");
    let published = published(kind);
    let (alone, refused) = plan(Some(&published), None, &[]);
    assert_eq!(entries(&alone), [("10.96.0.12:5000", "http://10.96.0.12:5000")]);
    assert_eq!(
        refused,
        [("kind-registry:5000".to_string(), Refusal::NotAllowed), ("localhost:5001".to_string(), Refusal::NotAllowed)]
    );
    let (allowed, refused) = plan(Some(&published), None, &allowing(&["localhost:5001", "kind-registry"]));
    assert!(refused.is_empty(), "{refused:?}");
    assert_eq!(
        entries(&allowed),
        [
            ("10.96.0.12:5000", "http://10.96.0.12:5000"),
            ("kind-registry:5000", "http://10.96.0.12:5000"),
            ("localhost:5001", "http://10.96.0.12:5000"),
        ]
    );
}

#[test]
fn an_external_name_is_reached_at_its_target_only_when_the_admin_allows_it() {
    let external =
        service("registry", "registry").type_("ExternalName").external_name("Registry.Example.").port(None, 5000, None);
    let published = published(external);
    assert!(published.own_addresses.is_empty(), "{:?}", published.own_addresses);
    assert_eq!(planned(Some(&published), None), NodePlan::default());
    let (allowed, _) = plan(Some(&published), None, &allowing(&["registry.example:5000"]));
    assert_eq!(entries(&allowed), [("registry.example:5000", "http://registry.example:5000")]);
}

#[test]
fn a_namespace_naming_a_public_registry_redirects_no_node_and_is_told_why() {
    // What an `edit` user in an allowed namespace can write: every address field names a public registry.
    for field in crate::hosting::Field::ALL.into_iter().filter(|f| f.is_address()) {
        let hijack = service("team", "registry")
            .cluster_ip("10.96.0.12")
            .port(None, 5000, None)
            .annotation(field.annotation(), "registry.k8s.io");
        let published = published(hijack);
        assert_eq!(published.document.get(field), Some("registry.k8s.io"), "{field}");
        let (planned, refused) = plan(Some(&published), None, &[]);
        assert!(planned.hosts.iter().all(|entry| entry.address != "registry.k8s.io"), "{field}: {planned:?}");
        assert_eq!(refused, [("registry.k8s.io".to_string(), Refusal::NotAllowed)], "{field}");
        let decision = Decision { refused: refused.clone(), ..Decision::default() };
        let told = decision.notices(Some(&published.reference), &ObjectReference::default());
        assert_eq!(told.len(), 1, "{told:?}");
        let told = &told[0].message;
        assert!(
            told.contains(
                "registry.k8s.io is published but no node is configured to pull it: registry.k8s.io does not name this Service alone"
            ),
            "{told}"
        );
        assert!(told.contains("nodeAgent.allowedAddresses"), "{told}");
        // Allowed by the admin, it gets its file.
        let (planned, refused) = plan(Some(&published), None, &allowing(&["registry.k8s.io"]));
        assert!(refused.is_empty() && planned.hosts.iter().any(|entry| entry.address == "registry.k8s.io"));
    }
}

#[test]
fn a_services_own_addresses_are_its_cluster_ip_dns_names_and_node_ports() {
    let nodeport = service("team", "registry").type_("NodePort").cluster_ip("10.96.0.12").port(None, 5000, Some(30500));
    assert_eq!(
        published(nodeport).own_addresses,
        [
            "10.96.0.12:5000",
            "127.0.0.1:30500",
            "[::1]:30500",
            "localhost:30500",
            "registry.team.svc.cluster.local:5000",
            "registry.team.svc:5000",
        ]
    );
    // Annotations change what is published, never what is the Service's own.
    let annotated = service("team", "registry")
        .cluster_ip("10.96.0.12")
        .port(None, 5000, None)
        .annotation(annotations::HOST_FROM_CLUSTER_NETWORK, "docker.io");
    let own = published(annotated).own_addresses;
    assert!(own.contains(&"10.96.0.12:5000".to_string()) && !own.contains(&"docker.io".to_string()), "{own:?}");
}

#[test]
fn a_headless_registry_is_reached_on_the_node_loopback_at_its_node_port_else_not_at_all() {
    let headless = service("registry", "registry").cluster_ip("None").port(None, 5000, None);
    assert_eq!(planned(Some(&published(headless)), None), NodePlan::default());
    let mut with_node_port = published(service("registry", "registry").cluster_ip("None").port(None, 5000, None));
    with_node_port.ports.node = Some(30500);
    // Its loopback address is where the node reaches it: mapped to itself, it needs no file.
    with_node_port.document.host = Some("localhost:30500".into());
    with_node_port.own_addresses.push("localhost:30500".into());
    assert_eq!(
        entries(&planned(Some(&with_node_port), None)),
        [("registry.registry.svc.cluster.local:5000", "http://127.0.0.1:30500")]
    );
    // Loopback at another port, and the node's own address at the nodePort, are not where the node reaches it.
    for other in ["localhost:5001", "10.0.0.10:30500"] {
        let mut at = with_node_port.clone();
        at.document.host = Some(other.into());
        let (plan, _) = plan(Some(&at), None, &allowing(&[other]));
        assert!(entries(&plan).contains(&(other, "http://127.0.0.1:30500")), "{other}: {plan:?}");
    }
}

#[test]
fn an_ipv6_cluster_ip_is_bracketed_and_an_address_given_twice_is_planned_once() {
    let v6 = service("registry", "registry")
        .cluster_ip("fd00::c")
        .port(None, 5000, None)
        .annotation(annotations::HOST, "registry.registry.svc.cluster.local:5000");
    assert_eq!(
        entries(&planned(Some(&published(v6)), None)),
        [("registry.registry.svc.cluster.local:5000", "http://[fd00::c]:5000")]
    );
}

#[test]
fn the_plan_reads_back_as_written() {
    let published = published(service("registry", "registry").cluster_ip("10.96.0.12").port(None, 5000, None));
    let written = planned(Some(&published), None);
    assert_eq!(NodePlan::from_json(&written.to_json()).expect("reads back"), written);
}

#[test]
fn the_decision_is_the_plan_with_the_ca_found_or_no_entry_and_the_reason() {
    let tls = published_with(CA_BUNDLE, "configmap/registry-ca", true);
    let source = ca_source(&tls).expect("named").expect("valid");
    let found = decide(Some(&tls), &observed(&source, Ok(Some(Some(CA)))), &Rules::default());
    assert_eq!(found.ca_problem, None);
    assert!(!found.plan.hosts.is_empty() && found.plan.hosts.iter().all(|entry| entry.ca.as_deref() == Some(CA)));
    let missing = decide(Some(&tls), &observed(&source, Ok(None)), &Rules::default());
    assert_eq!(missing.plan, NodePlan::default());
    assert_eq!(missing.ca_problem, Some(CaProblem::Missing(source)));
    assert_eq!(decide(None, &Observed::default(), &Rules::default()), Decision::default());
}

#[test]
fn the_admins_mirrors_are_planned_with_or_without_a_registry_and_take_their_upstream_from_any_registry() {
    let rules = |allowed: &[&str]| Rules {
        allowed_addresses: allowing(allowed),
        mirrors: vec!["docker.io=service:cache/docker-hub:5000".parse().expect("a mirror")],
        relays: Vec::new(),
    };
    let cache = WatchKey::in_namespace("cache").named("docker-hub");
    assert_eq!(interest(None, &rules(&[])).mirror_services, [cache.clone()].into());
    let mut observed = Observed::default();
    let cache_service = mirror::MirrorService { cluster_ip: Some("10.96.0.50".into()), ports: vec![5000] };
    observed.mirror_services.insert(cache, Ok(vec![Arc::new(cache_service)]));

    // Nothing published: the mirror alone, in the format that holds a fallback.
    let alone = decide(None, &observed, &rules(&[]));
    assert_eq!(entries(&alone.plan), [("docker.io", "http://10.96.0.50:5000")]);
    assert_eq!(alone.plan.hosts[0].server.as_ref().map(Endpoint::as_str), Some("https://registry-1.docker.io"));
    assert_eq!(alone.plan.format, 2);
    assert_eq!(NodePlan::from_json(&alone.plan.to_json()).expect("reads back"), alone.plan);

    // A registry naming docker.io: refused as ever unless allowed; allowed, the mirror's file still wins.
    let hijack = published(
        service("registry", "zot")
            .cluster_ip("10.96.0.12")
            .port(None, 5000, None)
            .annotation(annotations::HOST, "docker.io"),
    );
    let refused = decide(Some(&hijack), &observed, &rules(&[]));
    assert!(refused.refused.contains(&("docker.io".to_string(), Refusal::NotAllowed)), "{:?}", refused.refused);
    let allowed = decide(Some(&hijack), &observed, &rules(&["docker.io"]));
    assert!(allowed.refused.contains(&("docker.io".to_string(), Refusal::Mirrored)), "{:?}", allowed.refused);
    let docker: Vec<&HostEntry> = allowed.plan.hosts.iter().filter(|e| e.address == "docker.io").collect();
    assert_eq!(docker.len(), 1);
    assert_eq!(docker[0].endpoint, "http://10.96.0.50:5000");
    let plan = ObjectReference { name: Some("node-plan".into()), ..ObjectReference::default() };
    let told = allowed.notices(Some(&hijack.reference), &plan);
    assert!(told.iter().any(|n| n.reason == Reason::AddressNotAllowed && n.message.contains("nodeAgent.mirrors")));
    // Without the registry or a fallback, plans stay in the first format an older agent reads.
    assert_eq!(decide(Some(&hijack), &Observed::default(), &rules(&["docker.io"])).plan.format, 1);
    let unusable = decide(None, &Observed::default(), &rules(&[]));
    let said: Vec<String> = unusable.mirror_problems.iter().map(ToString::to_string).collect();
    assert_eq!(said, ["the mirror of docker.io (Service cache/docker-hub port 5000): not read yet"]);
}

#[test]
fn each_problem_is_one_notice_worded_once_on_the_object_it_is_about() {
    let registry = ObjectReference { name: Some("zot".into()), ..ObjectReference::default() };
    let plan = ObjectReference { name: Some("node-plan".into()), ..ObjectReference::default() };
    let source = CaSource::Secret(WatchKey::in_namespace("registry").named("registry-tls"));
    let mirror: Mirror = "docker.io=service:cache/docker-hub:5000".parse().expect("a mirror");
    let decision = Decision {
        plan: NodePlan::default(),
        ca_problem: Some(CaProblem::Missing(source)),
        refused: vec![("quay.io".into(), Refusal::NotAllowed), ("ghcr.io".into(), Refusal::NotAllowed)],
        mirror_problems: vec![MirrorProblem { mirror, fault: mirror::MirrorFault::NoPort(5000) }],
        relay_problem: None,
    };
    let told = decision.notices(Some(&registry), &plan);
    let said: Vec<(Reason, &str, &str)> =
        told.iter().map(|n| (n.reason, n.regarding.name.as_deref().unwrap_or_default(), n.message.as_str())).collect();
    assert_eq!(said.len(), 3, "{said:?}");
    assert_eq!(
        said[0],
        (
            Reason::CaBundleUnusable,
            "zot",
            "its CA bundle cannot be used, so no node is configured to pull it: secret/registry-tls does not exist \
             in namespace registry"
        )
    );
    assert_eq!((said[1].0, said[1].1), (Reason::AddressNotAllowed, "zot"));
    assert!(said[1].2.starts_with("quay.io is published but no node is configured to pull it: quay.io does not name"));
    assert!(
        said[1].2.contains("; ghcr.io is published but no node is configured to pull it: ghcr.io "),
        "{}",
        said[1].2
    );
    assert_eq!(
        said[2],
        (
            Reason::MirrorUnusable,
            "node-plan",
            "each node pulls these upstreams directly: the mirror of docker.io (Service cache/docker-hub port 5000): \
             has no port 5000"
        )
    );
    // With no registry published, what is about it is not told (there is nothing to tell it on).
    let without: Vec<Reason> = decision.notices(None, &plan).iter().map(|n| n.reason).collect();
    assert_eq!(without, [Reason::MirrorUnusable]);
    assert_eq!(Decision::default().notices(Some(&registry), &plan), []);
}

#[test]
fn a_node_plan_error_names_the_configmap_it_was_about() {
    let target = NodePlanTarget {
        namespace: "local-registry-publisher".into(),
        name: "lrp-node-plan".into(),
        rules: Rules::default(),
        stamp: None,
    };
    // The controller's read and apply errors say this (and so its logs and Events).
    assert_eq!(target.to_string(), "ConfigMap local-registry-publisher/lrp-node-plan");
    // The Events about the plan (an unusable mirror) name the same object.
    let reference = target.reference();
    let named = [&reference.api_version, &reference.kind, &reference.namespace, &reference.name];
    let named: Vec<Option<&str>> = named.into_iter().map(Option::as_deref).collect();
    assert_eq!(named, [Some("v1"), Some("ConfigMap"), Some("local-registry-publisher"), Some("lrp-node-plan")]);
}

#[test]
fn the_controllers_node_reasons_are_the_words_its_events_carry() {
    let reasons =
        [Reason::CaBundleUnusable, Reason::AddressNotAllowed, Reason::MirrorUnusable, Reason::LoopbackNodePortUnserved];
    let words: Vec<&str> = reasons.map(Reason::as_str).to_vec();
    assert_eq!(words, ["CaBundleUnusable", "AddressNotAllowed", "MirrorUnusable", "LoopbackNodePortUnserved"]);
}
