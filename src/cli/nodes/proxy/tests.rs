use k8s_openapi::api::core::v1::{Container, Node, Pod, PodSpec};

use super::*;

fn node(name: &str, annotations: &[(&str, &str)]) -> Node {
    let mut node = Node::default();
    node.metadata.name = Some(name.into());
    let annotations = annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    node.metadata.annotations = Some(annotations);
    node
}

fn pod(name: &str, on: &str, command: &[&str], args: &[&str]) -> Pod {
    let mut pod = Pod::default();
    pod.metadata.name = Some(name.into());
    let strings = |s: &[&str]| Some(s.iter().map(ToString::to_string).collect());
    let container = Container { command: strings(command), args: strings(args), ..Container::default() };
    pod.spec = Some(PodSpec { node_name: Some(on.into()), containers: vec![container], ..PodSpec::default() });
    pod
}

fn sources(pods: Vec<Pod>, config: Option<&str>) -> Sources {
    let config = config.map(|text| (text.to_string(), crate::kube_proxy::ConfigTarget::kubeadm()));
    Sources { nodes: Ok(Vec::new()), pods, config }
}

fn found(name: &str, source: String) -> Mode {
    Mode::new(name, source).expect("a mode word")
}

fn mode_name(mode: Option<Mode>) -> Option<String> {
    mode.map(|m| m.name)
}

