//! The node agent's writes for CRI-O, under the node's containers configuration directory (`/etc/containers`): a
//! drop-in `registries.conf.d/local-registry-publisher-<address>.conf` per planned address, holding one
//! `[[registry]]` whose prefix is the address, and for an entry with a CA bundle a
//! `certs.d/<endpoint>/local-registry-publisher-<address>.crt`, where containers/image looks for the CAs of the
//! endpoint it dials. Both are ours by their marking lines ([`Owner`]).
//!
//! A later drop-in replaces an earlier table of the same prefix whole, so writing one for a prefix that
//! `registries.conf` or someone else's drop-in already sets would take it over by file name: such an address is
//! foreign, reported, and ours for it removed. Each file is replaced whole (written beside it under a name CRI-O
//! does not read, then renamed), the CA before the drop-in that makes it dialled.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};

use super::registries::Merged;
use crate::agent::runtime::owner::Owner;
use crate::agent::runtime::{Report, safe_address};
use crate::node::{HostEntry, NodePlan};

/// Where CRI-O reads registries from, under the containers configuration directory.
pub const MAIN_FILE: &str = "registries.conf";
pub const DROP_IN_DIR: &str = "registries.conf.d";
/// Where containers/image reads per-endpoint CAs (`<host:port>/*.crt`).
pub const CERTS_DIR: &str = "certs.d";
/// The start of every file name of ours.
const OURS: &str = "local-registry-publisher-";

/// The drop-in for one entry: the address's images are pulled from its endpoint; plain HTTP needs `insecure`, as
/// containers/image dials HTTPS otherwise, loopback included. A mirror's upstream stays the registry's location,
/// which CRI-O tries after the mirror.
pub fn drop_in(entry: &HostEntry, owner: &Owner) -> String {
    let (address, endpoint) = (&entry.address, &entry.endpoint);
    let table = |location: &str, tls: bool| {
        let insecure = if tls { "" } else { "insecure = true\n" };
        format!("location = \"{location}\"\n{insecure}")
    };
    let body = match &entry.server {
        Some(server) => format!(
            "# Images named {address} are pulled from the mirror {endpoint}, else from {server}.\n\
             [[registry]]\nprefix = \"{address}\"\n{}\n[[registry.mirror]]\n{}",
            table(server.authority(), server.tls()),
            table(endpoint.authority(), endpoint.tls()),
        ),
        None => format!(
            "# Images named {address} are pulled from {endpoint}.\n[[registry]]\nprefix = \"{address}\"\n{}",
            table(endpoint.authority(), endpoint.tls())
        ),
    };
    owner.mark(&body)
}

/// The drop-in's file name for `address`.
pub fn drop_in_name(address: &str) -> String {
    format!("{OURS}{address}.conf")
}

/// The CA file's path under `certs.d` for `entry`, when it has a CA.
pub fn ca_path(entry: &HostEntry) -> Option<PathBuf> {
    entry.ca.as_ref()?;
    Some(Path::new(entry.endpoint.authority()).join(format!("{OURS}{}.crt", entry.address)))
}

