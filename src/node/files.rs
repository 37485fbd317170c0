//! The node agent's writes: containerd's hosts directory (`config_path`) holds, for each planned address, a
//! `<address>/hosts.toml` of ours, and nothing else of ours. A file is ours when its first line is [`HEADER`];
//! a directory whose `hosts.toml` is not ours (or that has none but holds other files) is foreign: reported, never
//! changed. An empty directory is nobody's.
//! containerd reads the directory at each pull, so nothing restarts; each file is replaced whole (written beside
//! it, then renamed) because containerd drops a file it cannot parse.

use std::io;
use std::path::Path;

use super::{HostEntry, NodePlan};

/// The first line of every `hosts.toml` the agent writes: how it knows its own (k3s deletes files with its own
/// header at start, so ours differs).
pub const HEADER: &str =
    "# Written by local-registry-publisher's node agent, which removes it when the address is withdrawn.";

const FILE: &str = "hosts.toml";

/// What one pass over the hosts directory did, each list by address.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub written: Vec<String>,
    pub removed: Vec<String>,
    /// Planned addresses whose directory someone else wrote: left alone.
    pub foreign: Vec<String>,
    /// Addresses that could not be written or removed, with the reason.
    pub failed: Vec<(String, String)>,
}

impl Report {
    pub fn changed(&self) -> bool {
        !self.written.is_empty() || !self.removed.is_empty()
    }
}

/// The `hosts.toml` for one entry: pull and resolve only, over the endpoint's scheme, with no TLS keys (any of
/// them would make containerd try HTTPS first).
pub fn hosts_toml(entry: &HostEntry) -> String {
    format!(
        "{HEADER}\n# Images named {address} are pulled from {endpoint}.\n[host.\"{endpoint}\"]\n  capabilities = [\"pull\", \"resolve\"]\n",
        address = entry.address,
        endpoint = entry.endpoint,
    )
}

/// Makes `dir` hold exactly the plan's files of ours: writes what is missing or different, removes ours that the
/// plan no longer names, and leaves every foreign file and directory as it is.
pub fn sync(dir: &Path, plan: &NodePlan) -> io::Result<Report> {
    let mut report = Report::default();
    for entry in &plan.hosts {
        if !safe_directory_name(&entry.address) || !safe_endpoint(&entry.endpoint) {
            report.failed.push((entry.address.clone(), "not a host:port this agent writes".into()));
            continue;
        }
        let wanted = hosts_toml(entry);
        let path = dir.join(&entry.address);
        match ownership(&path) {
            Ownership::Foreign => report.foreign.push(entry.address.clone()),
            Ownership::Ours(current) if current == wanted => {}
            Ownership::Ours(_) | Ownership::Absent => match write(&path, &wanted) {
                Ok(()) => report.written.push(entry.address.clone()),
                Err(error) => report.failed.push((entry.address.clone(), error.to_string())),
            },
        }
    }
    for found in std::fs::read_dir(dir)? {
        let found = found?;
        let name = found.file_name().to_string_lossy().into_owned();
        if plan.hosts.iter().any(|entry| entry.address == name) {
            continue;
        }
        if let Ownership::Ours(_) = ownership(&found.path()) {
            match remove(&found.path()) {
                Ok(()) => report.removed.push(name),
                Err(error) => report.failed.push((name, error.to_string())),
            }
        }
    }
    Ok(report)
}

enum Ownership {
    Absent,
    /// Ours, holding this text.
    Ours(String),
    Foreign,
}

fn ownership(path: &Path) -> Ownership {
    match std::fs::symlink_metadata(path) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ownership::Absent,
        Ok(meta) if meta.is_dir() => {}
        _ => return Ownership::Foreign,
    }
    match std::fs::read_to_string(path.join(FILE)) {
        Ok(text) if text.lines().next() == Some(HEADER) => Ownership::Ours(text),
        // An empty directory holds nothing of anyone's, and containerd reads nothing from it.
        Err(_) if std::fs::read_dir(path).is_ok_and(|mut entries| entries.next().is_none()) => Ownership::Absent,
        _ => Ownership::Foreign,
    }
}

fn write(path: &Path, text: &str) -> io::Result<()> {
    match std::fs::create_dir(path) {
        Err(error) if error.kind() != io::ErrorKind::AlreadyExists => return Err(error),
        _ => {}
    }
    let temporary = path.join(".hosts.toml.writing");
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, path.join(FILE))
}

/// Removes our file, then the directory if nothing else is in it.
fn remove(path: &Path) -> io::Result<()> {
    std::fs::remove_file(path.join(FILE))?;
    match std::fs::remove_dir(path) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::DirectoryNotEmpty => Ok(()),
        Err(error) => Err(error),
    }
}

/// A `host:port` (IPv6 in brackets) that names one directory: no separator, no dot-only name.
fn safe_directory_name(address: &str) -> bool {
    !address.is_empty()
        && !address.starts_with('.')
        && address.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'))
}

/// `http://` or `https://` and a host:port, nothing that could end the TOML string.
fn safe_endpoint(endpoint: &str) -> bool {
    let rest = endpoint.strip_prefix("http://").or_else(|| endpoint.strip_prefix("https://"));
    rest.is_some_and(safe_directory_name)
}

#[cfg(test)]
mod tests;
