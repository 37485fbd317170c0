//! The image `make image` builds without a Docker engine agrees with the Dockerfile users build: the same user,
//! entrypoint, exposed port and labels, the release binary at the entrypoint, and every library it links.

mod support;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use support::root;

use serde_json::Value;

/// The final stage of the Dockerfile: each instruction with its arguments, continuation lines joined.
fn final_stage() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(root().join("Dockerfile")).expect("Dockerfile");
    let joined = text.replace("\\\n", " ");
    let instructions: Vec<(String, String)> = joined
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once(' ').map(|(i, rest)| (i.to_uppercase(), rest.trim().to_string())))
        .collect();
    let last_from = instructions.iter().rposition(|(i, _)| i == "FROM").expect("a FROM");
    instructions[last_from..].to_vec()
}

/// `LABEL a="x" b="y"` as pairs.
fn labels(arguments: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    let mut rest = arguments.trim();
    while let Some((key, after)) = rest.split_once("=\"") {
        let (value, tail) = after.split_once('"').expect("a closing quote");
        pairs.push((key.trim().to_string(), value.to_string()));
        rest = tail.trim();
    }
    pairs
}

fn blob(layout: &Path, digest: &str) -> Vec<u8> {
    let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
    std::fs::read(layout.join("blobs/sha256").join(hex)).expect("blob")
}

#[test]
fn make_image_agrees_with_the_dockerfile() {
    let layout = root().join("target/image/local-registry-publisher");
    assert!(layout.join("index.json").exists(), "{} is missing: run `make image` (make test does)", layout.display());
    let index: Value = serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    let descriptor = &index["manifests"][0];
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        descriptor["annotations"]["io.containerd.image.name"],
        format!("docker.io/library/local-registry-publisher:{version}")
    );
    let manifest: Value = serde_json::from_slice(&blob(&layout, descriptor["digest"].as_str().unwrap())).unwrap();
    let config: Value = serde_json::from_slice(&blob(&layout, manifest["config"]["digest"].as_str().unwrap())).unwrap();
    let config = &config["config"];

    let mut expected_labels = BTreeMap::new();
    for (instruction, arguments) in final_stage() {
        match instruction.as_str() {
            "USER" => assert_eq!(config["User"], arguments, "USER"),
            "ENTRYPOINT" => {
                let entrypoint: Value = serde_json::from_str(&arguments).expect("ENTRYPOINT in exec form");
                assert_eq!(config["Entrypoint"], entrypoint, "ENTRYPOINT");
            }
            "EXPOSE" => {
                for port in arguments.split_whitespace() {
                    let port = if port.contains('/') { port.to_string() } else { format!("{port}/tcp") };
                    assert!(config["ExposedPorts"].get(&port).is_some(), "EXPOSE {port}: {}", config["ExposedPorts"]);
                }
            }
            "LABEL" => expected_labels.extend(labels(&arguments)),
            "FROM" | "COPY" => {}
            other => panic!("the Dockerfile's final stage has {other}; teach `make image` (xtask::image) about it"),
        }
    }
    let actual_labels: BTreeMap<String, String> = serde_json::from_value(config["Labels"].clone()).unwrap();
    assert_eq!(actual_labels, expected_labels, "LABEL");
    assert_eq!(actual_labels.get("org.opencontainers.image.version").map(String::as_str), Some(version));

    // The one layer holds the release binary at the entrypoint and every library it links.
    let layer = blob(&layout, manifest["layers"][0]["digest"].as_str().unwrap());
    let mut tar = Vec::new();
    flate2::read::GzDecoder::new(layer.as_slice()).read_to_end(&mut tar).expect("a gzipped layer");
    let mut archive = tar::Archive::new(tar.as_slice());
    let files: BTreeMap<String, Vec<u8>> = archive
        .entries()
        .unwrap()
        .map(|entry| {
            let mut entry = entry.unwrap();
            let path = format!("/{}", entry.path().unwrap().display());
            let mut data = Vec::new();
            entry.read_to_end(&mut data).unwrap();
            (path, data)
        })
        .collect();
    let binary = root().join("target/release/local-registry-publisher");
    let entrypoint = config["Entrypoint"][0].as_str().unwrap();
    assert!(files.get(entrypoint) == Some(&std::fs::read(&binary).unwrap()), "the release binary at {entrypoint}");
    for library in xtask::image::linked_libraries(&binary).unwrap() {
        assert!(files.contains_key(&library.display().to_string()), "{} is in the image", library.display());
    }
    let size: u64 = manifest["layers"][0]["size"].as_u64().unwrap() + manifest["config"]["size"].as_u64().unwrap();
    eprintln!("controller image: {:.1} MB compressed", size as f64 / 1e6);
}

/// What a scanner sees of the image: syft (built from its pinned module) reads the layout `make image` writes and
/// finds the Debian packages the C libraries come from, at the versions the build machine's dpkg has, and every
/// file but the program belongs to one of them or is their record.
#[test]
fn a_scanner_sees_every_file_of_the_image_in_a_package_it_lists() {
    let layout = root().join("target/image/local-registry-publisher");
    assert!(layout.join("index.json").exists(), "{} is missing: run `make image` (make test does)", layout.display());
    let syft = testbed::tools::bin_dir().expect("the tools are built (make test builds them)").join("syft");
    let output = std::process::Command::new(syft)
        .args(["scan", "-q", "-o", "syft-json"])
        .arg(format!("oci-dir:{}", layout.display()))
        .env("SYFT_CHECK_FOR_APP_UPDATE", "false")
        .output()
        .expect("run syft");
    assert!(output.status.success(), "syft: {}", String::from_utf8_lossy(&output.stderr));
    let scan: Value = serde_json::from_slice(&output.stdout).expect("syft's JSON");
    let debs: Vec<&Value> = scan["artifacts"].as_array().unwrap().iter().filter(|a| a["type"] == "deb").collect();
    let recorded: Value = serde_json::from_slice(
        &std::fs::read(root().join("target/image/local-registry-publisher.packages.json")).expect("packages.json"),
    )
    .unwrap();
    let seen: Vec<(&str, &str)> =
        debs.iter().map(|a| (a["name"].as_str().unwrap(), a["version"].as_str().unwrap())).collect();
    let wanted: Vec<(&str, &str)> = recorded
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), p["version"].as_str().unwrap()))
        .collect();
    assert_eq!(seen, wanted);
    assert!(wanted.iter().any(|(name, _)| *name == "libc6"), "{wanted:?}");
    let owned: Vec<&str> = debs
        .iter()
        .flat_map(|a| a["metadata"]["files"].as_array().into_iter().flatten())
        .filter_map(|f| f["path"].as_str())
        .collect();
    let files: Vec<&str> =
        scan["files"].as_array().unwrap().iter().filter_map(|f| f["location"]["path"].as_str()).collect();
    assert!(files.len() > 4, "{files:?}");
    for file in files {
        let record = file.starts_with("/var/lib/dpkg/status.d/") || file.starts_with("/usr/share/doc/");
        let program = file == "/usr/local/bin/local-registry-publisher";
        assert!(program || record || owned.contains(&file), "{file} belongs to no package syft lists: {owned:?}");
    }
}
