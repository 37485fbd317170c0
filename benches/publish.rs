//! Measures the real controller binary on the local control plane and prints numbers (never asserts on them):
//! - latency from a Service change to the ConfigMap showing it, over 20 nodePort changes, seen through a watch;
//! - the controller's resident memory at idle, then again after the cluster grows by unrelated objects;
//! - the control plane's peak resident memory over the run.
//!
//! Run with `make bench`.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use testbed::ControlPlane;

const CHANGES: usize = 20;
const UNRELATED: usize = 500;

#[tokio::main]
async fn main() {
    let plane = ControlPlane::shared();
    let client = plane.client().await.expect("client");
    let ns = plane.namespace(&client, "bench").await.expect("namespace");
    let controller = env!("CARGO_BIN_EXE_local-registry-publisher");
    let mut child = Command::new(controller)
        .args([
            format!("--kubeconfig={}", plane.kubeconfig().display()),
            format!("--configmap-namespace={ns}"),
            format!("--registry-namespaces={ns}"),
            "--log-level=warn".to_string(),
            "--http-address=127.0.0.1:0".to_string(),
        ])
        .stdin(Stdio::null())
        .spawn()
        .expect("start the controller");

    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let service = |node_port: i32| -> Service {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "registry", "labels": {"local-registry-publisher.io/registry": "true"}},
            "spec": {"type": "NodePort", "ports": [{"name": "registry", "port": 5000, "nodePort": node_port}]}
        }))
        .expect("service")
    };
    let params = PatchParams::apply("bench").force();
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let config = watcher::Config::default().fields("metadata.name=local-registry-hosting");
    let mut hosts = Box::pin(
        watcher(configmaps, config)
            .applied_objects()
            .filter_map(|cm| async move { cm.ok()?.data?.get("localRegistryHosting.v1").cloned() }),
    );

    services.patch("registry", &params, &Patch::Apply(service(31000))).await.expect("create registry");
    wait_for(&mut hosts, "localhost:31000").await;

    let mut latencies = Vec::new();
    for i in 1..=CHANGES {
        let port = 31000 + i as i32;
        let started = Instant::now();
        services.patch("registry", &params, &Patch::Apply(service(port))).await.expect("change nodePort");
        wait_for(&mut hosts, &format!("localhost:{port}")).await;
        latencies.push(started.elapsed());
    }
    latencies.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "service change -> ConfigMap ({CHANGES} changes): median {:.1} ms, min {:.1} ms, max {:.1} ms",
        ms(latencies[CHANGES / 2]),
        ms(latencies[0]),
        ms(latencies[CHANGES - 1])
    );

    tokio::time::sleep(Duration::from_secs(10)).await;
    println!("controller resident memory at idle: {}", rss(child.id()));

    let unrelated = plane.namespace(&client, "unrelated").await.expect("namespace");
    let other_services: Api<Service> = Api::namespaced(client.clone(), &unrelated);
    let other_configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &unrelated);
    for i in 0..UNRELATED {
        let svc: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("svc-{i}")}, "spec": {"ports": [{"port": 80}]}
        }))
        .expect("service");
        other_services.create(&PostParams::default(), &svc).await.expect("unrelated service");
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("cm-{i}")}, "data": {"payload": "x".repeat(2048)}
        }))
        .expect("configmap");
        other_configmaps.create(&PostParams::default(), &cm).await.expect("unrelated configmap");
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    println!(
        "controller resident memory after {UNRELATED} unrelated Services and {UNRELATED} unrelated ConfigMaps: {}",
        rss(child.id())
    );

    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let _ = child.wait();

    // The control plane's own footprint over this whole run: each component's peak resident memory.
    let peaks: Vec<(String, u64)> =
        plane.pids().into_iter().map(|(name, pid)| (name, status_kib(pid, "VmHWM:").unwrap_or(0))).collect();
    let total: u64 = peaks.iter().map(|(_, kib)| kib).sum();
    let each: Vec<String> = peaks.iter().map(|(name, kib)| format!("{name} {} MiB", kib / 1024)).collect();
    println!("control plane peak resident memory: {} MiB in all ({})", total / 1024, each.join(", "));
}

fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix(field))?.trim().trim_end_matches("kB").trim().parse().ok()
}

async fn wait_for(hosts: &mut (impl futures::Stream<Item = String> + Unpin), host: &str) {
    let wanted = format!("host: \"{host}\"");
    let found = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(text) = hosts.next().await {
            if text.contains(&wanted) {
                return;
            }
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("the ConfigMap never showed {host}"));
}

fn rss(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().find(|l| l.starts_with("VmRSS:")).map_or("unknown".into(), |l| l[6..].trim().to_string())
}
