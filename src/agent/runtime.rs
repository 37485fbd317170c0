//! The agent's side of its node's container runtime, behind [`NodeRuntime`]: writing what the runtime reads to pull
//! each planned address, and telling whether it reads it. containerd's is [`Containerd`] (its `hosts.toml` files,
//! [`crate::node::files`], and its config's `config_path`, [`crate::node::runtime`]). Another runtime would be one
//! more implementation and a flag choosing it; the plan, the agent's loop, its state and `doctor` stay as they are
//! (docs/architecture.md).

use std::io;
use std::path::PathBuf;

use crate::escape::safe;
use crate::node::files::{self, Owner, Report};
use crate::node::runtime::{self, Release, RuntimeCheck};
use crate::node::{NodePlan, RuntimeFinding};

/// What the agent needs of a node's container runtime.
pub trait NodeRuntime: Send + Sync {
    /// Makes the runtime's configuration hold exactly `plan`'s entries of this agent's: writes what is missing or
    /// different, removes what it wrote that the plan no longer names, and leaves everything else as it is.
    fn apply(&self, plan: &NodePlan) -> io::Result<Report>;
    /// Whether the runtime reads what [`NodeRuntime::apply`] writes, as its own configuration says now.
    fn check(&self) -> RuntimeFinding;
    /// Where it writes, for the log.
    fn location(&self) -> String;
}

/// containerd's registry hosts directory (`config_path`), and its config file to check that it reads it.
pub struct Containerd {
    hosts_dir: PathBuf,
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
    hosts_on_node: String,
}

impl Containerd {
    /// The files of `owner` under `hosts_dir` (`hosts_on_node` as the node sees it), checked against containerd's
    /// `config_file` when both are given, as containerd `release` reads it; `Err` when `hosts_dir` is no directory.
    pub fn new(
        hosts_dir: PathBuf,
        owner: Owner,
        hosts_on_node: Option<&str>,
        config_file: Option<PathBuf>,
        release: Option<Release>,
    ) -> Result<Self, String> {
        if !hosts_dir.is_dir() {
            return Err(format!(
                "{} is not a directory: mount containerd's config_path there (see the chart's nodeAgent.configPath)",
                safe(&hosts_dir.display().to_string())
            ));
        }
        let config = config_file
            .zip(hosts_on_node)
            .map(|(file, hosts_on_node)| ContainerdConfig { file, hosts_on_node: hosts_on_node.to_string() });
        Ok(Self { hosts_dir, owner, config, release })
    }
}

impl NodeRuntime for Containerd {
    /// What this release cannot read is not written, and told as failed.
    fn apply(&self, plan: &NodePlan) -> io::Result<Report> {
        let (readable, unreadable) = runtime::readable(plan, self.release);
        let mut report = files::sync(&self.hosts_dir, &readable, &self.owner)?;
        report.failed.extend(unreadable);
        Ok(report)
    }

    /// containerd reads its config at its start, so a fixed config shows here before containerd has restarted; the
    /// file is cheap to read at every pass.
    fn check(&self) -> RuntimeFinding {
        let Some(config) = &self.config else {
            return RuntimeFinding { check: RuntimeCheck::Unchecked, said: None };
        };
        let text = std::fs::read_to_string(&config.file).map_err(|error| error.to_string());
        let check = runtime::check(text.as_deref().map_err(String::as_str), &config.hosts_on_node, self.release);
        let said = runtime::describe(&check, &config.file.display().to_string(), &config.hosts_on_node);
        RuntimeFinding { check, said }
    }

    fn location(&self) -> String {
        self.hosts_dir.display().to_string()
    }
}
