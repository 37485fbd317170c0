//! Rendering: lint, the values' reach into their objects, conventions, each distribution's defaults, refusals.

use super::*;

#[test]
fn the_chart_lints_strictly_and_renders_with_default_and_custom_values() {
    ok(tool("helm", &["lint", "--strict", &chart()]));
    let custom = root().join("charts/local-registry-publisher/ci/ha-values.yaml").display().to_string();
    ok(tool("helm", &["lint", "--strict", &chart(), "-f", &custom]));
    let rendered = ok(tool("helm", &["template", "lrp", &chart(), "-n", "tools", "-f", &custom]));
    for expected in [
        "replicas: 2",
        "kind: PodDisruptionBudget",
        "kind: ServiceMonitor",
        "name: lrp-local-registry-publisher-leader",
        "unhealthyPodEvictionPolicy: AlwaysAllow",
        "podAntiAffinity:",
    ] {
        assert!(rendered.contains(expected), "custom values render {expected:?}:\n{rendered}");
    }
    let floor = ok(tool("helm", &["template", "lrp", &chart(), "-f", &custom, "--kube-version", "1.26.0"]));
    assert!(!floor.contains("unhealthyPodEvictionPolicy"), "a 1.26 API server does not serve the field:\n{floor}");
    let single = ok(tool("helm", &["template", "lrp", &chart()]));
    assert!(!single.contains("podAntiAffinity"), "one replica needs no anti-affinity:\n{single}");
    let args = controller_args(&rendered);
    for expected in [
        "--leader-elect",
        "--leader-elect-resource-name=lrp-local-registry-publisher",
        "--node-address=internal-ip",
        "--help-url=https://minikube.sigs.k8s.io/docs/handbook/registry/",
        "--log-format=json",
        "--watch-namespaces=kube-system,registry",
    ] {
        assert!(args.iter().any(|a| a == expected), "custom values render {expected:?}: {args:?}");
    }
    for address in ["fd00::1", "[fd00::1]", "192.168.49.2", "minikube.example"] {
        let set = format!("registry.nodeAddress={address}");
        let rendered = ok(tool("helm", &["template", "lrp", &chart(), "--set", &set]));
        assert!(controller_args(&rendered).contains(&format!("--node-address={address}")), "{address}");
    }
    // Values reach the command line as exactly one argument each, whatever YAML they hold.
    let hostile = ["--help-url=https://x.dev/a: b", "--x=\"y\" # z", "- not: [a, list]"];
    let mut template = vec!["template".to_string(), "lrp".into(), chart()];
    for (i, arg) in hostile.iter().enumerate() {
        template.extend(["--set-string".into(), format!("extraArgs[{i}]={}", arg.replace(',', "\\,"))]);
    }
    let rendered = ok(tool("helm", &template.iter().map(String::as_str).collect::<Vec<_>>()));
    assert!(controller_args(&rendered).ends_with(&hostile.map(String::from)), "{:?}", controller_args(&rendered));
    let defaults = ok(tool("helm", &["template", "lrp", &chart(), "-n", "tools"]));
    assert!(!defaults.contains("--leader-elect") && !defaults.contains("ServiceMonitor"), "off by default");
    for hardening in [
        "runAsNonRoot: true",
        "readOnlyRootFilesystem: true",
        "allowPrivilegeEscalation: false",
        "- ALL",
        "type: RuntimeDefault",
        "path: /healthz",
        "path: /readyz",
    ] {
        assert!(defaults.contains(hardening), "the pod is hardened: {hardening}");
    }
}

