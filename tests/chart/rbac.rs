//! Least privilege: the chart's RBAC proven by running the controller as the chart's ServiceAccount.

use super::*;
use crate::metrics_tls::metrics_tls_files;

/// The chart installed once with its default values (kube-public, leader election): the identity the RBAC tests
/// act as. Its ServiceAccount's token, as a kubeconfig.
fn rbac_release() -> &'static PathBuf {
    static KUBECONFIG: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    KUBECONFIG.get_or_init(|| {
        let (release, ns) = ("rbac", RBAC_NAMESPACE);
        let values = "leaderElection.enabled=true,replicaCount=2";
        ok(tool("helm", &["install", release, &chart(), "-n", ns, "--create-namespace", "--set", values]));
        let token = ok(tool("kubectl", &["create", "token", RBAC_ACCOUNT, "-n", ns, "--duration", "1h"]));
        token_kubeconfig(token.trim(), "controller")
    })
}

const RBAC_NAMESPACE: &str = "lrp-rbac";

const RBAC_ACCOUNT: &str = "rbac-local-registry-publisher";

/// The tests that write kube-public/local-registry-hosting take turns: the chart's grants name that one object.
static KUBE_PUBLIC: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn wait_public_host(public: &Api<ConfigMap>, wanted: &str) -> Option<()> {
    wait_until(SOON, || async {
        let text = public.get_opt("local-registry-hosting").await.ok()??.data?.get("localRegistryHosting.v1")?.clone();
        text.contains(wanted).then_some(())
    })
    .await
}

#[tokio::test]
async fn the_chart_rbac_is_enough_to_publish_fail_over_and_record_events() {
    let plane = ControlPlane::shared();
    let admin = plane.client().await.unwrap();
    let kubeconfig = rbac_release();
    let _turn = KUBE_PUBLIC.lock().await;
    let replica = || {
        Controller::start(&[
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--leader-elect-resource-namespace={RBAC_NAMESPACE}"),
            "--leader-elect".into(),
            format!("--leader-elect-resource-name={RBAC_ACCOUNT}"),
            "--leader-elect-lease-duration=5s".into(),
            "--no-builtin-registries".into(),
        ])
    };
    let first = replica();
    let second = replica();

    // The chart's defaults publish to kube-public/local-registry-hosting.
    let regns = plane.namespace(&admin, "rbac-registry").await.unwrap();
    // A cluster admin's consent; the controller finds it with the chart's namespaces watch permission.
    ok(tool("kubectl", &["label", "namespace", &regns, "local-registry-publisher.io/registries=allowed"]));
    apply_in(&admin, &regns, service("zot", registry_label(), json!({}), json!({"ports": [{"port": 5000}]}))).await;
    let public: Api<ConfigMap> = Api::namespaced(admin.clone(), "kube-public");
    let ip = cluster_ip(&admin, &regns, "zot").await;
    let wanted = |port: u16| format!("{ip}:{port}");
    assert!(
        wait_public_host(&public, &wanted(5000)).await.is_some(),
        "published as the ServiceAccount; logs:\n{}\n{}",
        first.logs(),
        second.logs()
    );

    // Events on the Service it reports on.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(admin.clone(), &regns);
    let recorded = wait_until(SOON, || async {
        let list = events.list(&Default::default()).await.ok()?;
        list.items.into_iter().find(|e| e.reason.as_deref() == Some("Published"))
    })
    .await;
    assert!(recorded.is_some(), "a Published Event was recorded");

    // Fail over: kill whichever leads; the other publishes the next change with the same identity's grants.
    let leader = wait_until(SOON, || async {
        [
            first.metric("leader_election_master_status{name=\"local-registry-publisher\"}"),
            second.metric("leader_election_master_status{name=\"local-registry-publisher\"}"),
        ]
        .iter()
        .position(|m| *m == Some(1.0))
    })
    .await
    .expect("a leader");
    let (mut dying, survivor) = if leader == 0 { (first, second) } else { (second, first) };
    dying.signal("KILL");
    dying.wait_exit(Duration::from_secs(5)).expect("the killed replica exits");
    apply_in(&admin, &regns, service("zot", registry_label(), json!({}), json!({"ports": [{"port": 5001}]}))).await;
    let moved = wait_public_host(&public, &wanted(5001)).await;
    assert!(moved.is_some(), "the survivor published; logs:\n{}", survivor.logs());
    assert!(!survivor.logs().contains("Forbidden"), "no request was denied:\n{}", survivor.logs());
    drop(survivor);
    public.delete("local-registry-hosting", &DeleteParams::default()).await.ok();
}

