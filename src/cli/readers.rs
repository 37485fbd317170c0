//! What each known reader makes of a published `localRegistryHosting.v1` text: the value it will use, or why it
//! will reject or misread the document. Pure; `get` and `doctor` print it.

use serde::Serialize;

use crate::hosting::{Field, LocalRegistryHostingV1};

/// One reader's view of the document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub reader: &'static str,
    /// The value it will use, when it can use one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uses: Option<String>,
    /// Why it will reject or misread the document; `None` when all is well.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// Why it finds no registry although nothing is wrong (a ClusterIP registry has no host for outside tools).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Verdict {
    fn ok(reader: &'static str, uses: String) -> Self {
        Self { reader, uses: Some(uses), problem: None, note: None }
    }

    fn problem(reader: &'static str, problem: impl Into<String>) -> Self {
        Self { reader, uses: None, problem: Some(problem.into()), note: None }
    }

    fn nothing(reader: &'static str, note: impl Into<String>) -> Self {
        Self { reader, uses: None, problem: None, note: Some(note.into()) }
    }
}

pub const TILT: &str = "Tilt, ctlptl";
pub const SKAFFOLD: &str = "Skaffold";
pub const IN_CLUSTER: &str = "in-cluster builders";
pub const LINE_BASED: &str = "line-based readers";

/// The lines `get` and `doctor` show of a published document: its own, when each is a top-level `key: value` (or
/// blank, or a comment), as every document this controller writes is; otherwise the whole text as one line (escaped
/// where it is printed), so text in a foreign ConfigMap cannot pass for a line of the report (an indented
/// `all is well` continues a YAML value, and still parses).
pub fn document_lines(text: &str) -> Vec<String> {
    let top_level = |line: &str| {
        let trimmed = line.trim_end();
        trimmed.is_empty()
            || trimmed.starts_with('#')
            || trimmed
                .split_once(": ")
                .is_some_and(|(key, _)| !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric()))
    };
    if text.lines().all(top_level) && !text.contains(['\r', '\u{85}', '\u{2028}', '\u{2029}']) {
        text.lines().map(str::to_string).collect()
    } else {
        vec![format!("(as stored, not one key per line) {text:?}")]
    }
}

