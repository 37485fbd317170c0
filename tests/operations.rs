//! Operating the real binary against the real control plane: leader election with two replicas, health and
//! metrics endpoints, JSON logs, and invalid configuration.

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::binary::{BINARY, Controller, open_sockets};
use support::*;

fn args(scenario: &Scenario, extra: &[&str]) -> Vec<String> {
    let plane = testbed::ControlPlane::shared();
    let mut args = vec![
        format!("--kubeconfig={}", plane.kubeconfig().display()),
        format!("--watch-namespaces={}", scenario.ns),
        format!("--configmap-namespace={}", scenario.ns),
        "--no-builtin-registries".to_string(),
        "--grace-period=2s".to_string(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

fn replica(scenario: &Scenario) -> Controller {
    Controller::start(&args(
        scenario,
        &[
            "--leader-elect",
            &format!("--leader-elect-resource-namespace={}", scenario.ns),
            "--leader-elect-lease-duration=6s",
        ],
    ))
}

const LEADER: &str = "leader_election_master_status{name=\"local-registry-publisher\"}";
const WATCHES: &str = "local_registry_publisher_watches{controller=\"publisher\"}";
const APPLIES: &str = "local_registry_publisher_configmap_writes_total{operation=\"apply\"}";

fn registry_on_port(port: u16) -> serde_json::Value {
    service("zot", registry_label(), json!({}), json!({"ports": [{"port": port}]}))
}

async fn wait_port(scenario: &Scenario, port: u16) -> Duration {
    let started = Instant::now();
    scenario.wait_cluster_host("zot", port).await;
    started.elapsed()
}

/// Whether the replica's metrics count an apply: at once, or as soon as it has the API server's answer (the test's
/// watch can see the ConfigMap before the writer does).
async fn counted_a_write(replica: &Controller) -> bool {
    wait_until(SOON, || async { replica.metric(APPLIES).filter(|n| *n >= 1.0) }).await.is_some()
}

/// Waits until exactly one of `replicas` reports leading, and returns its index.
async fn wait_single_leader(replicas: &[&Controller]) -> usize {
    let leader = wait_until(SOON, || async {
        let leading: Vec<usize> = (0..replicas.len()).filter(|&i| replicas[i].metric(LEADER) == Some(1.0)).collect();
        (leading.len() == 1).then(|| leading[0])
    })
    .await;
    leader.expect("exactly one replica leads")
}

#[tokio::test]
async fn two_replicas_one_writes_and_the_other_takes_over_when_the_leader_dies_or_stops() {
    let s = Scenario::new("ha").await;
    let (a, b) = (replica(&s), replica(&s));
    s.apply(registry_on_port(5000)).await;
    wait_port(&s, 5000).await;
    let leader = wait_single_leader(&[&a, &b]).await;
    let (mut leader, follower) = if leader == 0 { (a, b) } else { (b, a) };
    assert!(counted_a_write(&leader).await, "the leader wrote");
    // A dead follower would pass "never wrote" too: it must answer, and count no apply.
    let scrape = follower.get("/metrics").expect("the follower answers");
    assert_eq!(scrape.0, 200);
    assert_eq!(follower.metric(APPLIES).unwrap_or(0.0), 0.0, "the follower never writes");

    // kill -9: nothing is released, so the follower waits out the lease.
    leader.signal("KILL");
    leader.wait_exit(Duration::from_secs(5)).expect("killed");
    s.apply(registry_on_port(5001)).await;
    let failover = wait_port(&s, 5001).await;
    assert_eq!(follower.metric(LEADER), Some(1.0));
    assert!(counted_a_write(&follower).await, "the new leader wrote");
    println!("failover after SIGKILL of the leader: {:.1} s (lease 6 s)", failover.as_secs_f64());

    // SIGTERM: the leader releases the Lease and a new replica takes over at once.
    let mut old_leader = follower;
    let successor = replica(&s);
    wait_until(SOON, || async { (successor.get("/readyz")?.0 == 200).then_some(()) }).await.expect("successor ready");
    old_leader.signal("TERM");
    let status = old_leader.wait_exit(Duration::from_secs(10)).expect("exits within a few seconds of SIGTERM");
    assert!(status.success(), "exit status after SIGTERM: {status}");
    assert!(old_leader.logs().contains("released the leader Lease"), "{}", old_leader.logs());
    let handover = Instant::now();
    s.apply(registry_on_port(5002)).await;
    wait_port(&s, 5002).await;
    assert_eq!(successor.metric(LEADER), Some(1.0));
    println!("handover after SIGTERM of the leader: {:.1} s", handover.elapsed().as_secs_f64());
}

#[tokio::test]
async fn a_single_replica_works_with_leader_election_on() {
    let s = Scenario::new("single").await;
    let only = replica(&s);
    s.apply(registry_on_port(5000)).await;
    wait_port(&s, 5000).await;
    assert_eq!(only.metric(LEADER), Some(1.0));
}

#[tokio::test]
async fn probes_and_metrics_report_what_happens() {
    let s = Scenario::new("metrics").await;
    let controller = Controller::start(&args(&s, &["--log-format=json"]));
    let ready = wait_until(SOON, || async { (controller.get("/readyz")?.0 == 200).then_some(()) }).await;
    assert!(ready.is_some(), "/readyz turns ok; logs:\n{}", controller.logs());
    assert_eq!(controller.get("/healthz").map(|(code, _)| code), Some(200));

    const SUCCESSES: &str = "controller_runtime_reconcile_total{controller=\"publisher\",result=\"success\"}";
    let before = controller.metric(SUCCESSES).unwrap_or(0.0);
    s.apply(registry_on_port(5000)).await;
    wait_port(&s, 5000).await;
    // The test's own watch can see the ConfigMap before the controller has the API server's answer to its write,
    // and a pass is counted when it ends: scrape once both have happened.
    let scraped = wait_until(SOON, || async {
        let counted = controller.metric(SUCCESSES).is_some_and(|n| n > before);
        let scrape = controller.get("/metrics")?;
        (counted && scrape.1.contains("local_registry_publisher_published_info{")).then_some(scrape)
    })
    .await;
    let (status, text) = scraped.expect("the published values reach /metrics");
    assert_eq!(status, 200);
    let parsed = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("Prometheus text");
    let value = |name: &str| {
        parsed
            .samples
            .iter()
            .filter(|s| s.metric == name)
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => 0.0,
            })
            .sum::<f64>()
    };
    assert!(value("controller_runtime_reconcile_total") > before, "reconciles counted");
    assert!(value("local_registry_publisher_configmap_writes_total") >= 1.0);
    assert!(value("local_registry_publisher_reaction_time_seconds_count") >= 1.0, "the write's reaction timed");
    assert!(value("local_registry_publisher_last_publish_timestamp_seconds") > 1.7e9);
    assert!(value("process_resident_memory_bytes") > 1e6);
    assert!(value("process_open_fds") > 0.0 && value("process_start_time_seconds") > 1.7e9);
    assert!(parsed.samples.iter().any(|s| s.metric == "controller_runtime_reconcile_time_seconds_count"), "histogram");
    let info =
        parsed.samples.iter().find(|s| s.metric == "local_registry_publisher_published_info").expect("published info");
    let cluster_host = s.cluster_host("zot", 5000).await;
    assert_eq!(info.labels.get("host_from_cluster_network"), Some(cluster_host.as_str()));
    assert_eq!(info.labels.get("registry"), Some(format!("{}/zot", s.ns).as_str()));
    assert_eq!(value("leader_election_master_status"), 1.0, "a single replica without election leads");

    // One JSON info line per published change, with old and new values and the registry Service.
    let published_lines = || -> Vec<serde_json::Value> {
        let logs = controller.logs();
        let lines = logs.lines().filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok());
        lines.filter(|line| line["fields"]["message"] == "published").collect()
    };
    let logged = wait_until(SOON, || async { Some(published_lines()).filter(|lines| !lines.is_empty()) }).await;
    let published = logged.unwrap_or_default();
    assert_eq!(published.len(), 1, "{}", controller.logs());
    assert_eq!(published[0]["fields"]["old"], "(none)");
    assert_eq!(published[0]["fields"]["registry"], format!("{}/zot", s.ns));
    let logged_host = format!("hostFromClusterNetwork={cluster_host}");
    assert!(published[0]["fields"]["new"].as_str().is_some_and(|n| n.contains(&logged_host)), "{}", published[0]);

    // A withdrawal counts as a delete.
    s.delete("v1", "Service", "zot").await;
    s.wait_published("the withdrawal", Option::is_none).await;
    const DELETES: &str = "local_registry_publisher_configmap_writes_total{operation=\"delete\"}";
    let deleted = wait_until(SOON, || async { controller.metric(DELETES).filter(|n| *n >= 1.0) }).await;
    assert_eq!(deleted, Some(1.0), "deletes are counted");
}