#[test]
fn the_mode_is_the_nodes_pod_flag_else_its_k3s_arguments_else_the_kubeadm_configuration() {
    let kubeadm = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\n";
    let flagged = pod("kube-proxy-a", "a", &["/usr/local/bin/kube-proxy"], &["--proxy-mode=ipvs"]);
    let spaced = pod("kube-proxy-b", "b", &["/bin/sh", "-c", "kube-proxy --proxy-mode iptables --v=2"], &[]);
    let read = sources(vec![flagged, spaced], Some(kubeadm));
    let a = on(&node("a", &[]), &read).expect("a mode");
    assert_eq!(
        (a.name.as_str(), a.source.as_str()),
        ("ipvs", "the --proxy-mode flag of kube-proxy pod kube-system/kube-proxy-a")
    );
    assert_eq!(mode_name(on(&node("b", &[]), &read)), Some("iptables".into()), "a flag inside a shell command");
    // No pod of its own: the shared configuration.
    let c = on(&node("c", &[]), &read).expect("a mode");
    assert_eq!((c.name.as_str(), c.source.as_str()), ("nftables", "ConfigMap kube-system/kube-proxy (config.conf)"));
    // k3s records kube-proxy's arguments on the node, in either spelling, before the shared configuration.
    for args in [
        r#"["server","--kube-proxy-arg","proxy-mode=nftables"]"#,
        r#"["agent","--kube-proxy-arg=proxy-mode=nftables"]"#,
    ] {
        let k3s = on(&node("k", &[("k3s.io/node-args", args)]), &sources(Vec::new(), Some("mode: iptables\n")));
        assert_eq!(
            k3s.map(|m| (m.name, m.source)),
            Some(("nftables".into(), "node annotation k3s.io/node-args".into()))
        );
    }
    let rke2 = node("r", &[("rke2.io/node-args", r#"["server","--kube-proxy-arg","proxy-mode=ipvs"]"#)]);
    assert_eq!(mode_name(on(&rke2, &sources(Vec::new(), None))), Some("ipvs".into()));
    // Arguments without a mode fall through to the configuration; nothing anywhere: not known.
    let unflagged = node("u", &[("k3s.io/node-args", r#"["server"]"#)]);
    assert_eq!(mode_name(on(&unflagged, &sources(Vec::new(), Some("mode: nftables\n")))), Some("nftables".into()));
    assert_eq!(on(&node("n", &[]), &sources(Vec::new(), None)), None);
}

#[test]
fn an_empty_mode_is_kube_proxys_default_and_the_iptables_loopback_switch_is_read() {
    for config in ["mode: \"\"\n", "kind: KubeProxyConfiguration\n", "mode:\n"] {
        let mode = on(&node("a", &[]), &sources(Vec::new(), Some(config))).expect("a mode");
        assert_eq!((mode.name.as_str(), mode.localhost_node_ports_off), ("iptables", false), "{config:?}");
        assert_eq!(mode.serves("localhost:30500"), Serves::Yes);
    }
    let off = "mode: iptables\niptables:\n  localhostNodePorts: false\n  masqueradeAll: true\n";
    let mode = on(&node("a", &[]), &sources(Vec::new(), Some(off))).expect("a mode");
    assert!(mode.localhost_node_ports_off);
    assert_eq!(mode.serves("127.0.0.1:30500"), Serves::No);
}

#[test]
fn what_is_not_a_mode_word_or_not_yaml_is_not_taken_as_a_mode() {
    for hostile in ["nf\u{1b}[2Jtables", "NFTABLES", "averyveryverylongmode"] {
        let flagged = pod("kube-proxy-a", "a", &[], &[&format!("--proxy-mode={hostile}")]);
        assert_eq!(on(&node("a", &[]), &sources(vec![flagged], None)), None, "{hostile:?}");
    }
    assert_eq!(on(&node("a", &[]), &sources(Vec::new(), Some("mode: [nftables\n"))), None);
    let broken = node("k", &[("k3s.io/node-args", "not json")]);
    assert_eq!(on(&broken, &sources(Vec::new(), None)), None);
    // A flag with no value after it names nothing.
    let bare = pod("kube-proxy-a", "a", &[], &["--proxy-mode"]);
    assert_eq!(on(&node("a", &[]), &sources(vec![bare], None)), None);
}

#[test]
fn a_mode_that_serves_no_loopback_node_port_fails_a_node_only_without_the_agents_file() {
    let nftables = found("nftables", "ConfigMap kube-system/kube-proxy (config.conf)".into());
    let (said, fails) = judge(Some(&nftables), "localhost:30500", false);
    assert!(fails, "{said}");
    assert!(
        said.starts_with("kube-proxy runs in nftables mode (ConfigMap kube-system/kube-proxy (config.conf))"),
        "{said}"
    );
    assert!(said.contains("cannot pull it") && said.contains("nodeAgent.enabled=true"), "{said}");
    assert!(said.contains("KubeProxyNFTablesLocalhostNodePorts") && said.contains("--nodeport-addresses"), "{said}");
    let (said, fails) = judge(Some(&nftables), "localhost:30500", true);
    assert!(!fails && said.contains("pulled through the agent's file"), "{said}");
    let iptables = found("iptables", "x".into());
    let (said, fails) = judge(Some(&iptables), "localhost:30500", false);
    assert!(!fails && said.contains("which serves localhost:30500 on the node's loopback"), "{said}");
    let (said, fails) = judge(Some(&iptables), "[::1]:30500", false);
    assert!(fails, "{said}");
    let (said, fails) = judge(Some(&found("ipvs", "x".into())), "localhost:30500", false);
    assert!(!fails && said.contains("not measured"), "{said}");
    for configured in [false, true] {
        let (said, fails) = judge(None, "localhost:30500", configured);
        assert!(!fails && said.starts_with("kube-proxy's mode is not shown"), "{said}");
    }
}

#[test]
fn the_pull_address_is_the_runtimes_else_host_and_only_on_loopback_at_the_node_port() {
    use crate::registry::Cluster;
    use crate::registry::fixtures::{allowed_registries, service};
    use crate::settings::Settings;
    let published = |service: crate::registry::fixtures::ServiceBuilder| {
        let cluster = Cluster { labelled_services: vec![service.build()], ..Cluster::default() };
        let registries = allowed_registries(&cluster, &Settings::default());
        Published::of(&registries[0], registries[0].document.as_ref().expect("publishable"))
    };
    let nodeport =
        service("registry", "registry").type_("NodePort").cluster_ip("10.96.0.12").port(None, 5000, Some(30500));
    let mut at = published(nodeport);
    assert_eq!(loopback_pull_address(&at), Some("localhost:30500"));
    at.document.host_from_container_runtime = Some("127.0.0.1:30500".into());
    assert_eq!(loopback_pull_address(&at), Some("127.0.0.1:30500"));
    at.document.host_from_container_runtime = Some("10.0.0.10:30500".into());
    assert_eq!(loopback_pull_address(&at), None, "the node's own IP is served by every mode");
    let clusterip = service("registry", "registry").cluster_ip("10.96.0.12").port(None, 5000, None);
    assert_eq!(loopback_pull_address(&published(clusterip)), None);
}

#[test]
fn a_node_on_kube_proxys_default_mode_is_told_what_the_nftables_default_takes_and_its_gate_is_read_from_its_flags() {
    let default = on(&node("a", &[]), &sources(Vec::new(), Some("kind: KubeProxyConfiguration\n"))).expect("a mode");
    let (said, fails) = judge(Some(&default), "localhost:30500", false);
    assert!(!fails, "served today: {said}");
    assert!(said.contains("1.40") && said.contains("nodeAgent.relay") && said.contains("mode: iptables"), "{said}");
    let (said, _) = judge(Some(&default), "localhost:30500", true);
    assert!(!said.contains("1.40"), "the agent's file stands in: {said}");
    let explicit = on(&node("a", &[]), &sources(Vec::new(), Some("mode: iptables\n"))).expect("a mode");
    assert!(!judge(Some(&explicit), "localhost:30500", false).0.contains("1.40"));
    // The KEP-6032 gate given as kube-proxy's flags (a pod's, or k3s's node arguments) serves nftables' loopback.
    let gated = pod(
        "kube-proxy-g",
        "g",
        &["kube-proxy"],
        &[
            "--proxy-mode=nftables",
            "--feature-gates=KubeProxyNFTablesLocalhostNodePorts=true",
            "--nodeport-addresses=localhost",
        ],
    );
    let mode = on(&node("g", &[]), &sources(vec![gated], None)).expect("a mode");
    assert_eq!(mode.serves("[::1]:30500"), Serves::Yes);
    let k3s = r#"["server","--kube-proxy-arg","proxy-mode=nftables","--kube-proxy-arg=feature-gates=KubeProxyNFTablesLocalhostNodePorts=true","--kube-proxy-arg","nodeport-addresses=localhost"]"#;
    let mode = on(&node("k", &[("k3s.io/node-args", k3s)]), &sources(Vec::new(), None)).expect("a mode");
    assert_eq!(mode.serves("localhost:30500"), Serves::Yes, "{mode:?}");
}

#[test]
fn on_crio_a_loopback_address_is_pulled_only_through_the_drop_in_and_an_ipv6_literal_not_at_all() {
    let (said, fails) = judge_crio("localhost:30500", true);
    assert!(!fails && said.contains("through the agent's drop-in"), "{said}");
    let (said, fails) = judge_crio("localhost:30500", false);
    assert!(fails && said.contains("which is not in place"), "{said}");
    for configured in [true, false] {
        let (said, fails) = judge_crio("[::1]:30500", configured);
        assert!(fails && said.contains("cannot pull [::1]:30500 at all"), "{said}");
    }
    let (said, fails) = judge_crio("127.0.0.1:30500", true);
    assert!(!fails && !said.contains("IPv6"), "{said}");
}
