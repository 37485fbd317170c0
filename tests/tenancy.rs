//! Who may name the cluster's registry (the shared-cluster issue), against the real control plane: a tenant holding
//! only the built-in `edit` role in its own namespace tries the hijacks that used to work, as itself (impersonated).

mod support;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams, PostParams};
use local_registry_publisher::keys::namespace::{ALLOWED, ALLOWED_VALUE};
use serde_json::json;
use support::*;
use testbed::ControlPlane;

/// A client that acts as `system:serviceaccount:<ns>:tenant`, which holds `edit` in `ns` and nothing else.
async fn tenant(s: &Scenario, ns: &str) -> kube::Client {
    edit_only_client(&s.client, ControlPlane::shared().kubeconfig(), ns).await
}

fn allow() -> serde_json::Value {
    json!({"metadata": {"labels": {ALLOWED: ALLOWED_VALUE}}})
}

#[tokio::test]
async fn a_tenant_with_edit_in_its_namespace_cannot_change_what_the_cluster_publishes() {
    let mut s = Scenario::new("registry").await;
    s.settings.watch_namespaces = Vec::new(); // every namespace, as the chart installs it
    let _run = s.start();
    let namespaces: Api<Namespace> = Api::all(s.client.clone());

    // The real registry is published once a cluster admin allows its namespace, and not before.
    let real = service("real", registry_label(), json!({}), json!({"ports": [{"name": "registry", "port": 5000}]}));
    s.apply(real).await;
    let note = s.wait_event("real", "NamespaceNotAllowed").await;
    assert!(note.contains(&format!("kubectl label namespace {}", s.ns)), "{note}");
    assert_eq!(s.published().await, None);
    namespaces.patch(&s.ns, &PatchParams::default(), &Patch::Merge(&allow())).await.expect("allow");
    let published = s.wait_cluster_host("real", 5000).await;

    // The tenant: top priority, every value pointing at a host it controls, a help URL, never ready.
    let plane = ControlPlane::shared();
    let tenant_ns = plane.namespace(&s.client, "tenant").await.expect("tenant namespace");
    let tenant = tenant(&s, &tenant_ns).await;
    let hijack = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "hijack", "labels": registry_label(), "annotations": {
            "local-registry-publisher.io/priority": "2147483647",
            "local-registry-publisher.io/host": "evil.example:5000",
            "local-registry-publisher.io/host-from-container-runtime": "evil.example:5000",
            "local-registry-publisher.io/host-from-cluster-network": "evil.example:5000",
            "local-registry-publisher.io/help": "https://evil.example/help"}},
        "spec": {"selector": {"app": "nothing"}, "ports": [{"name": "registry", "port": 5000}]}});
    apply_in(&tenant, &tenant_ns, hijack).await;
    let tenant_events = Scenario { client: s.client.clone(), ns: tenant_ns.clone(), settings: s.settings.clone() };
    let note = tenant_events.wait_event("hijack", "NamespaceNotAllowed").await;
    assert!(note.contains("priority and annotations count for nothing"), "{note}");
    assert_eq!(s.published().await, Some(published.clone()), "the real registry stays published");

    // The tenant cannot allow its own namespace: labelling namespaces is not part of `edit`.
    let denied =
        Api::<Namespace>::all(tenant.clone()).patch(&tenant_ns, &PatchParams::default(), &Patch::Merge(&allow())).await;
    assert!(matches!(denied, Err(kube::Error::Api(ref status)) if status.code == 403), "{denied:?}");

    // A value the API server's YAML decoder refuses (U+FFFE, sent as JSON) no longer halts publishing for everyone:
    // the real registry's next change is still published.
    let halt = json!({"metadata": {"annotations": {"local-registry-publisher.io/host": "evil\u{fffe}.example:5000"}}});
    let services = Api::<k8s_openapi::api::core::v1::Service>::namespaced(tenant.clone(), &tenant_ns);
    services.patch("hijack", &PatchParams::default(), &Patch::Merge(&halt)).await.expect("the tenant's JSON patch");
    let moved = service("real", registry_label(), json!({}), json!({"ports": [{"name": "registry", "port": 5001}]}));
    s.apply(moved).await;
    s.wait_cluster_host("real", 5001).await;

    // The real registry goes away: its withdrawal publishes nothing of the tenant's, not even its help URL.
    s.delete("v1", "Service", "real").await;
    s.wait_published("the withdrawal", Option::is_none).await;
}

