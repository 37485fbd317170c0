use serde_json::json;

use super::*;
use crate::mock_api::{self, list, status};

const CONFIGMAP: &str = "/api/v1/namespaces/kube-public/configmaps/local-registry-hosting";

#[tokio::test]
async fn the_published_text_is_the_configmaps_key_none_without_one_and_an_error_when_it_cannot_be_read() {
    let settings = Settings::default();
    let answers = [
        (200, json!({"metadata": {"name": "local-registry-hosting"}, "data": {DATA_KEY: "host: x:1\n", "other": "y"}})),
        (200, json!({"metadata": {"name": "local-registry-hosting"}, "data": {"other": "y"}})),
        (404, status(404, "NotFound")),
    ];
    for (code, body, expected) in [
        (answers[0].0, answers[0].1.clone(), Some("host: x:1\n")),
        (answers[1].0, answers[1].1.clone(), None),
        (answers[2].0, answers[2].1.clone(), None),
    ] {
        let (client, mut server) = mock_api::pair();
        let (read, ()) = tokio::join!(published_text(&client, &settings), server.get(CONFIGMAP, code, body));
        assert_eq!(read.expect("read").as_deref(), expected);
    }
    let (client, mut server) = mock_api::pair();
    let (read, ()) =
        tokio::join!(published_text(&client, &settings), server.get(CONFIGMAP, 403, status(403, "Forbidden")));
    assert!(read.is_err(), "a refused read is no empty ConfigMap: {read:?}");
}

fn event(reporting: &str, reason: &str) -> serde_json::Value {
    json!({"metadata": {"name": reason}, "eventTime": "2026-12-04T10:00:00.000000Z", "reason": reason,
        "reportingController": reporting, "reportingInstance": "pod"})
}

#[tokio::test]
async fn the_controllers_events_are_read_once_per_namespace_and_only_its_own_are_kept() {
    let (client, mut server) = mock_api::pair();
    let namespaces = ["reg", "apps", "reg"];
    let script = async {
        let events = vec![event(keys::MANAGER, "Published"), event("someone-else", "Forged")];
        server.get("/apis/events.k8s.io/v1/namespaces/apps/events?", 200, list("EventList", events)).await;
        server.get("/apis/events.k8s.io/v1/namespaces/reg/events?", 403, status(403, "Forbidden")).await;
    };
    let (found, ()) = tokio::join!(controller_events(&client, namespaces.into_iter()), script);
    let reasons = |ns: &str| found[ns].iter().map(|e| e.reason.clone().unwrap_or_default()).collect::<Vec<_>>();
    assert_eq!(found.keys().collect::<Vec<_>>(), ["apps", "reg"]);
    assert_eq!(reasons("apps"), ["Published"]);
    assert!(reasons("reg").is_empty(), "a namespace whose Events cannot be read has none");
}

#[tokio::test]
async fn a_namespace_label_under_our_prefix_that_nothing_reads_is_named_with_its_namespace() {
    let (client, mut server) = mock_api::pair();
    let namespace = |name: &str, labels: serde_json::Value| json!({"metadata": {"name": name, "labels": labels}});
    let items = vec![
        namespace("tools", json!({"local-registry-publisher.io/registry": "allowed", "team": "x"})),
        namespace("reg", json!({keys::namespace::ALLOWED: keys::namespace::ALLOWED_VALUE})),
        namespace("plain", json!({})),
    ];
    let answer =
        json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": {}, "items": items});
    let (found, ()) = tokio::join!(unknown_namespace_labels(&client), server.get("/api/v1/namespaces?", 200, answer));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, "tools");
    assert!(
        found[0].1.starts_with("label local-registry-publisher.io/registry=\"allowed\" means nothing"),
        "{found:?}"
    );
    let (client, mut server) = mock_api::pair();
    let (found, ()) = tokio::join!(
        unknown_namespace_labels(&client),
        server.get("/api/v1/namespaces?", 403, status(403, "Forbidden"))
    );
    assert!(found.is_empty());
}

