//! The chart's NetworkPolicies enforced on the real node by a real enforcer: kube-router's firewall (iptables and
//! ipset), built from its pinned module into the tool cache and run by this test only. SIG Network's
//! kube-network-policies would be the reference enforcer, but it hands packets to user space through nftables'
//! `queue`, which this machine's kernel lacks.

use super::*;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use std::process::{Child, Stdio};

/// kube-router's NetworkPolicy firewall in the real node's network namespace, stopped when dropped.
struct Firewall(Child);

impl Firewall {
    fn start() -> Self {
        let binary = plane().tools().join("kube-router");
        assert!(binary.is_file(), "{} is missing: run hack/tools.sh kube-router", binary.display());
        let log = std::fs::File::create(plane().dir().join("kube-router.log")).expect("kube-router's log");
        let child = node()
            .command(&binary)
            .args(["--run-firewall=true", "--run-router=false", "--run-service-proxy=false", "--enable-cni=false"])
            .arg(format!("--hostname-override={}", node().name()))
            .arg(format!("--kubeconfig={}", plane().kubeconfig().display()))
            .arg(format!("--service-cluster-ip-range={}", testbed::SERVICE_CIDR))
            .args(["--health-port=0", "--metrics-port=0"])
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start kube-router");
        Self(child)
    }
}

impl Drop for Firewall {
    /// The node and its pod addresses outlive this test: emptying kube-router's three entry chains leaves its
    /// per-pod chains unreachable, so a later pod given one of this test's addresses is not filtered by them.
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        for chain in ["KUBE-ROUTER-INPUT", "KUBE-ROUTER-FORWARD", "KUBE-ROUTER-OUTPUT"] {
            let _ = node().command("iptables").args(["-F", chain]).output();
        }
    }
}

/// curl and the libraries it links, imported into the node: an HTTP client in the pod network.
fn curl_image() -> &'static Image {
    static CURL: OnceLock<Image> = OnceLock::new();
    CURL.get_or_init(|| {
        let curl = PathBuf::from("/usr/bin/curl");
        let mut files = vec![("/curl".to_string(), curl.clone())];
        let libraries = xtask::image::linked_libraries(&curl).expect("ldd /usr/bin/curl");
        files.extend(libraries.into_iter().map(|library| (library.display().to_string(), library)));
        let spec = xtask::image::ImageSpec {
            name: "testbed.local/curl:1".into(),
            files,
            entrypoint: vec!["/curl".into()],
            ..Default::default()
        };
        let image = spec.write(&plane().dir().join("images"), "curl").expect("write the curl image");
        node().import(&image).expect("import the curl image");
        image
    })
}

/// What one request from a pod got, as curl wrote it: the HTTP status ("000" when nothing answered), the URL, and
/// curl's error.
#[derive(Debug)]
struct Answer(String);

impl Answer {
    fn code(&self) -> &str {
        self.0.split_whitespace().next().unwrap_or_default()
    }

    fn url(&self) -> &str {
        self.0.split_whitespace().nth(1).unwrap_or_default()
    }

    fn answered(&self) -> bool {
        self.code() != "000"
    }
}

/// The last answer a request to `url` got.
fn last<'a>(answers: &'a [Answer], url: &str) -> &'a Answer {
    let found = answers.iter().rev().find(|a| a.url().starts_with(url));
    found.unwrap_or_else(|| panic!("no request to {url} in {answers:?}"))
}

/// Runs curl in a pod labelled `labels` on the real node: each URL asked the given number of times, in order, two
/// requests a second, each bounded by 3 s. A pod's first requests may go out before the enforcer has seen the pod,
/// so only the last answers tell what a policy does to it. Returns every answer; the pod is deleted.
async fn requests_from_pod(client: &Client, ns: &str, labels: serde_json::Value, urls: &[(&str, u32)]) -> Vec<Answer> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    // A connection per request: one opened before the enforcer saw the pod would stay allowed.
    let format = ["-w", "%{http_code} %{url} %{errormsg}\\n"];
    let mut args: Vec<String> = ["-sk", "--max-time", "3", "--rate", "2/s", "-H", "Connection: close"]
        .into_iter()
        .chain(format)
        .map(String::from)
        .collect();
    for (url, tries) in urls {
        // curl's URL globbing: `?try=[1-N]` is N requests.
        args.extend(["-o".into(), "/dev/null".into(), format!("{url}?try=[1-{tries}]")]);
    }
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "curl", "labels": labels},
        "spec": {"restartPolicy": "Never", "nodeName": node().name(),
            "containers": [{"name": "curl", "image": curl_image().name, "imagePullPolicy": "Never", "args": args}]}});
    apply_in(client, ns, pod).await;
    wait_phase(client, ns, "curl", &["Succeeded", "Failed"]).await;
    let log = pods.logs("curl", &LogParams::default()).await.expect("curl's log");
    pods.delete("curl", &kube::api::DeleteParams::default().grace_period(0)).await.expect("delete the curl pod");
    let gone = wait_until(SOON_ON_A_NODE, || async { pods.get_opt("curl").await.ok()?.is_none().then_some(()) }).await;
    assert!(gone.is_some(), "the curl pod in {ns} was not deleted");
    let answers: Vec<Answer> = log.lines().map(|line| Answer(line.to_string())).collect();
    let asked: u32 = urls.iter().map(|(_, tries)| tries).sum();
    assert_eq!(answers.len(), asked as usize, "one line per request: {log}");
    answers
}

