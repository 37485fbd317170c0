use std::sync::Arc;

use super::*;
use crate::keys::service as annotations;
use crate::node::Notice;
use crate::node::fixtures::published;
use crate::registry::fixtures::{ServiceBuilder, service};
use crate::watching::WatchKey;

fn mode(name: &str) -> Mode {
    Mode::new(name, "ConfigMap kube-system/kube-proxy (config.conf)".into()).expect("a mode word")
}

fn target() -> ConfigTarget {
    ConfigTarget { namespace: "kube-system".into(), name: "kube-proxy".into() }
}

/// A NodePort registry at nodePort 30500 with a ClusterIP, published as `localhost:30500`.
fn node_port() -> ServiceBuilder {
    service("registry", "registry").type_("NodePort").cluster_ip("10.96.0.12").port(None, 5000, Some(30500))
}

fn said(unserved: &[Unserved]) -> Vec<(&'static str, &'static str, &str)> {
    unserved.iter().map(|u| (u.reader.as_str(), u.field.key(), u.address.as_str())).collect()
}

#[test]
fn only_iptables_serves_ipv4_loopback_node_ports_and_no_mode_serves_ipv6_loopback() {
    let mode = mode;
    assert_eq!(mode("iptables").serves("localhost:30500"), Serves::Yes);
    assert_eq!(mode("iptables").serves("127.0.0.1:30500"), Serves::Yes);
    assert_eq!(mode("iptables").serves("[::1]:30500"), Serves::No);
    assert_eq!(mode("nftables").serves("localhost:30500"), Serves::No);
    assert_eq!(mode("nftables").serves("[::1]:30500"), Serves::No);
    assert_eq!(mode("ipvs").serves("localhost:30500"), Serves::NotMeasured);
}

#[test]
fn the_configuration_sets_the_mode_an_empty_one_is_iptables_and_a_non_word_is_none() {
    let source = || "here".to_string();
    for text in ["mode: \"\"\n", "kind: KubeProxyConfiguration\n", "mode:\n"] {
        let read = Mode::from_configuration(text, source()).expect("a mode");
        assert_eq!((read.name.as_str(), read.localhost_node_ports_off), ("iptables", false), "{text:?}");
    }
    let off = Mode::from_configuration("iptables:\n  localhostNodePorts: false\n", source()).expect("a mode");
    assert_eq!(off.serves("localhost:30500"), Serves::No);
    assert!(off.unserved_words("localhost:30500").contains("localhostNodePorts is false"));
    assert_eq!(Mode::from_configuration("mode: nftables\n", source()).map(|m| m.name), Some("nftables".into()));
    for broken in ["mode: NFTABLES\n", "mode: \"nf\\e[2J\"\n", "mode: [nftables\n"] {
        assert_eq!(Mode::from_configuration(broken, source()), None, "{broken:?}");
    }
}

#[test]
fn kube_proxys_configuration_is_watched_only_while_a_loopback_node_port_is_published() {
    let key = WatchKey::in_namespace("kube-system").named("kube-proxy");
    assert_eq!(interest(Some(&published(node_port())), &target()).configs, [key].into());
    let cluster_ip = published(service("registry", "registry").cluster_ip("10.96.0.12").port(None, 5000, None));
    assert!(interest(Some(&cluster_ip), &target()).configs.is_empty());
    assert!(interest(None, &target()).configs.is_empty());
}

#[test]
fn the_mode_is_read_from_the_watched_configmap_and_a_refusal_is_kept_as_the_answer() {
    let observed = |found: Result<Vec<Option<&str>>, &str>| {
        let found = found.map(|all| all.into_iter().map(|c| Arc::new(ProxyConfig(c.map(String::from)))).collect());
        let mut observed = Observed::default();
        observed.configs.insert(target().key(), found.map_err(String::from));
        observed
    };
    let read = super::mode(&observed(Ok(vec![Some("mode: nftables\n")])), &target()).expect("read");
    assert_eq!(read.map(|m| (m.name, m.source)), Some(("nftables".into(), target().source())));
    assert_eq!(target().source(), "ConfigMap kube-system/kube-proxy (config.conf)");
    assert_eq!(super::mode(&observed(Ok(vec![])), &target()), Ok(None), "no such ConfigMap");
    assert_eq!(super::mode(&observed(Ok(vec![None])), &target()), Ok(None), "no config.conf in it");
    assert_eq!(super::mode(&Observed::default(), &target()), Ok(None), "not watched");
    assert_eq!(super::mode(&observed(Err("forbidden")), &target()), Err("forbidden".into()));
}

