//! --pull-secrets against the real control plane: the published registry's credentials reach exactly the namespaces
//! a cluster admin labelled, follow rotation and address changes, patch chosen ServiceAccounts without disturbing
//! others' entries, leave foreign Secrets alone, and go again when the namespace, registry or annotation goes; and
//! the chart's RBAC allows that and nothing more.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use local_registry_publisher::controller::{ConcernMetrics, Context};
use local_registry_publisher::metrics::Metrics;
use local_registry_publisher::settings::PullSecrets;
use serde_json::{Value, json};
use support::binary::Controller;
use support::{
    SOON, Scenario, apply_in, client_for, forbidden, ok, registry_label, service, token_kubeconfig, wait_until,
};
use testbed::ControlPlane;

const LABEL: &str = "local-registry-publisher.io/pull-secret-wanted=true";

fn kubectl(args: &[&str]) -> String {
    ok(support::tool(ControlPlane::shared(), "kubectl", args))
}

/// A registry Service reached from outside at `host` that names `source` as its pull credentials.
fn registry(host: &str, source: Option<&str>) -> Value {
    let mut annotations = json!({"local-registry-publisher.io/host": host});
    if let Some(source) = source {
        annotations["local-registry-publisher.io/pull-secret"] = json!(source);
    }
    service(
        "registry",
        registry_label(),
        annotations,
        json!({"type": "ExternalName", "externalName": "zot.example", "ports": [{"name": "registry", "port": 5000}]}),
    )
}

fn source(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": data})
}

/// The `.dockerconfigjson` of the Secret `name` in `ns`, parsed; `None` when there is no such Secret.
async fn docker_config(client: &Client, ns: &str, name: &str) -> Option<Value> {
    let secret = Api::<Secret>::namespaced(client.clone(), ns).get_opt(name).await.expect("GET Secret")?;
    let bytes = secret.data?.remove(".dockerconfigjson")?;
    Some(serde_json::from_slice(&bytes.0).expect("valid JSON"))
}

/// Address -> (username, password) from `auths`, after checking `auth` says the same.
fn entries(config: &Value) -> BTreeMap<String, (String, String)> {
    use base64::Engine;
    let auths = config["auths"].as_object().expect("auths");
    auths
        .iter()
        .map(|(address, entry)| {
            let auth = base64::engine::general_purpose::STANDARD.decode(entry["auth"].as_str().unwrap()).unwrap();
            let (user, password) = (entry["username"].as_str().unwrap(), entry["password"].as_str().unwrap());
            assert_eq!(String::from_utf8(auth).unwrap(), format!("{user}:{password}"));
            (address.clone(), (user.to_string(), password.to_string()))
        })
        .collect()
}

async fn wait_config(client: &Client, ns: &str, name: &str, what: &str, check: impl Fn(&Option<Value>) -> bool) {
    let found = wait_until(SOON, || async {
        let config = docker_config(client, ns, name).await;
        check(&config).then_some(())
    })
    .await;
    assert!(found.is_some(), "{what}: {ns}/{name} is {:?}", docker_config(client, ns, name).await);
}

async fn pull_secret_names(client: &Client, ns: &str, account: &str) -> Vec<String> {
    let account = Api::<ServiceAccount>::namespaced(client.clone(), ns).get(account).await.expect("GET account");
    account.image_pull_secrets.unwrap_or_default().into_iter().map(|r| r.name).collect()
}

/// Waits until the account lists exactly `wanted`, besides the Secrets of the other tests' publishers (named
/// `pull-<their namespace>`), which run side by side and see every labelled namespace too.
async fn wait_account(client: &Client, ns: &str, account: &str, ours: &str, wanted: &[&str]) {
    let listed = || async {
        let names = pull_secret_names(client, ns, account).await;
        names.into_iter().filter(|n| !n.starts_with("pull-") || n == ours).collect::<Vec<_>>()
    };
    let found = wait_until(SOON, || async { (listed().await == wanted).then_some(()) }).await;
    assert!(found.is_some(), "{ns}/{account} lists {:?}, not {wanted:?}", listed().await);
}

/// `doctor` with the scenario's settings and --pull-secrets: its exit status and its report.
fn doctor(scenario: &Scenario, name: &str, accounts: &str) -> (Option<i32>, String) {
    let output = support::doctor(
        ControlPlane::shared(),
        &[
            "--no-builtin-registries",
            "--pull-secrets",
            &format!("--configmap-namespace={}", scenario.ns),
            &format!("--watch-namespaces={}", scenario.ns),
            &format!("--pull-secret-name={name}"),
            &format!("--pull-secret-service-accounts={accounts}"),
        ],
    );
    (output.status.code(), String::from_utf8_lossy(&output.stdout).into_owned())
}

