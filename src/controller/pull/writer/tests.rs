//! The pull-Secret writer against a mocked API server: ServiceAccounts first (a JSON patch, which leaves the rest of
//! their atomic list to whoever set it), then Secret applies, then deletes with the uid seen; each refusal told on
//! the registry and counted, and a write in one namespace never stopping another's. What the API server and the
//! kubelet make of it is proven on the project's control plane and real node.

use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use serde_json::json;

use super::PullWriter;
use crate::controller::Error;
use crate::controller::pull::PullMetrics;
use crate::metrics::Metrics;
use crate::mock_api::{self, Server, status, without_requests};
use crate::pull::{AccountPatch, Notice, Plan, Reason};

const APPLY: &str = "?&force=true&fieldManager=local-registry-publisher";

fn registry() -> &'static ObjectReference {
    static REGISTRY: std::sync::LazyLock<ObjectReference> = std::sync::LazyLock::new(|| ObjectReference {
        kind: Some("Service".into()),
        name: Some("registry".into()),
        ..ObjectReference::default()
    });
    &REGISTRY
}

fn secret(namespace: &str) -> Secret {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
        "metadata": {"name": "registry-pull", "namespace": namespace},
        "data": {".dockerconfigjson": "e30="}}))
    .expect("a Secret")
}

fn account(namespace: &str) -> AccountPatch {
    let patch = json!([{"op": "add", "path": "/imagePullSecrets/-", "value": {"name": "registry-pull"}}]);
    AccountPatch { namespace: namespace.into(), name: "default".into(), patch }
}

