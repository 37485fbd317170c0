//! The values one registry Service publishes: its port, readiness, and the four document fields.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Service, ServicePort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::index::Index;
use super::{Fault, Identity, Origin, Ports, Problem, Registry, ServiceId, Wiring, service_id};
use crate::hosting::address::Host;
use crate::hosting::{Field, InvalidValue, LocalRegistryHostingV1};
use crate::keys::service as annotations;
use crate::settings::{NodeAddress, Settings};

pub(super) fn derive(service: &Arc<Service>, origin: Origin, index: &Index, settings: &Settings) -> Registry {
    let id = service_id(service);
    let (priority, priority_problem) = match service.annotations().get(annotations::PRIORITY) {
        None => (0, None),
        Some(value) => match value.trim().parse::<i32>() {
            Ok(priority) => (priority, None),
            Err(_) => {
                let rule = format!("must be a whole number from {} to {}", i32::MIN, i32::MAX);
                (0, Some(invalid_annotation(annotations::PRIORITY, value, &rule)))
            }
        },
    };
    let port = registry_port(service, &origin);
    let wiring = wiring(service);
    let mut ports = match &port {
        Ok(port) => ports(service, *port, &origin, index),
        Err(_) => Ports::default(),
    };
    // The agents relay to the ClusterIP: a headless or ExternalName Service has none (the node concern says so).
    let relayable = wiring.cluster_ip.is_some() && wiring.external_name.is_none() && ports.service.is_some();
    ports.relay = settings.relay_port(&id.namespace, &id.name).filter(|_| relayable);
    let unannotated = unannotated(service, &wiring, &id, &origin, ports, index, settings);
    let own_addresses = own_addresses(&wiring, &id, ports, &unannotated, settings);
    let document = match (priority_problem, port) {
        (Some(problem), _) | (None, Err(problem)) => Err(problem),
        (None, Ok(_)) => document(service, ports, unannotated, settings),
    };
    Registry {
        own_addresses,
        ports,
        ready: ready(service, &id, index),
        priority,
        created: service.metadata.creation_timestamp.clone(),
        reference: Identity::of(&service.metadata).reference(),
        id,
        origin,
        document,
        wiring,
    }
}

/// What the concerns that follow the published registry read of its Service.
fn wiring(service: &Service) -> Wiring {
    let spec = service.spec.as_ref();
    let annotation = |key| service.annotations().get(key).cloned();
    Wiring {
        external_name: spec.filter(|_| is_external_name(service)).and_then(|s| s.external_name.clone()),
        cluster_ip: spec.and_then(|s| s.cluster_ip.as_deref()).and_then(|ip| ip.parse().ok()),
        ca_bundle: annotation(annotations::CA_BUNDLE),
        pull_secret: annotation(annotations::PULL_SECRET)
            .map(|name| name.trim().to_string())
            .filter(|name| !name.is_empty()),
    }
}

/// The document: what the controller derives (`unannotated`), each field overridden by its annotation.
fn document(
    service: &Service,
    ports: Ports,
    unannotated: Unannotated,
    settings: &Settings,
) -> Result<LocalRegistryHostingV1, Problem> {
    let host = overridden(service, Field::Host, unannotated.host)?;
    // The node's runtime reaches the agents' relay, else a hostPort or nodePort, on its own loopback, whatever tools
    // outside use: the relay serves in every kube-proxy mode, on IPv6 too, and on every node.
    let loopback_port = ports.relay.map(i32::from).or(ports.node);
    let runtime = loopback_port.map(|port| format!("localhost:{port}")).and_then(|runtime| {
        if Some(&runtime) == host.as_ref() {
            // Readers fall back to host; leaving the duplicate out keeps "localhost:" off every line but host's.
            None
        } else {
            // Same address, but line-based readers grep for "host:" and would take a "localhost:" line for host.
            Some(runtime.replacen("localhost:", "127.0.0.1:", 1))
        }
    });

    let derived = LocalRegistryHostingV1 {
        host,
        host_from_container_runtime: overridden(service, Field::HostFromContainerRuntime, runtime)?,
        host_from_cluster_network: overridden(
            service,
            Field::HostFromClusterNetwork,
            Some(unannotated.cluster_network),
        )?,
        help: overridden(service, Field::Help, settings.help_url.clone())?,
    };
    derived.validate().map_err(|invalid| Problem { fault: Fault::InvalidValue, message: not_publishable(&invalid) })?;
    Ok(derived)
}

/// The addresses the controller derives from the Service without its annotations.
struct Unannotated {
    host: Option<String>,
    cluster_network: String,
    /// The cluster network address is the target an ExternalName Service names: anything its writer chose.
    external: bool,
}

