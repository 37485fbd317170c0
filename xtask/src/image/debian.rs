//! The Debian packages the controller image's C libraries come from, recorded the way distroless images record
//! theirs, so that SBOM tools and scanners see every file: `/var/lib/dpkg/status.d/<package>` (the package's
//! status paragraph), `<package>.md5sums` beside it (the files of it the image holds) and the package's
//! `/usr/share/doc/<package>/copyright`. Read from the dpkg database of the machine that built the binary, which is
//! what it linked.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Serialize;

use crate::Error;

/// One Debian package in the image.
#[derive(Clone, Debug, Serialize)]
pub struct Package {
    pub name: String,
    pub version: String,
    pub architecture: String,
    pub source: String,
    /// SPDX expression of what the image holds of it.
    pub license: String,
    /// Package URL, as SBOMs name Debian packages.
    pub purl: String,
    /// The image's files that are this package's.
    #[serde(skip)]
    pub files: Vec<PathBuf>,
}

/// The SPDX license of each package a release binary links. Debian's copyright files are not all machine-readable,
/// so the few the image can hold are named here, and a package not named fails the build rather than mislabel it.
fn license(package: &str) -> Option<&'static str> {
    match package {
        "libc6" => Some("LGPL-2.1-or-later"),
        "libgcc-s1" => Some("GPL-3.0-or-later WITH GCC-exception-3.1"),
        _ => None,
    }
}

fn run(program: &str, args: &[&str]) -> Result<String, Error> {
    let output = Command::new(program).args(args).output()?;
    if !output.status.success() {
        return Err(Error::Io(std::io::Error::other(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The packages `files` belong to, by the dpkg database (`dpkg -S`), each with its files, sorted by name.
pub fn packages(files: &[PathBuf]) -> Result<Vec<Package>, Error> {
    let release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    let field = |key: &str| {
        release
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_default()
            .trim_matches('"')
            .to_string()
    };
    let (distro, distro_version) = (field("ID"), field("VERSION_ID"));
    let mut packages: Vec<Package> = Vec::new();
    for file in files {
        let owner = run("dpkg", &["-S", &file.display().to_string()])?;
        // "libc6:amd64: /lib/x86_64-linux-gnu/libc.so.6"
        let qualified = owner.lines().next().and_then(|l| l.split_once(": ")).map(|(p, _)| p.to_string());
        let qualified =
            qualified.ok_or_else(|| std::io::Error::other(format!("dpkg -S {}: {owner}", file.display())))?;
        if let Some(package) = packages.iter_mut().find(|p| format!("{}:{}", p.name, p.architecture) == qualified) {
            package.files.push(file.clone());
            continue;
        }
        let fields =
            run("dpkg-query", &["-W", "-f=${Package}\t${Version}\t${Architecture}\t${source:Package}", &qualified])?;
        let parts: Vec<&str> = fields.trim().split('\t').collect();
        let [name, version, architecture, source] = parts[..] else {
            return Err(Error::Io(std::io::Error::other(format!("dpkg-query {qualified}: {fields}"))));
        };
        let Some(license) = license(name) else {
            return Err(Error::Io(std::io::Error::other(format!(
                "the image would hold {} of Debian package {name}, whose license testbed/src/image/debian.rs does not \
                 name: add it there",
                file.display()
            ))));
        };
        let purl = format!(
            "pkg:deb/{distro}/{name}@{}?arch={architecture}&distro={distro}-{distro_version}",
            version.replace('+', "%2B").replace(':', "%3A")
        );
        packages.push(Package {
            name: name.into(),
            version: version.into(),
            architecture: architecture.into(),
            source: source.into(),
            license: license.into(),
            purl,
            files: vec![file.clone()],
        });
    }
    packages.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(packages)
}

/// Writes each package's status paragraph, md5sums and copyright under `dir`; returns them as (path in the image,
/// file here).
pub fn metadata(packages: &[Package], dir: &Path) -> Result<Vec<(String, PathBuf)>, Error> {
    std::fs::create_dir_all(dir)?;
    let mut files = Vec::new();
    for package in packages {
        let qualified = format!("{}:{}", package.name, package.architecture);
        let status = dir.join(&package.name);
        std::fs::write(&status, run("dpkg-query", &["-s", &qualified])?)?;
        files.push((format!("/var/lib/dpkg/status.d/{}", package.name), status));
        let mut sums = String::new();
        for file in &package.files {
            let sum = run("md5sum", &[&file.display().to_string()])?;
            let sum = sum.split_whitespace().next().unwrap_or_default();
            sums.push_str(&format!("{sum}  {}\n", file.display().to_string().trim_start_matches('/')));
        }
        let md5sums = dir.join(format!("{}.md5sums", package.name));
        std::fs::write(&md5sums, sums)?;
        files.push((format!("/var/lib/dpkg/status.d/{}.md5sums", package.name), md5sums));
        let copyright = PathBuf::from(format!("/usr/share/doc/{}/copyright", package.name));
        if copyright.exists() {
            files.push((copyright.display().to_string(), copyright));
        }
    }
    Ok(files)
}

/// The image's SPDX license: the program's, and each package's it holds.
pub fn licenses(program: &str, packages: &[Package]) -> String {
    let mut all = vec![program.to_string()];
    for package in packages {
        if !all.contains(&package.license) {
            all.push(package.license.clone());
        }
    }
    all.join(" AND ")
}