#[test]
fn nftables_leaves_tools_without_the_loopback_node_port_and_the_runtime_too_unless_the_agent_maps_it() {
    let registry = published(node_port());
    let nftables = mode("nftables");
    let both = [("tools", "host", "localhost:30500"), ("runtime", "host", "localhost:30500")];
    assert_eq!(said(&unserved(Some(&registry), Some(&nftables), false)), both);
    assert_eq!(said(&unserved(Some(&registry), Some(&nftables), true)), [both[0]]);
    for served in [mode("iptables"), mode("ipvs")] {
        assert_eq!(unserved(Some(&registry), Some(&served), false), [], "{}", served.name);
    }
    assert_eq!(unserved(Some(&registry), None, false), [], "mode not known");
    assert_eq!(unserved(None, Some(&nftables), false), []);
    // No mode serves [::1]; the runtime's own address is judged as such.
    let ipv6 = published(node_port().annotation(annotations::HOST, "[::1]:30500"));
    let tools = [("tools", "host", "[::1]:30500")];
    assert_eq!(said(&unserved(Some(&ipv6), Some(&mode("iptables")), true)), tools);
    let runtime = published(
        node_port()
            .annotation(annotations::HOST, "registry.example:5000")
            .annotation(annotations::HOST_FROM_CONTAINER_RUNTIME, "127.0.0.1:30500"),
    );
    let pulls = [("runtime", "hostFromContainerRuntime", "127.0.0.1:30500")];
    assert_eq!(said(&unserved(Some(&runtime), Some(&nftables), false)), pulls);
    // A registry reached at a hostPort is the CNI's to serve on loopback, in every mode.
    let mut host_port = published(node_port());
    host_port.ports.host_port = true;
    assert_eq!(unserved(Some(&host_port), Some(&nftables), false), []);
    assert!(interest(Some(&host_port), &target()).configs.is_empty());
    // A loopback address at another port than the nodePort is not kube-proxy's to serve (the runtime's, derived
    // when host is set, still is).
    let other = published(node_port().annotation(annotations::HOST, "localhost:5001"));
    assert_eq!(said(&unserved(Some(&other), Some(&nftables), false)), pulls);
}

#[test]
fn the_notice_names_each_address_its_reader_the_mode_where_it_was_read_and_the_fixes() {
    let registry = published(node_port());
    let nftables = mode("nftables");
    let told = |mode: &Mode, agent: bool| -> Vec<Notice> {
        let unserved = unserved(Some(&registry), Some(mode), agent);
        notices(Some(&registry), Some(mode), &unserved, &[])
    };
    let [notice] = told(&nftables, false).try_into().expect("one notice");
    assert_eq!(notice.regarding, registry.reference);
    assert_eq!(notice.reason.as_str(), "LoopbackNodePortUnserved");
    for part in [
        "kube-proxy runs in nftables mode (ConfigMap kube-system/kube-proxy (config.conf))",
        "tools on a node's machine reach host localhost:30500 only where",
        "kind's extraPortMappings",
        "no node's containerd can pull host localhost:30500",
        "nodeAgent.enabled=true",
        "a hostPort",
        "nodeAgent.relay",
        "KubeProxyNFTablesLocalhostNodePorts",
    ] {
        assert!(notice.message.contains(part), "{part:?} in {}", notice.message);
    }
    assert!(notice.message.len() < 1024, "the Events API's limit");
    let [with_agent] = told(&nftables, true).try_into().expect("one notice");
    assert!(!with_agent.message.contains("containerd"), "{}", with_agent.message);
    assert!(!with_agent.message.contains("nodeAgent.enabled"), "the agent is on: not a fix: {}", with_agent.message);
    assert_eq!(told(&mode("iptables"), false), []);
    // The gate is nftables' own.
    let ipv6 = published(node_port().annotation(annotations::HOST, "[::1]:30500"));
    let iptables = mode("iptables");
    let unserved_ipv6 = unserved(Some(&ipv6), Some(&iptables), true);
    let [notice] = notices(Some(&ipv6), Some(&iptables), &unserved_ipv6, &[]).try_into().expect("one notice");
    assert!(notice.message.contains("IPv6 loopback") && !notice.message.contains("KubeProxyNFTables"));
}

