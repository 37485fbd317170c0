//! What differs between containerd releases in how they read `config_path`, proven on a real node running each
//! (`LRP_CONTAINERD`), with the agent judging it as the node's release does:
//! - a list naming the agent's directory: 1.7 and 2.0 split it and read the agent's files; 2.1 and later pull
//!   through the transfer service, which takes the list as one directory name (containerd#12808);
//! - none set, with kind's `discard_unpacked_layers` (which forces the local pull): 2.2 and later read
//!   `/etc/containerd/certs.d` by default; 1.7 reads no hosts directory.
//!
//! A pull of the registry's ClusterIP that misses the agent's file goes to HTTPS and fails. Its own control plane:
//! the tests restart the node's containerd with their config, one at a time, which other real-node tests do not
//! expect.

mod support;

use k8s_openapi::api::core::v1::Pod;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use kube::Client;
use kube::api::Api;
use local_registry_publisher::agent::runtime::NodeRuntime;
use local_registry_publisher::agent::runtime::conformance::{self, ContainerdFiles, Fixture, Read};
use local_registry_publisher::node::api::state::{NodePullState, Verdict};
use serde_json::json;
use testbed::ControlPlane;

use support::SOON_ON_A_NODE;
use support::agent::{ALL_WELL, SOMETHING_WRONG, own_image, push, values, wait_doctor, wait_file};
use support::{apply_in, cluster_ip, ok, wait_until};

fn plane() -> &'static ControlPlane {
    ControlPlane::shared_with_real_node()
}

/// One test at a time owns the node's containerd config (and its restarts).
static NODE_CONFIG: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Restarts the node's containerd with `edit` of the config the testbed wrote.
async fn containerd_with(edit: impl FnOnce(&str) -> String) {
    static PRISTINE: OnceLock<String> = OnceLock::new();
    let plane = plane();
    plane
        .reconfigure_containerd(|current| edit(PRISTINE.get_or_init(|| current.to_string())))
        .await
        .expect("containerd restarted with the test's config");
}

async fn phase(client: &Client, ns: &str, pod: &str) -> String {
    let pod = Api::<Pod>::namespaced(client.clone(), ns).get_opt(pod).await.ok().flatten();
    pod.and_then(|p| p.status?.phase).unwrap_or_default()
}

/// Pushes an image to the registry at `address` and starts a pod of it: `Ok` once it runs, `Err` with the kubelet's
/// words once its pull was refused because containerd went to HTTPS (it missed the agent's file).
async fn pull(client: &Client, ns: &str, address: &str) -> Result<(), String> {
    let plane = plane();
    let node = plane.real_node().expect("the real node");
    let image = format!("{address}/{ns}/app:1");
    push(plane, Some(node), &own_image(plane, ns), &image, None);
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pull"},
        "spec": {"containers": [{"name": "app", "image": image}]}});
    apply_in(client, ns, pod).await;
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let outcome = wait_until(SOON_ON_A_NODE, || async {
        if phase(client, ns, "pull").await == "Running" {
            return Some(Ok(()));
        }
        let pod = pods.get_opt("pull").await.ok()??;
        let statuses = pod.status?.container_statuses?;
        let message = statuses.first()?.state.as_ref()?.waiting.as_ref()?.message.clone()?;
        message.contains("server gave HTTP response to HTTPS client").then_some(Err(message))
    })
    .await;
    outcome.unwrap_or_else(|| panic!("the pod in {ns} neither ran nor was refused"))
}