fn unannotated(
    service: &Service,
    wiring: &Wiring,
    id: &ServiceId,
    origin: &Origin,
    ports: Ports,
    index: &Index,
    settings: &Settings,
) -> Unannotated {
    let external_name = &wiring.external_name;
    let service_port = ports.service;
    let cluster_network = match (external_name, plain_http_cluster_ip(wiring, ports)) {
        (Some(name), _) => with_port(name, service_port),
        (None, Some(ip)) => with_port(&ip.to_string(), service_port),
        (None, None) => service_dns_name(id, settings, service_port),
    };
    let load_balancer =
        service.status.as_ref().and_then(|s| s.load_balancer.as_ref()).and_then(|lb| lb.ingress.as_ref()).and_then(
            |ingress| preferred_address(ingress.iter().filter_map(|i| i.ip.as_deref().or(i.hostname.as_deref()))),
        );
    // Tools reach the node's loopback when they run on the node (`--node-address localhost`, not minikube's).
    let tools_on_node = !needs_node_address(origin, settings) && settings.node_address == NodeAddress::Localhost;
    let host = match (load_balancer, ports.relay, ports.node) {
        (Some(address), _, _) => Some(with_port(&address, service_port)),
        (None, Some(relay), _) if tools_on_node => Some(format!("localhost:{relay}")),
        (None, _, Some(port)) => {
            node_address(id, origin, index, settings).map(|address| with_port(&address, Some(port)))
        }
        (None, _, None) => None,
    };
    Unannotated { host, cluster_network, external: external_name.is_some() }
}

/// The addresses that name this Service and nothing else, whatever its annotations say: its ClusterIP and its
/// cluster DNS names at its port, its hostPort or nodePort on a node's loopback and at the address tools outside
/// reach a node by, and its load balancer's address. The ClusterIP and names are the cluster's; a nodePort, a
/// hostPort and a load balancer's address may be ones the Service's (or pod's) author asked for, but each is one
/// the cluster or the load balancer gave this Service and no other, and the node addresses are the controller's
/// flags'. An ExternalName's target is not among them: whoever wrote the Service chose it outright.
/// Only these may redirect what every node pulls without a cluster admin allowing it (see `crate::node::trust`).
fn own_addresses(
    wiring: &Wiring,
    id: &ServiceId,
    ports: Ports,
    unannotated: &Unannotated,
    settings: &Settings,
) -> Vec<String> {
    let mut own: Vec<String> = Vec::new();
    if !unannotated.external {
        own.extend(unannotated.host.clone());
        own.push(unannotated.cluster_network.clone());
        if let Some(port) = ports.service {
            own.push(service_dns_name(id, settings, Some(port)));
            own.push(with_port(&format!("{}.{}.svc", id.name, id.namespace), Some(port)));
            own.extend(
                wiring
                    .cluster_ip
                    .and_then(|ip| Host::normalise(&ip.to_string()).ok())
                    .map(|ip| ip.with_port(Some(port))),
            );
        }
        if let Some(port) = ports.node {
            own.extend(["localhost", "127.0.0.1", "[::1]"].map(|loopback| format!("{loopback}:{port}")));
        }
    }
    own.retain(|address| crate::hosting::address::check(address).is_ok());
    own.sort();
    own.dedup();
    own
}

fn service_dns_name(id: &ServiceId, settings: &Settings, port: Option<i32>) -> String {
    with_port(&format!("{}.{}.svc.{}", id.name, id.namespace, settings.cluster_domain), port)
}

/// IPv6 in brackets, names lowercase without a root dot; an address that fits no rule is kept as given, for
/// validation to name the rule.
fn with_port(address: &str, port: Option<i32>) -> String {
    match Host::normalise(address) {
        Ok(host) => host.with_port(port),
        Err(_) => port.map_or_else(|| address.to_string(), |port| format!("{address}:{port}")),
    }
}

/// The ClusterIP published for pods when the registry speaks plain HTTP and the address is one that
/// go-containerregistry (ko, kpack, crane, Knative's builders) dials over HTTP without an `insecure` flag: it does
/// so only for RFC 1918 addresses, loopback and `*.localhost` (`Registry.Scheme` in pkg/name/registry.go, v0.22.1),
/// so the Service's DNS name would be dialled over HTTPS and fail. Other readers take an IP address as well as a name.
fn plain_http_cluster_ip(wiring: &Wiring, ports: Ports) -> Option<Ipv4Addr> {
    let IpAddr::V4(ip) = wiring.cluster_ip? else { return None };
    (!ports.tls && ports.service.is_some() && ip.is_private()).then_some(ip)
}

/// Why a derived value cannot be published, and a fix that would pass: the annotation that overrides that field,
/// with an example only when the example itself passes that field's rules.
fn not_publishable(invalid: &InvalidValue) -> String {
    let example = invalid.value.replacen("localhost:", "127.0.0.1:", 1);
    let passes = example != invalid.value && invalid.field.check(&example).is_ok();
    let fix = if passes { format!(" (for example {example:?})") } else { String::new() };
    format!(
        "the derived document is not publishable: {invalid}; set annotation {} to a value that is{fix}, \
         or to \"\" to leave the field out",
        invalid.field.annotation()
    )
}