/// A scenario whose publisher distributes a Secret named after the test, so tests running side by side (each
/// sees every labelled namespace) keep to their own Secrets.
async fn scenario(prefix: &str, accounts: &[&str]) -> (Scenario, String) {
    let mut scenario = Scenario::new(prefix).await;
    let name = format!("pull-{}", scenario.ns);
    scenario.settings.pull_secrets =
        Some(PullSecrets { name: name.clone(), service_accounts: accounts.iter().map(|a| a.to_string()).collect() });
    (scenario, name)
}

/// One registry distributing its token to one labelled namespace, whose `builder` account already lists someone
/// else's Secret: each test below starts from here, on the shared control plane.
struct Distributing {
    scenario: Scenario,
    name: String,
    client: Client,
    wanted: String,
    running: support::Running,
}

const CLUSTER_HOST: &str = "zot.example:5000";

impl Distributing {
    async fn start(prefix: &str) -> Self {
        let plane = ControlPlane::shared();
        let (scenario, name) = scenario(prefix, &["default", "builder"]).await;
        let client = scenario.client.clone();
        let wanted = plane.namespace(&client, &format!("{prefix}-app")).await.unwrap();
        kubectl(&["label", "namespace", &wanted, LABEL]);
        // Someone else's entry on a chosen account stays whatever we do.
        let builder = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "builder"},
            "imagePullSecrets": [{"name": "theirs"}]});
        apply_in(&client, &wanted, builder).await;
        scenario.apply(source("creds", json!({"token": "first-token"}))).await;
        scenario.apply(registry("localhost:5001", Some("creds"))).await;
        let running = scenario.start();
        let first = BTreeMap::from([
            ("localhost:5001".to_string(), ("oauth2accesstoken".to_string(), "first-token".to_string())),
            (CLUSTER_HOST.to_string(), ("oauth2accesstoken".to_string(), "first-token".to_string())),
        ]);
        wait_config(&client, &wanted, &name, "one entry per published address, token as password", |c| {
            c.as_ref().is_some_and(|c| entries(c) == first)
        })
        .await;
        wait_account(&client, &wanted, "default", &name, &[&name]).await;
        wait_account(&client, &wanted, "builder", &name, &["theirs", &name]).await;
        Self { scenario, name, client, wanted, running }
    }

    /// Waits until every entry of the distributed Secret has this user and password.
    async fn wait_credentials(&self, what: &str, user: &str, password: &str) {
        wait_config(&self.client, &self.wanted, &self.name, what, |c| {
            c.as_ref().is_some_and(|c| entries(c).values().all(|(u, p)| u == user && p == password))
        })
        .await;
    }

    /// Waits until our Secret and our account entries are gone, and someone else's entry stays.
    async fn wait_removed(&self, what: &str) {
        wait_config(&self.client, &self.wanted, &self.name, what, Option::is_none).await;
        wait_account(&self.client, &self.wanted, "default", &self.name, &[]).await;
        wait_account(&self.client, &self.wanted, "builder", &self.name, &["theirs"]).await;
    }

    async fn finish(self) {
        self.running.stop().await;
        ControlPlane::shared().delete_namespace(&self.client, &self.wanted).await.unwrap();
    }
}

#[tokio::test]
async fn pull_credentials_reach_exactly_the_labelled_namespaces_and_doctor_says_where() {
    let plane = ControlPlane::shared();
    let d = Distributing::start("pull-reach").await;
    let unwanted = plane.namespace(&d.client, "pull-reach-other").await.unwrap();
    let secret = Api::<Secret>::namespaced(d.client.clone(), &d.wanted).get(&d.name).await.unwrap();
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/dockerconfigjson"));
    // Give the controller a pass after the other namespace exists: it must still not write there.
    d.scenario.wait_marker().await;
    assert_eq!(docker_config(&d.client, &unwanted, &d.name).await, None, "a namespace nobody labelled gets nothing");
    assert_eq!(docker_config(&d.client, &d.scenario.ns, &d.name).await, None, "nor does the registry's own");
    let untouched = pull_secret_names(&d.client, &unwanted, "default").await;
    assert!(untouched.is_empty(), "{untouched:?}");
    let (code, report) = doctor(&d.scenario, &d.name, "default,builder");
    // 4 all the same: the published host, localhost:5001, is a name only (nothing answers there).
    assert_eq!(code, Some(4), "{report}");
    assert!(report.contains(&format!("names the credentials Secret {}/creds", d.scenario.ns)), "{report}");
    let holding = report.lines().find(|l| l.contains("holding the controller's Secret")).unwrap_or_default();
    assert!(holding.contains(&d.wanted) && !holding.contains(&unwanted), "{report}");
    plane.delete_namespace(&d.client, &unwanted).await.unwrap();
    d.finish().await;
}