/// doctor finds the agents' DaemonSet by the node plan flag its pods pass, and an agent reads where its DaemonSet's
/// next pods write from the hosts volume: the names the code uses (`keys::chart`) are the chart's, and the controller
/// and the agents name the same plan.
#[test]
fn the_names_doctor_and_the_agent_read_the_node_agents_daemonset_by_are_the_charts() {
    use local_registry_publisher::keys::chart::{HOSTS_VOLUME, NODE_PLAN_FLAG};
    let rendered = ok(tool("helm", &["template", "lrp", &chart(), "--set", "nodeAgent.enabled=true"]));
    let flag = format!("--{NODE_PLAN_FLAG}=");
    let plan_of = |args: Vec<String>| args.iter().find_map(|arg| arg.strip_prefix(&flag).map(str::to_string));
    let controller_plan = plan_of(controller_args(&rendered)).expect("the controller keeps a node plan");
    let daemonset = &rendered_objects(&rendered, "DaemonSet")[0];
    let pod = &daemonset["spec"]["template"]["spec"];
    let args: Vec<String> = serde_json::from_value(pod["containers"][0]["args"].clone()).expect("the agent's args");
    assert_eq!(plan_of(args), Some(controller_plan), "the agents follow the controller's plan");
    let volume = pod["volumes"].as_array().into_iter().flatten().find(|v| v["name"] == HOSTS_VOLUME);
    assert!(volume.is_some_and(|v| v["hostPath"]["path"].is_string()), "a hostPath volume {HOSTS_VOLUME}: {pod}");
    let mounts = pod["containers"][0]["volumeMounts"].as_array().into_iter().flatten();
    assert!(mounts.clone().any(|m| m["name"] == HOSTS_VOLUME), "the agent mounts {HOSTS_VOLUME}: {pod}");
}

#[test]
fn the_uninstall_hook_stops_the_controller_first_and_is_scheduled_like_it() {
    let scheduling = [
        "nodeSelector.pool=tools",
        "tolerations[0].key=dedicated,tolerations[0].operator=Exists,tolerations[0].effect=NoSchedule",
        "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=pool",
        "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
    ];
    let chart = chart();
    let mut template = vec!["template", "lrp", chart.as_str(), "-n", "tools"];
    template.extend(scheduling.iter().flat_map(|value| ["--set", *value]));
    let rendered = ok(tool("helm", &template));
    let deployment = &rendered_objects(&rendered, "Deployment")[0];
    let job = &rendered_objects(&rendered, "Job")[0];
    let (pod, hook_pod) = (&deployment["spec"]["template"], &job["spec"]["template"]);
    for field in ["nodeSelector", "tolerations", "affinity"] {
        assert!(!pod["spec"][field].is_null(), "{field} is rendered");
        assert_eq!(hook_pod["spec"][field], pod["spec"][field], "the hook's {field}");
    }
    let selector = deployment["spec"]["selector"]["matchLabels"].as_object().expect("matchLabels");
    let hook_labels = hook_pod["metadata"]["labels"].as_object().expect("hook pod labels");
    assert!(
        selector.iter().any(|(key, value)| hook_labels.get(key) != Some(value)),
        "the Deployment's selector {selector:?} must not select the hook's pod {hook_labels:?}"
    );
    let args = hook_pod["spec"]["containers"][0]["args"].as_array().expect("args");
    assert_eq!(args[..2], [json!("withdraw"), json!("--stop-deployment=lrp-local-registry-publisher")]);
    assert_eq!(deployment["spec"]["strategy"]["type"], "Recreate", "one replica without election: no overlap");
    let elected = ok(tool("helm", &["template", "lrp", &chart, "--set", "leaderElection.enabled=true"]));
    assert_eq!(rendered_objects(&elected, "Deployment")[0]["spec"]["strategy"]["type"], "RollingUpdate");
}