/// Of a load balancer's addresses, the one readers most likely reach: IPv4 first (every developer machine has it),
/// then a host name (it resolves to whatever the reader's machine uses), then IPv6.
fn preferred_address<'a>(addresses: impl Iterator<Item = &'a str> + Clone) -> Option<String> {
    let family = |address: &str| match address.trim_matches(['[', ']']).parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => 0,
        Err(_) => 1,
        Ok(std::net::IpAddr::V6(_)) => 2,
    };
    addresses.min_by_key(|address| family(address)).map(str::to_string)
}

/// The field's annotation when set (an empty value leaves the field out), else the derived value. The annotation's
/// value is checked on its own here; the whole document is validated after derivation.
fn overridden(service: &Service, field: Field, derived: Option<String>) -> Result<Option<String>, Problem> {
    let key = field.annotation();
    let Some(value) = service.annotations().get(key) else {
        return Ok(derived);
    };
    let value = value.trim();
    if value.is_empty() {
        return Ok(None);
    }
    field.check(value).map_err(|reason| invalid_annotation(key, value, &reason))?;
    Ok(Some(value.to_string()))
}

fn invalid_annotation(key: &str, value: &str, reason: &str) -> Problem {
    Problem { fault: Fault::InvalidAnnotation, message: format!("annotation {key}={value:?} {reason}") }
}

/// The registry's Service port, and the hostPort or nodePort every node serves it at (a hostPort first).
fn ports(service: &Service, port: Option<&ServicePort>, origin: &Origin, index: &Index) -> Ports {
    let type_ = service.spec.as_ref().and_then(|s| s.type_.as_deref());
    let node_port = port.and_then(|p| p.node_port).filter(|_| matches!(type_, Some("NodePort" | "LoadBalancer")));
    let host_port = port.and_then(|p| host_port(service, p, origin, index));
    Ports {
        service: port.map(|p| p.port),
        node: host_port.or(node_port),
        host_port: host_port.is_some(),
        tls: port.is_some_and(serves_tls),
        relay: None,
    }
}

/// Whether a Service port declares TLS: its `appProtocol` is `https`, or its name is `https` or starts with
/// `https-` (the convention service meshes read). Local registries speak plain HTTP, so that is the default.
fn serves_tls(port: &ServicePort) -> bool {
    let name = port.name.as_deref().unwrap_or_default();
    port.app_protocol.as_deref().is_some_and(|protocol| protocol.eq_ignore_ascii_case("https"))
        || name == "https"
        || name.starts_with("https-")
}

/// The port named `registry`, else the one the port annotation names, else the only one.
fn registry_port<'a>(service: &'a Service, origin: &Origin) -> Result<Option<&'a ServicePort>, Problem> {
    let ports: &[ServicePort] = service.spec.as_ref().and_then(|s| s.ports.as_deref()).unwrap_or_default();
    if let Some(port) = ports.iter().find(|p| p.name.as_deref() == Some("registry")) {
        return Ok(Some(port));
    }
    if let Some(wanted) = service.annotations().get(annotations::PORT) {
        let wanted = wanted.trim();
        return ports
            .iter()
            .find(|p| p.name.as_deref() == Some(wanted) || p.port.to_string() == wanted)
            .map(Some)
            .ok_or_else(|| {
                invalid_annotation(
                    annotations::PORT,
                    wanted,
                    &format!("names no port of the Service ({})", describe(ports)),
                )
            });
    }
    // minikube's Service serves plain HTTP on 80 and, in some versions, TLS on 443.
    if *origin == Origin::Minikube
        && let Some(port) = ports.iter().find(|p| p.port == 80)
    {
        return Ok(Some(port));
    }
    match ports {
        [only] => Ok(Some(only)),
        [] if is_external_name(service) => Ok(None),
        [] => Err(Problem { fault: Fault::NoPort, message: "the Service has no ports".into() }),
        _ => Err(Problem {
            fault: Fault::AmbiguousPort,
            message: format!(
                "the Service has {} ports ({}): name one \"registry\" or set annotation {}",
                ports.len(),
                describe(ports),
                annotations::PORT
            ),
        }),
    }
}

fn describe(ports: &[ServicePort]) -> String {
    let list: Vec<String> = ports
        .iter()
        .map(|p| match &p.name {
            Some(name) if !name.is_empty() => format!("{name}={}", p.port),
            _ => p.port.to_string(),
        })
        .collect();
    if list.is_empty() { "none".into() } else { list.join(", ") }
}

fn is_external_name(service: &Service) -> bool {
    service.spec.as_ref().and_then(|s| s.type_.as_deref()) == Some("ExternalName")
}

