//! The publisher against a real control plane: one test per behaviour of the publisher issue, each reading the
//! ConfigMap back and parsing it as a reader would.

mod support;

use std::time::Duration;

use kube::api::Api;
use local_registry_publisher::hosting::DATA_KEY;
use local_registry_publisher::keys::{MANAGED_BY, MANAGER};
use serde_json::json;
use support::*;

fn selectorless(name: &str, type_: &str, annotations: serde_json::Value) -> serde_json::Value {
    service(name, registry_label(), annotations, json!({"type": type_, "ports": [{"port": 5000}]}))
}

// 1. Selection
#[tokio::test]
async fn a_labelled_service_or_a_service_selecting_a_labelled_workload_is_the_registry() {
    let s = Scenario::new("select").await;
    let run = s.start();
    s.apply(selectorless("zot", "ClusterIP", json!({}))).await;
    let published = s.wait_published("the labelled Service", |d| d.is_some()).await.unwrap();
    assert_eq!(published.host_from_cluster_network, Some(s.cluster_host("zot", 5000).await));
    assert_eq!(published.host, None, "a ClusterIP registry cannot be reached from outside");

    s.delete("v1", "Service", "zot").await;
    s.wait_published("removal when the registry is gone and no help URL is set", Option::is_none).await;

    // An unlabelled Service becomes the registry by selecting a labelled Deployment's pods.
    s.apply(deployment("harbor", 1, registry_label(), json!([{"containerPort": 5000}]))).await;
    s.apply(service("harbor", json!({}), json!({}), json!({"selector": {"app": "harbor"}, "ports": [{"port": 5000}]})))
        .await;
    s.apply(service("web", json!({}), json!({}), json!({"selector": {"app": "web"}, "ports": [{"port": 80}]}))).await;
    let published = s.wait_published("the Service of the labelled Deployment", |d| d.is_some()).await.unwrap();
    assert_eq!(published.host_from_cluster_network, Some(s.cluster_host("harbor", 5000).await));
    run.stop().await;
}

#[tokio::test]
async fn the_registry_selector_is_configurable() {
    let mut s = Scenario::new("selector").await;
    s.settings.registry_selector = local_registry_publisher::watching::equal("example.dev/role", "registry");
    let _run = s.start();
    s.apply(selectorless("ignored", "ClusterIP", json!({}))).await;
    s.apply(service("chosen", json!({"example.dev/role": "registry"}), json!({}), json!({"ports": [{"port": 5000}]})))
        .await;
    let published = s.wait_published("the Service matching the custom selector", |d| d.is_some()).await.unwrap();
    assert_eq!(published.host_from_cluster_network, Some(s.cluster_host("chosen", 5000).await));
}

// 1. Built-in recognition: minikube's addon.
#[tokio::test]
async fn minikube_registry_addon_is_recognised_without_a_label() {
    let mut s = Scenario::new("minikube").await;
    s.settings.watch_namespaces = vec!["kube-system".into()];
    s.settings.builtin_registries = true;
    let system = "kube-system";
    apply_in(&s.client, system, deployment("registry", 1, json!({}), json!([{"containerPort": 5000}]))).await;
    let spec = json!({"selector": {"app": "registry"},
        "ports": [{"name": "http", "port": 80, "targetPort": 5000}, {"name": "https", "port": 443, "targetPort": 443}]});
    apply_in(&s.client, system, service("registry", json!({}), json!({}), spec)).await;
    apply_in(
        &s.client,
        system,
        json!({
            "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "registry-proxy"},
            "spec": {"selector": {"matchLabels": {"registry-proxy": "true"}},
                "template": {"metadata": {"labels": {"registry-proxy": "true"}},
                    "spec": {"containers": [{"name": "registry-proxy", "image": "kube-registry-proxy:0.4",
                        "ports": [{"name": "registry", "containerPort": 80, "hostPort": 5000}]}]}}}
        }),
    )
    .await;

    let run = s.start();
    let published = s.wait_host(&format!("{}:5000", testbed::NODE_IP)).await;
    assert_eq!(published.host_from_container_runtime.as_deref(), Some("127.0.0.1:5000"));
    let cluster_host = cluster_host(&s.client, "kube-system", "registry", 80).await;
    assert_eq!(published.host_from_cluster_network, Some(cluster_host));
    run.stop().await;

    // One flag turns recognition off; what we published is withdrawn.
    s.settings.builtin_registries = false;
    let run = s.start();
    s.wait_published("withdrawal with built-in recognition off", Option::is_none).await;
    run.stop().await;
    for (version, kind, name) in [
        ("apps/v1", "DaemonSet", "registry-proxy"),
        ("apps/v1", "Deployment", "registry"),
        ("v1", "Service", "registry"),
    ] {
        delete_in(&s.client, system, version, kind, name).await;
    }
}

