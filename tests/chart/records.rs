//! What the Makefile's reruns and the docs' containerd releases promise is what the tests and records hold.

use super::*;

/// `make test` runs the node agent's real-node tests again on the containerd window's other end, choosing them by the
/// filters in NODE_AGENT_TESTS, those with the loopback pushes' tests (PROXY_TESTS) in kube-proxy's other mode, and
/// those that hold for any runtime (CRIO_RERUN_TESTS) on a CRI-O node. A filter matches by substring, so a renamed
/// test would silently leave that run: each filter must name at least one test of the binaries it is given.
#[test]
fn each_test_the_containerd_proxy_and_crio_reruns_name_exists() {
    let makefile = std::fs::read_to_string(root().join("Makefile")).expect("Makefile");
    let joined = makefile.replace("\\\n", " ");
    let variable = |name: &str| -> String {
        let prefix = format!("{name} := ");
        joined.lines().find_map(|l| l.strip_prefix(prefix.as_str())).unwrap_or_else(|| panic!("no {name}")).into()
    };
    let proxy_tests = variable("PROXY_TESTS");
    let added = proxy_tests.strip_prefix("$(NODE_AGENT_TESTS) ").expect("PROXY_TESTS extends NODE_AGENT_TESTS");
    let node_agent_tests = variable("NODE_AGENT_TESTS");
    filters_name_tests("NODE_AGENT_TESTS or PROXY_TESTS", &format!("{node_agent_tests} {added}"));
    filters_name_tests("CRIO_RERUN_TESTS", &variable("CRIO_RERUN_TESTS"));
}

/// Each filter of `line` (`--test <binary>`..., ` -- `, the test harness's flags and filters) names a test of the
/// binaries it is given.
fn filters_name_tests(what: &str, line: &str) {
    let (cargo_args, test_args) = line.split_once(" -- ").expect("cargo's arguments, then the tests'");
    let binaries: Vec<&str> = cargo_args.split_whitespace().filter(|a| *a != "--test").collect();
    assert!(!binaries.is_empty() && cargo_args.matches("--test ").count() == binaries.len(), "{cargo_args}");
    let tests: Vec<String> =
        binaries.iter().flat_map(|binary| binary_sources(binary)).flat_map(|f| test_names(&f)).collect();
    let filters: Vec<&str> = test_args.split_whitespace().filter(|a| !a.starts_with("--")).collect();
    assert!(filters.len() >= 5, "{what}: {test_args}");
    for filter in filters {
        assert!(
            tests.iter().any(|test| test.contains(filter)),
            "{what} names {filter}, which is no test of {binaries:?}: rename the filter with the test"
        );
    }
}

/// The README and docs/node-pulls.md promise the containerd releases the node agent is proven on. The proof is the
/// window run's record (docs/containerd-window.md, written by `make test-containerd-window` only when every release
/// passed): each release the docs name must be in it, the record must be of exactly the pinned releases (a pin moved
/// without a run fails here), and `make test` reruns only releases hack/tools.sh builds for it.
#[test]
fn every_containerd_release_the_docs_name_is_in_the_window_runs_record() {
    let read = |path: &str| std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    let recorded: BTreeMap<String, u32> = read("docs/containerd-window.md")
        .lines()
        .filter_map(|line| match line.split('|').map(str::trim).collect::<Vec<_>>()[..] {
            ["", release, passed, ""] => Some((release.to_string(), passed.parse().ok()?)),
            _ => None,
        })
        .collect();
    let counts: BTreeSet<u32> = recorded.values().copied().collect();
    assert!(counts.len() == 1 && counts.iter().all(|n| *n > 0), "the same tests pass on every release: {recorded:?}");

    let pinned: BTreeSet<String> = std::fs::read_dir(root().join("tools"))
        .expect("tools/")
        .map(|entry| entry.expect("tools/ entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name == "containerd" || name.starts_with("containerd-"))
        .map(|name| {
            let go_mod = read(&format!("tools/{name}/go.mod"));
            let require = go_mod.lines().find(|l| l.starts_with("require github.com/containerd/containerd"));
            let version = require.and_then(|l| l.split_whitespace().last()).expect("containerd's require line");
            version.trim_start_matches('v').to_string()
        })
        .collect();
    let releases: BTreeSet<String> = recorded.keys().cloned().collect();
    assert_eq!(
        releases, pinned,
        "docs/containerd-window.md is of other releases than the pins: make test-containerd-window"
    );

    let makefile = read("Makefile");
    let list = |name: &str| -> Vec<String> {
        let line = makefile.lines().find_map(|l| l.strip_prefix(&format!("{name} := "))).expect(name);
        line.split_whitespace().map(str::to_string).collect()
    };
    let minor_of = |release: &str| release.rsplit_once('.').map(|(minor, _)| minor.to_string()).expect("x.y.z");
    let window = list("CONTAINERD_WINDOW");
    let pinned_minors: BTreeSet<String> = pinned.iter().map(|release| minor_of(release)).collect();
    assert_eq!(window.iter().cloned().collect::<BTreeSet<_>>(), pinned_minors, "CONTAINERD_WINDOW is every pin");
    let tools = read("hack/tools.sh");
    let built = tools.lines().find_map(|l| l.strip_prefix("containerd_window=")).expect("containerd_window");
    for minor in list("CONTAINERD_RERUN") {
        assert!(built.trim_matches('"').split_whitespace().any(|b| b == minor), "make test reruns {minor}, unbuilt");
    }

    let release = regex::Regex::new(r"\b(\d+\.\d+)\.\d+\b").expect("regexp");
    for doc in ["README.md", "docs/node-pulls.md"] {
        let text = read(doc);
        let named: Vec<&str> = text
            .lines()
            .filter(|line| line.contains("containerd"))
            .flat_map(|line| release.captures_iter(line).map(|c| (c.get(0), c.get(1))).collect::<Vec<_>>())
            .filter_map(|(whole, minor)| window.contains(&minor?.as_str().to_string()).then_some(whole?.as_str()))
            .collect();
        assert!(!named.is_empty(), "{doc} names no containerd release");
        for name in named {
            assert!(
                recorded.contains_key(name),
                "{doc} says proven on containerd {name}; docs/containerd-window.md has {releases:?}"
            );
        }
    }
}

/// The source files of the test binary `binary`: `tests/<binary>.rs`, or each file of `tests/<binary>/`.
fn binary_sources(binary: &str) -> Vec<std::path::PathBuf> {
    let file = root().join(format!("tests/{binary}.rs"));
    if file.exists() {
        return vec![file];
    }
    let dir = root().join(format!("tests/{binary}"));
    let listed = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: no test binary {binary}: {e}", dir.display()));
    let files: Vec<_> = listed.map(|entry| entry.expect("a directory entry").path()).collect();
    files.into_iter().filter(|path| path.extension().is_some_and(|e| e == "rs")).collect()
}

/// The test functions a test file declares (an attribute line `#[test]` or `#[tokio::test...]`, then its `fn`).
fn test_names(file: &std::path::Path) -> Vec<String> {
    let source = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let mut names = Vec::new();
    let mut attribute = false;
    for line in source.lines().map(str::trim_start) {
        if line.starts_with("#[test]") || line.starts_with("#[tokio::test") {
            attribute = true;
        } else if attribute && (line.starts_with("fn ") || line.starts_with("async fn ")) {
            let name = line.trim_start_matches("async ").trim_start_matches("fn ");
            names.push(name.split(['(', '<']).next().unwrap_or_default().to_string());
            attribute = false;
        }
    }
    names
}