#[tokio::test]
async fn a_leader_whose_connection_freezes_steps_down_before_anyone_else_may_lead() {
    let s = Scenario::new("frozen").await;
    let upstream = testbed::ControlPlane::shared().server().trim_start_matches("https://").parse().expect("address");
    let proxy = support::proxy::FreezingProxy::start(upstream).await;
    let mut through_proxy = args(
        &s,
        &["--leader-elect", &format!("--leader-elect-resource-namespace={}", s.ns), "--leader-elect-lease-duration=6s"],
    );
    through_proxy[0] = format!("--kubeconfig={}", kubeconfig_via(proxy.address, &s.ns).display());
    let frozen = Controller::start(&through_proxy);
    s.apply(registry_on_port(5000)).await;
    wait_port(&s, 5000).await;
    assert_eq!(wait_single_leader(&[&frozen]).await, 0);
    let other = replica(&s);

    proxy.freeze();
    let froze = Instant::now();
    // Sample both until the other leads: never may both say they lead (split brain).
    let mut stepped_down = None;
    let took_over = loop {
        let (a, b) = (frozen.metric(LEADER), other.metric(LEADER));
        assert!(!(a == Some(1.0) && b == Some(1.0)), "both replicas lead");
        if a == Some(0.0) && stepped_down.is_none() {
            stepped_down = Some(froze.elapsed());
        }
        if b == Some(1.0) {
            break froze.elapsed();
        }
        assert!(froze.elapsed() < Duration::from_secs(60), "the other replica never took over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let stepped_down = stepped_down.expect("the frozen leader stepped down first");
    eprintln!("frozen leader stepped down after {stepped_down:?}; the other led after {took_over:?} (lease 6s)");
    let (status, body) = frozen.get("/healthz").expect("the frozen replica still serves its probes");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("renew deadline"), "{body}");
    // The new leader publishes changes.
    s.apply(registry_on_port(5001)).await;
    wait_port(&s, 5001).await;
}

#[tokio::test]
async fn a_second_process_with_the_same_leader_identity_refuses_to_start() {
    let s = Scenario::new("identity").await;
    let same = ["--leader-elect", "--leader-elect-identity=twin", "--leader-elect-lease-duration=6s"];
    let namespace = format!("--leader-elect-resource-namespace={}", s.ns);
    let first = Controller::start(&args(&s, &[same[0], same[1], same[2], &namespace]));
    wait_single_leader(&[&first]).await;
    let mut second = Controller::start(&args(&s, &[same[0], same[1], same[2], &namespace]));
    let status = second.wait_exit(Duration::from_secs(30)).expect("the twin exits");
    assert!(!status.success(), "exit status {status}");
    assert!(second.logs().contains("another process renews Lease"), "{}", second.logs());
    assert_eq!(first.metric(LEADER), Some(1.0), "the first keeps leading");
}

#[test]
fn invalid_configuration_exits_2_with_one_line_naming_the_option_before_touching_the_cluster() {
    // (flags, environment, the option the error must name)
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 9] = [
        (&["--registry-selector=app in registry"], &[], "--registry-selector"),
        (&["--help-url=not a url"], &[], "--help-url"),
        (&["--node-address=external-ip"], &[], "--node-address"),
        (&["--node-address=0.0.0.0"], &[], "--node-address"),
        (&["--node-address=fe80::1"], &[], "--node-address"),
        (&["--grace-period=soon"], &[], "--grace-period"),
        (&["--log-format=xml"], &[], "--log-format"),
        (&[], &[("LRP_NODE_ADDRESS", "bogus")], "--node-address"),
        (&[], &[("LRP_LEADER_ELECT_LEASE_DURATION", "1s")], "--leader-elect-lease-duration"),
    ];
    for (flags, env, option) in cases {
        let output = std::process::Command::new(BINARY)
            .args(flags)
            // An unreachable cluster: if validation came after connecting, the exit would be 1, not 2.
            .arg("--kubeconfig=/nonexistent/kubeconfig")
            .envs(env.iter().copied())
            .output()
            .expect("run the binary");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{flags:?} {env:?}: {stderr}");
        let first = stderr.lines().next().unwrap_or_default();
        assert!(first.starts_with("error: ") && first.contains(option), "{flags:?} {env:?}: {first}");
    }
}

