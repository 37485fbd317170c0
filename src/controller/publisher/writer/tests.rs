//! The published ConfigMap's writer against a mocked API server: the exact request of each write, the metric it
//! counts, and each refusal as the error the publisher retries. Whether a pass writes at all is the publisher's
//! decision (`publish::decide`); what the API server makes of the writes is proven on the project's control plane.

use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::json;

use super::ConfigMapWriter;
use crate::controller::Error;
use crate::controller::publisher::PublisherMetrics;
use crate::metrics::Metrics;
use crate::mock_api::{self, status};
use crate::settings::Settings;

const CONFIGMAP: &str = "/api/v1/namespaces/kube-public/configmaps/local-registry-hosting";

fn writer() -> (ConfigMapWriter, PublisherMetrics, mock_api::Server) {
    let (client, server) = mock_api::pair();
    let metrics = PublisherMetrics::default();
    (ConfigMapWriter::new(client, &Settings::default(), metrics.clone()), metrics, server)
}

fn writes(metrics: &PublisherMetrics, operation: &str) -> bool {
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    let text = Metrics::encode(&registry);
    text.contains(&format!("local_registry_publisher_configmap_writes_total{{operation=\"{operation}\"}} 1\n"))
}

fn desired() -> ConfigMap {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "local-registry-hosting", "namespace": "kube-public"},
        "data": {"localRegistryHosting.v1": "host: localhost:5000\n"}}))
    .expect("a ConfigMap")
}

#[tokio::test]
async fn it_applies_exactly_the_desired_fields_as_the_one_field_manager_and_counts_the_write() {
    let (writer, metrics, mut server) = writer();
    let answer = async {
        let received =
            server.receive("PATCH", &format!("{CONFIGMAP}?&force=true&fieldManager=local-registry-publisher")).await;
        assert_eq!(received.content_type.as_deref(), Some("application/apply-patch+yaml"));
        let mut stored = received.body.clone();
        stored["metadata"]["resourceVersion"] = json!("42");
        let sent = received.body.clone();
        received.reply(200, stored);
        sent
    };
    let configmap = desired();
    let (written, sent) = tokio::join!(writer.apply(&configmap), answer);
    assert_eq!(written.expect("applied"), "42", "the resourceVersion written");
    assert_eq!(sent, serde_json::to_value(desired()).expect("JSON"), "exactly the desired object, nothing more");
    assert!(writes(&metrics, "apply"));
}

#[tokio::test]
async fn a_refused_apply_is_an_apply_error_naming_the_configmap_and_is_not_counted() {
    for code in [403, 409, 422, 500] {
        let (writer, metrics, mut server) = writer();
        let uri = format!("{CONFIGMAP}?&force=true&fieldManager=local-registry-publisher");
        let configmap = desired();
        let (refused, _) =
            tokio::join!(writer.apply(&configmap), server.answer("PATCH", &uri, code, status(code, "Refused")));
        match refused {
            Err(error @ Error::Apply { .. }) => {
                assert_eq!(error.target(), "kube-public/local-registry-hosting");
                assert_eq!(error.refusal(), "Refused (mocked) (Refused)", "{code}");
            }
            other => panic!("{code}: {other:?}"),
        }
        assert!(!writes(&metrics, "apply"), "{code}: a refused write is not a write");
    }
}

#[tokio::test]
async fn delete_removes_only_the_version_read_and_a_configmap_already_gone_is_done() {
    for (code, outcome) in [(200, Some(true)), (404, Some(false)), (409, None), (403, None), (500, None)] {
        let (writer, metrics, mut server) = writer();
        let answer = if code == 200 { status(200, "Success") } else { status(code, "Refused") };
        let uri = format!("{CONFIGMAP}?");
        let (deleted, sent) = tokio::join!(
            writer.delete(Some("uid-1".into()), Some("7".into())),
            server.answer("DELETE", &uri, code, answer)
        );
        assert_eq!(sent, json!({"preconditions": {"uid": "uid-1", "resourceVersion": "7"}}), "{code}");
        match (deleted, outcome) {
            (Ok(deleted), Some(expected)) => assert_eq!(deleted, expected, "{code}"),
            (Err(Error::Delete { .. }), None) => {}
            (other, _) => panic!("{code}: {other:?}"),
        }
        assert_eq!(writes(&metrics, "delete"), code == 200, "{code}: only a deletion counts");
    }
}

#[tokio::test]
async fn read_returns_the_configmap_none_when_missing_and_a_refusal_as_a_read_error() {
    let (writer, _, mut server) = writer();
    let (found, ()) = tokio::join!(writer.read(), server.get(CONFIGMAP, 404, status(404, "NotFound")));
    assert!(found.expect("read").is_none());
    let (refused, ()) = tokio::join!(writer.read(), server.get(CONFIGMAP, 403, status(403, "Forbidden")));
    assert!(matches!(refused, Err(Error::Read { .. })), "{refused:?}");
}
