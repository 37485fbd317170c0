//! API outages: the controller keeps running through a stopped kube-apiserver and, separately, a stopped etcd,
//! reports not-ready meanwhile, and corrects the ConfigMap by itself afterwards. Its own test binary, because it
//! stops components of the control plane that every test in a binary shares; the two outages run in sequence.

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::binary::Controller;
use support::*;

const OUTAGE: Duration = Duration::from_secs(20);

fn registry_on_port(port: u16) -> serde_json::Value {
    service("zot", registry_label(), json!({}), json!({"ports": [{"port": port}]}))
}

async fn ready_is(controller: &Controller, code: u16) -> bool {
    wait_until(Duration::from_secs(60), || async { (controller.get("/readyz")?.0 == code).then_some(()) })
        .await
        .is_some()
}

async fn outage(component: &str, s: &Scenario, controller: &mut Controller, port: u16) {
    let plane = testbed::ControlPlane::shared();
    let started = Instant::now();
    plane.stop_component(component).expect("stop");
    assert!(ready_is(controller, 503).await, "/readyz turns false while {component} is down");
    let remaining = OUTAGE.saturating_sub(started.elapsed());
    tokio::time::sleep(remaining).await;
    assert!(controller.running(), "the controller survives the {component} outage");
    plane.start_component(component).expect("restart");

    // Change the registry and tamper with the ConfigMap right after the restart, before the controller has
    // necessarily noticed: it must converge on its own.
    let client = plane.client().await.expect("client");
    wait_until(Duration::from_secs(60), || async {
        let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client.clone());
        api.get_opt(&s.ns).await.ok().flatten()
    })
    .await
    .expect("the API server answers again");
    s.apply(registry_on_port(port)).await;
    let recovered = Instant::now();
    s.wait_cluster_host("zot", port).await;
    println!("{component} outage: ConfigMap correct {:.1} s after the change", recovered.elapsed().as_secs_f64());
    assert!(ready_is(controller, 200).await, "/readyz turns true again after the {component} outage");
    assert!(controller.running(), "no restart was needed");
}

#[tokio::test]
async fn the_controller_rides_out_api_server_and_etcd_outages() {
    let s = Scenario::new("outage").await;
    let plane = testbed::ControlPlane::shared();
    let mut controller = Controller::start(&[
        format!("--kubeconfig={}", plane.kubeconfig().display()),
        format!("--watch-namespaces={}", s.ns),
        format!("--configmap-namespace={}", s.ns),
        "--no-builtin-registries".to_string(),
    ]);
    s.apply(registry_on_port(5000)).await;
    s.wait_published("the first publication", |d| d.is_some()).await;
    assert!(ready_is(&controller, 200).await, "ready before the outages; logs:\n{}", controller.logs());
    let pid = controller.pid();

    outage("kube-apiserver", &s, &mut controller, 5001).await;
    outage("etcd", &s, &mut controller, 5002).await;

    // Drift that happened while nobody could see it is corrected too.
    s.configmaps().delete(TARGET, &Default::default()).await.expect("delete by hand");
    s.wait_published("the ConfigMap restored after deletion", |d| d.is_some()).await;
    // The same process rode out both outages: it never exited (a restart would be a new process, and none is made).
    assert!(controller.running(), "the controller {pid} exited during the outages:\n{}", controller.logs());
    let restarts = controller.metric("local_registry_publisher_watch_restarts_total{resource=\"Service\"}");
    assert!(restarts.unwrap_or(0.0) >= 1.0, "watch failures were counted and retried");
}
