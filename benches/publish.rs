//! Measures the real controller binary and a Go controller-runtime baseline (benches/baseline, built by
//! hack/baseline.sh) on the same local control plane, prints the numbers and writes them to docs/benchmarks.md with
//! two charts (never asserts on them):
//! - reaction: for each of many nodePort changes, the Service's watch event, the ConfigMap's watch event, and (ours
//!   only) the controller's own log of the time from receiving the event to sending its write;
//! - end to end, from the PATCH to the ConfigMap event, against the physical floor measured in the same run: the API
//!   server's own watch round trip for the Service change plus one server-side apply round trip of a ConfigMap;
//! - a burst of changes, and how many writes it took; the first publish after exec;
//! - resident memory and open sockets at idle, with 10,000 unrelated Services in 1,000 namespaces, with up to 1,000
//!   labelled registries (one tenant namespace), after they go, and with a labelled Deployment in a crowded namespace;
//! - when the winner changes among 1,000 registries: the time to publish it and to tell every loser.
//!
//! Run with `make bench` (which builds the baseline and passes its path in LRP_BASELINE).

#[path = "support/plot.rs"]
mod plot;
#[path = "support/report.rs"]
mod report;

#[allow(dead_code)] // the bench uses part of the test helper
#[path = "../tests/support/binary.rs"]
mod binary;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use binary::Controller;
use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use testbed::ControlPlane;

const CHANGES: usize = 100;
const BURST: usize = 10;
const STARTS: usize = 5;
const UNRELATED_NAMESPACES: usize = 1000;
const SERVICES_PER_NAMESPACE: usize = 10;
const REGISTRY_STEPS: [usize; 4] = [0, 250, 500, 1000];
const CROWDED: usize = 2000;
const LABEL: &str = "local-registry-publisher.io/registry";
const DATA_KEY: &str = "localRegistryHosting.v1";

/// One controller under test, as a child process.
enum Contender {
    Ours(Controller),
    Baseline(Child),
}

impl Contender {
    fn ours(plane: &ControlPlane, configmap_namespace: &str, extra: &[String]) -> Self {
        let mut args = vec![
            format!("--kubeconfig={}", plane.kubeconfig().display()),
            format!("--configmap-namespace={configmap_namespace}"),
            format!("--allowed-namespaces={configmap_namespace}"),
            "--log-format=json".into(),
            "--log-level=info".into(),
        ];
        args.extend_from_slice(extra);
        Contender::Ours(Controller::start_binary(&report::controller_binary(), &args))
    }

    fn baseline(plane: &ControlPlane, configmap_namespace: &str) -> Self {
        let binary = std::env::var("LRP_BASELINE").expect("LRP_BASELINE: run the benchmarks with `make bench`");
        let child = Command::new(binary)
            .arg(format!("--kubeconfig={}", plane.kubeconfig().display()))
            .arg(format!("--configmap-namespace={configmap_namespace}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(std::env::temp_dir().join("lrp-baseline.log")).expect("log file"))
            .spawn()
            .expect("start the baseline");
        Contender::Baseline(child)
    }

    fn pid(&self) -> u32 {
        match self {
            Contender::Ours(c) => c.pid(),
            Contender::Baseline(c) => c.id(),
        }
    }

    /// The controller's own reaction times, in microseconds, from its log (ours only).
    fn logged_reactions(&self) -> Vec<f64> {
        let Contender::Ours(c) = self else { return Vec::new() };
        let log = std::fs::read_to_string(&c.log).unwrap_or_default();
        log.lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|l| l["fields"]["message"] == "published")
            .filter_map(|l| match &l["fields"]["reaction_us"] {
                serde_json::Value::String(us) => us.parse().ok(),
                us => us.as_f64(),
            })
            .collect()
    }

    fn stop(self) {
        let _ = Command::new("kill").arg(self.pid().to_string()).status();
        match self {
            Contender::Ours(mut c) => drop(c.wait_exit(Duration::from_secs(10))),
            Contender::Baseline(mut c) => drop(c.wait()),
        }
    }

    /// (resident KiB, open sockets).
    fn footprint(&self) -> (u64, usize) {
        (binary::resident_kib(self.pid()).unwrap_or(0), binary::open_sockets(self.pid()))
    }
}

fn registry(name: &str, node_port: Option<i32>, selector: bool) -> Service {
    let mut spec = json!({"ports": [{"name": "registry", "port": 5000}]});
    if let Some(node_port) = node_port {
        spec["type"] = json!("NodePort");
        spec["ports"][0]["nodePort"] = json!(node_port);
    }
    if selector {
        spec["selector"] = json!({"app": name});
    }
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "labels": {LABEL: "true"}}, "spec": spec
    }))
    .expect("service")
}

