//! The node concern at scale: 1, 10 and 100 node agents (real agent processes of the release build, each writing
//! into a directory of its own and keeping a NodePullState under a node name of its own, standing in for nodes)
//! follow one controller's node plan on the local control plane. For each count: the time from a registry's change
//! to the last agent's rewritten file, the API requests each agent makes per change and the watches it holds, the
//! API server's resident memory and one agent's; each as a ratio to one agent, and what 5,000 nodes would cost the
//! API server on the measured slope. Run with `make bench`.

#[path = "support/node_plan.rs"]
mod node_plan;
#[path = "support/report.rs"]
mod report;

#[allow(dead_code)] // the bench uses part of the test helper
#[path = "../tests/support/binary.rs"]
mod binary;

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::api::{Api, Patch, PatchParams, PostParams};
use node_plan::{ADDRESS, PLAN, median_p99};
use testbed::ControlPlane;

const COUNTS: [usize; 3] = [1, 10, 100];
const CHANGES: usize = 20;

/// The API server's counters this bench reads: requests the agents make (their state and Events) and the watches
/// open on ConfigMaps.
#[derive(Clone, Copy, Default)]
struct ApiCounters {
    agent_requests: f64,
    configmap_watches: f64,
}

async fn api_counters(client: &kube::Client) -> ApiCounters {
    let request = http::Request::get("/metrics").body(Vec::new()).expect("a request");
    let text = client.request_text(request).await.expect("the API server's /metrics");
    let mut counters = ApiCounters::default();
    for line in text.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else { continue };
        let value: f64 = value.parse().unwrap_or(0.0);
        if series.starts_with("apiserver_request_total{")
            && (series.contains("resource=\"nodepullstates\"") || series.contains("resource=\"events\""))
        {
            counters.agent_requests += value;
        }
        if series.starts_with("apiserver_longrunning_requests{")
            && series.contains("resource=\"configmaps\"")
            && series.contains("verb=\"WATCH\"")
        {
            counters.configmap_watches += value;
        }
    }
    counters
}

/// The kube-apiserver process of this control plane.
fn apiserver_pid(plane: &ControlPlane) -> u32 {
    *plane.pids().get("kube-apiserver").expect("the API server's process")
}

struct Run {
    count: usize,
    last_file: (f64, f64),
    requests_per_agent_per_change: f64,
    watches_per_agent: f64,
    apiserver_kib: u64,
    agent_kib: u64,
}

