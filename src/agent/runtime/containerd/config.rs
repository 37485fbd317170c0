//! Whether this node's containerd reads the directory the agent writes into. containerd takes its registry hosts
//! from the `config_path` in its config file, read once at its start; an agent writing anywhere else writes files
//! nobody reads, and the node looks configured while every pull of a planned address fails. The agent reads the
//! config file from the node (chart value `nodeAgent.runtimeConfig`) and compares.

use crate::agent::runtime::Reading;
use crate::node::api::state::ConfigPathCheck;
use crate::node::{Endpoint, NodePlan};

/// The directory containerd 2.2 and later read when their config sets no `config_path` (with `/etc/docker/certs.d`).
pub const DEFAULT_CONFIG_PATH: &str = "/etc/containerd/certs.d";
/// containerd 2.2 and later's `config_path` when the config sets none (and no legacy `mirrors`).
const DEFAULT_CONFIG_PATH_LIST: &str = "/etc/containerd/certs.d:/etc/docker/certs.d";

/// The containerd release a node runs, from its Node's `status.nodeInfo.containerRuntimeVersion`
/// (`containerd://2.3.7`, `containerd://v1.7.35`): which `config_path` it reads depends on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Release {
    pub major: u32,
    pub minor: u32,
}

impl Release {
    /// `None` for another runtime or a version that is not `major.minor...`.
    pub fn of(runtime_version: &str) -> Option<Self> {
        let version = runtime_version.strip_prefix("containerd://")?;
        let version = version.strip_prefix('v').unwrap_or(version);
        let mut parts = version.split(['.', '-', '+']);
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some(Self { major, minor })
    }

    const fn at_least(self, major: u32, minor: u32) -> bool {
        self.major > major || (self.major == major && self.minor >= minor)
    }

    /// From 2.1 the CRI pulls through the transfer service, which takes `config_path` as one directory (a list
    /// matches nothing: containerd#12808), unless the CRI config forces the local pull that splits it.
    fn takes_one_directory(self, config: &toml::Table) -> bool {
        self.at_least(2, 1) && !forces_local_pull(config)
    }
}

/// The entries of `plan` that containerd `release` can read, and for each other its address and why not: before
/// 2.0 a `[host]` (or `server`) URL holding an IPv6 literal fails to parse (containerd#10055) and the whole file is
/// dropped, so such an entry is not written on those nodes but told. An unknown release gets every entry.
pub fn readable(plan: &NodePlan, release: Option<Release>) -> (NodePlan, Vec<(String, String)>) {
    let Some(release) = release.filter(|r| !r.at_least(2, 0)) else {
        return (plan.clone(), Vec::new());
    };
    let (hosts, unreadable): (Vec<_>, Vec<_>) = plan
        .hosts
        .iter()
        .cloned()
        .partition(|entry| !entry.endpoint.is_ipv6() && !entry.server.as_ref().is_some_and(Endpoint::is_ipv6));
    let why = format!(
        "containerd {}.{} cannot read a hosts.toml whose host is an IPv6 address (2.0 and later can: \
         containerd#10055), so none is written",
        release.major, release.minor
    );
    let told = unreadable.into_iter().map(|entry| (entry.address, why.clone())).collect();
    (NodePlan { hosts, ..plan.clone() }, told)
}

