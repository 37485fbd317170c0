//! A registry serving TLS under a private CA: the node agent gives each node's runtime the CA, and withdraws its
//! files when the bundle cannot be read.

use super::*;

/// A registry serving TLS with a private CA (its certificate names its ClusterIP and its cluster DNS name), behind
/// a NodePort Service whose annotation names the CA bundle `configmap/registry-ca`, and a release `release` in a
/// fresh namespace (with the node agent on and the bundle allowed if `agent`) publishing it by that name; an image
/// of its own pushed as `<ClusterIP>:5000/<release>/app:1`.
struct TlsRegistry {
    release: &'static str,
    client: Client,
    ns: String,
    ip: String,
    ca: String,
}

impl TlsRegistry {
    async fn start(release: &'static str, agent: bool) -> Self {
        let plane = plane();
        let client = plane.client().await.expect("admin client");
        images();
        let ns = plane.namespace(&client, release).await.expect("namespace");
        // The Service first: the certificate names its ClusterIP.
        apply_in(&client, &ns, Self::service(&ns, "configmap/registry-ca")).await;
        let ip = cluster_ip(&client, &ns, "registry").await;
        let name = format!("registry.{ns}.svc.cluster.local");
        let tls = testbed::private_tls(&[&name, &ip, "localhost", "127.0.0.1"]).expect("certificates");
        let bundle = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "registry-ca"},
            "data": {"ca.crt": tls.ca}});
        apply_in(&client, &ns, bundle).await;
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "registry-tls"},
            "type": "kubernetes.io/tls", "stringData": {"tls.crt": tls.certificate, "tls.key": tls.key}});
        apply_in(&client, &ns, secret).await;
        apply_in(&client, &ns, tls_registry_deployment("registry", "registry-tls")).await;
        let mut with_ca = agent_on();
        with_ca.push("nodeAgent.caBundles={configmap/registry-ca}".into());
        let values = isolated_release_values(&ns, if agent { &with_ca } else { &[] });
        helm_install(release, &ns, &values.iter().map(String::as_str).collect::<Vec<_>>());
        let this = Self { release, client, ns, ip, ca: tls.ca };
        let address = this.address();
        wait_published(&this.client, &this.ns, "hosting", "the TLS registry", |d| {
            d.host_from_cluster_network.as_deref() == Some(address.as_str())
        })
        .await;
        // Seeded through the ClusterIP, which the node reaches on every kube-proxy mode; nftables serves no
        // NodePort on the node's loopback, where the published `host` is (the publisher's tests push there).
        push(true, &own_image(release), &format!("{}:5000/{release}/app:1", this.ip), None);
        this
    }

    fn service(ns: &str, ca_bundle: &str) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "registry", "labels": {ISOLATED_LABEL: ns},
                "annotations": {"local-registry-publisher.io/ca-bundle": ca_bundle}},
            "spec": {"type": "NodePort", "selector": {"app": "registry"},
                "ports": [{"name": "registry", "port": 5000, "appProtocol": "https"}]}})
    }

    /// The registry as pods reach it: its cluster DNS name, which the release publishes for the cluster network.
    fn address(&self) -> String {
        format!("registry.{}.svc.cluster.local:5000", self.ns)
    }

    fn image(&self, address: &str) -> String {
        format!("{address}/{}/app:1", self.release)
    }

    async fn end(self) {
        helm_uninstall(self.release, &self.ns);
        wait_node_file(&self.address(), "after uninstall", |t| t.is_none()).await;
        assert!(!node().hosts_dir().join(self.address()).exists(), "a file of ours was left");
        plane().delete_namespace(&self.client, &self.ns).await.expect("delete namespace");
    }
}

#[tokio::test]
async fn without_the_node_agent_the_nodes_runtime_cannot_pull_from_a_registry_with_a_private_ca() {
    let tls = TlsRegistry::start("notls", false).await;
    // By name: cluster DNS is not the node's. By ClusterIP: the node's containerd does not know the CA.
    apply_in(&tls.client, &tls.ns, app_pod("by-name", &tls.image(&tls.address()))).await;
    let name = format!("registry.{}.svc.cluster.local", tls.ns);
    wait_waiting(&tls.client, &tls.ns, "by-name", &format!("lookup {name}")).await;
    apply_in(&tls.client, &tls.ns, app_pod("by-ip", &tls.image(&format!("{}:5000", tls.ip)))).await;
    wait_waiting(&tls.client, &tls.ns, "by-ip", "certificate signed by unknown authority").await;
    tls.end().await;
}

#[tokio::test]
async fn the_node_agent_gives_each_nodes_runtime_the_private_ca_of_a_registry_that_serves_tls() {
    let tls = TlsRegistry::start("nodetls", true).await;
    let address = tls.address();
    // Every node's containerd gets the CA beside a file that maps the name to the ClusterIP over HTTPS.
    let (text, took) = wait_node_file(&address, "agent on", |t| t.is_some()).await;
    println!("node file with the CA written {took:?} after the registry was published");
    let text = text.unwrap_or_default();
    assert!(text.contains(&format!("[host.\"https://{}:5000\"]", tls.ip)), "{text}");
    assert!(text.contains(&format!("  ca = \"{CA_FILE}\"\n")), "{text}");
    let ca = std::fs::read_to_string(node().hosts_dir().join(&address).join(CA_FILE)).expect("the CA beside it");
    // Marked as this release's agent's: the header, then the node plan it follows, then the PEM.
    let owner = format!("# Following the node plan {}/nodetls-local-registry-publisher-node-plan.", tls.ns);
    assert_eq!(ca, format!("{HEADER}\n{owner}\n{}", tls.ca));
    apply_in(&tls.client, &tls.ns, app_pod("with", &tls.image(&address))).await;
    wait_phase(&tls.client, &tls.ns, "with", &["Running"]).await;
    tls.end().await;
}

#[tokio::test]
async fn the_node_agent_withdraws_the_files_of_a_tls_registry_whose_ca_bundle_cannot_be_read_and_says_why() {
    let tls = TlsRegistry::start("nodetlsgone", true).await;
    let address = tls.address();
    wait_node_file(&address, "agent on", |t| t.is_some()).await;
    // A CA bundle the chart does not let the controller read: told on the registry's Service, and the node's files
    // for it go (no node would trust the registry).
    apply_in(&tls.client, &tls.ns, TlsRegistry::service(&tls.ns, "configmap/elsewhere-ca")).await;
    let told = wait_event_note(&tls.client, &tls.ns, "registry", "CaBundleUnusable").await;
    assert!(told.contains("configmap/elsewhere-ca in namespace") && told.contains("nodeAgent.caBundles"), "{told}");
    wait_node_file(&address, "CA unusable", |t| t.is_none()).await;
    let report = wait_doctor(&tls.ns, SOMETHING_WRONG, |report| report.contains("its CA bundle cannot be used")).await;
    assert!(report.contains("configmap/elsewhere-ca does not exist"), "{report}");
    assert!(!node().hosts_dir().join(&address).exists(), "the CA file and the directory go with the file");
    // Readable again: the files are back.
    apply_in(&tls.client, &tls.ns, TlsRegistry::service(&tls.ns, "configmap/registry-ca")).await;
    wait_node_file(&address, "CA readable again", |t| t.is_some()).await;
    tls.end().await;
}
