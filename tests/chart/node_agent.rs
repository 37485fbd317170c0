//! The node agent's admin values: allowed addresses, mirrors, the relay.

use super::*;

/// Node files are written for the registries' own addresses and those the admin lists; kind and k3d list their
/// registry container's, which the chart itself describes.
#[test]
fn the_node_agents_allowed_addresses_are_the_admins_and_the_distributions_container() {
    let render = |values: &str| ok(tool("helm", &["template", "lrp", &chart(), "-n", "tools", "--set", values]));
    let allowed =
        |rendered: &str| controller_args(rendered).into_iter().find(|a| a.starts_with("--node-allowed-addresses="));
    assert_eq!(allowed(&render("nodeAgent.enabled=true")), None, "nothing besides each registry's own by default");
    assert_eq!(
        allowed(&render("nodeAgent.enabled=true,nodeAgent.allowedAddresses={registry.example:5000,*.corp.example}")),
        Some("--node-allowed-addresses=registry.example:5000,*.corp.example".into())
    );
    assert_eq!(
        allowed(&render("distribution=kind,nodeAgent.enabled=true")),
        Some("--node-allowed-addresses=kind-registry:5000,localhost:5001".into())
    );
    assert_eq!(
        allowed(&render("distribution=k3d,nodeAgent.enabled=true,nodeAgent.allowedAddresses={docker.io}")),
        Some("--node-allowed-addresses=docker.io,k3d-registry:5000,k3d-registry.localhost:5111".into())
    );
    let output = tool(
        "helm",
        &["template", "lrp", &chart(), "--set", "nodeAgent.enabled=true,nodeAgent.allowedAddresses={Docker.IO/x}"],
    );
    assert!(!output.status.success(), "an address with upper case and a path is refused");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("nodeAgent.allowedAddresses: \"Docker.IO/x\" is not host[:port]"), "{stderr}");
    // The agents run on Linux nodes only, whatever else the admin selects.
    let rendered = render("nodeAgent.enabled=true,nodeAgent.nodeSelector.pool=build");
    let daemonset = &rendered_objects(&rendered, "DaemonSet")[0];
    let selector = &daemonset["spec"]["template"]["spec"]["nodeSelector"];
    assert_eq!((selector["kubernetes.io/os"].as_str(), selector["pool"].as_str()), (Some("linux"), Some("build")));
    // Its state's type comes with the chart (crds/), not with a release: several releases share it.
    let crds = ok(tool("helm", &["template", "lrp", &chart(), "--include-crds", "--set", "nodeAgent.enabled=true"]));
    let crd = rendered_objects(&crds, "CustomResourceDefinition");
    assert_eq!(crd.len(), 1);
    assert_eq!(crd[0]["metadata"]["name"], "nodepullstates.local-registry-publisher.io");
    assert!(rendered_objects(&render("nodeAgent.enabled=true"), "CustomResourceDefinition").is_empty());
}

/// On CRI-O the agents write into the nodes' /etc/containers and read /etc/crio/crio.conf by default, as every
/// distribution shipping CRI-O keeps them; both stay the admin's to move.
#[test]
fn the_node_agents_on_crio_write_into_etc_containers_and_read_crios_config() {
    let agent = |values: &str| {
        let values = format!("nodeAgent.enabled=true,nodeAgent.runtime=crio{values}");
        let rendered = ok(tool("helm", &["template", "lrp", &chart(), "--set", &values]));
        let daemonset = rendered_objects(&rendered, "DaemonSet").remove(0);
        let spec = &daemonset["spec"]["template"]["spec"];
        let args: Vec<String> = spec["containers"][0]["args"]
            .as_array()
            .expect("args")
            .iter()
            .map(|a| a.as_str().expect("an arg").to_string())
            .collect();
        let paths: Vec<String> =
            spec["volumes"].as_array().expect("volumes").iter().map(|v| v["hostPath"]["path"].to_string()).collect();
        (args, paths)
    };
    let (args, paths) = agent("");
    for wanted in ["--runtime=crio", "--config-path=/etc/containers", "--runtime-config=/etc/crio/crio.conf"] {
        assert!(args.iter().any(|a| a == wanted), "{wanted} in {args:?}");
    }
    assert_eq!(paths, ["\"/etc/containers\"", "\"/etc/crio\""]);
    let (args, _) = agent(",nodeAgent.configPath=/etc/alt/containers,nodeAgent.runtimeConfig=/etc/alt/crio.conf");
    assert!(args.iter().any(|a| a == "--config-path=/etc/alt/containers"), "{args:?}");
    assert!(args.iter().any(|a| a == "--runtime-config=/etc/alt/crio.conf"), "{args:?}");
}

