//! What every [`NodeRuntime`] must do, whatever it writes: the cases every implementation runs against a scratch
//! directory of its own, twice for each runtime (containerd's shown): here, judged by reading its files back ([`ContainerdFiles`]), and in
//! tests/real_node/, judged by the node's own containerd (what its resolver tries for each address). A second
//! runtime adds its own [`Fixture`] and those two tests. An implementation is judged through the trait and through
//! [`Fixture::reads`], what the runtime itself would read for an address, never through its file format.
//!
//! Test support, public so the real-node test can run it: it asserts, and panics on what it cannot set up.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{NodeRuntime, Report};
use crate::node::{Endpoint, HostEntry, NodePlan};

/// How the suite makes and inspects one implementation.
pub trait Fixture {
    /// The runtime writing into `dir`, for the agents following the plan named `plan`.
    fn runtime(&self, dir: &Path, plan: &str) -> Box<dyn NodeRuntime>;
    /// What the runtime would read for `address` in `dir`: the endpoint it dials first, the CA it trusts there, and
    /// the upstream it falls back to when that is not `address` itself; `None` when it holds nothing for it (it
    /// would pull `address` as it is).
    fn reads(&self, dir: &Path, address: &str) -> Option<Read>;
    /// Someone else's configuration for `address` (a person, kind's script, another tool).
    fn plant_foreign(&self, dir: &Path, address: &str);
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    pub endpoint: String,
    pub ca: Option<String>,
    pub server: Option<String>,
}

const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBconformance\n-----END CERTIFICATE-----\n";

/// A fresh directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("lrp-conformance-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// Not `HostEntry::plain`, which exists in the crate's unit tests only: the real-node test runs this suite too.
fn entry(address: &str, endpoint: &str) -> HostEntry {
    HostEntry { address: address.into(), endpoint: url(endpoint), ca: None, server: None }
}

fn url(text: &str) -> Endpoint {
    text.parse().expect("an endpoint")
}

fn read(endpoint: &str) -> Option<Read> {
    Some(Read { endpoint: endpoint.into(), ca: None, server: None })
}

const PLAN: &str = "lrp/lrp-node-plan";

/// Runs every case against `fixture`.
pub fn run(fixture: &dyn Fixture) {
    writes_what_is_planned_once_then_nothing(fixture);
    follows_a_moved_endpoint_and_removes_a_withdrawn_address(fixture);
    leaves_someone_elses_configuration_as_it_is(fixture);
    keeps_apart_from_another_plans_agent(fixture);
    trusts_a_ca_only_where_planned_and_removes_it_with_its_address(fixture);
    falls_back_to_a_mirrors_upstream(fixture);
}

fn writes_what_is_planned_once_then_nothing(fixture: &dyn Fixture) {
    let dir = Scratch::new();
    let runtime = fixture.runtime(&dir.0, PLAN);
    assert_eq!(runtime.location(), dir.0.display().to_string(), "it says where it writes, for the log");
    let plan = NodePlan::of(vec![entry("registry.ns.svc.cluster.local:5000", "http://10.96.0.12:5000")]);
    let report = runtime.apply(&plan).expect("applied");
    assert_eq!(report.written, ["registry.ns.svc.cluster.local:5000"]);
    assert_eq!(fixture.reads(&dir.0, "registry.ns.svc.cluster.local:5000"), read("http://10.96.0.12:5000"));
    assert_eq!(runtime.apply(&plan).expect("applied"), Report::default(), "an unchanged plan writes nothing");
}

fn follows_a_moved_endpoint_and_removes_a_withdrawn_address(fixture: &dyn Fixture) {
    let dir = Scratch::new();
    let runtime = fixture.runtime(&dir.0, PLAN);
    let both = vec![entry("a:5000", "http://10.96.0.12:5000"), entry("b:5000", "http://10.96.0.12:5000")];
    runtime.apply(&NodePlan::of(both)).expect("applied");
    let report = runtime.apply(&NodePlan::of(vec![entry("a:5000", "http://10.96.0.99:5000")])).expect("applied");
    assert_eq!((report.written, report.removed), (vec!["a:5000".to_string()], vec!["b:5000".to_string()]));
    assert_eq!(fixture.reads(&dir.0, "a:5000"), read("http://10.96.0.99:5000"));
    assert_eq!(fixture.reads(&dir.0, "b:5000"), None);
    let report = runtime.apply(&NodePlan::default()).expect("applied");
    assert_eq!(report.removed, ["a:5000"]);
    assert_eq!(fixture.reads(&dir.0, "a:5000"), None);
}

