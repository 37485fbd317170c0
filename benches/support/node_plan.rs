//! What the node benches share: the registry Service whose port they change, and how they sum up timings.

use serde_json::json;

/// The node plan's ConfigMap, which the chart would create.
pub const PLAN: &str = "node-plan";
/// The registry's published address: fixed, an annotation's (so the controller is told to allow it), while its
/// endpoint (the ClusterIP and the port) changes.
pub const ADDRESS: &str = "registry.bench.example:5000";

/// The registry Service at `cluster_ip` serving on `port`.
pub fn registry(cluster_ip: &str, port: i32) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "registry", "labels": {"local-registry-publisher.io/registry": "true"},
            "annotations": {"local-registry-publisher.io/host-from-cluster-network": ADDRESS}},
        "spec": {"clusterIP": cluster_ip, "ports": [{"name": "registry", "port": port}]}})
}

/// The median and the 99th percentile of `samples`.
pub fn median_p99(samples: &mut [f64]) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.99))
}

/// Starts the release build `binary` with `args` in namespace `ns` (POD_NAMESPACE), quietly.
pub fn start(binary: &str, ns: &str, args: &[String]) -> std::process::Child {
    std::process::Command::new(binary)
        .args(args)
        .env("POD_NAMESPACE", ns)
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the release build")
}

/// The controller keeping the node plan for the registries of `ns`, allowed to plan [`ADDRESS`] (an annotation's
/// address, which node::trust refuses otherwise).
pub fn start_controller(binary: &str, kubeconfig: &str, ns: &str) -> std::process::Child {
    start(
        binary,
        ns,
        &[
            kubeconfig.to_string(),
            format!("--configmap-namespace={ns}"),
            format!("--watch-namespaces={ns}"),
            format!("--node-plan-configmap={PLAN}"),
            format!("--node-allowed-addresses={ADDRESS}"),
            "--http-address=127.0.0.1:0".into(),
        ],
    )
}