// 1. Built-in recognition: MicroK8s's addon.
#[tokio::test]
async fn microk8s_registry_addon_is_recognised_without_a_label() {
    let mut s = Scenario::new("microk8s").await;
    let plane = testbed::ControlPlane::shared();
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "container-registry"}});
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(s.client.clone());
    namespaces.create(&Default::default(), &serde_json::from_value(namespace).unwrap()).await.expect("namespace");
    s.settings.watch_namespaces = vec!["container-registry".into()];
    s.settings.builtin_registries = true;
    let spec = json!({"type": "NodePort", "ports": [{"name": "registry", "port": 5000, "nodePort": 32000}]});
    apply_in(&s.client, "container-registry", service("registry", json!({}), json!({}), spec)).await;

    let _run = s.start();
    let published = s.wait_host("localhost:32000").await;
    assert_eq!(published.host_from_container_runtime, None, "equal to host, so left to the readers' fallback");
    let cluster_host = cluster_host(&s.client, "container-registry", "registry", 5000).await;
    assert_eq!(published.host_from_cluster_network, Some(cluster_host));
    plane.delete_namespace(&s.client, "container-registry").await.expect("cleanup");
}

// 2. Port
#[tokio::test]
async fn an_ambiguous_port_is_reported_not_guessed_and_the_annotation_resolves_it() {
    let s = Scenario::new("port").await;
    let _run = s.start();
    let two_ports = json!({"ports": [{"name": "http", "port": 80}, {"name": "debug", "port": 5001}]});
    s.apply(service("zot", registry_label(), json!({}), two_ports.clone())).await;
    let note = s.wait_event("zot", "AmbiguousPort").await;
    assert!(note.contains("http=80, debug=5001") && note.contains("local-registry-publisher.io/port"), "{note}");
    assert_eq!(s.published().await, None, "nothing is guessed");

    s.apply(service("zot", registry_label(), json!({"local-registry-publisher.io/port": "debug"}), two_ports)).await;
    let published = s.wait_published("the annotated port", |d| d.is_some()).await.unwrap();
    assert_eq!(published.host_from_cluster_network, Some(s.cluster_host("zot", 5001).await));

    let named = json!({"ports": [{"name": "http", "port": 80}, {"name": "registry", "port": 5000}]});
    s.apply(service("zot", registry_label(), json!({}), named)).await;
    s.wait_cluster_host("zot", 5000).await;
}

// 3. Values: NodePort, LoadBalancer, overrides.
#[tokio::test]
async fn values_follow_the_service_type_and_annotations_override_them() {
    let s = Scenario::new("values").await;
    let _run = s.start();
    s.apply(selectorless("zot", "NodePort", json!({}))).await;
    // The API server allocates the nodePort when it creates the Service.
    let node_port = node_port(&s, "zot").await;
    let published = s.wait_host(&format!("localhost:{node_port}")).await;
    assert_eq!(published.host_from_container_runtime, None);
    assert_eq!(published.host_from_cluster_network, Some(s.cluster_host("zot", 5000).await));

    s.apply(service(
        "zot",
        registry_label(),
        json!({}),
        json!({"type": "LoadBalancer", "ports": [{"port": 5000, "nodePort": node_port}]}),
    ))
    .await;
    s.patch_status("v1", "Service", "zot", json!({"loadBalancer": {"ingress": [{"ip": "172.18.0.50"}]}})).await;
    let published = s.wait_host("172.18.0.50:5000").await;
    assert_eq!(published.host_from_container_runtime, Some(format!("127.0.0.1:{node_port}")));

    let overrides = json!({
        "local-registry-publisher.io/host": "registry.dev.example:443",
        "local-registry-publisher.io/host-from-container-runtime": "registry.internal:5000",
        "local-registry-publisher.io/host-from-cluster-network": "mirror.cache.svc.cluster.local:5000",
        "local-registry-publisher.io/help": "https://wiki.example/registry"
    });
    s.apply(service(
        "zot",
        registry_label(),
        overrides,
        json!({"type": "LoadBalancer", "ports": [{"port": 5000, "nodePort": node_port}]}),
    ))
    .await;
    let published = s.wait_host("registry.dev.example:443").await;
    assert_eq!(published.host_from_container_runtime.as_deref(), Some("registry.internal:5000"));
    assert_eq!(published.host_from_cluster_network.as_deref(), Some("mirror.cache.svc.cluster.local:5000"));
    assert_eq!(published.help.as_deref(), Some("https://wiki.example/registry"));
}

