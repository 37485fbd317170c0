//! Whether this node's containerd reads the directory the agent writes into. containerd takes its registry hosts
//! from the `config_path` in its config file, read once at its start; an agent writing anywhere else writes files
//! nobody reads, and the node looks configured while every pull of a planned address fails. The agent reads the
//! config file from the node (chart value `nodeAgent.containerdConfig`) and compares.

/// The directory containerd 2.2 and later read when their config sets no `config_path` (with `/etc/docker/certs.d`).
pub const DEFAULT_CONFIG_PATH: &str = "/etc/containerd/certs.d";

/// Where each config version keeps `config_path`: version 3 (containerd 2.x), version 2 (1.x and 2.x), version 1.
const CONFIG_PATH_TABLES: [&[&str]; 3] = [
    &["plugins", "io.containerd.cri.v1.images", "registry"],
    &["plugins", "io.containerd.grpc.v1.cri", "registry"],
    &["plugins", "cri", "registry"],
];

/// What containerd's config file says about the agent's directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuntimeCheck {
    /// Not checked: no config file was given to the agent.
    Unchecked,
    /// containerd reads the agent's directory: its `config_path` names it (alone or in a list), or sets none and the
    /// agent writes into containerd 2.2's default.
    Reads { config_path: Option<String> },
    /// containerd reads another directory, or none (`config_path` unset, or set to ""): the agent's files are never
    /// read on this node.
    Elsewhere { config_path: Option<String> },
    /// The config file could not be read or understood; says why.
    Unknown(String),
}

impl RuntimeCheck {
    /// The bounded label of the agent's metric.
    pub fn label(&self) -> &'static str {
        match self {
            RuntimeCheck::Unchecked => "unchecked",
            RuntimeCheck::Reads { .. } => "reads",
            RuntimeCheck::Elsewhere { .. } => "elsewhere",
            RuntimeCheck::Unknown(_) => "unknown",
        }
    }

    /// Whether the agent's files are known to go unread.
    pub fn unread(&self) -> bool {
        matches!(self, RuntimeCheck::Elsewhere { .. })
    }
}

/// Checks `config` (the text of containerd's config file, or why it could not be read) against `hosts_on_node`,
/// the directory the agent writes into as the node sees it.
pub fn check(config: Result<&str, &str>, hosts_on_node: &str) -> RuntimeCheck {
    let parsed = config
        .map_err(str::to_string)
        .and_then(|text| text.parse::<toml::Table>().map_err(|e| format!("not TOML: {e}")));
    let table = match parsed {
        Ok(table) => table,
        Err(why) => return RuntimeCheck::Unknown(why),
    };
    let set = CONFIG_PATH_TABLES.iter().find_map(|keys| {
        let table = keys.iter().try_fold(&table, |table, key| table.get(*key)?.as_table())?;
        table.get("config_path").map(|value| value.as_str().map(str::to_string))
    });
    let config_path = match set {
        Some(Some(path)) => path,
        Some(None) => return RuntimeCheck::Unknown("its registry config_path is not a string".into()),
        // An imported file may set it; the agent reads only the one file.
        None if table.get("imports").and_then(toml::Value::as_array).is_some_and(|i| !i.is_empty()) => {
            return RuntimeCheck::Unknown(
                "it sets no registry config_path and imports other files, which the agent does not read".into(),
            );
        }
        None if same_dir(hosts_on_node, DEFAULT_CONFIG_PATH) => return RuntimeCheck::Reads { config_path: None },
        None => return RuntimeCheck::Elsewhere { config_path: None },
    };
    if config_path.split(':').any(|dir| same_dir(dir, hosts_on_node)) {
        RuntimeCheck::Reads { config_path: Some(config_path) }
    } else {
        RuntimeCheck::Elsewhere { config_path: Some(config_path).filter(|p| !p.is_empty()) }
    }
}

fn same_dir(a: &str, b: &str) -> bool {
    !a.is_empty() && a.trim_end_matches('/') == b.trim_end_matches('/')
}