/// Runs [`requests_from_pod`] until `done` holds for what it got (kube-router programs a pod's rules a moment after
/// it sees the pod); fails with the last answers otherwise.
async fn wait_requests(
    client: &Client,
    ns: &str,
    labels: serde_json::Value,
    urls: &[(&str, u32)],
    what: &str,
    done: impl Fn(&[Answer]) -> bool,
) -> Vec<Answer> {
    let mut answers = Vec::new();
    let started = std::time::Instant::now();
    while started.elapsed() < SOON_ON_A_NODE {
        answers = requests_from_pod(client, ns, labels.clone(), urls).await;
        if done(&answers) {
            return answers;
        }
    }
    panic!("{what}: the last requests got {answers:?}");
}

/// The API server's endpoint addresses as pods reach them, as `<ip>/32`, and its port.
async fn api_server_endpoint(client: &Client) -> (Vec<String>, i32) {
    let slices = Api::<k8s_openapi::api::discovery::v1::EndpointSlice>::namespaced(client.clone(), "default");
    let slice = slices.get("kubernetes").await.expect("the API server's own EndpointSlice");
    let addresses =
        slice.endpoints.iter().flatten().flat_map(|e| e.addresses.iter().map(|a| format!("{a}/32"))).collect();
    let port = slice.ports.as_deref().and_then(|p| p.first()?.port).expect("the API server's port");
    (addresses, port)
}

