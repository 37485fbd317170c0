//! The API calls behind [`super`]: the labelled pods, and whether each one's ServiceAccount may write the ConfigMap.
//! tests/cli.rs proves them against the control plane.

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};

use super::{ControllerPod, controller_args, selector};
use crate::settings::Settings;

/// The pods labelled as the controller, each checked against the ConfigMap `flags` name; `Err` when this identity
/// may not list pods.
pub async fn controller_pods(client: &Client, flags: &Settings) -> Result<Vec<ControllerPod>, ()> {
    let pods: Api<Pod> = Api::all(client.clone());
    let list = pods.list(&ListParams::default().labels_from(&selector())).await.map_err(drop)?;
    let mut found = Vec::new();
    for pod in &list.items {
        let namespace = pod.namespace().unwrap_or_default();
        let spec = pod.spec.as_ref();
        let service_account = spec.and_then(|s| s.service_account_name.clone()).unwrap_or_else(|| "default".into());
        let genuine = may_write(client, &namespace, &service_account, flags).await;
        let replica_set = pod.owner_references().iter().find(|o| o.kind == "ReplicaSet").map(|o| o.name.clone());
        found.push(ControllerPod {
            name: pod.name_any(),
            phase: pod.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default(),
            args: controller_args(pod),
            deployment: replica_set.and_then(|rs| Some(rs.rsplit_once('-')?.0.to_string())),
            namespace,
            service_account,
            genuine,
        });
    }
    Ok(found)
}

/// Whether ServiceAccount `namespace/account` may patch the ConfigMap `flags` name, as the API server answers.
async fn may_write(client: &Client, namespace: &str, account: &str, flags: &Settings) -> Option<bool> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(format!("system:serviceaccount:{namespace}:{account}")),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(flags.configmap_namespace.clone()),
                verb: Some("patch".into()),
                resource: Some("configmaps".into()),
                name: Some(flags.configmap_name.clone()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
    let answer = reviews.create(&PostParams::default(), &review).await.ok()?;
    Some(answer.status.is_some_and(|s| s.allowed))
}
