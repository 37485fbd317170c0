//! The node agent's loopback relay on the real node: pulling a 100 MiB image through the relay
//! (`localhost:<relay>`) beside pulling it straight from the registry's ClusterIP, from the same node, in the same
//! run (the baseline); and the agent's resident memory while it relays nothing beside while it holds 100 open relayed
//! connections. The agent is the shipped release build, run in the node's network as the DaemonSet runs it
//! (`--runtime=none --relay`), following a plan in a ConfigMap of the control plane. Run with `make bench`.

#[path = "support/report.rs"]
mod report;
#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::json;
use testbed::{ControlPlane, RealNode};

/// The relay's port on the node.
const RELAY: u16 = 5201;
/// The agent's /metrics on the node's loopback.
const METRICS: u16 = 9819;
const ROUNDS: usize = 9;
const IMAGE_MIB: usize = 100;
const CONNECTIONS: usize = 100;

#[tokio::main]
async fn main() {
    let plane = ControlPlane::shared_with_real_node();
    let node = plane.real_node().expect("the real node");
    let client = plane.client().await.expect("client");
    let ns = plane.namespace(&client, "bench-relay").await.expect("namespace");
    support::agent::registry(plane, &client, &ns, node).await;
    let registry = support::cluster_ip(&client, &ns, "registry").await;

    eprintln!("[bench] writing and pushing a {IMAGE_MIB} MiB image to the registry");
    let layout = big_image(plane);
    let direct = format!("{registry}:5000/big:1");
    support::agent::push(plane, Some(node), &layout, &direct, None);

    let plan = json!({"format": 3, "hosts": [],
        "relays": [{"port": RELAY, "registry": format!("{ns}/registry"), "target": format!("{registry}:5000")}]});
    let configmap: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "plan"},
        "data": {local_registry_publisher::node::PLAN_KEY: plan.to_string()}}))
    .expect("the plan's ConfigMap");
    Api::<ConfigMap>::namespaced(client.clone(), &ns).create(&PostParams::default(), &configmap).await.expect("plan");
    let mut agent = node
        .command(report::controller_binary())
        .args([
            "node-agent",
            &format!("--kubeconfig={}", plane.kubeconfig().display()),
            "--node-plan-configmap=plan",
            "--runtime=none",
            "--relay",
            "--relay-max-connections=512",
            &format!("--http-address=127.0.0.1:{METRICS}"),
        ])
        .env("POD_NAMESPACE", &ns)
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the agent");
    let listening = support::wait_until(support::SOON_ON_A_NODE, || async {
        metric(node, "local_registry_publisher_node_relay_listeners{").filter(|n| *n >= 1.0)
    })
    .await;
    assert!(listening.is_some(), "the agent never listened at {RELAY}");
    let relayed = format!("localhost:{RELAY}/big:1");

    let (mut through, mut straight) = (Vec::new(), Vec::new());
    pull(plane, node, &relayed);
    pull(plane, node, &direct);
    for round in 0..ROUNDS {
        // Which goes first alternates, so the machine's slow moments fall on both alike.
        let order = if round % 2 == 0 { [true, false] } else { [false, true] };
        for relay in order {
            let took = pull(plane, node, if relay { &relayed } else { &direct });
            if relay { through.push(took) } else { straight.push(took) }
        }
    }
    let (relay_s, direct_s) = (median(&mut through), median(&mut straight));
    // The relay carried every pull through it: its own count of the bytes it copied from the registry.
    let carried = metric_of(node, "direction=\"from_registry\"").unwrap_or_default() / f64::from(1 << 20);
    assert!(carried >= (IMAGE_MIB * (ROUNDS + 1)) as f64, "the relay copied only {carried:.0} MiB");

    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = rss_kib(agent.id());
    let holder = hold_connections(node);
    let open = support::wait_until(support::SOON_ON_A_NODE, || async {
        metric(node, "local_registry_publisher_node_relay_open_connections{").filter(|n| *n >= CONNECTIONS as f64)
    })
    .await;
    assert!(open.is_some(), "the agent never held {CONNECTIONS} connections");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let holding = rss_kib(agent.id());
    drop(holder);
    let _ = agent.kill();
    let _ = agent.wait();
    plane.delete_namespace(&client, &ns).await.expect("delete the namespace");

    let mib = |seconds: f64| IMAGE_MIB as f64 / seconds;
    let each = |samples: &[f64]| samples.iter().map(|s| format!("{s:.2}")).collect::<Vec<_>>().join(", ");
    let markdown = format!(
        "## The node agent's loopback relay (`benches/relay.rs`)\n\n\
         Machine: {}. Load average (1, 5, 15 min): {} at the end. On the real node (containerd {}, kube-proxy {}), \
         crane pulls a {IMAGE_MIB} MiB image (one incompressible layer) into a tmpfs, {ROUNDS} times each way, \
         alternating which goes first: through the relay at `localhost:{RELAY}` (the release build's agent, \
         `--runtime=none --relay`, in the node's network) and straight from the registry's ClusterIP (the baseline). \
         The registry's pod runs on the same node.\n\n\
         | pull of {IMAGE_MIB} MiB | median | throughput | ratio to the baseline's throughput | each round |\n\
         |---|---|---|---|---|\n\
         | through the relay | {relay_s:.2} s | {:.0} MiB/s | {:.2}x | {} s |\n\
         | straight from the ClusterIP (baseline) | {direct_s:.2} s | {:.0} MiB/s | 1.00x | {} s |\n\n\
         | the agent's resident memory | kB | ratio to idle |\n\
         |---|---|---|\n\
         | relaying, no connection open | {idle} | 1.00x |\n\
         | {CONNECTIONS} relayed connections open (each to the registry, idle after one request) | {holding} | {:.2}x |\n\n\
         The relay's own count of what it copied from the registry over the {} pulls through it: {carried:.0} MiB.\n",
        report::machine(),
        report::load_average(),
        node.containerd_release().minor,
        node.proxy_mode().as_str(),
        mib(relay_s),
        direct_s / relay_s,
        each(&through),
        mib(direct_s),
        each(&straight),
        holding as f64 / idle as f64,
        ROUNDS + 1,
    );
    println!("{markdown}");
    report::write_section("relay", &markdown);
}