#[tokio::test]
async fn the_chart_rbac_grants_nothing_more_and_lets_every_reader_get_the_document() {
    let plane = ControlPlane::shared();
    let admin = plane.client().await.unwrap();
    let controller = client_for(rbac_release()).await;
    let regns = plane.namespace(&admin, "rbac-denied").await.unwrap();
    apply_in(&admin, &regns, service("zot", registry_label(), json!({}), json!({"ports": [{"port": 5000}]}))).await;
    let other =
        serde_json::from_value::<ConfigMap>(json!({"metadata": {"name": "not-ours"}, "data": {"a": "b"}})).unwrap();
    let kube_public: Api<ConfigMap> = Api::namespaced(controller.clone(), "kube-public");
    forbidden(kube_public.create(&PostParams::default(), &other).await, "creating another ConfigMap in kube-public");
    forbidden(
        kube_public.patch("cluster-info", &PatchParams::apply("x"), &Patch::Apply(&other)).await,
        "patching kube-public/cluster-info",
    );
    forbidden(kube_public.list(&Default::default()).await, "listing every ConfigMap in kube-public");
    let ns = RBAC_NAMESPACE;
    forbidden(Api::<Secret>::namespaced(controller.clone(), ns).list(&Default::default()).await, "listing Secrets");
    forbidden(Api::<Secret>::all(controller.clone()).list(&Default::default()).await, "listing Secrets cluster-wide");
    let svc = serde_json::from_value::<Service>(json!({"metadata": {"name": "x"}, "spec": {"ports": [{"port": 1}]}}))
        .unwrap();
    forbidden(
        Api::<Service>::namespaced(controller.clone(), &regns).create(&PostParams::default(), &svc).await,
        "creating a Service",
    );
    forbidden(
        Api::<Service>::namespaced(controller.clone(), &regns).delete("zot", &DeleteParams::default()).await,
        "deleting a Service",
    );
    let cm_elsewhere: Api<ConfigMap> = Api::namespaced(controller.clone(), &regns);
    forbidden(cm_elsewhere.create(&PostParams::default(), &other).await, "creating a ConfigMap outside kube-public");
    // In kube-system, kube-proxy's configuration alone, by name: the controller reads its mode there.
    let kube_system: Api<ConfigMap> = Api::namespaced(controller.clone(), "kube-system");
    let proxy = kube_system.get_opt("kube-proxy").await;
    assert!(proxy.is_ok(), "kube-system/kube-proxy may be read: {proxy:?}");
    let named = kube_system.list(&ListParams::default().fields("metadata.name=kube-proxy")).await;
    assert!(named.is_ok(), "and watched by name: {named:?}");
    forbidden(kube_system.list(&Default::default()).await, "listing every ConfigMap in kube-system");
    forbidden(
        kube_system.get("extension-apiserver-authentication").await.map(|_| ()),
        "reading another in kube-system",
    );
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(controller.clone(), ns);
    forbidden(leases.delete(RBAC_ACCOUNT, &DeleteParams::default()).await, "deleting its Lease");
    // Scaling its own Deployment is the uninstall hook's, under a ServiceAccount of its own made only for it.
    let deployments = Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(controller.clone(), ns);
    let scale = json!({"spec": {"replicas": 0}});
    forbidden(
        deployments.patch(RBAC_ACCOUNT, &PatchParams::default(), &Patch::Merge(&scale)).await,
        "scaling its own Deployment",
    );
    forbidden(
        Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(controller.clone(), "kube-system")
            .list(&Default::default())
            .await,
        "reading other Leases",
    );

    // Every authenticated identity may read the published ConfigMap (here or not), and only it.
    let reader_token = ok(tool("kubectl", &["create", "token", "default", "-n", &regns]));
    let reader = client_for(&token_kubeconfig(reader_token.trim(), "reader")).await;
    let reader_public: Api<ConfigMap> = Api::namespaced(reader, "kube-public");
    let readable = reader_public.get_opt("local-registry-hosting").await;
    assert!(readable.is_ok(), "in-cluster readers may get it: {readable:?}");
    forbidden(reader_public.get("not-there").await.map(|_: ConfigMap| ()), "reading other ConfigMaps in kube-public");
}

