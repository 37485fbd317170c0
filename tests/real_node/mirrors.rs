//! An admin's mirror of a public registry: its pulls served live on the node, and the fallback to the upstream.

use super::*;

/// The values that make the Service `service` (port 5000) of `ns` the nodes' mirror of `upstream`, as the chart's
/// `index`th mirror.
fn mirror_values(index: usize, upstream: &str, ns: &str, service: &str) -> Vec<String> {
    let key = format!("nodeAgent.mirrors[{index}]");
    vec![
        format!("{key}.upstream={upstream}"),
        format!("{key}.service.namespace={ns}"),
        format!("{key}.service.name={service}"),
        format!("{key}.service.port=5000"),
    ]
}

/// The values that make the Service `cache` (port 5000) of `ns` the node's mirror of docker.io.
fn docker_hub_mirror(ns: &str) -> Vec<String> {
    mirror_values(0, "docker.io", ns, "cache")
}

#[tokio::test]
async fn an_admins_mirror_serves_a_public_registrys_pulls_on_the_node_live_with_the_upstream_as_fallback() {
    let plane = plane();
    let client = plane.client().await.expect("admin client");
    images();
    let ns = plane.namespace(&client, "mirror").await.expect("namespace");
    let tenant_ns = plane.namespace(&client, "mirror-tenant").await.expect("namespace");
    // The cache: a registry of the admin's, published by nobody, holding the image where Docker Hub would serve
    // it (`library/<name>`). Nothing here reaches Docker Hub, so the image exists only in the cache.
    apply_in(&client, &ns, registry_deployment()).await;
    let cache = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "cache"},
        "spec": {"selector": {"app": "registry"}, "ports": [{"name": "registry", "port": 5000}]}});
    apply_in(&client, &ns, cache).await;
    let cache_ip = cluster_ip(&client, &ns, "cache").await;
    push(true, &own_image("mirror"), &format!("{cache_ip}:5000/library/lrp-mirror:1"), None);
    let image = "docker.io/library/lrp-mirror:1";

    // A file someone else wrote for docker.io (minikube ships one) is there first.
    let docker_dir = node().hosts_dir().join("docker.io");
    std::fs::create_dir_all(&docker_dir).unwrap();
    let theirs = "server = \"https://registry-1.docker.io\"\n[host.\"http://127.0.0.1:1\"]\n";
    std::fs::write(docker_dir.join("hosts.toml"), theirs).unwrap();

    // A user holding only `edit` in an allowed namespace publishes a registry that names docker.io.
    let tenant = support::edit_only_client(&client, plane.kubeconfig(), &tenant_ns).await;
    apply_in(&tenant, &tenant_ns, registry_deployment()).await;
    let hijack = registry_service(&ns, json!({"local-registry-publisher.io/host-from-container-runtime": "docker.io"}));
    apply_in(&tenant, &tenant_ns, hijack).await;
    let values = |extra: &[String]| tenant_release_values(&ns, &tenant_ns, extra);
    // Besides it, a mirror of ghcr.io whose Service does not exist: told, and no file.
    let mut mirrors = docker_hub_mirror(&ns);
    mirrors.extend(mirror_values(1, "ghcr.io", &ns, "absent"));
    helm_install("mirror", &ns, &values(&mirrors).iter().map(String::as_str).collect::<Vec<_>>());
    let tenant_own = format!("{}:5000", cluster_ip(&client, &tenant_ns, "registry").await);
    wait_node_file(&tenant_own, "the tenant registry's own address", |t| t.is_some()).await;

    // The foreign file is left byte for byte and reported; the namespace's docker.io is refused, not mirrored.
    let report = wait_doctor(&ns, SOMETHING_WRONG, |r| r.contains("not configured for docker.io (foreign: ")).await;
    assert!(report.contains(&format!("docker.io is mirrored: a node file sends its pulls to http://{cache_ip}:5000 first, then to https://registry-1.docker.io")), "{report}");
    assert!(report.contains("docker.io is published but no node is configured to pull it"), "{report}");
    wait_agent_metrics(&client, &ns, |t| t.contains("local_registry_publisher_node_addresses{state=\"foreign\"} 1\n"))
        .await;
    assert_eq!(node_file("docker.io").as_deref(), Some(theirs));
    let told = wait_event_note(&client, &tenant_ns, "registry", "AddressNotAllowed").await;
    assert!(told.contains("docker.io does not name this Service alone"), "{told}");
    let plan = "mirror-local-registry-publisher-node-plan";
    let told = wait_event_note(&client, &ns, plan, "MirrorUnusable").await;
    assert!(told.contains(&format!("the mirror of ghcr.io (Service {ns}/absent port 5000): does not exist")), "{told}");
    wait_pod_metrics(&client, &ns, "controller", |t| t.contains("local_registry_publisher_node_mirrors_unusable 1\n"))
        .await;
    assert!(report.contains("the mirror of ghcr.io"), "{report}");
    assert!(!node().hosts_dir().join("ghcr.io").exists(), "no file for a mirror that cannot be used");
    // doctor names the namespaces whose writers decide every node's pulls: here one, the release's and the caches'.
    let deciding = format!(
        "only cluster admins should write there (docs/node-pulls.md#security): {ns} (the node plan {plan}, the node \
         agents' DaemonSet and ServiceAccount; the Service cache, the mirror of docker.io; the Service absent, the \
         mirror of ghcr.io)\n"
    );
    assert!(report.contains(&deciding), "{report}");

    // Once it is gone, the agent writes the mirror's file: the cache first, Docker Hub as the fallback.
    std::fs::remove_file(docker_dir.join("hosts.toml")).unwrap();
    let (text, _) = wait_node_file("docker.io", "the mirror", |t| t.is_some_and(|t| t.starts_with(HEADER))).await;
    let text = text.unwrap_or_default();
    assert!(text.contains("server = \"https://registry-1.docker.io\"\n"), "{text}");
    assert!(text.contains(&format!("[host.\"http://{cache_ip}:5000\"]")), "{text}");
    assert!(text.contains("dial_timeout = \"2s\""), "{text}");
    // A pod naming Docker Hub runs from the cache, with nothing restarted.
    apply_in(&client, &ns, app_pod("through-mirror", image)).await;
    wait_phase(&client, &ns, "through-mirror", &["Running"]).await;
    // It exits 4 all the same: the mirror of ghcr.io has no Service, so the node section is wrong.
    let report = wait_doctor(&ns, SOMETHING_WRONG, |r| {
        r.contains(&format!("node {}: configured by mirror-local-registry-publisher-node-agent-", node().name()))
    })
    .await;
    assert!(report.contains(", mirroring docker.io"), "{report}");
    let state = node_state(&client, &ns).await.and_then(|s| s.status).expect("a NodePullState");
    let docker = state.addresses.iter().find(|a| a.address == "docker.io").expect("docker.io in the node's state");
    assert_eq!(docker.server.as_deref(), Some("https://registry-1.docker.io"));

    // The cache down (scaled to 0, its Service and so the node's file still there): containerd falls back to the
    // upstream. Nothing here reaches Docker Hub, so the pull fails; the kubelet shows containerd's first error (the
    // cache's), and containerd's log shows it went on to the upstream for the same image.
    let mirrored = node_file("docker.io");
    ok(tool("kubectl", &["scale", "deployment/registry", "-n", &ns, "--replicas=0"]));
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let drained = wait_until(SOON_ON_A_NODE, || async {
        pods.list(&ListParams::default().labels("app=registry")).await.ok()?.items.is_empty().then_some(())
    })
    .await;
    assert!(drained.is_some(), "the cache's pods never went");
    assert_eq!(node_file("docker.io"), mirrored, "the mirror's file changed with its cache down");
    apply_in(&client, &ns, app_pod("fallback", image)).await;
    let failed = wait_waiting(&client, &ns, "fallback", &format!("{cache_ip}:5000")).await;
    println!("with the cache down, containerd says: {failed}");
    let log = plane.log_of("containerd");
    let upstream_tried = wait_until(SOON_ON_A_NODE, || async {
        let text = std::fs::read_to_string(&log).ok()?;
        text.lines().any(|l| l.contains("host=registry-1.docker.io") && l.contains("lrp-mirror")).then_some(())
    })
    .await;
    assert!(upstream_tried.is_some(), "containerd never tried the upstream: {}", log.display());

    // The mirror taken out of the chart's values as the README says: its file goes, and the same pull fails as the
    // runtime says.
    let chart = root().join("charts/local-registry-publisher").display().to_string();
    let take_out = ["upgrade", "mirror", &chart, "-n", &ns, "--wait", "--timeout", "180s", "--reset-then-reuse-values"];
    ok(tool("helm", &[&take_out[..], &["--set", "nodeAgent.mirrors=null"]].concat()));
    wait_node_file("docker.io", "mirror removed", |t| t.is_none()).await;
    apply_in(&client, &ns, app_pod("without-mirror", image)).await;
    let failed = wait_waiting(&client, &ns, "without-mirror", "registry-1.docker.io").await;
    println!("without the mirror, containerd says: {}", failed);
    helm_uninstall("mirror", &ns);
    wait_node_file(&tenant_own, "after uninstall", |t| t.is_none()).await;
    assert!(!docker_dir.exists(), "nothing of ours is left for docker.io");
    for ns in [&ns, &tenant_ns] {
        plane.delete_namespace(&client, ns).await.expect("delete namespace");
    }
}

