//! The runtime conformance suite on the CRI-O node: each case's files judged by CRI-O's own image library at the
//! version CRI-O links (tools/crio/crioimage), which says where a pull of the address goes, in order, and over which
//! scheme; the CA judged is what containers/image loads for the endpoint it dials (`certs.d/<endpoint>/*.crt`).

use std::path::Path;
use std::process::Command;

use local_registry_publisher::agent::runtime::NodeRuntime;
use local_registry_publisher::agent::runtime::conformance::{self, CrioFiles, Fixture, Read};

use super::node;

struct CrioResolves;

impl Fixture for CrioResolves {
    fn runtime(&self, dir: &Path, plan: &str) -> Box<dyn NodeRuntime> {
        CrioFiles.runtime(dir, plan)
    }

    fn plant_foreign(&self, dir: &Path, address: &str) {
        CrioFiles.plant_foreign(dir, address);
    }

    fn reads(&self, dir: &Path, address: &str) -> Option<Read> {
        // A copy with the distribution's registries.conf, which every CRI-O node has, so the case's files stay as
        // the runtime left them.
        let copy = dir.with_extension("read");
        let _ = std::fs::remove_dir_all(&copy);
        let copied = Command::new("cp").arg("-a").arg(dir).arg(&copy).status().expect("cp");
        assert!(copied.success());
        if !copy.join("registries.conf").exists() {
            std::fs::write(copy.join("registries.conf"), "").expect("an empty registries.conf");
        }
        let image = format!("{address}/conformance/probe:1");
        let sources = node().crio_pull_sources(&copy, &image).expect("CRI-O's library resolves it");
        let _ = std::fs::remove_dir_all(&copy);
        let parse = |line: &str| -> (String, bool) {
            let mut words = line.split_whitespace();
            let location = words.next().expect("a location").to_string();
            (location, words.next() == Some("insecure=true"))
        };
        let url = |(location, insecure): &(String, bool)| {
            format!("{}://{location}", if *insecure { "http" } else { "https" })
        };
        let tried: Vec<(String, bool)> = sources.iter().map(|line| parse(line)).collect();
        let first = tried.first().expect("at least the address itself");
        // Nothing configured: the library pulls the address as it is, over HTTPS.
        if tried.len() == 1 && first.0 == address && !first.1 && sources[0].ends_with(&format!(" {image}")) {
            return None;
        }
        let server = (tried.len() > 1).then(|| url(tried.last().expect("a last source")));
        let mut cas: Vec<_> = std::fs::read_dir(dir.join("certs.d").join(&first.0))
            .map(|entries| entries.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        cas.retain(|path| path.extension().is_some_and(|e| e == "crt"));
        cas.sort();
        let ca: String =
            cas.iter().map(|path| conformance::certificates(&std::fs::read_to_string(path).expect("a CA"))).collect();
        Some(Read { endpoint: url(first), ca: (!ca.is_empty()).then_some(ca), server })
    }
}

#[tokio::test]
async fn the_runtime_conformance_suite_holds_as_crios_own_image_library_resolves_the_files() {
    conformance::run(&CrioResolves);
}
