//! The agent's side of its node's container runtime, behind [`NodeRuntime`]: writing what the runtime reads to pull
//! each planned address, and telling whether it reads it, in runtime-neutral terms ([`Report`], [`Reading`]), so
//! the agent's loop, its node's state, its Events, its metrics and `doctor` name no runtime. containerd's is
//! [`containerd::Containerd`] (its `hosts.toml` files and its config's `config_path`); another runtime is one more
//! module here, one more `--runtime` value ([`crate::config::RuntimeKind`]) and its run of the [`conformance`] suite (docs/architecture.md).

#[doc(hidden)]
pub mod conformance;
pub mod containerd;
pub mod crio;
pub mod owner;

use std::io;
use std::path::PathBuf;

use crate::node::NodePlan;
use crate::node::api::state::ConfigPathCheck;

/// What the agent needs of a node's container runtime.
pub trait NodeRuntime: Send + Sync {
    /// Makes the runtime's configuration hold exactly `plan`'s entries of this agent's: writes what is missing or
    /// different, removes what it wrote that the plan no longer names, and leaves everything else as it is.
    fn apply(&self, plan: &NodePlan) -> io::Result<Report>;
    /// Whether the runtime reads what [`NodeRuntime::apply`] writes, as its own configuration says now.
    fn check(&self) -> Reading;
    /// Where it writes, for the log.
    fn location(&self) -> String;
    /// Whether it writes the runtime's configuration at all ([`Unconfigured`] does not).
    fn writes_files(&self) -> bool {
        true
    }
}

/// `--runtime=none`: the agent writes nothing the runtime reads and only relays, for a runtime it does not configure
/// that pulls loopback over plain HTTP by itself (dockerd, containerd under a read-only /etc as on Talos). Every pass
/// finds nothing, and the node's state says so.
pub struct Unconfigured;

impl NodeRuntime for Unconfigured {
    fn apply(&self, _: &NodePlan) -> io::Result<Report> {
        Ok(Report::default())
    }

    fn check(&self) -> Reading {
        Reading::UNCHECKED
    }

    fn location(&self) -> String {
        "nowhere (--runtime=none)".into()
    }

    fn writes_files(&self) -> bool {
        false
    }
}

/// What one pass did, each list by address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub written: Vec<String>,
    pub removed: Vec<String>,
    /// Planned addresses whose configuration someone else wrote: left alone.
    pub foreign: Vec<String>,
    /// Addresses that could not be written or removed, with the reason.
    pub failed: Vec<(String, String)>,
}

/// What the runtime's own configuration says of the agent's files, and that in words when there is something to
/// say (a mismatch and what to set, or a caveat).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reading {
    pub check: ConfigPathCheck,
    /// The runtime's config file that was read, as the node names it.
    pub config_file: Option<String>,
    /// The directory (or list) the runtime's configuration names, when it names one.
    pub config_path: Option<String>,
    pub said: Option<String>,
}

impl Reading {
    /// Before the first check, or without the runtime's configuration to read.
    pub const UNCHECKED: Reading =
        Reading { check: ConfigPathCheck::Unchecked, config_file: None, config_path: None, said: None };

    /// Whether the agent's files are known to go unread.
    pub fn unread(&self) -> bool {
        self.check == ConfigPathCheck::Elsewhere
    }
}

/// Where the agent writes and reads, as its flags say.
#[derive(Clone, Debug)]
pub struct Placement {
    /// Where the runtime's hosts directory is mounted into the agent.
    pub config_path_mount: PathBuf,
    /// The hosts directory as the node sees it (containerd's `config_path`).
    pub config_path: Option<String>,
    /// The runtime's config file, mounted at its path on the node.
    pub config: Option<PathBuf>,
}

/// A `host:port` (IPv6 in brackets) that names one file or directory: no separator, no dot-only name.
pub(crate) fn safe_address(address: &str) -> bool {
    !address.is_empty()
        && !address.starts_with('.')
        && address.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'))
}