#[tokio::test]
async fn registries_share_watches_so_watches_do_not_grow_with_them() {
    let s = Scenario::new("shared").await;
    let controller = Controller::start(&args(&s, &[]));
    let registry = |i: usize| {
        // Each selects its own pods (none run, so they are not ready); every tenth is selector-less, ready with no
        // pods to wait for, and has EndpointSlices of its own if any.
        let spec = if i.is_multiple_of(10) {
            json!({"ports": [{"port": 5000}]})
        } else {
            json!({"selector": {"app": format!("registry-{i:02}")}, "ports": [{"port": 5000}]})
        };
        service(&format!("registry-{i:02}"), registry_label(), json!({}), spec)
    };
    s.apply(registry(0)).await;
    s.wait_cluster_host("registry-00", 5000).await;
    s.wait_event("registry-00", "Published").await;
    let one = open_sockets(controller.pid());
    let watches_for_one = controller.metric(WATCHES).expect("the watches gauge");

    const REGISTRIES: usize = 40;
    for i in 1..REGISTRIES {
        s.apply(registry(i)).await;
    }
    // The last loser is told once the controller has seen all of them.
    s.wait_event(&format!("registry-{:02}", REGISTRIES - 1), "NotPublished").await;
    // Per-registry watches would add two per registry (78 here). Shared ones add exactly one: the pod watch for
    // the registries' `app` selectors (the selector-less ones share registry-00's EndpointSlice watch).
    let shared = wait_until(SOON, || async { controller.metric(WATCHES).filter(|n| *n == watches_for_one + 1.0) });
    assert!(
        shared.await.is_some(),
        "{watches_for_one} watches with one registry, {:?} with {REGISTRIES}; logs:\n{}",
        controller.metric(WATCHES),
        controller.logs()
    );
    // Sockets also count pooled request connections (the Event task posts eight at a time), so they are shown,
    // and the watch count above is what is held to a bound.
    println!("open sockets: {one} with one registry, {} with {REGISTRIES}", open_sockets(controller.pid()));
}

