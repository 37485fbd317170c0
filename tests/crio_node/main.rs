//! The node agent on a real CRI-O node (CRI-O of tools/crio, Debian's conmon, the same runc, kubelet, kube-proxy and
//! CoreDNS as the containerd node): a published address made pullable by a `registries.conf.d` drop-in that CRI-O
//! reloads by itself, with CRI-O's pid the same before and after; someone else's drop-in for the same registry kept
//! and reported; the drop-ins removed when the address is withdrawn; and the runtime conformance suite judged by
//! CRI-O's own image library. Its own control plane, whose one real node runs CRI-O whatever LRP_NODE_RUNTIME says.

#[path = "../support/mod.rs"]
mod support;

mod conformance;

use kube::Client;
use serde_json::json;
use testbed::{ControlPlane, RealNode};

use support::agent::{helm, helm_uninstall, own_image, push, registry_service, values};
use support::{SOON_ON_A_NODE, apply_in, cluster_ip, wait_until};

fn plane() -> &'static ControlPlane {
    ControlPlane::shared_with_crio_node()
}

fn node() -> &'static RealNode {
    plane().real_node().expect("the CRI-O node")
}

/// A release `release` in a fresh namespace with the node agent on (`--runtime=crio`), publishing a plain-HTTP
/// ClusterIP registry by its cluster DNS name, with an image of its own pushed by the ClusterIP as
/// `<address>/<release>/app:1`.
struct CrioPull {
    release: &'static str,
    client: Client,
    ns: String,
    ip: String,
}

impl CrioPull {
    async fn start(release: &'static str, extra: &[&str]) -> Self {
        let plane = plane();
        let client = plane.client().await.expect("admin client");
        node().import(&support::controller_image()).expect("import the controller image");
        let ns = plane.namespace(&client, release).await.expect("namespace");
        support::agent::registry(plane, &client, &ns, node()).await;
        let mut this = Self { release, client, ns, ip: String::new() };
        let annotations = json!({"local-registry-publisher.io/host-from-cluster-network": this.name()});
        apply_in(&this.client, &this.ns, registry_service(&this.ns, annotations)).await;
        this.ip = cluster_ip(&this.client, &this.ns, "registry").await;
        push(plane, Some(node()), &own_image(plane, release), &this.image(&this.by_ip()), None);
        let values = values(&this.ns, node(), &[&["nodeAgent.runtime=crio"], extra].concat());
        helm(plane, "install", release, &this.ns, &values);
        this
    }

    fn by_ip(&self) -> String {
        format!("{}:5000", self.ip)
    }

    /// The registry's cluster DNS name and port.
    fn name(&self) -> String {
        format!("registry.{}.svc.cluster.local:5000", self.ns)
    }

    fn image(&self, address: &str) -> String {
        format!("{address}/{}/app:1", self.release)
    }

    /// A pod of the pushed image named by `address`, pulled anew, once it is Running.
    async fn runs(&self, pod: &str, address: &str) {
        let manifest = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod},
            "spec": {"containers": [{"name": "app", "image": self.image(address), "imagePullPolicy": "Always"}]}});
        apply_in(&self.client, &self.ns, manifest).await;
        wait_running(&self.client, &self.ns, pod).await;
    }

    async fn end(self) {
        helm_uninstall(plane(), self.release, &self.ns);
        plane().delete_namespace(&self.client, &self.ns).await.expect("delete namespace");
    }
}

/// Waits until pod `name` in `ns` runs, else fails with what its container waits on.
async fn wait_running(client: &Client, ns: &str, name: &str) {
    let pods = kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), ns);
    let phase = || async {
        let pod = pods.get_opt(name).await.ok().flatten()?;
        (pod.status?.phase.as_deref() == Some("Running")).then_some(())
    };
    if wait_until(SOON_ON_A_NODE, phase).await.is_none() {
        let pod = pods.get_opt(name).await.ok().flatten();
        let waiting = pod.and_then(|p| p.status?.container_statuses?.first()?.state.clone()?.waiting);
        panic!("pod {ns}/{name} never ran; its container waits: {waiting:?}");
    }
}

/// The pid of the node's CRI-O (its component's process, which is crio itself).
fn crio_pid() -> u32 {
    let pid = *plane().pids().get("crio").expect("CRI-O runs");
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    assert_eq!(comm.trim(), "crio", "pid {pid} is CRI-O's");
    pid
}

