//! Who this process is in the cluster, from the Downward API variables the chart sets, with fallbacks for a run
//! outside a pod. The one place that reads them, so Events and the Lease name the same instance.

const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// POD_NAME, else the host name, else the program's name.
pub fn name() -> String {
    std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| crate::keys::MANAGER.into())
}

/// POD_NAMESPACE, else the in-cluster service account's namespace, else `default`.
pub fn namespace() -> String {
    std::env::var("POD_NAMESPACE")
        .ok()
        .or_else(|| std::fs::read_to_string(SERVICE_ACCOUNT_NAMESPACE).ok())
        .map(|namespace| namespace.trim().to_string())
        .filter(|namespace| !namespace.is_empty())
        .unwrap_or_else(|| "default".into())
}