/// Makes `dir` (the containers configuration directory) hold exactly the plan's files of ours.
pub fn sync(dir: &Path, plan: &NodePlan, owner: &Owner) -> io::Result<Report> {
    let (drop_ins, certs) = (dir.join(DROP_IN_DIR), dir.join(CERTS_DIR));
    std::fs::create_dir_all(&drop_ins)?;
    let mut report = Report::default();
    let theirs = match others(dir, owner) {
        Ok(theirs) => theirs,
        Err((file, reason)) => {
            // CRI-O refuses the whole configuration while one file does not parse: writing more changes nothing.
            let said = format!("{file} does not parse, so CRI-O reads no registry configuration: {reason}");
            report.failed = plan.hosts.iter().map(|entry| (entry.address.clone(), said.clone())).collect();
            return Ok(report);
        }
    };
    let (mut kept_drop_ins, mut kept_cas) = (BTreeSet::new(), BTreeSet::new());
    for entry in &plan.hosts {
        if !safe_address(&entry.address) {
            report.failed.push((entry.address.clone(), "not a host:port this agent writes".into()));
            continue;
        }
        if let Some((_, file)) = theirs.get(&entry.address) {
            tracing::debug!(address = %entry.address, %file, "another file sets this prefix");
            report.foreign.push(entry.address.clone());
            continue;
        }
        let name = drop_in_name(&entry.address);
        kept_drop_ins.insert(name.clone());
        let ca = ca_path(entry).zip(entry.ca.as_deref());
        if let Some((path, _)) = &ca {
            kept_cas.insert(path.clone());
        }
        match write_entry(
            &drop_ins.join(&name),
            ca.map(|(path, pem)| (certs.join(path), owner.mark(pem))),
            &drop_in(entry, owner),
            owner,
        ) {
            Ok(true) => report.written.push(entry.address.clone()),
            Ok(false) => {}
            Err(error) => report.failed.push((entry.address.clone(), error.to_string())),
        }
    }
    for name in ours_in(&drop_ins, owner)? {
        if kept_drop_ins.contains(&name) {
            continue;
        }
        let address = name.trim_start_matches(OURS).trim_end_matches(".conf").to_string();
        match std::fs::remove_file(drop_ins.join(&name)) {
            Ok(()) => report.removed.push(address),
            Err(error) => report.failed.push((address, error.to_string())),
        }
    }
    remove_other_cas(&certs, &kept_cas, owner)?;
    Ok(report)
}

/// The files CRI-O reads registries from, in its order: `registries.conf`, then each `*.conf` drop-in by name; each
/// as (name, text), unreadable ones left out.
pub fn registry_files(dir: &Path) -> Vec<(String, String)> {
    let mut files = vec![(MAIN_FILE.to_string(), std::fs::read_to_string(dir.join(MAIN_FILE)).unwrap_or_default())];
    let mut names: Vec<String> = std::fs::read_dir(dir.join(DROP_IN_DIR))
        .map(|entries| entries.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    for name in names.into_iter().filter(|name| name.ends_with(".conf")) {
        if let Ok(text) = std::fs::read_to_string(dir.join(DROP_IN_DIR).join(&name)) {
            files.push((format!("{DROP_IN_DIR}/{name}"), text));
        }
    }
    files
}

/// The registries every file but ours sets, merged as CRI-O merges them.
fn others(dir: &Path, owner: &Owner) -> Result<Merged, (String, String)> {
    let files: Vec<(String, String)> = registry_files(dir).into_iter().filter(|(_, text)| !owner.marks(text)).collect();
    Merged::of(files.iter().map(|(name, text)| (name.as_str(), text.as_str())))
}

/// Writes what differs; `Ok(true)` when something was written.
fn write_entry(drop_in: &Path, ca: Option<(PathBuf, String)>, text: &str, owner: &Owner) -> io::Result<bool> {
    let mut wrote = false;
    if let Some((path, pem)) = ca {
        let current = std::fs::read_to_string(&path).ok();
        if current.as_deref() != Some(pem.as_str()) {
            if current.is_some_and(|current| !owner.marks(&current)) {
                return Err(io::Error::other(format!("a {} this agent did not write is there", path.display())));
            }
            std::fs::create_dir_all(path.parent().unwrap_or(Path::new(".")))?;
            replace(&path, &pem)?;
            wrote = true;
        }
    }
    if std::fs::read_to_string(drop_in).ok().as_deref() != Some(text) {
        replace(drop_in, text)?;
        wrote = true;
    }
    Ok(wrote)
}

/// The names of our drop-ins in `dir`.
fn ours_in(dir: &Path, owner: &Owner) -> io::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.starts_with(OURS) && name.ends_with(".conf") {
            let text = std::fs::read_to_string(dir.join(&name)).unwrap_or_default();
            if owner.marks(&text) {
                names.push(name);
            }
        }
    }
    Ok(names)
}

/// Removes our CA files that are not `kept` (paths under `certs`), and an endpoint's directory once it is empty.
fn remove_other_cas(certs: &Path, kept: &BTreeSet<PathBuf>, owner: &Owner) -> io::Result<()> {
    let Ok(endpoints) = std::fs::read_dir(certs) else { return Ok(()) };
    for endpoint in endpoints.flatten() {
        let Ok(files) = std::fs::read_dir(endpoint.path()) else { continue };
        let mut removed = false;
        for file in files.flatten() {
            let name = file.file_name().to_string_lossy().into_owned();
            let relative = Path::new(&endpoint.file_name()).join(&name);
            if !name.starts_with(OURS) || kept.contains(&relative) {
                continue;
            }
            if std::fs::read_to_string(file.path()).is_ok_and(|text| owner.marks(&text)) {
                std::fs::remove_file(file.path())?;
                removed = true;
            }
        }
        if removed {
            // Only a directory left empty goes: someone else's files keep it.
            let _ = std::fs::remove_dir(endpoint.path());
        }
    }
    Ok(())
}