/// A hostPort that reaches the registry: on the proxy DaemonSet (minikube), else on a registry pod's container
/// port that the Service port targets.
fn host_port(service: &Service, port: &ServicePort, origin: &Origin, index: &Index) -> Option<i32> {
    if *origin == Origin::Minikube {
        let proxy_ports = index
            .cluster
            .proxies
            .iter()
            .filter_map(|ds| ds.spec.as_ref()?.template.spec.as_ref())
            .flat_map(|spec| &spec.containers)
            .flat_map(|c| c.ports.iter().flatten());
        if let Some(host_port) = proxy_ports.filter_map(|p| p.host_port).min() {
            return Some(host_port);
        }
    }
    let target = port.target_port.clone().unwrap_or(IntOrString::Int(port.port));
    registry_pods(service, index)
        .flat_map(|pod| pod.spec.iter().flat_map(|s| &s.containers))
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| match &target {
            IntOrString::Int(number) => p.container_port == *number,
            IntOrString::String(name) => p.name.as_deref() == Some(name.as_str()),
        })
        .filter_map(|p| p.host_port)
        .min()
}

fn registry_pods<'a>(service: &'a Service, index: &'a Index) -> impl Iterator<Item = &'a Pod> {
    let selector = service.spec.as_ref().and_then(|s| s.selector.as_ref()).filter(|s| !s.is_empty());
    let pods = selector.map_or(&[][..], |_| index.pods_in(service.metadata.namespace.as_deref().unwrap_or_default()));
    pods.iter().copied().filter(move |pod| {
        let labels = pod.labels();
        selector.is_some_and(|sel| sel.iter().all(|(k, v)| labels.get(k) == Some(v)))
    })
}

/// Whether tools outside reach this registry's node port through the node's InternalIP, which only a cluster knows.
pub fn needs_node_address(origin: &Origin, settings: &Settings) -> bool {
    *origin == Origin::Minikube || settings.node_address == NodeAddress::InternalIp
}

/// How tools outside the cluster reach this registry's node. minikube is always reached at its node's IP.
fn node_address(id: &ServiceId, origin: &Origin, index: &Index, settings: &Settings) -> Option<String> {
    if needs_node_address(origin, settings) {
        let node_name = endpoint_nodes(index, id).into_iter().next()?;
        let node = index.cluster.nodes.iter().find(|n| n.name_any() == node_name)?;
        let addresses = node.status.as_ref()?.addresses.as_ref()?;
        let internal = addresses.iter().filter(|a| a.type_ == "InternalIP").map(|a| a.address.as_str());
        return preferred_address(internal);
    }
    match &settings.node_address {
        NodeAddress::Literal(address) => Some(address.clone()),
        _ => Some("localhost".into()),
    }
}

/// Names of the nodes behind the Service's ready endpoints, sorted.
pub(super) fn endpoint_nodes(index: &Index, id: &ServiceId) -> std::collections::BTreeSet<String> {
    ready_endpoints(index, id).filter_map(|e| e.node_name.clone()).collect()
}

fn ready_endpoints<'a>(
    index: &'a Index,
    id: &ServiceId,
) -> impl Iterator<Item = &'a k8s_openapi::api::discovery::v1::Endpoint> {
    index
        .slices_of(id)
        .iter()
        .flat_map(|slice| slice.endpoints.iter().flatten())
        // An unknown readiness counts as ready, as the EndpointSlice API says.
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true))
}

/// ExternalName Services, and selector-less ones nobody wrote EndpointSlices for, have nothing to be ready.
fn ready(service: &Service, id: &ServiceId, index: &Index) -> bool {
    if is_external_name(service) {
        return true;
    }
    let has_selector = service.spec.as_ref().and_then(|s| s.selector.as_ref()).is_some_and(|s| !s.is_empty());
    if !has_selector && index.slices_of(id).is_empty() {
        return true;
    }
    ready_endpoints(index, id).next().is_some()
}

#[cfg(test)]
mod tests {
    use super::super::Cluster;
    use super::super::fixtures::*;
    use super::*;
    use crate::keys::service as annotations;

    fn publish(cluster: &Cluster, settings: &Settings) -> Result<LocalRegistryHostingV1, Problem> {
        let registries = allowed_registries(cluster, settings);
        assert_eq!(registries.len(), 1, "one registry expected");
        registries.into_iter().next().map(|r| r.document).expect("a registry")
    }

    fn labelled(service: ServiceBuilder) -> Cluster {
        Cluster { labelled_services: vec![service.build()], ..Cluster::default() }
    }

    fn expect(
        host: Option<&str>,
        runtime: Option<&str>,
        cluster_net: Option<&str>,
        help: Option<&str>,
    ) -> LocalRegistryHostingV1 {
        LocalRegistryHostingV1 {
            host: host.map(Into::into),
            host_from_container_runtime: runtime.map(Into::into),
            host_from_cluster_network: cluster_net.map(Into::into),
            help: help.map(Into::into),
        }
    }