/// What one contender's latency run saw, per change.
#[derive(Default)]
struct Latency {
    /// PATCH start to the ConfigMap event.
    end_to_end: Vec<Duration>,
    /// PATCH start to the Service's own watch event.
    service_event: Vec<Duration>,
    /// ConfigMap event minus Service event: the controller's share, seen from outside.
    outside: Vec<Duration>,
    /// ConfigMap writes a burst of changes took.
    burst_writes: usize,
    /// exec to the ConfigMap event.
    first_publish: Vec<Duration>,
    /// The controller's own log of its reaction (ours only), in microseconds.
    inside_us: Vec<f64>,
}

/// Watches the data of ConfigMap `name` in `namespace`.
fn hosts(client: &Client, namespace: &str, name: &str) -> impl Stream<Item = (Instant, String)> + Unpin + use<> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    Box::pin(watcher(api, config).applied_objects().filter_map(|cm| async move {
        let text = cm.ok()?.data?.get(DATA_KEY).cloned()?;
        Some((Instant::now(), text))
    }))
}

/// `first_port`: each contender gets its own nodePort range; a deleted Service's ports are not free again at once.
async fn measure_latency(
    client: &Client,
    ns: &str,
    start: impl Fn() -> Contender,
    configmap: &str,
    first_port: i32,
) -> Latency {
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    let params = PatchParams::apply("bench").force();
    let mut latency = Latency::default();
    let mut port = first_port;
    services
        .patch("registry", &params, &Patch::Apply(registry("registry", Some(port), false)))
        .await
        .expect("registry");

    for _ in 0..STARTS {
        let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        let _ = configmaps.delete(configmap, &DeleteParams::default()).await;
        let mut seen = hosts(client, ns, configmap);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let started = Instant::now();
        let contender = start();
        let at = wait_for(&mut seen, &format!("localhost:{port}")).await;
        latency.first_publish.push(at - started);
        contender.stop();
    }

    let contender = start();
    let mut seen = hosts(client, ns, configmap);
    wait_for(&mut seen, &format!("localhost:{port}")).await;
    let service_config = watcher::Config::default().fields("metadata.name=registry");
    let mut node_ports = Box::pin(watcher(services.clone(), service_config).applied_objects().filter_map(|s| async {
        let port = s.ok()?.spec?.ports?.first()?.node_port?;
        Some((Instant::now(), port))
    }));
    for _ in 0..CHANGES {
        port += 1;
        let started = Instant::now();
        services
            .patch("registry", &params, &Patch::Apply(registry("registry", Some(port), false)))
            .await
            .expect("patch");
        let host = format!("localhost:{port}");
        let (service_at, configmap_at) = tokio::join!(wait_for_port(&mut node_ports, port), wait_for(&mut seen, &host));
        latency.end_to_end.push(configmap_at - started);
        latency.service_event.push(service_at - started);
        latency.outside.push(configmap_at.saturating_duration_since(service_at));
        // Changes a user makes are seconds apart; this keeps each one its own change.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A burst: changes sent back to back, each waiting only for the API server's answer.
    for _ in 0..BURST {
        port += 1;
        services
            .patch("registry", &params, &Patch::Apply(registry("registry", Some(port), false)))
            .await
            .expect("patch");
    }
    let last = format!("host: \"localhost:{port}\"");
    let counted = tokio::time::timeout(Duration::from_secs(30), async {
        let mut writes = 0;
        while let Some((_, text)) = seen.next().await {
            writes += 1;
            if text.contains(&last) {
                return writes;
            }
        }
        writes
    })
    .await;
    latency.burst_writes = counted.expect("the burst's last change was published");
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The single changes only: not the first publish (it waits for the initial lists) nor the burst's writes
    // (deliberately held for the absorb window).
    latency.inside_us = contender.logged_reactions().into_iter().skip(1).take(CHANGES).collect();
    contender.stop();
    // The next contender's controller publishes the oldest labelled registry: it must be its own.
    services.delete("registry", &DeleteParams::default()).await.expect("delete the registry");
    latency
}

#[tokio::main]
async fn main() {
    let plane = ControlPlane::shared();
    let client = plane.client().await.expect("client");
    let load_before = report::load_average();

    // Latency, one contender at a time on an otherwise idle control plane.
    let ours_ns = plane.namespace(&client, "bench-ours").await.expect("namespace");
    let ours = measure_latency(
        &client,
        &ours_ns,
        || Contender::ours(plane, &ours_ns, &[format!("--watch-namespaces={ours_ns}")]),
        "local-registry-hosting",
        30100,
    )
    .await;
    let go_ns = plane.namespace(&client, "bench-go").await.expect("namespace");
    let go =
        measure_latency(&client, &go_ns, || Contender::baseline(plane, &go_ns), "local-registry-hosting", 30400).await;
    // One server-side apply round trip of a ConfigMap like ours, alternating so each apply really writes.
    let floor_apply = apply_round_trips(&client, &ours_ns).await;
    if std::env::var_os("LRP_BENCH_LATENCY_ONLY").is_some() {
        // A quick comparison of builds: printed only, docs/benchmarks.md is left alone.
        let median = |samples: &[Duration]| quantile(&millis(samples), 0.5);
        for (name, l) in [("this project", &ours), ("Go baseline", &go)] {
            println!(
                "{name}: end to end {:.2} ms, reaction outside {:.2} ms (p99 {:.2}), Service event {:.2} ms, inside \
                 {:.3} ms (p99 {:.3}), apply {:.2} ms",
                median(&l.end_to_end),
                median(&l.outside),
                quantile(&millis(&l.outside), 0.99),
                median(&l.service_event),
                quantile(&l.inside_us, 0.5) / 1000.0,
                quantile(&l.inside_us, 0.99) / 1000.0,
                median(&floor_apply),
            );
        }
        return;
    }
    let services: Api<Service> = Api::namespaced(client.clone(), &ours_ns);
    let params = PatchParams::apply("bench").force();
    services
        .patch("registry", &params, &Patch::Apply(registry("registry", Some(30700), false)))
        .await
        .expect("registry");

    // Memory and sockets: both run over the whole cluster, as they would be installed.
    let contenders = [Contender::ours(plane, &ours_ns, &[]), Contender::baseline(plane, &go_ns)];
    let settle = || tokio::time::sleep(Duration::from_secs(10));
    settle().await;
    let mut stages: Vec<(String, [(u64, usize); 2])> = Vec::new();
    let measure = |contenders: &[Contender; 2]| [contenders[0].footprint(), contenders[1].footprint()];
    stages.push(("idle, one registry".into(), measure(&contenders)));

    let started = Instant::now();
    create_unrelated(plane, &client).await;
    println!(
        "created {} unrelated Services in {:.0} s",
        UNRELATED_NAMESPACES * SERVICES_PER_NAMESPACE,
        started.elapsed().as_secs_f64()
    );
    settle().await;
    stages.push((
        format!(
            "{} unrelated Services in {UNRELATED_NAMESPACES} namespaces",
            UNRELATED_NAMESPACES * SERVICES_PER_NAMESPACE
        ),
        measure(&contenders),
    ));

    let tenant = plane.namespace(&client, "tenant").await.expect("namespace");
    let tenant_services: Api<Service> = Api::namespaced(client.clone(), &tenant);
    let mut by_registries: Vec<(usize, [(u64, usize); 2])> = Vec::new();
    let mut created = 0;
    for step in REGISTRY_STEPS {
        let indices = created..step;
        created = step;
        futures::stream::iter(indices)
            .for_each_concurrent(16, |i| {
                let api = tenant_services.clone();
                async move {
                    // Most select pods; every hundredth is selector-less, with EndpointSlices of its own if any.
                    let service = registry(&format!("registry-{i:04}"), None, i % 100 != 0);
                    api.create(&PostParams::default(), &service).await.expect("registry");
                }
            })
            .await;
        settle().await;
        by_registries.push((step, measure(&contenders)));
        stages.push((format!("{step} labelled registries in one untrusted namespace"), measure(&contenders)));
    }

    // The winner changes among 1,000 trusted registries: publish time, and how long until every loser is told.
    let (publish_after, told_after, losers) = change_winner(&client, &ours_ns, &tenant).await;

    let labelled = ListParams::default().labels(&format!("{LABEL}=true"));
    tenant_services.delete_collection(&DeleteParams::default(), &labelled).await.expect("delete registries");
    settle().await;
    stages.push(("after the 1,000 registries are deleted".into(), measure(&contenders)));

    let crowded = plane.namespace(&client, "crowded").await.expect("namespace");
    let crowded_services: Api<Service> = Api::namespaced(client.clone(), &crowded);
    create_services(&crowded_services, CROWDED, "svc").await;
    settle().await;
    stages.push((format!("{CROWDED} unlabelled Services in one more namespace"), measure(&contenders)));
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &crowded);
    let deployment = |labelled: bool| {
        let labels = if labelled { json!({LABEL: "true"}) } else { json!({}) };
        Patch::Apply(json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "registry", "labels": labels},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "registry"}},
                "template": {"metadata": {"labels": {"app": "registry"}},
                    "spec": {"containers": [{"name": "registry", "image": "registry"}]}}}
        }))
    };
    deployments.patch("registry", &params, &deployment(true)).await.expect("deployment");
    settle().await;
    stages.push(("a labelled Deployment there (every Service of it watched)".into(), measure(&contenders)));
    deployments.patch("registry", &params, &deployment(false)).await.expect("deployment");
    settle().await;
    stages.push(("its label removed".into(), measure(&contenders)));
    for contender in contenders {
        contender.stop();
    }
    let load_after = report::load_average();

    write_report(Report {
        load_before,
        load_after,
        ours,
        go,
        floor_apply,
        stages,
        by_registries,
        publish_after,
        told_after,
        losers,
    });
}