/// The CRI image settings that make containerd 2.1 and later pull locally instead of through the transfer service
/// (containerd `internal/cri/config` `CheckLocalImagePullConfigs`), in a version 3 config's images table or a
/// version 2 config's CRI table.
fn forces_local_pull(config: &toml::Table) -> bool {
    let tables: [&[&str]; 3] = [
        &["plugins", "io.containerd.cri.v1.images"],
        &["plugins", "io.containerd.grpc.v1.cri"],
        &["plugins", "io.containerd.grpc.v1.cri", "containerd"],
    ];
    tables.iter().filter_map(|keys| keys.iter().try_fold(config, |t, key| t.get(*key)?.as_table())).any(|table| {
        let flag = |key: &str| table.get(key).and_then(toml::Value::as_bool);
        let non_empty = |key: &str| {
            let registry = table.get("registry").and_then(toml::Value::as_table);
            registry.and_then(|r| r.get(key)).and_then(toml::Value::as_table).is_some_and(|t| !t.is_empty())
        };
        flag("use_local_image_pull") == Some(true)
            || flag("discard_unpacked_layers") == Some(true)
            || flag("image_pull_with_sync_fs") == Some(true)
            || flag("disable_snapshot_annotations") == Some(false)
            || table.get("max_concurrent_downloads").and_then(toml::Value::as_integer).is_some_and(|n| n != 3)
            || ["mirrors", "configs", "auths"].into_iter().any(non_empty)
    })
}

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
    /// `config_path` is a list (its own, or 2.2's default when unset) that this release's transfer service takes as
    /// one directory name, so it reads none of them, the agent's included.
    ListIgnored { config_path: String, release: Release },
    /// The config file could not be read or understood; says why.
    Unknown(String),
}

impl RuntimeCheck {
    /// What the node's state (and the agent's metric) says of it.
    pub fn label(&self) -> ConfigPathCheck {
        match self {
            RuntimeCheck::Unchecked => ConfigPathCheck::Unchecked,
            RuntimeCheck::Reads { .. } => ConfigPathCheck::Reads,
            RuntimeCheck::Elsewhere { .. } | RuntimeCheck::ListIgnored { .. } => ConfigPathCheck::Elsewhere,
            RuntimeCheck::Unknown(_) => ConfigPathCheck::Unknown,
        }
    }

    /// The check as the runtime-neutral [`Reading`], with `said` (see [`describe`]).
    pub fn reading(&self, said: Option<String>) -> Reading {
        Reading { check: self.label(), config_file: None, config_path: self.config_path(), said }
    }

    /// The `config_path` the config names, when it names one.
    pub fn config_path(&self) -> Option<String> {
        match self {
            RuntimeCheck::Reads { config_path } | RuntimeCheck::Elsewhere { config_path } => config_path.clone(),
            RuntimeCheck::ListIgnored { config_path, .. } => Some(config_path.clone()),
            RuntimeCheck::Unchecked | RuntimeCheck::Unknown(_) => None,
        }
    }

    /// Whether the agent's files are known to go unread.
    pub fn unread(&self) -> bool {
        matches!(self, RuntimeCheck::Elsewhere { .. } | RuntimeCheck::ListIgnored { .. })
    }
}

/// Checks `config` (the text of containerd's config file, or why it could not be read) against `ours`,
/// the agent's config_path (the directory it writes into) as the node sees it, as `release` reads it (`None`: not known, so a list is
/// taken as containerd 1.7 and 2.0 read it, and an unset `config_path` as 2.2 does).
pub fn check(config: Result<&str, &str>, ours: &str, release: Option<Release>) -> RuntimeCheck {
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
        // Before 2.2 an unset config_path reads no hosts directory.
        None if release.is_some_and(|r| !r.at_least(2, 2)) => return RuntimeCheck::Elsewhere { config_path: None },
        None => match release.filter(|r| r.takes_one_directory(&table)) {
            Some(release) => {
                return RuntimeCheck::ListIgnored { config_path: DEFAULT_CONFIG_PATH_LIST.into(), release };
            }
            None if same_dir(ours, DEFAULT_CONFIG_PATH) => return RuntimeCheck::Reads { config_path: None },
            None => return RuntimeCheck::Elsewhere { config_path: None },
        },
    };
    if let Some(release) = release.filter(|r| config_path.contains(':') && r.takes_one_directory(&table)) {
        return RuntimeCheck::ListIgnored { config_path, release };
    }
    if config_path.split(':').any(|dir| same_dir(dir, ours)) {
        RuntimeCheck::Reads { config_path: Some(config_path) }
    } else {
        RuntimeCheck::Elsewhere { config_path: Some(config_path).filter(|p| !p.is_empty()) }
    }
}

fn same_dir(a: &str, b: &str) -> bool {
    !a.is_empty() && a.trim_end_matches('/') == b.trim_end_matches('/')
}