#[tokio::test]
async fn withdraw_as_the_charts_identity_removes_only_what_the_controller_wrote() {
    let admin = ControlPlane::shared().client().await.unwrap();
    let kubeconfig = rbac_release();
    let _turn = KUBE_PUBLIC.lock().await;
    let public: Api<ConfigMap> = Api::namespaced(admin.clone(), "kube-public");
    let withdraw = || {
        let mut command = std::process::Command::new(support::binary::BINARY);
        command.arg("withdraw").arg(format!("--kubeconfig={}", kubeconfig.display()));
        command.output().expect("run withdraw")
    };
    // Ours goes.
    let ours = serde_json::from_value::<ConfigMap>(json!({"metadata": {"name": "local-registry-hosting",
            "labels": {"app.kubernetes.io/managed-by": "local-registry-publisher"}},
        "data": {"localRegistryHosting.v1": "host: \"localhost:5001\"\n"}}))
    .unwrap();
    public
        .patch("local-registry-hosting", &PatchParams::apply("local-registry-publisher").force(), &Patch::Apply(&ours))
        .await
        .expect("ours");
    let output = withdraw();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(public.get_opt("local-registry-hosting").await.unwrap().is_none(), "withdrawn");

    // A foreign one stays.
    let foreign = serde_json::from_value::<ConfigMap>(json!({"metadata": {"name": "local-registry-hosting"},
        "data": {"localRegistryHosting.v1": "host: \"localhost:5001\"\n"}}))
    .unwrap();
    public.create(&PostParams::default(), &foreign).await.expect("a foreign ConfigMap");
    let output = withdraw();
    assert!(output.status.success() && String::from_utf8_lossy(&output.stderr).contains("another tool wrote it"));
    assert!(
        public.get_opt("local-registry-hosting").await.unwrap().is_some(),
        "a foreign ConfigMap is never withdrawn"
    );
    public.delete("local-registry-hosting", &DeleteParams::default()).await.ok();

    // Ours, shared with another writer's key: only our key and label go.
    let shared = serde_json::from_value::<ConfigMap>(json!({"metadata": {"name": "local-registry-hosting",
            "labels": {"app.kubernetes.io/managed-by": "local-registry-publisher"}},
        "data": {"localRegistryHosting.v1": "host: \"localhost:5001\"\n", "localRegistryHosting.v2": "x: 1\n"}}))
    .unwrap();
    public
        .patch("local-registry-hosting", &PatchParams::apply("local-registry-publisher"), &Patch::Apply(&shared))
        .await
        .expect("our part");
    let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "local-registry-hosting"},
        "data": {"localRegistryHosting.v2": "x: 1\n"}});
    public
        .patch("local-registry-hosting", &PatchParams::apply("future-writer").force(), &Patch::Apply(&other))
        .await
        .expect("the other writer's part");
    let output = withdraw();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let left = public.get("local-registry-hosting").await.expect("the shared ConfigMap stays");
    let keys: Vec<String> = left.data.unwrap_or_default().into_keys().collect();
    assert_eq!(keys, ["localRegistryHosting.v2"], "only our key is withdrawn");
    assert!(!left.metadata.labels.unwrap_or_default().contains_key("app.kubernetes.io/managed-by"), "and our label");
    public.delete("local-registry-hosting", &DeleteParams::default()).await.ok();
}

/// A release watching only a fresh namespace and publishing there, and the controller binary run with the
/// release's ServiceAccount token and `extra` flags.
pub(crate) struct ScopedRelease {
    pub(crate) admin: kube::Client,
    pub(crate) regns: String,
    pub(crate) kubeconfig: PathBuf,
    pub(crate) controller: Controller,
}

