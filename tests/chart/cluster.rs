//! The chart and plain manifests on the control plane: server-side dry run, kustomize, install, upgrade, uninstall.

use super::*;

#[tokio::test]
async fn the_rendered_manifests_pass_a_server_side_dry_run() {
    let plane = ControlPlane::shared();
    let client = plane.client().await.unwrap();
    plane.namespace(&client, "dryrun").await.unwrap();
    let namespace = ok(tool("kubectl", &["get", "ns", "-o", "name"]));
    let ns = namespace.lines().find_map(|l| l.strip_prefix("namespace/").filter(|n| n.starts_with("dryrun-"))).unwrap();
    // Rendered for the version the cluster runs, as `helm install` renders: fields the chart gates on the version
    // (the PodDisruptionBudget's unhealthyPodEvictionPolicy) must be accepted, or left out, on every tested minor.
    // Every optional part on, the CRD included (generated from the Rust type, so a schema feature an old API server
    // lacks would show here): the node agent's DaemonSet and RBAC, CA bundles, a mirror and pull Secrets.
    let minor = testbed::KubeVersion::from_env().unwrap().minor;
    let optional = "leaderElection.enabled=true,replicaCount=2,podDisruptionBudget.enabled=true,\
                    nodeAgent.enabled=true,nodeAgent.caBundles={registry-ca},\
                    nodeAgent.mirrors[0].upstream=docker.io,nodeAgent.mirrors[0].endpoint=http://cache.example:5000,\
                    nodeAgent.relay.enabled=true,nodeAgent.httpPort=9808,nodeAgent.relay.registries[0].port=5000,\
                    nodeAgent.relay.registries[0].service.namespace=registry,\
                    nodeAgent.relay.registries[0].service.name=registry,\
                    pullSecrets.enabled=true,networkPolicy.enabled=true,networkPolicy.apiServer.cidrs={10.0.0.1/32},\
                    networkPolicy.apiServer.ports={6443},\
                    networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.team=monitoring";
    let rendered = ok(tool(
        "helm",
        &[
            "template",
            "dry",
            &chart(),
            "-n",
            ns,
            "--kube-version",
            &format!("{minor}.0"),
            "--include-crds",
            "--set",
            optional,
        ],
    ));
    for kind in ["CustomResourceDefinition", "DaemonSet", "ClusterRole", "Deployment", "NetworkPolicy"] {
        assert!(rendered.contains(&format!("\nkind: {kind}\n")), "no {kind} rendered:\n{rendered}");
    }
    let applied = stdin_tool("kubectl", &["apply", "--server-side", "--dry-run=server", "-f", "-"], &rendered);
    // The API server's warnings (a format it does not know in the CRD's schema, say) are the first thing a new user
    // would see at `helm install`: there are none.
    let warned = String::from_utf8_lossy(&applied.stderr).into_owned();
    ok(applied);
    assert!(!warned.to_lowercase().contains("warning"), "the API server warned:\n{warned}");
    // A namespace created in a dry run does not exist for the dry run of what goes into it.
    let _deploy = DEPLOY_NAMESPACE.lock().await;
    ok(tool("kubectl", &["apply", "--server-side", "-f", &root().join("deploy/namespace.yaml").display().to_string()]));
    let manifests = std::fs::read_to_string(root().join("deploy/local-registry-publisher.yaml")).unwrap();
    ok(stdin_tool("kubectl", &["apply", "--server-side", "--dry-run=server", "-f", "-"], &manifests));
}

/// The plain manifests' namespace, which the dry run creates and the kustomize test deletes.
static DEPLOY_NAMESPACE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// (kind, namespace, name) of each object in manifests.
fn identities(manifests: &str) -> BTreeSet<(String, String, String)> {
    let field =
        |object: &serde_json::Value, pointer: &str| object.pointer(pointer).and_then(|v| v.as_str()).map(String::from);
    manifests
        .split("\n---")
        .filter_map(|document| serde_saphyr::from_str::<serde_json::Value>(document).ok())
        .filter(|object| object.is_object())
        .map(|o| {
            let namespace = field(&o, "/metadata/namespace").unwrap_or_default();
            (field(&o, "/kind").unwrap_or_default(), namespace, field(&o, "/metadata/name").unwrap_or_default())
        })
        .collect()
}