/// The check in words, for the agent's log and its Event; `None` when there is nothing to say.
pub fn describe(check: &RuntimeCheck, config_file: &str, ours: &str) -> Option<String> {
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
                "containerd's config {config_file} {reads}, so it never reads {ours}, where this agent \
                 writes: set the chart value nodeAgent.configPath to containerd's config_path (one directory), or \
                 set config_path = \"{ours}\" in containerd's config and restart containerd"
            ))
        }
        RuntimeCheck::ListIgnored { config_path, release } => Some(format!(
            "containerd's config {config_file} {}, a list that containerd {}.{} takes as one directory name (its \
             transfer service does not split it: containerd#12808), so it reads none of them and never reads \
             {ours}, where this agent writes: set config_path = \"{ours}\" alone in containerd's \
             config and restart containerd",
            if config_path == DEFAULT_CONFIG_PATH_LIST {
                format!("sets no registry config_path, whose default is {config_path}")
            } else {
                format!("sets registry config_path = {config_path:?}")
            },
            release.major,
            release.minor,
        )),
        RuntimeCheck::Unknown(why) => {
            Some(format!("cannot tell whether containerd reads {ours}: its config {config_file}: {why}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reading_carries_the_config_path_the_config_names_and_none_it_does_not() {
        let named = |path: &str| Some(path.to_string());
        let reads = RuntimeCheck::Reads { config_path: named("/etc/containerd/certs.d") };
        assert_eq!(reads.reading(None).config_path, named("/etc/containerd/certs.d"));
        let elsewhere = RuntimeCheck::Elsewhere { config_path: None };
        assert_eq!(elsewhere.reading(None).config_path, None);
        let list = RuntimeCheck::ListIgnored { config_path: "/a:/b".into(), release: Release { major: 2, minor: 3 } };
        let reading = list.reading(Some("why".into()));
        assert_eq!(
            (reading.check, reading.config_path, reading.said),
            (ConfigPathCheck::Elsewhere, named("/a:/b"), named("why"))
        );
        assert_eq!(RuntimeCheck::Unchecked.reading(None).config_path, None);
        assert_eq!(RuntimeCheck::Unknown("unreadable".into()).reading(None).config_path, None);
    }

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
        assert_eq!(check(Ok(v3), OURS, None), reads(OURS));
        assert_eq!(check(Ok(v2), OURS, None), reads("/etc/containerd/certs.d/"));
        assert_eq!(check(Ok(v1), OURS, None), reads(OURS));
        assert_eq!(check(Ok(dotted), OURS, None), reads(OURS));
    }

    #[test]
    fn another_directory_or_none_means_the_agents_files_go_unread() {
        let k3s = "version = 3\n[plugins.'io.containerd.cri.v1.images'.registry]\nconfig_path = \"/var/lib/rancher/k3s/agent/etc/containerd/certs.d\"\n";
        let found = check(Ok(k3s), OURS, None);
        assert_eq!(
            found,
            RuntimeCheck::Elsewhere { config_path: Some("/var/lib/rancher/k3s/agent/etc/containerd/certs.d".into()) }
        );
        assert!(found.unread());
        let said = describe(&found, "/etc/containerd/config.toml", OURS).unwrap_or_default();
        assert!(said.contains("reads registry hosts from /var/lib/rancher/k3s"), "{said}");
        assert!(said.contains("nodeAgent.configPath"), "{said}");
        let emptied = "[plugins.\"io.containerd.grpc.v1.cri\".registry]\nconfig_path = \"\"\n";
        assert_eq!(check(Ok(emptied), OURS, None), RuntimeCheck::Elsewhere { config_path: None });
        // Unset: containerd 2.2's default is ours only when the agent writes there.
        assert_eq!(check(Ok("version = 3\n"), OURS, None), RuntimeCheck::Reads { config_path: None });
        assert_eq!(check(Ok("version = 3\n"), "/srv/certs.d", None), RuntimeCheck::Elsewhere { config_path: None });
    }

    #[test]
    fn a_path_list_that_names_the_agents_directory_is_read() {
        let listed = "[plugins.\"io.containerd.grpc.v1.cri\".registry]\nconfig_path = \"/etc/docker/certs.d:/etc/containerd/certs.d\"\n";
        assert_eq!(check(Ok(listed), OURS, None), reads("/etc/docker/certs.d:/etc/containerd/certs.d"));
    }

    #[test]
    fn a_release_is_read_from_the_nodes_runtime_version() {
        assert_eq!(Release::of("containerd://2.3.7"), Some(Release { major: 2, minor: 3 }));
        assert_eq!(Release::of("containerd://v1.7.35"), Some(Release { major: 1, minor: 7 }));
        assert_eq!(Release::of("containerd://2.2.0-rc.1"), Some(Release { major: 2, minor: 2 }));
        assert_eq!(Release::of("cri-o://1.33.0"), None);
        assert_eq!(Release::of("containerd://"), None);
    }

    #[test]
    fn a_path_list_is_read_as_the_nodes_release_reads_it() {
        let listed = "version = 3\n[plugins.'io.containerd.cri.v1.images'.registry]\nconfig_path = \"/etc/docker/certs.d:/etc/containerd/certs.d\"\n";
        let list = "/etc/docker/certs.d:/etc/containerd/certs.d";
        let [r17, r20, r21, r24] =
            [(1, 7), (2, 0), (2, 1), (2, 4)].map(|(major, minor)| Some(Release { major, minor }));
        // containerd 1.7 and 2.0 split it; 2.1 and later take it as one directory name.
        assert_eq!(check(Ok(listed), OURS, r17), reads(list));
        assert_eq!(check(Ok(listed), OURS, r20), reads(list));
        let ignored = check(Ok(listed), OURS, r24);
        assert_eq!(
            ignored,
            RuntimeCheck::ListIgnored { config_path: list.into(), release: Release { major: 2, minor: 4 } }
        );
        assert!(ignored.unread() && ignored.label() == ConfigPathCheck::Elsewhere);
        let said = describe(&ignored, "/etc/containerd/config.toml", OURS).unwrap_or_default();
        assert!(said.contains("containerd 2.4 takes as one directory name") && said.contains("#12808"), "{said}");
        assert!(matches!(check(Ok(listed), OURS, r21), RuntimeCheck::ListIgnored { .. }));
        // Unless the CRI config forces the local pull, as kind's discard_unpacked_layers does.
        let local = format!("{listed}[plugins.'io.containerd.cri.v1.images']\ndiscard_unpacked_layers = true\n");
        assert_eq!(check(Ok(&local), OURS, r24), reads(list));
        let v2_local = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\ndiscard_unpacked_layers = true\n[plugins.\"io.containerd.grpc.v1.cri\".registry]\nconfig_path = \"/etc/docker/certs.d:/etc/containerd/certs.d\"\n";
        assert_eq!(check(Ok(v2_local), OURS, r24), reads(list));
        let downloads = format!("{listed}[plugins.'io.containerd.cri.v1.images']\nmax_concurrent_downloads = 3\n");
        assert!(matches!(check(Ok(&downloads), OURS, r24), RuntimeCheck::ListIgnored { .. }), "3 is the default");
        let more = downloads.replace("= 3", "= 5");
        assert_eq!(check(Ok(&more), OURS, r24), reads(list));
        // One directory is read alike by every release.
        let one = "version = 3\n[plugins.'io.containerd.cri.v1.images'.registry]\nconfig_path = \"/etc/containerd/certs.d\"\n";
        for release in [r17, r21, r24] {
            assert_eq!(check(Ok(one), OURS, release), reads(OURS));
        }
    }

    #[test]
    fn an_unset_config_path_reads_no_directory_before_2_2_and_the_default_list_only_with_local_pull() {
        let unset = "version = 3\n";
        let (r17, r22) = (Some(Release { major: 1, minor: 7 }), Some(Release { major: 2, minor: 2 }));
        assert_eq!(check(Ok(unset), OURS, r17), RuntimeCheck::Elsewhere { config_path: None });
        let ignored = check(Ok(unset), OURS, r22);
        assert!(
            matches!(&ignored, RuntimeCheck::ListIgnored { config_path, .. } if config_path == DEFAULT_CONFIG_PATH_LIST)
        );
        let said = describe(&ignored, "/etc/containerd/config.toml", OURS).unwrap_or_default();
        assert!(said.contains("sets no registry config_path, whose default is /etc/containerd/certs.d:"), "{said}");
        let kind = "version = 3\n[plugins.'io.containerd.cri.v1.images']\ndiscard_unpacked_layers = true\n";
        assert_eq!(check(Ok(kind), OURS, r22), RuntimeCheck::Reads { config_path: None });
    }

    #[test]
    fn an_ipv6_host_is_not_written_for_containerd_before_2_0_and_is_told() {
        use crate::node::{HostEntry, NodePlan};
        let entry = |address: &str, endpoint: &str, server: Option<&str>| HostEntry {
            server: server.map(Endpoint::from),
            ..HostEntry::plain(address, endpoint)
        };
        let plan = NodePlan::of(vec![
            entry("[fd00::12]:5000", "http://[fd00::12]:5000", None),
            entry("10.96.0.12:5000", "http://10.96.0.12:5000", None),
            entry("docker.io", "http://[::1]:5555", Some("https://registry-1.docker.io")),
            entry("quay.io", "http://10.96.0.13:5000", Some("https://[fd00::9]")),
        ]);
        let (kept, told) = readable(&plan, Some(Release { major: 1, minor: 7 }));
        let kept: Vec<&str> = kept.hosts.iter().map(|e| e.address.as_str()).collect();
        assert_eq!(kept, ["10.96.0.12:5000"]);
        let told_for: Vec<&str> = told.iter().map(|(address, _)| address.as_str()).collect();
        assert_eq!(told_for, ["[fd00::12]:5000", "docker.io", "quay.io"]);
        assert!(told[0].1.starts_with("containerd 1.7 cannot read a hosts.toml whose host is an IPv6 address"));
        for release in [Some(Release { major: 2, minor: 0 }), None] {
            let (all, none) = readable(&plan, release);
            assert_eq!((all, none.len()), (plan.clone(), 0));
        }
    }

    #[test]
    fn what_cannot_be_read_is_unknown_never_a_verdict() {
        assert!(matches!(check(Err("No such file"), OURS, None), RuntimeCheck::Unknown(why) if why == "No such file"));
        assert!(matches!(check(Ok("[plugins"), OURS, None), RuntimeCheck::Unknown(why) if why.starts_with("not TOML")));
        let imports = "version = 3\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n";
        assert!(matches!(check(Ok(imports), OURS, None), RuntimeCheck::Unknown(why) if why.contains("imports")));
        let number = "[plugins.cri.registry]\nconfig_path = 1\n";
        assert!(matches!(check(Ok(number), OURS, None), RuntimeCheck::Unknown(_)));
        assert!(!check(Ok(imports), OURS, None).unread());
    }

    #[test]
    fn each_cri_setting_containerd_checks_forces_the_local_pull_alone() {
        let images = "version = 3\n[plugins.'io.containerd.cri.v1.images']\n";
        let parse = |text: String| text.parse::<toml::Table>().expect("TOML");
        for setting in [
            "use_local_image_pull = true",
            "discard_unpacked_layers = true",
            "image_pull_with_sync_fs = true",
            "disable_snapshot_annotations = false",
            "max_concurrent_downloads = 5",
        ] {
            assert!(forces_local_pull(&parse(format!("{images}{setting}\n"))), "{setting}");
        }
        for kind in ["mirrors", "configs", "auths"] {
            let registry =
                format!("{images}[plugins.'io.containerd.cri.v1.images'.registry.{kind}.'docker.io']\nx = 1\n");
            assert!(forces_local_pull(&parse(registry)), "a {kind} entry");
            let empty = format!("{images}[plugins.'io.containerd.cri.v1.images'.registry.{kind}]\n");
            assert!(!forces_local_pull(&parse(empty)), "an empty {kind} table");
        }
        for default in [
            "use_local_image_pull = false",
            "discard_unpacked_layers = false",
            "disable_snapshot_annotations = true",
            "max_concurrent_downloads = 3",
        ] {
            assert!(!forces_local_pull(&parse(format!("{images}{default}\n"))), "{default}");
        }
    }
}
