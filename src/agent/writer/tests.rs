//! The state writer against a mocked API server: the exact request of each write, none when nothing changed, and
//! what each refusal leaves for the next pass. What the API server makes of the write is proven on the project's
//! control plane (tests/two_nodes/own_state.rs).

use serde_json::json;

use super::StateWriter;
use crate::mock_api::{self, Server, status, without_requests};
use crate::node::api::state::{Configured, ConfiguredReason, NodeState};

const STATE: &str = "/apis/local-registry-publisher.io/v1alpha1/namespaces/agents/nodepullstates/node-a";
const APPLY: &str = "?&force=true&fieldManager=local-registry-publisher";

fn found(resource_version: &str) -> NodeState {
    let mut state = NodeState { node: "node-a".into(), resync_seconds: 10, ..NodeState::default() };
    state.plan.resource_version = resource_version.into();
    state
}

fn configured() -> &'static Configured {
    static CONFIGURED: std::sync::LazyLock<Configured> = std::sync::LazyLock::new(|| Configured {
        configured: true,
        reason: ConfiguredReason::NodeFilesConfigured,
        message: "every address".into(),
    });
    &CONFIGURED
}

/// Answers the next write of the state with `code` (and the object written when it succeeds); returns its body.
async fn answer_write(server: &mut Server, code: u16) -> serde_json::Value {
    let received = server.receive("PATCH", &format!("{STATE}{APPLY}")).await;
    assert_eq!(received.content_type.as_deref(), Some("application/apply-patch+yaml"));
    let body = received.body.clone();
    let answer = if code == 200 { body.clone() } else { status(code, "Refused") };
    received.reply(code, answer);
    body
}

#[tokio::test]
async fn it_applies_the_state_once_and_makes_no_request_while_nothing_changed() {
    let (client, mut server) = mock_api::pair();
    let mut writer = StateWriter::new(&client, "agents", "node-a", None);
    let (wrote, sent) = tokio::join!(writer.keep(found("1"), configured(), None), answer_write(&mut server, 200));
    assert!(wrote.expect("written"));
    assert_eq!(sent["apiVersion"], "local-registry-publisher.io/v1alpha1");
    assert_eq!(sent["kind"], "NodePullState");
    assert_eq!(sent["metadata"], json!({"name": "node-a", "namespace": "agents"}), "no owner without a DaemonSet");
    assert_eq!(sent["status"]["node"], "node-a");
    assert_eq!(sent["status"]["conditions"][0]["type"], "Configured");
    assert_eq!(sent["status"]["conditions"][0]["reason"], "NodeFilesConfigured");
    assert!(sent["status"]["changed"].as_str().is_some_and(|t| t.ends_with('Z')), "{sent}");

    let again = without_requests(writer.keep(found("1"), configured(), None)).await;
    assert!(!again.expect("nothing to write"), "the same state again costs no request");

    // Changed: written again, with the condition's transition time kept as it did not flip.
    let first_transition = sent["status"]["conditions"][0]["lastTransitionTime"].clone();
    let (wrote, sent) = tokio::join!(writer.keep(found("2"), configured(), None), answer_write(&mut server, 200));
    assert!(wrote.expect("written"));
    assert_eq!(sent["status"]["plan"]["resourceVersion"], "2");
    assert_eq!(sent["status"]["conditions"][0]["lastTransitionTime"], first_transition);
}

#[tokio::test]
async fn a_refused_write_is_an_error_and_the_next_pass_writes_again() {
    for code in [403, 409, 422, 500] {
        let (client, mut server) = mock_api::pair();
        let mut writer = StateWriter::new(&client, "agents", "node-a", None);
        let (refused, _) = tokio::join!(writer.keep(found("1"), configured(), None), answer_write(&mut server, code));
        match refused {
            Err(kube::Error::Api(answer)) => assert_eq!(answer.code, code),
            other => panic!("{code}: {other:?}"),
        }
        // Nothing was recorded as written: the same state is written on the next pass.
        let (wrote, _) = tokio::join!(writer.keep(found("1"), configured(), None), answer_write(&mut server, 200));
        assert!(wrote.expect("written"), "{code}");
    }
}

