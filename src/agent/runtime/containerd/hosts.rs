//! The node agent's writes: containerd's hosts directory (`config_path`) holds, for each planned address, a
//! `<address>/hosts.toml` of ours, and nothing else of ours. A file is ours when its first line is [`HEADER`] and
//! its second names the node plan this agent follows ([`Owner`]): the agents of two releases on one node each keep
//! only their own. A directory whose `hosts.toml` is not ours (or that has none but holds other files) is foreign:
//! reported, never changed. An empty directory is nobody's.
//! An entry with a CA bundle also gets our [`CA_FILE`] beside its `hosts.toml`, which names it by a relative path
//! (containerd reads it from the host's own directory); it is ours when it begins with the same two lines too (PEM
//! readers skip text before a certificate), and any other file there is someone else's.
//! containerd reads the directory at each pull, so nothing restarts; each file is replaced whole (written beside
//! it, then renamed) because containerd drops a file it cannot parse, and `ca.crt` is in place before the
//! `hosts.toml` naming it.

use std::io;
use std::path::Path;

pub use crate::agent::runtime::owner::{HEADER, Owner};
use crate::agent::runtime::{Report, safe_address};
use crate::node::{HostEntry, NodePlan};

const FILE: &str = "hosts.toml";
/// The CA bundle of an `https://` endpoint, beside its `hosts.toml`: a name of its own, so a `ca.crt` someone put
/// there is never taken for ours.
pub const CA_FILE: &str = "local-registry-publisher-ca.crt";

/// The `hosts.toml` for one entry: pull and resolve only, over the endpoint's scheme. A plain-HTTP endpoint has
/// no TLS keys (any of them would make containerd try HTTPS first); an `https://` one with a CA bundle names the
/// `ca.crt` beside it. A mirror's names its upstream as the `server`, which containerd tries when the mirror
/// fails, and a short `dial_timeout` so a mirror that is down costs little (containerd before 2.1 ignores it).
pub fn hosts_toml(entry: &HostEntry, owner: &Owner) -> String {
    let ca = if entry.ca.is_some() { format!("  ca = \"{CA_FILE}\"\n") } else { String::new() };
    let (address, endpoint) = (&entry.address, &entry.endpoint);
    let body = match &entry.server {
        Some(server) => format!(
            "# Images named {address} are pulled from the mirror {endpoint}, else from {server}.\n\
             server = \"{server}\"\n\n[host.\"{endpoint}\"]\n  capabilities = [\"pull\", \"resolve\"]\n\
             {ca}  dial_timeout = \"{}\"\n",
            crate::node::mirror::DIAL_TIMEOUT
        ),
        None => format!(
            "# Images named {address} are pulled from {endpoint}.\n[host.\"{endpoint}\"]\n  capabilities = [\"pull\", \"resolve\"]\n{ca}"
        ),
    };
    owner.mark(&body)
}

/// Makes `dir` hold exactly the plan's files of ours: writes what is missing or different, removes ours that the
/// plan no longer names, and leaves every foreign file and directory (another agent's too) as it is.
pub fn sync(dir: &Path, plan: &NodePlan, owner: &Owner) -> io::Result<Report> {
    let mut report = Report::default();
    for entry in &plan.hosts {
        // An endpoint is safe by its type (`Endpoint`); the address names the directory.
        if !safe_address(&entry.address) {
            report.failed.push((entry.address.clone(), "not a host:port this agent writes".into()));
            continue;
        }
        let wanted = Files { hosts: hosts_toml(entry, owner), ca: entry.ca.as_deref().map(|pem| owner.mark(pem)) };
        let path = dir.join(&entry.address);
        match ownership(&path, owner) {
            Ownership::Foreign => report.foreign.push(entry.address.clone()),
            Ownership::Ours(current) if current == wanted => {}
            Ownership::Ours(_) | Ownership::Absent => match write(&path, &wanted, owner) {
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
        if let Ownership::Ours(_) = ownership(&found.path(), owner) {
            match remove(&found.path(), owner) {
                Ok(()) => report.removed.push(name),
                Err(error) => report.failed.push((name, error.to_string())),
            }
        }
    }
    Ok(report)
}

/// What one address's directory holds of ours.
#[derive(PartialEq, Eq)]
struct Files {
    hosts: String,
    ca: Option<String>,
}

enum Ownership {
    Absent,
    /// Ours, holding these.
    Ours(Files),
    Foreign,
}

fn ownership(path: &Path, owner: &Owner) -> Ownership {
    match std::fs::symlink_metadata(path) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ownership::Absent,
        Ok(meta) if meta.is_dir() => {}
        _ => return Ownership::Foreign,
    }
    match std::fs::read_to_string(path.join(FILE)) {
        Ok(hosts) if owner.marks(&hosts) => Ownership::Ours(Files { hosts, ca: read_ours(&path.join(CA_FILE), owner) }),
        // An empty directory holds nothing of anyone's, and containerd reads nothing from it.
        Err(_) if std::fs::read_dir(path).is_ok_and(|mut entries| entries.next().is_none()) => Ownership::Absent,
        _ => Ownership::Foreign,
    }
}

fn write(path: &Path, files: &Files, owner: &Owner) -> io::Result<()> {
    unless(io::ErrorKind::AlreadyExists, std::fs::create_dir(path))?;
    let ca = path.join(CA_FILE);
    if let Some(text) = &files.ca {
        if ca.exists() && read_ours(&ca, owner).is_none() {
            return Err(io::Error::other(format!("a {CA_FILE} this agent did not write is there")));
        }
        replace(path, CA_FILE, text)?;
    }
    replace(path, FILE, &files.hosts)?;
    if files.ca.is_none() {
        remove_ours(&ca, owner)?;
    }
    Ok(())
}

/// The text of a file of ours (see [`Owner`]); `None` when it is absent or someone else's.
fn read_ours(path: &Path, owner: &Owner) -> Option<String> {
    std::fs::read_to_string(path).ok().filter(|text| owner.marks(text))
}

/// Removes the file if it is ours.
fn remove_ours(path: &Path, owner: &Owner) -> io::Result<()> {
    if read_ours(path, owner).is_none() {
        return Ok(());
    }
    // Gone since it was read: what removing it wanted.
    unless(io::ErrorKind::NotFound, std::fs::remove_file(path))
}

/// Replaces `dir/name` whole: written beside it, then renamed over it.
fn replace(dir: &Path, name: &str, text: &str) -> io::Result<()> {
    let temporary = dir.join(format!(".{name}.writing"));
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, dir.join(name))
}

/// Removes our files, then the directory if nothing else is in it.
fn remove(path: &Path, owner: &Owner) -> io::Result<()> {
    std::fs::remove_file(path.join(FILE))?;
    remove_ours(&path.join(CA_FILE), owner)?;
    unless(io::ErrorKind::DirectoryNotEmpty, std::fs::remove_dir(path))
}

/// `result`, with an error of this kind taken for success: the state it leaves is the one wanted.
fn unless(kind: io::ErrorKind, result: io::Result<()>) -> io::Result<()> {
    match result {
        Err(error) if error.kind() == kind => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests;
