//! Small builders for the objects the pure logic reads, so unit tests state only what matters to them.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::{Value, json};

use super::{Ignored, Origin, Registry, ServiceId, Workload};
use crate::hosting::LocalRegistryHostingV1;

fn from_json<T: serde::de::DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("fixture JSON matches the type")
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[derive(Clone)]
pub struct ServiceBuilder(Value);

pub fn service(namespace: &str, name: &str) -> ServiceBuilder {
    ServiceBuilder(json!({
        "metadata": {"namespace": namespace, "name": name, "uid": format!("uid-{namespace}-{name}"),
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"type": "ClusterIP", "ports": []}
    }))
}

impl ServiceBuilder {
    pub fn selector(mut self, pairs: &[(&str, &str)]) -> Self {
        self.0["spec"]["selector"] = json!(labels(pairs));
        self
    }
    pub fn type_(mut self, type_: &str) -> Self {
        self.0["spec"]["type"] = json!(type_);
        self
    }
    pub fn cluster_ip(mut self, ip: &str) -> Self {
        self.0["spec"]["clusterIP"] = json!(ip);
        self
    }
    pub fn external_name(mut self, name: &str) -> Self {
        self.0["spec"]["externalName"] = json!(name);
        self
    }
    pub fn port(self, name: Option<&str>, port: i32, node_port: Option<i32>) -> Self {
        let mut entry = json!({"port": port});
        if let Some(name) = name {
            entry["name"] = json!(name);
        }
        if let Some(node_port) = node_port {
            entry["nodePort"] = json!(node_port);
        }
        self.push_port(entry)
    }
    pub fn port_target(self, name: Option<&str>, port: i32, target: &str) -> Self {
        let mut entry = json!({"port": port, "targetPort": target});
        if let Some(name) = name {
            entry["name"] = json!(name);
        }
        self.push_port(entry)
    }
    /// A port that declares its protocol (`appProtocol`).
    pub fn port_protocol(self, port: i32, app_protocol: &str) -> Self {
        self.push_port(json!({"port": port, "appProtocol": app_protocol}))
    }
    fn push_port(mut self, entry: Value) -> Self {
        if let Some(ports) = self.0["spec"]["ports"].as_array_mut() {
            ports.push(entry);
        }
        self
    }
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.0["metadata"]["annotations"][key] = json!(value);
        self
    }
    pub fn created(mut self, time: &str) -> Self {
        self.0["metadata"]["creationTimestamp"] = json!(time);
        self
    }
    pub fn ingress_ip(mut self, ip: &str) -> Self {
        self.0["status"] = json!({"loadBalancer": {"ingress": [{"ip": ip}]}});
        self
    }
    pub fn ingress_hostname(mut self, hostname: &str) -> Self {
        self.0["status"] = json!({"loadBalancer": {"ingress": [{"hostname": hostname}]}});
        self
    }
    /// Load-balancer ingress entries, each an IP or a host name, in the order the status lists them.
    pub fn ingress(mut self, entries: &[&str]) -> Self {
        let ingress: Vec<Value> = entries
            .iter()
            .map(|e| if e.parse::<std::net::IpAddr>().is_ok() { json!({"ip": e}) } else { json!({"hostname": e}) })
            .collect();
        self.0["status"] = json!({"loadBalancer": {"ingress": ingress}});
        self
    }
    pub fn build(self) -> Arc<Service> {
        Arc::new(from_json(self.0))
    }
}

pub fn workload(namespace: &str, name: &str, pod_labels: &[(&str, &str)]) -> Arc<Workload> {
    Arc::new(Workload {
        kind: "Deployment",
        namespace: namespace.into(),
        name: name.into(),
        pod_labels: labels(pod_labels),
    })
}

pub fn pod(
    namespace: &str,
    name: &str,
    pod_labels: &[(&str, &str)],
    container_port: i32,
    port_name: Option<&str>,
    host_port: Option<i32>,
) -> Arc<Pod> {
    Arc::new(from_json(json!({
        "metadata": {"namespace": namespace, "name": name, "labels": labels(pod_labels)},
        "spec": {"containers": [{"name": "registry", "image": "registry:2",
                 "ports": [{"containerPort": container_port, "name": port_name, "hostPort": host_port}]}]}
    })))
}