#[tokio::test]
async fn pull_credentials_follow_rotation_and_the_registrys_addresses() {
    let d = Distributing::start("pull-follow").await;
    // Rotation: a new token reaches the Secret; the time it took is printed, not asserted.
    let rotated = Instant::now();
    d.scenario.apply(source("creds", json!({"token": "second-token"}))).await;
    d.wait_credentials("the rotated token", "oauth2accesstoken", "second-token").await;
    println!("rotation reached the pull Secret in {:?}", rotated.elapsed());

    // The registry moves: the entries follow its published addresses.
    d.scenario.apply(registry("localhost:5002", Some("creds"))).await;
    wait_config(&d.client, &d.wanted, &d.name, "the new address", |c| {
        c.as_ref().is_some_and(|c| entries(c).keys().map(String::as_str).eq(["localhost:5002", CLUSTER_HOST]))
    })
    .await;
    d.finish().await;
}

#[tokio::test]
async fn an_unusable_credentials_secret_keeps_the_last_good_pull_secret_and_says_why() {
    let d = Distributing::start("pull-unusable").await;
    d.scenario.delete("v1", "Secret", "creds").await;
    d.scenario.wait_event("registry", "PullSecretMissing").await;
    d.scenario.apply(source("creds", json!({"password": "no-user"}))).await;
    let note = d.scenario.wait_event("registry", "PullSecretInvalid").await;
    assert!(note.contains("no \"username\""), "{note}");
    let kept = docker_config(&d.client, &d.wanted, &d.name).await.expect("still there");
    assert!(entries(&kept).values().all(|(_, p)| p == "first-token"), "the last good credentials stay");
    d.scenario.apply(source("creds", json!({"username": "ci", "password": "pair"}))).await;
    d.wait_credentials("user and password", "ci", "pair").await;
    d.finish().await;
}

#[tokio::test]
async fn a_namespace_that_opts_out_loses_exactly_what_was_added() {
    let d = Distributing::start("pull-optout").await;
    kubectl(&["label", "namespace", &d.wanted, "local-registry-publisher.io/pull-secret-wanted-"]);
    d.wait_removed("removed when unlabelled").await;
    d.finish().await;
}

#[tokio::test]
async fn when_the_annotation_goes_only_our_entries_and_mark_go_and_another_releases_stay() {
    let d = Distributing::start("pull-annotation").await;
    // Another release shares the account: its mark must survive ours going.
    let theirs = json!({"metadata": {"annotations": {
        "local-registry-publisher.io/added-pull-secrets": format!("other-release,{}", d.name)}}});
    let accounts = Api::<ServiceAccount>::namespaced(d.client.clone(), &d.wanted);
    accounts.patch("default", &PatchParams::default(), &Patch::Merge(&theirs)).await.expect("another release's mark");
    d.scenario.apply(registry("localhost:5001", None)).await;
    d.wait_removed("removed with the annotation").await;
    let marks = accounts.get("default").await.unwrap();
    let mark = marks.metadata.annotations.unwrap_or_default().remove("local-registry-publisher.io/added-pull-secrets");
    // The other tests' controllers (each its own release, all seeing every labelled namespace) mark it too.
    let marked: Vec<&str> = mark.as_deref().unwrap_or_default().split(',').collect();
    assert!(
        marked.contains(&"other-release") && !marked.contains(&d.name.as_str()),
        "ours gone, theirs kept: {mark:?}"
    );
    d.finish().await;
}

#[tokio::test]
async fn when_the_registry_goes_its_pull_secrets_go() {
    let d = Distributing::start("pull-registry").await;
    d.scenario.delete("v1", "Service", "registry").await;
    d.wait_removed("removed with the registry").await;
    d.finish().await;
}

