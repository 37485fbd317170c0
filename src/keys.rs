//! The project's name as other objects see it, and every label and annotation key it reads or writes: its public
//! API on the cluster (the README lists them). Each key has one meaning.

/// Field manager of every write, value of the managed-by label, and the Events' reporting controller.
pub const MANAGER: &str = "local-registry-publisher";
/// The standard label naming who manages an object; ours carry [`MANAGER`].
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";

/// Labels on registry Services (or on the workloads behind them).
pub mod registry {
    /// The default registry selector's key and value: `local-registry-publisher.io/registry=true`.
    pub const LABEL: &str = "local-registry-publisher.io/registry";
    pub const LABEL_VALUE: &str = "true";
}

/// Annotations on a registry Service, set by whoever may create Services in an allowed namespace.
pub mod service {
    /// Which Service port is the registry's, by name or number.
    pub const PORT: &str = "local-registry-publisher.io/port";
    /// Overrides of the published fields; an empty value leaves the field out.
    pub const HOST: &str = "local-registry-publisher.io/host";
    pub const HOST_FROM_CONTAINER_RUNTIME: &str = "local-registry-publisher.io/host-from-container-runtime";
    pub const HOST_FROM_CLUSTER_NETWORK: &str = "local-registry-publisher.io/host-from-cluster-network";
    pub const HELP: &str = "local-registry-publisher.io/help";
    /// An integer; the highest wins among several registries.
    pub const PRIORITY: &str = "local-registry-publisher.io/priority";
    /// Names the Secret in the Service's namespace that holds its pull credentials (see `crate::pull`).
    pub const PULL_SECRET: &str = "local-registry-publisher.io/pull-secret";
    /// `configmap/<name>` or `secret/<name>`: the object in the Service's namespace whose `ca.crt` holds the CA
    /// bundle a TLS registry's certificate chains to, which the node agent gives each node's containerd (see
    /// `crate::node`).
    pub const CA_BUNDLE: &str = "local-registry-publisher.io/ca-bundle";
    /// Every annotation of ours starts with this.
    pub const PREFIX: &str = "local-registry-publisher.io/";
    /// Every annotation the controller reads on a Service: stored Services keep only these, each capped.
    pub const READ: [&str; 8] =
        [PORT, HOST, HOST_FROM_CONTAINER_RUNTIME, HOST_FROM_CLUSTER_NETWORK, HELP, PRIORITY, PULL_SECRET, CA_BUNDLE];
    /// The longest value of one the controller keeps: the longest a value it reads may be (a help URL's 2048
    /// characters) and some. A longer one is kept as a note of its size, which no rule accepts.
    pub const VALUE_CAP: usize = 4096;
}

/// Labels a cluster admin sets on namespaces (tenants with the built-in `admin` or `edit` roles cannot).
pub mod namespace {
    /// `local-registry-publisher.io/registries=allowed`: registries in this namespace may name the cluster's.
    pub const ALLOWED: &str = "local-registry-publisher.io/registries";
    pub const ALLOWED_VALUE: &str = "allowed";
    /// `local-registry-publisher.io/pull-secret-wanted=true`: this namespace receives the pull Secret.
    pub const PULL_SECRET_WANTED: &str = "local-registry-publisher.io/pull-secret-wanted";
    pub const PULL_SECRET_WANTED_VALUE: &str = "true";

    /// Why a namespace label under our prefix means nothing to this controller (a typo, or a name from before a
    /// rename), with the labels it does read; `None` for a label it reads or one not under our prefix.
    pub fn unknown(key: &str, value: &str) -> Option<String> {
        if !key.starts_with(super::service::PREFIX) || key == ALLOWED || key == PULL_SECRET_WANTED {
            return None;
        }
        Some(format!(
            "label {key}={value:?} means nothing to local-registry-publisher; on namespaces it reads only \
             {ALLOWED}={ALLOWED_VALUE} (this namespace may name the cluster's registry) and \
             {PULL_SECRET_WANTED}={PULL_SECRET_WANTED_VALUE} (this namespace gets the pull Secret)"
        ))
    }
}

/// Labels the chart puts on its own objects, which `doctor` reads to find the controller.
pub mod chart {
    pub const PART_OF: &str = "app.kubernetes.io/part-of";
    pub const COMPONENT: &str = "app.kubernetes.io/component";
    /// The component of the controller's pods.
    pub const CONTROLLER: &str = "controller";
    /// The component of the node agent's pods.
    pub const NODE_AGENT: &str = "node-agent";
    /// The component of `doctor --from-cluster`'s probe pod.
    pub const DOCTOR: &str = "registry-doctor";
    /// The flag (without its dashes) that names the node plan, to the controller and to each agent: `doctor` tells
    /// the agents' DaemonSet by it among the release's.
    pub const NODE_PLAN_FLAG: &str = "node-plan-configmap";
    /// The agents' DaemonSet's volume that mounts containerd's hosts directory: an agent tells from it where its
    /// DaemonSet's next pods write.
    pub const HOSTS_VOLUME: &str = "hosts";
    /// The annotation the chart sets on the node plan's ConfigMap: the stamp of the controller configuration this
    /// release runs (`--node-plan-stamp`), which the plan holds once that controller has written it. Until then an
    /// agent says its node's plan is pending, never that nothing is needed.
    pub const PLAN_STAMP: &str = "local-registry-publisher.io/plan-stamp";
}

/// Keys distributions set on their nodes, which tell what a cluster is.
pub mod distribution {
    /// MicroK8s's kubelets label every node `microk8s.io/cluster=true` (microk8s-resources/default-args/kubelet).
    pub const MICROK8S_NODE: &str = "microk8s.io/cluster";
    pub const MICROK8S_NODE_VALUE: &str = "true";
}

/// Kubernetes' own keys that the controller reads.
pub mod kubernetes {
    /// On each EndpointSlice: the Service it belongs to.
    pub const SERVICE_NAME: &str = "kubernetes.io/service-name";
}

/// Annotations this controller writes on objects it changes for pull credentials.
pub mod pull {
    /// On each pull Secret: the registry (namespace/name) whose credentials it holds.
    pub const FROM_REGISTRY: &str = "local-registry-publisher.io/from-registry";
    /// On a ServiceAccount: the `imagePullSecrets` entries this controller added (and so may remove),
    /// comma-separated, since two releases with different Secret names may share an account.
    pub const ADDED_PULL_SECRETS: &str = "local-registry-publisher.io/added-pull-secrets";
}

#[cfg(test)]
mod tests {
    use super::namespace::unknown;

    #[test]
    fn a_namespace_label_under_our_prefix_we_do_not_read_is_named_with_those_we_do() {
        let said = unknown("local-registry-publisher.io/pull-secret", "wanted").expect("unknown");
        assert!(said.starts_with("label local-registry-publisher.io/pull-secret=\"wanted\" means nothing"), "{said}");
        assert!(said.contains("local-registry-publisher.io/pull-secret-wanted=true"), "{said}");
        assert!(said.contains("local-registry-publisher.io/registries=allowed"), "{said}");
        assert_eq!(unknown("local-registry-publisher.io/registries", "allowed"), None);
        assert_eq!(unknown("local-registry-publisher.io/pull-secret-wanted", "yes"), None);
        assert_eq!(unknown("kubernetes.io/metadata.name", "x"), None);
    }
}
