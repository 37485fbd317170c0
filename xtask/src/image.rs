//! Container images without a Docker engine: an OCI image layout (a directory of JSON and gzipped tar blobs, each
//! named by its sha256) written from files on this machine, and the same layout as a tar archive that
//! `ctr images import` loads and `crane push` sends to a registry.
//!
//! Layers are reproducible: entries are sorted, owned by root and dated at the epoch, so the same inputs give the
//! same digests.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use flate2::Compression;
use flate2::write::GzEncoder;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::Error;

pub mod debian;

/// The program's own license (Cargo.toml's `license`).
pub const PROGRAM_LICENSE: &str = "Apache-2.0";

const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
const CONFIG_TYPE: &str = "application/vnd.oci.image.config.v1+json";
const LAYER_TYPE: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// What goes into an image: files copied from this machine and the runtime settings of its config.
#[derive(Clone, Debug, Default)]
pub struct ImageSpec {
    /// The full reference the image is imported under, e.g. `docker.io/library/pause:testbed`.
    pub name: String,
    /// Path inside the image (absolute) and the file on this machine it is copied from. Modes are kept.
    pub files: Vec<(String, PathBuf)>,
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub user: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub exposed_ports: Vec<String>,
    /// The image's architecture (`amd64`, `arm64`); empty means `amd64`. The files must be built for it.
    pub architecture: String,
    /// `org.opencontainers.image.*` annotations on the manifest and on its descriptor in the index.
    pub annotations: BTreeMap<String, String>,
}

/// An image written as an OCI layout directory and as an archive of it.
#[derive(Clone, Debug)]
pub struct Image {
    pub name: String,
    pub layout: PathBuf,
    pub archive: PathBuf,
    /// The manifest, config and gzipped layer together: what a registry stores and a pull downloads.
    pub compressed_size: u64,
}

impl ImageSpec {
    /// Writes `<dir>/<file name>/` (the layout) and `<dir>/<file name>.tar` (the archive).
    pub fn write(&self, dir: &Path, file_name: &str) -> Result<Image, Error> {
        let layout = dir.join(file_name);
        let blobs = layout.join("blobs/sha256");
        if layout.exists() {
            std::fs::remove_dir_all(&layout)?;
        }
        std::fs::create_dir_all(&blobs)?;

        let layer_tar = self.layer_tar()?;
        let diff_id = sha256(&layer_tar);
        let mut gz = GzEncoder::new(Vec::new(), Compression::best());
        gz.write_all(&layer_tar)?;
        let layer = gz.finish()?;
        let layer_digest = put_blob(&blobs, &layer)?;

        let architecture = if self.architecture.is_empty() { "amd64" } else { self.architecture.as_str() };
        let config = serde_json::to_vec(&json!({
            "architecture": architecture,
            "os": "linux",
            "created": "1970-01-01T00:00:00Z",
            "config": {
                "User": self.user,
                "Entrypoint": self.entrypoint,
                "Cmd": if self.cmd.is_empty() { None } else { Some(&self.cmd) },
                "Labels": self.labels,
                "ExposedPorts": self.exposed_ports.iter().map(|p| (p.clone(), json!({}))).collect::<BTreeMap<_, _>>(),
                "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"],
            },
            "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{diff_id}")]},
        }))
        .map_err(std::io::Error::other)?;
        let config_digest = put_blob(&blobs, &config)?;

        let manifest = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": {"mediaType": CONFIG_TYPE, "digest": format!("sha256:{config_digest}"), "size": config.len()},
            "layers": [{"mediaType": LAYER_TYPE, "digest": format!("sha256:{layer_digest}"), "size": layer.len()}],
            "annotations": self.annotations,
        }))
        .map_err(std::io::Error::other)?;
        let manifest_digest = put_blob(&blobs, &manifest)?;
        let tag = self.name.rsplit_once(':').map(|(_, tag)| tag).unwrap_or("latest");
        let mut descriptor_annotations = self.annotations.clone();
        // containerd names the image after the first; registries and crane read the second.
        descriptor_annotations.insert("io.containerd.image.name".into(), self.name.clone());
        descriptor_annotations.insert("org.opencontainers.image.ref.name".into(), tag.into());
        let index = json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [{
                "mediaType": MANIFEST_TYPE,
                "digest": format!("sha256:{manifest_digest}"),
                "size": manifest.len(),
                "platform": {"architecture": architecture, "os": "linux"},
                "annotations": descriptor_annotations,
            }],
        });
        std::fs::write(layout.join("index.json"), serde_json::to_vec(&index).map_err(std::io::Error::other)?)?;
        std::fs::write(layout.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#)?;

        let archive = dir.join(format!("{file_name}.tar"));
        let mut builder = tar::Builder::new(std::fs::File::create(&archive)?);
        builder.mode(tar::HeaderMode::Deterministic);
        builder.append_dir_all(".", &layout)?;
        builder.into_inner()?.flush()?;
        let compressed_size = (layer.len() + config.len() + manifest.len()) as u64;
        Ok(Image { name: self.name.clone(), layout, archive, compressed_size })
    }

    fn layer_tar(&self) -> Result<Vec<u8>, Error> {
        let mut files = self.files.clone();
        files.sort();
        let mut builder = tar::Builder::new(Vec::new());
        let mut dirs_written = std::collections::BTreeSet::new();
        for (target, source) in &files {
            let relative = target.trim_start_matches('/');
            // Parent directories first, as image tools expect.
            let mut parent = PathBuf::new();
            for part in Path::new(relative).parent().into_iter().flat_map(Path::components) {
                parent.push(part);
                if dirs_written.insert(parent.clone()) {
                    let mut header = header(tar::EntryType::Directory, 0o755, 0);
                    builder.append_data(&mut header, &parent, std::io::empty())?;
                }
            }
            let data = std::fs::read(source)?;
            let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(source)?.permissions()) & 0o7777;
            let mut header = header(tar::EntryType::Regular, mode, data.len() as u64);
            builder.append_data(&mut header, relative, data.as_slice())?;
        }
        Ok(builder.into_inner()?)
    }
}

fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_size(size);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(0);
    header
}

fn sha256(data: &[u8]) -> String {
    Sha256::digest(data).iter().map(|b| format!("{b:02x}")).collect()
}

fn put_blob(blobs: &Path, data: &[u8]) -> Result<String, Error> {
    let digest = sha256(data);
    std::fs::write(blobs.join(&digest), data)?;
    Ok(digest)
}

/// The shared libraries a dynamically linked program loads (its ELF interpreter included), as `ldd` lists them.
pub fn linked_libraries(program: &Path) -> Result<Vec<PathBuf>, Error> {
    let output = Command::new("ldd").arg(program).output()?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        // A static binary: ldd says "not a dynamic executable" and links nothing.
        return Ok(Vec::new());
    }
    Ok(text
        .lines()
        .filter_map(|line| {
            // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)"
            let path = line.split("=>").last()?.split_whitespace().next()?;
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect())
}

/// The controller's image as the Dockerfile describes it (user, entrypoint, port, labels), with the release
/// binary and exactly the shared libraries it links in place of the distroless base. `annotations` are the build's
/// own facts (`org.opencontainers.image.revision`, `.source`); the version, description and licenses (the
/// program's and those of the Debian packages its libraries come from) are added here.
pub fn controller(
    binary: &Path,
    dir: &Path,
    version: &str,
    architecture: &str,
    annotations: BTreeMap<String, String>,
) -> Result<Image, Error> {
    std::fs::create_dir_all(dir)?;
    controller_spec(binary, version, architecture, annotations, dir)?.write(dir, "local-registry-publisher")
}

/// The controller's image a test pushes to a registry: the same program as [`controller`]'s, with a label of
/// `copy` so that its image ID differs. containerd keeps one image per ID: pulling the ID that `make image` already
/// imported under another name made the kubelet lose the imported name and fail later pods that use it.
pub fn controller_copy(binary: &Path, dir: &Path, version: &str, copy: &str) -> Result<Image, Error> {
    std::fs::create_dir_all(dir)?;
    let mut spec = controller_spec(binary, version, "amd64", BTreeMap::new(), dir)?;
    spec.labels.insert("testbed.local/copy".into(), copy.into());
    spec.write(dir, copy)
}

fn controller_spec(
    binary: &Path,
    version: &str,
    architecture: &str,
    annotations: BTreeMap<String, String>,
    dir: &Path,
) -> Result<ImageSpec, Error> {
    let entrypoint = "/usr/local/bin/local-registry-publisher";
    let mut files = vec![(entrypoint.to_string(), binary.to_path_buf())];
    let libraries = linked_libraries(binary)?;
    for library in &libraries {
        files.push((library.display().to_string(), library.clone()));
    }
    // Every file but the program belongs to a Debian package that scanners see (see `debian`).
    let packages = debian::packages(&libraries)?;
    files.extend(debian::metadata(&packages, &dir.join("debian"))?);
    std::fs::write(
        dir.join("local-registry-publisher.packages.json"),
        serde_json::to_vec_pretty(&packages).map_err(std::io::Error::other)?,
    )?;
    let licenses = debian::licenses(PROGRAM_LICENSE, &packages);
    let labels = [
        ("org.opencontainers.image.title", "local-registry-publisher"),
        (
            "org.opencontainers.image.description",
            "Keeps kube-public/local-registry-hosting (KEP-1755) true to the registry running in the cluster",
        ),
        ("org.opencontainers.image.licenses", licenses.as_str()),
        ("org.opencontainers.image.version", version),
    ];
    let labels: BTreeMap<String, String> = labels.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let mut annotations = annotations;
    for key in [
        "org.opencontainers.image.title",
        "org.opencontainers.image.description",
        "org.opencontainers.image.licenses",
        "org.opencontainers.image.version",
    ] {
        annotations.insert(key.into(), labels[key].clone());
    }
    Ok(ImageSpec {
        name: format!("docker.io/library/local-registry-publisher:{version}"),
        files,
        entrypoint: vec![entrypoint.into()],
        user: Some("65532:65532".into()),
        labels,
        exposed_ports: vec!["8080/tcp".into()],
        architecture: architecture.into(),
        annotations,
        ..ImageSpec::default()
    })
}