#[test]
fn the_chart_follows_helm_conventions_names_labels_digest_and_tunable_pod_settings() {
    let chart = chart();
    let render = |sets: &[&str]| {
        let mut args = vec!["template", "lrp", chart.as_str(), "-n", "tools"];
        args.extend(sets.iter().flat_map(|set| ["--set", *set]));
        ok(tool("helm", &args))
    };
    let defaults = render(&[]);
    let deployment = &rendered_objects(&defaults, "Deployment")[0];
    let pod = &deployment["spec"]["template"];
    assert_eq!(deployment["metadata"]["labels"]["app.kubernetes.io/component"], "controller");
    assert_eq!(pod["metadata"]["labels"]["app.kubernetes.io/component"], "controller");
    assert!(deployment["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"].is_null(), "immutable");
    let job = &rendered_objects(&defaults, "Job")[0];
    assert_eq!(job["metadata"]["labels"]["app.kubernetes.io/component"], "uninstall-hook");
    assert_eq!(
        pod["spec"]["containers"][0]["image"],
        format!("local-registry-publisher:{}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(pod["spec"]["securityContext"]["runAsUser"], 65532, "defaults unchanged");
    assert_eq!(pod["spec"]["containers"][0]["livenessProbe"]["httpGet"]["path"], "/healthz");

    let digest = format!("image.digest=sha256:{}", "a".repeat(64));
    let custom = render(&[
        "fullnameOverride=registry-hosting",
        &digest,
        "podSecurityContext.runAsUser=null",
        "podSecurityContext.runAsGroup=null",
        "securityContext.readOnlyRootFilesystem=true",
        "livenessProbe.periodSeconds=30",
        "readinessProbe.failureThreshold=2",
    ]);
    let deployment = &rendered_objects(&custom, "Deployment")[0];
    let spec = &deployment["spec"]["template"]["spec"];
    assert_eq!(deployment["metadata"]["name"], "registry-hosting");
    assert_eq!(spec["containers"][0]["image"], format!("local-registry-publisher@sha256:{}", "a".repeat(64)));
    assert!(spec["securityContext"]["runAsUser"].is_null(), "OpenShift's SCC assigns the UID: {spec}");
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    assert_eq!(spec["containers"][0]["livenessProbe"]["periodSeconds"], 30);
    assert_eq!(spec["containers"][0]["livenessProbe"]["httpGet"]["path"], "/healthz", "the path stays ours");
    assert_eq!(spec["containers"][0]["readinessProbe"]["failureThreshold"], 2);
    let hook = &rendered_objects(&custom, "Job")[0]["spec"]["template"]["spec"];
    assert_eq!(hook["containers"][0]["image"], spec["containers"][0]["image"]);
    assert!(hook["containers"][0]["args"].as_array().unwrap().contains(&json!("--stop-deployment=registry-hosting")));

    let renamed = render(&["nameOverride=hosting"]);
    let deployment = &rendered_objects(&renamed, "Deployment")[0];
    assert_eq!(deployment["metadata"]["name"], "lrp-hosting");
    assert_eq!(deployment["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"], "hosting");

    for (value, needle) in [("image.digest=latest", "/image/digest"), ("livenessProbe.periodSecond=1", "periodSecond")]
    {
        let output = tool("helm", &["template", "lrp", &chart, "--set", value]);
        assert!(!output.status.success(), "{value} was accepted");
        assert!(String::from_utf8_lossy(&output.stderr).contains(needle), "{value}");
    }
}

/// What an operator wires next (the values cert-manager, metallb and spegel have): each reaches its object, and an
/// object of every kind the chart renders carries the common labels.
#[test]
fn the_operational_values_reach_their_objects_and_lint_with_every_opt_in_for_every_distribution() {
    let all_on = root().join("charts/local-registry-publisher/ci/all-on-values.yaml").display().to_string();
    for distribution in ["plain", "kind", "k3d", "minikube", "microk8s"] {
        let set = format!("distribution={distribution}");
        ok(tool("helm", &["lint", "--strict", &chart(), "-f", &all_on, "--set", &set]));
    }
    let rendered = ok(tool("helm", &["template", "lrp", &chart(), "-n", "tools", "-f", &all_on]));
    let daemonset = &rendered_objects(&rendered, "DaemonSet")[0];
    assert_eq!(daemonset["spec"]["template"]["spec"]["priorityClassName"], "system-node-critical");
    assert_eq!(daemonset["spec"]["updateStrategy"]["rollingUpdate"], json!({"maxUnavailable": "10%", "maxSurge": 0}));
    assert_eq!(daemonset["spec"]["revisionHistoryLimit"], 3);
    let deployment = &rendered_objects(&rendered, "Deployment")[0];
    assert_eq!(deployment["spec"]["revisionHistoryLimit"], 3);
    let spread = &deployment["spec"]["template"]["spec"]["topologySpreadConstraints"][0];
    assert_eq!(spread["topologyKey"], "topology.kubernetes.io/zone");
    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    for (key, value) in spread["labelSelector"]["matchLabels"].as_object().expect("the controller's pod labels") {
        assert_eq!(&pod_labels[key], value, "the spread counts the controller's pods: {spread}");
    }
    for kind in ["ServiceMonitor", "PodMonitor"] {
        let monitor = &rendered_objects(&rendered, kind)[0];
        let endpoint = monitor["spec"]["endpoints"].get(0).unwrap_or(&monitor["spec"]["podMetricsEndpoints"][0]);
        assert_eq!(endpoint["scrapeTimeout"], "10s", "{kind}");
        assert_eq!(endpoint["relabelings"][0]["targetLabel"], "node", "{kind}");
        assert_eq!(endpoint["metricRelabelings"][0]["regex"], "instance", "{kind}");
    }
    let extra: Vec<(String, serde_json::Value)> = rendered_objects(&rendered, "ConfigMap")
        .into_iter()
        .map(|c| (c["metadata"]["name"].as_str().unwrap_or_default().to_string(), c))
        .filter(|(name, _)| name.contains("extra"))
        .collect();
    assert_eq!(extra.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["lrp-extra", "lrp-extra-text"]);
    assert_eq!(extra[0].1["data"]["namespace"], "tools", "extra objects are templates");
    let chart_objects: Vec<serde_json::Value> = rendered
        .split("\n---")
        .filter_map(|document| serde_saphyr::from_str::<serde_json::Value>(document).ok())
        .filter(|object| object["metadata"]["labels"]["helm.sh/chart"].is_string())
        .collect();
    assert!(chart_objects.len() > 20, "{} objects", chart_objects.len());
    for object in &chart_objects {
        assert_eq!(
            object["metadata"]["labels"]["team"], "platform",
            "{} {}",
            object["kind"], object["metadata"]["name"]
        );
    }

    // The defaults: the agents critical to their node, one node's agent at a time, no spread, the usual history.
    let defaults = ok(tool("helm", &["template", "lrp", &chart(), "--set", "nodeAgent.enabled=true"]));
    let daemonset = &rendered_objects(&defaults, "DaemonSet")[0];
    assert_eq!(daemonset["spec"]["template"]["spec"]["priorityClassName"], "system-node-critical");
    assert_eq!(daemonset["spec"]["updateStrategy"]["rollingUpdate"], json!({"maxUnavailable": 1, "maxSurge": 0}));
    let deployment = &rendered_objects(&defaults, "Deployment")[0];
    assert_eq!(deployment["spec"]["revisionHistoryLimit"], 10);
    assert!(deployment["spec"]["template"]["spec"]["topologySpreadConstraints"].is_null());
    let none = ok(tool(
        "helm",
        &["template", "lrp", &chart(), "--set", "nodeAgent.enabled=true", "--set", "nodeAgent.priorityClassName="],
    ));
    assert!(rendered_objects(&none, "DaemonSet")[0]["spec"]["template"]["spec"]["priorityClassName"].is_null());
}

#[test]
fn invalid_values_are_rejected_with_a_readable_message() {
    for (value, needle) in [
        ("unknownKey=1", "unknownKey"),
        ("registry.nodeAdress=localhost", "nodeAdress"),
        ("replicaCount=0", "/replicaCount"),
        ("logging.format=xml", "/logging/format"),
        ("registry.gracePeriod=soon", "/registry/gracePeriod"),
        ("registry.helpUrl=wiki", "/registry/helpUrl"),
        ("registry.builtin=maybe", "/registry/builtin"),
        ("replicaCount=3", "leaderElection.enabled"),
        ("registry.nodeAddress=aaaa", "/registry/nodeAddress"),
        // Said in words, not as a schema's "'not' failed".
        ("registry.nodeAddress=0.0.0.0", "registry.nodeAddress \"0.0.0.0\": nothing can connect to it"),
        ("registry.nodeAddress=::", "registry.nodeAddress \"::\": nothing can connect to it"),
        ("registry.nodeAddress=fe80::1", "registry.nodeAddress \"fe80::1\": a link-local IPv6 address"),
        ("registry.nodeAddress=255.255.255.255", "registry.nodeAddress \"255.255.255.255\": nothing can connect"),
        ("registry.nodeAddress=010.0.0.1", "registry.nodeAddress \"010.0.0.1\": a numeric host that is not four"),
        ("registry.nodeAddress=256.1.1.1", "registry.nodeAddress \"256.1.1.1\": a numeric host that is not four"),
        ("registry.nodeAddress=0x7f.0.0.1", "registry.nodeAddress \"0x7f.0.0.1\": a numeric host that is not four"),
        // Refused by the schema's pattern (no dot, not an address).
        ("registry.nodeAddress=0x7f000001", "/registry/nodeAddress"),
        ("nodeAgent.maxUnavailable=0", "/nodeAgent/maxUnavailable"),
        ("nodeAgent.maxUnavailable=150%", "/nodeAgent/maxUnavailable"),
        ("serviceMonitor.scrapeTimeout=soon", "/serviceMonitor/scrapeTimeout"),
        ("revisionHistoryLimit=-1", "/revisionHistoryLimit"),
        ("prometheusRule.alerts.Typo.enabled=true", "Typo"),
        ("prometheusRule.alerts.NoLeader.for=soon", "/prometheusRule/alerts/NoLeader/for"),
        ("registry.kubeProxyConfigMap=kube-proxy", "/registry/kubeProxyConfigMap"),
        ("grafanaDashboard.namespace=Monitoring", "/grafanaDashboard/namespace"),
        ("networkPolicy.apiServer.cidrs={10.0.0.1}", "/networkPolicy/apiServer/cidrs/0"),
        ("networkPolicy.apiServer.ports={0}", "/networkPolicy/apiServer/ports/0"),
        ("networkPolicy.metricsFrom[0].pods=x", "/networkPolicy/metricsFrom/0"),
        // A serving certificate that would go unused: HTTPS comes only with metricsAuth.
        ("metricsTLS.secretName=mine", "metricsTLS.secretName \"mine\" is used only with metricsAuth=true"),
        // helm template cannot read the API server's EndpointSlices: it asks for what it would have read.
        ("networkPolicy.enabled=true", "set networkPolicy.apiServer.cidrs and .ports"),
        // The chart's own labels, which selectors depend on, are refused by name.
        ("commonLabels.app\\.kubernetes\\.io/name=x", "commonLabels.app.kubernetes.io/name: the chart sets"),
    ] {
        let output = tool("helm", &["template", "lrp", &chart(), "--set", value]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{value} was accepted");
        assert!(stderr.contains(needle), "{value}: {stderr}");
    }
}

#[test]
fn the_plain_manifests_are_the_chart_rendered_with_defaults() {
    let rendered = ok(tool(
        "helm",
        &["template", "local-registry-publisher", &chart(), "--namespace", "local-registry-publisher", "--no-hooks"],
    ));
    let committed = std::fs::read_to_string(root().join("deploy/local-registry-publisher.yaml")).expect("deploy/");
    let body = committed.split_once('\n').map(|(_, rest)| rest).unwrap_or_default();
    assert_eq!(body, rendered, "deploy/ is stale: run `make manifests`");
    let readme = std::fs::read_to_string(root().join("charts/local-registry-publisher/README.md")).expect("README");
    let generated = xtask::values_docs::render(Path::new(&chart())).expect("every value is documented");
    assert_eq!(readme, generated, "the chart's README is stale: run `make manifests`");
    let cargo = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let chart_yaml = std::fs::read_to_string(root().join("charts/local-registry-publisher/Chart.yaml")).expect("Chart");
    let version = cargo.lines().find_map(|l| l.strip_prefix("version = ")).expect("crate version").trim_matches('"');
    assert!(chart_yaml.contains(&format!("appVersion: \"{version}\"")), "appVersion follows the crate version");
}

/// A distribution's row: the controller's flags it adds, containerd's directory, the registry container's Service
/// (name, host annotation).
struct Row {
    distribution: &'static str,
    flags: &'static [&'static str],
    config_path: &'static str,
    container: Option<(&'static str, &'static str)>,
}

/// One value per distribution sets that row's defaults (README "Per cluster"); a value set explicitly wins.
#[test]
fn each_distribution_sets_its_rows_defaults_and_explicit_values_win() {
    let render = |values: &str| ok(tool("helm", &["template", "lrp", &chart(), "-n", "tools", "--set", values]));
    const KIND_HELP: &str = "--help-url=https://kind.sigs.k8s.io/docs/user/local-registry/";
    const K3D_HELP: &str = "--help-url=https://k3d.io/stable/usage/registries/";
    let k3s = "/var/lib/rancher/k3s/agent/etc/containerd/certs.d";
    let microk8s = "/var/snap/microk8s/current/args/certs.d";
    let containerd = "/etc/containerd/certs.d";
    let rows = [
        Row { distribution: "plain", flags: &["--node-address=localhost"], config_path: containerd, container: None },
        Row {
            distribution: "kind",
            flags: &["--node-address=localhost", "--take-over", "--allowed-namespaces=tools", KIND_HELP],
            config_path: containerd,
            container: Some(("kind-registry", "localhost:5001")),
        },
        Row {
            distribution: "k3d",
            flags: &["--node-address=localhost", "--take-over", "--allowed-namespaces=tools", K3D_HELP],
            config_path: k3s,
            container: Some(("k3d-registry", "k3d-registry.localhost:5111")),
        },
        Row {
            distribution: "minikube",
            flags: &["--node-address=internal-ip"],
            config_path: containerd,
            container: None,
        },
        Row {
            distribution: "microk8s",
            flags: &["--node-address=localhost", "--take-over"],
            config_path: microk8s,
            container: None,
        },
    ];
    for Row { distribution, flags, config_path, container } in rows {
        let rendered = render(&format!("distribution={distribution},nodeAgent.enabled=true"));
        let args = controller_args(&rendered);
        for flag in flags {
            assert!(args.iter().any(|a| a == flag), "{distribution}: {flag} in {args:?}");
        }
        let optional = ["--take-over", "--allowed-namespaces=tools", "--help-url="];
        for flag in optional.iter().filter(|f| !flags.iter().any(|g| g.starts_with(**f))) {
            assert!(!args.iter().any(|a| a.starts_with(flag)), "{distribution}: no {flag} in {args:?}");
        }
        let host_path = format!("hostPath:\n            path: \"{config_path}\"");
        assert!(rendered.contains(&host_path), "{distribution}: the agent mounts {config_path}:\n{rendered}");
        // It checks containerd's config names that directory, reading the config's directory, read-only.
        let config = match distribution {
            "k3d" => "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
            "microk8s" => "/var/snap/microk8s/current/args/containerd.toml",
            _ => "/etc/containerd/config.toml",
        };
        let (config_dir, _) = config.rsplit_once('/').unwrap();
        for text in [
            format!("- \"--runtime-config={config}\""),
            format!("- \"--config-path={config_path}\""),
            format!("mountPath: \"{config_dir}\"\n              readOnly: true"),
            format!("hostPath:\n            path: \"{config_dir}\"\n            type: Directory"),
        ] {
            assert!(rendered.contains(&text), "{distribution}: {text} in\n{rendered}");
        }
        let services: Vec<_> = rendered_objects(&rendered, "Service")
            .into_iter()
            .filter(|s| s["spec"]["type"] == "ExternalName")
            .collect();
        match container {
            None => assert!(services.is_empty(), "{distribution}: {services:?}"),
            Some((name, host)) => {
                let service = &services[0];
                assert_eq!(service["metadata"]["name"], name);
                assert_eq!(service["metadata"]["namespace"], "tools");
                assert_eq!(service["spec"]["externalName"], name);
                assert_eq!(service["spec"]["ports"][0]["port"], 5000);
                assert_eq!(service["metadata"]["labels"]["local-registry-publisher.io/registry"], "true");
                assert_eq!(service["metadata"]["annotations"]["local-registry-publisher.io/host"], host);
            }
        }
    }
    // k3d's runtime reaches the container by its name on the cluster's network.
    let k3d = render("distribution=k3d,registryContainer.name=k3d-mine,registryContainer.hostPort=5002");
    let service = rendered_objects(&k3d, "Service").into_iter().find(|s| s["spec"]["type"] == "ExternalName").unwrap();
    let annotations = &service["metadata"]["annotations"];
    assert_eq!(annotations["local-registry-publisher.io/host"], "k3d-mine.localhost:5002");
    assert_eq!(annotations["local-registry-publisher.io/host-from-container-runtime"], "k3d-mine:5000");

    // Explicit values win over the distribution's; watched namespaces gain the release's for the container.
    let explicit = render(
        "distribution=kind,configMap.takeOver=false,registry.nodeAddress=internal-ip,registry.helpUrl=https://x.test/,\
         registry.allowedNamespaces={tools},registry.watchNamespaces={registry}",
    );
    let args = controller_args(&explicit);
    assert!(!args.iter().any(|a| a == "--take-over"), "{args:?}");
    for flag in [
        "--node-address=internal-ip",
        "--help-url=https://x.test/",
        "--allowed-namespaces=tools",
        "--watch-namespaces=registry,tools",
    ] {
        assert!(args.iter().any(|a| a == flag), "{flag} in {args:?}");
    }
    // The chart labels the container's Service with the selector, so the selector must be one key=value.
    let output = tool("helm", &["template", "lrp", &chart(), "--set", "distribution=kind,registry.selector=a in (b)"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("must then be one key=value"), "{output:?}");
    let output = tool("helm", &["template", "lrp", &chart(), "--set", "distribution=docker-desktop"]);
    assert!(!output.status.success(), "an unknown distribution is refused");
    // The containerd check can be turned off (nothing more of the node is mounted), and a relative file is refused.
    let unchecked = render("nodeAgent.enabled=true,nodeAgent.checkRuntimeConfig=false");
    assert!(!unchecked.contains("--runtime-config") && !unchecked.contains("containerd-config"), "{unchecked}");
    let set = "nodeAgent.enabled=true,nodeAgent.runtimeConfig=config.toml";
    let output = tool("helm", &["template", "lrp", &chart(), "--set", set]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("nodeAgent.runtimeConfig \"config.toml\": must be"));
}

/// The chart promises what is tested: its kubeVersion floor is the oldest minor `make test` runs the cluster tests on.
#[test]
fn the_charts_kubernetes_floor_is_the_oldest_tested_minor() {
    let makefile = std::fs::read_to_string(root().join("Makefile")).expect("Makefile");
    let window = makefile.lines().find_map(|l| l.strip_prefix("KUBE_WINDOW := ")).expect("KUBE_WINDOW in the Makefile");
    let tools = std::fs::read_to_string(root().join("hack/tools.sh")).expect("hack/tools.sh");
    let built = tools.lines().find_map(|l| l.strip_prefix("k8s_window=")).expect("k8s_window in hack/tools.sh");
    assert_eq!(built.trim_matches('"'), window.trim(), "make test runs exactly the minors hack/tools.sh builds");
    let minor = |v: &str| v.trim_start_matches("1.").parse::<u32>().expect("a minor");
    let oldest = window.split_whitespace().map(minor).chain([minor(testbed::MAIN_MINOR)]).min().expect("a minor");
    let chart_yaml = std::fs::read_to_string(root().join("charts/local-registry-publisher/Chart.yaml")).expect("Chart");
    let floor = chart_yaml.lines().find_map(|l| l.strip_prefix("kubeVersion: ")).expect("kubeVersion");
    assert_eq!(floor.trim_matches('"'), format!(">=1.{oldest}.0-0"), "the chart's floor is the oldest tested minor");
}