#[tokio::test]
async fn a_foreign_secret_is_left_untouched_a_refused_write_is_told_and_kube_public_gets_nothing() {
    let plane = ControlPlane::shared();
    let (scenario, name) = scenario("pull-foreign", &["default"]).await;
    let client = scenario.client.clone();
    let taken = plane.namespace(&client, "pull-taken").await.unwrap();
    let foreign = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
        "stringData": {"note": "not the controller's"}});
    let foreign: Secret = serde_json::from_value(foreign).unwrap();
    Api::<Secret>::namespaced(client.clone(), &taken).create(&PostParams::default(), &foreign).await.unwrap();
    kubectl(&["label", "namespace", &taken, LABEL]);
    // A namespace whose quota allows no Secret: the API server refuses the write.
    let full = plane.namespace(&client, "pull-full").await.unwrap();
    let quota = json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-secrets"},
        "spec": {"hard": {"count/secrets": "0"}}});
    apply_in(&client, &full, quota).await;
    kubectl(&["label", "namespace", &full, LABEL]);
    scenario.apply(source("creds", json!({"token": "t"}))).await;
    scenario.apply(registry("localhost:5001", Some("creds"))).await;
    let concerns = ConcernMetrics::default();
    let running = scenario.start_with(Context::new(Metrics::default(), concerns.clone(), Default::default(), None));

    // A refused write is told on the registry, counted, and retried; other namespaces are not held up. Other tests'
    // labelled namespaces are served too (one being deleted refuses a write as well): this test's is looked for.
    let note = scenario.wait_event_saying("registry", "PullSecretFailed", &full).await;
    assert!(note.contains("quota"), "{note}");
    let mut registry = prometheus_client::registry::Registry::default();
    concerns.register(&mut registry);
    let refusals = Metrics::encode(&registry);
    assert!(
        refusals
            .lines()
            .any(|l| l.starts_with("local_registry_publisher_pull_secret_refusals_total{operation=\"apply\"}")),
        "{refusals}"
    );

    scenario.wait_event_saying("registry", "PullSecretNameTaken", &taken).await;
    let (code, report) = doctor(&scenario, &name, "default");
    assert_eq!(code, Some(4), "a refused pull Secret is what is wrong: {report}");
    assert!(report.contains("PROBLEM (PullSecretNameTaken)") && report.contains(&taken), "{report}");

    // kube-public, readable by everyone, gets no credentials even when labelled.
    kubectl(&["label", "namespace", "kube-public", LABEL]);
    scenario.wait_event_saying("registry", "PullSecretRefused", "kube-public").await;
    kubectl(&["label", "namespace", "kube-public", "local-registry-publisher.io/pull-secret-wanted-"]);
    assert_eq!(docker_config(&client, "kube-public", &name).await, None, "nothing written to kube-public");
    let secret = Api::<Secret>::namespaced(client.clone(), &taken).get(&name).await.unwrap();
    assert_eq!(secret.data.unwrap_or_default().keys().collect::<Vec<_>>(), ["note"], "unchanged");
    let listed = pull_secret_names(&client, &taken, "default").await;
    assert!(!listed.contains(&name), "no account names a Secret we did not write: {listed:?}");
    running.stop().await;
    for ns in [taken, full] {
        plane.delete_namespace(&client, &ns).await.unwrap();
    }
}

/// A kubeconfig that authenticates as `account` in `ns` and nothing else.
fn account_kubeconfig(account: &str, ns: &str) -> std::path::PathBuf {
    let token = kubectl(&["create", "token", account, "-n", ns, "--duration", "1h"]);
    token_kubeconfig(token.trim(), &format!("{ns}-{account}"))
}

