//! The pure core stays pure, and its one list (`src/pure.md`) is the one `make mutants` and docs/architecture.md
//! use: a module on the list that reaches for a file, a socket, a process, a task or an API client fails here, and
//! so does a list the others no longer follow.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The paths `src/pure.md` lists, each in backticks starting `src/`.
fn pure_paths() -> Vec<String> {
    let list = std::fs::read_to_string(root().join("src/pure.md")).expect("src/pure.md");
    let paths: Vec<String> = list
        .split('`')
        .filter(|part| part.starts_with("src/") && (part.ends_with(".rs") || part.ends_with('/')))
        .map(str::to_string)
        .collect();
    assert!(paths.len() >= 10, "src/pure.md lists too few paths: {paths:?}");
    paths
}

/// The Rust files under a listed path, tests left out (a test may read a fixture file).
fn files(path: &str) -> Vec<PathBuf> {
    let full = root().join(path);
    if full.is_file() {
        return vec![full];
    }
    let mut found = Vec::new();
    let mut pending = vec![full];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("an entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
            if path.is_dir() {
                pending.push(path);
            } else if name.ends_with(".rs") && name != "tests.rs" && !name.ends_with("_tests.rs") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// What a pure module must not use, and why each is I/O.
const FORBIDDEN: [(&str, &str); 9] = [
    ("std::fs", "files"),
    ("std::net::Tcp", "sockets"),
    ("std::process", "processes"),
    ("std::env::var", "the environment"),
    ("tokio::spawn", "tasks"),
    ("tokio::net", "sockets"),
    ("tokio::fs", "files"),
    ("kube::Client", "an API client"),
    ("Api<", "an API client"),
];

/// The code of `text` before its `#[cfg(test)]` module, comments left out.
fn code(text: &str) -> Vec<&str> {
    text.lines()
        .take_while(|line| line.trim() != "#[cfg(test)]")
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect()
}

fn uses(line: &str, forbidden: &str) -> bool {
    line.contains(forbidden) || (forbidden == "kube::Client" && line.contains("use kube::") && line.contains("Client"))
}

#[test]
fn no_module_of_the_pure_core_does_io() {
    let mut found = Vec::new();
    for path in pure_paths() {
        for file in files(&path) {
            let text = std::fs::read_to_string(&file).expect("a source file");
            for (number, line) in code(&text).into_iter().enumerate() {
                for (forbidden, what) in FORBIDDEN {
                    if uses(line, forbidden) {
                        found.push(format!("{}:{}: {what} ({forbidden})", file.display(), number + 1));
                    }
                }
            }
        }
    }
    assert!(found.is_empty(), "the pure core does I/O:\n{}", found.join("\n"));
}

#[test]
fn the_check_finds_io_where_there_is_some() {
    let shell = "use kube::{Api, Client};\nfn f() { let _ = std::fs::read(\"x\"); }\n#[cfg(test)]\nmod tests {}";
    let lines = code(shell);
    assert!(lines.iter().any(|l| uses(l, "kube::Client")) && lines.iter().any(|l| uses(l, "std::fs")));
    let test_only = "fn f() {}\n#[cfg(test)]\nmod tests { fn g() { std::fs::read(\"x\"); } }";
    assert!(!code(test_only).iter().any(|l| uses(l, "std::fs")), "a test may read a fixture");
}

/// The files `hack/mutants.sh` gives each part, from its `files_of` cases.
fn mutants_files() -> Vec<String> {
    let script = std::fs::read_to_string(root().join("hack/mutants.sh")).expect("hack/mutants.sh");
    script
        .lines()
        .filter(|line| line.trim_start().starts_with(|c: char| c.is_ascii_lowercase()) && line.contains(") echo \""))
        .flat_map(|line| line.split('"').nth(1).unwrap_or_default().split_whitespace().map(str::to_string))
        .collect()
}

fn covers(pattern: &str, file: &Path) -> bool {
    let relative = file.strip_prefix(root()).expect("under the root").display().to_string();
    match pattern.strip_suffix("*.rs") {
        Some(dir) => relative.starts_with(dir) && !relative[dir.len()..].contains('/'),
        None => relative == pattern,
    }
}

#[test]
fn make_mutants_tests_every_file_of_the_pure_core() {
    let patterns = mutants_files();
    let missed: Vec<String> = pure_paths()
        .iter()
        .flat_map(|path| files(path))
        .filter(|file| !patterns.iter().any(|pattern| covers(pattern, file)))
        .map(|file| file.display().to_string())
        .collect();
    assert!(missed.is_empty(), "pure files no part of hack/mutants.sh tests: {missed:?}");
}

#[test]
fn docs_architecture_names_every_path_of_the_pure_core() {
    let architecture = std::fs::read_to_string(root().join("docs/architecture.md")).expect("docs/architecture.md");
    let missing: Vec<String> = pure_paths().into_iter().filter(|path| !architecture.contains(path.as_str())).collect();
    assert!(missing.is_empty(), "docs/architecture.md does not name {missing:?}");
}

/// The concerns: what the bottom layers must not import.
const CONCERNS: [&str; 7] = ["publish", "pull", "node", "registry", "agent", "controller", "cli"];

/// The lines of the files under `paths` that name a module of `modules` (`crate::<module>`), their tests included.
fn imports_of(paths: &[&str], modules: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for path in paths {
        for file in files(path) {
            let text = std::fs::read_to_string(&file).expect("a source file");
            for (number, line) in text.lines().enumerate().filter(|(_, l)| !l.trim_start().starts_with("//")) {
                let named = |module: &&&str| {
                    let name = format!("crate::{module}");
                    line.match_indices(&name).any(|(at, _)| {
                        !line[at + name.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
                    })
                };
                if let Some(module) = modules.iter().find(named) {
                    found.push(format!("{}:{}: crate::{module}", file.display(), number + 1));
                }
            }
        }
    }
    found
}

#[test]
fn the_bottom_layers_import_no_concern() {
    let found = imports_of(&["src/settings.rs", "src/events.rs", "src/hosting/", "src/keys.rs"], &CONCERNS);
    assert!(found.is_empty(), "a bottom layer imports a concern:\n{}", found.join("\n"));
}

#[test]
fn the_controllers_node_decision_imports_nothing_of_the_agent() {
    let found = imports_of(&["src/node/"], &["agent", "controller", "cli"]);
    assert!(found.is_empty(), "src/node/ imports a process's code:\n{}", found.join("\n"));
}

#[test]
fn the_import_check_finds_a_concern_named_and_no_prefix_of_one() {
    let scratch = std::env::temp_dir().join(format!("lrp-imports-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("a scratch directory");
    let file = scratch.join("layer.rs");
    std::fs::write(&file, "use crate::publish::Notice;\nuse crate::publisher_like;\n// crate::node\n").expect("write");
    let path = file.display().to_string();
    let found = imports_of(&[path.as_str()], &CONCERNS);
    std::fs::remove_dir_all(&scratch).expect("remove the scratch directory");
    assert_eq!(found, [format!("{path}:1: crate::publish")]);
}

/// The modules the stored mutation runs measured (a row each in docs/mutants/<part>.md's tables).
fn measured() -> std::collections::BTreeSet<String> {
    let mut modules = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(root().join("docs/mutants")).expect("docs/mutants") {
        let path = entry.expect("an entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("md") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a stored run");
        for row in text.lines().filter(|l| l.starts_with("| `src/")) {
            modules.extend(row.split('`').nth(1).map(str::to_string));
        }
    }
    modules
}

/// The files with a missed mutant that the stored reports leave NOT EXPLAINED (docs/mutants/equivalent.txt gives
/// none: neither equivalent nor caught since by a named test).
fn unexplained_misses() -> std::collections::BTreeSet<String> {
    let mut files = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(root().join("docs/mutants")).expect("docs/mutants") {
        let text = std::fs::read_to_string(entry.expect("an entry").path()).unwrap_or_default();
        for line in text.lines().filter(|l| l.starts_with("- `src/") && l.contains("NOT EXPLAINED")) {
            files.extend(line.trim_start_matches("- `").split(':').next().map(str::to_string));
        }
    }
    files
}

#[test]
fn every_file_of_the_pure_core_has_a_stored_mutation_run_and_each_missed_mutant_explained() {
    let measured = measured();
    let unexplained = unexplained_misses();
    let unmeasured: Vec<String> = pure_paths()
        .iter()
        .flat_map(|path| files(path))
        // Test fixtures (compiled for tests only) and files with no function have no mutants.
        .filter(|file| file.file_name().is_some_and(|name| name != "fixtures.rs"))
        .filter(|file| std::fs::read_to_string(file).is_ok_and(|text| text.contains("fn ")))
        .map(|file| file.strip_prefix(root()).expect("under the root").display().to_string())
        // Every missed mutant explained: equivalent, or caught since by a test docs/mutants/equivalent.txt names
        // (until the part runs again), so each file is at 100 % or says why not.
        .filter(|file| !measured.contains(file) || unexplained.contains(file))
        .collect();
    assert!(
        unmeasured.is_empty(),
        "pure files without a stored mutation run, or with a missed mutant nobody explained (run \
         `hack/mutants.sh <part>`, kill it or say why in docs/mutants/equivalent.txt, and commit docs/mutants): \
         {unmeasured:?}"
    );
}
