//! Whether the node agents' DaemonSet runs a pod on a node, as the DaemonSet controller decides it: `doctor` judges
//! only covered nodes, and an agent whose node is no longer covered removes its files as it stops.

use k8s_openapi::api::core::v1::{Node, PodSpec, Taint, Toleration};
use kube::ResourceExt;

/// Whether the DaemonSet runs a pod on `node`: its node selector matches and it tolerates every taint that keeps
/// pods off (the DaemonSet controller itself adds tolerations for a node's passing conditions).
pub fn covered(node: &Node, template: &PodSpec) -> Result<(), String> {
    let labels = node.labels();
    for (key, value) in template.node_selector.iter().flatten() {
        if labels.get(key) != Some(value) {
            let has = labels.get(key).map_or_else(|| "has no such label".to_string(), |v| format!("has {key}={v}"));
            return Err(format!(
                "its nodeSelector {key}={value} does not match: the node {has} (nodeAgent.nodeSelector)"
            ));
        }
    }
    let taints = node.spec.as_ref().and_then(|s| s.taints.as_deref()).unwrap_or_default();
    let tolerations = template.tolerations.as_deref().unwrap_or_default();
    let repelling = taints.iter().filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute");
    for taint in repelling {
        if !tolerates_by_default(taint) && !tolerations.iter().any(|toleration| tolerates(toleration, taint)) {
            let value = taint.value.as_deref().map(|v| format!("={v}")).unwrap_or_default();
            return Err(format!(
                "its taint {}{value}:{} is not tolerated (nodeAgent.tolerations)",
                taint.key, taint.effect
            ));
        }
    }
    Ok(())
}

/// The taints every DaemonSet pod tolerates: the node conditions the DaemonSet controller adds tolerations for.
fn tolerates_by_default(taint: &Taint) -> bool {
    matches!(
        taint.key.strip_prefix("node.kubernetes.io/"),
        Some("not-ready" | "unreachable" | "disk-pressure" | "memory-pressure" | "pid-pressure" | "unschedulable")
            | Some("network-unavailable")
    )
}

fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().is_none_or(|e| e.is_empty() || e == taint.effect);
    let key = toleration.key.as_deref().unwrap_or_default();
    let exists = toleration.operator.as_deref() == Some("Exists");
    let matches = match (key.is_empty(), exists) {
        (true, true) => true,
        (true, false) => false,
        (false, true) => key == taint.key,
        (false, false) => key == taint.key && toleration.value.as_deref() == taint.value.as_deref(),
    };
    effect && matches
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_toleration_with_a_value_tolerates_that_value_and_effect_only() {
        let equal = Toleration {
            key: Some("k".into()),
            value: Some("v".into()),
            effect: Some("NoSchedule".into()),
            ..Toleration::default()
        };
        let taint = |value: &str, effect: &str| Taint {
            key: "k".into(),
            value: Some(value.into()),
            effect: effect.into(),
            ..Taint::default()
        };
        assert!(tolerates(&equal, &taint("v", "NoSchedule")));
        assert!(!tolerates(&equal, &taint("w", "NoSchedule")));
        assert!(!tolerates(&equal, &taint("v", "NoExecute")));
    }
}
