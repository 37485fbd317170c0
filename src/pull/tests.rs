use super::fixtures::*;
use super::*;
use k8s_openapi::api::core::v1::LocalObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

const ACCOUNT_ANNOTATION: &str = keys::pull::ADDED_PULL_SECRETS;

fn account(namespace: &str, name: &str, entries: &[&str], mark: Option<&str>) -> Arc<ServiceAccount> {
    Arc::new(ServiceAccount {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            resource_version: Some("7".into()),
            annotations: mark.map(|m| [(ACCOUNT_ANNOTATION.to_string(), m.to_string())].into()),
            ..ObjectMeta::default()
        },
        image_pull_secrets: (!entries.is_empty())
            .then(|| entries.iter().map(|e| LocalObjectReference { name: e.to_string() }).collect()),
        ..ServiceAccount::default()
    })
}

fn reasons(plan: &Plan) -> Vec<&str> {
    plan.notices.iter().map(|n| n.reason.as_str()).collect()
}

#[test]
fn each_opted_in_namespace_gets_one_secret_and_kube_public_none() {
    let published = registry(Some("creds"));
    let observed = observed(&["app", "kube-public", "team"], "t0ken");
    let plan = plan(Some(&published), &observed, &settings(&[]));
    let namespaces: Vec<_> = plan.apply.iter().map(|s| s.metadata.namespace.as_deref().unwrap()).collect();
    assert_eq!(namespaces, ["app", "team"]);
    assert_eq!(reasons(&plan), ["PullSecretRefused"]);
    let secret = &plan.apply[0];
    assert_eq!(secret.type_.as_deref(), Some(SECRET_TYPE));
    assert_eq!(secret.metadata.name.as_deref(), Some("local-registry-pull"));
    assert_eq!(secret.labels().get(MANAGED_BY).map(String::as_str), Some(MANAGER));
    assert!(is_ours(&stored(secret.clone())), "ours once stored under our field manager");
    let config: Value = serde_json::from_slice(&secret.data.as_ref().unwrap()[DATA_KEY].0).unwrap();
    let hosts: Vec<&String> = config["auths"].as_object().unwrap().keys().collect();
    assert_eq!(hosts, ["localhost:30500", "registry.reg.svc.cluster.local:5000"]);
}

#[test]
fn nothing_is_written_when_every_secret_already_holds_the_credentials() {
    let published = registry(Some("creds"));
    let mut observed = observed(&["app"], "t0ken");
    let first = plan(Some(&published), &observed, &settings(&[]));
    observed.secrets = first.apply.into_iter().map(stored).collect();
    assert!(plan(Some(&published), &observed, &settings(&[])).is_empty());

    // A rotated token rewrites it.
    observed.credentials = self::observed(&[], "rotated").credentials;
    let rotated = plan(Some(&published), &observed, &settings(&[]));
    assert_eq!(rotated.apply.len(), 1);
    let config = String::from_utf8(rotated.apply[0].data.as_ref().unwrap()[DATA_KEY].0.clone()).unwrap();
    assert!(config.contains("\"password\":\"rotated\""), "{config}");
}

#[test]
fn ownership_is_our_field_manager_not_the_label() {
    let published = registry(Some("creds"));
    let mut observed = observed(&["app"], "t0ken");
    let first = plan(Some(&published), &observed, &settings(&[]));
    // Someone labels a Secret of their own as ours, by hand (kubectl's field manager, an Update).
    let mut forged = first.apply[0].clone();
    forged.metadata.uid = Some("uid-forged".into());
    forged.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
        manager: Some("kubectl-label".into()),
        operation: Some("Update".into()),
        ..ManagedFieldsEntry::default()
    }]);
    assert!(!is_ours(&forged), "the label alone proves nothing");
    observed.secrets = vec![Arc::new(forged)];
    observed.namespaces.clear();
    let unlabelled = plan(Some(&published), &observed, &settings(&[]));
    assert!(unlabelled.delete.is_empty(), "a Secret this controller never wrote is never deleted: {unlabelled:?}");

    // Our own copy, its label removed by hand: still ours, so it goes when the namespace loses consent.
    let mut ours = (*stored(first.apply[0].clone())).clone();
    ours.metadata.labels = None;
    observed.secrets = vec![Arc::new(ours)];
    let gone = plan(Some(&published), &observed, &settings(&[]));
    assert_eq!(gone.delete, [("app".to_string(), Some("uid-1".to_string()))], "its credentials do not stay behind");
}