/// An EndpointSlice of Service `service` with one endpoint per (ready, node name), under a name of its own.
pub fn slice(namespace: &str, service: &str, endpoints: &[(bool, &str)]) -> Arc<EndpointSlice> {
    static MADE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let number = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let endpoints: Vec<Value> = endpoints
        .iter()
        .enumerate()
        .map(|(i, (ready, node))| {
            json!({"addresses": [format!("10.244.0.{}", i + 1)], "conditions": {"ready": ready}, "nodeName": node})
        })
        .collect();
    Arc::new(from_json(json!({
        "metadata": {"namespace": namespace, "name": format!("{service}-{number}"),
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "endpoints": endpoints
    })))
}

pub fn node(name: &str, internal_ip: &str) -> Arc<Node> {
    Arc::new(from_json(json!({
        "metadata": {"name": name},
        "status": {"addresses": [{"type": "InternalIP", "address": internal_ip}, {"type": "Hostname", "address": name}]}
    })))
}

/// A node with several InternalIP addresses, as a dual-stack node lists them.
pub fn dual_stack_node(name: &str, internal_ips: &[&str]) -> Arc<Node> {
    let addresses: Vec<Value> = internal_ips.iter().map(|ip| json!({"type": "InternalIP", "address": ip})).collect();
    Arc::new(from_json(json!({"metadata": {"name": name}, "status": {"addresses": addresses}})))
}

pub fn proxy_daemonset(host_port: i32) -> Arc<DaemonSet> {
    Arc::new(from_json(json!({
        "metadata": {"namespace": "kube-system", "name": "registry-proxy"},
        "spec": {
            "selector": {"matchLabels": {"registry-proxy": "true"}},
            "template": {
                "metadata": {"labels": {"registry-proxy": "true"}},
                "spec": {"containers": [{"name": "registry-proxy", "image": "kube-registry-proxy",
                         "ports": [{"name": "registry", "containerPort": 80, "hostPort": host_port}]}]}
            }
        }
    })))
}

/// Every allowed registry in `cluster`, as if each Service's namespace were allowed: what tests of the derived
/// values want.
pub fn allowed_registries(cluster: &super::Cluster, settings: &crate::settings::Settings) -> Vec<super::Registry> {
    let mut cluster = cluster.clone();
    let services = cluster.labelled_services.iter().chain(&cluster.namespace_services);
    let namespaces: Vec<Arc<String>> =
        services.chain(&cluster.builtin_services).filter_map(|s| s.metadata.namespace.clone()).map(Arc::new).collect();
    cluster.allowed_namespaces.extend(namespaces);
    super::registries(&cluster, settings).counted
}

/// An allowed, labelled registry in namespace `reg` publishing `localhost:<30000 + priority>`.
pub fn registry(name: &str, priority: i32, ready: bool) -> Registry {
    let document = LocalRegistryHostingV1 {
        host: Some(format!("localhost:{}", 30000 + priority)),
        host_from_cluster_network: Some(format!("{name}.reg.svc.cluster.local:5000")),
        ..LocalRegistryHostingV1::default()
    };
    let service = service("reg", name).build();
    let identity = super::Identity::of(&service.metadata);
    Registry {
        id: identity.id.clone(),
        origin: Origin::Labelled,
        priority,
        created: None,
        ready,
        document: Ok(document),
        ports: super::Ports {
            service: Some(5000),
            node: Some(30000 + priority),
            host_port: false,
            tls: false,
            relay: None,
        },
        own_addresses: vec![format!("localhost:{}", 30000 + priority), format!("{name}.reg.svc.cluster.local:5000")],
        reference: identity.reference(),
        wiring: super::Wiring::default(),
    }
}

pub fn ignored(namespace: &str, name: &str) -> Ignored {
    let id = ServiceId { namespace: namespace.into(), name: name.into() };
    let identity = super::Identity { id: id.clone(), uid: Some(format!("uid-{name}")), created: None };
    Ignored { id, origin: Origin::Labelled, reference: identity.reference() }
}