async fn run(plane: &ControlPlane, client: &kube::Client, ns: &str, count: usize) -> Run {
    let binary = report::controller_binary();
    let kubeconfig = format!("--kubeconfig={}", plane.kubeconfig().display());
    let dirs: Vec<PathBuf> = (0..count).map(|i| plane.dir().join(format!("bench-agents-{count}/node-{i}"))).collect();
    let idle = api_counters(client).await;
    let mut agents: Vec<Child> = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        std::fs::create_dir_all(dir).expect("hosts directory");
        let agent = node_plan::start(
            &binary,
            ns,
            &[
                "node-agent".into(),
                kubeconfig.clone(),
                format!("--node-plan-configmap={PLAN}"),
                format!("--config-path-mount={}", dir.display()),
                format!("--node-name=bench-{count}-{i}"),
                "--http-address=127.0.0.1:0".into(),
                "--resync=60s".into(),
            ],
        );
        agents.push(agent);
    }
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    let params = PatchParams::apply("bench").force();
    let files: Vec<PathBuf> = dirs.iter().map(|d| d.join(ADDRESS).join("hosts.toml")).collect();
    let all_written = move |files: Vec<PathBuf>, port: i32, started: Instant| {
        std::thread::spawn(move || {
            let mut pending = files;
            while started.elapsed() < Duration::from_secs(60) {
                pending.retain(|f| {
                    !std::fs::read_to_string(f).is_ok_and(|t| t.contains(&format!("http://10.96.200.201:{port}\"")))
                });
                if pending.is_empty() {
                    return Some(started.elapsed());
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            None
        })
    };
    // Every agent has the file of the current plan before anything is timed.
    let current = 5000 + i32::from(count % 2 == 1);
    services
        .patch("registry", &params, &Patch::Apply(node_plan::registry("10.96.200.201", current)))
        .await
        .expect("registry");
    all_written(files.clone(), current, Instant::now()).join().ok().flatten().expect("every agent wrote its file");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let settled = api_counters(client).await;

    let mut last_file = Vec::new();
    let mut port = current;
    for _ in 0..CHANGES {
        port = if port == 5000 { 5001 } else { 5000 };
        let started = Instant::now();
        services
            .patch("registry", &params, &Patch::Apply(node_plan::registry("10.96.200.201", port)))
            .await
            .expect("registry");
        let seen = all_written(files.clone(), port, started).join().ok().flatten();
        let seen = seen.unwrap_or_else(|| panic!("{count} agents: a change did not reach every file within 60 s"));
        last_file.push(seen.as_secs_f64() * 1000.0);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = api_counters(client).await;
    let apiserver_kib = binary::resident_kib(apiserver_pid(plane)).unwrap_or(0);
    let agent_kib = binary::resident_kib(agents[0].id()).unwrap_or(0);
    for mut agent in agents {
        let _ = Command::new("kill").arg(agent.id().to_string()).status();
        let _ = agent.wait();
    }
    let per_agent = count as f64;
    Run {
        count,
        last_file: median_p99(&mut last_file),
        requests_per_agent_per_change: (after.agent_requests - settled.agent_requests) / per_agent / CHANGES as f64,
        watches_per_agent: (settled.configmap_watches - idle.configmap_watches) / per_agent,
        apiserver_kib,
        agent_kib,
    }
}

#[tokio::main]
async fn main() {
    let plane = ControlPlane::shared();
    let client = plane.client().await.expect("client");
    let ns = plane.namespace(&client, "bench-agents").await.expect("namespace");
    // The agents keep their nodes' NodePullStates, as in the chart.
    let crd = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("charts/local-registry-publisher/crds");
    let applied = Command::new(plane.tools().join("kubectl"))
        .arg(format!("--kubeconfig={}", plane.kubeconfig().display()))
        .args(["apply", "--server-side", "-f"])
        .arg(&crd)
        .output()
        .expect("kubectl");
    assert!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let plan = ConfigMap {
        metadata: kube::api::ObjectMeta { name: Some(PLAN.into()), ..Default::default() },
        ..Default::default()
    };
    configmaps.create(&PostParams::default(), &plan).await.expect("plan ConfigMap");
    let kubeconfig = format!("--kubeconfig={}", plane.kubeconfig().display());
    let controller = node_plan::start_controller(&report::controller_binary(), &kubeconfig, &ns);
    // The controller's own watches are open before the agents' are counted.
    tokio::time::sleep(Duration::from_secs(5)).await;

    let mut runs = Vec::new();
    for count in COUNTS {
        let measured = run(plane, &client, &ns, count).await;
        eprintln!(
            "{count} agents: last file {:.1} ms median, {:.1} ms p99; {:.2} requests per agent per change",
            measured.last_file.0, measured.last_file.1, measured.requests_per_agent_per_change
        );
        runs.push(measured);
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    let one = &runs[0];
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    let mut rows = String::new();
    for run in &runs {
        rows += &format!(
            "| {} | {:.1} ms ({:.2}x) | {:.1} ms ({:.2}x) | {:.2} ({:.2}x) | {:.2} | {:.1} MiB ({:.2}x) | {:.1} MiB ({:.2}x) |\n",
            run.count,
            run.last_file.0,
            ratio(run.last_file.0, one.last_file.0),
            run.last_file.1,
            ratio(run.last_file.1, one.last_file.1),
            run.requests_per_agent_per_change,
            ratio(run.requests_per_agent_per_change, one.requests_per_agent_per_change),
            run.watches_per_agent,
            run.apiserver_kib as f64 / 1024.0,
            ratio(run.apiserver_kib as f64, one.apiserver_kib as f64),
            run.agent_kib as f64 / 1024.0,
            ratio(run.agent_kib as f64, one.agent_kib as f64),
        );
    }
    let last = &runs[runs.len() - 1];
    let slope_kib = (last.apiserver_kib as f64 - one.apiserver_kib as f64) / (last.count - one.count) as f64;
    let at_5000_mib = (one.apiserver_kib as f64 + slope_kib * 4999.0) / 1024.0;
    let requests_5000 = last.requests_per_agent_per_change * 5000.0;
    let markdown = format!(
        "## The node agents at scale (`benches/node_agents.rs`)\n\nMachine: {}. Load average (1, 5, 15 min): {}. One \
         controller with `--node-plan-configmap` and 1, 10, then 100 node agents (the release build, each writing \
         into a directory of its own and keeping a NodePullState under a node name of its own, standing in for \
         nodes) on the local control plane; {CHANGES} port changes of the registry Service, 300 ms apart, each timed \
         from the start of its PATCH until the last agent's `hosts.toml` holds it (files polled every 1 ms). \
         Requests: the API server's own count of requests on NodePullStates and Events (the agents' only requests \
         besides their watch), per agent and change. Watches: ConfigMap watches the agents opened, per agent. Memory: \
         resident, once the changes settled. Ratios are to one agent.\n\n\
         | agents | last file, median | last file, p99 | requests per agent per change | watches per agent | API server memory | one agent's memory |\n\
         |---|---|---|---|---|---|---|\n{rows}\n\
         The API server's memory grows by {slope_kib:.0} KiB per agent between 1 and {} agents (the agents' watches, \
         their NodePullStates and Events); on that slope 5,000 nodes would take it to about {at_5000_mib:.0} MiB, and \
         each change of the plan would cost about {requests_5000:.0} requests (each node's state written once; an \
         agent's Event goes out only when its node's Configured condition changes, which a port change does not), \
         spread over the agents' own passes. Each agent holds one watch, filtered to the plan's ConfigMap by name on \
         the server, so an agent's memory does not grow with the cluster. One run on a shared 2-core machine where \
         100 agent processes compete with the API server for the cores: the tail at 100 agents is that contention \
         as much as the API server's fan-out, and the API server's resident memory moves with Go's garbage \
         collector, so the slope is an estimate to within tens of percent.\n",
        report::machine(),
        report::load_average(),
        last.count,
    );
    println!("{markdown}");
    report::write_section("node-agents-scale", &markdown);
    let mut controller = controller;
    let _ = Command::new("kill").arg(controller.id().to_string()).status();
    let _ = controller.wait();
}
