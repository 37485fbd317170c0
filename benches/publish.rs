//! Measures the real controller binary and a Go controller-runtime baseline (benches/baseline, built by
//! hack/baseline.sh) on the same local control plane, prints the numbers and writes them to docs/benchmarks.md with
//! two charts (never asserts on them):
//! - reaction: for each of many nodePort changes, the Service's watch event, the ConfigMap's watch event, and (ours
//!   only) the controller's own log of the time from receiving the event to sending its write; against the baseline
//!   as it comes (protobuf) and the same baseline reading JSON, the only encoding kube-rs has;
//! - end to end, from the PATCH to the ConfigMap event, against the physical floor measured in the same run: the API
//!   server's own watch round trip for the Service change plus one server-side apply round trip of a ConfigMap;
//! - a burst of changes, and how many writes it took; the first publish after exec;
//! - resident memory and open sockets at idle, with 10,000 unrelated Services in 1,000 namespaces, with up to 1,000
//!   labelled registries (one tenant namespace), after they go, and with a labelled Deployment in a crowded namespace;
//! - when the winner changes among 1,000 registries: the time to publish it, and how many Events that costs.
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

/// A p99 over 300 changes is their third slowest, which one slow moment of a shared machine moves by tens of
/// percent; over 1,000 it is the tenth.
const CHANGES: usize = 1000;

/// How many single changes the latency run makes: LRP_BENCH_CHANGES, else [`CHANGES`] (more samples make a p99
/// that one slow change moves less).
fn changes() -> usize {
    std::env::var("LRP_BENCH_CHANGES").ok().and_then(|n| n.parse().ok()).unwrap_or(CHANGES)
}
const BURST: usize = 10;
/// Starts measured for the first publish: its time is bimodal on these machines (about 35 or 80 ms, by whether the
/// API server answers a first request at once), so a median of a few moves by the mode it happens to land in.
const STARTS: usize = 15;
/// Winner changes among the thousand registries, for a median.
const WINNER_CHANGES: usize = 5;
const UNRELATED_NAMESPACES: usize = 1000;
const SERVICES_PER_NAMESPACE: usize = 10;
const REGISTRY_STEPS: [usize; 4] = [0, 250, 500, 1000];
/// Services a tenant annotates fatly, and how fat: the most an annotation may hold.
const FAT_SERVICES: usize = 500;
const FAT_ANNOTATION: usize = 256 * 1024 - 1024;
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
            // The spelling every build accepts (it is an alias now), so an older build can be measured (LRP_CONTROLLER).
            format!("--registry-namespaces={configmap_namespace}"),
            "--log-format=json".into(),
            "--log-level=info".into(),
        ];
        args.extend_from_slice(extra);
        Contender::Ours(Controller::start_binary(&report::controller_binary(), &args))
    }

    /// `extra`: further flags, such as `--watch-namespace=<ns>`.
    fn baseline(plane: &ControlPlane, configmap_namespace: &str, extra: &[String]) -> Self {
        let binary = std::env::var("LRP_BASELINE").expect("LRP_BASELINE: run the benchmarks with `make bench`");
        let log = format!("lrp-baseline-{configmap_namespace}.log");
        let child = Command::new(binary)
            .arg(format!("--kubeconfig={}", plane.kubeconfig().display()))
            .arg(format!("--configmap-namespace={configmap_namespace}"))
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(std::env::temp_dir().join(log)).expect("log file"))
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

/// One contender's registry Service and what the benchmark watches of it and of its ConfigMap.
struct Lane {
    services: Api<Service>,
    port: i32,
    seen: std::pin::Pin<Box<dyn Stream<Item = (Instant, String)> + Send>>,
    node_ports: std::pin::Pin<Box<dyn Stream<Item = (Instant, i32)> + Send>>,
}

impl Lane {
    async fn new(client: &Client, ns: &str, configmap: &str, port: i32) -> Self {
        let services: Api<Service> = Api::namespaced(client.clone(), ns);
        let service_config = watcher::Config::default().fields("metadata.name=registry");
        let node_ports = Box::pin(watcher(services.clone(), service_config).applied_objects().filter_map(|s| async {
            let port = s.ok()?.spec?.ports?.first()?.node_port?;
            Some((Instant::now(), port))
        }));
        Self { services, port, seen: Box::pin(hosts(client, ns, configmap)), node_ports }
    }

