//! The release path end to end: the packaged chart and image installed from the cluster's own registry, upgraded
//! and uninstalled; and the wait the docs give right after `helm install` or `upgrade`, tried as written.

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

/// The release the documented wait is tried on (the docs name the README's, `local-registry-publisher`).
const RELEASE_OF_THE_WAITS: &str = "waits";

/// The wait docs/node-pulls.md gives right after `helm install` or `upgrade`, as written, for the release in `ns` and
/// this node: each line run as a shell command with the namespace and node put in.
fn documented_wait(ns: &str) -> Vec<String> {
    let doc = std::fs::read_to_string(root().join("docs/node-pulls.md")).expect("docs/node-pulls.md");
    let from = doc.find("To wait, right after `helm install` or `helm upgrade` returns").expect("the documented wait");
    let block = doc[from..].split("```sh\n").nth(1).and_then(|b| b.split("```").next()).expect("its block");
    let lines: Vec<String> = block
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let agents = format!("daemonset/{}-local-registry-publisher-node-agent", RELEASE_OF_THE_WAITS);
            l.replace("-n local-registry-publisher", &format!("-n {ns}"))
                .replace("daemonset/local-registry-publisher-node-agent", &agents)
                .replace("<node>", node().name())
        })
        .collect();
    assert!(lines.len() == 2 && lines.iter().all(|l| l.starts_with("kubectl ")), "{lines:?}");
    lines
}

/// Runs `lines` as the user would, each to its end, with the plane's kubectl.
fn run_as_written(lines: &[String]) {
    let path = format!("{}:{}", plane().tools().display(), std::env::var("PATH").unwrap_or_default());
    for line in lines {
        let mut shell = Command::new("bash");
        shell.arg("-c").arg(line).env("KUBECONFIG", plane().kubeconfig()).env("PATH", &path);
        ok(shell.output().expect("run the documented wait"));
    }
}

/// `helm` as a user runs it, returning as soon as the API server took the release (no `--wait`).
fn helm_now(args: &[&str]) {
    let chart = root().join("charts/local-registry-publisher").display().to_string();
    let mut all: Vec<&str> = args.to_vec();
    all.insert(2, &chart);
    ok(tool("helm", &all));
}

/// Starts a pod of `image` on the node and waits for it to run; fails on the first pull the runtime refused (the
/// kubelet's `Failed` Event on it), even one a later retry got past.
async fn pulls_at_once(client: &Client, ns: &str, pod: &str, image: &str) {
    apply_in(client, ns, app_pod(pod, image)).await;
    wait_phase(client, ns, pod, &["Running"]).await;
    let events = Api::<k8s_openapi::api::core::v1::Event>::namespaced(client.clone(), ns);
    let listed = events.list(&ListParams::default().fields(&format!("involvedObject.name={pod}"))).await.unwrap();
    let failed: Vec<String> = listed
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("Failed"))
        .map(|e| e.message.clone().unwrap_or_default())
        .collect();
    assert!(failed.is_empty(), "{pod}: a pull failed before the pod ran: {failed:?}");
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    pods.delete(pod, &Default::default()).await.expect("delete the pod");
    wait_until(SOON_ON_A_NODE, || async { pods.get_opt(pod).await.ok().flatten().is_none().then_some(()) }).await;
}

#[tokio::test]
async fn the_documented_wait_right_after_helm_upgrade_or_install_is_followed_by_a_pull_that_works_every_time() {
    const ROUNDS: usize = 10;
    let (release, plane) = (RELEASE_OF_THE_WAITS, plane());
    let client = plane.client().await.expect("admin client");
    images();
    let ns = plane.namespace(&client, release).await.expect("namespace");
    apply_in(&client, &ns, registry_deployment()).await;
    apply_in(&client, &ns, registry_service(&ns, json!({}))).await;
    let ip = cluster_ip(&client, &ns, "registry").await;
    let image = format!("{ip}:5000/{release}/app:1");
    push(true, &own_image(release), &image, None);
    let sets = |values: &[String]| values.iter().flat_map(|v| ["--set".to_string(), v.clone()]).collect::<Vec<_>>();
    let base = sets(&isolated_release_values(&ns, &[]));
    let with_agent = sets(&agent_on());
    let wait = documented_wait(&ns);

    // Installed with the agent off; each round turns it on, waits as documented, pulls at once, turns it off again.
    let install = |values: &[String]| {
        let mut args = vec!["install", release, "-n", &ns];
        args.extend(values.iter().map(String::as_str));
        helm_now(&args);
    };
    install(&base);
    for round in 0..ROUNDS {
        let mut args = vec!["upgrade", release, "-n", &ns, "--reset-then-reuse-values"];
        args.extend(with_agent.iter().map(String::as_str));
        helm_now(&args);
        run_as_written(&wait);
        pulls_at_once(&client, &ns, &format!("upgraded-{round}"), &image).await;
        let off =
            ["upgrade", release, "-n", ns.as_str(), "--reset-then-reuse-values", "--set", "nodeAgent.enabled=false"];
        helm_now(&off);
        wait_node_file(&format!("{ip}:5000"), "the agent turned off", |t| t.is_none()).await;
    }
    // Each round installs afresh with the agent on, waits as documented, pulls at once, and uninstalls.
    helm_uninstall(release, &ns);
    for round in 0..ROUNDS {
        install(&[base.clone(), with_agent.clone()].concat());
        run_as_written(&wait);
        pulls_at_once(&client, &ns, &format!("installed-{round}"), &image).await;
        helm_uninstall(release, &ns);
        wait_node_file(&format!("{ip}:5000"), "uninstalled", |t| t.is_none()).await;
    }
    println!("{ROUNDS} upgrades and {ROUNDS} installs: the documented wait, then a pull that worked each time");
    plane.delete_namespace(&client, &ns).await.expect("delete namespace");
}