/// The other half of a mirror's fallback: with its cache down (its Service there, no pod behind it, as a cache scaled
/// to 0 leaves it) the node pulls from the upstream itself, and the pod runs. Nothing here reaches Docker Hub, so the
/// upstream is a registry in the cluster that serves HTTPS under a certificate the node's system roots trust, as a
/// public registry's is (testbed's node root CA), with no CA in the mirror's file; the mirror names it by ClusterIP.
#[tokio::test]
async fn with_its_cache_down_an_admins_mirror_falls_back_to_a_reachable_upstream_and_the_pod_runs() {
    let plane = plane();
    let client = plane.client().await.expect("admin client");
    images();
    let ns = plane.namespace(&client, "fallback").await.expect("namespace");
    let service = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": name}, "ports": [{"name": "registry", "port": 5000}]}})
    };
    apply_in(&client, &ns, service("cache")).await;
    let cache = format!("{}:5000", cluster_ip(&client, &ns, "cache").await);
    apply_in(&client, &ns, service("upstream")).await;
    let upstream_ip = cluster_ip(&client, &ns, "upstream").await;
    let tls = node().trusted_tls(&[&upstream_ip]).expect("a certificate the node trusts");
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "upstream-tls"},
        "type": "kubernetes.io/tls", "stringData": {"tls.crt": tls.certificate, "tls.key": tls.key}});
    apply_in(&client, &ns, secret).await;
    apply_in(&client, &ns, tls_registry_deployment("upstream", "upstream-tls")).await;
    let upstream = format!("{upstream_ip}:5000");
    let image = format!("{upstream}/library/lrp-upstream:1");
    push(true, &own_image("fallback"), &image, None);

    let mirror = mirror_values(0, &upstream, &ns, "cache");
    let values = isolated_release_values(&ns, &[agent_on(), mirror].concat());
    helm_install("fallback", &ns, &values.iter().map(String::as_str).collect::<Vec<_>>());
    let (text, _) = wait_node_file(&upstream, "the mirror", |t| t.is_some_and(|t| t.starts_with(HEADER))).await;
    let text = text.unwrap_or_default();
    assert!(text.contains(&format!("server = \"https://{upstream}\"\n")), "{text}");
    assert!(text.contains(&format!("[host.\"http://{cache}\"]")), "{text}");
    assert!(!text.contains("ca = "), "the upstream is trusted through the node's roots alone: {text}");

    apply_in(&client, &ns, app_pod("fallback", &image)).await;
    wait_phase(&client, &ns, "fallback", &["Running"]).await;
    // Through the mirror's file: containerd tried the cache first for this image, then the upstream served it.
    let log = plane.log_of("containerd");
    let cache_tried = wait_until(SOON_ON_A_NODE, || async {
        let text = std::fs::read_to_string(&log).ok()?;
        let first = format!("http://{cache}/v2/library/lrp-upstream/");
        text.lines().any(|l| l.contains("trying next host") && l.contains(&first)).then_some(())
    })
    .await;
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    let said: Vec<&str> = said.lines().filter(|l| l.contains("lrp-upstream")).collect();
    assert!(cache_tried.is_some(), "containerd never tried the cache first: {}", said.join("\n"));

    helm_uninstall("fallback", &ns);
    wait_node_file(&upstream, "after uninstall", |t| t.is_none()).await;
    plane.delete_namespace(&client, &ns).await.expect("delete namespace");
}