/// The opt-in NetworkPolicies under a real enforcer: the controller still publishes and the agent still writes
/// (their only connections are to the API server, which the policies name as the `kubernetes` EndpointSlices say),
/// a pod selected like the controller reaches the API server and nothing else, and the probe and metrics port
/// answers the pods `networkPolicy.metricsFrom` names and refuses another one.
#[tokio::test]
async fn under_the_charts_network_policies_the_controller_publishes_the_agent_writes_and_only_named_pods_scrape() {
    let plane = plane();
    let client = plane.client().await.expect("admin client");
    images();
    curl_image();
    let _firewall = Firewall::start();
    let ns = plane.namespace(&client, "netpol").await.expect("namespace");
    clusterip_registry(&client, &ns, json!({})).await;
    // The API server's addresses and port are left to the chart, which reads them at install: from the API server's
    // own slice alone, not from another one labelled for its Service (a decoy address and port it must not open).
    let decoy = format!("decoy-{ns}");
    let slice = json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": decoy, "labels": {"kubernetes.io/service-name": "kubernetes"}},
        "addressType": "IPv4", "endpoints": [{"addresses": ["10.99.99.99"]}],
        "ports": [{"name": "https", "port": 7443, "protocol": "TCP"}]});
    apply_in(&client, "default", slice).await;
    let values = support::agent::values(
        &ns,
        node(),
        &["networkPolicy.enabled=true", "networkPolicy.metricsFrom[0].podSelector.matchLabels.role=scraper"],
    );
    support::agent::helm(plane, "install", "netpol", &ns, &values);

    support::delete_in(&client, "default", "discovery.k8s.io/v1", "EndpointSlice", &decoy).await;
    let (addresses, port) = api_server_endpoint(&client).await;
    let policies = Api::<NetworkPolicy>::namespaced(client.clone(), &ns).list(&Default::default()).await;
    let policies = policies.expect("list NetworkPolicies").items;
    let names: BTreeSet<_> = policies.iter().filter_map(|p| p.metadata.name.clone()).collect();
    assert_eq!(
        names,
        BTreeSet::from([
            "netpol-local-registry-publisher".to_string(),
            "netpol-local-registry-publisher-node-agent".to_string()
        ])
    );
    for policy in &policies {
        let egress = policy.spec.as_ref().and_then(|s| s.egress.clone()).unwrap_or_default();
        let to: Vec<_> = egress
            .iter()
            .flat_map(|rule| rule.to.iter().flatten())
            .filter_map(|peer| peer.ip_block.as_ref())
            .map(|b| b.cidr.clone())
            .collect();
        let ports: Vec<_> =
            egress.iter().flat_map(|rule| rule.ports.iter().flatten()).filter_map(|p| p.port.clone()).collect();
        assert_eq!(to, addresses, "{policy:?}");
        assert_eq!(ports, [k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(port)], "{policy:?}");
    }

    // The metrics port of both refuses a pod the values do not name, once the enforcer has caught up ...
    let controller = format!(
        "http://{}:8080/metrics",
        pod_ip_on_node(&client, &ns, "controller").await.expect("the controller's pod IP")
    );
    let agent = format!(
        "http://{}:8080/metrics",
        pod_ip_on_node(&client, &ns, "node-agent").await.expect("the agent's pod IP")
    );
    let registry = format!("http://{}:5000/v2/", cluster_ip(&client, &ns, "registry").await);
    let metrics = [(controller.as_str(), 6), (agent.as_str(), 6)];
    let refused = |answers: &[Answer]| !last(answers, &controller).answered() && !last(answers, &agent).answered();
    wait_requests(&client, &ns, json!({"role": "other"}), &metrics, "an unnamed pod is refused", refused).await;
    // ... and answers one they name, once its own address has joined the policies' sources; the registry answers
    // it too (no policy selects it).
    let scraped = [metrics[0], metrics[1], (registry.as_str(), 1)];
    let served = |answers: &[Answer]| scraped.iter().all(|(url, _)| last(answers, url).code() == "200");
    wait_requests(&client, &ns, json!({"role": "scraper"}), &scraped, "a named pod scrapes", served).await;
    let again = requests_from_pod(&client, &ns, json!({"role": "other"}), &metrics).await;
    assert!(again.iter().all(|a| !a.answered()), "an unnamed pod is still refused: {again:?}");

    // A pod the controller's policy selects reaches the API server through the kubernetes Service, and not the
    // registry: its last request to the registry is refused, so the policy was in force for the one that follows.
    let api = format!("https://{}:443/version", cluster_ip(&client, "default", "kubernetes").await);
    let controller_like = json!({"app.kubernetes.io/name": "local-registry-publisher",
        "app.kubernetes.io/instance": "netpol", "app.kubernetes.io/component": "controller"});
    let answers = wait_requests(
        &client,
        &ns,
        controller_like,
        &[(registry.as_str(), 10), (api.as_str(), 1)],
        "a pod the controller's policy selects is refused the registry",
        |answers| !last(answers, &registry).answered(),
    )
    .await;
    assert!(
        last(&answers, &api).answered(),
        "the API server answers a pod the controller's policy selects: {answers:?}"
    );

    // The agents' policy likewise, from the agent's own network namespace (its process's, entered on the machine:
    // a bare pod with the agents' labels would be taken by their DaemonSet): the registry is refused, and the API
    // server answers through the kubernetes Service.
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let agents =
        pods.list(&ListParams::default().labels("app.kubernetes.io/component=node-agent")).await.expect("agents");
    let on_node = |p: &&Pod| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node().name());
    let agent_pod = agents.items.iter().find(on_node).expect("the real node's agent");
    let statuses = agent_pod.status.as_ref().and_then(|s| s.container_statuses.as_ref());
    let container = statuses.and_then(|c| c.first()).and_then(|c| c.container_id.clone()).expect("its container");
    let pid = container_process(container.rsplit('/').next().unwrap_or_default()).to_string();
    let from_agent = |url: &str| {
        let asked = Command::new("nsenter")
            .args(["-t", &pid, "-n", "curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "3", url])
            .output()
            .expect("nsenter curl");
        String::from_utf8_lossy(&asked.stdout).trim().to_string()
    };
    assert_eq!(from_agent(&registry), "000", "the agents' policy refuses the registry to the agent");
    assert_eq!(from_agent(&api), "200", "the API server answers the agent through the kubernetes Service");

    // The registry moves under the policies: the controller publishes the new address and the agent writes it.
    let moved = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "registry", "labels": {ISOLATED_LABEL: ns}},
        "spec": {"selector": {"app": "registry"}, "ports": [{"name": "registry", "port": 5001, "targetPort": 5000}]}});
    apply_in(&client, &ns, moved).await;
    let moved_host = cluster_host(&client, &ns, "registry", 5001).await;
    wait_published(&client, &ns, "hosting", "the moved registry under the policies", |d| {
        d.host_from_cluster_network.as_deref() == Some(moved_host.as_str())
    })
    .await;
    wait_node_file(&moved_host, "the agent writes the moved registry's file under the policies", |t| t.is_some()).await;

    helm_uninstall("netpol", &ns);
    plane.delete_namespace(&client, &ns).await.expect("delete namespace");
}
