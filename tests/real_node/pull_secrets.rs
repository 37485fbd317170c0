//! Pull Secrets on the real node: a token registry's credentials distributed, rotated, withdrawn and uninstalled.

use super::*;

/// The pull Secret in `ns`, once it holds `password`; crane reads it as `<dir>/config.json`.
async fn wait_pull_secret(client: &Client, ns: &str, password: &str, dir: &Path) -> serde_json::Value {
    let secrets = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), ns);
    let found = wait_until(SOON_ON_A_NODE, || async {
        let secret = secrets.get_opt("local-registry-pull").await.ok()??;
        let config = secret.data?.remove(".dockerconfigjson")?;
        let parsed: serde_json::Value = serde_json::from_slice(&config.0).ok()?;
        let entries = parsed["auths"].as_object()?;
        entries.values().all(|e| e["password"] == password).then_some((config.0, parsed))
    })
    .await;
    let (bytes, parsed) = found.unwrap_or_else(|| panic!("no pull Secret holding the expected token in {ns}"));
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("config.json"), bytes).unwrap();
    parsed
}

/// A registry that accepts only the token in Secret `registry-credentials` (`first-token`), behind a NodePort
/// Service whose annotation names that Secret, holding the image `auth/pause:1` (pushed from the node through the
/// ClusterIP, which every kube-proxy mode serves there); a release `release` with pull Secrets on, and a namespace
/// labelled for them (`app`). One at a time: every release with pull Secrets on writes its Secret into every
/// labelled namespace, under the same name.
struct AuthRegistry {
    _alone: tokio::sync::MutexGuard<'static, ()>,
    release: &'static str,
    client: Client,
    ns: String,
    app: String,
    host: String,
    runtime: String,
    cluster_host: String,
    /// A directory holding the first token's `config.json`, for crane.
    first: PathBuf,
    layout: PathBuf,
}

impl AuthRegistry {
    async fn start(release: &'static str) -> Self {
        Self::start_with(release, &[], |_| json!({})).await
    }