// 3. Values: hostPort on the registry pods, localhost and the node's InternalIP.
#[tokio::test]
async fn a_host_port_on_the_registry_pods_is_reached_at_the_node_address() {
    let mut s = Scenario::new("hostport").await;
    s.apply(deployment("zot", 1, json!({}), json!([{"name": "http", "containerPort": 5000, "hostPort": 5001}]))).await;
    let spec = json!({"selector": {"app": "zot"}, "ports": [{"port": 80, "targetPort": "http"}]});
    s.apply(service("zot", registry_label(), json!({}), spec)).await;
    let run = s.start();
    let published = s.wait_host("localhost:5001").await;
    assert_eq!(published.host_from_container_runtime, None);
    assert_eq!(published.host_from_cluster_network, Some(s.cluster_host("zot", 80).await));
    run.stop().await;

    s.settings.node_address = local_registry_publisher::settings::NodeAddress::InternalIp;
    let _run = s.start();
    let published = s.wait_host(&format!("{}:5001", testbed::NODE_IP)).await;
    assert_eq!(published.host_from_container_runtime.as_deref(), Some("127.0.0.1:5001"));
}

// 3. Values: ExternalName, published without the root dot it may be written with, and without complaint.
#[tokio::test]
async fn an_external_name_service_publishes_its_external_name() {
    let s = Scenario::new("external").await;
    let _run = s.start();
    let spec = json!({"type": "ExternalName", "externalName": "registry.corp.example.", "ports": [{"port": 5000}]});
    s.apply(service("corp", registry_label(), json!({}), spec)).await;
    let published = s.wait_published("the external name", |d| d.is_some()).await.unwrap();
    assert_eq!(published.host_from_cluster_network.as_deref(), Some("registry.corp.example:5000"));
    // Every Event of the passes before the marker's has landed once the marker's has.
    s.wait_marker().await;
    let events = s.events_for("corp").await;
    assert!(events.iter().all(|(kind, _, _)| kind != "Warning"), "{events:?}");
}

// 4. Output
#[tokio::test]
async fn the_published_configmap_has_one_key_of_quoted_block_yaml_in_reader_order() {
    let mut s = Scenario::new("output").await;
    s.settings.help_url = Some("https://docs.example/registry".into());
    let _run = s.start();
    s.apply(selectorless("zot", "NodePort", json!({}))).await;
    let node_port = node_port(&s, "zot").await;
    s.wait_host(&format!("localhost:{node_port}")).await;
    let configmap = s.configmap().await.unwrap();
    let data = configmap.data.clone().unwrap();
    assert_eq!(data.keys().collect::<Vec<_>>(), [DATA_KEY]);
    assert_eq!(
        data[DATA_KEY],
        format!(
            "host: \"localhost:{node_port}\"\nhostFromClusterNetwork: \"{}\"\nhelp: \"https://docs.example/registry\"\n",
            s.cluster_host("zot", 5000).await
        )
    );
    assert_eq!(configmap.metadata.labels.unwrap().get(MANAGED_BY).map(String::as_str), Some(MANAGER));
    let managers: Vec<String> =
        configmap.metadata.managed_fields.unwrap().into_iter().filter_map(|f| f.manager).collect();
    assert_eq!(managers, [MANAGER], "one stable field manager, server-side apply");
    // The knative Tiltfile's line reader: grep "host:" | sed 's/ *host: *//' | tr -d '"'
    let lines: Vec<&str> = data[DATA_KEY].lines().filter(|l| l.contains("host:")).collect();
    assert_eq!(lines.len(), 1, "only the host line matches a line-based reader: {lines:?}");
}

