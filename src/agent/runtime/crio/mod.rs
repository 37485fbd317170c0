//! CRI-O behind [`NodeRuntime`]: the node's containers configuration directory (`/etc/containers`), where the agent
//! keeps a `registries.conf.d` drop-in per planned address and the CAs beside them ([`dropins`]), read back as
//! CRI-O merges them ([`registries`]); and CRI-O's config, which says whether CRI-O reloads the drop-ins by itself
//! (`auto_reload_registries`): CRI-O reads them at its start and on SIGHUP otherwise.

pub mod dropins;
pub mod registries;

use std::io;
use std::path::{Path, PathBuf};

use super::owner::Owner;
use super::{NodeRuntime, Placement, Reading, Report};
use crate::escape::safe;
use crate::node::api::state::ConfigPathCheck;
use crate::node::{Endpoint, HostEntry, NodePlan};

/// The containers configuration directory, and CRI-O's config file to check that it reloads it.
pub struct Crio {
    containers_dir: PathBuf,
    owner: Owner,
    /// CRI-O's config file (its `crio.conf.d` beside it is read too), at its path on the node.
    config: Option<PathBuf>,
    /// The containers directory as the node sees it.
    on_node: Option<String>,
}

impl Crio {
    /// `Err` when the containers configuration directory is no directory.
    pub fn new(placement: Placement, owner: Owner) -> Result<Self, String> {
        let Placement { config_path_mount, config_path, config } = placement;
        if !config_path_mount.is_dir() {
            return Err(format!(
                "{} is not a directory: mount the node's /etc/containers there (see the chart's nodeAgent.configPath)",
                safe(&config_path_mount.display().to_string())
            ));
        }
        Ok(Self { containers_dir: config_path_mount, owner, config, on_node: config_path })
    }
}

impl NodeRuntime for Crio {
    fn apply(&self, plan: &NodePlan) -> io::Result<Report> {
        dropins::sync(&self.containers_dir, &with_relays(plan), &self.owner)
    }

    /// CRI-O reads its config at its start; the files are cheap to read at every pass.
    fn check(&self) -> Reading {
        let Some(file) = &self.config else { return Reading::UNCHECKED };
        let drop_in_dir =
            self.on_node.as_deref().map(|dir| format!("{}/{}", dir.trim_end_matches('/'), dropins::DROP_IN_DIR));
        let shown = file.display().to_string();
        let (check, said) = match auto_reload(file) {
            Ok(true) => (ConfigPathCheck::Reads, None),
            Ok(false) => (
                ConfigPathCheck::Elsewhere,
                Some(format!(
                    "{} does not set auto_reload_registries = true under [crio.image]: CRI-O reads the agent's drop-ins \
                     only at its start or on SIGHUP. Set it (or in a crio.conf.d drop-in) and restart CRI-O once.",
                    safe(&shown)
                )),
            ),
            Err(reason) => (ConfigPathCheck::Unknown, Some(format!("{}: {}", safe(&shown), safe(&reason)))),
        };
        Reading { check, config_file: Some(shown), config_path: drop_in_dir, said }
    }

    fn location(&self) -> String {
        self.containers_dir.display().to_string()
    }
}

/// The plan's entries, and for each relay its loopback addresses as themselves over plain HTTP: containers/image
/// dials HTTPS on loopback too, so a relayed registry is pulled only where a drop-in allows plain HTTP for it
/// (containerd and dockerd need no file there). A planned entry for the same address is kept as planned.
fn with_relays(plan: &NodePlan) -> NodePlan {
    let mut hosts = plan.hosts.clone();
    for relay in &plan.relays {
        for host in ["127.0.0.1", "localhost", "[::1]"] {
            let address = format!("{host}:{}", relay.port);
            let Ok(endpoint) = Endpoint::new(false, &address) else { continue };
            if !hosts.iter().any(|entry| entry.address == address) {
                hosts.push(HostEntry { address, endpoint, ca: None, server: None });
            }
        }
    }
    NodePlan { hosts, ..plan.clone() }
}

/// Whether CRI-O's config (`file`, then each `*.conf` of `crio.conf.d` beside it in lexical order, a later value
/// winning, as CRI-O reads them) turns `auto_reload_registries` on.
fn auto_reload(file: &Path) -> Result<bool, String> {
    let mut texts = vec![std::fs::read_to_string(file).map_err(|error| error.to_string())?];
    if let Ok(entries) = std::fs::read_dir(file.with_file_name("crio.conf.d")) {
        let mut paths: Vec<PathBuf> =
            entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "conf")).collect();
        paths.sort();
        texts.extend(paths.iter().filter_map(|path| std::fs::read_to_string(path).ok()));
    }
    auto_reload_in(texts.iter().map(String::as_str))
}

