use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

/// A fresh, empty hosts directory of this test's own, removed when the test ends (a mutation run makes thousands).
fn hosts_dir() -> Scratch {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir =
        std::env::temp_dir().join(format!("lrp-hosts-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temporary directory");
    Scratch(dir)
}

struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn entry(address: &str, endpoint: &str) -> HostEntry {
    HostEntry::plain(address, endpoint)
}

fn plan(entries: &[HostEntry]) -> NodePlan {
    NodePlan { hosts: entries.to_vec(), ..NodePlan::default() }
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

fn owner() -> Owner {
    Owner::new("local-registry-publisher", "lrp-node-plan")
}

#[test]
fn the_file_says_plain_http_pull_and_resolve_with_no_tls_key() {
    let text = hosts_toml(&entry(CLUSTER_NAME, "http://10.96.0.12:5000"), &owner());
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
    let report = sync(&dir, &wanted, &owner()).expect("synced");
    assert_eq!(report.written, [CLUSTER_NAME]);
    let text = std::fs::read_to_string(dir.join(CLUSTER_NAME).join("hosts.toml")).expect("written");
    assert_eq!(text, hosts_toml(&wanted.hosts[0], &owner()));
    assert_eq!(names(&dir.join(CLUSTER_NAME)), ["hosts.toml"], "no temporary file is left");
    assert_eq!(sync(&dir, &wanted, &owner()).expect("synced"), Report::default(), "an unchanged plan writes nothing");
}

#[test]
fn follows_a_moved_endpoint_and_removes_a_withdrawn_address() {
    let dir = hosts_dir();
    sync(
        &dir,
        &plan(&[entry(CLUSTER_NAME, "http://10.96.0.12:5000"), entry("kind-registry:5000", "http://10.96.0.12:5000")]),
        &owner(),
    )
    .expect("synced");
    let moved = plan(&[entry(CLUSTER_NAME, "http://10.96.0.99:5000")]);
    let report = sync(&dir, &moved, &owner()).expect("synced");
    assert_eq!(
        (report.written, report.removed),
        (vec![CLUSTER_NAME.to_string()], vec!["kind-registry:5000".to_string()])
    );
    assert!(std::fs::read_to_string(dir.join(CLUSTER_NAME).join("hosts.toml")).expect("read").contains("10.96.0.99"));
    assert_eq!(names(&dir), [CLUSTER_NAME]);
    let report = sync(&dir, &NodePlan::default(), &owner()).expect("synced");
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
    let report = sync(&dir, &wanted, &owner()).expect("synced");
    assert_eq!(report.foreign, [CLUSTER_NAME, "certs-only:5000"]);
    assert!(report.written.is_empty() && report.removed.is_empty());
    sync(&dir, &NodePlan::default(), &owner()).expect("synced");
    assert_eq!(std::fs::read_to_string(dir.join(CLUSTER_NAME).join("hosts.toml")).expect("kept"), foreign);
    assert_eq!(std::fs::read_to_string(dir.join("docker.io").join("hosts.toml")).expect("kept"), foreign);
    assert_eq!(names(&dir.join("certs-only:5000")), ["ca.crt"]);
}

#[test]
fn an_emptied_directory_is_written_again_and_a_file_added_beside_ours_survives_removal() {
    let dir = hosts_dir();
    let wanted = plan(&[entry(CLUSTER_NAME, "http://10.96.0.12:5000")]);
    sync(&dir, &wanted, &owner()).expect("synced");
    std::fs::remove_dir_all(dir.join(CLUSTER_NAME)).expect("emptied");
    assert_eq!(sync(&dir, &wanted, &owner()).expect("synced").written, [CLUSTER_NAME]);
    std::fs::write(dir.join(CLUSTER_NAME).join("ca.crt"), "pem").expect("someone's file");
    assert_eq!(sync(&dir, &NodePlan::default(), &owner()).expect("synced").removed, [CLUSTER_NAME]);
    assert_eq!(names(&dir.join(CLUSTER_NAME)), ["ca.crt"]);
}

#[test]
fn an_empty_directory_is_nobodys_and_is_written_into() {
    let dir = hosts_dir();
    std::fs::create_dir(dir.join(CLUSTER_NAME)).expect("dir");
    let wanted = plan(&[entry(CLUSTER_NAME, "http://10.96.0.12:5000")]);
    assert_eq!(sync(&dir, &wanted, &owner()).expect("synced").written, [CLUSTER_NAME]);
}

#[test]
fn an_address_that_could_escape_the_directory_is_refused_and_an_endpoint_that_could_end_the_file_is_no_plan() {
    let dir = hosts_dir();
    let wanted = plan(&[
        entry("../etc:5000", "http://10.96.0.12:5000"),
        entry("a/b:5000", "http://10.96.0.12:5000"),
        entry(".:5000", "http://10.96.0.12:5000"),
    ]);
    let report = sync(&dir, &wanted, &owner()).expect("synced");
    assert_eq!(report.failed.len(), 3, "{report:?}");
    assert!(names(&dir).is_empty());
    // An endpoint is typed: one that could end the TOML string, or speaks another scheme, makes no plan at all.
    for forged in ["http://10.96.0.12:5000\"]\nserver = \"evil", "ftp://10.96.0.12:5000"] {
        let text = serde_json::json!({"format": 1, "hosts": [{"address": "ok:5000", "endpoint": forged}]});
        assert!(NodePlan::from_json(&text.to_string()).is_err(), "{forged:?} was planned");
    }
}

const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

#[test]
fn an_https_endpoint_gets_its_ca_beside_the_file_which_names_it_and_both_follow_the_plan() {
    let dir = hosts_dir();
    let tls = HostEntry { ca: Some(CA.into()), ..entry(CLUSTER_NAME, "https://10.96.0.12:5000") };
    let report = sync(&dir, &plan(std::slice::from_ref(&tls)), &owner()).expect("synced");
    assert_eq!(report.written, [CLUSTER_NAME]);
    let host_dir = dir.join(CLUSTER_NAME);
    assert_eq!(names(&host_dir), ["hosts.toml", CA_FILE], "no temporary file is left");
    let ca = || std::fs::read_to_string(host_dir.join(CA_FILE)).expect("ca");
    assert_eq!(ca(), owner().mark(CA), "marked as ours; PEM readers skip text before a certificate");
    let text = std::fs::read_to_string(host_dir.join("hosts.toml")).expect("hosts");
    let wanted =
        format!("[host.\"https://10.96.0.12:5000\"]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = \"{CA_FILE}\"\n");
    assert!(text.contains(&wanted), "{text}");
    assert_eq!(sync(&dir, &plan(std::slice::from_ref(&tls)), &owner()).expect("synced"), Report::default());

    // A rotated CA is written again; so is a CA changed by hand, once marked as ours.
    let rotated = HostEntry { ca: Some(CA.replace("MIIB", "MIIC")), ..tls.clone() };
    assert_eq!(sync(&dir, &plan(std::slice::from_ref(&rotated)), &owner()).expect("synced").written, [CLUSTER_NAME]);
    assert!(ca().contains("MIIC"));
    std::fs::write(host_dir.join(CA_FILE), owner().mark("changed")).expect("changed by hand");
    assert_eq!(sync(&dir, &plan(std::slice::from_ref(&rotated)), &owner()).expect("synced").written, [CLUSTER_NAME]);

    // The registry speaks plain HTTP again: its CA goes; someone's ca.crt beside ours stays throughout.
    std::fs::write(host_dir.join("ca.crt"), "theirs").expect("someone's file");
    let plain = entry(CLUSTER_NAME, "http://10.96.0.12:5000");
    assert_eq!(sync(&dir, &plan(&[plain]), &owner()).expect("synced").written, [CLUSTER_NAME]);
    assert_eq!(names(&host_dir), ["ca.crt", "hosts.toml"]);

    // Withdrawn: the file, its CA and (when nothing else is left) the directory go.
    sync(&dir, &plan(std::slice::from_ref(&rotated)), &owner()).expect("synced");
    assert_eq!(sync(&dir, &NodePlan::default(), &owner()).expect("synced").removed, [CLUSTER_NAME]);
    assert_eq!(names(&host_dir), ["ca.crt"]);
    std::fs::remove_file(host_dir.join("ca.crt")).expect("theirs removed");
    sync(&dir, &plan(std::slice::from_ref(&rotated)), &owner()).expect("synced");
    assert_eq!(sync(&dir, &NodePlan::default(), &owner()).expect("synced").removed, [CLUSTER_NAME]);
    assert!(names(&dir).is_empty(), "{:?}", names(&dir));
}

#[test]
fn a_ca_file_someone_else_put_under_our_name_is_left_and_the_address_reported() {
    let dir = hosts_dir();
    let host_dir = dir.join(CLUSTER_NAME);
    sync(&dir, &plan(&[entry(CLUSTER_NAME, "http://10.96.0.12:5000")]), &owner()).expect("synced");
    std::fs::write(host_dir.join(CA_FILE), "theirs").expect("someone's file");
    let tls = HostEntry { ca: Some(CA.into()), ..entry(CLUSTER_NAME, "https://10.96.0.12:5000") };
    let report = sync(&dir, &plan(&[tls]), &owner()).expect("synced");
    assert_eq!(report.failed.len(), 1, "{report:?}");
    assert!(report.failed[0].1.contains("this agent did not write"), "{report:?}");
    assert_eq!(std::fs::read_to_string(host_dir.join(CA_FILE)).expect("kept"), "theirs");
    // Withdrawn: ours goes, theirs stays.
    assert_eq!(sync(&dir, &NodePlan::default(), &owner()).expect("synced").removed, [CLUSTER_NAME]);
    assert_eq!(names(&host_dir), [CA_FILE]);
}

#[test]
fn the_agents_of_two_releases_on_one_node_each_keep_only_their_own_files() {
    let dir = hosts_dir();
    let other = Owner::new("team-b", "lrp-node-plan");
    let ours = plan(&[entry(CLUSTER_NAME, "http://10.96.0.12:5000")]);
    let theirs = plan(&[entry("10.96.0.40:5000", "http://10.96.0.40:5000")]);
    sync(&dir, &ours, &owner()).expect("synced");
    // The other agent neither removes ours (not in its plan) nor takes it for its own.
    let report = sync(&dir, &theirs, &other).expect("synced");
    assert_eq!((report.written, report.removed), (vec!["10.96.0.40:5000".to_string()], vec![]));
    assert_eq!(sync(&dir, &ours, &owner()).expect("synced"), Report::default(), "and ours leaves theirs");
    assert_eq!(names(&dir), ["10.96.0.40:5000", CLUSTER_NAME]);
    // Both planning one address: the first writer's file is foreign to the other, which says so.
    let both = plan(&[theirs.hosts[0].clone(), ours.hosts[0].clone()]);
    let report = sync(&dir, &both, &other).expect("synced");
    assert_eq!((report.foreign, report.written), (vec![CLUSTER_NAME.to_string()], vec![]));
    // Each removes only its own.
    assert_eq!(sync(&dir, &NodePlan::default(), &other).expect("synced").removed, ["10.96.0.40:5000"]);
    assert_eq!(sync(&dir, &NodePlan::default(), &owner()).expect("synced").removed, [CLUSTER_NAME]);
    assert!(names(&dir).is_empty());
}

#[test]
fn a_mirrors_file_tries_the_mirror_first_with_a_short_dial_timeout_then_falls_back_to_the_upstream() {
    let mirror = HostEntry {
        server: Some("https://registry-1.docker.io".into()),
        ..entry("docker.io", "http://10.96.0.50:5000")
    };
    let text = hosts_toml(&mirror, &owner());
    assert!(text.starts_with(HEADER), "{text}");
    // TOML: a top-level key after a table would belong to the table, so `server` comes first.
    let server = text.find("server = \"https://registry-1.docker.io\"\n").expect("the upstream as fallback");
    let host = text.find("[host.\"http://10.96.0.50:5000\"]\n").expect("the mirror");
    assert!(server < host, "{text}");
    assert!(text[host..].contains("  capabilities = [\"pull\", \"resolve\"]\n  dial_timeout = \"2s\"\n"), "{text}");
    let parsed: toml::Table = toml::from_str(&text).expect("containerd parses it");
    assert_eq!(parsed["server"].as_str(), Some("https://registry-1.docker.io"));
    assert_eq!(parsed["host"]["http://10.96.0.50:5000"]["dial_timeout"].as_str(), Some("2s"));
    let dir = hosts_dir();
    assert_eq!(sync(&dir, &plan(std::slice::from_ref(&mirror)), &owner()).expect("synced").written, ["docker.io"]);
    // A fallback that could end the TOML string makes no plan, so nothing is written for it.
    let forged = "https://x\"\n[host.\"http://evil";
    let text = serde_json::json!({"format": 2, "hosts": [
        {"address": "docker.io", "endpoint": "http://10.96.0.50:5000", "server": forged}]});
    assert!(NodePlan::from_json(&text.to_string()).is_err(), "{forged:?} was planned");
}

#[test]
fn a_link_to_a_directory_holding_our_file_is_someone_elses_and_never_written_through() {
    let dir = hosts_dir();
    let elsewhere = hosts_dir();
    let address = "10.96.0.12:5000";
    // Our own file, then the directory swapped for a link to a copy of it somewhere else.
    sync(&elsewhere, &plan(&[entry(address, "http://10.96.0.12:5000")]), &owner()).expect("synced");
    std::os::unix::fs::symlink(elsewhere.join(address), dir.join(address)).expect("a link");
    let moved = plan(&[entry(address, "http://10.96.0.99:5000")]);
    let report = sync(&dir, &moved, &owner()).expect("synced");
    assert_eq!(report.foreign, [address]);
    let kept = std::fs::read_to_string(elsewhere.join(address).join(FILE)).expect("the link's target");
    assert!(kept.contains("10.96.0.12:5000") && !kept.contains("10.96.0.99"), "written through the link: {kept}");
}

#[test]
fn a_path_that_cannot_be_read_is_someone_elses_not_absent() {
    let dir = hosts_dir();
    std::fs::write(dir.join("file"), "not a directory").expect("a file");
    // Not "not found" (a file where a directory would be): nothing is written there.
    assert!(matches!(ownership(&dir.join("file").join("x"), &owner()), Ownership::Foreign));
    assert!(matches!(ownership(&dir.join("absent"), &owner()), Ownership::Absent));
}

#[test]
fn only_the_error_that_leaves_the_wanted_state_is_taken_for_success() {
    let error = |kind| Err::<(), _>(io::Error::from(kind));
    // A directory that is already there, a file already gone, a directory someone else still uses.
    assert!(unless(io::ErrorKind::AlreadyExists, error(io::ErrorKind::AlreadyExists)).is_ok());
    assert!(unless(io::ErrorKind::NotFound, error(io::ErrorKind::NotFound)).is_ok());
    // Anything else (a read-only file system, a full disk) is told, never swallowed.
    let told = unless(io::ErrorKind::NotFound, error(io::ErrorKind::ReadOnlyFilesystem)).expect_err("told");
    assert_eq!(told.kind(), io::ErrorKind::ReadOnlyFilesystem);
    assert!(unless(io::ErrorKind::NotFound, Ok(())).is_ok());
}
