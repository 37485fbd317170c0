//! No import circle inside `src/`: at every level of the module tree, the sibling modules (their files together)
//! import one another in one direction only, so each can be read, tested and moved without the ones that use it.
//! Read from the source: every `crate::` and `super::` path outside test code and comments, use trees expanded.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

/// Every module of the library with its file: `src/a/b.rs` and `src/a/b/mod.rs` are `a::b`, `src/lib.rs` the crate.
fn modules(src: &Path) -> BTreeMap<Module, PathBuf> {
    let mut found = BTreeMap::new();
    let mut pending = vec![src.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            let Ok(relative) = path.strip_prefix(src) else { continue };
            let Some(relative) = relative.to_str().and_then(|r| r.strip_suffix(".rs")) else { continue };
            let mut module: Module = relative.split('/').map(str::to_string).collect();
            match module.last().map(String::as_str) {
                Some("main") if module.len() == 1 => continue, // the binary, a crate of its own
                Some("mod" | "lib") => {
                    module.pop();
                }
                _ => {}
            }
            found.insert(module, path);
        }
    }
    found
}

/// The code of a file before its test module, comment lines left out.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines().filter(|line| !line.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// The paths a use tree starting at `text` names: `a::b::{c, d::e}` gives `a::b::c` and `a::b::d::e`.
fn use_tree(text: &str) -> Vec<Vec<String>> {
    let mut prefix = Vec::new();
    let mut rest = text.trim_start();
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let end = group
                .char_indices()
                .find(|&(_, c)| {
                    depth += match c {
                        '{' => 1,
                        '}' => -1,
                        _ => 0,
                    };
                    depth == 0
                })
                .map_or(group.len(), |(i, _)| i);
            let mut paths = Vec::new();
            let (mut depth, mut start) = (0, 0);
            let inner = &group[..end];
            for (i, c) in inner.char_indices().chain([(inner.len(), ',')]) {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        for path in use_tree(&inner[start..i]) {
                            paths.push([prefix.clone(), path].concat());
                        }
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            return paths;
        }
        let length = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
        if length == 0 {
            return vec![prefix];
        }
        prefix.push(rest[..length].to_string());
        match rest[length..].strip_prefix("::") {
            Some(after) => rest = after.trim_start(),
            None => return vec![prefix],
        }
    }
}

/// The modules `module`'s file imports from, each the longest module that a path names.
fn imports(module: &Module, text: &str, known: &BTreeMap<Module, PathBuf>) -> BTreeSet<Module> {
    let code = code(text);
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices("::") {
        let before = &code[..at];
        let root = if before.ends_with("crate") {
            Vec::new()
        } else if before.ends_with("super") {
            module[..module.len().saturating_sub(1)].to_vec()
        } else {
            continue;
        };
        let word_start = before.trim_end_matches(|c: char| c.is_alphanumeric() || c == '_').len();
        if word_start > 0 && before[..word_start].ends_with("::") {
            continue; // a `super` inside a longer path was taken with its start
        }
        for path in use_tree(&code[at + 2..]) {
            let mut base = root.clone();
            let mut path = path.as_slice();
            while let Some(("super", rest)) = path.split_first().map(|(first, rest)| (first.as_str(), rest)) {
                base.pop();
                path = rest;
            }
            let full: Module = [base, path.to_vec()].concat();
            if let Some(target) = (0..=full.len()).rev().map(|n| full[..n].to_vec()).find(|m| known.contains_key(m)) {
                found.insert(target);
            }
        }
    }
    found
}

/// Under each parent, which child imports which: `a -> b` when a file in `a`'s subtree imports into `b`'s.
fn sibling_imports(src: &Path) -> BTreeMap<Module, BTreeMap<String, BTreeSet<String>>> {
    let known = modules(src);
    let mut graph: BTreeMap<Module, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (module, path) in &known {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for target in imports(module, &text, &known) {
            let shared = module.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if shared < module.len() && shared < target.len() {
                let children = graph.entry(module[..shared].to_vec()).or_default();
                children.entry(module[shared].clone()).or_default().insert(target[shared].clone());
            }
        }
    }
    graph
}

/// A circle among `children`, as the modules along it, if there is one.
fn circle(children: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        children: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            return Some([&path[at..], &[node.to_string()]].concat());
        }
        if !done.insert(node.to_string()) {
            return None;
        }
        path.push(node.to_string());
        for next in children.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, children, path, done) {
                return Some(found);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    children.keys().find_map(|start| visit(start, children, &mut Vec::new(), &mut done))
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = sibling_imports(&src);
    assert!(graph.get(&Vec::new()).is_some_and(|top| top.len() >= 10), "the top level was read: {graph:?}");
    let circles: Vec<String> = graph
        .iter()
        .filter_map(|(parent, children)| {
            let parent = if parent.is_empty() { "crate".to_string() } else { parent.join("::") };
            circle(children).map(|along| format!("under {parent}: {}", along.join(" -> ")))
        })
        .collect();
    assert!(circles.is_empty(), "import circles (merge the two, or move what both need to a third): {circles:#?}");
}

#[test]
fn the_reading_sees_braced_relative_and_nested_imports() {
    let paths = use_tree("registry::{self, values::{derive, Ports}, model::Registry};");
    assert_eq!(
        paths,
        [
            vec!["registry", "self"],
            vec!["registry", "values", "derive"],
            vec!["registry", "values", "Ports"],
            vec!["registry", "model", "Registry"]
        ]
    );
    let known: BTreeMap<Module, PathBuf> = [vec![], vec!["a"], vec!["a", "b"], vec!["c"]]
        .into_iter()
        .map(|m| (m.into_iter().map(String::from).collect(), PathBuf::new()))
        .collect();
    let module: Module = vec!["a".into(), "b".into()];
    let text = "use super::super::c::Thing;\n// use crate::c::Commented;\nfn f() { crate::a::g() }\n\
                #[cfg(test)]\nmod tests { use crate::c::OnlyInTests; }";
    let found: Vec<Module> = imports(&module, text, &known).into_iter().collect();
    assert_eq!(found, [vec!["a".to_string()], vec!["c".to_string()]]);
    // A circle is found, and a chain is not one.
    let graph = |edges: &[(&str, &str)]| {
        let mut children: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (from, to) in edges {
            children.entry(from.to_string()).or_default().insert(to.to_string());
        }
        children
    };
    assert_eq!(circle(&graph(&[("a", "b"), ("b", "c")])), None);
    assert_eq!(
        circle(&graph(&[("a", "b"), ("b", "c"), ("c", "a")])),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}