/// An admin client, with the controller's and crane's images on the node; the crane image's.
async fn client_and_images() -> (Client, &'static xtask::image::Image) {
    let client = plane().client().await.expect("admin client");
    node().import(&support::controller_image()).expect("import the controller image");
    let crane = support::agent::crane_image(plane());
    node().import(crane).expect("import the crane image");
    (client, crane)
}

/// The agent's drop-in for `address` on the node, if there.
fn drop_in(address: &str) -> Option<String> {
    support::agent::node_file(node(), address)
}

async fn wait_drop_in(address: &str, present: bool) -> Option<String> {
    support::agent::wait_file(node(), address, present, "the drop-in").await;
    drop_in(address)
}

#[tokio::test]
async fn crio_pulls_a_published_cluster_dns_name_through_the_agents_drop_in_reloaded_live_and_falls_back_once_withdrawn()
 {
    let pid = crio_pid();
    let pull = CrioPull::start("criopull", &[]).await;
    let name = pull.name();
    let text = wait_drop_in(&name, true).await.unwrap_or_default();
    assert!(text.contains(&format!("location = \"{}\"", pull.by_ip())) && text.contains("insecure = true"), "{text}");
    // What CRI-O's own library resolves the name to now: the ClusterIP, over plain HTTP.
    let sources = node().crio_pull_sources(&node().containers_dir(), &pull.image(&name)).expect("resolve");
    assert_eq!(sources, [format!("{} insecure=true {}", pull.by_ip(), pull.image(&pull.by_ip()))]);
    pull.runs("by-name", &name).await;
    assert_eq!(crio_pid(), pid, "CRI-O was not restarted: it reloaded the drop-in by itself");
    // doctor judges the CRI-O node by its agent's state, and CRI-O's config says it reloads the drop-ins.
    let configured = format!("node {}: configured by criopull-local-registry-publisher-node-agent-", node().name());
    let report =
        support::agent::wait_doctor(plane(), &pull.ns, support::agent::ALL_WELL, |r| r.contains(&configured)).await;
    println!("{report}");
    let reads = "local_registry_publisher_node_runtime_config{state=\"reads\"} 1\n";
    support::agent::wait_pod_metrics_on(&pull.client, &pull.ns, "node-agent", node(), |m| m.contains(reads)).await;
    // Withdrawn (the Service no longer names itself): the drop-in goes and CRI-O resolves the name as it is again.
    apply_in(&pull.client, &pull.ns, registry_service(&pull.ns, json!({}))).await;
    wait_drop_in(&name, false).await;
    let sources = node().crio_pull_sources(&node().containers_dir(), &pull.image(&name)).expect("resolve");
    assert_eq!(sources, [format!("{name} insecure=false {}", pull.image(&name))]);
    assert_eq!(crio_pid(), pid);
    pull.end().await;
}

/// Someone else's drop-in for the address: kept as it is and told (the agent's metric), and the agent's own
/// removed, since CRI-O takes the last file of a prefix whole and ours would win by its name; once theirs is gone the
/// agent writes its own again.
#[tokio::test]
async fn someone_elses_drop_in_for_the_published_address_is_kept_and_reported_and_ours_returns_once_it_is_gone() {
    let pull = CrioPull::start("crioforeign", &[]).await;
    let name = pull.name();
    wait_drop_in(&name, true).await;
    let theirs = node().containers_dir().join("registries.conf.d/50-theirs.conf");
    let text = format!("[[registry]]\nprefix = \"{name}\"\nlocation = \"{}\"\ninsecure = true\n", pull.by_ip());
    std::fs::write(&theirs, &text).expect("someone else's drop-in");
    wait_drop_in(&name, false).await;
    let foreign = "local_registry_publisher_node_addresses{state=\"foreign\"} 1\n";
    support::agent::wait_pod_metrics_on(&pull.client, &pull.ns, "node-agent", node(), |m| m.contains(foreign)).await;
    assert_eq!(std::fs::read_to_string(&theirs).expect("theirs is kept"), text, "theirs was changed");
    // CRI-O pulls as theirs says, which here is the registry itself.
    pull.runs("through-theirs", &name).await;
    std::fs::remove_file(&theirs).expect("remove theirs");
    wait_drop_in(&name, true).await;
    pull.end().await;
}