/// The last `auto_reload_registries` the texts set (false when none does).
pub fn auto_reload_in<'a>(texts: impl IntoIterator<Item = &'a str>) -> Result<bool, String> {
    let mut on = false;
    for text in texts {
        let table: toml::Table = text.parse().map_err(|error: toml::de::Error| error.message().to_string())?;
        let set = table.get("crio").and_then(|c| c.get("image")).and_then(|i| i.get("auto_reload_registries"));
        if let Some(value) = set {
            on = value.as_bool().ok_or("auto_reload_registries is not true or false")?;
        }
    }
    Ok(on)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_relay_adds_its_loopback_addresses_over_plain_http_and_a_planned_entry_stays_as_planned() {
        let relay = crate::node::RelayEntry {
            port: 5201,
            registry: "ns/registry".into(),
            target: "10.96.0.12:5000".parse().unwrap(),
        };
        let planned = HostEntry {
            address: "localhost:5201".into(),
            endpoint: "http://10.96.0.12:5000".parse().unwrap(),
            ca: None,
            server: None,
        };
        let plan = NodePlan::with_relays(vec![planned.clone()], vec![relay.clone()]);
        let hosts = with_relays(&plan).hosts;
        let found: Vec<(&str, &str)> = hosts.iter().map(|e| (e.address.as_str(), e.endpoint.as_str())).collect();
        assert_eq!(
            found,
            [
                ("localhost:5201", "http://10.96.0.12:5000"),
                ("127.0.0.1:5201", "http://127.0.0.1:5201"),
                ("[::1]:5201", "http://[::1]:5201"),
            ]
        );
        assert_eq!(with_relays(&NodePlan::of(vec![planned])).hosts.len(), 1, "no relay, nothing added");
    }

    #[test]
    fn the_check_reads_crio_conf_then_its_conf_d_drop_ins_in_order_and_says_what_to_set() {
        let scratch = std::env::temp_dir().join(format!("lrp-crio-check-{}", std::process::id()));
        let (containers, etc) = (scratch.join("containers"), scratch.join("crio"));
        std::fs::create_dir_all(&containers).unwrap();
        std::fs::create_dir_all(etc.join("crio.conf.d")).unwrap();
        let file = etc.join("crio.conf");
        let crio = |config: Option<PathBuf>| {
            let placement = Placement {
                config_path_mount: containers.clone(),
                config_path: Some("/etc/containers".into()),
                config,
            };
            Crio::new(placement, Owner::new("lrp", "lrp-node-plan")).expect("a runtime")
        };
        let check = || crio(Some(file.clone())).check();
        std::fs::write(&file, "[crio.image]\nauto_reload_registries = true\n").unwrap();
        let reads = check();
        assert_eq!((reads.check, reads.said.as_deref()), (ConfigPathCheck::Reads, None));
        assert_eq!(reads.config_path.as_deref(), Some("/etc/containers/registries.conf.d"));
        assert_eq!(reads.config_file, Some(file.display().to_string()));
        // A drop-in turning it off wins; one not named *.conf is not read.
        std::fs::write(etc.join("crio.conf.d/10-off.conf"), "[crio.image]\nauto_reload_registries = false\n").unwrap();
        std::fs::write(etc.join("crio.conf.d/20-on.conf.disabled"), "[crio.image]\nauto_reload_registries = true\n")
            .unwrap();
        let off = check();
        assert_eq!(off.check, ConfigPathCheck::Elsewhere);
        assert!(off.said.as_deref().is_some_and(|s| s.contains("auto_reload_registries = true")), "{off:?}");
        std::fs::write(etc.join("crio.conf.d/30-on.conf"), "[crio.image]\nauto_reload_registries = true\n").unwrap();
        assert_eq!(check().check, ConfigPathCheck::Reads, "a later drop-in turns it on again");
        std::fs::remove_file(&file).unwrap();
        assert_eq!(check().check, ConfigPathCheck::Unknown, "no crio.conf");
        assert_eq!(crio(None).check(), Reading::UNCHECKED);
        assert!(
            Crio::new(
                Placement { config_path_mount: scratch.join("absent"), config_path: None, config: None },
                Owner::new("lrp", "lrp-node-plan")
            )
            .is_err()
        );
        std::fs::remove_dir_all(&scratch).unwrap();
    }

    #[test]
    fn the_reload_setting_is_read_as_crio_reads_it_with_a_later_drop_in_winning() {
        let on = "[crio.image]\nauto_reload_registries = true\n";
        let off = "[crio.image]\nauto_reload_registries = false\n";
        assert_eq!(auto_reload_in(["[crio]\n"]), Ok(false), "off by default");
        assert_eq!(auto_reload_in([on]), Ok(true));
        assert_eq!(auto_reload_in([on, "[crio.runtime]\n"]), Ok(true), "a drop-in not setting it changes nothing");
        assert_eq!(auto_reload_in([on, off]), Ok(false));
        assert!(auto_reload_in(["[crio.image]\nauto_reload_registries = \"yes\"\n"]).is_err());
        assert!(auto_reload_in(["[crio"]).is_err());
    }
}