/// A Lease forged with the longest duration it can claim does not keep the controller from ever leading: a claim is
/// honoured for this replica's own duration at most, and the capping is logged and counted.
#[tokio::test]
async fn a_lease_forged_with_a_huge_duration_is_honoured_for_our_own_duration_only() {
    let s = Scenario::new("forged-lease").await;
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> = kube::Api::namespaced(s.client.clone(), &s.ns);
    let forged = serde_json::from_value(json!({
        "metadata": {"name": "local-registry-publisher"},
        "spec": {"holderIdentity": "squatter", "leaseDurationSeconds": 2147483647}
    }))
    .expect("a Lease");
    leases.create(&kube::api::PostParams::default(), &forged).await.expect("the forged Lease");
    let controller = replica(&s);
    let leading =
        wait_until(Duration::from_secs(30), || async { (controller.metric(LEADER) == Some(1.0)).then_some(()) });
    assert!(leading.await.is_some(), "takes over once its own 6 s lease has passed; logs:\n{}", controller.logs());
    let capped = controller.metric("local_registry_publisher_lease_duration_capped_total");
    assert!(capped.is_some_and(|n| n >= 1.0), "counted: {capped:?}");
    assert!(controller.logs().contains("claims a longer duration than this replica's"), "{}", controller.logs());
    s.apply(registry_on_port(5000)).await;
    wait_port(&s, 5000).await;
}
