use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

/// A fresh, empty hosts directory of this test's own.
fn hosts_dir() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir =
        std::env::temp_dir().join(format!("lrp-hosts-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temporary directory");
    dir
}

fn entry(address: &str, endpoint: &str) -> HostEntry {
    HostEntry { address: address.into(), endpoint: endpoint.into() }
}

fn plan(entries: &[HostEntry]) -> NodePlan {
    NodePlan { hosts: entries.to_vec() }
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("listed")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into())
        .collect();
    names.sort();
    names
}

const CLUSTER_NAME: &str = "registry.registry.svc.cluster.local:5000";

#[test]
fn the_file_says_plain_http_pull_and_resolve_with_no_tls_key() {
    let text = hosts_toml(&entry(CLUSTER_NAME, "http://10.96.0.12:5000"));
    assert!(text.starts_with(HEADER), "{text}");
    assert!(text.contains("[host.\"http://10.96.0.12:5000\"]\n  capabilities = [\"pull\", \"resolve\"]\n"), "{text}");
    for tls_key in ["ca", "client", "skip_verify", "server"] {
        let key = |line: &str| line.split('=').next().unwrap_or_default().trim().to_string();
        assert!(!text.lines().any(|line| key(line) == tls_key), "{tls_key} in {text}");
    }
}

#[test]
fn writes_what_is_planned_once_then_nothing() {
    let dir = hosts_dir();
    let wanted = plan(&[entry(CLUSTER_NAME, "http://10.96.0.12:5000")]);
    let report = sync(&dir, &wanted).expect("synced");
    assert_eq!(report.written, [CLUSTER_NAME]);
    let text = std::fs::read_to_string(dir.join(CLUSTER_NAME).join("hosts.toml")).expect("written");
    assert_eq!(text, hosts_toml(&wanted.hosts[0]));
    assert_eq!(names(&dir.join(CLUSTER_NAME)), ["hosts.toml"], "no temporary file is left");
    assert_eq!(sync(&dir, &wanted).expect("synced"), Report::default(), "an unchanged plan writes nothing");
}

#[test]
fn follows_a_moved_endpoint_and_removes_a_withdrawn_address() {
    let dir = hosts_dir();
    sync(
        &dir,
        &plan(&[entry(CLUSTER_NAME, "http://10.96.0.12:5000"), entry("kind-registry:5000", "http://10.96.0.12:5000")]),
    )
    .expect("synced");
    let moved = plan(&[entry(CLUSTER_NAME, "http://10.96.0.99:5000")]);
    let report = sync(&dir, &moved).expect("synced");
    assert_eq!(
        (report.written, report.removed),
        (vec![CLUSTER_NAME.to_string()], vec!["kind-registry:5000".to_string()])
    );
    assert!(std::fs::read_to_string(dir.join(CLUSTER_NAME).join("hosts.toml")).expect("read").contains("10.96.0.99"));
    assert_eq!(names(&dir), [CLUSTER_NAME]);
    let report = sync(&dir, &NodePlan::default()).expect("synced");
    assert_eq!(report.removed, [CLUSTER_NAME]);
    assert!(names(&dir).is_empty());
}

#[test]
fn a_foreign_directory_or_file_is_reported_and_left_byte_for_byte() {
    let dir = hosts_dir();
    let foreign = "[host.\"https://mirror.example\"]\n";
    std::fs::create_dir(dir.join(CLUSTER_NAME)).expect("dir");
    std::fs::write(dir.join(CLUSTER_NAME).join("hosts.toml"), foreign).expect("foreign file");
    std::fs::create_dir(dir.join("docker.io")).expect("dir");
    std::fs::write(dir.join("docker.io").join("hosts.toml"), foreign).expect("foreign file");
    std::fs::create_dir(dir.join("certs-only:5000")).expect("dir");
    std::fs::write(dir.join("certs-only:5000").join("ca.crt"), "pem").expect("cert");
    let wanted =
        plan(&[entry(CLUSTER_NAME, "http://10.96.0.12:5000"), entry("certs-only:5000", "http://10.96.0.12:5000")]);
    let report = sync(&dir, &wanted).expect("synced");
    assert_eq!(report.foreign, [CLUSTER_NAME, "certs-only:5000"]);
    assert!(report.written.is_empty() && report.removed.is_empty());
    sync(&dir, &NodePlan::default()).expect("synced");
    assert_eq!(std::fs::read_to_string(dir.join(CLUSTER_NAME).join("hosts.toml")).expect("kept"), foreign);
    assert_eq!(std::fs::read_to_string(dir.join("docker.io").join("hosts.toml")).expect("kept"), foreign);
    assert_eq!(names(&dir.join("certs-only:5000")), ["ca.crt"]);
}

#[test]
fn an_emptied_directory_is_written_again_and_a_file_added_beside_ours_survives_removal() {
    let dir = hosts_dir();
    let wanted = plan(&[entry(CLUSTER_NAME, "http://10.96.0.12:5000")]);
    sync(&dir, &wanted).expect("synced");
    std::fs::remove_dir_all(dir.join(CLUSTER_NAME)).expect("emptied");
    assert_eq!(sync(&dir, &wanted).expect("synced").written, [CLUSTER_NAME]);
    std::fs::write(dir.join(CLUSTER_NAME).join("ca.crt"), "pem").expect("someone's file");
    assert_eq!(sync(&dir, &NodePlan::default()).expect("synced").removed, [CLUSTER_NAME]);
    assert_eq!(names(&dir.join(CLUSTER_NAME)), ["ca.crt"]);
}

#[test]
fn an_empty_directory_is_nobodys_and_is_written_into() {
    let dir = hosts_dir();
    std::fs::create_dir(dir.join(CLUSTER_NAME)).expect("dir");
    let wanted = plan(&[entry(CLUSTER_NAME, "http://10.96.0.12:5000")]);
    assert_eq!(sync(&dir, &wanted).expect("synced").written, [CLUSTER_NAME]);
}

#[test]
fn an_address_or_endpoint_that_could_escape_the_directory_or_the_file_is_refused() {
    let dir = hosts_dir();
    let wanted = plan(&[
        entry("../etc:5000", "http://10.96.0.12:5000"),
        entry("a/b:5000", "http://10.96.0.12:5000"),
        entry("ok:5000", "http://10.96.0.12:5000\"]\nserver = \"evil"),
        entry("ok:5001", "ftp://10.96.0.12:5000"),
    ]);
    let report = sync(&dir, &wanted).expect("synced");
    assert_eq!(report.failed.len(), 4, "{report:?}");
    assert!(names(&dir).is_empty());
}
