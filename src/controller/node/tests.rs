//! The node plan's writer against a mocked API server: it reads the ConfigMap once, writes only a plan it does not
//! hold, applies exactly its data, and leaves a refused write to the next pass. What the API server and the agents
//! make of it is proven on the project's control plane and real nodes.

use serde_json::json;

use super::PlanWriter;
use crate::controller::Error;
use crate::mock_api::{self, Server, status, without_requests};
use crate::node::fixtures::plan;
use crate::node::{NodePlan, NodePlanTarget, PLAN_KEY};

const CONFIGMAP: &str = "/api/v1/namespaces/lrp/configmaps/lrp-node-plan";
const APPLY: &str = "?&force=true&fieldManager=local-registry-publisher";

fn writer() -> (PlanWriter, Server) {
    let (client, server) = mock_api::pair();
    let target = NodePlanTarget {
        namespace: "lrp".into(),
        name: "lrp-node-plan".into(),
        rules: Default::default(),
        stamp: None,
    };
    (PlanWriter::new(&client, &target, super::NodePlanMetrics::default()), server)
}

/// The ConfigMap as the API server holds it: the chart's labels, and `plan` in its data when given.
fn stored(plan: Option<&NodePlan>) -> serde_json::Value {
    let mut configmap = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "lrp-node-plan", "namespace": "lrp", "labels": {"app.kubernetes.io/name": "lrp"}}});
    if let Some(plan) = plan {
        configmap["data"] = json!({PLAN_KEY: plan.to_json()});
    }
    configmap
}

/// Answers the next apply with `code`; returns the body written.
async fn answer_apply(server: &mut Server, code: u16) -> serde_json::Value {
    let received = server.receive("PATCH", &format!("{CONFIGMAP}{APPLY}")).await;
    assert_eq!(received.content_type.as_deref(), Some("application/apply-patch+yaml"));
    let body = received.body.clone();
    received.reply(code, if code == 200 { body.clone() } else { status(code, "Refused") });
    body
}

#[tokio::test]
async fn the_chart_s_empty_configmap_is_read_once_then_the_plan_applied_as_its_data_alone() {
    let (mut writer, mut server) = writer();
    let answers = async {
        server.get(CONFIGMAP, 200, stored(None)).await;
        answer_apply(&mut server, 200).await
    };
    let (kept, sent) = tokio::join!(writer.keep(plan(&["a:5000"])), answers);
    kept.expect("written");
    let expected = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "lrp-node-plan", "namespace": "lrp"}, "data": {PLAN_KEY: plan(&["a:5000"]).to_json()}});
    assert_eq!(sent, expected, "its data only: the chart's labels stay the chart's");

    // Held now: the same plan costs no request, not even a read.
    without_requests(writer.keep(plan(&["a:5000"]))).await.expect("nothing to write");
    // Changed: one apply, no read.
    let (kept, sent) = tokio::join!(writer.keep(plan(&["a:5000", "b:5000"])), answer_apply(&mut server, 200));
    kept.expect("written");
    assert_eq!(sent["data"][PLAN_KEY], plan(&["a:5000", "b:5000"]).to_json());
}

#[tokio::test]
async fn a_plan_the_configmap_already_holds_after_a_restart_is_not_written_again() {
    let (mut writer, mut server) = writer();
    let held = plan(&["a:5000"]);
    let (kept, ()) = tokio::join!(writer.keep(held.clone()), server.get(CONFIGMAP, 200, stored(Some(&held))));
    kept.expect("nothing to write");
    without_requests(writer.keep(held)).await.expect("still nothing");
}

#[tokio::test]
async fn a_refused_read_or_write_is_the_passes_error_and_the_next_pass_tries_again() {
    let (mut writer, mut server) = writer();
    let (refused, ()) =
        tokio::join!(writer.keep(plan(&["a:5000"])), server.get(CONFIGMAP, 403, status(403, "Forbidden")));
    assert!(matches!(refused, Err(Error::Read { .. })), "{refused:?}");
    for code in [403, 409, 422, 500] {
        let answers = async {
            // Read until it has been once (the first pass's read was refused), whatever the write's fate after it.
            if code == 403 {
                server.get(CONFIGMAP, 200, stored(None)).await;
            }
            answer_apply(&mut server, code).await
        };
        let (refused, _) = tokio::join!(writer.keep(plan(&["a:5000"])), answers);
        assert!(matches!(refused, Err(Error::Apply { .. })), "{code}: {refused:?}");
    }
    let (kept, _) = tokio::join!(writer.keep(plan(&["a:5000"])), answer_apply(&mut server, 200));
    kept.expect("written at last, with no read again");
    without_requests(writer.keep(plan(&["a:5000"]))).await.expect("then held");
}
