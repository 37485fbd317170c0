//! What of each watched object is kept: only the fields `registry` reads, so a tenant's thousand Services or a
//! crowded namespace's pods cost as little as they can while they are watched. Each also drops the field managers.

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec};
use k8s_openapi::api::core::v1::{
    Container, Namespace, Node, NodeStatus, Pod, PodSpec, PodTemplateSpec, Service, ServiceSpec, ServiceStatus,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use kube::api::ObjectMeta;

use crate::keys::service::{READ, VALUE_CAP};
use crate::watching::Keep;

/// The metadata nothing here reads: field managers, owners, finalizers, and annotations other than the ones the
/// controller reads (such as kubectl's last-applied-configuration, a whole copy of the object). A value longer than
/// any the controller accepts ([`VALUE_CAP`]) is kept as a note of its size, which every rule refuses, so a Service
/// with 256 KiB annotations costs what one with short ones does.
fn metadata(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    meta.owner_references = None;
    meta.finalizers = None;
    meta.generate_name = None;
    if let Some(annotations) = &mut meta.annotations {
        annotations.retain(|key, _| READ.contains(&key.as_str()));
        for value in annotations.values_mut() {
            if value.len() > VALUE_CAP {
                *value =
                    format!("(a value of {} bytes, longer than the {VALUE_CAP} the controller reads)", value.len());
            }
        }
    }
}

/// Type, ports, selector, cluster IP and external name; the load balancer's ingress. Its labels are not read: the
/// registry selector matched them on the server.
impl Keep<Service> for Service {
    fn keep(mut service: Service) -> Self {
        metadata(&mut service.metadata);
        service.metadata.labels = None;
        service.metadata.resource_version = None;
        if let Some(spec) = service.spec.take() {
            service.spec = Some(ServiceSpec {
                type_: spec.type_,
                ports: spec.ports,
                selector: spec.selector,
                cluster_ip: spec.cluster_ip,
                external_name: spec.external_name,
                ..ServiceSpec::default()
            });
        }
        if let Some(status) = service.status.take() {
            service.status = Some(ServiceStatus { load_balancer: status.load_balancer, ..ServiceStatus::default() });
        }
        service
    }
}

/// Each endpoint's readiness and node; the labels naming its Service.
impl Keep<EndpointSlice> for EndpointSlice {
    fn keep(mut slice: EndpointSlice) -> Self {
        metadata(&mut slice.metadata);
        slice.metadata.annotations = None;
        slice.ports = None;
        for endpoint in slice.endpoints.iter_mut().flatten() {
            *endpoint = Endpoint {
                conditions: endpoint.conditions.take(),
                node_name: endpoint.node_name.take(),
                ..Endpoint::default()
            };
        }
        slice
    }
}

/// Labels and the containers' ports (a hostPort can reach the registry).
impl Keep<Pod> for Pod {
    fn keep(mut pod: Pod) -> Self {
        metadata(&mut pod.metadata);
        pod.metadata.annotations = None;
        pod.status = None;
        pod.spec = pod.spec.map(|spec| PodSpec { containers: ports_only(spec.containers), ..PodSpec::default() });
        pod
    }
}

/// minikube's proxy: its containers' ports (the hostPort tools outside reach).
impl Keep<DaemonSet> for DaemonSet {
    fn keep(mut daemonset: DaemonSet) -> Self {
        metadata(&mut daemonset.metadata);
        daemonset.metadata.annotations = None;
        daemonset.metadata.labels = None;
        daemonset.status = None;
        daemonset.spec = daemonset.spec.map(|spec| {
            let containers = spec.template.spec.map(|s| ports_only(s.containers)).unwrap_or_default();
            let pod = PodSpec { containers, ..PodSpec::default() };
            DaemonSetSpec {
                selector: spec.selector,
                template: PodTemplateSpec { metadata: None, spec: Some(pod) },
                ..DaemonSetSpec::default()
            }
        });
        daemonset
    }
}

/// Its addresses: an InternalIP may be published.
impl Keep<Node> for Node {
    fn keep(mut node: Node) -> Self {
        metadata(&mut node.metadata);
        node.metadata.annotations = None;
        node.metadata.labels = None;
        node.spec = None;
        node.status = node.status.map(|status| NodeStatus { addresses: status.addresses, ..NodeStatus::default() });
        node
    }
}

/// Only its name: what an allowed namespace is told by.
impl Keep<Namespace> for String {
    fn keep(namespace: Namespace) -> Self {
        namespace.metadata.name.unwrap_or_default()
    }
}

fn ports_only(containers: Vec<Container>) -> Vec<Container> {
    containers.into_iter().map(|c| Container { name: c.name, ports: c.ports, ..Container::default() }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_what_registries_read_is_kept() {
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": "zot", "namespace": "reg", "uid": "u", "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"local-registry-publisher.io/registry": "true"},
                "annotations": {"local-registry-publisher.io/host": "localhost:5001",
                    "kubectl.kubernetes.io/last-applied-configuration": "{\"a whole\": \"copy\"}"},
                "managedFields": [{"manager": "kubectl"}]},
            "spec": {"type": "LoadBalancer", "selector": {"app": "zot"}, "clusterIP": "10.0.0.1",
                "ports": [{"name": "registry", "port": 5000, "nodePort": 30500}], "sessionAffinity": "None"},
            "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}, "conditions": []}
        }))
        .unwrap();
        let svc = Service::keep(svc);
        let kept = serde_json::to_value(&svc).unwrap();
        assert_eq!(kept["metadata"]["annotations"], json!({"local-registry-publisher.io/host": "localhost:5001"}));
        assert_eq!(kept["metadata"]["creationTimestamp"], "2026-01-01T00:00:00Z");
        assert!(kept["metadata"].get("managedFields").is_none());
        assert!(kept["metadata"].get("labels").is_none(), "the selector matched them on the server");
        assert_eq!(
            kept["spec"],
            json!({"type": "LoadBalancer", "selector": {"app": "zot"}, "clusterIP": "10.0.0.1",
                "ports": [{"name": "registry", "port": 5000, "nodePort": 30500}]})
        );
        assert_eq!(kept["status"], json!({"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}));

        let slice: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "zot-1", "namespace": "reg", "labels": {"kubernetes.io/service-name": "zot"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.1.0.5"], "conditions": {"ready": true}, "nodeName": "node-1",
                "targetRef": {"kind": "Pod", "name": "zot-abc", "namespace": "reg"}, "zone": "a"}],
            "ports": [{"port": 5000}]
        }))
        .unwrap();
        let slice = EndpointSlice::keep(slice);
        let kept = serde_json::to_value(&slice).unwrap();
        assert_eq!(kept["endpoints"], json!([{"addresses": [], "conditions": {"ready": true}, "nodeName": "node-1"}]));
        assert_eq!(kept["metadata"]["labels"], json!({"kubernetes.io/service-name": "zot"}));

        let registry_pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "zot-abc", "namespace": "reg", "labels": {"app": "zot"}},
            "spec": {"nodeName": "node-1", "containers": [{"name": "zot", "image": "zot:2", "env": [{"name": "A"}],
                "ports": [{"name": "registry", "containerPort": 5000, "hostPort": 5000}]}]},
            "status": {"phase": "Running"}
        }))
        .unwrap();
        let registry_pod = Pod::keep(registry_pod);
        let kept = serde_json::to_value(&registry_pod).unwrap();
        assert_eq!(
            kept["spec"],
            json!({"containers": [{"name": "zot",
                "ports": [{"name": "registry", "containerPort": 5000, "hostPort": 5000}]}]})
        );
        assert!(kept.get("status").is_none());
    }

    #[test]
    fn an_external_name_a_proxys_ports_a_nodes_addresses_and_a_namespaces_name_are_kept() {
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": "outside", "namespace": "reg"},
            "spec": {"type": "ExternalName", "externalName": "registry.example.test", "sessionAffinity": "None"}
        }))
        .unwrap();
        let kept = serde_json::to_value(Service::keep(svc)).unwrap();
        assert_eq!(kept["spec"], json!({"type": "ExternalName", "externalName": "registry.example.test"}));

        let proxy: DaemonSet = serde_json::from_value(json!({
            "metadata": {"name": "registry-proxy", "namespace": "kube-system", "labels": {"a": "b"},
                "annotations": {"deprecated.daemonset.template.generation": "1"}},
            "spec": {"selector": {"matchLabels": {"registry-proxy": "true"}}, "revisionHistoryLimit": 10,
                "template": {"metadata": {"labels": {"registry-proxy": "true"}},
                    "spec": {"nodeSelector": {"a": "b"}, "containers": [{"name": "proxy", "image": "proxy:1",
                        "ports": [{"name": "registry", "containerPort": 80, "hostPort": 5000}]}]}}},
            "status": {"numberReady": 1, "currentNumberScheduled": 1, "desiredNumberScheduled": 1,
                "numberMisscheduled": 0}
        }))
        .unwrap();
        let kept = serde_json::to_value(DaemonSet::keep(proxy)).unwrap();
        assert_eq!(kept["metadata"], json!({"name": "registry-proxy", "namespace": "kube-system"}));
        assert_eq!(
            kept["spec"],
            json!({"selector": {"matchLabels": {"registry-proxy": "true"}},
                "template": {"spec": {"containers": [{"name": "proxy",
                    "ports": [{"name": "registry", "containerPort": 80, "hostPort": 5000}]}]}}})
        );
        assert!(kept.get("status").is_none());

        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "node-1", "labels": {"kubernetes.io/os": "linux"}},
            "spec": {"podCIDR": "10.244.0.0/24"},
            "status": {"addresses": [{"type": "InternalIP", "address": "172.18.0.2"}],
                "nodeInfo": {"containerRuntimeVersion": "containerd://2.2.0", "architecture": "amd64",
                    "bootID": "", "kernelVersion": "", "kubeProxyVersion": "", "kubeletVersion": "",
                    "machineID": "", "operatingSystem": "linux", "osImage": "", "systemUUID": ""}}
        }))
        .unwrap();
        let kept = serde_json::to_value(Node::keep(node)).unwrap();
        assert_eq!(kept["metadata"], json!({"name": "node-1"}));
        assert!(kept.get("spec").is_none());
        assert_eq!(kept["status"], json!({"addresses": [{"type": "InternalIP", "address": "172.18.0.2"}]}));

        let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": "team-a"}})).unwrap();
        assert_eq!(<String as Keep<Namespace>>::keep(namespace), "team-a");
    }

    #[test]
    fn a_fat_annotation_is_kept_as_a_note_of_its_size_and_one_nothing_reads_not_at_all() {
        let fat = "x".repeat(256 * 1024);
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": "zot", "namespace": "tenant", "annotations": {
                "local-registry-publisher.io/host": fat,
                "local-registry-publisher.io/help": "https://help.example/",
                "local-registry-publisher.io/anything": fat,
            }},
        }))
        .unwrap();
        let kept = Service::keep(svc);
        let annotations = kept.metadata.annotations.expect("ours");
        assert_eq!(annotations.len(), 2, "only the annotations the controller reads: {:?}", annotations.keys());
        assert_eq!(annotations["local-registry-publisher.io/help"], "https://help.example/");
        let host = &annotations["local-registry-publisher.io/host"];
        assert!(host.len() < 100 && host.contains("262144 bytes"), "{host}");
        // No rule takes the note for a value.
        assert!(crate::hosting::Field::Host.check(host).is_err());
    }
}
