//! The README as a new user follows it, on a real node: the Quick start's shell blocks and the per-cluster rows,
//! read from README.md itself (never copied here), run with bash as written, and their output compared with what
//! the README says they print. Only what a user brings is stood in for: the registry the Quick start assumes (the
//! Service `registry/registry`, NodePort 5000 -> 30500), the release on ghcr.io (the image and the chart
//! `hack/dist.sh` packages, pushed to that registry, whose `localhost:30500` stands in for `ghcr.io/<owner>`), the
//! image load for a checkout (`ctr import` on the node instead of `docker build` and `kind load`), and what kind's
//! and k3d's scripts and minikube's and MicroK8s's addons create.

mod support;

use std::path::Path;
use std::process::{Command, Output};
use support::root;

use serde_json::json;
use support::{SOON_ON_A_NODE, apply_in, ok, wait_until};
use testbed::ControlPlane;
use xtask::image::Image;

const RELEASE: &str = "local-registry-publisher";

fn plane() -> &'static ControlPlane {
    ControlPlane::shared_with_real_node()
}

fn readme() -> String {
    std::fs::read_to_string(root().join("README.md")).expect("README.md")
}

/// The text under `## <heading>`, up to the next `## `.
fn section(readme: &str, heading: &str) -> String {
    let start = readme.find(&format!("\n## {heading}\n")).unwrap_or_else(|| panic!("README has no ## {heading}"));
    let rest = &readme[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    rest[..end].to_string()
}

/// Every fenced block of `language` in `text`, its indentation (list items indent them) removed.
fn blocks(text: &str, language: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let indent = line.len() - line.trim_start().len();
        if line.trim_start() != format!("```{language}") {
            continue;
        }
        let body: Vec<&str> = lines.by_ref().take_while(|l| l.trim_start() != "```").collect();
        let body: Vec<&str> = body.iter().map(|l| l.get(indent..).unwrap_or("")).collect();
        found.push(body.join("\n") + "\n");
    }
    found
}

/// The cells of the per-cluster table row whose first cell starts with `cluster`.
fn row(section: &str, cluster: &str) -> Vec<String> {
    let line = section
        .lines()
        .find(|l| l.starts_with(&format!("| {cluster}")))
        .unwrap_or_else(|| panic!("no per-cluster row for {cluster}"));
    line.trim_matches('|').split(" | ").map(|cell| cell.trim().to_string()).collect()
}

