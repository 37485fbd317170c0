//! The project's release tooling, run by `make image`, `make manifests` and the release workflow (hack/dist.sh):
//! `xtask image` writes the controller's OCI image and its Debian packages (which the SBOM lists),
//! `xtask values-docs` the chart's README.

use std::process::ExitCode;

const USAGE: &str =
    "usage: xtask image <release binary> <output directory> [--arch <arch>] [--annotation <key>=<value>]...
       xtask values-docs <chart directory>

`image` writes the controller's OCI image (layout directory and archive) without a Docker engine: the binary,
the libraries it links, and the Dockerfile's user, entrypoint, port and labels, and beside it the Debian packages
those libraries come from (local-registry-publisher.packages.json, which hack/dist.sh adds to the SBOM). --arch
names the architecture the binary was built for (default amd64); each --annotation adds an
org.opencontainers.image.* annotation.

`values-docs` prints the chart's README, generated from the comments in its values.yaml.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["image", binary, out, options @ ..] => image(std::path::Path::new(binary), std::path::Path::new(out), options),
        ["values-docs", chart] => match xtask::values_docs::render(std::path::Path::new(chart)) {
            Ok(readme) => {
                print!("{readme}");
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("xtask values-docs: {error}");
                ExitCode::FAILURE
            }
        },
        ["-h" | "--help" | "help"] => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn image(binary: &std::path::Path, out: &std::path::Path, options: &[&str]) -> ExitCode {
    let mut architecture = "amd64".to_string();
    let mut annotations = std::collections::BTreeMap::new();
    for pair in options.chunks(2) {
        match pair {
            ["--arch", arch] => architecture = arch.to_string(),
            ["--annotation", annotation] => match annotation.split_once('=') {
                Some((key, value)) if key.starts_with("org.opencontainers.image.") => {
                    annotations.insert(key.to_string(), value.to_string());
                }
                _ => {
                    eprintln!("xtask image: --annotation {annotation:?} is not org.opencontainers.image.<key>=<value>");
                    return ExitCode::from(2);
                }
            },
            _ => {
                eprintln!("xtask image: unknown option {pair:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    // The version the binary reports ("local-registry-publisher 0.1.0") tags the image.
    let version = std::process::Command::new(binary)
        .arg("--version")
        .output()
        .ok()
        .and_then(|output| String::from_utf8_lossy(&output.stdout).split_whitespace().nth(1).map(str::to_string));
    let Some(version) = version else {
        eprintln!("xtask image: {} --version did not report a version", binary.display());
        return ExitCode::FAILURE;
    };
    match xtask::image::controller(binary, out, &version, &architecture, annotations) {
        Ok(image) => {
            println!("{} -> {}", image.name, image.archive.display());
            println!("compressed size {:.1} MB", image.compressed_size as f64 / 1e6);
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("xtask image: {error}");
            ExitCode::FAILURE
        }
    }
}