/// Mirrors are the admin's chart value: rendered as the controller's flag, with read access to each mirror's Service
/// by name in its namespace and nothing more; a mirror with neither or both of a Service and an endpoint, or a
/// second one for an upstream, is refused before anything is installed.
#[test]
fn the_node_agents_mirrors_render_as_one_flag_with_read_access_to_each_mirror_service_only() {
    let mirrors = "nodeAgent.enabled=true,nodeAgent.mirrors[0].upstream=docker.io,\
        nodeAgent.mirrors[0].service.namespace=registry-cache,nodeAgent.mirrors[0].service.name=docker-hub,\
        nodeAgent.mirrors[0].service.port=5000,nodeAgent.mirrors[1].upstream=ghcr.io,\
        nodeAgent.mirrors[1].endpoint=http://kind-registry-cache:5000";
    let rendered = ok(tool("helm", &["template", "lrp", &chart(), "-n", "tools", "--set", mirrors]));
    let flag = controller_args(&rendered).into_iter().find(|a| a.starts_with("--node-mirrors="));
    let wanted =
        "--node-mirrors=docker.io=service:registry-cache/docker-hub:5000,ghcr.io=http://kind-registry-cache:5000";
    assert_eq!(flag.as_deref(), Some(wanted));
    let roles: Vec<serde_json::Value> = rendered_objects(&rendered, "Role")
        .into_iter()
        .filter(|r| r["metadata"]["namespace"] == "registry-cache")
        .collect();
    assert_eq!(roles.len(), 1, "one Role, for the Service mirror only");
    assert_eq!(
        roles[0]["rules"],
        json!([{"apiGroups": [""], "resources": ["services"], "resourceNames": ["docker-hub"],
            "verbs": ["get", "list", "watch"]}])
    );
    let bindings = rendered_objects(&rendered, "RoleBinding");
    let binding = bindings.iter().find(|b| b["metadata"]["namespace"] == "registry-cache").expect("bound");
    assert_eq!(binding["subjects"][0]["namespace"], "tools");
    let off = ok(tool("helm", &["template", "lrp", &chart(), "--set", "nodeAgent.enabled=true"]));
    assert!(!controller_args(&off).iter().any(|a| a.starts_with("--node-mirrors")), "none by default");

    for (values, needle) in [
        ("nodeAgent.mirrors[0].upstream=docker.io", "needs a service ({namespace, name, port}) or an endpoint"),
        (
            "nodeAgent.mirrors[0].upstream=docker.io,nodeAgent.mirrors[0].endpoint=http://a:5000,\
             nodeAgent.mirrors[0].service.namespace=c,nodeAgent.mirrors[0].service.name=d,\
             nodeAgent.mirrors[0].service.port=5000",
            "has both a service and an endpoint",
        ),
        (
            "nodeAgent.mirrors[0].upstream=docker.io,nodeAgent.mirrors[0].endpoint=http://a:5000,\
             nodeAgent.mirrors[1].upstream=docker.io,nodeAgent.mirrors[1].endpoint=http://b:5000",
            "\"docker.io\" has two mirrors",
        ),
        (
            "nodeAgent.mirrors[0].upstream=docker.io,nodeAgent.mirrors[0].endpoint=a:5000",
            "/nodeAgent/mirrors/0/endpoint",
        ),
    ] {
        refused_with_the_agent(values, needle);
    }
}