// 5. Readiness through the real pipeline.
#[tokio::test]
async fn readiness_follows_endpoints_with_a_grace_period_and_help_only_fallback() {
    let mut s = Scenario::new("ready").await;
    s.settings.help_url = Some("https://docs.example/registry".into());
    let run = s.start();
    let ports = json!([{"containerPort": 5000}]);
    s.apply(deployment("zot", 1, registry_label(), ports.clone())).await;
    s.apply(service("zot", json!({}), json!({}), json!({"selector": {"app": "zot"}, "ports": [{"port": 5000}]}))).await;
    s.wait_published("publication once a pod is Ready", |d| {
        d.as_ref().is_some_and(|d| d.host_from_cluster_network.is_some())
    })
    .await;

    s.apply(deployment("zot", 0, registry_label(), ports.clone())).await;
    let help_only = s
        .wait_published("help-only after the grace period", |d| {
            d.as_ref().is_some_and(|d| d.host_from_cluster_network.is_none())
        })
        .await
        .unwrap();
    assert_eq!(
        help_only,
        local_registry_publisher::hosting::LocalRegistryHostingV1::help_only("https://docs.example/registry".into())
    );

    s.apply(deployment("zot", 1, registry_label(), ports.clone())).await;
    s.wait_published("publication again after scaling up", |d| {
        d.as_ref().is_some_and(|d| d.host_from_cluster_network.is_some())
    })
    .await;
    run.stop().await;

    s.settings.help_url = None;
    let _run = s.start();
    s.apply(deployment("zot", 0, registry_label(), ports)).await;
    s.wait_published("deletion after the grace period without a help URL", Option::is_none).await;
}

#[tokio::test]
async fn a_rolling_blip_shorter_than_the_grace_period_does_not_flap() {
    let grace = Duration::from_secs(20);
    let mut s = Scenario::new("blip").await;
    s.settings.grace_period = grace;
    let _run = s.start();
    let ports = json!([{"containerPort": 5000}]);
    s.apply(deployment("zot", 1, registry_label(), ports.clone())).await;
    s.apply(service("zot", json!({}), json!({}), json!({"selector": {"app": "zot"}, "ports": [{"port": 5000}]}))).await;
    s.wait_published("publication", |d| d.is_some()).await;
    let before = resource_version(&s.configmap().await.unwrap());
    let mut writes = s.watch_configmap_versions();

    // The registry really goes unready (no ready endpoint), and really comes back, within the grace period.
    s.apply(deployment("zot", 0, registry_label(), ports.clone())).await;
    s.wait_ready_endpoints("zot", 0).await;
    let blip = tokio::time::Instant::now();
    s.apply(deployment("zot", 1, registry_label(), ports)).await;
    s.wait_ready_endpoints("zot", 1).await;
    // Past the moment the grace period would have run out had the blip counted, with a margin for a busy machine.
    tokio::time::sleep_until(blip + grace + Duration::from_secs(3)).await;
    assert_eq!(resource_version(&s.configmap().await.unwrap()), before, "no write during the blip");
    assert_eq!(writes.seen(), Vec::<String>::new(), "no ConfigMap state came and went either");
}

// 6. Ownership: what we own we defend.
#[tokio::test]
async fn manual_edits_and_deletions_of_our_configmap_are_corrected() {
    let s = Scenario::new("drift").await;
    let _run = s.start();
    s.apply(selectorless("zot", "ClusterIP", json!({}))).await;
    let expected = s.wait_published("publication", |d| d.is_some()).await;

    let mut edited = s.configmap().await.unwrap();
    edited.data = Some([(DATA_KEY.to_string(), "host: \"localhost:1\"\n".to_string())].into());
    edited.metadata.managed_fields = None;
    s.configmaps().replace(TARGET, &Default::default(), &edited).await.expect("manual edit");
    s.wait_published("the edit corrected", |d| *d == expected).await;

    s.configmaps().delete(TARGET, &Default::default()).await.expect("manual delete");
    s.wait_published("the deletion corrected", |d| *d == expected).await;
}