/// The text of every `code span` in a cell.
fn spans(cell: &str) -> Vec<String> {
    cell.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// A user's shell: bash with errors fatal, the project's tools and the installed CLI on PATH, a home of its own.
fn shell(script: &str, home: &Path) -> Output {
    shell_in(Command::new("bash"), script, home)
}

/// The same shell started by `bash` (a command for bash on this machine or in the node's network).
fn shell_in(mut bash: Command, script: &str, home: &Path) -> Output {
    let plane = plane();
    let path = format!(
        "{}:{}:{}",
        home.join(".local/bin").display(),
        plane.tools().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let bash = support::as_a_user(&mut bash);
    let bash = bash.args(["-euo", "pipefail", "-c", script]).current_dir(root()).env("PATH", path).env("HOME", home);
    support::against(plane, bash).output().expect("run bash")
}

fn as_written(what: &str, script: &str, home: &Path) -> String {
    succeeded(what, script, shell(script, home))
}

/// `as_written` in the node's network, where the registry's `localhost:<nodePort>` answers.
fn as_written_on_node(what: &str, script: &str, home: &Path) -> String {
    let bash = plane().real_node().expect("a real node").command("bash");
    succeeded(what, script, shell_in(bash, script, home))
}

fn succeeded(what: &str, script: &str, output: Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{what} as the README writes it failed:\n{script}\n{stdout}\n{stderr}");
    stdout
}

/// What a release publishes, pushed to the registry at `registry` (from the node) instead of ghcr.io: the image
/// `make image` builds and the chart `hack/dist.sh` packages to default to it. Returns the image's repository.
fn publish_release(registry: &str) -> String {
    let plane = plane();
    let home = plane.dir().join("release");
    std::fs::create_dir_all(&home).unwrap();
    let repository = format!("{registry}/local-registry-publisher");
    let version = env!("CARGO_PKG_VERSION");
    let binary = root().join("target/release/local-registry-publisher");
    let layout = xtask::image::controller_copy(&binary, &home, version, "released").expect("image").layout;
    let script = format!(
        "hack/dist.sh chart {dir} {repository}\n\
         for i in $(seq 60); do crane push --insecure {layout} {repository}:{version} && break; sleep 0.5; done\n\
         crane digest --insecure {repository}:{version}\n\
         helm push {dir}/local-registry-publisher-{version}.tgz oci://{registry}/charts --plain-http\n",
        dir = home.display(),
        layout = layout.display(),
    );
    as_written_on_node("publishing the release", &script, &home);
    repository
}

/// Runs `script` until it succeeds with output containing every line of `expected` (the controller starts a few
/// seconds after an install that does not wait); returns its output.
async fn until_it_prints(what: &str, script: &str, expected: &[String], home: &Path) -> String {
    let started = std::time::Instant::now();
    let found = wait_until(SOON_ON_A_NODE, || async {
        let output = shell(script, home);
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        (output.status.success() && expected.iter().all(|line| stdout.contains(line.as_str()))).then_some(stdout)
    })
    .await;
    println!("{what}: printed as the README says after {:.1} s", started.elapsed().as_secs_f64());
    found.unwrap_or_else(|| {
        let output = shell(script, home);
        let state = shell(
            &format!(
                "kubectl get pods -n {RELEASE} -o wide; kubectl get events -n {RELEASE}; \
                 kubectl logs -n {RELEASE} deploy/{RELEASE} --tail=20 || true"
            ),
            home,
        );
        panic!(
            "{what} never printed {expected:?}; last:\n{}\n{}\nthe release:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
            String::from_utf8_lossy(&state.stdout),
            String::from_utf8_lossy(&state.stderr)
        )
    })
}

/// Step 1's stand-in: the image `docker build` would make, loaded into the node; and crane's, for registries.
/// Once for every part of the walk.
fn load_images() -> Image {
    static CRANE: std::sync::OnceLock<Image> = std::sync::OnceLock::new();
    CRANE.get_or_init(import_images).clone()
}

fn import_images() -> Image {
    let node = plane().real_node().expect("a real node");
    let controller = Image {
        name: "docker.io/library/local-registry-publisher".into(),
        layout: root().join("target/image/local-registry-publisher"),
        archive: root().join("target/image/local-registry-publisher.tar"),
        compressed_size: 0,
    };
    assert!(
        controller.archive.exists(),
        "{} is missing: run `make image` (make test does)",
        controller.archive.display()
    );
    node.import(&controller).expect("import the controller image");
    let crane = testbed::node::crane_image(plane().tools(), &plane().dir().join("images")).expect("crane image");
    node.import(&crane).expect("import the crane image");
    crane
}

/// A registry pod behind a NodePort Service `name` in a new namespace `ns`, at port 5000 and `node_port`.
/// The registry Service `ns/name` at `node_port`; with `cluster_ip`, at that ClusterIP (the Quick start's example
/// address, pinned as its nodePort is), else at one the API server assigns.
async fn nodeport_registry(
    client: &kube::Client,
    crane: &Image,
    ns: &str,
    name: &str,
    node_port: i32,
    cluster_ip: Option<&str>,
) {
    ok(support::tool(plane(), "kubectl", &["create", "namespace", ns]));
    let registry = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{
                "name": "registry", "image": crane.name, "imagePullPolicy": "Never",
                "args": ["registry", "serve", "--address", ":5000"],
                "ports": [{"name": "registry", "containerPort": 5000}]}]}}}});
    apply_in(client, ns, registry).await;
    let mut service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"type": "NodePort", "selector": {"app": name},
            "ports": [{"name": "registry", "port": 5000, "nodePort": node_port}]}});
    if let Some(ip) = cluster_ip {
        service["spec"]["clusterIP"] = json!(ip);
    }
    apply_in(client, ns, service).await;
}

/// A ConfigMap as the cluster's own script or addon writes it, which the row's takeOver replaces.
async fn scripted_configmap(client: &kube::Client, document: &str) {
    let configmap = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "local-registry-hosting"},
        "data": {"localRegistryHosting.v1": document}});
    apply_in(client, "kube-public", configmap).await;
}

/// The row's install command, with the Quick start's command where the row writes `helm install ...`.
fn install_command(row: &[String], quick_install: &str) -> String {
    let install = spans(&row[1]).into_iter().find(|s| s.starts_with("helm install ...")).expect("an install command");
    install.replacen("helm install ...", quick_install.trim(), 1)
}

/// The published document the row promises, one `field: "value"` line each.
fn promised(row: &[String]) -> Vec<String> {
    spans(&row[3]).into_iter().filter(|s| s.contains(": \"")).collect()
}

/// The ClusterIP the Quick start's example output shows for the registry Service (in the lower band of the test
/// cluster's Service range, which the API server hands out only once the upper band is full).
const QUICK_START_CLUSTER_IP: &str = "10.96.0.12";

