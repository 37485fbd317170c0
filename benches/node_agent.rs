//! The node agent: how long a registry change takes to reach a node's `hosts.toml`, beside how long it takes to
//! reach the published ConfigMap in the same changes (the baseline), and the agent's resident memory beside the
//! controller's. The controller (with `--node-plan-configmap`) and one agent (writing into a directory of this run)
//! run as processes of the shipped release build against the local control plane. Run with `make bench`.

#[path = "support/node_plan.rs"]
mod node_plan;
#[path = "support/report.rs"]
mod report;

#[allow(dead_code)] // the bench uses part of the test helper
#[path = "../tests/support/binary.rs"]
mod binary;

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use node_plan::{ADDRESS, PLAN, median_p99};
use testbed::ControlPlane;

const CHANGES: usize = 50;

#[tokio::main]
async fn main() {
    let plane = ControlPlane::shared();
    let client = plane.client().await.expect("client");
    let ns = plane.namespace(&client, "bench-node").await.expect("namespace");
    let hosts = plane.dir().join("bench-hosts");
    std::fs::create_dir_all(&hosts).expect("hosts directory");
    // The chart creates the plan's ConfigMap; the controller fills it.
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let plan = ConfigMap {
        metadata: kube::api::ObjectMeta { name: Some(PLAN.into()), ..Default::default() },
        ..Default::default()
    };
    configmaps.create(&PostParams::default(), &plan).await.expect("plan ConfigMap");

    let kubeconfig = format!("--kubeconfig={}", plane.kubeconfig().display());
    let binary = report::controller_binary();
    let controller = node_plan::start_controller(&binary, &kubeconfig, &ns);
    let agent = node_plan::start(
        &binary,
        &ns,
        &[
            "node-agent".into(),
            kubeconfig,
            format!("--node-plan-configmap={PLAN}"),
            format!("--config-path-mount={}", hosts.display()),
            "--http-address=127.0.0.1:0".into(),
        ],
    );
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let params = PatchParams::apply("bench").force();
    let file = hosts.join(ADDRESS).join("hosts.toml");
    let written = |path: &Path, port: i32| -> bool {
        std::fs::read_to_string(path).is_ok_and(|t| t.contains(&format!("http://10.96.200.200:{port}\"")))
    };

    let (mut to_configmap, mut to_file) = (Vec::new(), Vec::new());
    for i in 0..=CHANGES {
        let port = 5000 + i32::try_from(i % 2).unwrap_or(0);
        let started = Instant::now();
        services
            .patch("registry", &params, &Patch::Apply(node_plan::registry("10.96.200.200", port)))
            .await
            .expect("registry");
        // The node's file is polled by a thread of its own every 0.2 ms, the plan's ConfigMap by GETs.
        let watched = file.clone();
        let file_seen = std::thread::spawn(move || {
            while started.elapsed() < Duration::from_secs(30) {
                if written(&watched, port) {
                    return Some(started.elapsed());
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            None
        });
        let mut configmap_at = None;
        while configmap_at.is_none() && started.elapsed() < Duration::from_secs(30) {
            let plan = configmaps.get_opt(PLAN).await.ok().flatten().and_then(|c| c.data?.remove("plan.json"));
            if plan.is_some_and(|p| p.contains(&format!("10.96.200.200:{port}\""))) {
                configmap_at = Some(started.elapsed());
            }
        }
        let file_at = file_seen.join().ok().flatten();
        let (Some(configmap_at), Some(file_at)) = (configmap_at, file_at) else {
            panic!("change {i} did not reach the plan and the node's file: {:?}", std::fs::read_to_string(&file));
        };
        // The first change creates the Service; only the changes after it count.
        if i > 0 {
            to_configmap.push(configmap_at.as_secs_f64() * 1000.0);
            to_file.push(file_at.as_secs_f64() * 1000.0);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Memory once both are idle again.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let agent_kib = binary::resident_kib(agent.id()).unwrap_or(0);
    let controller_kib = binary::resident_kib(controller.id()).unwrap_or(0);
    let (configmap_median, configmap_p99) = median_p99(&mut to_configmap);
    let (file_median, file_p99) = median_p99(&mut to_file);
    let markdown = format!(
        "## The node agent (`benches/node_agent.rs`)\n\nMachine: {}. Load average (1, 5, 15 min): {}. The controller \
         with `--node-plan-configmap` and one agent writing into a directory of this run, both the release build; \
         {CHANGES} port changes of a registry Service (a fixed published address, so one file changes), 50 ms apart, each timed from the start of its PATCH. \
         The baseline is the same change seen in the plan's ConfigMap by back-to-back GETs (a reader polling the \
         API server); the file is polled every 0.2 ms. The agent learns of the plan by its watch, so its file \
         lands about when such a reader sees the plan.\n\n\
         | figure | median | p99 | ratio of medians to the baseline |\n|---|---|---|---|\n\
         | PATCH to the plan's ConfigMap (baseline) | {configmap_median:.1} ms | {configmap_p99:.1} ms | 1.00x |\n\
         | PATCH to the node's `hosts.toml` rewritten | {file_median:.1} ms | {file_p99:.1} ms | {:.2}x |\n\n\
         | memory (resident) | KiB | ratio to the controller's |\n|---|---|---|\n\
         | the controller | {controller_kib} | 1.00x |\n| one node agent | {agent_kib} | {:.2}x |\n",
        report::machine(),
        report::load_average(),
        file_median / configmap_median,
        agent_kib as f64 / controller_kib.max(1) as f64,
    );
    println!("{markdown}");
    report::write_section("node-agent", &markdown);
    for mut process in [agent, controller] {
        let _ = std::process::Command::new("kill").arg(process.id().to_string()).status();
        let _ = process.wait();
    }
}
