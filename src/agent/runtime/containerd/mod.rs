//! containerd behind [`NodeRuntime`]: its registry hosts directory (`config_path`), where the agent keeps a
//! `hosts.toml` per planned address ([`hosts`]), and its config file, which says whether it reads that directory
//! ([`config`]).

pub mod config;
pub mod hosts;

use std::io;
use std::path::PathBuf;

use super::{NodeRuntime, Placement, Reading, Report};
use crate::escape::safe;
use crate::node::NodePlan;
use config::Release;
use hosts::Owner;

/// containerd's registry hosts directory (`config_path`), and its config file to check that it reads it.
pub struct Containerd {
    config_path_mount: PathBuf,
    owner: Owner,
    config: Option<ContainerdConfig>,
    /// The node's containerd release, which decides what it can read; `None` when unknown.
    release: Option<Release>,
}

/// Where the agent finds containerd's config, and what it must name.
#[derive(Clone, Debug)]
struct ContainerdConfig {
    /// The config file, at its path on the node (the chart mounts its directory there, read-only).
    file: PathBuf,
    /// The hosts directory as the node sees it: what the config's `config_path` must name.
    config_path: String,
}

impl Containerd {
    /// The files of `owner` in `placement`, checked against containerd's config file when both it and the
    /// directory as the node sees it are given, as the node's containerd (`runtime_version`, its Node's
    /// `containerRuntimeVersion`) reads it; `Err` when the hosts directory is no directory.
    pub fn new(placement: Placement, owner: Owner, runtime_version: Option<&str>) -> Result<Self, String> {
        let Placement { config_path_mount, config_path, config } = placement;
        if !config_path_mount.is_dir() {
            return Err(format!(
                "{} is not a directory: mount containerd's config_path there (see the chart's nodeAgent.configPath)",
                safe(&config_path_mount.display().to_string())
            ));
        }
        let config = config
            .zip(config_path)
            .map(|(file, config_path)| ContainerdConfig { file, config_path: config_path.to_string() });
        Ok(Self { config_path_mount, owner, config, release: runtime_version.and_then(Release::of) })
    }
}

impl NodeRuntime for Containerd {
    /// What this release cannot read is not written, and told as failed.
    fn apply(&self, plan: &NodePlan) -> io::Result<Report> {
        let (readable, unreadable) = config::readable(plan, self.release);
        let mut report = hosts::sync(&self.config_path_mount, &readable, &self.owner)?;
        report.failed.extend(unreadable);
        Ok(report)
    }

    /// containerd reads its config at its start, so a fixed config shows here before containerd has restarted; the
    /// file is cheap to read at every pass.
    fn check(&self) -> Reading {
        let Some(config) = &self.config else {
            return Reading::UNCHECKED;
        };
        let text = std::fs::read_to_string(&config.file).map_err(|error| error.to_string());
        let check = config::check(text.as_deref().map_err(String::as_str), &config.config_path, self.release);
        let file = config.file.display().to_string();
        let said = config::describe(&check, &file, &config.config_path);
        Reading { config_file: Some(file), ..check.reading(said) }
    }

    fn location(&self) -> String {
        self.config_path_mount.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::api::state::ConfigPathCheck;

    #[test]
    fn the_check_reads_the_config_file_and_says_which_file_set_which_config_path() {
        let scratch = std::env::temp_dir().join(format!("lrp-containerd-check-{}", std::process::id()));
        let hosts = scratch.join("certs.d");
        std::fs::create_dir_all(&hosts).expect("a hosts directory");
        let file = scratch.join("config.toml");
        let config = "version = 3\n[plugins.\"io.containerd.cri.v1.images\".registry]\n  config_path = \"/etc/containerd/certs.d\"\n";
        std::fs::write(&file, config).expect("a config file");
        let owner = Owner::new("lrp", "lrp-node-plan");
        let placement = |config: Option<PathBuf>| Placement {
            config_path_mount: hosts.clone(),
            config_path: Some("/etc/containerd/certs.d".into()),
            config,
        };
        let checked = Containerd::new(placement(Some(file.clone())), owner.clone(), Some("containerd://2.4.2"))
            .expect("a runtime")
            .check();
        let unchecked = Containerd::new(placement(None), owner, None).expect("a runtime").check();
        std::fs::remove_dir_all(&scratch).expect("remove the scratch directory");
        assert_eq!(checked.check, ConfigPathCheck::Reads, "{checked:?}");
        assert_eq!(checked.config_file, Some(file.display().to_string()));
        assert_eq!(checked.config_path.as_deref(), Some("/etc/containerd/certs.d"));
        assert_eq!(unchecked, Reading::UNCHECKED, "no config file given: nothing is checked");
    }
}