/// An admin's mirror of docker.io (`nodeAgent.mirrors`): one drop-in whose mirror is the cache and whose location
/// stays Docker Hub, so a pod naming Docker Hub runs from the cache, and with the cache down CRI-O goes on to Docker
/// Hub (which nothing here reaches: the pull fails naming both); taken out of the values, its drop-in goes.
#[tokio::test]
async fn an_admins_mirror_serves_docker_hub_pulls_from_the_cache_with_docker_hub_as_crios_fallback() {
    let mirror_of = |ns: &str| {
        let key = "nodeAgent.mirrors[0]";
        vec![
            format!("{key}.upstream=docker.io"),
            format!("{key}.service.namespace={ns}"),
            format!("{key}.service.name=cache"),
            format!("{key}.service.port=5000"),
        ]
    };
    let plane = plane();
    let client = plane.client().await.expect("admin client");
    // The cache is the release's own registry under a second Service, in the release's namespace.
    let pull = CrioPull::start("criomirror", &[]).await;
    let cache = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "cache"},
        "spec": {"selector": {"app": "registry"}, "ports": [{"name": "registry", "port": 5000}]}});
    apply_in(&client, &pull.ns, cache).await;
    let cache_ip = cluster_ip(&client, &pull.ns, "cache").await;
    push(plane, Some(node()), &own_image(plane, "criomirror"), &format!("{cache_ip}:5000/library/lrp-crio:1"), None);
    let mut upgraded = values(&pull.ns, node(), &["nodeAgent.runtime=crio"]);
    upgraded.extend(mirror_of(&pull.ns));
    helm(plane, "upgrade", pull.release, &pull.ns, &upgraded);
    let text = wait_drop_in("docker.io", true).await.unwrap_or_default();
    assert!(text.contains("location = \"registry-1.docker.io\"") && text.contains("[[registry.mirror]]"), "{text}");
    let image = "docker.io/library/lrp-crio:1";
    let sources = node().crio_pull_sources(&node().containers_dir(), image).expect("resolve");
    let expected = [
        format!("{cache_ip}:5000 insecure=true {cache_ip}:5000/library/lrp-crio:1"),
        "registry-1.docker.io insecure=false registry-1.docker.io/library/lrp-crio:1".to_string(),
    ];
    assert_eq!(sources, expected, "the cache first, Docker Hub after it");
    let pod = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "app", "image": image, "imagePullPolicy": "Always"}]}})
    };
    apply_in(&client, &pull.ns, pod("through-mirror")).await;
    wait_running(&client, &pull.ns, "through-mirror").await;

    // The cache down: CRI-O tries it, then Docker Hub, and says so.
    support::ok(support::tool(plane, "kubectl", &["scale", "deployment/registry", "-n", &pull.ns, "--replicas=0"]));
    apply_in(&client, &pull.ns, pod("fallback")).await;
    let said = wait_waiting_message(&client, &pull.ns, "fallback", "registry-1.docker.io").await;
    assert!(said.contains(&format!("{cache_ip}:5000")), "the cache was tried first: {said}");

    // Taken out of the values: the drop-in goes.
    helm(plane, "upgrade", pull.release, &pull.ns, &values(&pull.ns, node(), &["nodeAgent.runtime=crio"]));
    wait_drop_in("docker.io", false).await;
    pull.end().await;
}

/// The message pod `name`'s container waits with, once it contains `needle`.
async fn wait_waiting_message(client: &Client, ns: &str, name: &str, needle: &str) -> String {
    let pods = kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), ns);
    let message = || async {
        let pod = pods.get_opt(name).await.ok().flatten()?;
        let waiting = pod.status?.container_statuses?.first()?.state.clone()?.waiting?;
        waiting.message.filter(|m| m.contains(needle))
    };
    match wait_until(SOON_ON_A_NODE, message).await {
        Some(message) => message,
        None => panic!("pod {ns}/{name} never waited on {needle}: {:?}", pods.get_opt(name).await.ok().flatten()),
    }
}

