//! The controller's probes and /metrics port under load: while clients hold connections open and flood it with TLS
//! handshakes, does the leader still renew its Lease on time and publish a change as fast as when quiet? The
//! release build runs with leader election and `--tls-cert-file`; each phase (quiet, then loaded) records the gaps
//! between the Lease's renewals and how long registry changes take to reach the ConfigMap, and is given as a ratio
//! to the quiet phase of the same run. Written to docs/benchmarks.md by `make bench`.

#[path = "support/report.rs"]
mod report;

#[allow(dead_code)] // the bench uses part of the test helper
#[path = "../tests/support/binary.rs"]
mod binary;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use binary::Controller;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use testbed::{ControlPlane, wait_until};

const PHASE: Duration = Duration::from_secs(30);
const CHANGES_EVERY: Duration = Duration::from_secs(2);
/// Connections clients hold open (from four addresses, each its share of the server's) and handshakes in flight at
/// once (from eight more), beside the kubelet-like prober on 127.0.0.1.
const HOLDERS: u8 = 4;
const FLOODERS: u8 = 8;
const FLOODS_EACH: usize = 4;

/// The name the serving certificate is for, which the clients check.
const SERVER_NAME: &str = "localhost";

/// What one phase saw.
struct Phase {
    renewals: Vec<f64>,
    publish: Vec<f64>,
}

#[tokio::main]
async fn main() {
    let plane = ControlPlane::shared();
    let client = plane.client().await.expect("client");
    let ns = plane.namespace(&client, "httpload").await.expect("namespace");
    let (cert, key) = (plane.dir().join("httpload.crt"), plane.dir().join("httpload.key"));
    // A serving certificate a CA of the run's own signed, as cert-manager's or the chart's own would be.
    let tls = testbed::private_tls(&[SERVER_NAME]).expect("certificates");
    std::fs::write(&cert, &tls.certificate).expect("certificate");
    std::fs::write(&key, &tls.key).expect("key");
    let ca = tls.ca.clone();
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    set_port(&services, 5000).await;
    let controller = Controller::start_binary(
        &report::controller_binary(),
        &[
            format!("--kubeconfig={}", plane.kubeconfig().display()),
            format!("--watch-namespaces={ns}"),
            format!("--configmap-namespace={ns}"),
            format!("--leader-elect-resource-namespace={ns}"),
            "--leader-elect".into(),
            format!("--tls-cert-file={}", cert.display()),
            format!("--tls-private-key-file={}", key.display()),
            "--log-level=warn".into(),
        ],
    );
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    assert!(published(&configmaps, 5000, Duration::from_secs(60)).await.is_some(), "{}", controller.logs());
    let load_before = report::load_average();

    let probes = prober(controller.port, stop_probing(), &ca);
    let quiet = phase(&client, &ns, &services, &configmaps, 5001).await;
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
    let load = load_on(controller.port, stop.clone(), counts.clone(), &ca);
    let loaded = phase(&client, &ns, &services, &configmaps, 6001).await;
    stop.store(true, Ordering::Relaxed);
    for task in load {
        let _ = task.await;
    }
    let [handshakes, refused, held, _] = [0, 1, 2, 3].map(|i| counts[i].load(Ordering::Relaxed));
    let (mut probed, probe_failures) = probes.finish().await;
    let load_after = report::load_average();

    let row = |what: &str, quiet: &mut Vec<f64>, loaded: &mut Vec<f64>, unit: &str| {
        let (q, l) = (median(quiet), median(loaded));
        let (qm, lm) = (max(quiet), max(loaded));
        format!(
            "| {what}, median | {q:.3} {unit} | {l:.3} {unit} | {:.2}x |\n| {what}, longest | {qm:.3} {unit} | {lm:.3} {unit} | {:.2}x |\n",
            l / q,
            lm / qm
        )
    };
    let (mut quiet, mut loaded) = (quiet, loaded);
    let markdown = format!(
        "## The probes' and /metrics' port under load (`benches/http_load.rs`)\n\n\
         Machine: {}. Load average (1, 5, 15 min): {load_before} before, {load_after} after. The release build with \
         leader election (15 s lease, renewed every 3 s) and `--tls-cert-file`, {} s quiet, then {} s while clients \
         on the same machine, each from a loopback address of its own, hold as many connections open as the server \
         lets one address (reopened as the server closes them; {HOLDERS} addresses) or make TLS handshakes one after \
         another ({FLOODERS} addresses, {FLOODS_EACH} at a time each). Each phase changes the registry's port every \
         {} s and times each change to the ConfigMap; a reader polls the Lease every 100 ms; throughout both, a \
         prober on 127.0.0.1 asks `/healthz` over HTTPS every 200 ms, as the kubelet does from the node's address.\n\n\
         | figure | quiet | loaded | ratio |\n|---|---|---|---|\n{}{}\n\
         During the load: {handshakes} handshakes completed ({:.0} a second), {refused} connections refused at once, \
         {held} held connections opened. The prober's `/healthz` over both phases: {} answered, median {:.1} ms, \
         longest {:.1} ms, {probe_failures} not answered. The port runs on a thread of its own, with a {} s header \
         timeout, at most {} connections and {} from one address.\n",
        report::machine(),
        PHASE.as_secs(),
        PHASE.as_secs(),
        CHANGES_EVERY.as_secs(),
        row("seconds between Lease renewals", &mut quiet.renewals, &mut loaded.renewals, "s"),
        row("a change's time to the ConfigMap", &mut quiet.publish, &mut loaded.publish, "s"),
        handshakes as f64 / PHASE.as_secs_f64(),
        probed.len(),
        median(&mut probed) * 1000.0,
        max(&probed) * 1000.0,
        local_registry_publisher::http::HEADER_TIMEOUT.as_secs(),
        local_registry_publisher::http::MAX_CONNECTIONS,
        local_registry_publisher::http::MAX_PER_PEER,
    );
    println!("{markdown}");
    report::write_section("http-load", &markdown);
    drop(controller);
}

