//! Which pods `doctor` takes for the controller. Labels prove nothing (anyone who may create pods can copy the
//! chart's), so a labelled pod counts only when its ServiceAccount may write the ConfigMap being checked, as the
//! API server itself answers (a SubjectAccessReview): a user with `edit` in some namespace cannot give her pod that
//! right. A look-alike is reported as such and never read for settings or Events. The controller's own Events stay
//! its own across pod replacements: an Event whose `reportingInstance` is a pod of the same Deployment (its name
//! starts with the Deployment's) counts, so a `helm upgrade` does not make them look forged.

use k8s_openapi::api::core::v1::Pod;

use crate::keys;

mod api;
pub use api::controller_pods;

/// A pod labelled as the chart's controller: where it runs, its phase, the arguments its container runs with.
pub struct ControllerPod {
    pub namespace: String,
    pub name: String,
    pub phase: String,
    pub args: Vec<String>,
    pub service_account: String,
    /// The Deployment it belongs to (its ReplicaSet's name without the template hash), if any.
    deployment: Option<String>,
    /// Whether its ServiceAccount may write the ConfigMap; `None` when this identity cannot ask.
    pub genuine: Option<bool>,
}

impl ControllerPod {
    /// Whether doctor takes this pod for the controller: only when the API server said its ServiceAccount may write
    /// the ConfigMap. With no answer (this identity may not create SubjectAccessReviews, as a cluster-wide `view`
    /// user may not) a look-alike could not be told from the controller, so none is used: doctor judges by its own
    /// flags and says it could not verify the pod.
    pub fn counts(&self) -> bool {
        self.genuine == Some(true)
    }

    /// Whether `instance` (an Event's `reportingInstance`) names this pod or another pod of its Deployment.
    pub fn made(&self, instance: &str) -> bool {
        if instance == self.name {
            return true;
        }
        // A Deployment's pods are named `<deployment>-<template hash>-<suffix>`.
        let Some(rest) = self.deployment.as_deref().and_then(|d| instance.strip_prefix(d)?.strip_prefix('-')) else {
            return false;
        };
        let parts: Vec<&str> = rest.split('-').collect();
        parts.len() == 2 && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric()))
    }
}

#[cfg(test)]
impl ControllerPod {
    /// A running pod named `name` in namespace `lrp`, of `deployment` if any, with no arguments, as the API server
    /// judged its right to write the ConfigMap (`genuine`).
    pub(crate) fn fixture(name: &str, deployment: Option<&str>, genuine: Option<bool>) -> Self {
        ControllerPod {
            namespace: "lrp".into(),
            name: name.into(),
            phase: "Running".into(),
            args: Vec::new(),
            service_account: "lrp".into(),
            deployment: deployment.map(String::from),
            genuine,
        }
    }
}

/// The chart's controller pods' labels, whatever the release or name overrides.
pub fn selector() -> kube::core::Selector {
    use crate::watching::equal;
    let mut selector = equal(keys::chart::PART_OF, keys::MANAGER);
    selector.extend(equal(keys::chart::COMPONENT, keys::chart::CONTROLLER));
    selector
}

/// The controller container's arguments (the chart names it `controller`; else the pod's only container).
fn controller_args(pod: &Pod) -> Vec<String> {
    let containers = pod.spec.as_ref().map(|s| s.containers.as_slice()).unwrap_or_default();
    let container =
        containers.iter().find(|c| c.name == "controller").or(containers.first().filter(|_| containers.len() == 1));
    container.and_then(|c| c.args.clone()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, deployment: Option<&str>) -> ControllerPod {
        ControllerPod::fixture(name, deployment, Some(true))
    }

    #[test]
    fn a_pod_counts_as_the_controller_unless_its_service_account_may_not_write_the_configmap() {
        let answered = |genuine| ControllerPod { genuine, ..pod("lrp-7d9f8b6c5d-x2x4z", Some("lrp")) };
        assert!(answered(Some(true)).counts());
        assert!(!answered(None).counts(), "no answer from the API server: not taken for the controller");
        assert!(!answered(Some(false)).counts());
    }

    #[test]
    fn events_of_the_deployments_earlier_pods_are_its_own_and_no_other_name_is() {
        let running = pod("lrp-local-registry-publisher-7d9f8b6c5-x2k4p", Some("lrp-local-registry-publisher"));
        assert!(running.made("lrp-local-registry-publisher-7d9f8b6c5-x2k4p"));
        // The pod a `helm upgrade` replaced: another template hash.
        assert!(running.made("lrp-local-registry-publisher-5c6b7d8f9-abcde"));
        for other in [
            "aaa-controller",
            "lrp-local-registry-publisher",
            "lrp-local-registry-publisher-x",
            "lrp-local-registry-publisher-a-b-c",
            "lrp-local-registry-publisher-evil/x-y",
            "other-lrp-local-registry-publisher-5c6b7d8f9-abcde",
        ] {
            assert!(!running.made(other), "{other}");
        }
        // A bare pod (no Deployment): only its own name.
        let bare = pod("aaa-controller", None);
        assert!(bare.made("aaa-controller") && !bare.made("aaa-controller-1-2"));
    }

    #[test]
    fn the_controllers_pods_are_found_by_the_charts_labels_whatever_the_release_is_called() {
        let text = selector().to_string();
        assert!(text.contains("app.kubernetes.io/part-of=local-registry-publisher"), "{text}");
        assert!(text.contains("app.kubernetes.io/component=controller"), "{text}");
        assert!(!text.contains("instance") && !text.contains("app.kubernetes.io/name"), "{text}");
    }

    #[test]
    fn the_settings_are_read_from_the_controller_container_or_a_pods_only_container() {
        use k8s_openapi::api::core::v1::{Container, PodSpec};
        let container = |name: &str, args: &[&str]| Container {
            name: name.into(),
            args: Some(args.iter().map(|a| a.to_string()).collect()),
            ..Container::default()
        };
        let pod = |containers: Vec<Container>| Pod {
            spec: Some(PodSpec { containers, ..PodSpec::default() }),
            ..Pod::default()
        };
        let sidecar = container("proxy", &["--listen=:9000"]);
        let controller = container("controller", &["--configmap-name=hosting"]);
        assert_eq!(controller_args(&pod(vec![sidecar.clone(), controller.clone()])), ["--configmap-name=hosting"]);
        assert_eq!(controller_args(&pod(vec![container("renamed", &["--x"])])), ["--x"], "a pod's only container");
        assert!(controller_args(&pod(vec![sidecar.clone(), container("other", &["--y"])])).is_empty(), "neither is it");
        assert!(controller_args(&Pod::default()).is_empty());
    }
}