/// Replaces `path` whole: written beside it under a name no reader takes (a leading dot, no `.conf`), then renamed.
fn replace(path: &Path, text: &str) -> io::Result<()> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let temporary = path.with_file_name(format!(".{name}.writing"));
    std::fs::write(&temporary, text)?;
    std::fs::rename(&temporary, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("lrp-crio-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join(DROP_IN_DIR)).expect("a scratch directory");
        dir
    }

    fn tls_entry() -> HostEntry {
        HostEntry {
            address: "registry.ns.svc.cluster.local:5000".into(),
            endpoint: "https://10.96.0.13:5000".parse().unwrap(),
            ca: Some("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n".into()),
            server: None,
        }
    }

    #[test]
    fn a_ca_file_of_someone_elses_at_our_name_is_kept_and_the_address_fails() {
        let dir = scratch("ca");
        let owner = Owner::new("lrp", "lrp-node-plan");
        let entry = tls_entry();
        let path = dir.join(CERTS_DIR).join(ca_path(&entry).expect("a CA path"));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "theirs\n").unwrap();
        let report = sync(&dir, &NodePlan::of(vec![entry.clone()]), &owner).expect("a pass");
        assert_eq!(report.failed.len(), 1, "{report:?}");
        assert!(report.failed[0].1.contains("this agent did not write"), "{report:?}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "theirs\n");
        assert!(!dir.join(DROP_IN_DIR).join(drop_in_name(&entry.address)).exists(), "no drop-in without its CA");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_withdrawn_tls_address_takes_its_ca_and_the_emptied_directory_with_it_and_leaves_others_files() {
        let dir = scratch("withdrawn");
        let owner = Owner::new("lrp", "lrp-node-plan");
        let (entry, mut other) = (tls_entry(), tls_entry());
        other.endpoint = "https://10.96.0.14:5000".parse().unwrap();
        other.address = "other.ns.svc.cluster.local:5000".into();
        let ca = dir.join(CERTS_DIR).join(ca_path(&entry).unwrap());
        let other_ca = dir.join(CERTS_DIR).join(ca_path(&other).unwrap());
        sync(&dir, &NodePlan::of(vec![entry.clone(), other.clone()]), &owner).expect("a pass");
        assert!(ca.exists() && other_ca.exists());
        // Someone else's CA beside the other one keeps its directory.
        std::fs::write(other_ca.with_file_name("admin.crt"), "theirs\n").unwrap();
        let report = sync(&dir, &NodePlan::default(), &owner).expect("a pass");
        assert_eq!(report.removed.len(), 2, "{report:?}");
        assert!(!ca.exists() && !ca.parent().unwrap().exists(), "the CA and its emptied directory go");
        assert!(!other_ca.exists(), "ours goes");
        assert!(other_ca.with_file_name("admin.crt").exists(), "theirs stays, and its directory");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_files_named_and_marked_as_ours_are_ours_to_remove() {
        let dir = scratch("names");
        let owner = Owner::new("lrp", "lrp-node-plan");
        // A copy of one of ours under another name (an admin's), and a file of our name that is not a drop-in.
        let ours = owner.mark("[[registry]]\nprefix = \"copy:5000\"\nlocation = \"10.96.0.1:5000\"\n");
        std::fs::write(dir.join(DROP_IN_DIR).join("50-copy.conf"), &ours).unwrap();
        std::fs::write(dir.join(DROP_IN_DIR).join(format!("{OURS}notes.txt")), &ours).unwrap();
        let report = sync(&dir, &NodePlan::default(), &owner).expect("a pass");
        assert!(report.removed.is_empty(), "{report:?}");
        assert!(dir.join(DROP_IN_DIR).join("50-copy.conf").exists());
        assert!(dir.join(DROP_IN_DIR).join(format!("{OURS}notes.txt")).exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
