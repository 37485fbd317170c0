//! Measures the real controller binary on the local control plane, prints the numbers and writes them to
//! docs/benchmarks.md (never asserts on them):
//! - latency from a Service change to the ConfigMap showing it, over 20 nodePort changes, seen through a watch,
//!   against the physical floor measured in the same run: the API server's own watch round trip for the same
//!   Service change, plus one server-side apply round trip of the same ConfigMap;
//! - the controller's resident memory at idle, then again after the cluster grows by unrelated objects;
//! - the control plane's peak resident memory over the run.
//!
//! Run with `make bench`.

#[path = "support/report.rs"]
mod report;

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

    // The API server's own round trip for the same change: the Service's watch event.
    let service_config = watcher::Config::default().fields("metadata.name=registry");
    let mut node_ports = Box::pin(
        watcher(services.clone(), service_config)
            .applied_objects()
            .filter_map(|s| async move { s.ok()?.spec?.ports?.first()?.node_port }),
    );
    let load_before = report::load_average();
    services.patch("registry", &params, &Patch::Apply(service(31000))).await.expect("create registry");
    wait_for(&mut hosts, "localhost:31000").await;

    let (mut published, mut watched) = (Vec::new(), Vec::new());
    for i in 1..=CHANGES {
        let port = 31000 + i as i32;
        let started = Instant::now();
        services.patch("registry", &params, &Patch::Apply(service(port))).await.expect("change nodePort");
        let host = format!("localhost:{port}");
        let (seen, ()) = tokio::join!(wait_for_port(&mut node_ports, port), wait_for(&mut hosts, &host));
        published.push(started.elapsed());
        watched.push(seen.duration_since(started));
    }
    // One server-side apply round trip of a ConfigMap like ours, alternating so each apply really writes.
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let mut applies = Vec::new();
    for i in 0..CHANGES {
        let probe: ConfigMap = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "floor-probe"},
            "data": {"localRegistryHosting.v1": format!("host: \"localhost:{}\"\n", 31000 + i)}
        }))
        .expect("configmap");
        let started = Instant::now();
        configmaps.patch("floor-probe", &params, &Patch::Apply(&probe)).await.expect("apply");
        applies.push(started.elapsed());
    }
    let (published, watched, applies) = (median(published), median(watched), median(applies));
    let floor = (watched.0 + applies.0, watched.1 + applies.1, watched.2 + applies.2);
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "service change -> ConfigMap event ({CHANGES} changes): median {:.1} ms; floor {:.1} ms (Service watch round \
         trip {:.1} ms + apply {:.1} ms); ratio {:.2}",
        ms(published.0),
        ms(floor.0),
        ms(watched.0),
        ms(applies.0),
        ms(published.0) / ms(floor.0)
    );

    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle = rss_kib(child.id());
    println!("controller resident memory at idle: {idle} kB");

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
    let grown = rss_kib(child.id());
    println!(
        "controller resident memory after {UNRELATED} unrelated Services and {UNRELATED} unrelated ConfigMaps: {grown} kB"
    );

    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let _ = child.wait();

    // The control plane's own footprint over this whole run: each component's peak resident memory.
    let peaks: Vec<(String, u64)> =
        plane.pids().into_iter().map(|(name, pid)| (name, status_kib(pid, "VmHWM:").unwrap_or(0))).collect();
    let total: u64 = peaks.iter().map(|(_, kib)| kib).sum();
    let each: Vec<String> = peaks.iter().map(|(name, kib)| format!("{name} {} MiB", kib / 1024)).collect();
    println!("control plane peak resident memory: {} MiB in all ({})", total / 1024, each.join(", "));

    let mb = |kib: u64| kib as f64 / 1024.0;
    let row = |figure: &str, value: Duration, baseline: Duration| {
        format!("| {figure} | {:.1} ms | {:.2}x |\n", ms(value), ms(value) / ms(baseline))
    };
    let mut markdown = format!(
        "## Publishing latency and memory (`benches/publish.rs`)\n\nMachine: {}. Load average (1, 5, 15 min): {} \
         before, {} after. Release build of the controller, {CHANGES} nodePort changes, each timed from the start of \
         the PATCH to the watch event; medians (the spread is min to max over the {CHANGES}).\n\n\
         | figure | median | ratio to the floor |\n|---|---|---|\n",
        report::machine(),
        load_before,
        report::load_average(),
    );
    markdown += &row(
        &format!("Service change to ConfigMap event ({:.1} to {:.1} ms)", ms(published.1), ms(published.2)),
        published.0,
        floor.0,
    );
    markdown += &row("floor: the API server's own Service watch round trip plus one apply", floor.0, floor.0);
    markdown += &row("  the Service watch round trip (PATCH start to the Service's watch event)", watched.0, floor.0);
    markdown += &row("  one server-side apply of the same ConfigMap", applies.0, floor.0);
    markdown += &format!(
        "\n| memory | resident | ratio to idle |\n|---|---|---|\n| controller at idle | {:.1} MiB | 1.00x |\n\
         | after {UNRELATED} unrelated Services and {UNRELATED} ConfigMaps | {:.1} MiB | {:.2}x |\n\
         | control plane peak, all components | {} MiB | |\n",
        mb(idle),
        mb(grown),
        grown as f64 / idle.max(1) as f64,
        total / 1024,
    );
    report::write_section("publish", &markdown);
}

/// (median, min, max).
fn median(mut samples: Vec<Duration>) -> (Duration, Duration, Duration) {
    samples.sort();
    (samples[samples.len() / 2], samples[0], samples[samples.len() - 1])
}

async fn wait_for_port(ports: &mut (impl futures::Stream<Item = i32> + Unpin), port: i32) -> Instant {
    let found = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(seen) = ports.next().await {
            if seen == port {
                return Instant::now();
            }
        }
        Instant::now()
    })
    .await;
    found.unwrap_or_else(|_| panic!("the Service watch never showed nodePort {port}"))
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

fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:").unwrap_or(0)
}