/// deploy/ is a kustomize base: it builds (kubectl's own kustomize) to exactly the plain manifests, an overlay sets the
/// image, and the base applies to the control plane and deletes cleanly.
#[tokio::test]
async fn the_plain_manifests_are_a_kustomize_base_that_builds_overlays_and_applies() {
    let deploy = root().join("deploy");
    let listed = std::fs::read_to_string(deploy.join("kustomization.yaml")).expect("deploy/kustomization.yaml");
    for entry in std::fs::read_dir(&deploy).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name != "kustomization.yaml" {
            assert!(listed.contains(&format!("- {name}\n")), "deploy/kustomization.yaml lists {name}");
        }
    }
    let built = ok(tool("kubectl", &["kustomize", &deploy.display().to_string()]));
    let plain = ["namespace.yaml", "local-registry-publisher.yaml"]
        .map(|file| std::fs::read_to_string(deploy.join(file)).unwrap())
        .join("\n---\n");
    assert_eq!(identities(&built), identities(&plain), "the base is the plain manifests");
    assert!(identities(&built).len() > 10);

    let overlay = root().join(format!("target/kustomize-overlay-{}", std::process::id()));
    std::fs::create_dir_all(&overlay).unwrap();
    std::fs::write(
        overlay.join("kustomization.yaml"),
        "resources: [../../deploy]\nimages:\n  - name: local-registry-publisher\n    newName: registry.example/lrp\n    \
         newTag: \"9.9.9\"\n",
    )
    .unwrap();
    let built = ok(tool("kubectl", &["kustomize", &overlay.display().to_string()]));
    std::fs::remove_dir_all(&overlay).unwrap();
    let deployment = &rendered_objects(&built, "Deployment")[0];
    assert_eq!(deployment["spec"]["template"]["spec"]["containers"][0]["image"], "registry.example/lrp:9.9.9");

    let _deploy = DEPLOY_NAMESPACE.lock().await;
    let base = deploy.display().to_string();
    ok(tool("kubectl", &["apply", "--server-side", "-k", &base]));
    let applied =
        ok(tool("kubectl", &["get", "deployment,serviceaccount", "-n", "local-registry-publisher", "-o", "name"]));
    assert!(applied.contains("deployment.apps/local-registry-publisher"), "{applied}");
    let publish = ok(tool("kubectl", &["get", "role", "-n", "kube-public", "-o", "name"]));
    assert!(publish.contains("role.rbac.authorization.k8s.io/local-registry-publisher"), "{publish}");
    ok(tool("kubectl", &["delete", "-k", &base, "--wait"]));
    let left = ok(tool(
        "kubectl",
        &["get", "clusterroles", "-l", "app.kubernetes.io/instance=local-registry-publisher", "-o", "name"],
    ));
    assert!(left.trim().is_empty(), "left after delete -k: {left}");
}