#[tokio::test]
async fn leases_are_listed_in_each_namespace_given_and_a_refused_one_is_skipped() {
    let (client, mut server) = mock_api::pair();
    let lease =
        |ns: &str, name: &str| json!({"metadata": {"namespace": ns, "name": name}, "spec": {"holderIdentity": "x_1"}});
    let script = async {
        server
            .get("/apis/coordination.k8s.io/v1/namespaces/lrp/leases?", 200, list("LeaseList", vec![lease("lrp", "a")]))
            .await;
        server.get("/apis/coordination.k8s.io/v1/namespaces/tools/leases?", 403, status(403, "Forbidden")).await;
    };
    let namespaces = ["lrp".to_string(), "tools".to_string()];
    let (found, ()) = tokio::join!(leases(&client, &namespaces), script);
    assert_eq!(found.iter().map(|l| l.name_any()).collect::<Vec<_>>(), ["a"]);
}

fn from() -> FromCluster {
    FromCluster { image: "registry.example/lrp:1".into(), namespace: "probe".into() }
}

#[tokio::test]
async fn the_probe_pod_is_created_hardened_with_the_image_and_address_given_and_a_refusal_is_told() {
    let (client, mut server) = mock_api::pair();
    let created = json!({"metadata": {"name": "registry-doctor-x7", "namespace": "probe"}});
    let script = async { server.answer("POST", "/api/v1/namespaces/probe/pods?", 201, created).await };
    let from = from();
    let (started, sent) = tokio::join!(start_probe_pod(&client, &from, "10.0.0.7:5000"), script);
    assert_eq!(started, Ok("registry-doctor-x7".to_string()));
    assert_eq!(sent["metadata"]["generateName"], "registry-doctor-");
    assert_eq!(sent["metadata"]["labels"][keys::chart::COMPONENT], keys::chart::DOCTOR);
    let container = &sent["spec"]["containers"][0];
    assert_eq!(
        (container["image"].as_str(), &container["args"]),
        (Some("registry.example/lrp:1"), &json!(["probe", "10.0.0.7:5000"]))
    );
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(sent["spec"]["securityContext"]["runAsNonRoot"], true);
    assert_eq!(sent["spec"]["restartPolicy"], "Never");

    let (client, mut server) = mock_api::pair();
    let script = server.answer("POST", "/api/v1/namespaces/probe/pods?", 403, status(403, "Forbidden"));
    let (refused, _) = tokio::join!(start_probe_pod(&client, &from, "10.0.0.7:5000"), script);
    let Err(ProbePod::NotStarted { namespace, error }) = refused else { panic!("{refused:?}") };
    assert_eq!(namespace, "probe");
    assert!(error.contains("Forbidden"), "{error}");
}

fn probe_pod(phase: &str, waiting: Option<&str>) -> serde_json::Value {
    let state = match waiting {
        Some(reason) => json!({"waiting": {"reason": reason, "message": "cannot pull"}}),
        None => json!({"terminated": {"exitCode": 0}}),
    };
    json!({"metadata": {"name": "registry-doctor-x7", "namespace": "probe", "resourceVersion": "5"},
        "status": {"phase": phase, "containerStatuses": [{"name": "probe", "image": "i", "imageID": "", "ready": false,
            "restartCount": 0, "state": state}]}})
}

const PROBE_POD: &str = "/api/v1/namespaces/probe/pods/registry-doctor-x7";

/// What became of the probe pod whose watch first lists `pod` and whose log is `logs`: read, then removed.
async fn finish(pod: serde_json::Value, logs: &str) -> ProbePod {
    let (client, mut server) = mock_api::pair();
    let script = async {
        let listed = "/api/v1/namespaces/probe/pods?&fieldSelector=metadata.name%3Dregistry-doctor-x7&limit=500";
        server.get(listed, 200, list("PodList", vec![pod])).await;
        server.text(&format!("{PROBE_POD}/log?"), logs).await;
        server.answer("DELETE", &format!("{PROBE_POD}?"), 200, json!({"metadata": {}})).await;
    };
    let from = from();
    let (finished, ()) = tokio::join!(finish_probe_pod(&client, &from, "registry-doctor-x7"), script);
    finished
}

#[tokio::test]
async fn a_finished_probe_pod_is_read_and_removed_and_a_stuck_one_is_told_why() {
    let finished = finish(probe_pod("Succeeded", None), "host: answered").await;
    assert_eq!(finished, ProbePod::Finished { succeeded: true, logs: "host: answered".into() });
    let failed = finish(probe_pod("Failed", None), "refused").await;
    assert!(matches!(failed, ProbePod::Finished { succeeded: false, .. }), "{failed:?}");
    let stuck = finish(probe_pod("Pending", Some("ErrImagePull")), "").await;
    assert_eq!(stuck, ProbePod::Stuck("ErrImagePull: cannot pull".into()));
}