#[test]
fn the_relay_renders_the_admins_registries_as_one_flag_and_puts_the_agents_on_the_nodes_network() {
    let relay = "nodeAgent.enabled=true,nodeAgent.relay.enabled=true,nodeAgent.httpPort=9808,\
        nodeAgent.relay.registries[0].service.namespace=registry,nodeAgent.relay.registries[0].service.name=registry,\
        nodeAgent.relay.registries[0].port=5000,nodeAgent.relay.registries[1].service.namespace=team,\
        nodeAgent.relay.registries[1].service.name=zot,nodeAgent.relay.registries[1].port=5001";
    let agent_of = |rendered: &str| {
        let daemonsets = rendered_objects(rendered, "DaemonSet");
        assert_eq!(daemonsets.len(), 1, "{rendered}");
        daemonsets[0]["spec"]["template"]["spec"].clone()
    };
    let rendered = ok(tool("helm", &["template", "lrp", &chart(), "-n", "tools", "--set", relay]));
    let flag = controller_args(&rendered).into_iter().find(|a| a.starts_with("--node-relays="));
    assert_eq!(flag.as_deref(), Some("--node-relays=registry/registry=5000,team/zot=5001"));
    let agent = agent_of(&rendered);
    assert_eq!(agent["hostNetwork"], true, "the relay listens on the node's own loopback");
    let args: Vec<&str> =
        agent["containers"][0]["args"].as_array().unwrap().iter().filter_map(|a| a.as_str()).collect();
    for arg in [
        "--relay",
        "--relay-max-connections=128",
        "--relay-idle-timeout=2m",
        "--http-address=0.0.0.0:9808",
        "--runtime=containerd",
    ] {
        assert!(args.contains(&arg), "{arg} in {args:?}");
    }
    assert_eq!(agent["containers"][0]["ports"][0]["containerPort"], 9808);
    assert_eq!(agent["securityContext"]["runAsUser"], 0, "it writes containerd's root-owned directory");
    // Writing nothing on the nodes, the agents mount nothing of them and run unprivileged.
    let none = ok(tool("helm", &["template", "lrp", &chart(), "--set", &format!("{relay},nodeAgent.runtime=none")]));
    let agent = agent_of(&none);
    assert_eq!(
        (agent["securityContext"]["runAsNonRoot"].clone(), agent["securityContext"]["runAsUser"].clone()),
        (json!(true), json!(65532))
    );
    assert!(agent["volumes"].is_null() && agent["containers"][0]["volumeMounts"].is_null(), "{agent}");
    let args = agent["containers"][0]["args"].to_string();
    assert!(args.contains("--runtime=none") && !args.contains("--config-path"), "{args}");
    // Off: no flag, the pod's own network.
    let off = ok(tool("helm", &["template", "lrp", &chart(), "--set", "nodeAgent.enabled=true"]));
    assert!(!controller_args(&off).iter().any(|a| a.starts_with("--node-relays")), "none by default");
    assert!(agent_of(&off)["hostNetwork"].is_null());

    for (values, needle) in [
        ("nodeAgent.relay.enabled=true", "names no registry to relay"),
        ("nodeAgent.runtime=none", "needs nodeAgent.relay.enabled=true"),
        ("nodeAgent.runtime=docker", "/nodeAgent/runtime"),
        ("nodeAgent.relay.registries[0].port=5000", "/nodeAgent/relay/registries/0"),
        (
            "nodeAgent.relay.enabled=true,nodeAgent.relay.registries[0].service.namespace=a,\
             nodeAgent.relay.registries[0].service.name=b,nodeAgent.relay.registries[0].port=70000",
            "/nodeAgent/relay/registries/0/port",
        ),
        (
            "nodeAgent.relay.enabled=true,nodeAgent.relay.registries[0].service.namespace=a,\
             nodeAgent.relay.registries[0].service.name=b,nodeAgent.relay.registries[0].port=5000,\
             nodeAgent.relay.registries[1].service.namespace=c,nodeAgent.relay.registries[1].service.name=d,\
             nodeAgent.relay.registries[1].port=5000",
            "port 5000 is given to two registries",
        ),
        (
            "nodeAgent.relay.enabled=true,nodeAgent.relay.registries[0].service.namespace=a,\
             nodeAgent.relay.registries[0].service.name=b,nodeAgent.relay.registries[0].port=8080",
            "port 8080 of a/b is nodeAgent.httpPort",
        ),
        ("nodeAgent.relay.idleTimeout=soon", "/nodeAgent/relay/idleTimeout"),
    ] {
        refused_with_the_agent(values, needle);
    }
}

/// `helm template` with the node agent on and `values` fails, saying `needle`.
fn refused_with_the_agent(values: &str, needle: &str) {
    let values = format!("nodeAgent.enabled=true,{values}");
    let output = tool("helm", &["template", "lrp", &chart(), "--set", &values]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{values} was accepted");
    assert!(stderr.contains(needle), "{values}: {stderr}");
}