    /// The same, with more chart values and more annotations on the registry's Service (given its namespace).
    async fn start_with(
        release: &'static str,
        values: &[String],
        annotations: impl FnOnce(&str) -> serde_json::Value,
    ) -> Self {
        static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        let alone = ONE_AT_A_TIME.lock().await;
        let plane = plane();
        let client = plane.client().await.expect("admin client");
        images();
        let ns = plane.namespace(&client, release).await.expect("namespace");
        let app = plane.namespace(&client, &format!("{release}-app")).await.expect("namespace");
        ok(tool("kubectl", &["label", "namespace", &app, "local-registry-publisher.io/pull-secret-wanted=true"]));
        apply_in(&client, &ns, Self::source("first-token")).await;
        let registry = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "registry"},
            "spec": {"selector": {"matchLabels": {"app": "registry"}},
                "template": {"metadata": {"labels": {"app": "registry"}}, "spec": {"containers": [{
                    "name": "registry", "image": images().name, "imagePullPolicy": "Never",
                    "command": ["/authregistry", "--address", ":5000"],
                    "env": [
                        {"name": "REGISTRY_USERNAME", "value": "oauth2accesstoken"},
                        {"name": "REGISTRY_PASSWORD",
                            "valueFrom": {"secretKeyRef": {"name": "registry-credentials", "key": "token"}}}],
                    "ports": [{"name": "registry", "containerPort": 5000}],
                    "readinessProbe": {"httpGet": {"path": "/healthz", "port": 5000}, "periodSeconds": 1}}]}}}});
        apply_in(&client, &ns, registry).await;
        let annotations = annotations(&ns);
        let mut service = Self::service(&ns, true);
        service["metadata"]["annotations"]
            .as_object_mut()
            .expect("annotations")
            .extend(annotations.as_object().cloned().unwrap_or_default());
        apply_in(&client, &ns, service).await;
        let mut pull_secrets = vec!["pullSecrets.enabled=true".into(), "pullSecrets.serviceAccounts={default}".into()];
        pull_secrets.extend(values.iter().cloned());
        let values = isolated_release_values(&ns, &pull_secrets);
        helm_install(release, &ns, &values.iter().map(String::as_str).collect::<Vec<_>>());
        let cluster_ip = cluster_host(&client, &ns, "registry", 5000).await;
        let cluster_host = match annotations["local-registry-publisher.io/host-from-cluster-network"].as_str() {
            Some(annotated) => annotated.to_string(),
            None => cluster_ip.clone(),
        };
        let document = wait_published(&client, &ns, "hosting", "the registry", |d| {
            d.host_from_cluster_network.as_deref() == Some(cluster_host.as_str())
        })
        .await;
        let host = document.host.clone().expect("a host");
        let runtime = document.host_from_container_runtime.clone().unwrap_or_else(|| host.clone());
        let first = plane.dir().join(format!("{ns}-first"));
        wait_pull_secret(&client, &app, "first-token", &first).await;
        let layout = own_image(&format!("pull-{release}"));
        let pusher = plane.dir().join(format!("{ns}-pusher"));
        std::fs::create_dir_all(&pusher).unwrap();
        let login =
            json!({"auths": {(cluster_ip.as_str()): {"username": "oauth2accesstoken", "password": "first-token"}}});
        std::fs::write(pusher.join("config.json"), login.to_string()).unwrap();
        push(true, &layout, &format!("{cluster_ip}/auth/pause:1"), Some(&pusher));
        Self { _alone: alone, release, client, ns, app, host, runtime, cluster_host, first, layout }
    }

    fn source(token: &str) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "registry-credentials"},
            "stringData": {"token": token}})
    }

    fn service(ns: &str, annotated: bool) -> serde_json::Value {
        let annotations = if annotated {
            json!({"local-registry-publisher.io/pull-secret": "registry-credentials"})
        } else {
            json!({})
        };
        json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "registry", "labels": {ISOLATED_LABEL: ns}, "annotations": annotations},
            "spec": {"type": "NodePort", "selector": {"app": "registry"}, "ports": [{"name": "registry", "port": 5000}]}})
    }

    fn accounts(&self) -> Api<k8s_openapi::api::core::v1::ServiceAccount> {
        Api::namespaced(self.client.clone(), &self.app)
    }

    /// Whether the Secret is in `app` and its default ServiceAccount names it, once that is so.
    async fn distributed(&self, wanted: bool) -> bool {
        let secrets = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(self.client.clone(), &self.app);
        let found = wait_until(SOON_ON_A_NODE, || async {
            let there = secrets.get_opt("local-registry-pull").await.ok()?.is_some();
            let account = self.accounts().get("default").await.ok()?;
            let listed = account.image_pull_secrets.unwrap_or_default().iter().any(|r| r.name == "local-registry-pull");
            (there == wanted && listed == wanted).then_some(())
        });
        found.await.is_some()
    }

    async fn end(self) {
        helm_uninstall(self.release, &self.ns);
        for ns in [&self.ns, &self.app] {
            plane().delete_namespace(&self.client, ns).await.expect("delete namespace");
        }
    }
}

#[tokio::test]
async fn the_distributed_pull_secret_lets_a_labelled_namespaces_pod_pull_from_a_token_registry_and_no_other() {
    let auth = AuthRegistry::start("pullauth").await;
    // An entry per published address (the image was pushed with it).
    let config = wait_pull_secret(&auth.client, &auth.app, "first-token", &auth.first).await;
    let addresses: BTreeSet<&str> = config["auths"].as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(addresses, BTreeSet::from([auth.host.as_str(), auth.runtime.as_str(), auth.cluster_host.as_str()]));
    // A namespace nobody labelled has no Secret: the registry refuses the node.
    let plain = plane().namespace(&auth.client, "pullauth-plain").await.expect("namespace");
    let image = format!("{}/auth/pause:1", auth.runtime);
    apply_in(&auth.client, &plain, app_pod("app", &image)).await;
    wait_waiting(&auth.client, &plain, "app", "no basic auth credentials").await;
    // In the labelled one the default ServiceAccount names the Secret, so a plain pod pulls through the published
    // runtime address.
    assert!(auth.distributed(true).await, "the default ServiceAccount was not given the pull Secret");
    apply_in(&auth.client, &auth.app, app_pod("app", &image)).await;
    wait_phase(&auth.client, &auth.app, "app", &["Running"]).await;
    plane().delete_namespace(&auth.client, &plain).await.expect("delete namespace");
    auth.end().await;
}