/// 1,000 namespaces of 10 Services each, none of them a registry.
async fn create_unrelated(plane: &ControlPlane, client: &Client) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let run = plane.namespace(client, "unrelated").await.expect("namespace");
    futures::stream::iter(0..UNRELATED_NAMESPACES)
        .for_each_concurrent(8, |i| {
            let (namespaces, client, name) = (namespaces.clone(), client.clone(), format!("{run}-{i:04}"));
            async move {
                let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).expect("namespace");
                namespaces.create(&PostParams::default(), &ns).await.expect("namespace");
                create_services(&Api::namespaced(client, &name), SERVICES_PER_NAMESPACE, "svc").await;
            }
        })
        .await;
}

async fn create_services(api: &Api<Service>, count: usize, prefix: &str) {
    futures::stream::iter(0..count)
        .for_each_concurrent(8, |i| {
            let api = api.clone();
            async move {
                let service: Service = serde_json::from_value(json!({
                    "metadata": {"name": format!("{prefix}-{i:04}"), "labels": {"app": "web"}},
                    "spec": {"selector": {"app": format!("web-{i}")}, "ports": [{"port": 80}]}
                }))
                .expect("service");
                api.create(&PostParams::default(), &service).await.expect("service");
            }
        })
        .await;
}

/// Makes the tenant's registries trusted, then gives one of them priority; returns how long until it was published,
/// how long until every other registry had been told it lost to it, and how many were told.
async fn change_winner(client: &Client, configmap_ns: &str, tenant: &str) -> (Duration, Duration, usize) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let allow = json!({"metadata": {"labels": {"local-registry-publisher.io/registries": "allowed"}}});
    namespaces.patch(tenant, &PatchParams::default(), &Patch::Merge(allow)).await.expect("allow the tenant");
    // Let the loser Events for the current winner be told first.
    tokio::time::sleep(Duration::from_secs(20)).await;
    // Selector-less, so ready without pods.
    let winner = "registry-0100";
    let mut seen = hosts(client, configmap_ns, "local-registry-hosting");
    let (started, since) = (Instant::now(), k8s_openapi::jiff::Timestamp::now());
    let priority = json!({"metadata": {"annotations": {"local-registry-publisher.io/priority": "10"}}});
    let services: Api<Service> = Api::namespaced(client.clone(), tenant);
    services.patch(winner, &PatchParams::default(), &Patch::Merge(priority)).await.expect("priority");
    let host = format!("{winner}.{tenant}.svc.cluster.local:5000");
    wait_for(&mut seen, &host).await;
    let published = started.elapsed();
    let events: Api<Event> = Api::namespaced(client.clone(), tenant);
    let told = loop {
        let list = events.list(&ListParams::default()).await.expect("events");
        let losers = list
            .items
            .iter()
            .filter(|e| e.reason.as_deref() == Some("NotPublished"))
            .filter(|e| e.event_time.as_ref().is_some_and(|t| t.0 >= since))
            .filter(|e| e.note.as_deref().is_some_and(|n| n.contains(winner)))
            .count();
        if losers >= REGISTRY_STEPS[3] - 1 || started.elapsed() > Duration::from_secs(120) {
            break (started.elapsed(), losers);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    (published, told.0, told.1)
}

async fn apply_round_trips(client: &Client, ns: &str) -> Vec<Duration> {
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let params = PatchParams::apply("bench").force();
    let mut applies = Vec::new();
    for i in 0..CHANGES {
        let probe: ConfigMap = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "floor-probe"},
            "data": {DATA_KEY: format!("host: \"localhost:{}\"\n", 31000 + i)}
        }))
        .expect("configmap");
        let started = Instant::now();
        configmaps.patch("floor-probe", &params, &Patch::Apply(&probe)).await.expect("apply");
        applies.push(started.elapsed());
    }
    applies
}