// 6. Ownership: a ConfigMap another tool wrote is left alone.
#[tokio::test]
async fn a_foreign_configmap_stays_untouched_without_take_over() {
    let mut s = Scenario::new("foreign").await;
    let kind_script = "host: \"localhost:5001\"\nhelp: \"https://kind.sigs.k8s.io/docs/user/local-registry/\"\n";
    let foreign = create_foreign_configmap(&s, kind_script).await;
    s.apply(selectorless("zot", "ClusterIP", json!({}))).await;
    let run = s.start();
    let note = s.wait_event("zot", "ForeignConfigMap").await;
    assert!(note.contains("--take-over"), "{note}");
    let after = s.configmap().await.unwrap();
    assert_eq!(after.data, foreign.data, "byte for byte");
    assert_eq!(resource_version(&after), resource_version(&foreign), "not even a no-op write");
    run.stop().await;

    s.settings.take_over = true;
    let _run = s.start();
    let published = s.wait_published("the take-over", |d| d.as_ref().is_some_and(|d| d.host.is_none())).await.unwrap();
    assert_eq!(published.host_from_cluster_network, Some(s.cluster_host("zot", 5000).await));
    let labels = s.configmap().await.unwrap().metadata.labels.unwrap_or_default();
    assert_eq!(labels.get(MANAGED_BY).map(String::as_str), Some(MANAGER));
}

// 7. No needless writes.
#[tokio::test]
async fn steady_state_writes_nothing_for_thirty_seconds() {
    let s = Scenario::new("steady").await;
    let _run = s.start();
    s.apply(deployment("zot", 2, registry_label(), json!([{"containerPort": 5000}]))).await;
    s.apply(service("zot", json!({}), json!({}), json!({"selector": {"app": "zot"}, "ports": [{"port": 5000}]}))).await;
    s.wait_published("publication", |d| d.is_some()).await;
    // Let the rollout settle (both pods Ready) before the idle window starts.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = s.configmap().await.unwrap();
    let published_before = s.occurrences("zot", "Published").await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    let after = s.configmap().await.unwrap();
    assert_eq!(resource_version(&after), resource_version(&before), "the ConfigMap was written while idle");
    assert_eq!(s.occurrences("zot", "Published").await, published_before, "Events were recorded while idle");
}

// 8. Several registries.
#[tokio::test]
async fn the_highest_priority_registry_wins_losers_are_told_and_the_next_takes_over() {
    let s = Scenario::new("several").await;
    let _run = s.start();
    s.apply(selectorless("harbor", "ClusterIP", json!({}))).await;
    s.apply(selectorless("zot", "ClusterIP", json!({"local-registry-publisher.io/priority": "10"}))).await;
    s.wait_cluster_host("zot", 5000).await;
    let note = s.wait_event("harbor", "NotPublished").await;
    assert!(note.contains("another registry ranks higher") && note.contains("priority 0"), "{note}");

    s.delete("v1", "Service", "zot").await;
    s.wait_cluster_host("harbor", 5000).await;
}

// 9. Invalid input.
#[tokio::test]
async fn a_bad_annotation_gets_one_warning_and_the_last_good_document_stays() {
    let s = Scenario::new("invalid").await;
    let _run = s.start();
    s.apply(selectorless("zot", "ClusterIP", json!({}))).await;
    s.wait_published("publication", |d| d.is_some()).await;
    let good = s.configmap().await.unwrap();

    for touch in ["1", "2", "3"] {
        let mut labels = registry_label();
        labels["touch"] = json!(touch);
        let bad = json!({"local-registry-publisher.io/host": "http://Registry.local:5000/"});
        s.apply(service("zot", labels, bad, json!({"type": "ClusterIP", "ports": [{"port": 5000}]}))).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let note = s.wait_event("zot", "InvalidAnnotation").await;
    assert!(
        note.contains("local-registry-publisher.io/host") && note.contains("http://Registry.local:5000/"),
        "{note}"
    );
    // A later registry's Event is posted after every Event of the passes before it: once it is there, a second
    // InvalidAnnotation Event would be too.
    s.wait_marker().await;
    assert_eq!(s.occurrences("zot", "InvalidAnnotation").await, 1, "one Event, not one per reconcile");
    let after = s.configmap().await.unwrap();
    assert_eq!((resource_version(&after), after.data), (resource_version(&good), good.data.clone()), "untouched");
}

// 10. Configurable target.
#[tokio::test]
async fn the_target_namespace_and_name_are_configurable() {
    let mut s = Scenario::new("target").await;
    s.settings.configmap_name = "registry-hosting-custom".into();
    let _run = s.start();
    s.apply(selectorless("zot", "ClusterIP", json!({}))).await;
    s.wait_published("publication under the custom name", |d| d.is_some()).await;
    let default_name = s.configmaps().get_opt(TARGET).await.unwrap();
    assert!(default_name.is_none(), "nothing is written under the default name");
}
