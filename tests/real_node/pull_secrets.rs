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
/// Service whose annotation names that Secret; a release `release` with pull Secrets on, and a namespace labelled
/// for them (`app`), whose distributed Secret the image `<host>/auth/pause:1` was pushed with. One at a time: every
/// release with pull Secrets on writes its Secret into every labelled namespace, under the same name.
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
        apply_in(&client, &ns, Self::service(&ns, true)).await;
        let pull_secrets = ["pullSecrets.enabled=true".into(), "pullSecrets.serviceAccounts={default}".into()];
        let values = isolated_release_values(&ns, &pull_secrets);
        helm_install(release, &ns, &values.iter().map(String::as_str).collect::<Vec<_>>());
        let cluster_host = cluster_host(&client, &ns, "registry", 5000).await;
        let document = wait_published(&client, &ns, "hosting", "the registry", |d| {
            d.host_from_cluster_network.as_deref() == Some(cluster_host.as_str())
        })
        .await;
        let host = document.host.clone().expect("a host");
        let runtime = document.host_from_container_runtime.clone().unwrap_or_else(|| host.clone());
        let first = plane.dir().join(format!("{ns}-first"));
        wait_pull_secret(&client, &app, "first-token", &first).await;
        let layout = own_image(&format!("pull-{release}"));
        push(true, &layout, &format!("{host}/auth/pause:1"), Some(&first));
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