#[tokio::test]
async fn a_config_path_list_naming_the_agents_directory_is_read_by_1_7_and_taken_as_one_name_from_2_1() {
    let _config = NODE_CONFIG.lock().await;
    let plane = plane();
    let node = plane.real_node().expect("the real node");
    let client = plane.client().await.expect("admin client");
    // The list an admin might write to keep Docker's directory too: the agent's is its second entry.
    let ours = node.config_path_on_node();
    let line = format!("config_path = \"{ours}\"");
    containerd_with(|config| config.replace(&line, &format!("config_path = \"/etc/docker/certs.d:{ours}\""))).await;
    node.import(&support::controller_image()).expect("import the controller image");
    let ns = plane.namespace(&client, "cfglist").await.expect("namespace");
    support::agent::registry(plane, &client, &ns, node).await;
    support::agent::helm(plane, "install", "cfglist", &ns, &values(&ns, node, &[]));
    let address = format!("{}:5000", cluster_ip(&client, &ns, "registry").await);
    wait_file(node, &address, true, "agent on").await;

    let release = node.containerd_release().minor.clone();
    let pulled = pull(&client, &ns, &address).await;
    if release.starts_with("1.") {
        assert_eq!(pulled, Ok(()), "containerd {release} splits the list and pulls through the agent's file");
        let report =
            wait_doctor(plane, &ns, ALL_WELL, |r| r.contains(&format!("node {}: configured by", node.name()))).await;
        assert!(!report.contains("one directory name"), "{report}");
    } else {
        assert!(pulled.is_err(), "containerd {release} takes the list as one name and reads nothing");
        let report = wait_doctor(plane, &ns, SOMETHING_WRONG, |r| r.contains("ConfigPathMismatch: ")).await;
        let told = format!("a list that containerd {release} takes as one directory name");
        assert!(report.contains(&told) && report.contains("containerd#12808"), "{report}");
    }
    support::agent::helm_uninstall(plane, "cfglist", &ns);
    wait_file(node, &address, false, "after uninstall").await;
    plane.delete_namespace(&client, &ns).await.expect("delete namespace");
}

#[tokio::test]
async fn with_no_config_path_kinds_nodes_read_etc_containerd_certs_d_from_2_2_and_no_directory_on_1_7() {
    let _config = NODE_CONFIG.lock().await;
    let plane = plane();
    let node = plane.real_node().expect("the real node");
    let client = plane.client().await.expect("admin client");
    let release = node.containerd_release().clone();
    // kind's shape: no config_path, and discard_unpacked_layers, which makes 2.1 and later pull locally.
    let line = format!("config_path = \"{}\"", node.config_path_on_node());
    let local_pull = if release.config_version() == 2 {
        "\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  discard_unpacked_layers = true\n"
    } else {
        "\n[plugins.'io.containerd.cri.v1.images']\n  discard_unpacked_layers = true\n"
    };
    containerd_with(|config| format!("{}{local_pull}", config.replace(&line, ""))).await;
    node.import(&support::controller_image()).expect("import the controller image");
    let ns = plane.namespace(&client, "cfgunset").await.expect("namespace");
    support::agent::registry(plane, &client, &ns, node).await;
    // The node's own /etc (an overlay of the machine's), as on a kind node.
    let default = "/etc/containerd/certs.d";
    let mut values = values(&ns, node, &[]);
    values.retain(|v| !v.starts_with("nodeAgent.configPath="));
    values.push(format!("nodeAgent.configPath={default}"));
    support::agent::helm(plane, "install", "cfgunset", &ns, &values);
    let address = format!("{}:5000", cluster_ip(&client, &ns, "registry").await);
    let file = node.path_on_node(&format!("{default}/{address}/hosts.toml"));
    let written = wait_until(SOON_ON_A_NODE, || async { file.exists().then_some(()) }).await;
    assert!(written.is_some(), "the agent wrote nothing into the node's {default}");

    let pulled = pull(&client, &ns, &address).await;
    if release.minor.starts_with("1.") {
        assert!(pulled.is_err(), "containerd {} reads no hosts directory when none is set", release.minor);
        let report = wait_doctor(plane, &ns, SOMETHING_WRONG, |r| r.contains("ConfigPathMismatch: ")).await;
        assert!(report.contains("sets no registry config_path, so it never reads /etc/containerd/certs.d"), "{report}");
    } else {
        assert_eq!(pulled, Ok(()), "containerd {} reads its default directory", release.minor);
        let report =
            wait_doctor(plane, &ns, ALL_WELL, |r| r.contains(&format!("node {}: configured by", node.name()))).await;
        assert!(!report.contains("ConfigPathMismatch"), "{report}");
    }
    support::agent::helm_uninstall(plane, "cfgunset", &ns);
    let removed = wait_until(SOON_ON_A_NODE, || async { (!file.exists()).then_some(()) }).await;
    assert!(removed.is_some(), "the node's {default}/{address} outlived the release");
    plane.delete_namespace(&client, &ns).await.expect("delete namespace");
}

async fn running(client: &Client, ns: &str, pod: &str) -> bool {
    wait_until(SOON_ON_A_NODE, || async { (phase(client, ns, pod).await == "Running").then_some(()) }).await.is_some()
}