/// A NodePort registry, published as `localhost:<nodePort>`: CRI-O alone dials HTTPS there (containers/image
/// makes no exception for loopback), so the pull fails even where kube-proxy serves the port; the agent's drop-in
/// sends it to the ClusterIP over plain HTTP, which every proxy mode serves to the node.
#[tokio::test]
async fn a_published_loopback_node_port_is_pulled_through_the_agents_drop_in_where_crio_alone_dials_https() {
    let plane = plane();
    let client = plane.client().await.expect("admin client");
    node().import(&support::controller_image()).expect("import the controller image");
    let ns = plane.namespace(&client, "crioloop").await.expect("namespace");
    support::agent::registry(plane, &client, &ns, node()).await;
    let mut service = registry_service(&ns, json!({}));
    service["spec"]["type"] = json!("NodePort");
    apply_in(&client, &ns, service).await;
    let ip = cluster_ip(&client, &ns, "registry").await;
    push(plane, Some(node()), &own_image(plane, "crioloop"), &format!("{ip}:5000/crioloop/app:1"), None);
    let services = kube::Api::<k8s_openapi::api::core::v1::Service>::namespaced(client.clone(), &ns);
    let ports = services.get("registry").await.expect("the Service").spec.and_then(|s| s.ports).unwrap_or_default();
    let node_port = ports.first().and_then(|p| p.node_port).expect("an allocated nodePort");
    let host = format!("localhost:{node_port}");
    let image = format!("{host}/crioloop/app:1");
    let without = values(&ns, node(), &["nodeAgent.runtime=crio", "nodeAgent.enabled=false"]);
    helm(plane, "install", "crioloop", &ns, &without);
    let configmaps = kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns);
    let published = || async {
        let data = configmaps.get_opt("hosting").await.ok().flatten()?.data?;
        data.values().any(|v| v.contains(&host)).then_some(())
    };
    assert!(wait_until(SOON_ON_A_NODE, published).await.is_some(), "{host} was never published");
    let pod = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "app", "image": image, "imagePullPolicy": "Always"}]}})
    };
    apply_in(&client, &ns, pod("without")).await;
    wait_waiting_message(&client, &ns, "without", "server gave HTTP response to HTTPS client").await;

    let with = values(&ns, node(), &["nodeAgent.runtime=crio"]);
    helm(plane, "upgrade", "crioloop", &ns, &with);
    let text = wait_drop_in(&host, true).await.unwrap_or_default();
    assert!(text.contains(&format!("location = \"{ip}:5000\"")), "{text}");
    apply_in(&client, &ns, pod("with")).await;
    wait_running(&client, &ns, "with").await;
    helm_uninstall(plane, "crioloop", &ns);
    wait_drop_in(&host, false).await;
    plane.delete_namespace(&client, &ns).await.expect("delete namespace");
}

/// The relay on CRI-O: the agent serves the registry on the node's loopback, which containers/image dials over
/// HTTPS unless told otherwise, so the agent adds a plain-HTTP drop-in for each loopback address it relays on.
#[tokio::test]
async fn a_relayed_registry_is_pulled_from_the_nodes_loopback_through_the_agents_plain_http_drop_in() {
    const RELAY_PORT: u16 = 5301;
    let plane = plane();
    let pull = CrioPull::start("criorelay", &[]).await;
    // On the node's network, each release's agents need a port of the node of their own.
    let on_node = ["nodeAgent.runtime=crio", "nodeAgent.relay.enabled=true", "nodeAgent.httpPort=8301"];
    let mut relayed = values(&pull.ns, node(), &on_node);
    relayed.extend([
        format!("nodeAgent.relay.registries[0].service.namespace={}", pull.ns),
        "nodeAgent.relay.registries[0].service.name=registry".into(),
        format!("nodeAgent.relay.registries[0].port={RELAY_PORT}"),
    ]);
    helm(plane, "upgrade", pull.release, &pull.ns, &relayed);
    for host in ["127.0.0.1", "localhost"] {
        let address = format!("{host}:{RELAY_PORT}");
        let text = wait_drop_in(&address, true).await.unwrap_or_default();
        assert!(text.contains("insecure = true"), "{text}");
        pull.runs(&format!("through-{host}").replace('.', "-"), &address).await;
    }
    let sources = node().crio_pull_sources(&node().containers_dir(), &pull.image(&format!("127.0.0.1:{RELAY_PORT}")));
    assert_eq!(sources.expect("resolve")[0].split(' ').nth(1), Some("insecure=true"));
    pull.end().await;
    wait_drop_in(&format!("127.0.0.1:{RELAY_PORT}"), false).await;
}