#[tokio::test]
async fn the_daemonset_is_looked_up_once_and_owns_the_state() {
    let (client, mut server) = mock_api::pair();
    let mut writer = StateWriter::new(&client, "agents", "node-a", Some("lrp-node-agent"));
    let daemonset = json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "lrp-node-agent", "namespace": "agents", "uid": "ds-uid"}});
    let answers = async {
        server.get("/apis/apps/v1/namespaces/agents/daemonsets/lrp-node-agent", 200, daemonset).await;
        answer_write(&mut server, 200).await
    };
    let (wrote, sent) = tokio::join!(writer.keep(found("1"), configured(), None), answers);
    assert!(wrote.expect("written"));
    let owner = json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "lrp-node-agent", "uid": "ds-uid"}]);
    assert_eq!(sent["metadata"]["ownerReferences"], owner, "owned, not controlled: the DaemonSet does not manage it");
    // A second write does not look the DaemonSet up again.
    let (wrote, sent) = tokio::join!(writer.keep(found("2"), configured(), None), answer_write(&mut server, 200));
    assert!(wrote.expect("written"));
    assert_eq!(sent["metadata"]["ownerReferences"], owner);
}

#[tokio::test]
async fn a_daemonset_that_cannot_be_read_writes_nothing() {
    let (client, mut server) = mock_api::pair();
    let mut writer = StateWriter::new(&client, "agents", "node-a", Some("lrp-node-agent"));
    let uri = "/apis/apps/v1/namespaces/agents/daemonsets/lrp-node-agent";
    let (refused, ()) =
        tokio::join!(writer.keep(found("1"), configured(), None), server.get(uri, 403, status(403, "Forbidden")));
    assert!(matches!(refused, Err(kube::Error::Api(ref answer)) if answer.code == 403), "{refused:?}");
}

#[tokio::test]
async fn someone_elses_write_or_a_deletion_makes_the_next_pass_write_again() {
    let (client, mut server) = mock_api::pair();
    let mut writer = StateWriter::new(&client, "agents", "node-a", None);
    let (wrote, sent) = tokio::join!(writer.keep(found("1"), configured(), None), answer_write(&mut server, 200));
    assert!(wrote.expect("written"));
    let ours: crate::node::api::state::NodePullState =
        serde_json::from_value(json!({"metadata": {"name": "node-a"}, "status": sent["status"]})).expect("the object");
    assert!(!writer.overwritten(&ours), "its own write echoed by the watch");
    assert!(!without_requests(writer.keep(found("1"), configured(), None)).await.expect("unchanged"));

    let mut forged = ours.clone();
    forged.status.as_mut().expect("a status").conditions[0].message = "forged".into();
    assert!(writer.overwritten(&forged));
    let (wrote, _) = tokio::join!(writer.keep(found("1"), configured(), None), answer_write(&mut server, 200));
    assert!(wrote.expect("written back"));

    writer.forget();
    let (wrote, _) = tokio::join!(writer.keep(found("1"), configured(), None), answer_write(&mut server, 200));
    assert!(wrote.expect("made again"));
}

#[tokio::test]
async fn leaving_deletes_the_state_and_a_state_already_gone_is_done() {
    for (code, done) in [(200, true), (404, true), (403, false), (500, false)] {
        let (client, mut server) = mock_api::pair();
        let writer = StateWriter::new(&client, "agents", "node-a", None);
        let answer = if code == 200 { status(200, "Success") } else { status(code, "Refused") };
        let uri = format!("{STATE}?");
        let answers = server.answer("DELETE", &uri, code, answer);
        let (removed, body) = tokio::join!(writer.remove(), answers);
        assert_eq!(removed.is_ok(), done, "{code}: {removed:?}");
        assert_eq!(body, json!({}), "no preconditions: the node's state is this agent's whatever its version");
    }
}