#[tokio::test]
async fn a_rotated_registry_token_reaches_the_pull_secret_and_the_next_pull_works_with_it_alone() {
    let auth = AuthRegistry::start("pullrotate").await;
    // A new token reaches the Secret; the registry restarts with it (and empty).
    apply_in(&auth.client, &auth.ns, AuthRegistry::source("second-token")).await;
    let second = plane().dir().join(format!("{}-second", auth.ns));
    wait_pull_secret(&auth.client, &auth.app, "second-token", &second).await;
    ok(tool("kubectl", &["rollout", "restart", "deployment/registry", "-n", &auth.ns]));
    ok(tool("kubectl", &["rollout", "status", "deployment/registry", "-n", &auth.ns, "--timeout=90s"]));
    push(true, &auth.layout, &format!("{}/auth/pause:2", auth.host), Some(&second));
    assert!(auth.distributed(true).await, "the default ServiceAccount does not name the pull Secret");
    apply_in(&auth.client, &auth.app, app_pod("rotated", &format!("{}/auth/pause:2", auth.runtime))).await;
    wait_phase(&auth.client, &auth.app, "rotated", &["Running"]).await;
    auth.end().await;
}

#[tokio::test]
async fn the_pull_secret_and_its_service_account_entry_go_with_the_annotation_and_come_back_with_it() {
    let auth = AuthRegistry::start("pullwithdraw").await;
    assert!(auth.distributed(true).await, "the pull Secret was not distributed");
    apply_in(&auth.client, &auth.ns, AuthRegistry::service(&auth.ns, false)).await;
    assert!(auth.distributed(false).await, "the pull Secret or its ServiceAccount entry was left behind");
    apply_in(&auth.client, &auth.ns, AuthRegistry::service(&auth.ns, true)).await;
    wait_pull_secret(&auth.client, &auth.app, "first-token", &auth.first).await;
    assert!(auth.distributed(true).await, "the pull Secret was not distributed again");
    auth.end().await;
}

#[tokio::test]
async fn helm_uninstall_removes_the_distributed_pull_secret_and_its_service_account_entry() {
    let auth = AuthRegistry::start("pulluninstall").await;
    assert!(auth.distributed(true).await, "the pull Secret was not distributed");
    helm_uninstall(auth.release, &auth.ns);
    // Its hook removes them before it returns.
    let secrets = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(auth.client.clone(), &auth.app);
    assert!(secrets.get_opt("local-registry-pull").await.expect("GET").is_none(), "uninstall removed the Secret");
    let account = auth.accounts().get("default").await.expect("GET account");
    let listed = account.image_pull_secrets.unwrap_or_default();
    assert!(listed.iter().all(|r| r.name != "local-registry-pull"), "uninstall removed our entry: {listed:?}");
    for ns in [&auth.ns, &auth.app] {
        plane().delete_namespace(&auth.client, ns).await.expect("delete namespace");
    }
}

