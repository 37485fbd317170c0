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
/// Connections a client holds open (the server's cap) and handshakes in flight at once.
const HELD: usize = 64;
const FLOODERS: usize = 32;

const CERT: &[u8] = include_bytes!("../src/http/tls/fixtures/a.crt");
const KEY: &[u8] = include_bytes!("../src/http/tls/fixtures/a.key");

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
    std::fs::write(&cert, CERT).expect("certificate");
    std::fs::write(&key, KEY).expect("key");
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

    let quiet = phase(&client, &ns, &services, &configmaps, 5001).await;
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
    let load = load_on(controller.port, stop.clone(), counts.clone());
    let loaded = phase(&client, &ns, &services, &configmaps, 6001).await;
    stop.store(true, Ordering::Relaxed);
    for task in load {
        let _ = task.await;
    }
    let [handshakes, refused, held] = [0, 1, 2].map(|i| counts[i].load(Ordering::Relaxed));
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
         on the same machine hold {HELD} connections open (reopened as the server closes them) and {FLOODERS} more \
         make TLS handshakes one after another. Each phase changes the registry's port every {} s and times each \
         change to the ConfigMap; a reader polls the Lease every 100 ms.\n\n\
         | figure | quiet | loaded | ratio |\n|---|---|---|---|\n{}{}\n\
         During the load: {handshakes} handshakes completed ({:.0} a second), {refused} connections refused at once \
         (the cap of {} connections), {held} held connections opened. The port runs on a thread of its own, with a \
         5 s header timeout and a 64-connection cap.\n",
        report::machine(),
        PHASE.as_secs(),
        PHASE.as_secs(),
        CHANGES_EVERY.as_secs(),
        row("seconds between Lease renewals", &mut quiet.renewals, &mut loaded.renewals, "s"),
        row("a change's time to the ConfigMap", &mut quiet.publish, &mut loaded.publish, "s"),
        handshakes as f64 / PHASE.as_secs_f64(),
        binary_cap(),
    );
    println!("{markdown}");
    report::write_section("http-load", &markdown);
    drop(controller);
}

fn binary_cap() -> usize {
    local_registry_publisher::http::MAX_CONNECTIONS
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

/// The load on `port`: [`HELD`] connections held open, reopened as closed, and [`FLOODERS`] clients making TLS
/// handshakes one after another; counts handshakes, refusals and opened connections.
fn load_on(port: u16, stop: Arc<AtomicBool>, counts: Arc<[AtomicU64; 3]>) -> Vec<tokio::task::JoinHandle<()>> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls::pki_types::CertificateDer::from(pem_der(CERT))).expect("the fixture's CA");
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("protocols")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let name = rustls::pki_types::ServerName::try_from("fixture-a.test").expect("a name");
    let mut tasks = Vec::new();
    for _ in 0..HELD {
        let (stop, counts) = (stop.clone(), counts.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
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
    for _ in 0..FLOODERS {
        let (stop, counts, connector, name) = (stop.clone(), counts.clone(), connector.clone(), name.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let Ok(stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else { continue };
                match tokio::time::timeout(Duration::from_secs(10), connector.connect(name.clone(), stream)).await {
                    Ok(Ok(_)) => counts[0].fetch_add(1, Ordering::Relaxed),
                    _ => counts[1].fetch_add(1, Ordering::Relaxed),
                };
            }
        }));
    }
    tasks
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