/// MicroK8s's addon counts only where a node says the cluster is MicroK8s: elsewhere anyone who may create a
/// namespace named `container-registry` would choose the cluster's registry.
#[tokio::test]
async fn the_microk8s_addon_counts_only_on_a_microk8s_cluster() {
    let mut s = Scenario::new("microk8s-shaped").await;
    s.settings.watch_namespaces = Vec::new();
    s.settings.builtin_registries = true;
    // Only the built-in addon: the other test's labelled registries are not this one's business.
    s.settings.registry_selector = local_registry_publisher::watching::equal("example.dev/none", "none");
    let namespaces: Api<Namespace> = Api::all(s.client.clone());
    let namespace = serde_json::from_value(json!({"metadata": {"name": "container-registry"}})).unwrap();
    namespaces.create(&PostParams::default(), &namespace).await.expect("a namespace named like the addon's");
    let spec = json!({"type": "NodePort", "ports": [{"name": "registry", "port": 5000, "nodePort": 32000}]});
    apply_in(&s.client, "container-registry", service("registry", json!({}), json!({}), spec)).await;
    let _run = s.start();

    let addon = Scenario { client: s.client.clone(), ns: "container-registry".into(), settings: s.settings.clone() };
    let note = addon.wait_event("registry", "NamespaceNotAllowed").await;
    assert!(note.contains("kubectl label namespace container-registry"), "{note}");
    assert_eq!(s.published().await, None, "not on a cluster that is not MicroK8s");

    // MicroK8s's kubelets label every node microk8s.io/cluster=true.
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(s.client.clone());
    let label = |value: serde_json::Value| json!({"metadata": {"labels": {"microk8s.io/cluster": value}}});
    nodes.patch(testbed::NODE_NAME, &PatchParams::default(), &Patch::Merge(label(json!("true")))).await.expect("label");
    let published = s.wait_host("localhost:32000").await;
    let cluster_host = cluster_host(&s.client, "container-registry", "registry", 5000).await;
    assert_eq!(published.host_from_cluster_network, Some(cluster_host));
    nodes.patch(testbed::NODE_NAME, &PatchParams::default(), &Patch::Merge(label(json!(null)))).await.expect("unlabel");
    s.wait_published("the withdrawal once no node says MicroK8s", Option::is_none).await;
    ControlPlane::shared().delete_namespace(&s.client, "container-registry").await.expect("cleanup");
}

/// Whoever installs the controller may allow namespaces by flag instead of a cluster admin's label: the registry
/// there is published, one elsewhere stays ignored. The flag's old spelling still works.
#[tokio::test]
async fn allowed_namespaces_by_flag_name_the_registry_and_the_old_spelling_works() {
    for flag in ["--allowed-namespaces", "--registry-namespaces"] {
        let s = Scenario::new("by-flag").await;
        let elsewhere = ControlPlane::shared().namespace(&s.client, "by-flag-other").await.expect("namespace");
        // A selector of this run's own, so the other tests' registries are not its business.
        let label = json!({"example.dev/by-flag": s.ns});
        let spec = json!({"type": "ExternalName", "externalName": "zot.example", "ports": [{"port": 5000}]});
        s.apply(service("zot", label.clone(), json!({}), spec.clone())).await;
        apply_in(
            &s.client,
            &elsewhere,
            service("other", label, json!({"local-registry-publisher.io/priority": "9"}), spec),
        )
        .await;
        let controller = support::binary::Controller::start(&[
            format!("--kubeconfig={}", ControlPlane::shared().kubeconfig().display()),
            format!("--configmap-namespace={}", s.ns),
            format!("--registry-selector=example.dev/by-flag={}", s.ns),
            "--no-builtin-registries".into(),
            format!("{flag}={}", s.ns),
        ]);
        let published = s.wait_published(flag, |d| d.is_some()).await.expect("a document");
        assert_eq!(published.host_from_cluster_network.as_deref(), Some("zot.example:5000"), "{flag}");
        let other = Scenario { client: s.client.clone(), ns: elsewhere.clone(), settings: s.settings.clone() };
        other.wait_event("other", "NamespaceNotAllowed").await;
        drop(controller);
        ControlPlane::shared().delete_namespace(&s.client, &elsewhere).await.expect("cleanup");
    }
}