#[test]
fn a_secret_someone_else_wrote_under_our_name_is_left_alone_and_reported() {
    let published = registry(Some("creds"));
    let mut observed = observed(&["app"], "t0ken");
    let foreign = Secret {
        metadata: ObjectMeta {
            name: Some("local-registry-pull".into()),
            namespace: Some("app".into()),
            ..Default::default()
        },
        ..Secret::default()
    };
    observed.secrets = vec![Arc::new(foreign)];
    observed.accounts = vec![account("app", "default", &[], None)];
    let plan = plan(Some(&published), &observed, &settings(&["default"]));
    assert!(plan.is_empty(), "{plan:?}");
    assert_eq!(reasons(&plan), ["PullSecretNameTaken"]);
}

#[test]
fn an_unusable_source_keeps_what_was_distributed_and_says_why() {
    let published = registry(Some("creds"));
    let mut observed = observed(&["app", "new"], "t0ken");
    let first = plan(Some(&published), &observed, &settings(&[]));
    observed.secrets =
        first.apply.into_iter().filter(|s| s.metadata.namespace.as_deref() == Some("app")).map(stored).collect();
    for (source, reason) in [
        (Err("secrets \"creds\" is forbidden".to_string()), "PullSecretUnreadable"),
        (Ok(None), "PullSecretMissing"),
        (Ok(Some(source(&[("password", "p")]))), "PullSecretInvalid"),
    ] {
        observed.credentials = credentials(source);
        let plan = plan(Some(&published), &observed, &settings(&[]));
        assert!(plan.is_empty(), "{reason}: {plan:?}");
        assert_eq!(reasons(&plan), [reason]);
    }
}

#[test]
fn when_the_registry_or_its_annotation_goes_only_what_we_added_is_removed() {
    let published = registry(Some("creds"));
    let mut observed = observed(&["app", "other"], "t0ken");
    let accounts = settings(&["default", "builder"]);
    observed.accounts = vec![
        account("app", "default", &["theirs"], None),
        account("app", "builder", &["local-registry-pull"], None),
        account("other", "default", &[], None),
        account("app", "unrelated", &[], None),
    ];
    let first = plan(Some(&published), &observed, &accounts);
    let patched: Vec<_> = first.accounts.iter().map(|a| format!("{}/{}", a.namespace, a.name)).collect();
    assert_eq!(patched, ["app/default", "other/default"], "builder already lists it; unrelated is not chosen");
    assert_eq!(
        first.accounts[0].patch,
        json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
            {"op": "add", "path": "/imagePullSecrets/-", "value": {"name": "local-registry-pull"}},
            {"op": "add", "path": "/metadata/annotations", "value": {ACCOUNT_ANNOTATION: "local-registry-pull"}},
        ])
    );
    assert_eq!(
        first.accounts[1].patch[1],
        json!({"op": "add", "path": "/imagePullSecrets", "value": [{"name": "local-registry-pull"}]})
    );

    // After the writes: every Secret stored, the default accounts marked.
    observed.secrets = first.apply.into_iter().map(stored).collect();
    observed.accounts = vec![
        account("app", "default", &["theirs", "local-registry-pull"], Some("local-registry-pull")),
        account("app", "builder", &["local-registry-pull"], None),
        account("other", "default", &["local-registry-pull"], Some("local-registry-pull")),
    ];
    assert!(plan(Some(&published), &observed, &accounts).is_empty());

    // "other" is no longer opted in, and then the annotation goes.
    observed.namespaces.retain(|n| n.name != "other");
    let unlabelled = plan(Some(&published), &observed, &accounts);
    assert_eq!(unlabelled.delete, [("other".to_string(), Some("uid-1".to_string()))]);
    assert_eq!(unlabelled.accounts.len(), 1);
    assert_eq!(
        unlabelled.accounts[0].patch,
        json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
            {"op": "remove", "path": "/imagePullSecrets/0"},
            {"op": "remove", "path": "/metadata/annotations/local-registry-publisher.io~1added-pull-secrets"},
        ])
    );
    let gone = plan(Some(&registry(None)), &observed, &accounts);
    let deleted: Vec<_> = gone.delete.iter().map(|(ns, _)| ns.as_str()).collect();
    assert_eq!(deleted, ["app", "other"]);
    let patched: Vec<_> = gone.accounts.iter().map(|a| format!("{}/{}", a.namespace, a.name)).collect();
    assert_eq!(patched, ["app/default", "other/default"], "builder's entry was not ours");
    assert_eq!(gone.accounts[0].patch[1], json!({"op": "remove", "path": "/imagePullSecrets/1"}), "theirs stays");
    assert_eq!(plan(None, &observed, &accounts).delete.len(), 2, "nothing published: the same");
}