    #[test]
    fn the_wiring_is_what_the_following_concerns_read_of_the_service() {
        let wiring = |service: ServiceBuilder| {
            let registries = allowed_registries(&labelled(service.port(None, 5000, None)), &Settings::default());
            registries.into_iter().next().expect("a registry").wiring
        };
        let annotated = service("reg", "zot")
            .cluster_ip("10.96.0.12")
            .annotation(annotations::CA_BUNDLE, " configmap/zot-ca ")
            .annotation(annotations::PULL_SECRET, " creds ");
        assert_eq!(
            wiring(annotated),
            Wiring {
                external_name: None,
                cluster_ip: Some("10.96.0.12".parse().expect("an IP")),
                // The node concern judges the annotation as written, so that its message quotes it.
                ca_bundle: Some(" configmap/zot-ca ".into()),
                pull_secret: Some("creds".into()),
            }
        );
        let headless = service("reg", "zot").cluster_ip("None").annotation(annotations::PULL_SECRET, "  ");
        assert_eq!(wiring(headless), Wiring::default(), "a headless Service, an empty annotation: nothing");
        let external = service("reg", "zot").type_("ExternalName").external_name("registry.example.com");
        assert_eq!(wiring(external).external_name.as_deref(), Some("registry.example.com"));
        // Only an ExternalName Service's name is where nodes reach it.
        let stray = service("reg", "zot").cluster_ip("10.96.0.12").external_name("registry.example.com");
        assert_eq!(wiring(stray).external_name, None);
    }

    #[test]
    fn every_service_type_publishes_what_its_readers_need() {
        let settings = Settings::default();
        let internal = Settings { node_address: NodeAddress::InternalIp, ..Settings::default() };
        let literal = Settings { node_address: NodeAddress::Literal("192.168.1.5".into()), ..Settings::default() };
        let with_pod_host_port = |mut cluster: Cluster| {
            cluster.pods.push(pod("reg", "zot-1", &[("app", "zot")], 5000, Some("http"), Some(5001)));
            cluster.endpoint_slices.push(slice("reg", "zot", &[(true, "node-a")]));
            cluster.nodes.push(node("node-a", "10.0.0.7"));
            cluster
        };
        let cases: Vec<(&str, Cluster, &Settings, LocalRegistryHostingV1)> = vec![
            (
                "ClusterIP",
                labelled(service("reg", "zot").port(None, 5000, None)),
                &settings,
                expect(None, None, Some("zot.reg.svc.cluster.local:5000"), None),
            ),
            (
                "NodePort",
                labelled(service("reg", "zot").type_("NodePort").port(None, 5000, Some(30500))),
                &settings,
                expect(Some("localhost:30500"), None, Some("zot.reg.svc.cluster.local:5000"), None),
            ),
            (
                "NodePort, literal node address",
                labelled(service("reg", "zot").type_("NodePort").port(None, 5000, Some(30500))),
                &literal,
                expect(
                    Some("192.168.1.5:30500"),
                    Some("127.0.0.1:30500"),
                    Some("zot.reg.svc.cluster.local:5000"),
                    None,
                ),
            ),
            (
                "LoadBalancer with an IP",
                labelled(
                    service("reg", "zot").type_("LoadBalancer").port(None, 5000, Some(31000)).ingress_ip("172.18.0.50"),
                ),
                &settings,
                expect(Some("172.18.0.50:5000"), Some("127.0.0.1:31000"), Some("zot.reg.svc.cluster.local:5000"), None),
            ),
            (
                "LoadBalancer with a hostname",
                labelled(
                    service("reg", "zot")
                        .type_("LoadBalancer")
                        .port(None, 443, None)
                        .ingress_hostname("Reg.Example.com"),
                ),
                &settings,
                expect(Some("reg.example.com:443"), None, Some("zot.reg.svc.cluster.local:443"), None),
            ),
            (
                "ExternalName",
                labelled(
                    service("reg", "ext")
                        .type_("ExternalName")
                        .external_name("registry.corp.example")
                        .port(None, 5000, None),
                ),
                &settings,
                expect(None, None, Some("registry.corp.example:5000"), None),
            ),
            (
                "hostPort on the registry pods",
                with_pod_host_port(labelled(
                    service("reg", "zot").selector(&[("app", "zot")]).port_target(None, 80, "http"),
                )),
                &settings,
                expect(Some("localhost:5001"), None, Some("zot.reg.svc.cluster.local:80"), None),
            ),
            (
                "hostPort on the registry pods, numeric target",
                {
                    let mut cluster =
                        labelled(service("reg", "zot").selector(&[("app", "zot")]).port(None, 5000, None));
                    cluster.pods.push(pod("reg", "zot-1", &[("app", "zot")], 5000, None, Some(5002)));
                    cluster
                },
                &settings,
                expect(Some("localhost:5002"), None, Some("zot.reg.svc.cluster.local:5000"), None),
            ),
            (
                "hostPort, node InternalIP",
                with_pod_host_port(labelled(
                    service("reg", "zot").selector(&[("app", "zot")]).port_target(None, 80, "http"),
                )),
                &internal,
                expect(Some("10.0.0.7:5001"), Some("127.0.0.1:5001"), Some("zot.reg.svc.cluster.local:80"), None),
            ),
        ];
        for (name, cluster, settings, expected) in cases {
            assert_eq!(publish(&cluster, settings), Ok(expected), "{name}");
        }
    }

