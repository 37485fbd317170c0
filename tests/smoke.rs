//! Proves the test control plane is a working cluster: a Deployment's pods are scheduled onto the simulated node,
//! become Ready, fill their Service's EndpointSlice, and a deleted namespace really goes away.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams, PostParams};
use testbed::{ControlPlane, wait_until};

#[tokio::test]
async fn deployment_behind_a_service_gets_ready_endpoints_and_its_namespace_can_be_deleted() {
    let plane = ControlPlane::shared();
    let client = plane.client().await.unwrap();
    let ns = plane.namespace(&client, "smoke").await.unwrap();

    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "web:1", "ports": [{"containerPort": 8080}]}]}
            }
        }
    }))
    .unwrap();
    let service: Service = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}
    }))
    .unwrap();
    Api::<Deployment>::namespaced(client.clone(), &ns).create(&PostParams::default(), &deployment).await.unwrap();
    Api::<Service>::namespaced(client.clone(), &ns).create(&PostParams::default(), &service).await.unwrap();

    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
    let by_service = ListParams::default().labels("kubernetes.io/service-name=web");
    let ready_addresses = wait_until(Duration::from_secs(60), || async {
        let list = slices.list(&by_service).await.ok()?;
        let ready: Vec<String> = list
            .items
            .iter()
            .flat_map(|slice| slice.endpoints.iter().flatten())
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
            .flat_map(|e| e.addresses.clone())
            .collect();
        (ready.len() == 2).then_some(ready)
    })
    .await
    .expect("two ready endpoints for Service web");
    assert!(
        ready_addresses.iter().all(|a| a.starts_with("10.244.")),
        "pod IPs come from kwok's CIDR: {ready_addresses:?}"
    );

    plane.delete_namespace(&client, &ns).await.unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    wait_until(Duration::from_secs(60), || async { matches!(namespaces.get_opt(&ns).await, Ok(None)).then_some(()) })
        .await
        .expect("the namespace is gone after deletion");
}