/// A registry on the node's own IPv6 loopback (a host-network pod serving `[::1]:5555`), holding `image`.
async fn ipv6_loopback_registry(client: &Client, ns: &str, image: &str) {
    let plane = plane();
    let node = plane.real_node().expect("the real node");
    let crane = testbed::node::crane_image(plane.tools(), &plane.dir().join("images")).expect("crane image");
    node.import(&crane).expect("import the crane image");
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ipv6-registry"},
        "spec": {"hostNetwork": true, "nodeSelector": {"kubernetes.io/hostname": node.name()},
            "containers": [{"name": "registry", "image": crane.name, "imagePullPolicy": "Never",
                "args": ["registry", "serve", "--address", "[::1]:5555"]}]}});
    apply_in(client, ns, pod).await;
    push(plane, Some(node), &own_image(plane, ns), &format!("[::1]:5555/{image}"), None);
}

#[tokio::test]
async fn an_ipv6_host_entry_is_pulled_through_from_2_0_and_on_1_7_is_neither_readable_nor_written() {
    // The node's own config, which reads the agent's directory (another test may have left its own).
    let _config = NODE_CONFIG.lock().await;
    containerd_with(str::to_string).await;
    let plane = plane();
    let node = plane.real_node().expect("the real node");
    let client = plane.client().await.expect("admin client");
    let release = node.containerd_release().minor.clone();
    node.import(&support::controller_image()).expect("import the controller image");
    let ns = plane.namespace(&client, "cfgipv6").await.expect("namespace");
    ipv6_loopback_registry(&client, &ns, "ipv6/app:1").await;

    // containerd itself: a hosts.toml whose host is an IPv6 literal, written by hand for a name nothing resolves.
    let by_hand = node.hosts_dir().join("by-hand.ipv6.test");
    std::fs::create_dir_all(&by_hand).expect("a hosts directory");
    std::fs::write(
        by_hand.join("hosts.toml"),
        "[host.\"http://[::1]:5555\"]\n  capabilities = [\"pull\", \"resolve\"]\n",
    )
    .expect("a hosts.toml");
    let pod = |name: &str, image: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node.name()},
                "containers": [{"name": "app", "image": image}]}})
    };
    apply_in(&client, &ns, pod("by-hand", "by-hand.ipv6.test/ipv6/app:1")).await;
    // The agent: the admin's mirror of a name nothing resolves, at the same IPv6 endpoint.
    support::agent::registry(plane, &client, &ns, node).await;
    let mirror =
        ["nodeAgent.mirrors[0].upstream=mirrored.ipv6.test", "nodeAgent.mirrors[0].endpoint=http://[::1]:5555"];
    support::agent::helm(plane, "install", "cfgipv6", &ns, &values(&ns, node, &mirror));
    let states = Api::<NodePullState>::namespaced(client.clone(), &ns);
    let verdict = wait_until(SOON_ON_A_NODE, || async {
        let state = states.get_opt(node.name()).await.ok()??;
        let address = state.status?.addresses.into_iter().find(|a| a.address == "mirrored.ipv6.test")?;
        Some((address.verdict, address.message))
    })
    .await
    .expect("the agent's verdict on the mirror");
    apply_in(&client, &ns, pod("mirrored", "mirrored.ipv6.test/ipv6/app:1")).await;

    if release.starts_with("1.") {
        // 1.7 drops the file it cannot parse and resolves the name itself, which fails.
        let failed = wait_until(SOON_ON_A_NODE, || async {
            let pod = Api::<Pod>::namespaced(client.clone(), &ns).get_opt("by-hand").await.ok()??;
            let status = pod.status?.container_statuses?.into_iter().next()?;
            status.state?.waiting?.message.filter(|m| m.contains("by-hand.ipv6.test"))
        })
        .await;
        assert!(failed.is_some(), "containerd {release} pulled through an IPv6 host entry");
        assert_eq!(verdict.0, Verdict::Failed, "{verdict:?}");
        assert!(verdict.1.is_some_and(|why| why.contains("cannot read a hosts.toml whose host is an IPv6 address")));
        assert!(!node.hosts_dir().join("mirrored.ipv6.test").exists(), "a file 1.7 cannot read was written");
    } else {
        assert!(running(&client, &ns, "by-hand").await, "containerd {release} pulls through an IPv6 host entry");
        assert_eq!(verdict.0, Verdict::Configured, "{verdict:?}");
        let through_mirror = running(&client, &ns, "mirrored").await;
        assert!(through_mirror, "containerd {release} pulls through the agent's IPv6 mirror entry");
    }
    std::fs::remove_dir_all(&by_hand).expect("remove the hand-written directory");
    support::agent::helm_uninstall(plane, "cfgipv6", &ns);
    plane.delete_namespace(&client, &ns).await.expect("delete namespace");
}