    #[test]
    fn ipv6_and_dual_stack_addresses_are_bracketed_and_ipv4_is_preferred() {
        let nodeport = || service("reg", "zot").type_("NodePort").port(None, 5000, Some(30500));
        let lb = |entries: &[&str]| {
            labelled(service("reg", "zot").type_("LoadBalancer").port(None, 5000, Some(31000)).ingress(entries))
        };
        let internal = Settings { node_address: NodeAddress::InternalIp, ..Settings::default() };
        let on_node = |node: std::sync::Arc<k8s_openapi::api::core::v1::Node>| {
            let mut cluster = labelled(nodeport().selector(&[("app", "zot")]));
            cluster.endpoint_slices.push(slice("reg", "zot", &[(true, "node-a")]));
            cluster.nodes.push(node);
            cluster
        };
        // As the flag's parser leaves them (tested in config): IPv6 in brackets.
        let literal =
            |address: &str| Settings { node_address: NodeAddress::Literal(address.into()), ..Settings::default() };
        let host_of = |cluster: Cluster, settings: &Settings| publish(&cluster, settings).map(|d| d.host);
        let defaults = Settings::default();
        for (name, host, expected) in [
            ("IPv6 load balancer", host_of(lb(&["fd00:10::200"]), &defaults), "[fd00:10::200]:5000"),
            (
                "dual-stack, IPv6 listed first",
                host_of(lb(&["fd00:10::200", "172.18.0.50"]), &defaults),
                "172.18.0.50:5000",
            ),
            ("name over IPv6", host_of(lb(&["fd00:10::200", "lb.example"]), &defaults), "lb.example:5000"),
            ("IPv6 node address flag", host_of(labelled(nodeport()), &literal("[fd00::1]")), "[fd00::1]:30500"),
            ("IPv6 loopback flag", host_of(labelled(nodeport()), &literal("[::1]")), "[::1]:30500"),
            ("IPv6-only node", host_of(on_node(dual_stack_node("node-a", &["fd00::7"])), &internal), "[fd00::7]:30500"),
            (
                "dual-stack node",
                host_of(on_node(dual_stack_node("node-a", &["fd00::7", "10.0.0.7"])), &internal),
                "10.0.0.7:30500",
            ),
        ] {
            assert_eq!(host, Ok(Some(expected.to_string())), "{name}");
        }
        let document = publish(&lb(&["fd00:10::200"]), &defaults).expect("publishable");
        assert_eq!(document.host_from_container_runtime.as_deref(), Some("127.0.0.1:31000"));
    }

    #[test]
    fn the_runtime_value_follows_the_rule_whatever_host_is_overridden_to() {
        let nodeport = service("reg", "zot").type_("NodePort").port(None, 5000, Some(30600));
        let overridden = labelled(nodeport.clone().annotation(annotations::HOST, "registry.localhost:5000"));
        let document = publish(&overridden, &Settings::default()).expect("publishable");
        assert_eq!(document.host.as_deref(), Some("registry.localhost:5000"));
        assert_eq!(document.host_from_container_runtime.as_deref(), Some("127.0.0.1:30600"), "the nodePort");
        // Overridden to exactly what the runtime would use: readers fall back to host.
        let same = labelled(nodeport.annotation(annotations::HOST, "localhost:30600"));
        assert_eq!(publish(&same, &Settings::default()).expect("publishable").host_from_container_runtime, None);
    }

    #[test]
    fn external_names_are_normalised_and_warnings_suggest_only_fixes_that_pass() {
        let external = |name: &str| {
            labelled(service("reg", "ext").type_("ExternalName").external_name(name).port(Some("registry"), 5000, None))
        };
        let document = publish(&external("Registry.Example."), &Settings::default()).expect("publishable");
        assert_eq!(document.host_from_cluster_network.as_deref(), Some("registry.example:5000"));

        // "localhost:5000" would be read as the host line by line-based readers; 127.0.0.1 is the same address.
        let problem = publish(&external("localhost"), &Settings::default()).expect_err("host: rule");
        assert_eq!(problem.fault, Fault::InvalidValue);
        assert!(
            problem.message.contains(annotations::HOST_FROM_CLUSTER_NETWORK)
                && problem.message.contains("\"127.0.0.1:5000\""),
            "{}",
            problem.message
        );
        let fixed = labelled(
            service("reg", "ext")
                .type_("ExternalName")
                .external_name("localhost")
                .port(Some("registry"), 5000, None)
                .annotation(annotations::HOST_FROM_CLUSTER_NETWORK, "127.0.0.1:5000"),
        );
        assert!(publish(&fixed, &Settings::default()).is_ok(), "the suggested fix passes");
        // No publishable example exists for a value that breaks another rule: none is suggested.
        let problem = publish(&external("unknown"), &Settings::default()).expect_err("placeholder");
        assert!(!problem.message.contains("for example"), "{}", problem.message);
    }