/// An image of one layer of [`IMAGE_MIB`] MiB of random bytes, as an OCI layout.
fn big_image(plane: &ControlPlane) -> std::path::PathBuf {
    let dir = plane.dir().join("images");
    std::fs::create_dir_all(&dir).expect("images directory");
    let file = dir.join("big.bin");
    let mut bytes = vec![0u8; IMAGE_MIB << 20];
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    for chunk in bytes.chunks_mut(8) {
        // xorshift: incompressible enough that the layer stays its size.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
    }
    std::fs::write(&file, bytes).expect("the layer's file");
    let spec = xtask::image::ImageSpec {
        name: "testbed.local/big:1".into(),
        files: vec![("/big.bin".into(), file)],
        entrypoint: vec!["/big.bin".into()],
        ..Default::default()
    };
    spec.write(&dir, "big").expect("write the image").layout
}

/// Seconds `crane pull` took to fetch `reference` from the node into a tmpfs.
fn pull(plane: &ControlPlane, node: &RealNode, reference: &str) -> f64 {
    let into = std::path::Path::new("/dev/shm").join(format!("lrp-bench-pull-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&into);
    let started = Instant::now();
    let output = node
        .command(plane.tools().join("crane"))
        .args(["pull", "--insecure", "--format=oci", reference])
        .arg(&into)
        .output()
        .expect("run crane");
    let took = started.elapsed().as_secs_f64();
    assert!(output.status.success(), "pulling {reference}: {}", String::from_utf8_lossy(&output.stderr));
    let _ = std::fs::remove_dir_all(&into);
    took
}

fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// A series' value on the agent's /metrics, read in the node's network.
fn metric(node: &RealNode, series: &str) -> Option<f64> {
    let url = format!("http://127.0.0.1:{METRICS}/metrics");
    let output = node.command("curl").args(["-sf", "--max-time", "5", &url]).output().ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines().find(|l| l.starts_with(series))?.rsplit(' ').next()?.parse().ok()
}

/// The value of the agent's relay bytes series whose labels hold `labels`.
fn metric_of(node: &RealNode, labels: &str) -> Option<f64> {
    let url = format!("http://127.0.0.1:{METRICS}/metrics");
    let output = node.command("curl").args(["-sf", "--max-time", "5", &url]).output().ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("local_registry_publisher_node_relay_bytes_total{") && l.contains(labels))?;
    line.rsplit(' ').next()?.parse().ok()
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the agent's status");
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    line.split_whitespace().nth(1).and_then(|kib| kib.parse().ok()).expect("a number")
}

/// A process in the node's network holding [`CONNECTIONS`] connections to the relay, each after one request to the
/// registry (kept alive), until dropped.
struct Holder(std::process::Child);

fn hold_connections(node: &RealNode) -> Holder {
    let program = [
        "import socket, time",
        "held = []",
        &format!("for _ in range({CONNECTIONS}):"),
        &format!("    s = socket.create_connection(('127.0.0.1', {RELAY}))"),
        "    s.sendall(b'GET /v2/ HTTP/1.1\\r\\nHost: relay\\r\\n\\r\\n')",
        "    s.recv(4096)",
        "    held.append(s)",
        "time.sleep(600)",
    ]
    .join("\n");
    Holder(node.command("python3").args(["-c", &program]).spawn().expect("start the connections' holder"))
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