#[tokio::test]
async fn a_token_registry_is_pulled_with_the_pods_credentials_through_the_node_agents_redirect_and_a_wrong_token_gets_401()
 {
    // Pods and in-cluster builders name the registry by its cluster DNS name, which the node cannot resolve: only
    // the agent's file, pointing that name at the ClusterIP, makes it pullable there. containerd hands the pod's
    // credentials (the kubelet's, for the name the image has) to the host the file points at, so the redirect
    // needs no credential on the node. The runtime's address is the ClusterIP itself: its file points at the host
    // the image names, no redirect.
    let dns = |ns: &str| format!("registry.{ns}.svc.cluster.local:5000");
    let auth = AuthRegistry::start_with(
        "pullredirect",
        &agent_on(),
        |ns| json!({"local-registry-publisher.io/host-from-cluster-network": dns(ns)}),
    )
    .await;
    let (name, direct) = (auth.cluster_host.clone(), cluster_host(&auth.client, &auth.ns, "registry", 5000).await);
    let mut service = AuthRegistry::service(&auth.ns, true);
    service["metadata"]["annotations"]["local-registry-publisher.io/host-from-cluster-network"] = json!(name);
    service["metadata"]["annotations"]["local-registry-publisher.io/host-from-container-runtime"] = json!(direct);
    apply_in(&auth.client, &auth.ns, service).await;
    wait_published(&auth.client, &auth.ns, "hosting", "the ClusterIP for the runtime", |d| {
        d.host_from_container_runtime.as_deref() == Some(direct.as_str())
    })
    .await;
    for address in [&name, &direct] {
        let (file, _) = wait_node_file(address, "agent on", |t| t.is_some()).await;
        let file = file.unwrap_or_default();
        assert!(file.contains(&format!("[host.\"http://{direct}\"]")), "{address}: {file}");
        assert!(!file.contains("first-token") && !file.to_lowercase().contains("authorization"), "{address}: {file}");
    }

    // The pod's Secret (distributed for every published address) carries the token through the redirect, and
    // straight to the host the image names.
    let secrets = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(auth.client.clone(), &auth.app);
    let both = wait_until(SOON_ON_A_NODE, || async {
        let config = secrets.get_opt("local-registry-pull").await.ok()??.data?.remove(".dockerconfigjson")?;
        let parsed: serde_json::Value = serde_json::from_slice(&config.0).ok()?;
        let auths = parsed["auths"].as_object()?;
        (auths.contains_key(&name) && auths.contains_key(&direct)).then_some(())
    });
    assert!(both.await.is_some(), "the pull Secret has no entry for {name} and {direct}");
    assert!(auth.distributed(true).await, "the default ServiceAccount was not given the pull Secret");
    apply_in(&auth.client, &auth.app, app_pod("redirected", &format!("{name}/auth/pause:1"))).await;
    wait_phase(&auth.client, &auth.app, "redirected", &["Running"]).await;
    apply_in(&auth.client, &auth.app, app_pod("direct", &format!("{direct}/auth/pause:1"))).await;
    wait_phase(&auth.client, &auth.app, "direct", &["Running"]).await;

    // A wrong token for the redirected name still meets the registry's 401.
    let wrong = plane().namespace(&auth.client, "pullredirect-wrong").await.expect("namespace");
    let config = json!({"auths": {(name.as_str()): {"username": "oauth2accesstoken", "password": "wrong-token"}}});
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "wrong"},
        "type": "kubernetes.io/dockerconfigjson", "stringData": {".dockerconfigjson": config.to_string()}});
    apply_in(&auth.client, &wrong, secret).await;
    let mut pod = app_pod("refused", &format!("{name}/auth/pause:1"));
    pod["spec"]["imagePullSecrets"] = json!([{"name": "wrong"}]);
    apply_in(&auth.client, &wrong, pod).await;
    let reason = wait_waiting(&auth.client, &wrong, "refused", "401").await;
    println!("kube-proxy {}: with a wrong token: {reason}", node().proxy_mode().as_str());
    plane().delete_namespace(&auth.client, &wrong).await.expect("delete namespace");
    auth.end().await;
}

/// A pod of `image` that the kubelet pulls only when the node lacks it (or must verify its credentials).
fn if_not_present_pod(name: &str, image: &str) -> serde_json::Value {
    let mut pod = app_pod(name, image);
    pod["spec"]["containers"][0]["imagePullPolicy"] = json!("IfNotPresent");
    pod
}

