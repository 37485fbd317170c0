//! The chart's README, generated from `values.yaml`: every value with its default and the `# --` comment above it
//! (the helm-docs convention), so the documentation cannot drift from the chart. A value without a comment is an
//! error. A commented map is one row (its default shown whole); an uncommented map is documented by its keys.

use std::path::Path;

use serde_json::Value;

const HEADER: &str =
    "<!-- Generated from values.yaml by `make manifests`; do not edit. A test fails when it is stale. -->
# local-registry-publisher Helm chart

Keeps `kube-public/local-registry-hosting` (KEP-1755) true to the registry running in the cluster. See the
[project README](../../README.md) for what it does, the security model and troubleshooting.

```sh
helm install local-registry-publisher charts/local-registry-publisher \\
  --namespace local-registry-publisher --create-namespace
```

## Values

| Key | Default | Description |
|---|---|---|
";

/// The README for the chart in `chart_dir`, or which value lacks a description.
pub fn render(chart_dir: &Path) -> Result<String, String> {
    let path = chart_dir.join("values.yaml");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let values: Value = serde_saphyr::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = String::from(HEADER);
    for entry in entries(&text).into_iter().filter(|e| !e.parent_documented) {
        let default =
            lookup(&values, &entry.path).ok_or_else(|| format!("values.yaml: {} not found", entry.dotted()))?;
        let is_map = default.as_object().is_some_and(|m| !m.is_empty());
        match (&entry.description, is_map) {
            (None, true) => continue,
            (None, false) => return Err(format!("values.yaml: {} has no `# --` description", entry.dotted())),
            (Some(description), _) => {
                out.push_str(&format!(
                    "| `{}` | `{}` | {} |\n",
                    entry.dotted(),
                    cell(&default.to_string()),
                    cell(description)
                ));
            }
        }
    }
    Ok(out)
}

struct Entry {
    path: Vec<String>,
    description: Option<String>,
    /// Inside a map that has its own row.
    parent_documented: bool,
}

impl Entry {
    fn dotted(&self) -> String {
        self.path.join(".")
    }
}

/// Every key of the file in order, with its path and the `# --` comment just above it.
fn entries(text: &str) -> Vec<Entry> {
    let mut found = Vec::new();
    // (indent, key, documented) of the enclosing maps.
    let mut stack: Vec<(usize, String, bool)> = Vec::new();
    let mut comment: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if let Some(rest) = trimmed.strip_prefix("# --") {
            comment = Some(rest.trim().to_string());
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix('#') {
            if let Some(text) = comment.as_mut() {
                text.push(' ');
                text.push_str(rest.trim());
            }
            continue;
        }
        let Some((key, _)) = trimmed.split_once(':').filter(|(k, _)| is_key(k)) else {
            if trimmed.is_empty() {
                comment = None;
            }
            continue;
        };
        stack.retain(|(level, _, _)| *level < indent);
        let parent_documented = stack.iter().any(|(_, _, documented)| *documented);
        let mut path: Vec<String> = stack.iter().map(|(_, k, _)| k.clone()).collect();
        path.push(key.to_string());
        let description = comment.take();
        stack.push((indent, key.to_string(), description.is_some()));
        found.push(Entry { path, description, parent_documented });
    }
    found
}

fn is_key(key: &str) -> bool {
    !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn lookup<'a>(values: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(values, |value, key| value.get(key))
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart_with(values: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("values.yaml"), values).unwrap();
        dir
    }

    #[test]
    fn documents_leaves_and_commented_maps_and_refuses_undocumented_values() {
        let dir = chart_with(
            "# -- The image.\n# Continued.\nimage:\n  # -- Tag.\n  tag: \"\"\n  # -- Digest | or not.\n  digest: x\n\
             # -- Whole.\nctx:\n  runAsUser: 1\nplain:\n  # -- Inner.\n  list: []\n",
        );
        let readme = render(dir.path()).unwrap();
        let rows: Vec<&str> = readme.lines().filter(|l| l.starts_with("| `")).collect();
        assert_eq!(
            rows,
            [
                "| `image` | `{\"digest\":\"x\",\"tag\":\"\"}` | The image. Continued. |",
                "| `ctx` | `{\"runAsUser\":1}` | Whole. |",
                "| `plain.list` | `[]` | Inner. |",
            ]
        );
        let missing = chart_with("a:\n  # -- Fine.\n  b: 1\n  c: 2\n");
        assert_eq!(render(missing.path()).unwrap_err(), "values.yaml: a.c has no `# --` description");
    }
}
