//! The loopback relay: a registry the cluster admin names (`--node-relays NAMESPACE/NAME=PORT`, chart value
//! `nodeAgent.relay.registries`) is served by every node's agent on the node's own loopback, `127.0.0.1:<port>` and
//! `[::1]:<port>`, each connection relayed to the Service's ClusterIP. Every container runtime pulls from loopback
//! over plain HTTP without a file (containerd, dockerd and CRI-O's `localhost` aside), and every kube-proxy mode
//! serves a ClusterIP to the node, so the relay's address works where a loopback nodePort does not (nftables mode,
//! `[::1]`) and where no runtime file can be written. The port is the admin's, never a tenant's: a Service's
//! annotations cannot ask for one, and the agent binds loopback only. Pure.

use std::fmt;
use std::net::SocketAddr;

use super::api::RelayEntry;
use crate::publish::Published;
use crate::settings::RelayRule;

/// The relay the plan holds for `published`: where the admin relays it, to its ClusterIP and Service port.
pub fn entry(published: &Published) -> Option<RelayEntry> {
    let port = published.ports.relay?;
    let target = SocketAddr::new(published.wiring.cluster_ip?, u16::try_from(published.ports.service?).ok()?);
    Some(RelayEntry { port, registry: published.registry.to_string(), target })
}

/// Whether `address` (`host:port`, as published) is the node's loopback at the relay's port, which the relay serves.
pub fn serves(address: &str, relay: Option<u16>) -> bool {
    relay.is_some_and(|port| super::served_on_node_loopback(address, Some(i32::from(port))))
}

/// Why a registry the admin relays gets no relay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RelayProblem {
    /// A headless or ExternalName Service: no ClusterIP for the agents to relay to.
    NoClusterIp { registry: String, port: u16 },
}

impl fmt::Display for RelayProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RelayProblem::NoClusterIp { registry, port } => write!(
                f,
                "the cluster admin relays {registry} on every node's loopback at port {port} (nodeAgent.relay), but \
                 its Service has no ClusterIP to relay to (headless or ExternalName), so no node serves it there; \
                 give it a ClusterIP or take it out of nodeAgent.relay.registries"
            ),
        }
    }
}