fn leaves_someone_elses_configuration_as_it_is(fixture: &dyn Fixture) {
    let dir = Scratch::new();
    let runtime = fixture.runtime(&dir.0, PLAN);
    fixture.plant_foreign(&dir.0, "a:5000");
    let before = fixture.reads(&dir.0, "a:5000");
    let report = runtime.apply(&NodePlan::of(vec![entry("a:5000", "http://10.96.0.12:5000")])).expect("applied");
    assert_eq!(report.foreign, ["a:5000"]);
    assert!(report.written.is_empty(), "{report:?}");
    assert_eq!(fixture.reads(&dir.0, "a:5000"), before, "someone else's configuration changed");
    let report = runtime.apply(&NodePlan::default()).expect("applied");
    assert!(report.removed.is_empty(), "someone else's configuration was removed: {report:?}");
    assert_eq!(fixture.reads(&dir.0, "a:5000"), before);
}

fn keeps_apart_from_another_plans_agent(fixture: &dyn Fixture) {
    let dir = Scratch::new();
    let ours = fixture.runtime(&dir.0, PLAN);
    let theirs = fixture.runtime(&dir.0, "other/other-node-plan");
    theirs.apply(&NodePlan::of(vec![entry("theirs:5000", "http://10.96.0.50:5000")])).expect("applied");
    let report = ours.apply(&NodePlan::of(vec![entry("theirs:5000", "http://10.96.0.12:5000")])).expect("applied");
    assert_eq!(report.foreign, ["theirs:5000"], "another release's agent's configuration is not ours");
    ours.apply(&NodePlan::default()).expect("applied");
    assert_eq!(fixture.reads(&dir.0, "theirs:5000"), read("http://10.96.0.50:5000"));
}

fn trusts_a_ca_only_where_planned_and_removes_it_with_its_address(fixture: &dyn Fixture) {
    let dir = Scratch::new();
    let runtime = fixture.runtime(&dir.0, PLAN);
    let tls = HostEntry { ca: Some(CA.into()), ..entry("tls:5443", "https://10.96.0.13:5443") };
    runtime.apply(&NodePlan::of(vec![tls, entry("plain:5000", "http://10.96.0.12:5000")])).expect("applied");
    let found = fixture.reads(&dir.0, "tls:5443").expect("configured");
    assert_eq!((found.endpoint.as_str(), found.ca.as_deref()), ("https://10.96.0.13:5443", Some(CA)));
    assert_eq!(fixture.reads(&dir.0, "plain:5000"), read("http://10.96.0.12:5000"), "no CA where none is planned");
    runtime.apply(&NodePlan::of(vec![entry("plain:5000", "http://10.96.0.12:5000")])).expect("applied");
    assert_eq!(fixture.reads(&dir.0, "tls:5443"), None);
}

fn falls_back_to_a_mirrors_upstream(fixture: &dyn Fixture) {
    let dir = Scratch::new();
    let runtime = fixture.runtime(&dir.0, PLAN);
    let mirror =
        HostEntry { server: Some(url("https://registry-1.docker.io")), ..entry("docker.io", "http://10.96.0.50:5000") };
    runtime.apply(&NodePlan::of(vec![mirror])).expect("applied");
    let found = fixture.reads(&dir.0, "docker.io").expect("configured");
    assert_eq!(found.server.as_deref(), Some("https://registry-1.docker.io"));
}

/// A CA file's certificates, as a PEM reader takes them: text before the first one (a writer's mark) is skipped.
pub fn certificates(pem: &str) -> String {
    pem.find("-----BEGIN").map_or(pem, |at| &pem[at..]).to_string()
}

/// containerd: `hosts.toml` files, read back as containerd reads them (the first `[host]` table, its `ca`, the
/// `server` key).
pub struct ContainerdFiles;