/// A registry serving TLS under a private CA, published by its cluster DNS name: the agent's drop-in sends the name
/// to the ClusterIP over HTTPS (no `insecure`), and the CA goes where containers/image looks for the endpoint's
/// (`certs.d/<ClusterIP>:5000/`), so the pod's pull verifies the registry; both go with the release.
#[tokio::test]
async fn a_tls_registry_with_a_private_ca_is_pulled_with_its_ca_under_certs_d_and_both_go_with_the_release() {
    let plane = plane();
    let (client, crane) = client_and_images().await;
    let ns = plane.namespace(&client, "criotls").await.expect("namespace");
    let name = format!("registry.{ns}.svc.cluster.local");
    let address = format!("{name}:5000");
    let mut service = registry_service(
        &ns,
        json!({"local-registry-publisher.io/host-from-cluster-network": address,
        "local-registry-publisher.io/ca-bundle": "configmap/registry-ca"}),
    );
    service["spec"]["ports"][0]["appProtocol"] = json!("https");
    apply_in(&client, &ns, service).await;
    let ip = cluster_ip(&client, &ns, "registry").await;
    let tls = testbed::private_tls(&[&name, &ip]).expect("certificates");
    let bundle = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "registry-ca"},
        "data": {"ca.crt": tls.ca}});
    apply_in(&client, &ns, bundle).await;
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "registry-tls"},
        "type": "kubernetes.io/tls", "stringData": {"tls.crt": tls.certificate, "tls.key": tls.key}});
    apply_in(&client, &ns, secret).await;
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "registry"},
        "spec": {"selector": {"matchLabels": {"app": "registry"}},
            "template": {"metadata": {"labels": {"app": "registry"}}, "spec": {"containers": [{
                "name": "registry", "image": crane.name, "imagePullPolicy": "Never",
                "command": ["/authregistry", "--address", ":5000", "--anonymous",
                    "--tls-cert", "/tls/tls.crt", "--tls-key", "/tls/tls.key"],
                "volumeMounts": [{"name": "tls", "mountPath": "/tls", "readOnly": true}],
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 5000, "scheme": "HTTPS"},
                    "periodSeconds": 1}}],
                "volumes": [{"name": "tls", "secret": {"secretName": "registry-tls"}}]}}}});
    apply_in(&client, &ns, deployment).await;
    push(plane, Some(node()), &own_image(plane, "criotls"), &format!("{ip}:5000/criotls/app:1"), None);
    let with_ca = ["nodeAgent.runtime=crio", "nodeAgent.caBundles={configmap/registry-ca}"];
    helm(plane, "install", "criotls", &ns, &values(&ns, node(), &with_ca));
    let text = wait_drop_in(&address, true).await.unwrap_or_default();
    assert!(text.contains(&format!("location = \"{ip}:5000\"")) && !text.contains("insecure"), "{text}");
    let ca_file = node()
        .containers_dir()
        .join("certs.d")
        .join(format!("{ip}:5000"))
        .join(format!("local-registry-publisher-{address}.crt"));
    let ca = std::fs::read_to_string(&ca_file).expect("the CA where containers/image looks for it");
    assert!(ca.ends_with(&tls.ca), "{ca}");
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "with-ca"},
        "spec": {"containers": [{"name": "app", "image": format!("{address}/criotls/app:1"),
            "imagePullPolicy": "Always"}]}});
    apply_in(&client, &ns, pod).await;
    wait_running(&client, &ns, "with-ca").await;
    helm_uninstall(plane, "criotls", &ns);
    wait_drop_in(&address, false).await;
    assert!(!ca_file.exists() && !ca_file.parent().expect("its directory").exists(), "the CA and its directory go");
    plane.delete_namespace(&client, &ns).await.expect("delete namespace");
}

