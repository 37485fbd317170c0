//! `testbed up`: start the local control plane and keep it running until Ctrl-C.
//! `testbed demo <controller>`: show the controller publishing a sample registry and following a change.

use std::process::ExitCode;

use testbed::ControlPlane;

const USAGE: &str = "usage: testbed up [--real-node] | testbed demo <path to local-registry-publisher>
       testbed image <release binary> <output directory> [--arch <arch>] [--annotation <key>=<value>]...
       testbed values-docs <chart directory>

Starts a local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok
with one simulated node) on free loopback ports, prints its KUBECONFIG, and runs until Ctrl-C or SIGTERM, then
stops every process and removes its directory. The first run builds the Go tools (see hack/tools.sh).

--real-node adds a real node (containerd, runc, kubelet, kube-proxy, CoreDNS) in a network namespace of its own,
wired to the machine by a veth; the API server then listens on the machine's end of that veth. It needs root and
cgroups, and says which is missing.

`image` writes the controller's OCI image (layout directory and archive) without a Docker engine: the binary,
the libraries it links, and the Dockerfile's user, entrypoint, port and labels. --arch names the architecture the
binary was built for (default amd64); each --annotation adds an org.opencontainers.image.* annotation.

`values-docs` prints the chart's README, generated from the comments in its values.yaml.

`demo` starts the same control plane, deploys a sample registry, runs the controller, prints what it
publishes, changes the registry's nodePort, shows the ConfigMap follow, and stops everything.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["up"] => up(testbed::Options::default()),
        ["up", "--real-node"] => up(testbed::Options { real_node: true, ..Default::default() }),
        ["demo", controller] => demo(std::path::Path::new(controller)),
        ["image", binary, out, options @ ..] => image(std::path::Path::new(binary), std::path::Path::new(out), options),
        ["values-docs", chart] => match testbed::values_docs::render(std::path::Path::new(chart)) {
            Ok(readme) => {
                print!("{readme}");
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("testbed: {error}");
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

fn up(options: testbed::Options) -> ExitCode {
    let plane = match ControlPlane::start_with(options) {
        Ok(plane) => plane,
        Err(error) => {
            eprintln!("testbed: {error}");
            return ExitCode::FAILURE;
        }
    };
    let kubectl = plane.tools().join("kubectl");
    println!("The control plane is running.\n");
    println!("  export KUBECONFIG={}", plane.kubeconfig().display());
    println!("  export PATH={}:$PATH   # kubectl, helm", plane.tools().display());
    println!("  {} get nodes\n", kubectl.display());
    if let Some(node) = plane.real_node() {
        let network = node.network();
        println!("The real node {} is at {} in network namespace {}:", node.name(), network.node_ip, network.netns);
        println!(
            "  nsenter --net=/run/netns/{} -- curl http://localhost:<nodePort>/   # the node's own localhost\n",
            network.netns
        );
    }
    println!("Stop it with Ctrl-C (or SIGTERM to pid {}).", std::process::id());
    let stopped = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map(|runtime| runtime.block_on(wait_for_stop_signal()));
    println!("Stopping...");
    plane.stop();
    match stopped {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("testbed: {error}");
            ExitCode::FAILURE
        }
    }
}

fn demo(controller: &std::path::Path) -> ExitCode {
    let options = match testbed::node::preflight() {
        Ok(()) => {
            println!("==> Starting a local control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok)");
            println!("    and a real node (containerd, runc, kubelet, kube-proxy, CoreDNS)");
            testbed::Options { real_node: true, ..Default::default() }
        }
        Err(reason) => {
            println!("==> Starting a local control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok)");
            println!("    without a real node ({reason}): the registry's pods are simulated, no image is pushed");
            testbed::Options::default()
        }
    };
    let plane = match ControlPlane::start_with(options) {
        Ok(plane) => plane,
        Err(error) => {
            eprintln!("testbed: {error}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(testbed::Error::from)
        .and_then(|runtime| runtime.block_on(testbed::demo::run(&plane, controller)));
    println!("\n==> Stopping the control plane");
    plane.stop();
    match outcome {
        Ok(()) => {
            println!("Done.");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("testbed demo: {error}");
            ExitCode::FAILURE
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
                    eprintln!(
                        "testbed image: --annotation {annotation:?} is not org.opencontainers.image.<key>=<value>"
                    );
                    return ExitCode::from(2);
                }
            },
            _ => {
                eprintln!("testbed image: unknown option {pair:?}\n{USAGE}");
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
        eprintln!("testbed image: {} --version did not report a version", binary.display());
        return ExitCode::FAILURE;
    };
    match testbed::image::controller(binary, out, &version, &architecture, annotations) {
        Ok(image) => {
            println!("{} -> {}", image.name, image.archive.display());
            println!("compressed size {:.1} MB", image.compressed_size as f64 / 1e6);
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("testbed image: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn wait_for_stop_signal() {
    let mut terminate = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(signal) => signal,
        Err(_) => return,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}