#[tokio::test]
async fn while_the_registry_is_down_an_image_pulled_with_the_secret_starts_after_a_rotation_but_not_after_a_recreation()
{
    // KEP-2535 (the kubelet's KubeletEnsureSecretPulledImages, on by default since 1.35): an image the kubelet pulled
    // with credentials starts again without a pull only for a pod whose pull Secret is the one recorded (the same
    // namespace, name and UID, or the same credentials). The registry stays published while it is down (a long
    // grace period), so the Secrets stay too.
    let auth = AuthRegistry::start_with("pullreverify", &["registry.gracePeriod=30m".into()], |_| json!({})).await;
    assert!(auth.distributed(true).await, "the pull Secret was not distributed");
    let (client, app) = (&auth.client, &auth.app);
    let image = format!("{}/auth/pause:1", auth.runtime);
    apply_in(client, app, if_not_present_pod("pulled", &image)).await;
    wait_phase(client, app, "pulled", &["Running"]).await;
    let secrets = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), app);
    let uid = |secret: k8s_openapi::api::core::v1::Secret| secret.metadata.uid.unwrap_or_default();
    let first_uid = uid(secrets.get("local-registry-pull").await.expect("the pull Secret"));

    // The registry goes down.
    ok(tool("kubectl", &["scale", "deployment/registry", "-n", &auth.ns, "--replicas=0"]));
    let registry_pods = Api::<Pod>::namespaced(client.clone(), &auth.ns);
    let gone = wait_until(SOON_ON_A_NODE, || async {
        registry_pods.list(&ListParams::default().labels("app=registry")).await.ok()?.items.is_empty().then_some(())
    });
    assert!(gone.await.is_some(), "the registry pod is still there");

    // A rotated token is written into the same Secret (same UID): the kubelet accepts it without a pull.
    apply_in(client, &auth.ns, AuthRegistry::source("second-token")).await;
    wait_pull_secret(client, app, "second-token", &plane().dir().join(format!("{}-second", auth.ns))).await;
    assert_eq!(uid(secrets.get("local-registry-pull").await.expect("the pull Secret")), first_uid);
    apply_in(client, app, if_not_present_pod("rotated", &image)).await;
    wait_phase(client, app, "rotated", &["Running"]).await;

    // Re-created (the annotation removed and restored) with yet another token: a new UID and new credentials, so
    // the kubelet must pull to verify them, and the registry is down.
    apply_in(client, &auth.ns, AuthRegistry::service(&auth.ns, false)).await;
    assert!(auth.distributed(false).await, "the pull Secret was not removed");
    apply_in(client, &auth.ns, AuthRegistry::source("third-token")).await;
    apply_in(client, &auth.ns, AuthRegistry::service(&auth.ns, true)).await;
    let third = plane().dir().join(format!("{}-third", auth.ns));
    wait_pull_secret(client, app, "third-token", &third).await;
    assert!(auth.distributed(true).await, "the pull Secret was not distributed again");
    assert_ne!(uid(secrets.get("local-registry-pull").await.expect("the pull Secret")), first_uid);
    apply_in(client, app, if_not_present_pod("recreated", &image)).await;
    let reason = wait_waiting(client, app, "recreated", "ImagePull").await;
    println!("re-created Secret, registry down: {reason}");

    // Back up with that token (and empty: it keeps images in memory), the same image pulls again.
    ok(tool("kubectl", &["scale", "deployment/registry", "-n", &auth.ns, "--replicas=1"]));
    ok(tool("kubectl", &["rollout", "status", "deployment/registry", "-n", &auth.ns, "--timeout=90s"]));
    push(true, &auth.layout, &format!("{}/auth/pause:1", auth.host), Some(&third));
    apply_in(client, app, if_not_present_pod("verified", &image)).await;
    wait_phase(client, app, "verified", &["Running"]).await;
    auth.end().await;
}
