//! `testbed up`: start the local control plane and keep it running until Ctrl-C.
//! `testbed demo <controller>`: show the controller publishing a sample registry and following a change.

use std::process::ExitCode;

use testbed::ControlPlane;

const USAGE: &str = "usage: testbed up [--real-node] | testbed demo <path to local-registry-publisher>

Starts a local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok
with one simulated node) on free loopback ports, prints its KUBECONFIG, and runs until Ctrl-C or SIGTERM, then
stops every process and removes its directory. The first run builds the Go tools (see hack/tools.sh).

--real-node adds a real node (containerd, runc, kubelet, kube-proxy, CoreDNS) in a network namespace of its own,
wired to the machine by a veth; the API server then listens on the machine's end of that veth. It needs root and
cgroups, and says which is missing.

`demo` starts the same control plane, deploys a sample registry, runs the controller, prints what it
publishes, moves the registry to another port, shows the ConfigMap follow, and stops everything.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["up"] => up(testbed::Options::default()),
        ["up", "--real-node"] => up(testbed::Options { real_node: true, ..Default::default() }),
        ["demo", controller] => demo(std::path::Path::new(controller)),
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
        println!(
            "The real node {} (kube-proxy in {} mode) is at {} in network namespace {}:",
            node.name(),
            node.proxy_mode().as_str(),
            network.node_ip,
            network.netns
        );
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