const PUBLISHED: &str =
    "kubectl get configmap -n kube-public local-registry-hosting -o jsonpath='{.data.localRegistryHosting\\.v1}'";

fn uninstall(home: &Path) {
    let started = std::time::Instant::now();
    as_written("uninstall", &format!("helm uninstall {RELEASE} -n {RELEASE} --wait --timeout 180s"), home);
    println!("helm uninstall took {:.1} s", started.elapsed().as_secs_f64());
}

/// One walk at a time: every part of the README installs the same release and publishes the same ConfigMap.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What every part of the walk starts from: a cluster with the images loaded (step 1's stand-in) and nothing left
/// by another part (a failed one may have left its release, registry or addon objects), and a user's home.
struct Walk {
    client: kube::Client,
    home: std::path::PathBuf,
    readme: String,
    crane: Image,
    _alone: tokio::sync::MutexGuard<'static, ()>,
}

impl Walk {
    async fn start() -> Self {
        let alone = ONE_AT_A_TIME.lock().await;
        let plane = plane();
        let client = plane.client().await.expect("admin client");
        let home = plane.dir().join("readme-home");
        std::fs::create_dir_all(&home).unwrap();
        let crane = load_images();
        let node = plane.real_node().expect("a real node").name().to_string();
        let leftovers = format!(
            "helm uninstall {RELEASE} -n {RELEASE} --wait --timeout 180s 2>/dev/null || true\n\
             kubectl delete namespace registry container-registry --ignore-not-found --wait\n\
             kubectl delete -n kube-system service/registry daemonset/registry-proxy --ignore-not-found --wait\n\
             kubectl delete -n kube-public configmap/local-registry-hosting --ignore-not-found\n\
             kubectl label node {node} microk8s.io/cluster- >/dev/null 2>&1 || true\n"
        );
        as_written("clearing what another part left", &leftovers, &home);
        Self { client, home, readme: readme(), crane, _alone: alone }
    }

    fn quick_start(&self) -> Vec<String> {
        let sh = blocks(&section(&self.readme, "Quick start"), "sh");
        assert_eq!(sh.len(), 6, "the Quick start's shell blocks changed: {sh:#?}");
        sh
    }

    /// The Quick start's checkout install, which each row's command extends.
    fn checkout_install(&self) -> String {
        let install = self.quick_start()[1].clone();
        assert!(install.starts_with("helm install "), "{install}");
        install
    }

    /// The user's registry (Service registry/registry, NodePort 30500 at the Quick start's example ClusterIP), then
    /// steps 2 to 4 as written.
    async fn quick_start_registry_and_steps_2_to_4(&self) {
        let sh = self.quick_start();
        nodeport_registry(&self.client, &self.crane, "registry", "registry", 30500, Some(QUICK_START_CLUSTER_IP)).await;
        for (what, script) in [("step 2", &sh[2]), ("step 3", &sh[3]), ("step 4", &sh[4])] {
            as_written(what, script, &self.home);
        }
        let cli = self.home.join(".local/bin/local-registry-publisher");
        assert!(cli.exists(), "make install put the CLI in ~/.local/bin");
    }

    /// Step 5 as written, until it prints the Quick start's example output.
    async fn step_5(&self, what: &str) {
        let quick = section(&self.readme, "Quick start");
        let example = blocks(&quick, "yaml")[0].clone();
        let expected: Vec<String> = example.lines().map(str::to_string).collect();
        let printed = until_it_prints(what, &self.quick_start()[5], &expected, &self.home).await;
        assert!(printed.starts_with(example.trim_end()), "{printed}");
    }

    /// A per-cluster row: its install command as written, then its promised document, `expected` once placeholders
    /// are filled in (or as the row writes it).
    async fn row(&self, cluster: &str, expected: impl FnOnce(&[String]) -> Vec<String>) -> Vec<String> {
        let row = row(&section(&self.readme, "Per cluster"), cluster);
        as_written(
            &format!("the {cluster} row's install"),
            &install_command(&row, &self.checkout_install()),
            &self.home,
        );
        let wanted = expected(&row);
        until_it_prints(&format!("the {cluster} row's document"), PUBLISHED, &wanted, &self.home).await;
        uninstall(&self.home);
        row
    }
}