    #[test]
    fn an_external_name_without_ports_publishes_its_name_and_no_example_that_fails_is_suggested() {
        let portless = labelled(service("reg", "ext").type_("ExternalName").external_name("registry.corp.example"));
        let document = publish(&portless, &Settings::default()).expect("an ExternalName needs no port");
        assert_eq!(document.host_from_cluster_network.as_deref(), Some("registry.corp.example"));

        // "127.0.0.1:0" breaks the port rule as "localhost:0" does: no example is given.
        let port_zero =
            labelled(service("reg", "ext").type_("ExternalName").external_name("localhost").port(None, 0, None));
        let problem = publish(&port_zero, &Settings::default()).expect_err("port 0");
        assert!(!problem.message.contains("for example"), "{}", problem.message);
    }

    #[test]
    fn annotations_override_each_value_and_an_empty_one_removes_it() {
        let settings = Settings { help_url: Some("https://docs.example/registry".into()), ..Settings::default() };
        let cluster = labelled(
            service("reg", "zot")
                .type_("NodePort")
                .port(None, 5000, Some(30500))
                .annotation(annotations::HOST, "registry.dev.example:443")
                .annotation(annotations::HOST_FROM_CONTAINER_RUNTIME, "registry.internal:5000")
                .annotation(annotations::HOST_FROM_CLUSTER_NETWORK, "")
                .annotation(annotations::HELP, "https://wiki.example/registry"),
        );
        assert_eq!(
            publish(&cluster, &settings),
            Ok(expect(
                Some("registry.dev.example:443"),
                Some("registry.internal:5000"),
                None,
                Some("https://wiki.example/registry")
            ))
        );
    }

    #[test]
    fn a_bad_annotation_is_a_problem_that_names_it() {
        let cases = [
            (annotations::HOST, "http://localhost:5000", "scheme"),
            (annotations::HOST_FROM_CLUSTER_NETWORK, "Registry:5000", "lowercase"),
            (annotations::HELP, "see the wiki", "http"),
            (annotations::PRIORITY, "high", "whole number"),
            (annotations::PRIORITY, "2147483648", "from -2147483648 to 2147483647"),
            (annotations::PORT, "grpc", "names no port"),
            // IPv4 spellings parsers read differently: hex, a single number, octal.
            (annotations::HOST, "0x7f.0.0.1:5000", "four dotted decimal octets"),
            (annotations::HOST_FROM_CONTAINER_RUNTIME, "0x7f000001:5000", "four dotted decimal octets"),
            (annotations::HOST_FROM_CLUSTER_NETWORK, "010.0.0.1:5000", "four dotted decimal octets"),
        ];
        for (key, value, needle) in cases {
            let cluster = labelled(service("reg", "zot").port(Some("http"), 5000, None).annotation(key, value));
            let problem = publish(&cluster, &Settings::default()).expect_err(key);
            assert_eq!(problem.fault, Fault::InvalidAnnotation, "{key}");
            assert!(problem.message.contains(key) && problem.message.contains(needle), "{}", problem.message);
        }
    }

    #[test]
    fn port_is_the_one_named_registry_else_annotated_else_the_only_one() {
        let two = || service("reg", "zot").port(Some("http"), 80, None).port(Some("debug"), 5001, None);
        let problem = publish(&labelled(two()), &Settings::default()).unwrap_err();
        assert_eq!(problem.fault, Fault::AmbiguousPort);
        assert!(problem.message.contains("http=80, debug=5001"), "{}", problem.message);
        let unnamed = service("reg", "zot").port(Some(""), 80, None).port(Some("debug"), 5001, None);
        let problem = publish(&labelled(unnamed), &Settings::default()).unwrap_err();
        assert!(problem.message.contains("(80, debug=5001)"), "an empty name is no name: {}", problem.message);
        let annotated = publish(&labelled(two().annotation(annotations::PORT, "debug")), &Settings::default()).unwrap();
        assert_eq!(annotated.host_from_cluster_network.as_deref(), Some("zot.reg.svc.cluster.local:5001"));
        let named = publish(&labelled(two().port(Some("registry"), 5000, None)), &Settings::default()).unwrap();
        assert_eq!(named.host_from_cluster_network.as_deref(), Some("zot.reg.svc.cluster.local:5000"));
        let none = publish(&labelled(service("reg", "zot")), &Settings::default()).unwrap_err();
        assert_eq!(none.fault, Fault::NoPort);
    }