fn count(metrics: &PullMetrics, family: &str, operation: &str) -> u32 {
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    let text = Metrics::encode(&registry);
    let series = format!("local_registry_publisher_pull_secret_{family}_total{{operation=\"{operation}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(&series)?.parse().ok()).unwrap_or(0)
}

async fn answer_account(server: &mut Server, namespace: &str, code: u16) -> serde_json::Value {
    let uri = format!("/api/v1/namespaces/{namespace}/serviceaccounts/default?fieldManager=local-registry-publisher");
    let received = server.receive("PATCH", &uri).await;
    assert_eq!(received.content_type.as_deref(), Some("application/json-patch+json"));
    let body = received.body.clone();
    let answer = if code == 200 {
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": namespace}})
    } else {
        status(code, "Refused")
    };
    received.reply(code, answer);
    body
}

async fn answer_secret(server: &mut Server, namespace: &str, code: u16) -> serde_json::Value {
    let uri = format!("/api/v1/namespaces/{namespace}/secrets/registry-pull{APPLY}");
    let received = server.receive("PATCH", &uri).await;
    assert_eq!(received.content_type.as_deref(), Some("application/apply-patch+yaml"));
    let body = received.body.clone();
    received.reply(code, if code == 200 { body.clone() } else { status(code, "Refused") });
    body
}

async fn answer_delete(server: &mut Server, namespace: &str, code: u16) -> serde_json::Value {
    let uri = format!("/api/v1/namespaces/{namespace}/secrets/registry-pull?");
    let answer = if code == 200 { status(200, "Success") } else { status(code, "Refused") };
    server.answer("DELETE", &uri, code, answer).await
}

#[tokio::test]
async fn an_empty_plan_makes_no_request() {
    let (client, _server) = mock_api::pair();
    let writer = PullWriter::new(client, PullMetrics::default());
    let mut notices = Vec::new();
    let plan = Plan { secret_name: "registry-pull".into(), ..Plan::default() };
    without_requests(writer.carry_out(&plan, Some(registry()), &mut notices)).await.expect("nothing to do");
    assert!(notices.is_empty());
}

#[tokio::test]
async fn accounts_then_applies_then_deletes_each_request_exactly_and_each_write_counted() {
    let (client, mut server) = mock_api::pair();
    let metrics = PullMetrics::default();
    let writer = PullWriter::new(client, metrics.clone());
    let plan = Plan {
        secret_name: "registry-pull".into(),
        apply: vec![secret("team-a")],
        delete: vec![("team-b".into(), Some("uid-b".into()))],
        accounts: vec![account("team-a")],
        notices: Vec::new(),
    };
    let mut notices = Vec::new();
    let answers = async {
        let patched = answer_account(&mut server, "team-a", 200).await;
        let applied = answer_secret(&mut server, "team-a", 200).await;
        let deleted = answer_delete(&mut server, "team-b", 200).await;
        (patched, applied, deleted)
    };
    let (done, (patched, applied, deleted)) =
        tokio::join!(writer.carry_out(&plan, Some(registry()), &mut notices), answers);
    done.expect("all written");
    assert_eq!(patched, account("team-a").patch, "the JSON patch as planned, nothing else");
    assert_eq!(applied, serde_json::to_value(secret("team-a")).expect("JSON"));
    assert_eq!(deleted, json!({"preconditions": {"uid": "uid-b"}}), "only the Secret of ours that was seen");
    assert!(notices.is_empty());
    for operation in ["patch-serviceaccount", "apply", "delete"] {
        assert_eq!(count(&metrics, "writes", operation), 1, "{operation}");
    }
}

#[tokio::test]
async fn a_refusal_in_one_namespace_is_told_on_the_registry_and_the_others_are_still_written() {
    for code in [403, 500] {
        let (client, mut server) = mock_api::pair();
        let metrics = PullMetrics::default();
        let writer = PullWriter::new(client, metrics.clone());
        let plan = Plan {
            secret_name: "registry-pull".into(),
            apply: vec![secret("team-a"), secret("team-b")],
            delete: vec![("team-c".into(), None)],
            ..Plan::default()
        };
        let mut notices = Vec::new();
        let answers = async {
            answer_secret(&mut server, "team-a", code).await;
            answer_secret(&mut server, "team-b", 200).await;
            answer_delete(&mut server, "team-c", code).await;
        };
        let (done, ()) = tokio::join!(writer.carry_out(&plan, Some(registry()), &mut notices), answers);
        match done {
            Err(error @ Error::Apply { .. }) => assert_eq!(error.target(), "Secret team-a/registry-pull", "the first"),
            other => panic!("{code}: {other:?}"),
        }
        let told: Vec<(Reason, String)> = notices.iter().map(|n: &Notice| (n.reason, n.message.to_string())).collect();
        let refused = |what: &str| (Reason::PullSecretFailed, format!("could not {what}: Refused (mocked) (Refused)"));
        assert_eq!(
            told,
            [refused("apply Secret team-a/registry-pull"), refused("delete Secret team-c/registry-pull")],
            "{code}"
        );
        assert!(notices.iter().all(|n| &n.regarding == registry()));
        assert_eq!((count(&metrics, "writes", "apply"), count(&metrics, "refusals", "apply")), (1, 1), "{code}");
        assert_eq!(count(&metrics, "refusals", "delete"), 1, "{code}");
    }
}

#[tokio::test]
async fn an_account_changed_meanwhile_is_patched_on_its_next_version_and_keeps_its_namespace_secret() {
    for code in [409, 422] {
        let (client, mut server) = mock_api::pair();
        let metrics = PullMetrics::default();
        let writer = PullWriter::new(client, metrics.clone());
        // The account still names the Secret: the Secret stays until the account's entry is gone.
        let plan = Plan {
            secret_name: "registry-pull".into(),
            delete: vec![("team-a".into(), Some("uid-a".into()))],
            accounts: vec![account("team-a")],
            ..Plan::default()
        };
        let mut notices = Vec::new();
        let (done, _) = tokio::join!(
            writer.carry_out(&plan, Some(registry()), &mut notices),
            answer_account(&mut server, "team-a", code)
        );
        done.expect("not a failure: the watch brings the newer version");
        assert!(notices.is_empty(), "{code}: {notices:?}");
        assert_eq!(count(&metrics, "refusals", "patch-serviceaccount"), 0, "{code}");
    }
}

#[tokio::test]
async fn a_refused_account_patch_is_told_and_keeps_its_namespace_secret_and_a_secret_already_gone_is_done() {
    let (client, mut server) = mock_api::pair();
    let metrics = PullMetrics::default();
    let writer = PullWriter::new(client, metrics.clone());
    let plan = Plan {
        secret_name: "registry-pull".into(),
        delete: vec![("team-a".into(), None), ("team-b".into(), None)],
        accounts: vec![account("team-a")],
        ..Plan::default()
    };
    let mut notices = Vec::new();
    let answers = async {
        answer_account(&mut server, "team-a", 403).await;
        answer_delete(&mut server, "team-b", 404).await;
    };
    let (done, ()) = tokio::join!(writer.carry_out(&plan, Some(registry()), &mut notices), answers);
    assert!(matches!(done, Err(Error::Apply { .. })), "{done:?}");
    assert_eq!(notices.len(), 1, "the account's refusal alone: {notices:?}");
    assert!(notices[0].message.contains("ServiceAccount team-a/default"), "{:?}", notices[0].message);
    assert_eq!(count(&metrics, "refusals", "patch-serviceaccount"), 1);
    assert_eq!(count(&metrics, "writes", "delete"), 0, "gone already is no write");
}