impl Fixture for ContainerdFiles {
    fn runtime(&self, dir: &Path, plan: &str) -> Box<dyn NodeRuntime> {
        let (namespace, configmap) = plan.split_once('/').expect("namespace/name");
        let owner = super::containerd::hosts::Owner::new(namespace, configmap);
        let placement = super::Placement { config_path_mount: dir.to_path_buf(), config_path: None, config: None };
        Box::new(super::containerd::Containerd::new(placement, owner, Some("containerd://2.4.2")).expect("a runtime"))
    }

    fn reads(&self, dir: &Path, address: &str) -> Option<Read> {
        let host_dir = dir.join(address);
        let text = std::fs::read_to_string(host_dir.join("hosts.toml")).ok()?;
        let table: toml::Table = text.parse().expect("containerd parses it");
        let hosts = table.get("host").and_then(toml::Value::as_table)?;
        let (endpoint, host) = hosts.iter().next()?;
        let ca = host.get("ca").and_then(toml::Value::as_str).map(|path| {
            certificates(
                &std::fs::read_to_string(host_dir.join(path)).expect("the CA file a hosts.toml names is there"),
            )
        });
        let server = table.get("server").and_then(toml::Value::as_str).map(str::to_string);
        Some(Read { endpoint: endpoint.clone(), ca, server })
    }

    fn plant_foreign(&self, dir: &Path, address: &str) {
        std::fs::create_dir_all(dir.join(address)).expect("a directory");
        // A host it resolves through too, so what the runtime reads for the address shows it.
        let text = "[host.\"https://mirror.example\"]\n  capabilities = [\"pull\", \"resolve\"]\n";
        std::fs::write(dir.join(address).join("hosts.toml"), text).expect("someone else's hosts.toml");
    }
}

/// CRI-O: drop-ins under `registries.conf.d` and CAs under `certs.d`, read back as containers/image merges and
/// reads them (the last table of the address's prefix; its first mirror, else its location, over HTTP when
/// `insecure`; the `*.crt` files of the endpoint dialled).
pub struct CrioFiles;

impl Fixture for CrioFiles {
    fn runtime(&self, dir: &Path, plan: &str) -> Box<dyn NodeRuntime> {
        let (namespace, configmap) = plan.split_once('/').expect("namespace/name");
        let owner = super::owner::Owner::new(namespace, configmap);
        let placement = super::Placement { config_path_mount: dir.to_path_buf(), config_path: None, config: None };
        Box::new(super::crio::Crio::new(placement, owner).expect("a runtime"))
    }

    fn reads(&self, dir: &Path, address: &str) -> Option<Read> {
        use super::crio::dropins::{CERTS_DIR, registry_files};
        let files = registry_files(dir);
        let merged = super::crio::registries::Merged::of(files.iter().map(|(n, t)| (n.as_str(), t.as_str())))
            .expect("CRI-O parses every file");
        let (registry, _) = merged.get(address)?;
        let url = |location: &str, insecure: bool| format!("{}://{location}", if insecure { "http" } else { "https" });
        let (endpoint, server) = match registry.mirrors.first() {
            Some(mirror) => (mirror.location.clone(), Some(url(&registry.location, registry.insecure))),
            None => (registry.location.clone(), None),
        };
        let insecure = registry.mirrors.first().map_or(registry.insecure, |mirror| mirror.insecure);
        let mut cas: Vec<PathBuf> = std::fs::read_dir(dir.join(CERTS_DIR).join(&endpoint))
            .map(|entries| entries.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        cas.retain(|path| path.extension().is_some_and(|e| e == "crt"));
        cas.sort();
        let ca: String = cas.iter().map(|path| certificates(&std::fs::read_to_string(path).expect("a CA"))).collect();
        Some(Read { endpoint: url(&endpoint, insecure), ca: (!ca.is_empty()).then_some(ca), server })
    }

    fn plant_foreign(&self, dir: &Path, address: &str) {
        let drop_ins = dir.join(super::crio::dropins::DROP_IN_DIR);
        std::fs::create_dir_all(&drop_ins).expect("a drop-in directory");
        let text = format!("[[registry]]\nprefix = \"{address}\"\nlocation = \"mirror.example\"\n");
        std::fs::write(drop_ins.join("50-theirs.conf"), text).expect("someone else's drop-in");
    }
}

#[cfg(test)]
#[test]
fn containerd_conforms() {
    run(&ContainerdFiles);
}

#[cfg(test)]
#[test]
fn crio_conforms() {
    run(&CrioFiles);
}