    #[test]
    fn minikube_is_reached_at_its_node_ip_through_the_proxy_host_port() {
        let mut cluster = Cluster::default();
        cluster.builtin_services.push(
            service("kube-system", "registry")
                .selector(&[("actual-registry", "true")])
                .port(Some("http"), 80, None)
                .port(Some("https"), 443, None)
                .build(),
        );
        cluster.proxies.push(proxy_daemonset(5000));
        cluster.endpoint_slices.push(slice("kube-system", "registry", &[(true, "minikube")]));
        cluster.nodes.push(node("minikube", "192.168.49.2"));
        assert_eq!(
            publish(&cluster, &Settings::default()),
            Ok(expect(
                Some("192.168.49.2:5000"),
                Some("127.0.0.1:5000"),
                Some("registry.kube-system.svc.cluster.local:80"),
                None
            ))
        );
        // Reached at a hostPort (portmap's, in every kube-proxy mode), not at a nodePort.
        let ports = allowed_registries(&cluster, &Settings::default())[0].ports;
        assert_eq!((ports.node, ports.host_port), (Some(5000), true));
    }

    #[test]
    fn microk8s_is_reached_at_localhost_on_its_node_port() {
        let mut cluster = Cluster::default();
        cluster.builtin_services.push(
            service("container-registry", "registry")
                .type_("NodePort")
                .port(Some("registry"), 5000, Some(32000))
                .build(),
        );
        assert_eq!(
            publish(&cluster, &Settings::default()),
            Ok(expect(Some("localhost:32000"), None, Some("registry.container-registry.svc.cluster.local:5000"), None))
        );
    }

    #[test]
    fn readiness_comes_from_endpoint_slices() {
        let settings = Settings::default();
        let selected = || service("reg", "zot").selector(&[("app", "zot")]).port(None, 5000, None);
        let mut cluster = labelled(selected());
        assert!(!allowed_registries(&cluster, &settings)[0].ready, "no slice yet");
        cluster.endpoint_slices.push(slice("reg", "zot", &[(false, "n")]));
        assert!(!allowed_registries(&cluster, &settings)[0].ready, "only unready endpoints");
        cluster.endpoint_slices.push(slice("reg", "zot", &[(true, "n")]));
        assert!(allowed_registries(&cluster, &settings)[0].ready);
        let selectorless = labelled(service("reg", "manual").port(None, 5000, None));
        assert!(allowed_registries(&selectorless, &settings)[0].ready);
        let external =
            labelled(service("reg", "ext").type_("ExternalName").external_name("r.example").port(None, 5000, None));
        assert!(allowed_registries(&external, &settings)[0].ready);
    }

    #[test]
    fn pods_get_a_private_cluster_ip_of_a_plain_http_registry_and_the_name_otherwise() {
        let settings = Settings::default();
        let published = |service: ServiceBuilder| publish(&labelled(service), &settings).expect("publishable");
        let cluster_network = |service| published(service).host_from_cluster_network;
        let zot = || service("reg", "zot");
        let name = Some("zot.reg.svc.cluster.local:5000".to_string());
        // go-containerregistry dials 10/8, 172.16/12 and 192.168/16 over HTTP, a DNS name over HTTPS.
        for ip in ["10.96.0.12", "172.20.1.2", "192.168.3.4"] {
            assert_eq!(cluster_network(zot().cluster_ip(ip).port(None, 5000, None)), Some(format!("{ip}:5000")));
        }
        let https = zot().cluster_ip("10.96.0.12");
        assert_eq!(cluster_network(https.clone().port_protocol(5000, "HTTPS")), name, "appProtocol https");
        assert_eq!(cluster_network(https.clone().port(Some("https"), 5000, None)), name, "port named https");
        assert_eq!(cluster_network(https.port(Some("https-registry"), 5000, None)), name, "port named https-*");
        // Outside those ranges go-containerregistry would dial HTTPS to the address too.
        for ip in ["100.64.0.10", "203.0.113.7", "fd00:10:96::12", "None"] {
            assert_eq!(cluster_network(zot().cluster_ip(ip).port(None, 5000, None)), name, "cluster IP {ip}");
        }
        // The annotation still decides when it is set.
        let annotated = zot()
            .cluster_ip("10.96.0.12")
            .port(None, 5000, None)
            .annotation(annotations::HOST_FROM_CLUSTER_NETWORK, "zot.reg.svc.cluster.local:5000");
        assert_eq!(cluster_network(annotated), name);
        // A TLS registry tells the node plan so too: it gets no plain-HTTP endpoint.
        let registries =
            allowed_registries(&labelled(zot().cluster_ip("10.96.0.12").port_protocol(5000, "https")), &settings);
        assert!(registries[0].ports.tls);
    }
}