/// The check in words, for the agent's log and its Event; `None` when there is nothing to say.
pub fn describe(check: &RuntimeCheck, config_file: &str, hosts_on_node: &str) -> Option<String> {
    match check {
        RuntimeCheck::Unchecked | RuntimeCheck::Reads { config_path: Some(_) } => None,
        RuntimeCheck::Reads { config_path: None } => Some(format!(
            "containerd's config {config_file} sets no registry config_path: containerd 2.2 and later read \
             {DEFAULT_CONFIG_PATH} by default, older ones no hosts directory"
        )),
        RuntimeCheck::Elsewhere { config_path } => {
            let reads = match config_path {
                Some(path) => format!("reads registry hosts from {path}"),
                None => "sets no registry config_path".into(),
            };
            Some(format!(
                "containerd's config {config_file} {reads}, so it never reads {hosts_on_node}, where this agent \
                 writes: set the chart value nodeAgent.configPath to containerd's config_path (one directory), or \
                 set config_path = \"{hosts_on_node}\" in containerd's config and restart containerd"
            ))
        }
        RuntimeCheck::Unknown(why) => {
            Some(format!("cannot tell whether containerd reads {hosts_on_node}: its config {config_file}: {why}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OURS: &str = "/etc/containerd/certs.d";

    fn reads(path: &str) -> RuntimeCheck {
        RuntimeCheck::Reads { config_path: Some(path.into()) }
    }

    #[test]
    fn each_config_version_names_its_config_path_in_its_own_table() {
        let v3 = "version = 3\n[plugins.'io.containerd.cri.v1.images'.registry]\n  config_path = \"/etc/containerd/certs.d\"\n";
        let v2 = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".registry]\nconfig_path = \"/etc/containerd/certs.d/\"\n";
        let v1 = "[plugins.cri.registry]\nconfig_path = \"/etc/containerd/certs.d\"\n";
        // Dotted keys and inline tables are the same TOML.
        let dotted = "version = 3\nplugins.'io.containerd.cri.v1.images'.registry = { config_path = \"/etc/containerd/certs.d\" }\n";
        assert_eq!(check(Ok(v3), OURS), reads(OURS));
        assert_eq!(check(Ok(v2), OURS), reads("/etc/containerd/certs.d/"));
        assert_eq!(check(Ok(v1), OURS), reads(OURS));
        assert_eq!(check(Ok(dotted), OURS), reads(OURS));
    }

    #[test]
    fn another_directory_or_none_means_the_agents_files_go_unread() {
        let k3s = "version = 3\n[plugins.'io.containerd.cri.v1.images'.registry]\nconfig_path = \"/var/lib/rancher/k3s/agent/etc/containerd/certs.d\"\n";
        let found = check(Ok(k3s), OURS);
        assert_eq!(
            found,
            RuntimeCheck::Elsewhere { config_path: Some("/var/lib/rancher/k3s/agent/etc/containerd/certs.d".into()) }
        );
        assert!(found.unread());
        let said = describe(&found, "/etc/containerd/config.toml", OURS).unwrap_or_default();
        assert!(said.contains("reads registry hosts from /var/lib/rancher/k3s"), "{said}");
        assert!(said.contains("nodeAgent.configPath"), "{said}");
        let emptied = "[plugins.\"io.containerd.grpc.v1.cri\".registry]\nconfig_path = \"\"\n";
        assert_eq!(check(Ok(emptied), OURS), RuntimeCheck::Elsewhere { config_path: None });
        // Unset: containerd 2.2's default is ours only when the agent writes there.
        assert_eq!(check(Ok("version = 3\n"), OURS), RuntimeCheck::Reads { config_path: None });
        assert_eq!(check(Ok("version = 3\n"), "/srv/certs.d"), RuntimeCheck::Elsewhere { config_path: None });
    }

    #[test]
    fn a_path_list_that_names_the_agents_directory_is_read() {
        let listed = "[plugins.\"io.containerd.grpc.v1.cri\".registry]\nconfig_path = \"/etc/docker/certs.d:/etc/containerd/certs.d\"\n";
        assert_eq!(check(Ok(listed), OURS), reads("/etc/docker/certs.d:/etc/containerd/certs.d"));
    }

    #[test]
    fn what_cannot_be_read_is_unknown_never_a_verdict() {
        assert!(matches!(check(Err("No such file"), OURS), RuntimeCheck::Unknown(why) if why == "No such file"));
        assert!(matches!(check(Ok("[plugins"), OURS), RuntimeCheck::Unknown(why) if why.starts_with("not TOML")));
        let imports = "version = 3\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n";
        assert!(matches!(check(Ok(imports), OURS), RuntimeCheck::Unknown(why) if why.contains("imports")));
        let number = "[plugins.cri.registry]\nconfig_path = 1\n";
        assert!(matches!(check(Ok(number), OURS), RuntimeCheck::Unknown(_)));
        assert!(!check(Ok(imports), OURS).unread());
    }
}