#[test]
fn two_releases_sharing_an_account_each_keep_their_own_mark() {
    let published = registry(Some("creds"));
    let mut observed = observed(&["app"], "t0ken");
    let ours = settings(&["default"]);
    // Another release (Secret "other-pull") added its entry first.
    observed.accounts = vec![account("app", "default", &["other-pull"], Some("other-pull"))];
    let added = plan(Some(&published), &observed, &ours);
    assert_eq!(
        added.accounts[0].patch[2],
        json!({"op": "replace", "path": "/metadata/annotations/local-registry-publisher.io~1added-pull-secrets",
            "value": "local-registry-pull,other-pull"})
    );
    observed.accounts =
        vec![account("app", "default", &["other-pull", "local-registry-pull"], Some("local-registry-pull,other-pull"))];
    let removed = plan(None, &observed, &ours);
    assert_eq!(removed.accounts[0].patch[1], json!({"op": "remove", "path": "/imagePullSecrets/1"}));
    assert_eq!(
        removed.accounts[0].patch[2],
        json!({"op": "replace", "path": "/metadata/annotations/local-registry-publisher.io~1added-pull-secrets",
            "value": "other-pull"}),
        "the other release's mark stays"
    );
}

#[test]
fn a_namespace_being_deleted_gets_no_write_and_loses_nothing_by_the_controller() {
    let published = registry(Some("creds"));
    let mut observed = observed(&["app", "going"], "t0ken");
    let accounts = settings(&["default"]);
    observed.accounts = vec![account("app", "default", &[], None), account("going", "default", &[], None)];
    for namespace in observed.namespaces.iter_mut() {
        if namespace.name == "going" {
            Arc::make_mut(namespace).terminating = true;
        }
    }
    let touched = |plan: &Plan, ns: &str| {
        plan.apply.iter().any(|s| s.metadata.namespace.as_deref() == Some(ns))
            || plan.delete.iter().any(|(n, _)| n == ns)
            || plan.accounts.iter().any(|a| a.namespace == ns)
    };
    // Nothing new is written there (the API server would refuse it)...
    let first = plan(Some(&published), &observed, &accounts);
    assert!(!touched(&first, "going") && touched(&first, "app"), "{first:?}");
    assert!(first.notices.is_empty(), "{:?}", first.notices);
    // ...and what is there is not removed (the namespace takes it), even with the registry gone.
    let secret = |ns: &str| stored(pull_secret(ns, "{}", &accounts, Some(&published)));
    observed.secrets = vec![secret("app"), secret("going")];
    let gone = plan(None, &observed, &accounts);
    assert!(!touched(&gone, "going") && touched(&gone, "app"), "{gone:?}");
}