    /// One change: (PATCH to Service event, PATCH to ConfigMap event). Both watches are read while the PATCH is in
    /// flight, so an event that comes before the PATCH's answer is dated when it comes, not when the answer does.
    async fn change(&mut self) -> (Duration, Duration) {
        let Self { services, port: current, seen, node_ports } = self;
        loop {
            let port = *current + 1;
            *current = port;
            let host = format!("localhost:{port}");
            let started = Instant::now();
            let applied = async { apply_port(services, port).await.then_some(()).ok_or(()) };
            let shown = async { Ok(tokio::join!(wait_for_port(node_ports, port), wait_for(seen, &host))) };
            // A port refused changes nothing, so nothing is waited for: the change is made again with the next.
            if let Ok(((), (service_at, configmap_at))) = futures::future::try_join(applied, shown).await {
                return (service_at - started, configmap_at - started);
            }
        }
    }

    /// A burst: changes sent back to back, each waiting only for the API server's answer; returns how many
    /// ConfigMap writes it took.
    async fn burst(&mut self) -> usize {
        let mut applied = 0;
        while applied < BURST {
            self.port += 1;
            applied += usize::from(apply_port(&self.services, self.port).await);
        }
        let last = format!("host: \"localhost:{}\"", self.port);
        let counted = tokio::time::timeout(Duration::from_secs(30), async {
            let mut writes = 0;
            while let Some((_, text)) = self.seen.next().await {
                writes += 1;
                if text.contains(&last) {
                    return writes;
                }
            }
            writes
        })
        .await;
        counted.expect("the burst's last change was published")
    }
}

/// Server-side applies the registry Service with `port` as its nodePort; false when the API server refuses the port
/// as already allocated, which it did now and then to a port no lane had used yet (twice in six latency runs on
/// 1.36, in the last lane's burst; cause not found), so callers move to the next.
async fn apply_port(services: &Api<Service>, port: i32) -> bool {
    let params = PatchParams::apply("bench").force();
    let service = registry("registry", Some(port), false);
    match services.patch("registry", &params, &Patch::Apply(service)).await {
        Ok(_) => true,
        Err(kube::Error::Api(status)) if status.code == 422 && status.message.contains("already allocated") => {
            eprintln!("nodePort {port} refused as already allocated; the next one instead");
            false
        }
        Err(error) => panic!("patch: {error:?}"),
    }
}

/// exec to the first publish, `STARTS` times: `first_port` is the contender's own nodePort range (a deleted
/// Service's ports are not free again at once).
async fn first_publishes(client: &Client, ns: &str, start: &impl Fn() -> Contender, first_port: i32) -> Vec<Duration> {
    let configmap = "local-registry-hosting";
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    let params = PatchParams::apply("bench").force();
    let service = registry("registry", Some(first_port), false);
    services.patch("registry", &params, &Patch::Apply(service)).await.expect("registry");
    let mut times = Vec::new();
    for _ in 0..STARTS {
        let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        let _ = configmaps.delete(configmap, &DeleteParams::default()).await;
        let mut seen = hosts(client, ns, configmap);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let started = Instant::now();
        let contender = start();
        let at = wait_for(&mut seen, &format!("localhost:{first_port}")).await;
        times.push(at - started);
        contender.stop();
    }
    times
}

/// The latency of each contender: this project, the Go baseline, and the Go baseline reading JSON.
struct Latencies {
    ours: Latency,
    go: Latency,
    go_json: Latency,
}