async fn set_port(services: &Api<Service>, port: i32) {
    let service: Service = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "zot", "labels": {"local-registry-publisher.io/registry": "true"}},
        "spec": {"ports": [{"port": port}]}
    }))
    .expect("service");
    services.patch("zot", &PatchParams::apply("bench").force(), &Patch::Apply(&service)).await.expect("registry");
}

async fn published(configmaps: &Api<ConfigMap>, port: i32, within: Duration) -> Option<()> {
    let wanted = format!(":{port}\"");
    wait_until(within, || async {
        let text = configmaps.get_opt("local-registry-hosting").await.ok()??.data?.remove("localRegistryHosting.v1")?;
        text.contains(&wanted).then_some(())
    })
    .await
}

/// One phase: the Lease's renewals as a reader polling it sees them, and changes' times to the ConfigMap.
async fn phase(client: &Client, ns: &str, services: &Api<Service>, configmaps: &Api<ConfigMap>, first: i32) -> Phase {
    let leases: Api<Lease> = Api::namespaced(client.clone(), ns);
    let started = Instant::now();
    let watcher = tokio::spawn(async move {
        let (mut seen, mut at, mut gaps) = (None, None::<Instant>, Vec::new());
        while started.elapsed() < PHASE {
            let renewed = leases.get_opt("local-registry-publisher").await.ok().flatten();
            let renewed = renewed.and_then(|l| l.spec?.renew_time).map(|t| t.0);
            if renewed.is_some() && renewed != seen {
                if let Some(at) = at {
                    gaps.push(at.elapsed().as_secs_f64());
                }
                (seen, at) = (renewed, Some(Instant::now()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        gaps
    });
    let mut publish = Vec::new();
    let mut port = first;
    while started.elapsed() + CHANGES_EVERY < PHASE {
        let sent = Instant::now();
        set_port(services, port).await;
        if published(configmaps, port, CHANGES_EVERY * 5).await.is_some() {
            publish.push(sent.elapsed().as_secs_f64());
        }
        port += 1;
        tokio::time::sleep(CHANGES_EVERY.saturating_sub(sent.elapsed())).await;
    }
    Phase { renewals: watcher.await.expect("the Lease reader"), publish }
}

/// The load on `port`: [`HOLDERS`] addresses each holding its share of connections open, reopened as closed, and
/// [`FLOODERS`] addresses making TLS handshakes one after another; counts handshakes, refusals and opened connections.
fn load_on(
    port: u16,
    stop: Arc<AtomicBool>,
    counts: Arc<[AtomicU64; 4]>,
    ca: &str,
) -> Vec<tokio::task::JoinHandle<()>> {
    let connector = connector(ca);
    let name = rustls::pki_types::ServerName::try_from(SERVER_NAME).expect("a name");
    let mut tasks = Vec::new();
    let held = (0..HOLDERS).flat_map(|a| std::iter::repeat_n(a + 2, local_registry_publisher::http::MAX_PER_PEER));
    for source in held {
        let (stop, counts) = (stop.clone(), counts.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if let Ok(mut stream) = connect_from(source, port).await {
                    counts[2].fetch_add(1, Ordering::Relaxed);
                    let mut byte = [0u8; 1];
                    // Held until the server closes it (its header timeout) or the load stops.
                    let _ = tokio::time::timeout(
                        Duration::from_secs(30),
                        tokio::io::AsyncReadExt::read(&mut stream, &mut byte),
                    )
                    .await;
                }
            }
        }));
    }
    let flooders = (0..FLOODERS).flat_map(|a| std::iter::repeat_n(a + 2 + HOLDERS, FLOODS_EACH));
    for source in flooders {
        let (stop, counts, connector, name) = (stop.clone(), counts.clone(), connector.clone(), name.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let Ok(stream) = connect_from(source, port).await else { continue };
                match tokio::time::timeout(Duration::from_secs(10), connector.connect(name.clone(), stream)).await {
                    Ok(Ok(_)) => counts[0].fetch_add(1, Ordering::Relaxed),
                    _ => counts[1].fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    tasks
}

/// A connection to the controller's port from loopback address 127.0.0.`source`.
async fn connect_from(source: u8, port: u16) -> std::io::Result<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(std::net::SocketAddr::from(([127, 0, 0, source], 0)))?;
    socket.connect(std::net::SocketAddr::from(([127, 0, 0, 1], port))).await
}

/// The kubelet-like prober: `/healthz` over HTTPS from 127.0.0.1 every 200 ms until told to stop; the seconds each
/// answer took and how many got none.
struct Prober {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<(Vec<f64>, u64)>,
}

fn stop_probing() -> Arc<AtomicBool> {
    Arc::new(AtomicBool::new(false))
}

fn prober(port: u16, stop: Arc<AtomicBool>, ca: &str) -> Prober {
    let connector = connector(ca);
    let name = rustls::pki_types::ServerName::try_from(SERVER_NAME).expect("a name");
    let flag = stop.clone();
    let task = tokio::spawn(async move {
        let (mut took, mut failed) = (Vec::new(), 0);
        while !flag.load(Ordering::Relaxed) {
            let started = Instant::now();
            let asked = async {
                let stream = connect_from(1, port).await.ok()?;
                let mut tls = connector.connect(name.clone(), stream).await.ok()?;
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.ok()?;
                let mut answer = Vec::new();
                tls.read_to_end(&mut answer).await.ok()?;
                answer.starts_with(b"HTTP/1.1 200").then_some(())
            };
            match tokio::time::timeout(Duration::from_secs(1), asked).await {
                Ok(Some(())) => took.push(started.elapsed().as_secs_f64()),
                _ => failed += 1,
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        (took, failed)
    });
    Prober { stop, task }
}

impl Prober {
    async fn finish(self) -> (Vec<f64>, u64) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("the prober")
    }
}

/// A TLS client that trusts `ca` (PEM).
fn connector(ca: &str) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls::pki_types::CertificateDer::from(pem_der(ca.as_bytes()))).expect("the run's CA");
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("protocols")
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// The DER of the first certificate in `pem`.
fn pem_der(pem: &[u8]) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem).next().expect("a certificate").expect("PEM").to_vec()
}

fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples.get(samples.len() / 2).copied().unwrap_or(f64::NAN)
}

fn max(samples: &[f64]) -> f64 {
    samples.iter().copied().fold(f64::NAN, f64::max)
}