/// Every reader's verdict on `text`, the ConfigMap's `localRegistryHosting.v1` value.
pub fn verdicts(text: &str) -> Vec<Verdict> {
    let document = match LocalRegistryHostingV1::parse(text) {
        Ok(document) => document,
        Err(error) => {
            let why = format!("the document is not YAML they can read: {error}");
            return [TILT, SKAFFOLD, IN_CLUSTER, LINE_BASED].map(|r| Verdict::problem(r, why.clone())).to_vec();
        }
    };
    let field_problem = |field: Field, value: &Option<String>| -> Option<String> {
        let value = value.as_deref()?;
        field.check(value).err().map(|reason| format!("{field} {value:?} {reason}"))
    };
    let host = document.host.clone();
    // The runtime line is checked as written; without one, readers pull from host, already checked as host.
    let runtime = document.host_from_container_runtime.clone();

    // Tilt and ctlptl push to host and name images for pods by hostFromContainerRuntime, else host.
    let tilt =
        match (&host, field_problem(Field::Host, &host), field_problem(Field::HostFromContainerRuntime, &runtime)) {
            (None, _, _) => Verdict::nothing(TILT, "no host: they find no registry"),
            (_, Some(problem), _) | (_, None, Some(problem)) => Verdict::problem(TILT, problem),
            (Some(host), None, None) => {
                let pulls = runtime.clone().unwrap_or_else(|| host.clone());
                Verdict::ok(TILT, if &pulls == host { host.clone() } else { format!("push {host}, pods pull {pulls}") })
            }
        };
    // Skaffold reads host alone, and counts a present but empty one as a registry.
    let skaffold = match (&host, field_problem(Field::Host, &host)) {
        (None, _) if text.lines().any(|l| l.trim_start().starts_with("host:")) => {
            Verdict::problem(SKAFFOLD, "host is present but empty: Skaffold counts it as a registry named \"\"")
        }
        (None, _) => Verdict::nothing(SKAFFOLD, "no host: it finds no registry"),
        (_, Some(problem)) => Verdict::problem(SKAFFOLD, problem),
        (Some(host), None) => Verdict::ok(SKAFFOLD, host.clone()),
    };
    // In-cluster builders (Camel K, SonataFlow) read hostFromClusterNetwork alone: without it, the KEP says they
    // must assume they cannot use the registry.
    let cluster = document.host_from_cluster_network.clone();
    let in_cluster = match (&cluster, field_problem(Field::HostFromClusterNetwork, &cluster)) {
        (None, _) => Verdict::nothing(IN_CLUSTER, "no hostFromClusterNetwork: they find no registry"),
        (_, Some(problem)) => Verdict::problem(IN_CLUSTER, problem),
        (Some(value), None) => Verdict::ok(IN_CLUSTER, value.clone()),
    };
    // The knative Tiltfile: grep "host:" | sed 's/ *host: *//' | tr -d '"'.
    let lines: Vec<String> = text
        .lines()
        .filter(|l| l.contains("host:"))
        .map(|l| {
            let start = l.find("host:").map_or(0, |i| l[..i].trim_end().len());
            let (before, after) = l.split_at(start);
            let after = after.trim_start().trim_start_matches("host:").trim_start();
            format!("{before}{after}").replace('"', "")
        })
        .collect();
    let line_based = match (lines.as_slice(), &host) {
        ([only], Some(host)) if only == host => Verdict::ok(LINE_BASED, only.clone()),
        ([], None) => Verdict::nothing(LINE_BASED, "no line contains \"host:\": they find no registry"),
        ([], Some(_)) => Verdict::problem(LINE_BASED, "no line contains \"host:\" although there is a host"),
        ([only], _) => Verdict::problem(LINE_BASED, format!("they read {only:?}, not the host")),
        (many, _) => {
            Verdict::problem(LINE_BASED, format!("{} lines contain \"host:\"; they read all of {many:?}", many.len()))
        }
    };
    vec![tilt, skaffold, in_cluster, line_based]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_we_publish_is_read_the_same_by_everyone() {
        let text = "host: \"localhost:30500\"\nhostFromContainerRuntime: \"127.0.0.1:30500\"\n\
                    hostFromClusterNetwork: \"registry.reg.svc.cluster.local:5000\"\n";
        let verdicts = verdicts(text);
        assert!(verdicts.iter().all(|v| v.problem.is_none()), "{verdicts:?}");
        assert_eq!(verdicts[0].uses.as_deref(), Some("push localhost:30500, pods pull 127.0.0.1:30500"));
        assert_eq!(verdicts[2].uses.as_deref(), Some("registry.reg.svc.cluster.local:5000"));
        assert_eq!(verdicts[3].uses.as_deref(), Some("localhost:30500"));
    }

    #[test]
    fn without_a_runtime_line_readers_pull_from_host() {
        let verdicts = verdicts("host: \"localhost:30500\"\nhostFromClusterNetwork: \"r.ns.svc.cluster.local:5000\"\n");
        assert!(verdicts.iter().all(|v| v.problem.is_none()), "{verdicts:?}");
        assert_eq!(verdicts[0].uses.as_deref(), Some("localhost:30500"));
    }

    #[test]
    fn each_reader_says_what_it_rejects_or_misreads() {
        // A runtime line with "localhost:" is read by the line reader too.
        let two_lines = verdicts("host: \"10.0.0.1:5000\"\nhostFromContainerRuntime: \"localhost:5000\"\n");
        assert!(two_lines[3].problem.as_deref().is_some_and(|p| p.contains("2 lines")), "{two_lines:?}");
        // An empty host is a registry named "" to Skaffold.
        let empty = verdicts("host: \"\"\nhostFromClusterNetwork: \"r.ns.svc.cluster.local:5000\"\n");
        assert!(empty[1].problem.as_deref().is_some_and(|p| p.contains("empty")), "{empty:?}");
        // A bare name is a Docker Hub namespace to Tilt's image references.
        let bare = verdicts("host: \"registry\"\n");
        assert!(bare[0].problem.as_deref().is_some_and(|p| p.contains("Docker Hub")), "{bare:?}");
        let broken = verdicts("host: [unclosed");
        assert!(broken.iter().all(|v| v.problem.as_deref().is_some_and(|p| p.contains("not YAML"))));
    }

    #[test]
    fn a_host_only_document_has_nothing_for_in_cluster_builders_and_nothing_wrong() {
        // MicroK8s's and kind's documents: host and help only.
        let verdicts = verdicts("host: \"localhost:32000\"\nhelp: \"https://microk8s.io/docs/registry-built-in\"\n");
        assert!(verdicts.iter().all(|v| v.problem.is_none()), "{verdicts:?}");
        assert_eq!(verdicts[2].uses, None);
        assert!(verdicts[2].note.as_deref().is_some_and(|n| n.contains("no hostFromClusterNetwork")), "{verdicts:?}");
    }

    #[test]
    fn skaffold_counts_a_host_key_without_a_value_but_not_a_missing_one() {
        let null = verdicts("host:\nhostFromClusterNetwork: \"r.ns.svc.cluster.local:5000\"\n");
        assert!(null[1].problem.as_deref().is_some_and(|p| p.contains("present but empty")), "{null:?}");
        let absent = verdicts("hostFromClusterNetwork: \"r.ns.svc.cluster.local:5000\"\n");
        assert_eq!(absent[1].problem, None, "{absent:?}");
        assert!(absent[1].note.as_deref().is_some_and(|n| n.contains("no host")), "{absent:?}");
    }

    #[test]
    fn the_line_reader_keeps_quotes_yaml_drops() {
        // Single quotes are YAML's; the knative Tiltfile's sed leaves them in the address.
        let quoted = verdicts("host: 'localhost:30500'\n");
        assert_eq!(quoted[0].problem, None, "{quoted:?}");
        assert!(quoted[3].problem.as_deref().is_some_and(|p| p.contains("not the host")), "{quoted:?}");
    }
}