#[tokio::test]
async fn helm_install_upgrade_and_uninstall_leave_nothing_behind() {
    let release = "lifecycle";
    let ns = "lrp-lifecycle";
    ok(tool("helm", &["install", release, &chart(), "-n", ns, "--create-namespace", "--wait", "--timeout", "120s"]));
    let status = ok(tool("helm", &["status", release, "-n", ns]));
    assert!(status.contains("STATUS: deployed") && status.contains("kubectl label service"), "{status}");
    ok(tool(
        "helm",
        &[
            "upgrade",
            release,
            &chart(),
            "-n",
            ns,
            "--wait",
            "--timeout",
            "120s",
            "--set",
            "replicaCount=2,leaderElection.enabled=true,podDisruptionBudget.enabled=true",
        ],
    ));
    let leader_role = ok(tool("kubectl", &["get", "role", "-n", ns, "-o", "name"]));
    assert!(leader_role.contains("lifecycle-local-registry-publisher-leader"), "{leader_role}");
    ok(tool("helm", &["uninstall", release, "-n", ns, "--wait"]));

    let selector = format!("app.kubernetes.io/instance={release}");
    let kinds = "deployments,replicasets,pods,jobs,serviceaccounts,roles,rolebindings,services,poddisruptionbudgets";
    let left = wait_until(Duration::from_secs(60), || async {
        let namespaced = ok(tool("kubectl", &["get", kinds, "-A", "-l", &selector, "-o", "name"]));
        let cluster = ok(tool("kubectl", &["get", "clusterroles,clusterrolebindings", "-l", &selector, "-o", "name"]));
        let all = namespaced + &cluster;
        all.trim().is_empty().then_some(())
    })
    .await;
    assert!(
        left.is_some(),
        "objects remain after uninstall: {}",
        ok(tool("kubectl", &["get", kinds, "-A", "-l", &selector, "-o", "name"]))
    );
    // What stays, as the README's uninstall section says with the command that removes it: the NodePullState CRD,
    // which Helm installs from crds/ with every release (this one had the node agent off) and never deletes.
    let crd = "nodepullstates.local-registry-publisher.io";
    assert!(ok(tool("kubectl", &["get", "crd", crd, "-o", "name"])).contains(crd));
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let uninstall = readme.split("`helm uninstall` leaves").nth(1).unwrap_or_default();
    let said = uninstall.split("\n\n").next().unwrap_or_default();
    assert!(said.contains(&format!("kubectl delete crd {crd}")) && said.contains("nodeAgent.enabled"), "{said}");
}

/// Each list and map value taken out again the way the README says (`--reset-then-reuse-values --set <value>=null`):
/// the release's Deployment, DaemonSet and RBAC no longer carry it, while the others stay until their turn. And
/// `--reuse-values`, which the README warns against, keeps a value set to null while `helm get values` hides it.
#[tokio::test]
async fn a_list_or_map_value_taken_out_as_the_readme_says_leaves_nothing_of_it_in_the_release() {
    let (release, ns) = ("takeout", "lrp-takeout");
    let mirror = "nodeAgent.mirrors[0].upstream=docker.io,nodeAgent.mirrors[0].endpoint=http://cache.example:5000";
    let values = format!(
        "nodeAgent.enabled=true,{mirror},nodeAgent.allowedAddresses={{registry.corp.example:5000}},\
         nodeAgent.caBundles={{registry-ca}},nodeAgent.nodeSelector.disktype=ssd"
    );
    ok(tool("helm", &["install", release, &chart(), "-n", ns, "--create-namespace", "--set", &values]));
    let manifest = || ok(tool("helm", &["get", "manifest", release, "-n", ns]));
    let upgrade = |how: &str, set: &str| ok(tool("helm", &["upgrade", release, &chart(), "-n", ns, how, "--set", set]));
    // What each value renders: the controller's flags, the CA bundles' ClusterRole, the agents' node selector.
    let carried = [
        ("nodeAgent.mirrors", "--node-mirrors=docker.io=http://cache.example:5000"),
        ("nodeAgent.allowedAddresses", "--node-allowed-addresses=registry.corp.example:5000"),
        ("nodeAgent.caBundles", "takeout-local-registry-publisher-ca-bundles"),
        ("nodeAgent.nodeSelector.disktype", "disktype: ssd"),
    ];
    for (index, (value, mark)) in carried.iter().enumerate() {
        let before = manifest();
        for (_, still) in &carried[index..] {
            assert!(before.contains(still), "{still} is not rendered before its turn:\n{before}");
        }
        upgrade("--reset-then-reuse-values", &format!("{value}=null"));
        let after = manifest();
        assert!(!after.contains(mark), "{value}=null, as the README says, still renders {mark}:\n{after}");
    }

    // The way the README warns against: the mirror stays rendered, though `helm get values` no longer lists it.
    upgrade("--reset-then-reuse-values", mirror);
    upgrade("--reuse-values", "nodeAgent.mirrors=null");
    assert!(!ok(tool("helm", &["get", "values", release, "-n", ns])).contains("docker.io"));
    assert!(manifest().contains(carried[0].1), "--reuse-values took the mirror out: the README's warning is wrong");
    ok(tool("helm", &["uninstall", release, "-n", ns, "--wait"]));
}