#[test]
fn kube_proxys_gate_and_node_port_addresses_decide_what_each_mode_serves() {
    let source = || "here".to_string();
    let config = |text: &str| Mode::from_configuration(text, source()).expect("a mode");
    let gated =
        "mode: nftables\nfeatureGates:\n  KubeProxyNFTablesLocalhostNodePorts: true\nnodePortAddresses: [localhost]\n";
    for address in ["localhost:30500", "127.0.0.1:30500", "[::1]:30500"] {
        assert_eq!(config(gated).serves(address), Serves::Yes, "KEP-6032 serves {address}");
    }
    let gate_alone = "mode: nftables\nfeatureGates:\n  KubeProxyNFTablesLocalhostNodePorts: true\n";
    assert_eq!(config(gate_alone).serves("localhost:30500"), Serves::No, "without localhost in nodePortAddresses");
    // iptables serves IPv4 loopback only where nodePortAddresses takes it in.
    assert_eq!(config("nodePortAddresses: [primary]\n").serves("localhost:30500"), Serves::No);
    assert_eq!(config("nodePortAddresses: [10.0.0.0/8]\n").serves("localhost:30500"), Serves::No);
    for taking_loopback in ["[127.0.0.0/8]", "[0.0.0.0/0]", "[10.0.0.0/8, 127.0.0.1/32]", "[]"] {
        let text = format!("nodePortAddresses: {taking_loopback}\n");
        assert_eq!(config(&text).serves("localhost:30500"), Serves::Yes, "{taking_loopback}");
    }
    // Flags win over the configuration.
    let flagged = config("mode: nftables\n").with_flags(
        ["--feature-gates=A=false,KubeProxyNFTablesLocalhostNodePorts=true", "--nodeport-addresses", "localhost"]
            .into_iter(),
    );
    assert!(flagged.localhost_gate && flagged.node_port_addresses == ["localhost"], "{flagged:?}");
    assert_eq!(flagged.serves("[::1]:30500"), Serves::Yes);
    // Only that gate turned on counts: off by name, or another gate on, is not it.
    let gated = config(gated);
    for gates in ["--feature-gates=KubeProxyNFTablesLocalhostNodePorts=false,Other=true", "--feature-gates=Other=true"]
    {
        let flagged = gated.clone().with_flags([gates].into_iter());
        assert!(!flagged.localhost_gate, "{gates}: {flagged:?}");
    }
}

#[test]
fn a_default_iptables_mode_is_told_ahead_of_nftables_becoming_the_default_and_an_explicit_one_is_not() {
    let registry = published(node_port());
    let default = Mode::from_configuration("kind: KubeProxyConfiguration\n", "here".into()).expect("a mode");
    assert!(!default.explicit);
    assert_eq!(unserved(Some(&registry), Some(&default), false), [], "served today");
    let risk = at_risk(Some(&registry), Some(&default), false);
    assert_eq!(said(&risk), [("tools", "host", "localhost:30500"), ("runtime", "host", "localhost:30500")]);
    assert_eq!(said(&at_risk(Some(&registry), Some(&default), true)), [("tools", "host", "localhost:30500")]);
    let [notice] = notices(Some(&registry), Some(&default), &[], &risk).try_into().expect("one notice");
    assert_eq!(notice.reason.as_str(), "LoopbackNodePortAtRisk");
    for part in [
        "1.40",
        "KEP-5343",
        "mode: iptables",
        "nodeAgent.relay",
        "hostPort",
        "tools on a node's machine lose host localhost:30500",
    ] {
        assert!(notice.message.contains(part), "{part:?} in {}", notice.message);
    }
    assert!(notice.message.len() < 1024, "the Events API's limit");
    // Set explicitly, or already nftables, or relayed: nothing to foresee.
    let explicit = Mode::from_configuration("mode: iptables\n", "here".into()).expect("a mode");
    assert_eq!(at_risk(Some(&registry), Some(&explicit), false), []);
    assert_eq!(at_risk(Some(&registry), Some(&mode("nftables")), false), []);
    let gated = Mode::from_configuration(
        "featureGates:\n  KubeProxyNFTablesLocalhostNodePorts: true\nnodePortAddresses: [localhost]\n",
        "here".into(),
    )
    .expect("a mode");
    assert_eq!(at_risk(Some(&registry), Some(&gated), false), [], "the gate serves it after the flip too");
    let relay = crate::settings::RelayRule { namespace: "registry".into(), name: "registry".into(), port: 5001 };
    let settings = crate::settings::Settings { relays: vec![relay], ..crate::settings::Settings::default() };
    let relayed = crate::node::fixtures::published_with(node_port(), &settings);
    assert_eq!(at_risk(Some(&relayed), Some(&default), false), [], "the relay's address is served in every mode");
}

#[test]
fn the_node_agent_stands_in_only_for_an_address_its_plan_maps() {
    let registry = published(node_port());
    assert!(crate::node::redirects(&registry, "localhost:30500"), "the loopback nodePort is mapped to the ClusterIP");
    assert!(!crate::node::redirects(&registry, "elsewhere.example:5000"), "an address the plan does not name");
}