#[test]
fn the_watches_follow_the_named_source_the_labelled_namespaces_and_where_our_secret_still_is() {
    let published = registry(Some("creds"));
    let chosen = settings(&["default"]);
    // Our Secret is still in `gone`, whose label was removed: its accounts stay watched until their entries go.
    let mut observed = observed(&["app"], "t0ken");
    let earlier = plan(Some(&published), &self::observed(&["gone"], "t0ken"), &chosen);
    observed.secrets = earlier.apply.into_iter().map(stored).collect();
    let watched = interest(Some(&published), &observed, &chosen);
    assert_eq!(watched.credentials.iter().collect::<Vec<_>>(), [&WatchKey::in_namespace("reg").named("creds")]);
    let wanted = crate::watching::equal(keys::namespace::PULL_SECRET_WANTED, keys::namespace::PULL_SECRET_WANTED_VALUE);
    assert_eq!(watched.namespaces.iter().collect::<Vec<_>>(), [&WatchKey::everywhere().labels(wanted)]);
    assert_eq!(watched.secrets.iter().collect::<Vec<_>>(), [&WatchKey::everywhere().named("local-registry-pull")]);
    let accounts: Vec<_> = watched.accounts.iter().cloned().collect();
    assert_eq!(
        accounts,
        [WatchKey::in_namespace("app").named("default"), WatchKey::in_namespace("gone").named("default")]
    );
    // Nothing published: no source to read.
    assert!(interest(None, &observed, &chosen).credentials.is_empty());
}

#[test]
fn a_plan_is_empty_only_when_it_writes_deletes_and_patches_nothing() {
    let told_only = plan(Some(&registry(Some("creds"))), &Observed::default(), &settings(&[]));
    assert_eq!(told_only.secret_name, "local-registry-pull", "every namespace's Secret is named from the settings");
    assert!(told_only.is_empty());
    let patch = AccountPatch { namespace: "app".into(), name: "default".into(), patch: Value::Null };
    for busy in [
        Plan { apply: vec![Secret::default()], ..Plan::default() },
        Plan { delete: vec![("app".into(), None)], ..Plan::default() },
        Plan { accounts: vec![patch], ..Plan::default() },
    ] {
        assert!(!busy.is_empty(), "{busy:?}");
    }
}

#[test]
fn while_the_source_is_unusable_a_namespace_without_our_secret_gets_no_service_account_entry() {
    let published = registry(Some("creds"));
    let mut observed = observed(&["new"], "t0ken");
    observed.credentials = credentials(Ok(None));
    observed.accounts = vec![account("new", "default", &[], None)];
    let plan = plan(Some(&published), &observed, &settings(&["default"]));
    assert!(plan.accounts.is_empty(), "an entry naming a Secret that is not there: {plan:?}");
    assert_eq!(reasons(&plan), ["PullSecretMissing"]);
}

#[test]
fn only_an_apply_by_our_field_manager_makes_a_secret_ours() {
    let written = |manager: &str, operation: &str| Secret {
        metadata: ObjectMeta {
            managed_fields: Some(vec![ManagedFieldsEntry {
                manager: Some(manager.into()),
                operation: Some(operation.into()),
                ..ManagedFieldsEntry::default()
            }]),
            ..ObjectMeta::default()
        },
        ..Secret::default()
    };
    assert!(is_ours(&written(keys::MANAGER, "Apply")));
    // Our manager's name on a hand-made update (kubectl --field-manager), or another's apply: not ours.
    assert!(!is_ours(&written(keys::MANAGER, "Update")));
    assert!(!is_ours(&written("kubectl", "Apply")));
}

#[test]
fn each_pull_secret_says_which_registry_its_credentials_are_for() {
    let written = plan(Some(&registry(Some("creds"))), &observed(&["app"], "t0ken"), &settings(&[]));
    let annotations = written.apply[0].metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations.get(keys::pull::FROM_REGISTRY).map(String::as_str), Some("reg/registry"));
}

#[test]
fn the_mark_is_added_beside_annotations_someone_else_put_on_the_account() {
    let mut theirs = (*account("app", "default", &[], None)).clone();
    theirs.metadata.annotations = Some([("team".to_string(), "builders".to_string())].into());
    let Some(Value::Array(operations)) = add_entry(&theirs, "local-registry-pull") else { panic!("a patch") };
    // "replace" on a key that is not there would fail the whole patch.
    let mark = operations.last().expect("the mark");
    assert_eq!(mark["op"], "add", "{mark}");
    assert_eq!(mark["value"], "local-registry-pull");
}