#[tokio::test]
async fn the_quick_start_installs_a_release_from_its_registry_and_prints_what_it_says() {
    let walk = Walk::start().await;
    walk.quick_start_registry_and_steps_2_to_4().await;
    // Step 1 from a release: what the release workflow pushes to ghcr.io, pushed to the cluster's registry instead.
    let release = &walk.quick_start()[0];
    assert!(release.starts_with("helm install ") && release.contains("oci://ghcr.io/<owner>/"), "{release}");
    let on_node = publish_release("localhost:30500");
    let from_registry = release.replace("ghcr.io/<owner>", "localhost:30500").trim_end().to_string() + " --plain-http";
    as_written_on_node("step 1 from a release", &from_registry, &walk.home);
    walk.step_5("step 5 after a release install").await;
    let image = ok(support::tool(
        plane(),
        "kubectl",
        &["get", "deploy", "-n", RELEASE, RELEASE, "-o", "jsonpath={.spec.template.spec.containers[0].image}"],
    ));
    assert_eq!(image, format!("{on_node}:{}", env!("CARGO_PKG_VERSION")), "the release's chart names its image");
    uninstall(&walk.home);
}

#[tokio::test]
async fn the_quick_start_installs_from_the_checkout_and_prints_what_it_says() {
    let walk = Walk::start().await;
    walk.quick_start_registry_and_steps_2_to_4().await;
    as_written("step 1 from the checkout", &walk.checkout_install(), &walk.home);
    walk.step_5("step 5 after a checkout install").await;
    uninstall(&walk.home);
}

#[tokio::test]
async fn the_kind_row_takes_over_kinds_scripted_configmap_as_written() {
    // kind's local-registry script wrote its ConfigMap and runs its registry container; the row's flags do the rest.
    let walk = Walk::start().await;
    scripted_configmap(
        &walk.client,
        "host: \"localhost:5001\"\nhelp: \"https://kind.sigs.k8s.io/docs/user/local-registry/\"\n",
    )
    .await;
    walk.row("kind with its local-registry script", promised).await;
}

#[tokio::test]
async fn the_k3d_row_takes_over_k3ds_configmap_as_written() {
    // k3d: its ConfigMap with the values its comments give for k3d, as a user edits it.
    let walk = Walk::start().await;
    scripted_configmap(
        &walk.client,
        "host: \"k3d-registry.localhost:5111\"\nhostFromContainerRuntime: \"k3d-registry:5000\"\n",
    )
    .await;
    walk.row("k3d", promised).await;
}

#[tokio::test]
async fn the_minikube_row_publishes_the_registry_addon_as_written() {
    // minikube's registry addon: Service kube-system/registry behind the registry-proxy DaemonSet's hostPort 5000;
    // the row's `<minikube ip>` is the node's address.
    let walk = Walk::start().await;
    let proxy = json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "registry-proxy"},
        "spec": {"selector": {"matchLabels": {"registry-proxy": "true"}},
            "template": {"metadata": {"labels": {"registry-proxy": "true"}}, "spec": {"containers": [{
                "name": "registry", "image": walk.crane.name, "imagePullPolicy": "Never",
                "args": ["registry", "serve", "--address", ":80"],
                "ports": [{"name": "registry", "containerPort": 80, "hostPort": 5000}]}]}}}});
    apply_in(&walk.client, "kube-system", proxy).await;
    let addon = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "registry"},
        "spec": {"selector": {"registry-proxy": "true"}, "ports": [{"name": "http", "port": 80, "targetPort": 80}]}});
    apply_in(&walk.client, "kube-system", addon).await;
    let ip = support::cluster_ip(&walk.client, "kube-system", "registry").await;
    let node_ip = plane().real_node().expect("a real node").network().node_ip.to_string();
    let fill = |line: &String| line.replace("<its ClusterIP>", &ip).replace("<minikube ip>", &node_ip);
    walk.row("minikube", |row| promised(row).iter().map(fill).collect()).await;
    as_written("cleanup", "kubectl delete -n kube-system service/registry daemonset/registry-proxy", &walk.home);
}

#[tokio::test]
async fn the_microk8s_row_publishes_the_registry_addon_as_written() {
    // MicroK8s's registry addon: a NodePort Service container-registry/registry at 32000, the addon's own
    // ConfigMap, and MicroK8s's label on the node.
    let walk = Walk::start().await;
    let node = plane().real_node().expect("a real node").name().to_string();
    ok(support::tool(plane(), "kubectl", &["label", "node", &node, "microk8s.io/cluster=true"]));
    nodeport_registry(&walk.client, &walk.crane, "container-registry", "registry", 32000, None).await;
    scripted_configmap(
        &walk.client,
        "host: \"localhost:32000\"\nhelp: \"https://microk8s.io/docs/registry-built-in\"\n",
    )
    .await;
    let ip = support::cluster_ip(&walk.client, "container-registry", "registry").await;
    walk.row("MicroK8s", |row| promised(row).iter().map(|line| line.replace("<its ClusterIP>", &ip)).collect()).await;
    ok(support::tool(plane(), "kubectl", &["label", "node", &node, "microk8s.io/cluster-"]));
}