async fn wait_for(hosts: &mut (impl Stream<Item = (Instant, String)> + Unpin), host: &str) -> Instant {
    let wanted = format!("\"{host}\"");
    first_seen(hosts, |text| text.contains(&wanted), &format!("the ConfigMap showing {host}")).await
}

async fn wait_for_port(ports: &mut (impl Stream<Item = (Instant, i32)> + Unpin), port: i32) -> Instant {
    first_seen(ports, |seen| *seen == port, &format!("the Service watch showing nodePort {port}")).await
}

/// When the stream first showed an item that passes `wanted`.
async fn first_seen<T>(
    stream: &mut (impl Stream<Item = (Instant, T)> + Unpin),
    wanted: impl Fn(&T) -> bool,
    what: &str,
) -> Instant {
    let found = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some((at, item)) = stream.next().await {
            if wanted(&item) {
                return Some(at);
            }
        }
        None
    })
    .await;
    found.ok().flatten().unwrap_or_else(|| panic!("timed out waiting for {what}"))
}

struct Report {
    load_before: String,
    load_after: String,
    ours: Latency,
    go: Latency,
    floor_apply: Vec<Duration>,
    stages: Vec<(String, [(u64, usize); 2])>,
    by_registries: Vec<(usize, [(u64, usize); 2])>,
    publish_after: Duration,
    told_after: Duration,
    losers: usize,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The value at quantile `q` (0 to 1) of `samples`, in the same unit.
fn quantile(samples: &[f64], q: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn millis(samples: &[Duration]) -> Vec<f64> {
    samples.iter().map(|d| ms(*d)).collect()
}

fn write_report(r: Report) {
    let median = |samples: &[Duration]| quantile(&millis(samples), 0.5);
    let p99 = |samples: &[Duration]| quantile(&millis(samples), 0.99);
    let floor = median(&r.ours.service_event) + median(&r.floor_apply);
    let go_floor = median(&r.go.service_event) + median(&r.floor_apply);
    let inside_ms: Vec<f64> = r.ours.inside_us.iter().map(|us| us / 1000.0).collect();
    let mut md = format!(
        "## Publishing latency and memory, against a Go controller-runtime baseline (`benches/publish.rs`)\n\n\
         Machine: {}. Load average (1, 5, 15 min): {} before, {} after. Release builds. The baseline \
         (`benches/baseline`) is the smallest controller-runtime controller doing the same job: a label-filtered \
         Service cache and a server-side apply of the same document. Each ran alone for the latency figures: \
         {CHANGES} nodePort changes 50 ms apart, each timed from the start of the PATCH to the watch events the \
         benchmark sees.\n\n\
         | figure | this project | Go baseline | ratio |\n|---|---|---|---|\n",
        report::machine(),
        r.load_before,
        r.load_after,
    );
    let row = |figure: &str, ours: f64, go: f64, unit: &str| {
        format!("| {figure} | {ours:.2} {unit} | {go:.2} {unit} | {:.2}x |\n", ours / go)
    };
    md += &format!(
        "| controller's own reaction, measured inside (event received to write sent), median | {:.3} ms | n/a | |\n\
         | the same, p99 (over the {} single changes) | {:.3} ms | n/a | |\n",
        quantile(&inside_ms, 0.5),
        inside_ms.len(),
        quantile(&inside_ms, 0.99)
    );
    md += &row(
        "controller's reaction seen from outside (ConfigMap event minus Service event), median",
        median(&r.ours.outside),
        median(&r.go.outside),
        "ms",
    );
    md += &row("the same, p99", p99(&r.ours.outside), p99(&r.go.outside), "ms");
    md += &row("PATCH start to ConfigMap event, median", median(&r.ours.end_to_end), median(&r.go.end_to_end), "ms");
    md += &format!(
        "| the same, as a multiple of the floor (the Service's own watch round trip plus one apply) | {:.2}x | {:.2}x | |\n",
        median(&r.ours.end_to_end) / floor,
        median(&r.go.end_to_end) / go_floor,
    );
    md += &row(
        "floor: Service watch round trip, median",
        median(&r.ours.service_event),
        median(&r.go.service_event),
        "ms",
    );
    md += &format!(
        "| floor: one server-side apply of a ConfigMap, median | {:.2} ms | (same) | |\n",
        median(&r.floor_apply)
    );
    md += &format!(
        "| ConfigMap writes for a burst of {BURST} changes sent back to back | {} | {} | |\n",
        r.ours.burst_writes, r.go.burst_writes
    );
    md +=
        &row("first publish after exec, median of 5", median(&r.ours.first_publish), median(&r.go.first_publish), "ms");
    md += "\n| memory (resident) and open sockets | this project | ratio to its idle | Go baseline | ratio to its idle |\n|---|---|---|---|---|\n";
    let idle = r.stages[0].1;
    for (stage, [(ours, ours_sockets), (go, go_sockets)]) in &r.stages {
        md += &format!(
            "| {stage} | {:.1} MiB, {ours_sockets} sockets | {:.2}x | {:.1} MiB, {go_sockets} sockets | {:.2}x |\n",
            *ours as f64 / 1024.0,
            *ours as f64 / idle[0].0.max(1) as f64,
            *go as f64 / 1024.0,
            *go as f64 / idle[1].0.max(1) as f64,
        );
    }
    md += &format!(
        "\nThe baseline watches labelled Services only, so the workload rows cost it nothing; this project also finds \
         registries by labelled Deployments, StatefulSets and DaemonSets, and watches the Services of their \
         namespaces.\n\nWinner change among 1,000 trusted registries (one gets a priority annotation): published \
         after {:.0} ms; all {} losers told with an Event naming the new winner after {:.1} s.\n\n\
         ![reaction time distribution](bench-reaction.svg)\n\n![memory against registries](bench-memory.svg)\n",
        ms(r.publish_after),
        r.losers,
        r.told_after.as_secs_f64()
    );
    println!("{md}");
    report::write_section("publish", &md);

    let cdf = |label: &str, samples: &[f64]| {
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len().max(1) as f64;
        plot::Series {
            label: label.into(),
            points: sorted.iter().enumerate().map(|(i, v)| (*v, (i + 1) as f64 / n * 100.0)).collect(),
        }
    };
    let outside = [millis(&r.ours.outside), millis(&r.go.outside)];
    let p99 = outside.iter().map(|s| quantile(s, 0.99)).fold(0.0, f64::max);
    plot::line_chart(
        &plot::Chart {
            path: "docs/bench-reaction.svg",
            title: "Controller reaction, cumulative (x axis to the larger p99)",
            x_label: "milliseconds",
            y_label: "% of changes",
            x_max: Some(p99),
            y_max: Some(100.0),
            legend_low: true,
        },
        &[
            cdf("this project (ConfigMap event minus Service event)", &outside[0]),
            cdf("Go controller-runtime baseline (the same)", &outside[1]),
            cdf("this project, measured inside (event to write)", &inside_ms),
        ],
    );
    let mib = |i: usize| r.by_registries.iter().map(|(n, f)| (*n as f64, f[i].0 as f64 / 1024.0)).collect::<Vec<_>>();
    plot::line_chart(
        &plot::Chart {
            path: "docs/bench-memory.svg",
            title: "Resident memory against labelled registries",
            x_label: "labelled registries",
            y_label: "MiB",
            x_max: None,
            y_max: None,
            legend_low: false,
        },
        &[
            plot::Series { label: "this project".into(), points: mib(0) },
            plot::Series { label: "Go controller-runtime baseline".into(), points: mib(1) },
        ],
    );
}
