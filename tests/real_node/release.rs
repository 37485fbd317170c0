//! The release path end to end: the packaged chart and image installed from the cluster's own registry, upgraded
//! and uninstalled.

use super::*;

/// `tool` run on the node, where the published `localhost:<nodePort>` answers.
fn node_tool(name: &str, args: &[&str]) -> Output {
    let plane = plane();
    support::against(plane, node().command(plane.tools().join(name)).args(args))
        .output()
        .unwrap_or_else(|e| panic!("run {name} on the node: {e}"))
}

/// The next patch version: what `make version` would move a release to.
fn next_patch(version: &str) -> String {
    let (rest, patch) = version.rsplit_once('.').expect("x.y.z");
    format!("{rest}.{}", patch.parse::<u32>().expect("a numeric patch") + 1)
}

/// A chart as `hack/dist.sh` packages it for a release, defaulting to the image at `repository`, re-versioned to
/// `version` (chart and app) when given.
fn release_chart(dir: &Path, repository: &str, version: Option<&str>) -> PathBuf {
    let crate_version = env!("CARGO_PKG_VERSION");
    let packaged = Command::new(root().join("hack/dist.sh"))
        .args(["chart"])
        .arg(dir)
        .arg(repository)
        .output()
        .expect("run hack/dist.sh");
    assert!(packaged.status.success(), "hack/dist.sh chart: {}", String::from_utf8_lossy(&packaged.stderr));
    let chart = dir.join(format!("local-registry-publisher-{crate_version}.tgz"));
    let Some(version) = version else { return chart };
    let unpacked = dir.join(format!("unpacked-{version}"));
    std::fs::create_dir_all(&unpacked).unwrap();
    let untar = Command::new("tar").arg("-xzf").arg(&chart).arg("-C").arg(&unpacked).status().unwrap();
    assert!(untar.success());
    let chart_dir = unpacked.join("local-registry-publisher").display().to_string();
    let out = dir.display().to_string();
    ok(tool("helm", &["package", &chart_dir, "--version", version, "--app-version", version, "--destination", &out]));
    dir.join(format!("local-registry-publisher-{version}.tgz"))
}

/// Names of the release's objects that remain, in every namespace and cluster-wide.
fn release_objects(release: &str) -> String {
    let selector = format!("app.kubernetes.io/instance={release}");
    let kinds = "deployments,replicasets,pods,jobs,serviceaccounts,roles,rolebindings,services,poddisruptionbudgets,\
        daemonsets,configmaps";
    ok(tool("kubectl", &["get", kinds, "-A", "-l", &selector, "-o", "name"]))
        + &ok(tool("kubectl", &["get", "clusterroles,clusterrolebindings", "-l", &selector, "-o", "name"]))
}

/// Waits until every controller pod of the namespace's release runs `image` (`<repository>:<tag>`), ready, and was
/// pulled from that repository: the image ID the kubelet reports names where its digest came from (its image name
/// may be any other name of the same digest, such as the one `make image` imported).
async fn wait_controller_image(client: &Client, ns: &str, image: &str) {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let selector = format!("{CONTROLLER_LABELS},app.kubernetes.io/component=controller");
    let (repository, _) = image.rsplit_once(':').expect("repository:tag");
    let pulled_from = format!("{repository}@sha256:");
    let running = wait_until(SOON_ON_A_NODE, || async {
        let list = pods.list(&kube::api::ListParams::default().labels(&selector)).await.ok()?;
        let all_run_it = list.items.iter().all(|pod| {
            let spec_image = pod.spec.as_ref().and_then(|s| s.containers.first()).and_then(|c| c.image.as_deref());
            let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.as_deref()).unwrap_or_default();
            spec_image == Some(image)
                && !statuses.is_empty()
                && statuses.iter().all(|s| s.ready && s.image_id.starts_with(&pulled_from))
        });
        (!list.items.is_empty() && all_run_it).then_some(())
    })
    .await;
    let list = pods.list(&kube::api::ListParams::default().labels(&selector)).await.expect("list");
    assert!(
        running.is_some(),
        "no ready controller running {image}: {:?}",
        list.items.iter().map(|p| &p.status).collect::<Vec<_>>()
    );
}

