//! The release path as far as this machine can run it (the workflow in .github/workflows/release.yml is thin over
//! these commands): `hack/dist.sh` writes complete, checksummed artifacts from what `make test` builds, a krew
//! manifest for the CLI archives, the CHANGELOG section; `hack/version.sh` moves every place the version lives;
//! the workflows pin every action by commit. Installing from a registry is in tests/real_node/release.rs.

mod support;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use support::root;

use serde_json::Value;

const VERSION: &str = env!("CARGO_PKG_VERSION");
const NAME: &str = "local-registry-publisher";

fn run(command: &mut Command) -> String {
    let output: Output = command.output().unwrap_or_else(|e| panic!("run {command:?}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{command:?} failed: {}\n{stdout}", String::from_utf8_lossy(&output.stderr));
    stdout
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lrp-release-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn helm() -> PathBuf {
    testbed::tools::bin_dir().expect("the tools are built (make test builds them)").join("helm")
}

/// The files of a tar archive (gzipped or not), by path.
fn tar_files(bytes: &[u8]) -> BTreeMap<String, Vec<u8>> {
    let mut plain = Vec::new();
    if bytes.starts_with(&[0x1f, 0x8b]) {
        flate2::read::GzDecoder::new(bytes).read_to_end(&mut plain).expect("gzip");
    } else {
        plain = bytes.to_vec();
    }
    let mut archive = tar::Archive::new(plain.as_slice());
    let mut files = BTreeMap::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let path = entry.path().unwrap().display().to_string();
        let path = path.trim_start_matches("./").to_string();
        // krew's extractor takes directories and regular files only; so does this one.
        let kind = entry.header().entry_type();
        assert!(
            kind.is_file() || kind.is_dir(),
            "{path} is a {kind:?}: krew stops with \"unable to handle file type\""
        );
        let mut data = Vec::new();
        entry.read_to_end(&mut data).unwrap();
        files.insert(path, data);
    }
    files
}

#[test]
fn dist_writes_every_artifact_checksummed_annotated_and_described() {
    let out = scratch("dist");
    let image = root().join("target/image").join(format!("{NAME}.tar"));
    assert!(image.exists(), "{} is missing: run `make image` (make test does)", image.display());
    run(Command::new(root().join("hack/dist.sh")).arg("all").arg(&out));

    let mut names: Vec<String> =
        std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    let expected = [
        "SHA256SUMS".to_string(),
        format!("{NAME}-{VERSION}-image-linux-amd64.oci.tar"),
        format!("{NAME}-{VERSION}-linux-amd64.cdx.json"),
        format!("{NAME}-{VERSION}-linux-amd64.tar.gz"),
        format!("{NAME}-{VERSION}.tgz"),
    ];
    assert_eq!(names, expected);
    let verified = run(Command::new("sha256sum").arg("--check").arg("SHA256SUMS").current_dir(&out));
    assert_eq!(verified.lines().filter(|l| l.ends_with(": OK")).count(), 4, "{verified}");

    // The image: one linux/amd64 manifest, annotated with what it is and where it comes from.
    let layout = tar_files(&std::fs::read(out.join(&expected[1])).unwrap());
    let index: Value = serde_json::from_slice(&layout["index.json"]).unwrap();
    let descriptor = &index["manifests"][0];
    assert_eq!(descriptor["platform"], serde_json::json!({"architecture": "amd64", "os": "linux"}));
    let digest = descriptor["digest"].as_str().unwrap().strip_prefix("sha256:").unwrap();
    let manifest: Value = serde_json::from_slice(&layout[&format!("blobs/sha256/{digest}")]).unwrap();
    let annotations = &manifest["annotations"];
    assert_eq!(annotations["org.opencontainers.image.version"], VERSION);
    // What is inside: the program's license and those of the C libraries the image holds.
    let licenses = "Apache-2.0 AND LGPL-2.1-or-later AND GPL-3.0-or-later WITH GCC-exception-3.1";
    assert_eq!(annotations["org.opencontainers.image.licenses"], licenses);
    // The revision is the checkout's; outside one there is nothing to compare it with, which must not pass unseen.
    let head = Command::new("git").args(["rev-parse", "HEAD"]).current_dir(root()).output().expect("run git");
    assert!(
        head.status.success(),
        "the image's revision label cannot be checked: git rev-parse HEAD failed in {} (run the tests in a git \
         checkout): {}",
        root().display(),
        String::from_utf8_lossy(&head.stderr)
    );
    let revision = String::from_utf8_lossy(&head.stdout).trim().to_string();
    assert_eq!(annotations["org.opencontainers.image.revision"], revision.as_str(), "{annotations}");

    // The chart, at the crate's version, defaulting to the local image when no repository is given.
    let chart = tar_files(&std::fs::read(out.join(&expected[4])).unwrap());
    let chart_yaml = String::from_utf8_lossy(&chart[&format!("{NAME}/Chart.yaml")]).into_owned();
    assert!(chart_yaml.contains(&format!("\nversion: {VERSION}\n")), "{chart_yaml}");
    let values = String::from_utf8_lossy(&chart[&format!("{NAME}/values.yaml")]).into_owned();
    assert!(values.contains(&format!("  repository: {NAME} # release: image repository")), "{values}");
    // Artifact Hub's metadata: what the chart is, the image it installs, and this version's changes, one entry per
    // CHANGELOG bullet with its section as the kind.
    let chart_meta: Value = serde_saphyr::from_str(&chart_yaml).expect("Chart.yaml");
    let annotations = &chart_meta["annotations"];
    assert_eq!(annotations["artifacthub.io/license"], "Apache-2.0");
    assert_eq!(annotations["artifacthub.io/category"], "integration-delivery");
    let images: Value = serde_saphyr::from_str(annotations["artifacthub.io/images"].as_str().unwrap()).unwrap();
    assert_eq!(images, serde_json::json!([{"name": NAME, "image": format!("{NAME}:{VERSION}")}]));
    let changes: Vec<Value> = serde_saphyr::from_str(annotations["artifacthub.io/changes"].as_str().unwrap()).unwrap();
    let section = run(Command::new(root().join("hack/dist.sh")).arg("notes"));
    assert_eq!(changes.len(), section.lines().filter(|l| l.starts_with("- ")).count(), "{changes:?}");
    let kinds = ["added", "changed", "deprecated", "removed", "fixed", "security"];
    assert!(changes.iter().all(|c| kinds.contains(&c["kind"].as_str().unwrap_or_default())), "{changes:?}");
    let first = section.lines().find_map(|l| l.strip_prefix("- ")).unwrap();
    assert!(changes[0]["description"].as_str().unwrap().starts_with(first), "{:?}", changes[0]);

    // The CLI: the binary, the license, the README, as regular files (krew links kubectl's name to the binary).
    let cli = tar_files(&std::fs::read(out.join(&expected[3])).unwrap());
    assert_eq!(cli.keys().map(String::as_str).collect::<Vec<_>>(), ["", "LICENSE", "README.md", NAME]);
    assert_eq!(cli[NAME], std::fs::read(root().join("target/release").join(NAME)).unwrap());

    // The SBOM: CycloneDX, the shipped crates only (no test tools), and the Debian packages of the image's libraries.
    let sbom: Value = serde_json::from_slice(&std::fs::read(out.join(&expected[2])).unwrap()).unwrap();
    assert_eq!(sbom["bomFormat"], "CycloneDX");
    assert_eq!(sbom["metadata"]["component"]["name"], NAME);
    let components: Vec<&str> =
        sbom["components"].as_array().unwrap().iter().filter_map(|c| c["name"].as_str()).collect();
    for shipped in ["kube", "tokio", "rustls", "k8s-openapi"] {
        assert!(components.contains(&shipped), "{shipped} is in the SBOM: {components:?}");
    }
    for test_only in ["testbed", "xtask", "proptest", "tar", "rcgen"] {
        assert!(!components.contains(&test_only), "{test_only} is a test dependency, not shipped");
    }
    let debian: Vec<&Value> = sbom["components"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["purl"].as_str().is_some_and(|p| p.starts_with("pkg:deb/")))
        .collect();
    let debian_names: Vec<&str> = debian.iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(debian_names, ["libc6", "libgcc-s1"]);
    assert_eq!(debian[0]["licenses"][0]["expression"], "LGPL-2.1-or-later");
    eprintln!("SBOM: {} components", components.len());

    // One layout for every architecture's image, under an index annotated like the images.
    run(Command::new(root().join("hack/dist.sh")).arg("index").arg(&out));
    let layout = out.join("image-index");
    let top: Value = serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    assert_eq!(top["manifests"][0]["mediaType"], "application/vnd.oci.image.index.v1+json");
    let digest = top["manifests"][0]["digest"].as_str().unwrap().strip_prefix("sha256:").unwrap();
    let bytes = std::fs::read(layout.join("blobs/sha256").join(digest)).unwrap();
    let sum = run(Command::new("sha256sum").arg(layout.join("blobs/sha256").join(digest)));
    assert!(sum.starts_with(digest), "the index blob is named by its digest");
    let image_index: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(image_index["annotations"]["org.opencontainers.image.licenses"], licenses);
    assert_eq!(image_index["annotations"]["org.opencontainers.image.version"], VERSION);
    assert!(image_index["annotations"]["org.opencontainers.image.description"].is_string(), "{image_index}");
    let platforms: Vec<&Value> = image_index["manifests"].as_array().unwrap().iter().map(|m| &m["platform"]).collect();
    assert_eq!(platforms, [&serde_json::json!({"architecture": "amd64", "os": "linux"})]);
    let image_digest = image_index["manifests"][0]["digest"].as_str().unwrap().strip_prefix("sha256:").unwrap();
    assert!(layout.join("blobs/sha256").join(image_digest).exists(), "the image's blobs are in the layout");
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn a_release_chart_defaults_to_the_image_the_release_pushed() {
    let out = scratch("chart");
    let source = "https://github.com/someone/some-fork";
    run(Command::new(root().join("hack/dist.sh"))
        .arg("chart")
        .arg(&out)
        .arg("ghcr.io/someone/some-fork")
        .env("SOURCE_URL", source));
    let chart = tar_files(&std::fs::read(out.join(format!("{NAME}-{VERSION}.tgz"))).unwrap());
    // Where it comes from, for Artifact Hub and `helm show chart`.
    let chart_yaml: Value =
        serde_saphyr::from_str(&String::from_utf8_lossy(&chart[&format!("{NAME}/Chart.yaml")])).unwrap();
    assert_eq!((&chart_yaml["home"], &chart_yaml["sources"]), (&Value::from(source), &serde_json::json!([source])));
    let values = String::from_utf8_lossy(&chart[&format!("{NAME}/values.yaml")]).into_owned();
    assert!(values.contains("  repository: ghcr.io/someone/some-fork # release: image repository"), "{values}");
    let rendered = run(Command::new(helm()).arg("template").arg("x").arg(out.join(format!("{NAME}-{VERSION}.tgz"))));
    assert!(rendered.contains(&format!("image: \"ghcr.io/someone/some-fork:{VERSION}\"")), "{rendered}");
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn the_krew_manifest_names_every_cli_archive_with_its_checksum() {
    let out = scratch("krew");
    let platforms = ["darwin-amd64", "darwin-arm64", "linux-amd64", "linux-arm64"];
    let mut sums = String::new();
    for (i, platform) in platforms.iter().enumerate() {
        sums += &format!("{:064x}  {NAME}-{VERSION}-{platform}.tar.gz\n", i + 1);
    }
    sums += &format!("{:064x}  {NAME}-{VERSION}-windows-amd64.zip\n", 9);
    sums += &format!("{:064x}  {NAME}-{VERSION}-image-linux-amd64.oci.tar\n", 10);
    sums += &format!("{:064x}  {NAME}-{VERSION}.tgz\n", 11);
    std::fs::write(out.join("SHA256SUMS"), sums).unwrap();
    let base = "https://github.com/someone/some-fork/releases/download/v1";
    let yaml = run(Command::new(root().join("hack/dist.sh")).arg("krew").arg(&out).arg(base));
    let manifest: Value = serde_saphyr::from_str(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    assert_eq!(manifest["metadata"]["name"], "registry-hosting");
    assert_eq!(manifest["spec"]["version"], format!("v{VERSION}"));
    assert_eq!(manifest["spec"]["homepage"], "https://github.com/someone/some-fork");
    let entries = manifest["spec"]["platforms"].as_array().unwrap();
    assert_eq!(entries.len(), 5, "the CLI archives only: {yaml}");
    let windows = entries.iter().find(|p| p["selector"]["matchLabels"]["os"] == "windows").unwrap();
    assert_eq!(windows["uri"], format!("{base}/{NAME}-{VERSION}-windows-amd64.zip"));
    assert_eq!(windows["sha256"], format!("{:064x}", 9));
    assert_eq!(windows["bin"], format!("{NAME}.exe"));
    let linux =
        entries.iter().find(|p| p["selector"]["matchLabels"] == serde_json::json!({"os": "linux", "arch": "arm64"}));
    assert_eq!(linux.unwrap()["bin"], NAME);
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn the_version_command_moves_every_place_the_version_lives_and_opens_a_changelog_section() {
    let copy = scratch("version");
    for path in ["Cargo.toml", "Cargo.lock", "Dockerfile", "README.md", "CHANGELOG.md", "charts", "deploy", "docs"] {
        run(Command::new("cp").arg("-r").arg(root().join(path)).arg(&copy));
    }
    run(Command::new(root().join("hack/version.sh")).arg("7.8.9").arg(&copy));

    let read = |path: &str| std::fs::read_to_string(copy.join(path)).unwrap();
    assert!(read("Cargo.toml").contains("\nversion = \"7.8.9\"\n"));
    assert!(read("Cargo.lock").contains(&format!("name = \"{NAME}\"\nversion = \"7.8.9\"\n")));
    let chart = read("charts/local-registry-publisher/Chart.yaml");
    assert!(chart.contains("\nversion: 7.8.9\n") && chart.contains("\nappVersion: \"7.8.9\"\n"), "{chart}");
    assert!(read("Dockerfile").contains("org.opencontainers.image.version=\"7.8.9\""));
    let changelog = read("CHANGELOG.md");
    let unreleased = changelog.find("## [Unreleased]").unwrap();
    let new = changelog.find("## [7.8.9] - ").expect("a section for the new version");
    let old = changelog.find(&format!("## [{VERSION}]")).unwrap();
    assert!(unreleased < new && new < old, "{changelog}");
    // Nothing that names the release still names the old one; the manifests equal the chart rendered anew.
    for path in [
        "Dockerfile",
        "README.md",
        "deploy/local-registry-publisher.yaml",
        "charts/local-registry-publisher/Chart.yaml",
    ] {
        let text = read(path);
        assert!(!text.contains(&format!("{NAME}:{VERSION}")), "{path} still names the image {VERSION}");
        assert!(!text.contains(&format!("\"{VERSION}\"")), "{path} still names {VERSION}");
        assert!(!text.contains(&format!("--version {VERSION}")), "{path} still installs {VERSION}");
    }
    let rendered = run(Command::new(helm())
        .args(["template", NAME])
        .arg(copy.join("charts/local-registry-publisher"))
        .args(["--namespace", NAME, "--no-hooks"]));
    let deploy = read("deploy/local-registry-publisher.yaml");
    assert_eq!(deploy.split_once('\n').unwrap().1, rendered, "the moved manifests are the chart rendered anew");

    let again = Command::new(root().join("hack/version.sh")).arg("7.8.9").arg(&copy).output().unwrap();
    assert!(!again.status.success(), "moving to the same version twice is refused");
    let invalid = Command::new(root().join("hack/version.sh")).arg("7.8").arg(&copy).output().unwrap();
    assert_eq!(invalid.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&invalid.stderr).contains("a semantic version"));
    std::fs::remove_dir_all(&copy).unwrap();
}

#[test]
fn the_release_notes_are_the_versions_changelog_section() {
    let notes = run(Command::new(root().join("hack/dist.sh")).arg("notes"));
    let changelog = std::fs::read_to_string(root().join("CHANGELOG.md")).unwrap();
    let heading = format!("## [{VERSION}] - ");
    let section = &changelog[changelog.find(&heading).expect("a section for the crate's version")..];
    let body = section.split_once('\n').unwrap().1;
    let body = body.find("\n## [").map_or(body, |end| &body[..=end]);
    assert!(!notes.trim().is_empty());
    assert_eq!(notes.trim(), body.trim(), "the notes are the section, without its heading");
}

/// Every action a workflow uses is pinned by a full commit, with the version it is in a comment; images and charts
/// are named after the repository the workflow runs in, never after an owner written here.
#[test]
fn the_workflows_pin_every_action_by_commit_and_invent_no_owner() {
    let dir = root().join(".github/workflows");
    let mut uses = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for line in text.lines() {
            let Some((_, action)) = line.split_once("uses: ") else { continue };
            // A workflow of this repository, called at the same commit.
            if let Some(local) = action.strip_prefix("./") {
                assert!(root().join(local).exists(), "{}: {line}", path.display());
                continue;
            }
            uses += 1;
            let (name, pin) = action.split_once('@').unwrap_or_else(|| panic!("{}: {line}", path.display()));
            let (sha, comment) =
                pin.split_once(" # v").unwrap_or_else(|| panic!("{}: no version comment: {line}", path.display()));
            assert!(
                sha.len() == 40 && sha.bytes().all(|b| b.is_ascii_hexdigit()) && !comment.is_empty(),
                "{}: {name} is not pinned by commit: {line}",
                path.display()
            );
        }
        for (i, _) in text.match_indices("ghcr.io/") {
            let after = &text[i + "ghcr.io/".len()..];
            assert!(
                after.starts_with("${") || after.starts_with("<owner>"),
                "{}: ghcr.io names an owner: {}",
                path.display(),
                after.lines().next().unwrap_or_default()
            );
        }
    }
    assert!(uses >= 10, "the workflows use actions: {uses}");
}

/// macOS's /bin/bash is 3.2, which the release's CLI legs run hack/dist.sh with: there an empty array expanded as
/// "${a[@]}" or ${a[@]} under `set -u` is an unbound variable, and bash 4 constructs do not parse. None is used (bash
/// 3.2 itself is not packaged for this machine, so the constructs that differ are checked instead), and the script
/// runs under `bash --posix`.
#[test]
fn the_release_script_uses_no_construct_that_bash_3_2_reads_differently() {
    let script = std::fs::read_to_string(root().join("hack/dist.sh")).unwrap();
    let problems = bash_3_2_problems(&script);
    assert!(problems.is_empty(), "hack/dist.sh:\n{}", problems.join("\n"));
    let notes = Command::new("bash").arg("--posix").arg(root().join("hack/dist.sh")).arg("notes").output().unwrap();
    assert!(notes.status.success(), "{}", String::from_utf8_lossy(&notes.stderr));
}

/// Each line of `script` that bash 3.2 reads differently from bash 4 and later, with its number.
fn bash_3_2_problems(script: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for (number, line) in script.lines().enumerate() {
        let code = line.split(" #").next().unwrap_or_default();
        if code.trim_start().starts_with('#') {
            continue;
        }
        // Every ${...}, quoted or not: a whole array (name[@] closed at once) is unbound when empty, unless it is
        // the alternative of its own guard, ${a[@]+"${a[@]}"}. A count (${#a[@]}) is fine.
        for (at, _) in code.match_indices("${") {
            let inner = &code[at + 2..];
            let name_end = inner.find(|c: char| "}+-:=?%/".contains(c)).unwrap_or(inner.len());
            let whole_array = inner[..name_end].ends_with("[@]") && inner[name_end..].starts_with('}');
            let guarded = code[..at].trim_end_matches('"').ends_with("[@]+");
            if whole_array && !inner.starts_with('#') && !guarded {
                problems.push(format!(
                    "{}: ${{{}}} is unbound on bash 3.2 when the array is empty; write ${{a[@]+\"${{a[@]}}\"}}",
                    number + 1,
                    &inner[..name_end]
                ));
            }
        }
        for bash4 in
            ["declare -A", "local -A", "mapfile", "readarray", "local -n", "declare -n", ",,}", "^^}", "&>>", "|&"]
        {
            if code.contains(bash4) {
                problems.push(format!("{}: {bash4} is not bash 3.2: {line}", number + 1));
            }
        }
    }
    problems
}

#[test]
fn the_bash_3_2_check_finds_whole_arrays_quoted_or_not_and_lets_guarded_ones_and_counts_pass() {
    let found = |script: &str| bash_3_2_problems(script).len();
    assert_eq!(found(r#"tar "${same[@]}" -C x"#), 1);
    assert_eq!(found("for f in ${files[@]}; do :; done"), 1);
    assert_eq!(found(r#"echo "first ${a[@]} then ${b[@]}""#), 2);
    assert_eq!(found(r#"tar ${same[@]+"${same[@]}"} -C x"#), 0);
    assert_eq!(found(r#"n=${#same[@]}; v=${same[0]}; echo "$v" "${v:-x}""#), 0);
    assert_eq!(found("# a comment: \"${a[@]}\""), 0);
    assert_eq!(found("mapfile -t lines < f"), 1);
}

/// A copy of what hack/dist.sh reads, in a scratch tree: the script, Cargo.toml (with CRLF line ends when `crlf`,
/// as a Windows checkout without .gitattributes would have it), the license, the README and the release binary
/// under `binary`; and `uname` answering `system` and `machine`.
fn dist_tree(name: &str, crlf: bool, binary: &str, system: &str, machine: &str) -> (PathBuf, String) {
    let tree = scratch(name);
    std::fs::create_dir_all(tree.join("hack")).unwrap();
    std::fs::create_dir_all(tree.join("target/release")).unwrap();
    std::fs::create_dir_all(tree.join("fake-bin")).unwrap();
    std::fs::copy(root().join("hack/dist.sh"), tree.join("hack/dist.sh")).unwrap();
    let cargo = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let cargo = if crlf { cargo.replace('\n', "\r\n") } else { cargo };
    std::fs::write(tree.join("Cargo.toml"), cargo).unwrap();
    for file in ["LICENSE", "README.md"] {
        std::fs::copy(root().join(file), tree.join(file)).unwrap();
    }
    std::fs::copy(root().join("target/release").join(NAME), tree.join("target/release").join(binary)).unwrap();
    let uname = format!(
        "#!/bin/sh\ncase \"$1\" in -s) echo {system} ;; -m) echo {machine} ;; *) exec /bin/uname \"$@\" ;; esac\n"
    );
    let fake = tree.join("fake-bin/uname");
    std::fs::write(&fake, uname).unwrap();
    run(Command::new("chmod").arg("+x").arg(&fake));
    let path = format!("{}:{}", tree.join("fake-bin").display(), std::env::var("PATH").unwrap_or_default());
    (tree, path)
}

#[test]
fn a_windows_checkout_with_crlf_line_ends_names_its_zip_by_version_with_the_plugins_copy_inside() {
    assert!(root().join("target/release").join(NAME).exists(), "run `make image` (make test does)");
    let (tree, path) = dist_tree("windows", true, &format!("{NAME}.exe"), "MINGW64_NT-10.0-26100", "x86_64");
    let out = tree.join("dist");
    run(Command::new("bash").arg("--posix").arg(tree.join("hack/dist.sh")).args(["cli"]).arg(&out).env("PATH", &path));
    let zip = out.join(format!("{NAME}-{VERSION}-windows-amd64.zip"));
    assert!(zip.exists(), "{:?}", std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name()).collect::<Vec<_>>());
    let listed = run(Command::new("unzip").arg("-Z1").arg(&zip));
    let mut entries: Vec<&str> = listed.lines().collect();
    entries.sort();
    assert_eq!(entries, ["LICENSE", "README.md", "kubectl-registry_hosting.exe", &format!("{NAME}.exe")]);
    // Every entry is a regular file (the Windows copy, not a link).
    let details = run(Command::new("unzip").arg("-Z").arg(&zip));
    assert!(details.lines().filter(|l| l.starts_with('l')).count() == 0, "{details}");
    std::fs::remove_dir_all(&tree).unwrap();
}

/// The install path the README gives, with the real client: krew (built from its pinned module) installs the CLI
/// archive `hack/dist.sh` makes for this machine with the manifest it writes, and kubectl runs it as
/// `kubectl registry-hosting` against a cluster.
#[tokio::test]
async fn krew_installs_the_cli_archive_and_kubectl_runs_it_as_a_plugin() {
    assert!(root().join("target/release").join(NAME).exists(), "run `make image` (make test does)");
    let tools = testbed::tools::bin_dir().expect("the tools are built (make test builds them)");
    let out = scratch("krew-install");
    // Under bash --posix, as the macOS runners' bash 3.2 would run it as far as this machine can tell.
    run(Command::new("bash").arg("--posix").arg(root().join("hack/dist.sh")).arg("cli").arg(&out));
    run(Command::new(root().join("hack/dist.sh")).arg("sums").arg(&out));
    let manifest =
        run(Command::new(root().join("hack/dist.sh")).arg("krew").arg(&out).arg("https://example.invalid/v1"));
    std::fs::write(out.join("registry-hosting.yaml"), manifest).unwrap();
    let archive = out.join(format!("{NAME}-{VERSION}-linux-amd64.tar.gz"));
    let krew_root = out.join("krew");
    // kubectl finds krew as its plugin, as on a user's machine.
    let plugins = out.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::os::unix::fs::symlink(tools.join("krew"), plugins.join("kubectl-krew")).unwrap();
    let path = format!("{}:{}:{}", krew_root.join("bin").display(), plugins.display(), tools.display());
    let installed = Command::new(tools.join("kubectl"))
        .args(["krew", "install"])
        .arg(format!("--manifest={}", out.join("registry-hosting.yaml").display()))
        .arg(format!("--archive={}", archive.display()))
        .env("KREW_ROOT", &krew_root)
        .env("PATH", &path)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(installed.status.success(), "krew install: {}", String::from_utf8_lossy(&installed.stderr));

    let plane = testbed::ControlPlane::shared();
    let client = plane.client().await.expect("admin client");
    let ns = plane.namespace(&client, "krew").await.expect("namespace");
    let document = "host: \"localhost:5001\"\nhelp: \"https://kind.sigs.k8s.io/docs/user/local-registry/\"\n";
    let configmap = serde_json::from_value(serde_json::json!({"metadata": {"name": "hosting"},
        "data": {"localRegistryHosting.v1": document}}))
    .unwrap();
    kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), &ns)
        .create(&Default::default(), &configmap)
        .await
        .expect("a published document");
    let get = Command::new(tools.join("kubectl"))
        .args(["registry-hosting", "get", "-o", "json"])
        .arg(format!("--kubeconfig={}", plane.kubeconfig().display()))
        .arg(format!("--configmap-namespace={ns}"))
        .arg("--configmap-name=hosting")
        .env("PATH", path)
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&get.stdout).unwrap_or_else(|e| {
        panic!("{e}: {}{}", String::from_utf8_lossy(&get.stdout), String::from_utf8_lossy(&get.stderr))
    });
    assert_eq!(report["configmap"], format!("{ns}/hosting"));
    assert!(report["document"].as_str().is_some_and(|d| d.contains("localhost:5001")), "{report}");
    plane.delete_namespace(&client, &ns).await.expect("delete namespace");
    std::fs::remove_dir_all(&out).unwrap();
}

/// A tag is linted and tested before anything is built, signed or pushed: the release calls CI first and every other
/// job waits for it; CI also checks and packages the CLI on macOS and Windows runners and builds at the MSRV.
#[test]
fn the_release_runs_only_after_ci_passed_on_the_tagged_commit() {
    let read = |name: &str| -> Value {
        let text = std::fs::read_to_string(root().join(".github/workflows").join(name)).unwrap();
        serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let release = read("release.yml");
    let jobs = release["jobs"].as_object().unwrap();
    assert_eq!(jobs["ci"]["uses"], "./.github/workflows/ci.yml");
    let needs = |job: &str| -> Vec<String> {
        match &jobs[job]["needs"] {
            Value::String(one) => vec![one.clone()],
            Value::Array(many) => many.iter().filter_map(|n| n.as_str().map(String::from)).collect(),
            _ => Vec::new(),
        }
    };
    fn after_ci(job: &str, needs: &dyn Fn(&str) -> Vec<String>) -> bool {
        needs(job).iter().any(|n| n == "ci" || after_ci(n, needs))
    }
    for job in jobs.keys().filter(|j| *j != "ci") {
        assert!(after_ci(job, &needs), "release job {job} does not wait for CI");
    }
    let ci = read("ci.yml");
    assert!(ci["on"].get("workflow_call").is_some(), "ci.yml can be called by the release");
    let ci_jobs = ci["jobs"].as_object().unwrap();
    let runners: Vec<&str> = ci_jobs["cli"]["strategy"]["matrix"]["include"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["runner"].as_str())
        .collect();
    assert!(runners.iter().any(|r| r.starts_with("macos")) && runners.iter().any(|r| r.starts_with("windows")));
    let steps = serde_json::to_string(&ci_jobs["cli"]["steps"]).unwrap();
    assert!(steps.contains("cargo check --locked --target") && steps.contains("hack/dist.sh cli"), "{steps}");
    assert!(serde_json::to_string(&ci_jobs["msrv"]).unwrap().contains("rust-version"), "an MSRV job");
}

/// `make test` builds the main set of tools, not every tool, so the chart's packaging finds helm by itself: from
/// `LRP_TOOLS_DIR`, or else in a tool cache that holds helm and nothing more (a fresh machine's CI failed here when
/// it asked for every tool).
#[test]
fn dist_packages_the_chart_with_helm_alone_in_the_tool_cache() {
    let helm = std::fs::canonicalize(helm()).expect("helm's build");
    // <cache>/tools/helm-<version>-<key>/bin/helm
    let built = helm.parent().and_then(Path::parent).expect("helm's build directory");
    let cache = scratch("cache");
    std::fs::create_dir_all(cache.join("tools")).unwrap();
    std::os::unix::fs::symlink(built, cache.join("tools").join(built.file_name().unwrap())).unwrap();
    let out = scratch("chart-only");
    let path = std::env::var("PATH").unwrap_or_default();
    let without_helm: Vec<&str> = path.split(':').filter(|dir| !Path::new(dir).join("helm").exists()).collect();
    run(Command::new(root().join("hack/dist.sh"))
        .args(["chart"])
        .arg(&out)
        .env_remove("LRP_TOOLS_DIR")
        .env("LRP_CACHE_DIR", &cache)
        .env("PATH", without_helm.join(":")));
    assert!(out.join(format!("{NAME}-{VERSION}.tgz")).exists());
    let _ = std::fs::remove_dir_all(&cache);
    let _ = std::fs::remove_dir_all(&out);
}

/// Artifact Hub reads a chart repository's metadata from its `artifacthub.io` tag: what the release pushes there
/// (hack/dist.sh's layout, pushed with crane) is the artifact Artifact Hub's documented `oras push` makes, pushed to
/// a real registry and read back.
#[test]
fn the_artifact_hub_metadata_is_pushed_beside_the_chart_as_artifact_hub_reads_it() {
    const ID: &str = "6e1c4f4a-8f5e-4a0c-9a39-3f1f2b7c5d10";
    let crane = testbed::tools::bin_dir().expect("the tools are built (make test builds them)").join("crane");
    let out = scratch("artifacthub");
    run(Command::new(root().join("hack/dist.sh")).arg("artifacthub").arg(&out).env("ARTIFACTHUB_REPOSITORY_ID", ID));
    let registry = support::LocalRegistry::start(crane.parent().expect("the tools' directory"));
    let repository = format!("127.0.0.1:{}/charts/{NAME}", registry.port);
    let tag = format!("{repository}:artifacthub.io");
    let layout = out.join("artifacthub-metadata");
    run(Command::new(&crane).args(["push", "--insecure"]).arg(&layout).arg(&tag));

    let manifest: Value = serde_json::from_str(&run(Command::new(&crane).args(["manifest", "--insecure", &tag])))
        .expect("a JSON manifest");
    assert_eq!(manifest["mediaType"], "application/vnd.oci.image.manifest.v1+json");
    assert_eq!(manifest["config"]["mediaType"], "application/vnd.cncf.artifacthub.config.v1+yaml");
    assert_eq!(manifest["config"]["size"], 0);
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1, "{manifest}");
    assert_eq!(layers[0]["mediaType"], "application/vnd.cncf.artifacthub.repository-metadata.layer.v1.yaml");
    let digest = layers[0]["digest"].as_str().expect("the layer's digest");
    let pushed = run(Command::new(&crane).args(["blob", "--insecure", &format!("{repository}@{digest}")]));
    let committed = std::fs::read_to_string(root().join("charts/artifacthub-repo.yml")).unwrap();
    assert_eq!(pushed, format!("repositoryID: {ID}\n{committed}"));
    let metadata: Value = serde_saphyr::from_str(&pushed).expect("YAML Artifact Hub parses");
    assert_eq!(metadata["repositoryID"], ID);

    // A repository variable that is not an ID cannot put anything else into the file.
    let smuggled = Command::new(root().join("hack/dist.sh"))
        .arg("artifacthub")
        .arg(&out)
        .env("ARTIFACTHUB_REPOSITORY_ID", format!("{ID}\nowners: [{{name: mallory}}]"))
        .output()
        .unwrap();
    assert!(!smuggled.status.success() && String::from_utf8_lossy(&smuggled.stderr).contains("not an Artifact Hub"));
    let _ = std::fs::remove_dir_all(&out);
}