pub(crate) async fn scoped_release(release: &str, ns: &str, values: &str, extra: &[&str]) -> ScopedRelease {
    let plane = ControlPlane::shared();
    let admin = plane.client().await.unwrap();
    let regns = plane.namespace(&admin, &format!("{release}-registry")).await.unwrap();
    let values = format!(
        "{values}registry.watchNamespaces={{{regns}}},registry.builtin=false,configMap.namespace={regns},rbac.readerRole=false"
    );
    ok(tool("helm", &["install", release, &chart(), "-n", ns, "--create-namespace", "--set", &values]));
    let sa = format!("{release}-local-registry-publisher");
    let token = ok(tool("kubectl", &["create", "token", &sa, "-n", ns, "--duration", "1h"]));
    let kubeconfig = token_kubeconfig(token.trim(), release);
    let mut args = vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--watch-namespaces={regns}"),
        format!("--configmap-namespace={regns}"),
        "--no-builtin-registries".into(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    // As the Deployment does: the serving certificate the release made, mounted and named by flags.
    if let Some(files) = metrics_tls_files(&admin, release, ns).await {
        args.push(format!("--tls-cert-file={}", files.join("tls.crt").display()));
        args.push(format!("--tls-private-key-file={}", files.join("tls.key").display()));
    }
    ScopedRelease { admin, regns, kubeconfig, controller: Controller::start(&args) }
}

#[tokio::test]
async fn with_watch_namespaces_the_chart_rbac_is_namespaced_and_still_enough() {
    let (release, ns) = ("scoped", "lrp-scoped");
    let ScopedRelease { admin, regns, kubeconfig, controller: _running } = scoped_release(release, ns, "", &[]).await;
    let rendered = ok(tool("helm", &["get", "manifest", release, "-n", ns]));
    assert!(!rendered.contains("kind: ClusterRole"), "no cluster-wide access at all:\n{rendered}");
    apply_in(&admin, &regns, service("zot", registry_label(), json!({}), json!({"ports": [{"port": 5000}]}))).await;
    let configmaps: Api<ConfigMap> = Api::namespaced(admin.clone(), &regns);
    let published = wait_until(SOON, || async { configmaps.get_opt(TARGET).await.ok().flatten() }).await;
    assert!(published.is_some(), "the namespaced Roles are enough to publish");

    let controller = client_for(&kubeconfig).await;
    let elsewhere = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(controller.clone(), "kube-system");
    forbidden(elsewhere.list(&Default::default()).await, "listing pods outside the watched namespaces");
    forbidden(
        Api::<k8s_openapi::api::core::v1::Node>::all(controller.clone()).list(&Default::default()).await,
        "nodes",
    );
    let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(controller.clone());
    forbidden(namespaces.list(&Default::default()).await, "namespaces");
    ok(tool("helm", &["uninstall", release, "-n", ns, "--wait", "--timeout", "120s"]));
}

#[test]
fn the_controller_may_read_exactly_the_ca_bundles_the_chart_names_and_none_by_default() {
    let ca_roles = |values: &[&str]| -> Vec<serde_json::Value> {
        let chart = chart();
        let mut template = vec!["template", "lrp", chart.as_str(), "--set", "nodeAgent.enabled=true"];
        template.extend(values.iter().flat_map(|value| ["--set", *value]));
        let rendered = ok(tool("helm", &template));
        let roles = rendered_objects(&rendered, "ClusterRole");
        roles.into_iter().filter(|role| role["metadata"]["name"] == "lrp-local-registry-publisher-ca-bundles").collect()
    };
    // An empty resourceNames list would grant every ConfigMap and Secret: no rule at all instead.
    assert!(ca_roles(&[]).is_empty());
    let roles = ca_roles(&["nodeAgent.caBundles={configmap/registry-ca,secret/registry-tls,both}"]);
    assert_eq!(roles.len(), 1);
    // Each kind for the names given it, read as the controller follows them: by name, with list and watch.
    assert_eq!(
        roles[0]["rules"],
        serde_json::json!([
            {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["registry-ca", "both"], "verbs": ["list", "watch"]},
            {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["registry-tls", "both"], "verbs": ["list", "watch"]}
        ])
    );
    let refused = tool("helm", &["template", "lrp", &chart(), "--set", "nodeAgent.caBundles={Not_A_Name}"]);
    assert!(!refused.status.success(), "a name the API server could not hold is refused");
}

#[test]
fn the_readmes_rbac_table_names_every_role_and_cluster_role_the_chart_makes_and_no_other() {
    // Every option on, once cluster-wide and once with watched namespaces; hooks included.
    let all_on = root().join("charts/local-registry-publisher/ci/all-on-values.yaml").display().to_string();
    let mut made: BTreeSet<(String, String)> = BTreeSet::new();
    for extra in ["registry.builtin=true", "registry.watchNamespaces={a,b},registry.builtin=false"] {
        let values = format!("{extra},pullSecrets.serviceAccounts={{default}}");
        let rendered = ok(tool("helm", &["template", "lrp", &chart(), "-f", &all_on, "--set", &values]));
        for kind in ["Role", "ClusterRole"] {
            for object in rendered_objects(&rendered, kind) {
                let name = object["metadata"]["name"].as_str().expect("a name");
                let suffix = name.strip_prefix("lrp-local-registry-publisher").expect("named after the release");
                let named = format!("<fullname>{}", suffix.replace("mirror-0", "mirror-<n>"));
                made.insert((named, kind.to_string()));
            }
        }
    }
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let table = readme.split("| name | kind | where | bound to | made when | for |").nth(1).expect("the RBAC table");
    let listed: BTreeSet<(String, String)> = table
        .lines()
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            (cells[1].trim_matches('`').to_string(), cells[2].to_string())
        })
        .collect();
    assert_eq!(
        made.difference(&listed).collect::<Vec<_>>(),
        Vec::<&(String, String)>::new(),
        "made, not in the README"
    );
    assert_eq!(
        listed.difference(&made).collect::<Vec<_>>(),
        Vec::<&(String, String)>::new(),
        "in the README, not made"
    );
}
