//! Leader failover of the real binary with the default 15 s lease, five times each way, printed as medians:
//! SIGKILL of the leader (the follower waits out the lease) and SIGTERM (the leader releases the Lease).
//! Also the resident memory of an idle replica with leader election on. Written to docs/benchmarks.md as ratios
//! to the lease duration. Run with `make bench`.

#[path = "support/report.rs"]
mod report;

#[allow(dead_code)] // the bench uses part of the test helper
#[path = "../tests/support/binary.rs"]
mod binary;

use std::time::{Duration, Instant};

use binary::Controller;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::{Api, Patch, PatchParams};
use testbed::{ControlPlane, wait_until};

const ROUNDS: usize = 5;
const LEASE: Duration = Duration::from_secs(15);
const LEADER: &str = "leader_election_master_status{name=\"local-registry-publisher\"}";

#[tokio::main]
async fn main() {
    let plane = ControlPlane::shared();
    let client = plane.client().await.expect("client");
    let ns = plane.namespace(&client, "failover").await.expect("namespace");
    let replica = || {
        Controller::start_binary(
            &report::controller_binary(),
            &[
                format!("--kubeconfig={}", plane.kubeconfig().display()),
                format!("--watch-namespaces={ns}"),
                format!("--configmap-namespace={ns}"),
                format!("--leader-elect-resource-namespace={ns}"),
                "--leader-elect".into(),
                "--log-level=warn".into(),
            ],
        )
    };
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let mut port = 5000;
    let mut publish_next = || {
        port += 1;
        let service: Service = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "zot", "labels": {"local-registry-publisher.io/registry": "true"}},
            "spec": {"ports": [{"port": port}]}
        }))
        .expect("service");
        // hostFromClusterNetwork is the Service's ClusterIP with this port, the only field of a ClusterIP registry.
        (service, format!(":{port}\""))
    };
    let (service, _) = publish_next();
    services.patch("zot", &PatchParams::apply("bench").force(), &Patch::Apply(&service)).await.expect("registry");

    let load_before = report::load_average();
    let mut idle = String::new();
    let mut replicas = vec![replica(), replica()];
    let mut results: Vec<(&str, Vec<Duration>)> = vec![("SIGKILL", Vec::new()), ("SIGTERM", Vec::new())];
    for round in 0..2 * ROUNDS {
        let signal = if round < ROUNDS { "KILL" } else { "TERM" };
        let leader = wait_until(Duration::from_secs(60), || async {
            replicas.iter().position(|r| r.metric(LEADER) == Some(1.0))
        })
        .await
        .expect("a leader");
        if round == 0 {
            tokio::time::sleep(Duration::from_secs(5)).await;
            idle = binary::resident_kib(replicas[leader].pid()).map_or("unknown".into(), |kib| format!("{kib} kB"));
            println!("idle replica resident memory with leader election on: {idle}");
        }
        let mut old = replicas.remove(leader);
        let started = Instant::now();
        old.signal(signal);
        old.wait_exit(Duration::from_secs(10));
        let (service, wanted) = publish_next();
        services.patch("zot", &PatchParams::apply("bench").force(), &Patch::Apply(&service)).await.expect("change");
        wait_until(Duration::from_secs(60), || async {
            let text =
                configmaps.get_opt("local-registry-hosting").await.ok()??.data?.get("localRegistryHosting.v1")?.clone();
            text.contains(&wanted).then_some(())
        })
        .await
        .expect("the new leader publishes");
        results[usize::from(signal == "TERM")].1.push(started.elapsed());
        replicas.push(replica());
    }
    let mut markdown = format!(
        "## Leader failover (`benches/failover.rs`)\n\nMachine: {}. Load average (1, 5, 15 min): {load_before} before, \
         {} after. Two replicas, default {} s lease, {ROUNDS} rounds each: from the signal to the new leader \
         publishing a change.\n\n| leader stopped by | median | ratio to the lease | each round |\n|---|---|---|---|\n",
        report::machine(),
        report::load_average(),
        LEASE.as_secs(),
    );
    for (signal, mut times) in results {
        times.sort();
        let seconds: Vec<String> = times.iter().map(|t| format!("{:.1}", t.as_secs_f64())).collect();
        let median = times[ROUNDS / 2].as_secs_f64();
        println!(
            "failover after {signal} of the leader (lease 15 s), {ROUNDS} rounds: median {median:.1} s [{}]",
            seconds.join(", ")
        );
        let ratio = median / LEASE.as_secs_f64();
        markdown += &format!("| {signal} | {median:.1} s | {ratio:.2}x | {} s |\n", seconds.join(", "));
    }
    markdown += &format!("\nAn idle replica with leader election on: {idle} resident.\n");
    report::write_section("failover", &markdown);
}