/// A registry that asks for a token. CRI-O's image library sends the pod's pull Secret only to the registry the
/// image names (containers/image: "we must not blindly send the credentials intended for the primary endpoint to
/// mirrors"), so through the agent's redirect of the cluster DNS name to the ClusterIP the registry's 401 stands
/// whatever the Secret holds; through the relay, whose drop-in keeps the loopback address as the location, the pod's
/// Secret for that address is sent and the pod runs, and a wrong token meets the 401.
#[tokio::test]
async fn a_token_registry_is_pulled_with_the_pods_pull_secret_through_the_relay_not_through_a_redirect() {
    const RELAY_PORT: u16 = 5302;
    let plane = plane();
    let (client, crane) = client_and_images().await;
    let ns = plane.namespace(&client, "criotoken").await.expect("namespace");
    let name = format!("registry.{ns}.svc.cluster.local:5000");
    let relayed = format!("localhost:{RELAY_PORT}");
    let token = "crio-token-4f1c";
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "registry"},
        "spec": {"selector": {"matchLabels": {"app": "registry"}},
            "template": {"metadata": {"labels": {"app": "registry"}}, "spec": {"containers": [{
                "name": "registry", "image": crane.name, "imagePullPolicy": "Never",
                "command": ["/authregistry", "--address", ":5000"],
                "env": [{"name": "REGISTRY_USERNAME", "value": "oauth2accesstoken"},
                    {"name": "REGISTRY_PASSWORD", "value": token}],
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 5000}, "periodSeconds": 1}}]}}}});
    apply_in(&client, &ns, deployment).await;
    let annotations = json!({"local-registry-publisher.io/host-from-cluster-network": name});
    apply_in(&client, &ns, registry_service(&ns, annotations)).await;
    let ip = cluster_ip(&client, &ns, "registry").await;
    let auth = |password: &str| json!({"username": "oauth2accesstoken", "password": password});
    let docker_config = plane.dir().join(format!("criotoken-{ns}"));
    std::fs::create_dir_all(&docker_config).expect("a docker config directory");
    let pushing = json!({"auths": {format!("{ip}:5000"): auth(token)}});
    std::fs::write(docker_config.join("config.json"), pushing.to_string()).expect("config.json");
    let image = "criotoken/app:1";
    push(plane, Some(node()), &own_image(plane, "criotoken"), &format!("{ip}:5000/{image}"), Some(&docker_config));
    let on_node = ["nodeAgent.runtime=crio", "nodeAgent.relay.enabled=true", "nodeAgent.httpPort=8302"];
    let mut with_relay = values(&ns, node(), &on_node);
    with_relay.extend([
        format!("nodeAgent.relay.registries[0].service.namespace={ns}"),
        "nodeAgent.relay.registries[0].service.name=registry".into(),
        format!("nodeAgent.relay.registries[0].port={RELAY_PORT}"),
    ]);
    helm(plane, "install", "criotoken", &ns, &with_relay);
    wait_drop_in(&name, true).await;
    wait_drop_in(&relayed, true).await;
    // One Secret holding the right token for both addresses, one a wrong token.
    let secret = |secret: &str, password: &str| {
        let config = json!({"auths": {(name.as_str()): auth(password), (relayed.as_str()): auth(password)}});
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": secret},
            "type": "kubernetes.io/dockerconfigjson", "stringData": {".dockerconfigjson": config.to_string()}})
    };
    apply_in(&client, &ns, secret("right", token)).await;
    apply_in(&client, &ns, secret("wrong", "not-the-token")).await;
    let pod = |pod: &str, address: &str, pull_secret: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod},
            "spec": {"imagePullSecrets": [{"name": pull_secret}], "containers": [{"name": "app",
                "image": format!("{address}/{image}"), "imagePullPolicy": "Always"}]}})
    };
    apply_in(&client, &ns, pod("relayed", &relayed, "right")).await;
    wait_running(&client, &ns, "relayed").await;
    apply_in(&client, &ns, pod("relayed-wrong", &relayed, "wrong")).await;
    wait_waiting_message(&client, &ns, "relayed-wrong", "unauthorized").await;
    apply_in(&client, &ns, pod("redirected", &name, "right")).await;
    let said = wait_waiting_message(&client, &ns, "redirected", "unauthorized").await;
    assert!(said.contains(&format!("{ip}:5000")), "the redirect reached the ClusterIP, without credentials: {said}");
    helm_uninstall(plane, "criotoken", &ns);
    wait_drop_in(&name, false).await;
    plane.delete_namespace(&client, &ns).await.expect("delete namespace");
}