/// Why the published registry gets no relay although `rules` name it.
pub fn problem(published: &Published, rules: &[RelayRule]) -> Option<RelayProblem> {
    let id = &published.registry;
    let rule = rules.iter().find(|rule| rule.namespace == id.namespace && rule.name == id.name)?;
    entry(published).is_none().then(|| RelayProblem::NoClusterIp { registry: id.to_string(), port: rule.port })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::fixtures::published_with;
    use crate::registry::fixtures::service;
    use crate::settings::{NodeAddress, Settings};

    fn relaying(port: u16) -> Settings {
        let rule = RelayRule { namespace: "registry".into(), name: "registry".into(), port };
        Settings { relays: vec![rule], ..Settings::default() }
    }

    fn clusterip() -> crate::registry::fixtures::ServiceBuilder {
        service("registry", "registry").cluster_ip("10.96.0.12").port(None, 5000, None)
    }

    #[test]
    fn a_relayed_registry_is_relayed_to_its_cluster_ip_at_its_service_port() {
        let published = published_with(clusterip(), &relaying(5001));
        let entry = entry(&published).expect("a relay");
        assert_eq!(entry.port, 5001);
        assert_eq!(entry.target, "10.96.0.12:5000".parse().unwrap());
        assert_eq!(entry.registry, "registry/registry");
        let (plan, refused) = crate::node::plan(Some(&published), None, &[]);
        assert_eq!(plan.relays, [entry]);
        assert_eq!(plan.format, 3);
        assert!(refused.is_empty(), "the relay's own address is not refused: {refused:?}");
        let addresses: Vec<&str> = plan.hosts.iter().map(|h| h.address.as_str()).collect();
        assert_eq!(addresses, ["10.96.0.12:5000"], "no file stands in for the relay's address");
        let other = Settings {
            relays: vec![RelayRule { name: "other".into(), ..relaying(5001).relays[0].clone() }],
            ..Settings::default()
        };
        assert_eq!(super::entry(&published_with(clusterip(), &other)), None, "only the Service the admin named");
    }

    #[test]
    fn tools_on_the_node_and_its_runtime_are_given_the_relay() {
        // --node-address localhost: tools run on the node, whose loopback the relay serves.
        let published = published_with(clusterip(), &relaying(5001));
        assert_eq!(published.document.host.as_deref(), Some("localhost:5001"));
        assert_eq!(published.document.host_from_container_runtime, None, "readers fall back to host");
        assert_eq!(published.document.host_from_cluster_network.as_deref(), Some("10.96.0.12:5000"));
        // A NodePort registry: the relay replaces the loopback nodePort, which nftables mode does not serve.
        let nodeport =
            service("registry", "registry").type_("NodePort").cluster_ip("10.96.0.12").port(None, 5000, Some(30500));
        let published = published_with(nodeport, &relaying(5001));
        assert_eq!(published.document.host.as_deref(), Some("localhost:5001"));
        // Tools elsewhere (a load balancer, a VM's address) keep their host; the runtime still gets the relay.
        let balanced = clusterip().type_("LoadBalancer").ingress_ip("192.168.1.200");
        let published = published_with(balanced, &relaying(5001));
        assert_eq!(published.document.host.as_deref(), Some("192.168.1.200:5000"));
        assert_eq!(published.document.host_from_container_runtime.as_deref(), Some("127.0.0.1:5001"));
        let vm = Settings { node_address: NodeAddress::Literal("192.168.64.2".into()), ..relaying(5001) };
        let nodeport =
            service("registry", "registry").type_("NodePort").cluster_ip("10.96.0.12").port(None, 5000, Some(30500));
        let published = published_with(nodeport, &vm);
        assert_eq!(published.document.host.as_deref(), Some("192.168.64.2:30500"));
        assert_eq!(published.document.host_from_container_runtime.as_deref(), Some("127.0.0.1:5001"));
        let plan = crate::node::plan(Some(&published), None, &[]).0;
        assert!(plan.hosts.iter().all(|h| h.address != "127.0.0.1:5001"), "{plan:?}");
    }

    #[test]
    fn the_relay_serves_the_loopback_at_its_port_only() {
        for address in ["localhost:5001", "127.0.0.1:5001", "[::1]:5001"] {
            assert!(serves(address, Some(5001)), "{address}");
        }
        for address in ["localhost:5000", "10.0.0.1:5001", "registry.local:5001", "localhost"] {
            assert!(!serves(address, Some(5001)), "{address}");
        }
        assert!(!serves("localhost:5001", None));
    }

    #[test]
    fn a_tenants_annotations_choose_no_relay_and_no_port() {
        // The Service's author names the loopback port in every field she may write: no relay comes of it.
        let asking = clusterip()
            .annotation(crate::keys::service::HOST, "localhost:6000")
            .annotation(crate::keys::service::HOST_FROM_CONTAINER_RUNTIME, "127.0.0.1:6000");
        let published = published_with(asking.clone(), &Settings::default());
        assert_eq!(crate::node::plan(Some(&published), None, &[]).0.relays, []);
        // Relayed by the admin, she can move what is published but not the port relayed.
        let published = published_with(asking, &relaying(5001));
        let plan = crate::node::plan(Some(&published), None, &[]).0;
        assert_eq!(plan.relays.iter().map(|r| r.port).collect::<Vec<_>>(), [5001]);
    }

    #[test]
    fn a_relayed_registry_without_a_cluster_ip_is_told() {
        let external = service("registry", "registry").external_name("registry.example").port(None, 5000, None);
        let published = published_with(external, &relaying(5001));
        assert_eq!(published.ports.relay, None);
        let problem = problem(&published, &relaying(5001).relays).expect("told");
        assert!(problem.to_string().contains("registry/registry"), "{problem}");
        assert!(problem.to_string().contains("port 5001"), "{problem}");
        assert_eq!(super::problem(&published, &[]), None, "a registry the admin does not relay needs no relay");
        let beside = RelayRule { namespace: "registry".into(), name: "other".into(), port: 5001 };
        assert_eq!(super::problem(&published, &[beside]), None, "a rule for another registry of its namespace");
        let relayed = published_with(clusterip(), &relaying(5001));
        assert_eq!(super::problem(&relayed, &relaying(5001).relays), None);
    }
}