#[tokio::test]
async fn the_chart_rbac_lets_the_controller_distribute_by_name_and_denies_every_other_secret() {
    let plane = ControlPlane::shared();
    let admin = plane.client().await.unwrap();
    let release_ns = plane.namespace(&admin, "pull-rbac").await.unwrap();
    let registry_ns = plane.namespace(&admin, "pull-rbac-registry").await.unwrap();
    let app = plane.namespace(&admin, "pull-rbac-app").await.unwrap();
    let name = format!("pull-{release_ns}");
    let selector = format!("testbed.local/pull-rbac={release_ns}");
    let chart = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/local-registry-publisher");
    let values = [
        format!("configMap.namespace={release_ns}"),
        format!("registry.watchNamespaces={{{registry_ns}}}"),
        format!("registry.selector={selector}"),
        "registry.builtin=false".into(),
        "pullSecrets.enabled=true".into(),
        format!("pullSecrets.name={name}"),
        "pullSecrets.serviceAccounts={default}".into(),
    ];
    let mut args = vec!["install", "pull-rbac", chart.to_str().unwrap(), "-n", &release_ns];
    args.extend(values.iter().flat_map(|v| ["--set", v.as_str()]));
    ok(support::tool(plane, "helm", &args));
    let kubeconfig = account_kubeconfig("pull-rbac-local-registry-publisher", &release_ns);
    kubectl(&["label", "namespace", &app, LABEL]);

    let (key, value) = selector.split_once('=').unwrap();
    let labels = json!({key: value});
    let allowed = source("registry-credentials", json!({"token": "allowed"}));
    apply_in(&admin, &registry_ns, allowed).await;
    apply_in(&admin, &registry_ns, source("elsewhere", json!({"token": "not readable"}))).await;
    let registry = |source: &str| {
        service(
            "registry",
            labels.clone(),
            json!({"local-registry-publisher.io/host": "localhost:5001",
            "local-registry-publisher.io/pull-secret": source}),
            json!({"type": "ExternalName", "externalName": "zot.example", "ports": [{"name": "registry", "port": 5000}]}),
        )
    };
    apply_in(&admin, &registry_ns, registry("registry-credentials")).await;
    let controller = Controller::start(&[
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--configmap-namespace={release_ns}"),
        format!("--watch-namespaces={registry_ns}"),
        format!("--registry-selector={selector}"),
        "--no-builtin-registries".into(),
        "--pull-secrets".into(),
        format!("--pull-secret-name={name}"),
        "--pull-secret-service-accounts=default".into(),
    ]);
    // Created by server-side apply with only the name-limited grants, and the account patched.
    let written = wait_until(SOON, || async { docker_config(&admin, &app, &name).await }).await;
    let written = written.unwrap_or_else(|| panic!("no pull Secret; controller log:\n{}", controller.logs()));
    assert!(entries(&written).values().all(|(_, p)| p == "allowed"));
    wait_account(&admin, &app, "default", &name, &[&name]).await;

    // A source the chart does not name cannot be read: told on the registry, and what was distributed stays.
    apply_in(&admin, &registry_ns, registry("elsewhere")).await;
    let events = Scenario { client: admin.clone(), ns: registry_ns.clone(), settings: Default::default() };
    let note = events.wait_event("registry", "PullSecretUnreadable").await;
    assert!(note.contains("forbidden"), "{note}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(entries(&docker_config(&admin, &app, &name).await.unwrap()).values().all(|(_, p)| p == "allowed"));
    let (_, ready) = controller.get("/readyz").expect("readyz answers");
    assert!(!ready.contains("unreachable"), "a Secret it may not read does not make the API server look down: {ready}");

    // Nothing beyond its grants.
    let client = client_for(&kubeconfig).await;
    let secrets = Api::<Secret>::namespaced(client.clone(), &registry_ns);
    forbidden(secrets.get("elsewhere").await, "reading a Secret the chart does not name");
    forbidden(secrets.list(&Default::default()).await, "listing Secrets");
    forbidden(Api::<Secret>::all(client.clone()).list(&Default::default()).await, "listing Secrets cluster-wide");
    let other: Secret =
        serde_json::from_value(json!({"metadata": {"name": "other"}, "stringData": {"a": "b"}})).unwrap();
    let app_secrets = Api::<Secret>::namespaced(client.clone(), &app);
    forbidden(app_secrets.create(&PostParams::default(), &other).await, "creating another Secret");
    forbidden(
        app_secrets.patch("other", &PatchParams::apply("x"), &Patch::Apply(&other)).await,
        "applying a Secret of another name",
    );
    forbidden(
        Api::<Secret>::namespaced(client.clone(), &registry_ns)
            .delete("registry-credentials", &Default::default())
            .await,
        "deleting a source Secret",
    );
    let accounts = Api::<ServiceAccount>::namespaced(client.clone(), &app);
    forbidden(accounts.list(&Default::default()).await, "listing ServiceAccounts");
    let builder: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "builder"}})).unwrap();
    forbidden(accounts.create(&PostParams::default(), &builder).await, "creating a ServiceAccount");
    assert!(!controller.logs().contains("panicked"), "{}", controller.logs());

    ok(support::tool(plane, "helm", &["uninstall", "pull-rbac", "-n", &release_ns]));
    for ns in [release_ns, registry_ns, app] {
        plane.delete_namespace(&admin, &ns).await.unwrap();
    }
}