/// The contenders run at once, each on its own namespace, and their changes take turns (which goes first rotates
/// every round), so the API server's slow moments fall on all alike. One change is in flight at a time. The third
/// is the baseline reading JSON, as kube-rs must: beside the baseline's default protobuf, it tells what the
/// encoding costs from what the controllers themselves do.
async fn measure_latency(
    client: &Client,
    namespaces: [&str; 3],
    (start_ours, start_go, start_go_json): (impl Fn() -> Contender, impl Fn() -> Contender, impl Fn() -> Contender),
) -> Latencies {
    let mut latencies = [Latency::default(), Latency::default(), Latency::default()];
    // Each lane's own nodePort range: a deleted Service's ports are not free again at once.
    let first_ports = [30100, 30400, 30700];
    latencies[0].first_publish = first_publishes(client, namespaces[0], &start_ours, first_ports[0]).await;
    latencies[1].first_publish = first_publishes(client, namespaces[1], &start_go, first_ports[1]).await;
    // Its first publish is the baseline's own; only its reaction is wanted.
    assert!(apply_port(&Api::namespaced(client.clone(), namespaces[2]), first_ports[2]).await, "its first port");
    let configmap = "local-registry-hosting";
    let mut lanes = Vec::new();
    for (namespace, port) in namespaces.iter().zip(first_ports) {
        lanes.push(Lane::new(client, namespace, configmap, port).await);
    }
    let contenders = [start_ours(), start_go(), start_go_json()];
    for lane in &mut lanes {
        let host = format!("localhost:{}", lane.port);
        wait_for(&mut lane.seen, &host).await;
    }
    for round in 0..changes() {
        for turn in 0..lanes.len() {
            let which = (round + turn) % lanes.len();
            let (service_event, end_to_end) = lanes[which].change().await;
            let latency = &mut latencies[which];
            latency.service_event.push(service_event);
            latency.end_to_end.push(end_to_end);
            latency.outside.push(end_to_end.saturating_sub(service_event));
            // Changes a user makes are seconds apart; this keeps each one its own change.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    for (lane, latency) in lanes.iter_mut().zip(&mut latencies) {
        latency.burst_writes = lane.burst().await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let [mut ours, go, go_json] = latencies;
    // The single changes only: not the first publish (it waits for the initial lists) nor the burst's writes
    // (deliberately held for the absorb window).
    ours.inside_us = contenders[0].logged_reactions().into_iter().skip(1).take(changes()).collect();
    if let (Some(path), Contender::Ours(c)) = (std::env::var_os("LRP_BENCH_SAMPLES"), &contenders[0]) {
        // Our own log beside the samples: each write's reaction, for lining up with them.
        let _ = std::fs::copy(&c.log, format!("{}.log", path.to_string_lossy()));
    }
    for contender in contenders {
        contender.stop();
    }
    Latencies { ours, go, go_json }
}

#[tokio::main]
async fn main() {
    let plane = ControlPlane::shared();
    let client = plane.client().await.expect("client");
    let load_before = report::load_average();

    // Latency: the contenders at once, each watching only its own namespace, their changes taking turns.
    let ours_ns = plane.namespace(&client, "bench-ours").await.expect("namespace");
    let go_ns = plane.namespace(&client, "bench-go").await.expect("namespace");
    let go_json_ns = plane.namespace(&client, "bench-go-json").await.expect("namespace");
    let Latencies { ours, go, go_json } = measure_latency(
        &client,
        [&ours_ns, &go_ns, &go_json_ns],
        (
            || Contender::ours(plane, &ours_ns, &[format!("--watch-namespaces={ours_ns}")]),
            || Contender::baseline(plane, &go_ns, &[format!("--watch-namespace={go_ns}")]),
            || Contender::baseline(plane, &go_json_ns, &[format!("--watch-namespace={go_json_ns}"), "--json".into()]),
        ),
    )
    .await;
    // One server-side apply round trip of a ConfigMap like ours, alternating so each apply really writes.
    let floor_apply = apply_round_trips(&client, &ours_ns).await;
    if let Some(path) = std::env::var_os("LRP_BENCH_SAMPLES") {
        // Every change's figures, for looking into a tail: contender, PATCH to Service event, and to ConfigMap event.
        let mut csv = String::from("contender,service_event_ms,outside_ms,end_to_end_ms\n");
        for (name, l) in [("ours", &ours), ("go", &go), ("go-json", &go_json)] {
            for i in 0..l.outside.len() {
                let (s, o, e) = (ms(l.service_event[i]), ms(l.outside[i]), ms(l.end_to_end[i]));
                csv += &format!("{name},{s:.3},{o:.3},{e:.3}\n");
            }
        }
        std::fs::write(path, csv).expect("write the samples");
    }
    if std::env::var_os("LRP_BENCH_LATENCY_ONLY").is_some() {
        // A quick comparison of builds: printed only, docs/benchmarks.md is left alone.
        let median = |samples: &[Duration]| quantile(&millis(samples), 0.5);
        for (name, l) in [("this project", &ours), ("Go baseline", &go), ("Go baseline reading JSON", &go_json)] {
            println!(
                "{name}: end to end {:.2} ms, reaction outside {:.2} ms (p99 {:.2}), Service event {:.2} ms, inside \
                 {:.3} ms (p99 {:.3}), apply {:.2} ms, first publish {:.1} ms",
                median(&l.end_to_end),
                median(&l.outside),
                quantile(&millis(&l.outside), 0.99),
                median(&l.service_event),
                quantile(&l.inside_us, 0.5) / 1000.0,
                quantile(&l.inside_us, 0.99) / 1000.0,
                median(&floor_apply),
                median(&l.first_publish),
            );
            println!("{name}: ConfigMap writes for a burst of {BURST} changes: {}", l.burst_writes);
        }
        // Idle, over the whole cluster, as the memory table's first row.
        let contenders = [Contender::ours(plane, &ours_ns, &[]), Contender::baseline(plane, &go_ns, &[])];
        tokio::time::sleep(Duration::from_secs(10)).await;
        for (name, contender) in [("this project", &contenders[0]), ("Go baseline", &contenders[1])] {
            let (kib, sockets) = contender.footprint();
            println!("{name}: idle {kib} KiB resident, {sockets} sockets");
        }
        for contender in contenders {
            contender.stop();
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
    let contenders = [Contender::ours(plane, &ours_ns, &[]), Contender::baseline(plane, &go_ns, &[])];
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

    // The winner changes among 1,000 trusted registries: publish time, and how many Events it costs.
    let (publish_after, events_after_change) = change_winner(&client, &ours_ns, &tenant).await;

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
    stages.push((
        "a labelled Deployment there (a namespace not allowed: none of its Services watched)".into(),
        measure(&contenders),
    ));
    deployments.patch("registry", &params, &deployment(false)).await.expect("deployment");
    settle().await;
    stages.push(("its label removed".into(), measure(&contenders)));

    // A tenant with `edit` in a namespace that is not allowed: Services carrying 256 KiB annotations of ours, and a
    // labelled Deployment that once made every Service of the namespace watched, annotations and all.
    let fat = plane.namespace(&client, "fat").await.expect("namespace");
    let fat_services: Api<Service> = Api::namespaced(client.clone(), &fat);
    futures::stream::iter(0..FAT_SERVICES)
        .for_each_concurrent(8, |i| {
            let api = fat_services.clone();
            async move {
                let service: Service = serde_json::from_value(json!({
                    "metadata": {"name": format!("fat-{i:03}"), "annotations": {
                        "local-registry-publisher.io/host-from-cluster-network": "x".repeat(FAT_ANNOTATION)}},
                    "spec": {"selector": {"app": "registry"}, "ports": [{"port": 5000}]}}))
                .expect("a Service");
                api.create(&PostParams::default(), &service).await.expect("a fat Service");
            }
        })
        .await;
    let fat_deployments: Api<Deployment> = Api::namespaced(client.clone(), &fat);
    fat_deployments.patch("registry", &params, &deployment(true)).await.expect("deployment");
    settle().await;
    stages.push((
        format!("{FAT_SERVICES} Services with 256 KiB annotations of ours and a labelled Deployment, in a namespace not allowed"),
        measure(&contenders),
    ));
    // The allowed registry is still published as it was.
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), &ours_ns);
    let published = configmaps.get("local-registry-hosting").await.expect("still published");
    let text = published.data.unwrap_or_default().remove("localRegistryHosting.v1").unwrap_or_default();
    assert!(text.contains(":30700"), "the allowed registry is no longer published: {text}");
    for contender in contenders {
        contender.stop();
    }
    let load_after = report::load_average();

    write_report(Report {
        load_before,
        load_after,
        ours,
        go,
        go_json,
        floor_apply,
        stages,
        by_registries,
        publish_after,
        events_after_change,
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

/// Makes the tenant's registries allowed, then gives one of them priority; returns how long until it was
/// published, and how many Events the controller posted in the tenant's namespace in the 10 s after the change.
async fn change_winner(client: &Client, configmap_ns: &str, tenant: &str) -> (Duration, usize) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let allow = json!({"metadata": {"labels": {"local-registry-publisher.io/registries": "allowed"}}});
    namespaces.patch(tenant, &PatchParams::default(), &Patch::Merge(allow)).await.expect("allow the tenant");
    // Let the loser Events for the current winner be told first.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let services: Api<Service> = Api::namespaced(client.clone(), tenant);
    let (mut published, mut posted) = (Vec::new(), Vec::new());
    for round in 0..WINNER_CHANGES {
        // Selector-less, so ready without pods; each round's priority beats the last.
        let winner = format!("registry-{:04}", 100 * (round + 1));
        // Its published address: hostFromClusterNetwork, the Service's ClusterIP.
        let cluster_ip = services.get(&winner).await.expect("winner").spec.and_then(|s| s.cluster_ip).expect("IP");
        let mut seen = hosts(client, configmap_ns, "local-registry-hosting");
        let (started, since) = (Instant::now(), k8s_openapi::jiff::Timestamp::now());
        let priority =
            json!({"metadata": {"annotations": {"local-registry-publisher.io/priority": format!("{}", 10 + round)}}});
        services.patch(&winner, &PatchParams::default(), &Patch::Merge(priority)).await.expect("priority");
        wait_for(&mut seen, &format!("{cluster_ip}:5000")).await;
        published.push(started.elapsed());
        tokio::time::sleep(Duration::from_secs(5)).await;
        // The old winner may be the controller's own registry beside its ConfigMap, the new one is the tenant's.
        let mut events = 0;
        for namespace in [tenant, configmap_ns] {
            let api: Api<Event> = Api::namespaced(client.clone(), namespace);
            let list = api.list(&ListParams::default()).await.expect("events");
            events += list.items.iter().filter(|e| e.event_time.as_ref().is_some_and(|t| t.0 >= since)).count();
        }
        posted.push(events);
    }
    published.sort();
    posted.sort_unstable();
    (published[published.len() / 2], posted[posted.len() / 2])
}

async fn apply_round_trips(client: &Client, ns: &str) -> Vec<Duration> {
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let params = PatchParams::apply("bench").force();
    let mut applies = Vec::new();
    for i in 0..changes() {
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
    /// The baseline reading JSON.
    go_json: Latency,
    floor_apply: Vec<Duration>,
    stages: Vec<(String, [(u64, usize); 2])>,
    by_registries: Vec<(usize, [(u64, usize); 2])>,
    publish_after: Duration,
    events_after_change: usize,
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
         Service cache and a server-side apply of the same document. It reads the API server's answers and watch \
         events as protobuf, controller-runtime's default for built-in types; kube-rs has only JSON, so a second \
         baseline, the same controller reading JSON, ran beside it. For the latency figures the three ran at once, \
         each watching only its own namespace, and made {} nodePort changes each, one at a time and 50 ms apart, \
         taking turns (which goes first rotates every round) so the API server's slow moments fall on all alike; \
         each change is timed from the start of the PATCH to the watch events the benchmark sees.\n\n\
         | figure | this project | Go baseline | ratio |\n|---|---|---|---|\n",
        report::machine(),
        r.load_before,
        r.load_after,
        changes(),
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
    md += &row(
        "the same, median, against the baseline reading JSON (as kube-rs must)",
        median(&r.ours.outside),
        median(&r.go_json.outside),
        "ms",
    );
    md += &row("the same, p99, against the baseline reading JSON", p99(&r.ours.outside), p99(&r.go_json.outside), "ms");
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
    md += &row(
        &format!("first publish after exec, median of {STARTS}"),
        median(&r.ours.first_publish),
        median(&r.go.first_publish),
        "ms",
    );
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
         namespaces where those are allowed (the rows above are in namespaces that are not).\n\nWinner change among 1,000 allowed registries (one gets a priority annotation, {} times): \
         published after {:.0} ms, median; {} Events posted in the 5 s after, median (losers are told in words of \
         their own state, so only the new winner and the old one have anything new to say).\n\n\
         ![reaction time distribution](bench-reaction.svg)\n\n![memory against registries](bench-memory.svg)\n",
        WINNER_CHANGES,
        ms(r.publish_after),
        r.events_after_change,
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
    let outside = [millis(&r.ours.outside), millis(&r.go.outside), millis(&r.go_json.outside)];
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
            cdf("the baseline reading JSON (the same)", &outside[2]),
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