/// The release path end to end: the image and the chart `hack/dist.sh` packages are pushed to the registry running
/// in the cluster, the chart is installed from there (`helm install oci://...`), its default image is the pushed one
/// and the node pulls it through the address the controller itself then publishes; an upgrade to the next version
/// comes from the same registry, and uninstalling leaves nothing.
#[tokio::test]
async fn the_released_chart_and_image_install_from_the_clusters_registry_upgrade_and_uninstall() {
    let plane = plane();
    let client = plane.client().await.expect("admin client");
    images();
    let ns = plane.namespace(&client, "release").await.expect("namespace");
    nodeport_registry(&client, &ns).await;
    let services = Api::<k8s_openapi::api::core::v1::Service>::namespaced(client.clone(), &ns);
    let node_port = services.get("registry").await.expect("service").spec.and_then(|s| s.ports?.first()?.node_port);
    let host = format!("localhost:{}", node_port.expect("a nodePort"));
    let repository = format!("{host}/local-registry-publisher");
    let version = env!("CARGO_PKG_VERSION");
    let next = next_patch(version);
    let listed = ok(node_tool(
        "ctr",
        &[
            "--address",
            &plane.dir().join("node/containerd.sock").display().to_string(),
            "-n",
            "k8s.io",
            "images",
            "ls",
            "-q",
        ],
    ));
    assert!(!listed.contains(&repository), "the node has {repository} before any pull: {listed}");

    // What a release publishes: the image under each version, the chart as OCI.
    let binary = root().join("target/release/local-registry-publisher");
    let image_dir = plane.dir().join("images");
    let layout = xtask::image::controller_copy(&binary, &image_dir, version, "released").expect("image").layout;
    push(true, &layout, &format!("{repository}:{version}"), None);
    push(true, &layout, &format!("{repository}:{next}"), None);
    let dir = plane.dir().join(format!("release-{ns}"));
    std::fs::create_dir_all(&dir).unwrap();
    let charts = format!("oci://{host}/charts");
    for chart in [release_chart(&dir, &repository, None), release_chart(&dir, &repository, Some(&next))] {
        ok(node_tool("helm", &["push", &chart.display().to_string(), &charts, "--plain-http"]));
    }

    // Installed from the registry with no image values: the packaged default is the pushed image.
    let reference = format!("{charts}/local-registry-publisher");
    let values = isolated_release_values(&ns, &[]);
    let install = |verb: &'static str, version: String| {
        let mut args: Vec<String> =
            [verb, "published", &reference, "--version", &version, "--plain-http", "-n", &ns].map(String::from).into();
        args.extend(["--wait".into(), "--timeout".into(), "180s".into()]);
        args.extend(values.iter().flat_map(|v| ["--set".to_string(), v.clone()]));
        args
    };
    let args = install("install", version.to_string());
    ok(node_tool("helm", &args.iter().map(String::as_str).collect::<Vec<_>>()));
    wait_controller_image(&client, &ns, &format!("{repository}:{version}")).await;
    // The controller publishes the address its own image was pulled through.
    let cluster_host = cluster_host(&client, &ns, "registry", 5000).await;
    let document = wait_published(&client, &ns, "hosting", "the registry", |d| {
        d.host_from_cluster_network.as_deref() == Some(cluster_host.as_str())
    })
    .await;
    assert_eq!(document.host.as_deref(), Some(host.as_str()), "{document:?}");

    let args = install("upgrade", next.clone());
    ok(node_tool("helm", &args.iter().map(String::as_str).collect::<Vec<_>>()));
    wait_controller_image(&client, &ns, &format!("{repository}:{next}")).await;
    let history = ok(tool("helm", &["history", "published", "-n", &ns]));
    assert!(history.contains(&format!("local-registry-publisher-{next}")), "{history}");
    wait_published(&client, &ns, "hosting", "the registry after the upgrade", |d| d.host.as_deref() == Some(&host))
        .await;

    helm_uninstall("published", &ns);
    let left =
        wait_until(SOON_ON_A_NODE, || async { release_objects("published").trim().is_empty().then_some(()) }).await;
    assert!(left.is_some(), "objects remain after uninstall: {}", release_objects("published"));
    assert_eq!(published(&client, &ns, "hosting").await, None, "uninstall withdrew the ConfigMap");
    plane.delete_namespace(&client, &ns).await.expect("delete namespace");
}
