//! Every failure is seen (the shared-cluster issue): a write the API server refuses becomes a Warning Event where
//! users look, a log line, a metric and, after a few in a row, a failing /readyz, while readers keep the last good
//! document; and a value the API server would refuse is rejected before any write.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::PostParams;
use local_registry_publisher::hosting::DATA_KEY;
use serde_json::json;
use support::*;

fn registry() -> serde_json::Value {
    service("zot", registry_label(), json!({}), json!({"ports": [{"name": "registry", "port": 5000}]}))
}

/// Another tool's ConfigMap that no write of ours can change, and the settings that try anyway.
async fn refused(prefix: &str, configmap: serde_json::Value) -> (Scenario, ConfigMap) {
    let mut s = Scenario::new(prefix).await;
    s.settings.take_over = true;
    let configmap: ConfigMap = serde_json::from_value(configmap).expect("a ConfigMap");
    let created = s.configmaps().create(&PostParams::default(), &configmap).await.expect("create the ConfigMap");
    (s, created)
}

async fn refusal_is_seen(s: &Scenario, before: &ConfigMap, needle: &str) {
    let (_run, health) = s.start_with_health();
    s.apply(registry()).await;
    let note = s.wait_event("zot", "PublishFailed").await;
    assert!(note.contains(needle) && note.contains("unchanged"), "{note}");
    let failing = wait_until(SOON, || async { health.ready().err() }).await;
    let reason = failing.expect("/readyz fails after repeated refusals");
    assert!(reason.contains("PublishFailed"), "{reason}");
    let after = s.configmap().await.expect("the ConfigMap stays");
    assert_eq!(after.data, before.data, "readers keep what they had");
    assert_eq!(after.binary_data, before.binary_data);
}

#[tokio::test]
async fn an_immutable_configmap_that_refuses_every_write_is_reported_not_retried_in_silence() {
    let (s, before) = refused(
        "immutable",
        json!({"metadata": {"name": TARGET}, "immutable": true, "data": {DATA_KEY: "host: \"localhost:5001\"\n"}}),
    )
    .await;
    refusal_is_seen(&s, &before, "immutable").await;
}

#[tokio::test]
async fn our_key_in_binary_data_that_refuses_every_write_is_reported() {
    let (s, before) =
        refused("binary", json!({"metadata": {"name": TARGET}, "binaryData": {DATA_KEY: "aG9zdDogeA=="}})).await;
    refusal_is_seen(&s, &before, "binaryData").await;
}

#[tokio::test]
async fn an_annotation_the_api_server_would_refuse_is_rejected_before_any_write() {
    let s = Scenario::new("fffe").await;
    let (_run, health) = s.start_with_health();
    s.apply(registry()).await;
    let good = s.wait_cluster_host("zot", 5000).await;
    // JSON carries U+FFFE where YAML (and so server-side apply) refuses it; a tenant's client sends JSON.
    let hostile = json!({"metadata": {"annotations": {
        "local-registry-publisher.io/host-from-cluster-network": "zot.example\u{fffe}:5000"}}});
    let services = kube::Api::<k8s_openapi::api::core::v1::Service>::namespaced(s.client.clone(), &s.ns);
    services
        .patch("zot", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&hostile))
        .await
        .expect("JSON patch");
    let note = s.wait_event("zot", "InvalidAnnotation").await;
    assert!(note.contains("printable ASCII"), "{note}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(s.published().await, Some(good), "the last good document stays");
    assert_eq!(health.failed_writes(), 0, "nothing the API server refuses was sent");
    assert!(s.occurrences("zot", "PublishFailed").await == 0);
}

#[tokio::test]
async fn two_controllers_with_different_settings_settle_instead_of_fighting() {
    let s = Scenario::new("fight").await;
    let mut twin = Scenario { client: s.client.clone(), ns: s.ns.clone(), settings: s.settings.clone() };
    twin.settings.help_url = Some("https://other.example/registry-help".into());
    let (_one, _two) = (s.start(), twin.start());
    // Every state the ConfigMap passes through, as a watch sees it (a poll undercounts on a busy machine).
    let mut versions = s.watch_configmap_versions();
    s.apply(registry()).await;
    s.wait_cluster_host("zot", 5000).await;

    // The hold schedule bounds what the first 30 s can hold: each controller writes once, corrects the other twice,
    // and its third correction starts a 30 s hold instead of a write; one more write may come as a hold ends.
    let watched = Duration::from_secs(30);
    tokio::time::sleep(watched).await;
    let states = versions.seen();
    eprintln!("{} ConfigMap states in {watched:?} with two conflicting controllers: {states:?}", states.len());
    let bound = 2 * (1 + 2) + 1;
    assert!(states.len() <= bound, "{} writes in {watched:?}, more than the hold schedule allows", states.len());
    assert!(states.len() >= 3, "they did fight, or there is nothing to bound: {states:?}");
    let note = s.wait_event(TARGET, "ConflictingWriter").await;
    assert!(note.contains("one controller per ConfigMap"), "{note}");
}

/// Someone makes our own ConfigMap immutable: each refused write is a refusal, never a correction by another writer,
/// so writes are not held, nothing is said published that was not written, and /readyz fails after three.
#[tokio::test]
async fn refused_writes_over_our_own_immutable_configmap_are_refusals_not_a_fight() {
    let s = Scenario::new("frozen").await;
    let (_run, health) = s.start_with_health();
    s.apply(registry()).await;
    s.wait_cluster_host("zot", 5000).await;
    let freeze = json!({"immutable": true});
    s.configmaps()
        .patch(TARGET, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&freeze))
        .await
        .expect("make it immutable");
    s.apply(service("zot", registry_label(), json!({}), json!({"ports": [{"name": "registry", "port": 5001}]}))).await;
    // Retries back off from half a second: three refusals take seconds, not a 30 s hold.
    let three = wait_until(Duration::from_secs(20), || async { (health.failed_writes() >= 3).then_some(()) }).await;
    assert!(three.is_some(), "writes are retried, not held: {} refused so far", health.failed_writes());
    let reason = health.ready().expect_err("/readyz fails after three refused writes");
    assert!(reason.contains("PublishFailed"), "{reason}");
    let note = s.wait_event("zot", "PublishFailed").await;
    assert!(note.contains("immutable"), "{note}");
    let events = s.events_for(TARGET).await;
    assert!(events.iter().all(|(_, reason, _)| reason != "ConflictingWriter"), "a refusal is no fight: {events:?}");
    let told = s.events_for("zot").await;
    let never_written = told.iter().filter(|(_, reason, note)| reason == "Published" && note.contains(":5001"));
    assert_eq!(never_written.count(), 0, "nothing is said published that was not written: {told:?}");
    // Readers keep what they had.
    s.wait_cluster_host("zot", 5000).await;
}