/// The runtime conformance suite (src/agent/runtime/conformance.rs), judged by the node's own containerd instead of
/// by reading the files back: for each address, the hosts its resolver tries, in order, when pulling from it, and
/// the CA file it loads. `ctr images pull --local --hosts-dir <the case's directory>` resolves in ctr's process
/// with the release's own hosts-directory code (the same the CRI plugin reads `config_path` with), in a network
/// namespace of its own, where every dial fails at once and its debug log names each URL tried.
#[tokio::test]
async fn the_runtime_conformance_suite_holds_as_the_nodes_containerd_reads_the_files() {
    let _config = NODE_CONFIG.lock().await;
    let node = plane().real_node().expect("the real node");
    let loadable_ca = testbed::private_tls(&["conformance.example"]).expect("a CA").ca;
    conformance::run(&NodeContainerd { node, loadable_ca });
}

struct NodeContainerd {
    node: &'static testbed::RealNode,
    /// A certificate containerd can load, put where a case's CA (not a real certificate) was, once it is read.
    loadable_ca: String,
}

impl NodeContainerd {
    /// ctr's debug log of pulling `<address>/conformance/probe:1` with `hosts_dir`.
    fn pull_log(&self, hosts_dir: &Path, address: &str) -> String {
        let output = Command::new("unshare")
            .args(["--net", "--", "timeout", "60"])
            .arg(self.node.ctr_binary())
            .arg("--address")
            .arg(self.node.containerd_socket())
            .args(["--debug", "images", "pull", "--local", "--hosts-dir"])
            .arg(hosts_dir)
            .arg(format!("{address}/conformance/probe:1"))
            .output()
            .expect("run ctr in a network namespace of its own (unshare)");
        assert!(!output.status.success(), "nothing can be pulled without a network: {output:?}");
        String::from_utf8_lossy(&output.stderr).into_owned()
    }
}

impl Fixture for NodeContainerd {
    fn runtime(&self, dir: &Path, plan: &str) -> Box<dyn NodeRuntime> {
        ContainerdFiles.runtime(dir, plan)
    }

    fn plant_foreign(&self, dir: &Path, address: &str) {
        ContainerdFiles.plant_foreign(dir, address);
    }

    fn reads(&self, dir: &Path, address: &str) -> Option<Read> {
        // A copy, so a CA containerd refuses can be swapped for one it loads without touching the case's files.
        let copy = dir.with_extension("read");
        let _ = std::fs::remove_dir_all(&copy);
        ok(Command::new("cp").arg("-a").arg(dir).arg(&copy).output().expect("cp"));
        let mut ca = None;
        let log = loop {
            let log = self.pull_log(&copy, address);
            // ctr's own error line quotes the path; its debug log escapes those quotes.
            let named = log.split("unable to load CA cert ").nth(1).map(|rest| {
                let path = rest.trim_start_matches(['\\', '"']);
                path.split(['"', '\\']).next().unwrap_or_default().to_string()
            });
            let Some(path) = named else { break log };
            assert!(ca.is_none(), "a second CA for {address}: {path}\n{log}");
            let relative = Path::new(&path).strip_prefix(&copy).expect("a CA in the hosts directory");
            let pem = std::fs::read_to_string(dir.join(relative)).expect("the CA containerd named");
            ca = Some(conformance::certificates(&pem));
            std::fs::write(&path, &self.loadable_ca).expect("a loadable CA in the copy");
        };
        let _ = std::fs::remove_dir_all(&copy);
        // Each request's URL, its scheme and host kept, in the order tried (the last host is tried again on a
        // transient error).
        let mut tried: Vec<String> = Vec::new();
        for line in log.lines().filter(|l| l.contains("msg=\"do request\"")) {
            let url = line.split(" url=").nth(1).expect("the URL of a request").trim_start_matches('"');
            let (scheme, rest) = url.split_once("://").expect("an absolute URL");
            let host = format!("{scheme}://{}", rest.split('/').next().unwrap_or_default());
            if tried.last() != Some(&host) {
                tried.push(host);
            }
        }
        assert!(!tried.is_empty(), "containerd tried no host for {address}:\n{log}");
        let itself = format!("https://{address}");
        let default = if address == "docker.io" { "https://registry-1.docker.io".to_string() } else { itself.clone() };
        if tried == [default] && ca.is_none() {
            return None;
        }
        let server = tried.last().filter(|last| tried.len() > 1 && **last != itself).cloned();
        Some(Read { endpoint: tried[0].clone(), ca, server })
    }
}