#[tokio::test]
async fn the_kubelets_own_credential_code_resolves_every_published_address_from_the_secret_we_wrote() {
    let plane = ControlPlane::shared();
    let (scenario, name) = scenario("pull-kubelet", &[]).await;
    let client = scenario.client.clone();
    let app = plane.namespace(&client, "pull-kubelet-app").await.unwrap();
    kubectl(&["label", "namespace", &app, LABEL]);
    scenario.apply(source("creds", json!({"token": "a-token:with-colon"}))).await;
    let mut registry = registry("localhost:5001", Some("creds"));
    registry["metadata"]["annotations"]["local-registry-publisher.io/host-from-container-runtime"] =
        json!("127.0.0.1:5001");
    scenario.apply(registry).await;
    let running = scenario.start();
    wait_config(&client, &app, &name, "the pull Secret", Option::is_some).await;
    running.stop().await;

    // The Secret as the kubelet gets it from the API server.
    let secret = Api::<Secret>::namespaced(client.clone(), &app).get(&name).await.unwrap();
    let path = plane.dir().join(format!("{name}.json"));
    std::fs::write(&path, serde_json::to_vec(&secret).unwrap()).unwrap();
    let tools_k8s = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/k8s");
    // The flags hack/tools.sh builds the kubelet with, so the compiled packages come from the Go cache.
    let output = std::process::Command::new("go")
        .args(["test", "-trimpath", "-tags", "selinux,notest", "-count=1", "-v", "./pullsecret/"])
        .current_dir(&tools_k8s)
        .env("GOTOOLCHAIN", "local")
        .env("GOWORK", "off")
        .env("GOFLAGS", "-mod=readonly")
        .env("LRP_PULL_SECRET", &path)
        .env("LRP_PULL_ADDRESSES", "localhost:5001,127.0.0.1:5001,zot.example:5000")
        .env("LRP_PULL_USERNAME", "oauth2accesstoken")
        .env("LRP_PULL_PASSWORD", "a-token:with-colon")
        .output()
        .expect("run go test (Go is part of this machine kind)");
    let report = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "the kubelet's credential code disagrees:\n{report}");
    assert!(report.contains("resolves 3 addresses"), "{report}");
    plane.delete_namespace(&client, &app).await.unwrap();
}

/// Ownership is this controller's field manager, not the managed-by label anyone may set: a Secret given our label
/// by hand is never deleted, and our own copy whose label someone removed still goes when its namespace loses
/// consent, credentials and all.
#[tokio::test]
async fn only_what_the_controller_wrote_is_ours_whatever_the_label_says() {
    let plane = ControlPlane::shared();
    let (scenario, name) = scenario("pull-owner", &[]).await;
    let client = scenario.client.clone();
    let (forged_ns, copied_ns) = (
        plane.namespace(&client, "pull-forged").await.unwrap(),
        plane.namespace(&client, "pull-copied").await.unwrap(),
    );
    // A Secret of someone else's, labelled as ours by hand, in a namespace that asks for credentials.
    let forged = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "local-registry-publisher"}},
        "stringData": {"note": "someone else's"}});
    let forged: Secret = serde_json::from_value(forged).unwrap();
    Api::<Secret>::namespaced(client.clone(), &forged_ns).create(&PostParams::default(), &forged).await.unwrap();
    for ns in [&forged_ns, &copied_ns] {
        kubectl(&["label", "namespace", ns, LABEL]);
    }
    scenario.apply(source("creds", json!({"token": "t0ken"}))).await;
    scenario.apply(registry("localhost:5001", Some("creds"))).await;
    let running = scenario.start();
    scenario.wait_event_saying("registry", "PullSecretNameTaken", &forged_ns).await;
    wait_config(&client, &copied_ns, &name, "our copy", |c| c.is_some()).await;

    // Our copy loses its label by hand; then both namespaces lose consent.
    kubectl(&["label", "secret", &name, "-n", &copied_ns, "app.kubernetes.io/managed-by-"]);
    for ns in [&forged_ns, &copied_ns] {
        kubectl(&["label", "namespace", ns, "local-registry-publisher.io/pull-secret-wanted-"]);
    }
    wait_config(&client, &copied_ns, &name, "our unlabelled copy is removed", |c| c.is_none()).await;
    let still = Api::<Secret>::namespaced(client.clone(), &forged_ns).get(&name).await.expect("never deleted");
    assert_eq!(still.data.unwrap_or_default().keys().collect::<Vec<_>>(), ["note"], "untouched");
    running.stop().await;
    for ns in [forged_ns, copied_ns] {
        plane.delete_namespace(&client, &ns).await.unwrap();
    }
}
