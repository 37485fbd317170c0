//! The Helm chart and plain manifests against the real control plane: lint, schema, rendering, server-side dry run,
//! install/upgrade/uninstall, and least-privilege RBAC proven by running the controller as the chart's
//! ServiceAccount.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::binary::Controller;
use support::*;
use testbed::ControlPlane;

fn chart() -> String {
    root().join("charts/local-registry-publisher").display().to_string()
}

/// Runs a tool built by hack/tools.sh (helm, kubectl) against the shared control plane.
fn tool(name: &str, args: &[&str]) -> Output {
    support::tool(ControlPlane::shared(), name, args)
}

fn stdin_tool(name: &str, args: &[&str], input: &str) -> Output {
    use std::io::Write;
    let plane = ControlPlane::shared();
    let mut child = Command::new(plane.tools().join(name))
        .args(args)
        .env("KUBECONFIG", plane.kubeconfig())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write");
    child.wait_with_output().expect("wait")
}

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

/// The rendered documents of `kind`, as JSON.
fn rendered_objects(rendered: &str, kind: &str) -> Vec<serde_json::Value> {
    rendered
        .split("\n---")
        .filter_map(|document| serde_saphyr::from_str::<serde_json::Value>(document).ok())
        .filter(|object| object["kind"] == kind)
        .collect()
}

/// The controller container's arguments in rendered manifests.
fn controller_args(rendered: &str) -> Vec<String> {
    let deployment = &rendered_objects(rendered, "Deployment")[0];
    serde_json::from_value(deployment["spec"]["template"]["spec"]["containers"][0]["args"].clone()).expect("args")
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

/// With metricsAuth the controller's port speaks HTTPS: the certificate from the Secret the values name, or one the
/// release makes; the controller's flags and mount, kubelet's probes and the ServiceMonitor follow.
#[test]
fn with_metrics_auth_the_port_serves_https_and_the_probes_and_monitor_follow() {
    let chart = chart();
    let render = |values: &[&str]| {
        let mut args =
            vec!["template", "lrp", &chart, "-n", "tools", "--set", "metricsAuth=true,serviceMonitor.enabled=true"];
        args.extend(values.iter().flat_map(|value| ["--set", *value]));
        ok(tool("helm", &args))
    };
    let secrets = |rendered: &str| -> Vec<serde_json::Value> {
        rendered_objects(rendered, "Secret").into_iter().filter(|s| s["type"] == "kubernetes.io/tls").collect()
    };
    let controller = |rendered: &str| rendered_objects(rendered, "Deployment")[0]["spec"]["template"]["spec"].clone();
    let endpoint = |rendered: &str| rendered_objects(rendered, "ServiceMonitor")[0]["spec"]["endpoints"][0].clone();
    let flags = |pod: &serde_json::Value| -> Vec<String> {
        let args = pod["containers"][0]["args"].as_array().cloned().unwrap_or_default();
        args.iter().filter_map(|a| a.as_str()).filter(|a| a.starts_with("--tls-")).map(String::from).collect()
    };

    let made = render(&[]);
    let secret = &secrets(&made)[0];
    assert_eq!(secret["metadata"]["name"], "lrp-local-registry-publisher-metrics-tls");
    let keys: Vec<&String> = secret["data"].as_object().expect("data").keys().collect();
    assert_eq!(keys, ["ca.crt", "tls.crt", "tls.key"]);
    let pod = controller(&made);
    assert_eq!(
        flags(&pod),
        [
            "--tls-cert-file=/etc/local-registry-publisher/metrics-tls/tls.crt",
            "--tls-private-key-file=/etc/local-registry-publisher/metrics-tls/tls.key"
        ]
    );
    assert_eq!(pod["containers"][0]["volumeMounts"][0]["mountPath"], "/etc/local-registry-publisher/metrics-tls");
    assert_eq!(pod["volumes"][0]["secret"]["secretName"], "lrp-local-registry-publisher-metrics-tls");
    for probe in ["livenessProbe", "readinessProbe"] {
        assert_eq!(pod["containers"][0][probe]["httpGet"]["scheme"], "HTTPS", "{probe}");
    }
    let monitor = endpoint(&made);
    assert_eq!(monitor["scheme"], "https");
    assert_eq!(
        monitor["tlsConfig"],
        json!({"ca": {"secret": {"name": "lrp-local-registry-publisher-metrics-tls", "key": "ca.crt"}},
            "serverName": "lrp-local-registry-publisher-metrics.tools.svc"})
    );

    // The made certificate holds the Service's names, the fully qualified one under the cluster's own domain (DNS
    // names sit in the DER as plain ASCII).
    let certificate = |rendered: &str| -> String {
        use base64::Engine;
        let base64 = base64::engine::general_purpose::STANDARD;
        let pem = base64.decode(secrets(rendered)[0]["data"]["tls.crt"].as_str().expect("tls.crt")).expect("base64");
        let pem = String::from_utf8(pem).expect("PEM");
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        String::from_utf8_lossy(&base64.decode(body).expect("DER")).into_owned()
    };
    let der = certificate(&render(&["registry.clusterDomain=corp.internal"]));
    for name in [
        "lrp-local-registry-publisher-metrics.tools.svc",
        "lrp-local-registry-publisher-metrics.tools.svc.corp.internal",
    ] {
        assert!(der.contains(name), "the certificate names {name}");
    }
    assert!(!der.contains("cluster.local"), "no other cluster's domain");

    let named = render(&["metricsTLS.secretName=metrics-cert"]);
    assert!(secrets(&named).is_empty(), "a named Secret (cert-manager's) is not made");
    assert_eq!(controller(&named)["volumes"][0]["secret"]["secretName"], "metrics-cert");
    assert_eq!(endpoint(&named)["tlsConfig"]["ca"]["secret"]["name"], "metrics-cert");
    let own = render(&["serviceMonitor.tlsConfig.insecureSkipVerify=true"]);
    assert_eq!(endpoint(&own)["tlsConfig"], json!({"insecureSkipVerify": true}));

    for plain in [render(&["metricsTLS.enabled=false"]), ok(tool("helm", &["template", "lrp", &chart]))] {
        assert!(secrets(&plain).is_empty());
        let pod = controller(&plain);
        assert!(flags(&pod).is_empty() && pod["volumes"].is_null(), "{pod}");
        assert!(pod["containers"][0]["readinessProbe"]["httpGet"]["scheme"].is_null());
    }
    assert!(endpoint(&render(&["metricsTLS.enabled=false"]))["tlsConfig"].is_null());
    let refused =
        tool("helm", &["template", "lrp", &chart, "--set", "metricsAuth=true,metricsTLS.secretName=Not_A_Name"]);
    assert!(!refused.status.success(), "a name no Secret can have is refused");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("/metricsTLS/secretName"));
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

/// The opt-in NetworkPolicies: one per workload, selecting exactly its pods, open only on its probe and metrics port
/// to the peers the values name (none by default), and egress only to the API server's addresses and port.
#[test]
fn the_network_policies_open_only_the_metrics_port_to_named_peers_and_egress_only_to_the_api_server() {
    let all_on = root().join("charts/local-registry-publisher/ci/all-on-values.yaml").display().to_string();
    let rendered = ok(tool(
        "helm",
        &["template", "lrp", &chart(), "-n", "tools", "-f", &all_on, "--set", "httpPort=9090,nodeAgent.httpPort=9191"],
    ));
    let policies = rendered_objects(&rendered, "NetworkPolicy");
    let names: Vec<_> = policies.iter().map(|p| p["metadata"]["name"].as_str().unwrap_or_default()).collect();
    assert_eq!(names, ["lrp-local-registry-publisher", "lrp-local-registry-publisher-node-agent"]);
    let workloads =
        [(&rendered_objects(&rendered, "Deployment")[0], 9090), (&rendered_objects(&rendered, "DaemonSet")[0], 9191)];
    for (policy, (workload, port)) in policies.iter().zip(workloads) {
        let spec = &policy["spec"];
        // The port the policy opens is the one the workload's container serves.
        let served = &workload["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"];
        assert_eq!(served, &json!(port), "{}", workload["kind"]);
        let pod_labels = workload["spec"]["template"]["metadata"]["labels"].as_object().expect("pod labels");
        let selector = spec["podSelector"]["matchLabels"].as_object().expect("matchLabels");
        assert!(selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)), "{selector:?} selects {pod_labels:?}");
        assert!(selector.contains_key("app.kubernetes.io/component"), "one workload's pods only: {selector:?}");
        assert_eq!(spec["policyTypes"], json!(["Ingress", "Egress"]));
        assert_eq!(
            spec["ingress"],
            json!([{"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
                "ports": [{"protocol": "TCP", "port": port}]}])
        );
        assert_eq!(
            spec["egress"],
            json!([{"to": [{"ipBlock": {"cidr": "172.18.0.2/32"}}], "ports": [{"protocol": "TCP", "port": 6443}]}])
        );
    }
    // Nobody named: no pod at all (the kubelet's probes come from the node); no agent, no agent policy; off by default.
    let api = ["--set", "networkPolicy.enabled=true,networkPolicy.apiServer.cidrs={10.0.0.1/32,fd00::1/128}"];
    let closed = ok(tool(
        "helm",
        &["template", "lrp", &chart(), api[0], api[1], "--set", "networkPolicy.apiServer.ports={443,6443}"],
    ));
    let policies = rendered_objects(&closed, "NetworkPolicy");
    assert_eq!(policies.len(), 1, "no node agent, no policy for it");
    assert_eq!(policies[0]["spec"]["ingress"], json!([]));
    assert_eq!(
        policies[0]["spec"]["egress"],
        json!([{"to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}, {"ipBlock": {"cidr": "fd00::1/128"}}],
            "ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 6443}]}])
    );
    let defaults = ok(tool("helm", &["template", "lrp", &chart(), "--set", "nodeAgent.enabled=true"]));
    assert!(rendered_objects(&defaults, "NetworkPolicy").is_empty());
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
            format!("- \"--containerd-config={config}\""),
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
    let unchecked = render("nodeAgent.enabled=true,nodeAgent.checkContainerdConfig=false");
    assert!(!unchecked.contains("--containerd-config") && !unchecked.contains("containerd-config"), "{unchecked}");
    let set = "nodeAgent.enabled=true,nodeAgent.containerdConfig=config.toml";
    let output = tool("helm", &["template", "lrp", &chart(), "--set", set]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("nodeAgent.containerdConfig \"config.toml\": must be"));
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

/// `make test` runs the node agent's real-node tests again on the containerd window's other end, choosing them by the
/// filters in NODE_AGENT_TESTS, and those with the loopback pushes' tests (PROXY_TESTS) in kube-proxy's other mode.
/// A filter matches by substring, so a renamed test would silently leave that run: each filter must name at least
/// one test of the binaries it is given.
#[test]
fn each_test_the_containerd_and_proxy_reruns_name_exists() {
    let makefile = std::fs::read_to_string(root().join("Makefile")).expect("Makefile");
    let joined = makefile.replace("\\\n", " ");
    let proxy_tests = joined.lines().find_map(|l| l.strip_prefix("PROXY_TESTS := ")).expect("PROXY_TESTS");
    let added = proxy_tests.strip_prefix("$(NODE_AGENT_TESTS) ").expect("PROXY_TESTS extends NODE_AGENT_TESTS");
    let line = joined.lines().find_map(|l| l.strip_prefix("NODE_AGENT_TESTS := ")).expect("NODE_AGENT_TESTS");
    let line = format!("{line} {added}");
    let (cargo_args, test_args) = line.split_once(" -- ").expect("cargo's arguments, then the tests'");
    let binaries: Vec<&str> = cargo_args.split_whitespace().filter(|a| *a != "--test").collect();
    assert!(!binaries.is_empty() && cargo_args.matches("--test ").count() == binaries.len(), "{cargo_args}");
    let tests: Vec<String> =
        binaries.iter().flat_map(|binary| binary_sources(binary)).flat_map(|f| test_names(&f)).collect();
    let filters: Vec<&str> = test_args.split_whitespace().filter(|a| !a.starts_with("--")).collect();
    assert!(filters.len() >= 5, "{test_args}");
    for filter in filters {
        assert!(
            tests.iter().any(|test| test.contains(filter)),
            "NODE_AGENT_TESTS or PROXY_TESTS names {filter}, which is no test of {binaries:?}: rename the filter with the test"
        );
    }
}

/// The README and docs/node-pulls.md promise the containerd releases the node agent is proven on. The proof is the
/// window run's record (docs/containerd-window.md, written by `make test-containerd-window` only when every release
/// passed): each release the docs name must be in it, the record must be of exactly the pinned releases (a pin moved
/// without a run fails here), and `make test` reruns only releases hack/tools.sh builds for it.
#[test]
fn every_containerd_release_the_docs_name_is_in_the_window_runs_record() {
    let read = |path: &str| std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
    let recorded: BTreeMap<String, u32> = read("docs/containerd-window.md")
        .lines()
        .filter_map(|line| match line.split('|').map(str::trim).collect::<Vec<_>>()[..] {
            ["", release, passed, ""] => Some((release.to_string(), passed.parse().ok()?)),
            _ => None,
        })
        .collect();
    let counts: BTreeSet<u32> = recorded.values().copied().collect();
    assert!(counts.len() == 1 && counts.iter().all(|n| *n > 0), "the same tests pass on every release: {recorded:?}");

    let pinned: BTreeSet<String> = std::fs::read_dir(root().join("tools"))
        .expect("tools/")
        .map(|entry| entry.expect("tools/ entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name == "containerd" || name.starts_with("containerd-"))
        .map(|name| {
            let go_mod = read(&format!("tools/{name}/go.mod"));
            let require = go_mod.lines().find(|l| l.starts_with("require github.com/containerd/containerd"));
            let version = require.and_then(|l| l.split_whitespace().last()).expect("containerd's require line");
            version.trim_start_matches('v').to_string()
        })
        .collect();
    let releases: BTreeSet<String> = recorded.keys().cloned().collect();
    assert_eq!(
        releases, pinned,
        "docs/containerd-window.md is of other releases than the pins: make test-containerd-window"
    );

    let makefile = read("Makefile");
    let list = |name: &str| -> Vec<String> {
        let line = makefile.lines().find_map(|l| l.strip_prefix(&format!("{name} := "))).expect(name);
        line.split_whitespace().map(str::to_string).collect()
    };
    let minor_of = |release: &str| release.rsplit_once('.').map(|(minor, _)| minor.to_string()).expect("x.y.z");
    let window = list("CONTAINERD_WINDOW");
    let pinned_minors: BTreeSet<String> = pinned.iter().map(|release| minor_of(release)).collect();
    assert_eq!(window.iter().cloned().collect::<BTreeSet<_>>(), pinned_minors, "CONTAINERD_WINDOW is every pin");
    let tools = read("hack/tools.sh");
    let built = tools.lines().find_map(|l| l.strip_prefix("containerd_window=")).expect("containerd_window");
    for minor in list("CONTAINERD_RERUN") {
        assert!(built.trim_matches('"').split_whitespace().any(|b| b == minor), "make test reruns {minor}, unbuilt");
    }

    let release = regex::Regex::new(r"\b(\d+\.\d+)\.\d+\b").expect("regexp");
    for doc in ["README.md", "docs/node-pulls.md"] {
        let text = read(doc);
        let named: Vec<&str> = text
            .lines()
            .filter(|line| line.contains("containerd"))
            .flat_map(|line| release.captures_iter(line).map(|c| (c.get(0), c.get(1))).collect::<Vec<_>>())
            .filter_map(|(whole, minor)| window.contains(&minor?.as_str().to_string()).then_some(whole?.as_str()))
            .collect();
        assert!(!named.is_empty(), "{doc} names no containerd release");
        for name in named {
            assert!(
                recorded.contains_key(name),
                "{doc} says proven on containerd {name}; docs/containerd-window.md has {releases:?}"
            );
        }
    }
}

/// The source files of the test binary `binary`: `tests/<binary>.rs`, or each file of `tests/<binary>/`.
fn binary_sources(binary: &str) -> Vec<std::path::PathBuf> {
    let file = root().join(format!("tests/{binary}.rs"));
    if file.exists() {
        return vec![file];
    }
    let dir = root().join(format!("tests/{binary}"));
    let listed = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: no test binary {binary}: {e}", dir.display()));
    let files: Vec<_> = listed.map(|entry| entry.expect("a directory entry").path()).collect();
    files.into_iter().filter(|path| path.extension().is_some_and(|e| e == "rs")).collect()
}

/// The test functions a test file declares (an attribute line `#[test]` or `#[tokio::test...]`, then its `fn`).
fn test_names(file: &std::path::Path) -> Vec<String> {
    let source = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let mut names = Vec::new();
    let mut attribute = false;
    for line in source.lines().map(str::trim_start) {
        if line.starts_with("#[test]") || line.starts_with("#[tokio::test") {
            attribute = true;
        } else if attribute && (line.starts_with("fn ") || line.starts_with("async fn ")) {
            let name = line.trim_start_matches("async ").trim_start_matches("fn ");
            names.push(name.split(['(', '<']).next().unwrap_or_default().to_string());
            attribute = false;
        }
    }
    names
}

#[tokio::test]
async fn the_rendered_manifests_pass_a_server_side_dry_run() {
    let plane = ControlPlane::shared();
    let client = plane.client().await.unwrap();
    plane.namespace(&client, "dryrun").await.unwrap();
    let namespace = ok(tool("kubectl", &["get", "ns", "-o", "name"]));
    let ns = namespace.lines().find_map(|l| l.strip_prefix("namespace/").filter(|n| n.starts_with("dryrun-"))).unwrap();
    // Rendered for the version the cluster runs, as `helm install` renders: fields the chart gates on the version
    // (the PodDisruptionBudget's unhealthyPodEvictionPolicy) must be accepted, or left out, on every tested minor.
    // Every optional part on, the CRD included (generated from the Rust type, so a schema feature an old API server
    // lacks would show here): the node agent's DaemonSet and RBAC, CA bundles, a mirror and pull Secrets.
    let minor = testbed::KubeVersion::from_env().unwrap().minor;
    let optional = "leaderElection.enabled=true,replicaCount=2,podDisruptionBudget.enabled=true,\
                    nodeAgent.enabled=true,nodeAgent.caBundles={registry-ca},\
                    nodeAgent.mirrors[0].upstream=docker.io,nodeAgent.mirrors[0].endpoint=http://cache.example:5000,\
                    nodeAgent.relay.enabled=true,nodeAgent.httpPort=9808,nodeAgent.relay.registries[0].port=5000,\
                    nodeAgent.relay.registries[0].service.namespace=registry,\
                    nodeAgent.relay.registries[0].service.name=registry,\
                    pullSecrets.enabled=true,networkPolicy.enabled=true,networkPolicy.apiServer.cidrs={10.0.0.1/32},\
                    networkPolicy.apiServer.ports={6443},\
                    networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.team=monitoring";
    let rendered = ok(tool(
        "helm",
        &[
            "template",
            "dry",
            &chart(),
            "-n",
            ns,
            "--kube-version",
            &format!("{minor}.0"),
            "--include-crds",
            "--set",
            optional,
        ],
    ));
    for kind in ["CustomResourceDefinition", "DaemonSet", "ClusterRole", "Deployment", "NetworkPolicy"] {
        assert!(rendered.contains(&format!("\nkind: {kind}\n")), "no {kind} rendered:\n{rendered}");
    }
    let applied = stdin_tool("kubectl", &["apply", "--server-side", "--dry-run=server", "-f", "-"], &rendered);
    // The API server's warnings (a format it does not know in the CRD's schema, say) are the first thing a new user
    // would see at `helm install`: there are none.
    let warned = String::from_utf8_lossy(&applied.stderr).into_owned();
    ok(applied);
    assert!(!warned.to_lowercase().contains("warning"), "the API server warned:\n{warned}");
    // A namespace created in a dry run does not exist for the dry run of what goes into it.
    let _deploy = DEPLOY_NAMESPACE.lock().await;
    ok(tool("kubectl", &["apply", "--server-side", "-f", &root().join("deploy/namespace.yaml").display().to_string()]));
    let manifests = std::fs::read_to_string(root().join("deploy/local-registry-publisher.yaml")).unwrap();
    ok(stdin_tool("kubectl", &["apply", "--server-side", "--dry-run=server", "-f", "-"], &manifests));
}

/// The plain manifests' namespace, which the dry run creates and the kustomize test deletes.
static DEPLOY_NAMESPACE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// (kind, namespace, name) of each object in manifests.
fn identities(manifests: &str) -> BTreeSet<(String, String, String)> {
    let field =
        |object: &serde_json::Value, pointer: &str| object.pointer(pointer).and_then(|v| v.as_str()).map(String::from);
    manifests
        .split("\n---")
        .filter_map(|document| serde_saphyr::from_str::<serde_json::Value>(document).ok())
        .filter(|object| object.is_object())
        .map(|o| {
            let namespace = field(&o, "/metadata/namespace").unwrap_or_default();
            (field(&o, "/kind").unwrap_or_default(), namespace, field(&o, "/metadata/name").unwrap_or_default())
        })
        .collect()
}

/// deploy/ is a kustomize base: it builds (kubectl's own kustomize) to exactly the plain manifests, an overlay sets the
/// image, and the base applies to the control plane and deletes cleanly.
#[tokio::test]
async fn the_plain_manifests_are_a_kustomize_base_that_builds_overlays_and_applies() {
    let deploy = root().join("deploy");
    let listed = std::fs::read_to_string(deploy.join("kustomization.yaml")).expect("deploy/kustomization.yaml");
    for entry in std::fs::read_dir(&deploy).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name != "kustomization.yaml" {
            assert!(listed.contains(&format!("- {name}\n")), "deploy/kustomization.yaml lists {name}");
        }
    }
    let built = ok(tool("kubectl", &["kustomize", &deploy.display().to_string()]));
    let plain = ["namespace.yaml", "local-registry-publisher.yaml"]
        .map(|file| std::fs::read_to_string(deploy.join(file)).unwrap())
        .join("\n---\n");
    assert_eq!(identities(&built), identities(&plain), "the base is the plain manifests");
    assert!(identities(&built).len() > 10);

    let overlay = root().join(format!("target/kustomize-overlay-{}", std::process::id()));
    std::fs::create_dir_all(&overlay).unwrap();
    std::fs::write(
        overlay.join("kustomization.yaml"),
        "resources: [../../deploy]\nimages:\n  - name: local-registry-publisher\n    newName: registry.example/lrp\n    \
         newTag: \"9.9.9\"\n",
    )
    .unwrap();
    let built = ok(tool("kubectl", &["kustomize", &overlay.display().to_string()]));
    std::fs::remove_dir_all(&overlay).unwrap();
    let deployment = &rendered_objects(&built, "Deployment")[0];
    assert_eq!(deployment["spec"]["template"]["spec"]["containers"][0]["image"], "registry.example/lrp:9.9.9");

    let _deploy = DEPLOY_NAMESPACE.lock().await;
    let base = deploy.display().to_string();
    ok(tool("kubectl", &["apply", "--server-side", "-k", &base]));
    let applied =
        ok(tool("kubectl", &["get", "deployment,serviceaccount", "-n", "local-registry-publisher", "-o", "name"]));
    assert!(applied.contains("deployment.apps/local-registry-publisher"), "{applied}");
    let publish = ok(tool("kubectl", &["get", "role", "-n", "kube-public", "-o", "name"]));
    assert!(publish.contains("role.rbac.authorization.k8s.io/local-registry-publisher"), "{publish}");
    ok(tool("kubectl", &["delete", "-k", &base, "--wait"]));
    let left = ok(tool(
        "kubectl",
        &["get", "clusterroles", "-l", "app.kubernetes.io/instance=local-registry-publisher", "-o", "name"],
    ));
    assert!(left.trim().is_empty(), "left after delete -k: {left}");
}

#[tokio::test]
async fn helm_install_upgrade_and_uninstall_leave_nothing_behind() {
    let release = "lifecycle";
    let ns = "lrp-lifecycle";
    ok(tool("helm", &["install", release, &chart(), "-n", ns, "--create-namespace", "--wait", "--timeout", "120s"]));
    let status = ok(tool("helm", &["status", release, "-n", ns]));
    assert!(status.contains("STATUS: deployed") && status.contains("kubectl label service"), "{status}");
    ok(tool(
        "helm",
        &[
            "upgrade",
            release,
            &chart(),
            "-n",
            ns,
            "--wait",
            "--timeout",
            "120s",
            "--set",
            "replicaCount=2,leaderElection.enabled=true,podDisruptionBudget.enabled=true",
        ],
    ));
    let leader_role = ok(tool("kubectl", &["get", "role", "-n", ns, "-o", "name"]));
    assert!(leader_role.contains("lifecycle-local-registry-publisher-leader"), "{leader_role}");
    ok(tool("helm", &["uninstall", release, "-n", ns, "--wait"]));

    let selector = format!("app.kubernetes.io/instance={release}");
    let kinds = "deployments,replicasets,pods,jobs,serviceaccounts,roles,rolebindings,services,poddisruptionbudgets";
    let left = wait_until(Duration::from_secs(60), || async {
        let namespaced = ok(tool("kubectl", &["get", kinds, "-A", "-l", &selector, "-o", "name"]));
        let cluster = ok(tool("kubectl", &["get", "clusterroles,clusterrolebindings", "-l", &selector, "-o", "name"]));
        let all = namespaced + &cluster;
        all.trim().is_empty().then_some(())
    })
    .await;
    assert!(
        left.is_some(),
        "objects remain after uninstall: {}",
        ok(tool("kubectl", &["get", kinds, "-A", "-l", &selector, "-o", "name"]))
    );
    // What stays, as the README's uninstall section says with the command that removes it: the NodePullState CRD,
    // which Helm installs from crds/ with every release (this one had the node agent off) and never deletes.
    let crd = "nodepullstates.local-registry-publisher.io";
    assert!(ok(tool("kubectl", &["get", "crd", crd, "-o", "name"])).contains(crd));
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let uninstall = readme.split("`helm uninstall` leaves").nth(1).unwrap_or_default();
    let said = uninstall.split("\n\n").next().unwrap_or_default();
    assert!(said.contains(&format!("kubectl delete crd {crd}")) && said.contains("nodeAgent.enabled"), "{said}");
}

/// Each list and map value taken out again the way the README says (`--reset-then-reuse-values --set <value>=null`):
/// the release's Deployment, DaemonSet and RBAC no longer carry it, while the others stay until their turn. And
/// `--reuse-values`, which the README warns against, keeps a value set to null while `helm get values` hides it.
#[tokio::test]
async fn a_list_or_map_value_taken_out_as_the_readme_says_leaves_nothing_of_it_in_the_release() {
    let (release, ns) = ("takeout", "lrp-takeout");
    let mirror = "nodeAgent.mirrors[0].upstream=docker.io,nodeAgent.mirrors[0].endpoint=http://cache.example:5000";
    let values = format!(
        "nodeAgent.enabled=true,{mirror},nodeAgent.allowedAddresses={{registry.corp.example:5000}},\
         nodeAgent.caBundles={{registry-ca}},nodeAgent.nodeSelector.disktype=ssd"
    );
    ok(tool("helm", &["install", release, &chart(), "-n", ns, "--create-namespace", "--set", &values]));
    let manifest = || ok(tool("helm", &["get", "manifest", release, "-n", ns]));
    let upgrade = |how: &str, set: &str| ok(tool("helm", &["upgrade", release, &chart(), "-n", ns, how, "--set", set]));
    // What each value renders: the controller's flags, the CA bundles' ClusterRole, the agents' node selector.
    let carried = [
        ("nodeAgent.mirrors", "--node-mirrors=docker.io=http://cache.example:5000"),
        ("nodeAgent.allowedAddresses", "--node-allowed-addresses=registry.corp.example:5000"),
        ("nodeAgent.caBundles", "takeout-local-registry-publisher-ca-bundles"),
        ("nodeAgent.nodeSelector.disktype", "disktype: ssd"),
    ];
    for (index, (value, mark)) in carried.iter().enumerate() {
        let before = manifest();
        for (_, still) in &carried[index..] {
            assert!(before.contains(still), "{still} is not rendered before its turn:\n{before}");
        }
        upgrade("--reset-then-reuse-values", &format!("{value}=null"));
        let after = manifest();
        assert!(!after.contains(mark), "{value}=null, as the README says, still renders {mark}:\n{after}");
    }

    // The way the README warns against: the mirror stays rendered, though `helm get values` no longer lists it.
    upgrade("--reset-then-reuse-values", mirror);
    upgrade("--reuse-values", "nodeAgent.mirrors=null");
    assert!(!ok(tool("helm", &["get", "values", release, "-n", ns])).contains("docker.io"));
    assert!(manifest().contains(carried[0].1), "--reuse-values took the mirror out: the README's warning is wrong");
    ok(tool("helm", &["uninstall", release, "-n", ns, "--wait"]));
}

/// The chart installed once with its default values (kube-public, leader election): the identity the RBAC tests
/// act as. Its ServiceAccount's token, as a kubeconfig.
fn rbac_release() -> &'static PathBuf {
    static KUBECONFIG: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    KUBECONFIG.get_or_init(|| {
        let (release, ns) = ("rbac", RBAC_NAMESPACE);
        let values = "leaderElection.enabled=true,replicaCount=2";
        ok(tool("helm", &["install", release, &chart(), "-n", ns, "--create-namespace", "--set", values]));
        let token = ok(tool("kubectl", &["create", "token", RBAC_ACCOUNT, "-n", ns, "--duration", "1h"]));
        token_kubeconfig(token.trim(), "controller")
    })
}

const RBAC_NAMESPACE: &str = "lrp-rbac";
const RBAC_ACCOUNT: &str = "rbac-local-registry-publisher";

/// The tests that write kube-public/local-registry-hosting take turns: the chart's grants name that one object.
static KUBE_PUBLIC: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn wait_public_host(public: &Api<ConfigMap>, wanted: &str) -> Option<()> {
    wait_until(SOON, || async {
        let text = public.get_opt("local-registry-hosting").await.ok()??.data?.get("localRegistryHosting.v1")?.clone();
        text.contains(wanted).then_some(())
    })
    .await
}

#[tokio::test]
async fn the_chart_rbac_is_enough_to_publish_fail_over_and_record_events() {
    let plane = ControlPlane::shared();
    let admin = plane.client().await.unwrap();
    let kubeconfig = rbac_release();
    let _turn = KUBE_PUBLIC.lock().await;
    let replica = || {
        Controller::start(&[
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--leader-elect-resource-namespace={RBAC_NAMESPACE}"),
            "--leader-elect".into(),
            format!("--leader-elect-resource-name={RBAC_ACCOUNT}"),
            "--leader-elect-lease-duration=5s".into(),
            "--no-builtin-registries".into(),
        ])
    };
    let first = replica();
    let second = replica();

    // The chart's defaults publish to kube-public/local-registry-hosting.
    let regns = plane.namespace(&admin, "rbac-registry").await.unwrap();
    // A cluster admin's consent; the controller finds it with the chart's namespaces watch permission.
    ok(tool("kubectl", &["label", "namespace", &regns, "local-registry-publisher.io/registries=allowed"]));
    apply_in(&admin, &regns, service("zot", registry_label(), json!({}), json!({"ports": [{"port": 5000}]}))).await;
    let public: Api<ConfigMap> = Api::namespaced(admin.clone(), "kube-public");
    let ip = cluster_ip(&admin, &regns, "zot").await;
    let wanted = |port: u16| format!("{ip}:{port}");
    assert!(
        wait_public_host(&public, &wanted(5000)).await.is_some(),
        "published as the ServiceAccount; logs:\n{}\n{}",
        first.logs(),
        second.logs()
    );

    // Events on the Service it reports on.
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(admin.clone(), &regns);
    let recorded = wait_until(SOON, || async {
        let list = events.list(&Default::default()).await.ok()?;
        list.items.into_iter().find(|e| e.reason.as_deref() == Some("Published"))
    })
    .await;
    assert!(recorded.is_some(), "a Published Event was recorded");

    // Fail over: kill whichever leads; the other publishes the next change with the same identity's grants.
    let leader = wait_until(SOON, || async {
        [
            first.metric("leader_election_master_status{name=\"local-registry-publisher\"}"),
            second.metric("leader_election_master_status{name=\"local-registry-publisher\"}"),
        ]
        .iter()
        .position(|m| *m == Some(1.0))
    })
    .await
    .expect("a leader");
    let (mut dying, survivor) = if leader == 0 { (first, second) } else { (second, first) };
    dying.signal("KILL");
    dying.wait_exit(Duration::from_secs(5)).expect("the killed replica exits");
    apply_in(&admin, &regns, service("zot", registry_label(), json!({}), json!({"ports": [{"port": 5001}]}))).await;
    let moved = wait_public_host(&public, &wanted(5001)).await;
    assert!(moved.is_some(), "the survivor published; logs:\n{}", survivor.logs());
    assert!(!survivor.logs().contains("Forbidden"), "no request was denied:\n{}", survivor.logs());
    drop(survivor);
    public.delete("local-registry-hosting", &DeleteParams::default()).await.ok();
}

#[tokio::test]
async fn the_chart_rbac_grants_nothing_more_and_lets_every_reader_get_the_document() {
    let plane = ControlPlane::shared();
    let admin = plane.client().await.unwrap();
    let controller = client_for(rbac_release()).await;
    let regns = plane.namespace(&admin, "rbac-denied").await.unwrap();
    apply_in(&admin, &regns, service("zot", registry_label(), json!({}), json!({"ports": [{"port": 5000}]}))).await;
    let other =
        serde_json::from_value::<ConfigMap>(json!({"metadata": {"name": "not-ours"}, "data": {"a": "b"}})).unwrap();
    let kube_public: Api<ConfigMap> = Api::namespaced(controller.clone(), "kube-public");
    forbidden(kube_public.create(&PostParams::default(), &other).await, "creating another ConfigMap in kube-public");
    forbidden(
        kube_public.patch("cluster-info", &PatchParams::apply("x"), &Patch::Apply(&other)).await,
        "patching kube-public/cluster-info",
    );
    forbidden(kube_public.list(&Default::default()).await, "listing every ConfigMap in kube-public");
    let ns = RBAC_NAMESPACE;
    forbidden(Api::<Secret>::namespaced(controller.clone(), ns).list(&Default::default()).await, "listing Secrets");
    forbidden(Api::<Secret>::all(controller.clone()).list(&Default::default()).await, "listing Secrets cluster-wide");
    let svc = serde_json::from_value::<Service>(json!({"metadata": {"name": "x"}, "spec": {"ports": [{"port": 1}]}}))
        .unwrap();
    forbidden(
        Api::<Service>::namespaced(controller.clone(), &regns).create(&PostParams::default(), &svc).await,
        "creating a Service",
    );
    forbidden(
        Api::<Service>::namespaced(controller.clone(), &regns).delete("zot", &DeleteParams::default()).await,
        "deleting a Service",
    );
    let cm_elsewhere: Api<ConfigMap> = Api::namespaced(controller.clone(), &regns);
    forbidden(cm_elsewhere.create(&PostParams::default(), &other).await, "creating a ConfigMap outside kube-public");
    // In kube-system, kube-proxy's configuration alone, by name: the controller reads its mode there.
    let kube_system: Api<ConfigMap> = Api::namespaced(controller.clone(), "kube-system");
    let proxy = kube_system.get_opt("kube-proxy").await;
    assert!(proxy.is_ok(), "kube-system/kube-proxy may be read: {proxy:?}");
    let named = kube_system.list(&ListParams::default().fields("metadata.name=kube-proxy")).await;
    assert!(named.is_ok(), "and watched by name: {named:?}");
    forbidden(kube_system.list(&Default::default()).await, "listing every ConfigMap in kube-system");
    forbidden(
        kube_system.get("extension-apiserver-authentication").await.map(|_| ()),
        "reading another in kube-system",
    );
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(controller.clone(), ns);
    forbidden(leases.delete(RBAC_ACCOUNT, &DeleteParams::default()).await, "deleting its Lease");
    // Scaling its own Deployment is the uninstall hook's, under a ServiceAccount of its own made only for it.
    let deployments = Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(controller.clone(), ns);
    let scale = json!({"spec": {"replicas": 0}});
    forbidden(
        deployments.patch(RBAC_ACCOUNT, &PatchParams::default(), &Patch::Merge(&scale)).await,
        "scaling its own Deployment",
    );
    forbidden(
        Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(controller.clone(), "kube-system")
            .list(&Default::default())
            .await,
        "reading other Leases",
    );

    // Every authenticated identity may read the published ConfigMap (here or not), and only it.
    let reader_token = ok(tool("kubectl", &["create", "token", "default", "-n", &regns]));
    let reader = client_for(&token_kubeconfig(reader_token.trim(), "reader")).await;
    let reader_public: Api<ConfigMap> = Api::namespaced(reader, "kube-public");
    let readable = reader_public.get_opt("local-registry-hosting").await;
    assert!(readable.is_ok(), "in-cluster readers may get it: {readable:?}");
    forbidden(reader_public.get("not-there").await.map(|_: ConfigMap| ()), "reading other ConfigMaps in kube-public");
}

#[tokio::test]
async fn withdraw_as_the_charts_identity_removes_only_what_the_controller_wrote() {
    let admin = ControlPlane::shared().client().await.unwrap();
    let kubeconfig = rbac_release();
    let _turn = KUBE_PUBLIC.lock().await;
    let public: Api<ConfigMap> = Api::namespaced(admin.clone(), "kube-public");
    let withdraw = || {
        let mut command = std::process::Command::new(support::binary::BINARY);
        command.arg("withdraw").arg(format!("--kubeconfig={}", kubeconfig.display()));
        command.output().expect("run withdraw")
    };
    // Ours goes.
    let ours = serde_json::from_value::<ConfigMap>(json!({"metadata": {"name": "local-registry-hosting",
            "labels": {"app.kubernetes.io/managed-by": "local-registry-publisher"}},
        "data": {"localRegistryHosting.v1": "host: \"localhost:5001\"\n"}}))
    .unwrap();
    public
        .patch("local-registry-hosting", &PatchParams::apply("local-registry-publisher").force(), &Patch::Apply(&ours))
        .await
        .expect("ours");
    let output = withdraw();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(public.get_opt("local-registry-hosting").await.unwrap().is_none(), "withdrawn");

    // A foreign one stays.
    let foreign = serde_json::from_value::<ConfigMap>(json!({"metadata": {"name": "local-registry-hosting"},
        "data": {"localRegistryHosting.v1": "host: \"localhost:5001\"\n"}}))
    .unwrap();
    public.create(&PostParams::default(), &foreign).await.expect("a foreign ConfigMap");
    let output = withdraw();
    assert!(output.status.success() && String::from_utf8_lossy(&output.stderr).contains("another tool wrote it"));
    assert!(
        public.get_opt("local-registry-hosting").await.unwrap().is_some(),
        "a foreign ConfigMap is never withdrawn"
    );
    public.delete("local-registry-hosting", &DeleteParams::default()).await.ok();

    // Ours, shared with another writer's key: only our key and label go.
    let shared = serde_json::from_value::<ConfigMap>(json!({"metadata": {"name": "local-registry-hosting",
            "labels": {"app.kubernetes.io/managed-by": "local-registry-publisher"}},
        "data": {"localRegistryHosting.v1": "host: \"localhost:5001\"\n", "localRegistryHosting.v2": "x: 1\n"}}))
    .unwrap();
    public
        .patch("local-registry-hosting", &PatchParams::apply("local-registry-publisher"), &Patch::Apply(&shared))
        .await
        .expect("our part");
    let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "local-registry-hosting"},
        "data": {"localRegistryHosting.v2": "x: 1\n"}});
    public
        .patch("local-registry-hosting", &PatchParams::apply("future-writer").force(), &Patch::Apply(&other))
        .await
        .expect("the other writer's part");
    let output = withdraw();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let left = public.get("local-registry-hosting").await.expect("the shared ConfigMap stays");
    let keys: Vec<String> = left.data.unwrap_or_default().into_keys().collect();
    assert_eq!(keys, ["localRegistryHosting.v2"], "only our key is withdrawn");
    assert!(!left.metadata.labels.unwrap_or_default().contains_key("app.kubernetes.io/managed-by"), "and our label");
    public.delete("local-registry-hosting", &DeleteParams::default()).await.ok();
}

/// A release watching only a fresh namespace and publishing there, and the controller binary run with the
/// release's ServiceAccount token and `extra` flags.
struct ScopedRelease {
    admin: kube::Client,
    regns: String,
    kubeconfig: PathBuf,
    controller: Controller,
}

async fn scoped_release(release: &str, ns: &str, values: &str, extra: &[&str]) -> ScopedRelease {
    let plane = ControlPlane::shared();
    let admin = plane.client().await.unwrap();
    let regns = plane.namespace(&admin, &format!("{release}-registry")).await.unwrap();
    let values = format!(
        "{values}registry.watchNamespaces={{{regns}}},registry.builtin=false,configMap.namespace={regns},rbac.readerRole=false"
    );
    ok(tool("helm", &["install", release, &chart(), "-n", ns, "--create-namespace", "--set", &values]));
    let sa = format!("{release}-local-registry-publisher");
    let token = ok(tool("kubectl", &["create", "token", &sa, "-n", ns, "--duration", "1h"]));
    let kubeconfig = token_kubeconfig(token.trim(), release);
    let mut args = vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--watch-namespaces={regns}"),
        format!("--configmap-namespace={regns}"),
        "--no-builtin-registries".into(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    // As the Deployment does: the serving certificate the release made, mounted and named by flags.
    if let Some(files) = metrics_tls_files(&admin, release, ns).await {
        args.push(format!("--tls-cert-file={}", files.join("tls.crt").display()));
        args.push(format!("--tls-private-key-file={}", files.join("tls.key").display()));
    }
    ScopedRelease { admin, regns, kubeconfig, controller: Controller::start(&args) }
}

/// The release's metrics TLS Secret written out as files (the pod's mount), when the release made one.
async fn metrics_tls_files(admin: &kube::Client, release: &str, ns: &str) -> Option<PathBuf> {
    let name = format!("{release}-local-registry-publisher-metrics-tls");
    let secret = Api::<Secret>::namespaced(admin.clone(), ns).get_opt(&name).await.expect("reading Secrets")?;
    let dir = ControlPlane::shared().dir().join(format!("{release}-metrics-tls"));
    std::fs::create_dir_all(&dir).expect("a directory for the certificate");
    for (key, value) in secret.data.unwrap_or_default() {
        std::fs::write(dir.join(key), value.0).expect("writing the certificate");
    }
    Some(dir)
}

/// One request over TLS, trusting `ca` only and checking `server_name`: the status and body, or why it failed.
fn https_get(
    port: u16,
    ca: &[u8],
    server_name: &str,
    path: &str,
    authorization: Option<&str>,
) -> Result<(u16, String), String> {
    use rustls::pki_types::pem::PemObject;
    use std::io::{Read, Write};
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca) {
        roots.add(cert.map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(server_name.to_string()).map_err(|e| e.to_string())?;
    let mut connection = rustls::ClientConnection::new(std::sync::Arc::new(config), name).map_err(|e| e.to_string())?;
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
    let mut stream = rustls::Stream::new(&mut connection, &mut tcp);
    let auth = authorization.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n{auth}\r\n").map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    // A peer that closes without close_notify still gave its whole HTTP/1.0 response.
    let read = stream.read_to_end(&mut response);
    if response.is_empty() {
        return Err(read.err().map(|e| e.to_string()).unwrap_or_else(|| "no response".into()));
    }
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or("no status line")?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((status, body))
}

#[tokio::test]
async fn with_watch_namespaces_the_chart_rbac_is_namespaced_and_still_enough() {
    let (release, ns) = ("scoped", "lrp-scoped");
    let ScopedRelease { admin, regns, kubeconfig, controller: _running } = scoped_release(release, ns, "", &[]).await;
    let rendered = ok(tool("helm", &["get", "manifest", release, "-n", ns]));
    assert!(!rendered.contains("kind: ClusterRole"), "no cluster-wide access at all:\n{rendered}");
    apply_in(&admin, &regns, service("zot", registry_label(), json!({}), json!({"ports": [{"port": 5000}]}))).await;
    let configmaps: Api<ConfigMap> = Api::namespaced(admin.clone(), &regns);
    let published = wait_until(SOON, || async { configmaps.get_opt(TARGET).await.ok().flatten() }).await;
    assert!(published.is_some(), "the namespaced Roles are enough to publish");

    let controller = client_for(&kubeconfig).await;
    let elsewhere = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(controller.clone(), "kube-system");
    forbidden(elsewhere.list(&Default::default()).await, "listing pods outside the watched namespaces");
    forbidden(
        Api::<k8s_openapi::api::core::v1::Node>::all(controller.clone()).list(&Default::default()).await,
        "nodes",
    );
    let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(controller.clone());
    forbidden(namespaces.list(&Default::default()).await, "namespaces");
    ok(tool("helm", &["uninstall", release, "-n", ns, "--wait", "--timeout", "120s"]));
}

#[tokio::test]
async fn metrics_can_require_kubernetes_authentication_and_authorization_over_https_only() {
    let (release, ns) = ("secured", "lrp-secured");
    let scoped = scoped_release(release, ns, "metricsAuth=true,", &["--metrics-auth"]).await;
    let controller = &scoped.controller;
    let token_of = |account: &str| ok(tool("kubectl", &["create", "token", account, "-n", ns])).trim().to_string();
    for account in ["prometheus", "nobody"] {
        ok(tool("kubectl", &["create", "serviceaccount", account, "-n", ns]));
    }
    let binding = format!("--serviceaccount={ns}:prometheus");
    ok(tool(
        "kubectl",
        &[
            "create",
            "clusterrolebinding",
            "secured-prometheus",
            "--clusterrole",
            "secured-local-registry-publisher-metrics-reader",
            &binding,
        ],
    ));

    // The port speaks HTTPS with the certificate the release made, for the name the ServiceMonitor checks.
    let tls = metrics_tls_files(&scoped.admin, release, ns).await.expect("the release made a serving certificate");
    let ca = std::fs::read(tls.join("ca.crt")).expect("ca.crt");
    let server_name = format!("{release}-local-registry-publisher-metrics.{ns}.svc");
    let get =
        |path: &str, authorization: Option<&str>| https_get(controller.port, &ca, &server_name, path, authorization);
    let scrape_with = |authorization: Option<&str>| get("/metrics", authorization).ok().map(|(status, _)| status);
    let scrape = |token: Option<&str>| scrape_with(token.map(|t| format!("Bearer {t}")).as_deref());
    let up = wait_until(SOON, || async { get("/healthz", None).ok().filter(|(status, _)| *status == 200) }).await;
    assert!(up.is_some(), "the probes stay open without a token, over HTTPS: {:?}", get("/healthz", None));
    let (status, answer) = controller.get("/metrics").expect("an answer to plain HTTP");
    assert_eq!(status, 400, "plain HTTP is refused: {answer}");
    assert!(answer.contains("HTTPS only") && !answer.contains("local_registry_publisher"), "{answer}");
    let elsewhere = https_get(controller.port, &ca, &format!("other.{ns}.svc"), "/healthz", None);
    let for_name = elsewhere.as_ref().is_err_and(|e| e.contains("not valid for name"));
    assert!(for_name, "the certificate is for the metrics Service only: {elsewhere:?}");
    let other_ca = std::fs::read(root().join("src/http/tls/fixtures/a.crt")).expect("a fixture certificate");
    let untrusted = https_get(controller.port, &other_ca, &server_name, "/healthz", None);
    let unknown = untrusted.as_ref().is_err_and(|e| e.contains("UnknownIssuer"));
    assert!(unknown, "and signed by the release's own CA: {untrusted:?}");
    assert_eq!(scrape(None), Some(401), "no token");
    assert_eq!(scrape(Some("not-a-token")), Some(401), "a token Kubernetes rejects");
    assert_eq!(scrape(Some(&token_of("nobody"))), Some(403), "a valid token without the right");
    let prometheus = token_of("prometheus");
    let allowed = wait_until(SOON, || async { (scrape(Some(&prometheus)) == Some(200)).then_some(()) }).await;
    assert!(allowed.is_some(), "the metrics reader is served");
    assert_eq!(scrape_with(Some(&format!("bearer {prometheus}"))), Some(200), "schemes are case-insensitive");
    assert_eq!(scrape_with(Some(&format!("Bearer {prometheus} junk"))), Some(401), "one token and nothing more");

    // An unauthenticated client cannot make the controller load the API server: 100 new tokens cost at most a
    // burst of TokenReviews plus the refill rate, and the rest are told to wait.
    let reviews_before = token_reviews().await;
    let started = std::time::Instant::now();
    let answers: Vec<Option<u16>> = (0..100).map(|i| scrape(Some(&format!("forged-token-{i}")))).collect();
    let elapsed = started.elapsed().as_secs_f64();
    let reviews = token_reviews().await - reviews_before;
    let allowed_reviews = 10.0 + 5.0 * elapsed + 1.0;
    assert!(reviews <= allowed_reviews, "{reviews} TokenReviews for 100 forged tokens in {elapsed:.1} s");
    assert!(answers.iter().all(|a| matches!(a, Some(401 | 429))), "{answers:?}");
    assert!(answers.contains(&Some(429)), "the rest are told to wait: {answers:?}");
    assert_eq!(scrape(Some(&prometheus)), Some(200), "a token allowed before is still served meanwhile");
    let (status, metrics) = get("/metrics", Some(&format!("Bearer {prometheus}"))).expect("a scrape");
    assert!(status == 200 && metrics.contains("local_registry_publisher_configmap_writes_total"), "{metrics}");

    // An upgrade keeps the certificate Prometheus trusts.
    let secret = format!("{release}-local-registry-publisher-metrics-tls");
    let certificate = || ok(tool("kubectl", &["get", "secret", &secret, "-n", ns, "-o", "jsonpath={.data.tls\\.crt}"]));
    let before = certificate();
    ok(tool("helm", &["upgrade", release, &chart(), "-n", ns, "--reuse-values"]));
    assert_eq!(certificate(), before, "helm upgrade made a new certificate");
    ok(tool("kubectl", &["delete", "clusterrolebinding", "secured-prometheus"]));
    ok(tool("helm", &["uninstall", release, "-n", ns, "--wait", "--timeout", "120s"]));
}

/// TokenReviews the API server has answered so far, from its own /metrics.
async fn token_reviews() -> f64 {
    let client = ControlPlane::shared().client().await.expect("admin client");
    let request = http::Request::get("/metrics").body(Vec::new()).expect("a request");
    let text = client.request_text(request).await.expect("the API server's /metrics");
    text.lines()
        .filter(|l| l.starts_with("apiserver_request_total{") && l.contains("resource=\"tokenreviews\""))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

#[test]
fn the_controller_may_read_exactly_the_ca_bundles_the_chart_names_and_none_by_default() {
    let ca_roles = |values: &[&str]| -> Vec<serde_json::Value> {
        let chart = chart();
        let mut template = vec!["template", "lrp", chart.as_str(), "--set", "nodeAgent.enabled=true"];
        template.extend(values.iter().flat_map(|value| ["--set", *value]));
        let rendered = ok(tool("helm", &template));
        let roles = rendered_objects(&rendered, "ClusterRole");
        roles.into_iter().filter(|role| role["metadata"]["name"] == "lrp-local-registry-publisher-ca-bundles").collect()
    };
    // An empty resourceNames list would grant every ConfigMap and Secret: no rule at all instead.
    assert!(ca_roles(&[]).is_empty());
    let roles = ca_roles(&["nodeAgent.caBundles={configmap/registry-ca,secret/registry-tls,both}"]);
    assert_eq!(roles.len(), 1);
    // Each kind for the names given it, read as the controller follows them: by name, with list and watch.
    assert_eq!(
        roles[0]["rules"],
        serde_json::json!([
            {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["registry-ca", "both"], "verbs": ["list", "watch"]},
            {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["registry-tls", "both"], "verbs": ["list", "watch"]}
        ])
    );
    let refused = tool("helm", &["template", "lrp", &chart(), "--set", "nodeAgent.caBundles={Not_A_Name}"]);
    assert!(!refused.status.success(), "a name the API server could not hold is refused");
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
        ("nodeAgent.runtime=crio", "/nodeAgent/runtime"),
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

#[test]
fn the_readmes_rbac_table_names_every_role_and_cluster_role_the_chart_makes_and_no_other() {
    // Every option on, once cluster-wide and once with watched namespaces; hooks included.
    let all_on = root().join("charts/local-registry-publisher/ci/all-on-values.yaml").display().to_string();
    let mut made: BTreeSet<(String, String)> = BTreeSet::new();
    for extra in ["registry.builtin=true", "registry.watchNamespaces={a,b},registry.builtin=false"] {
        let values = format!("{extra},pullSecrets.serviceAccounts={{default}}");
        let rendered = ok(tool("helm", &["template", "lrp", &chart(), "-f", &all_on, "--set", &values]));
        for kind in ["Role", "ClusterRole"] {
            for object in rendered_objects(&rendered, kind) {
                let name = object["metadata"]["name"].as_str().expect("a name");
                let suffix = name.strip_prefix("lrp-local-registry-publisher").expect("named after the release");
                let named = format!("<fullname>{}", suffix.replace("mirror-0", "mirror-<n>"));
                made.insert((named, kind.to_string()));
            }
        }
    }
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let table = readme.split("| name | kind | where | bound to | made when | for |").nth(1).expect("the RBAC table");
    let listed: BTreeSet<(String, String)> = table
        .lines()
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            (cells[1].trim_matches('`').to_string(), cells[2].to_string())
        })
        .collect();
    assert_eq!(
        made.difference(&listed).collect::<Vec<_>>(),
        Vec::<&(String, String)>::new(),
        "made, not in the README"
    );
    assert_eq!(
        listed.difference(&made).collect::<Vec<_>>(),
        Vec::<&(String, String)>::new(),
        "in the README, not made"
    );
}

/// `helm template` with the node agent on and `values` fails, saying `needle`.
fn refused_with_the_agent(values: &str, needle: &str) {
    let values = format!("nodeAgent.enabled=true,{values}");
    let output = tool("helm", &["template", "lrp", &chart(), "--set", &values]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{values} was accepted");
    assert!(stderr.contains(needle), "{values}: {stderr}");
}

/// The shipped dashboard, as the chart carries it.
fn dashboard() -> serde_json::Value {
    let path = root().join("charts/local-registry-publisher/dashboards/local-registry-publisher.json");
    serde_json::from_str(&std::fs::read_to_string(&path).expect("the dashboard")).expect("dashboard JSON")
}

/// Every metric name a panel's queries name (ours, controller-runtime's, leader election's, the process').
fn dashboard_metrics(dashboard: &serde_json::Value) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let panels = dashboard["panels"].as_array().expect("panels");
    for expr in panels.iter().flat_map(|p| p["targets"].as_array().into_iter().flatten()).map(|t| &t["expr"]) {
        let expr = expr.as_str().expect("an expr");
        for start in ["local_registry_publisher_", "controller_runtime_", "leader_election_", "process_"] {
            for (at, _) in expr.match_indices(start) {
                let name: String = expr[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                names.insert(name);
            }
        }
    }
    names
}

/// The sample names a /metrics text exports, each family's by its type (a family with no sample yet included).
fn exported_metrics(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(family) = line.strip_prefix("# TYPE ") else { continue };
        let mut words = family.split_whitespace();
        let (Some(name), Some(kind)) = (words.next(), words.next()) else { continue };
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            "info" => &["_info"],
            _ => &[""],
        };
        names.extend(suffixes.iter().map(|suffix| format!("{name}{suffix}")));
    }
    names
}

#[test]
fn the_grafana_dashboard_ships_as_the_sidecars_configmap_only_when_asked() {
    let all_on = root().join("charts/local-registry-publisher/ci/all-on-values.yaml").display().to_string();
    let rendered = ok(tool("helm", &["template", "lrp", &chart(), "-n", "tools", "-f", &all_on]));
    let shipped: Vec<serde_json::Value> = rendered_objects(&rendered, "ConfigMap")
        .into_iter()
        .filter(|c| c["metadata"]["name"] == "lrp-local-registry-publisher-dashboard")
        .collect();
    let [configmap] = shipped.as_slice() else { panic!("one dashboard ConfigMap: {shipped:?}") };
    assert_eq!(configmap["metadata"]["namespace"], "tools");
    assert_eq!(configmap["metadata"]["labels"]["grafana_dashboard"], "1", "the sidecar's default label");
    assert_eq!(configmap["metadata"]["annotations"]["grafana_folder"], "Registry");
    let text = configmap["data"]["local-registry-publisher.json"].as_str().expect("the dashboard's key");
    assert_eq!(serde_json::from_str::<serde_json::Value>(text).expect("JSON"), dashboard(), "the file, unchanged");
    let elsewhere = ok(tool(
        "helm",
        &["template", "lrp", &chart(), "--set", "grafanaDashboard.enabled=true,grafanaDashboard.namespace=monitoring"],
    ));
    let moved = rendered_objects(&elsewhere, "ConfigMap");
    assert!(moved.iter().any(|c| c["metadata"]["namespace"] == "monitoring"), "where the sidecar searches");
    let defaults = ok(tool("helm", &["template", "lrp", &chart()]));
    assert!(!defaults.contains("grafana_dashboard"), "opt-in");
}

#[tokio::test]
async fn every_dashboard_query_names_a_metric_the_controller_or_the_node_agent_exports() {
    let plane = ControlPlane::shared();
    let admin = plane.client().await.unwrap();
    let ns = plane.namespace(&admin, "dashboard").await.unwrap();
    // Every task on (the publisher, pull Secrets, the node plan, kube-proxy's), each series starting at 0, and a
    // registry published, so every family has its samples; one node agent reading the plan.
    let hosts = plane.dir().join(format!("dashboard-hosts-{ns}"));
    // The agent relays the registry on this machine's loopback, at a port free now.
    let relay_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let controller_flags = ["--pull-secrets".into(), format!("--node-relays={ns}/registry={relay_port}")];
    let (controller, agent) = controller_and_agent(&admin, &ns, &hosts, &controller_flags, &["--relay".into()]).await;
    let spec = json!({"type": "NodePort", "ports": [{"port": 5000}]});
    apply_in(&admin, &ns, service("registry", registry_label(), json!({}), spec)).await;
    let scrape = |process: &Controller, once: &'static str| {
        let text = process.get("/metrics").filter(|(status, _)| *status == 200).map(|(_, body)| body);
        async move { text.filter(|text| text.contains(once)) }
    };
    let published = "local_registry_publisher_published_info{";
    let controller_text = wait_until(SOON, || scrape(&controller, published)).await;
    let controller_text = controller_text.unwrap_or_else(|| panic!("the controller published:\n{}", controller.logs()));
    let passed = "local_registry_publisher_node_relay_listeners{";
    let agent_text = wait_until(SOON, || scrape(&agent, passed)).await;
    let agent_text = agent_text.unwrap_or_else(|| panic!("the node agent passed:\n{}", agent.logs()));
    let exported: BTreeSet<String> =
        exported_metrics(&controller_text).union(&exported_metrics(&agent_text)).cloned().collect();

    let queried = dashboard_metrics(&dashboard());
    let missing: Vec<&String> = queried.difference(&exported).collect();
    assert!(missing.is_empty(), "the dashboard queries metrics nothing exports: {missing:?}\nexported: {exported:?}");
    // And every family of ours has a panel (a histogram by its buckets), so a new metric is not left off it.
    let ours =
        |name: &&String| name.starts_with("local_registry_publisher_") || name.starts_with("controller_runtime_");
    let unshown: Vec<&String> = exported
        .iter()
        .filter(ours)
        .filter(|name| !name.ends_with("_sum") && !name.ends_with("_count"))
        .filter(|name| !queried.contains(*name))
        .collect();
    assert!(unshown.is_empty(), "metrics no panel shows: {unshown:?}");
    println!("the dashboard's {} metrics are among the {} the binaries export", queried.len(), exported.len());
}

/// The alerting rules the chart renders with `values` (prometheusRule.enabled added), as a rule file's groups.
fn rendered_rules(values: &str) -> serde_json::Value {
    let values = format!("prometheusRule.enabled=true{}{values}", if values.is_empty() { "" } else { "," });
    let rendered = ok(tool("helm", &["template", "lrp", &chart(), "--set", &values]));
    let rules = rendered_objects(&rendered, "PrometheusRule");
    let [rule] = rules.as_slice() else { panic!("one PrometheusRule: {rules:?}") };
    json!({"groups": rule["spec"]["groups"]})
}

fn alert_names(groups: &serde_json::Value) -> Vec<String> {
    let rules = groups["groups"][0]["rules"].as_array().expect("rules");
    rules.iter().map(|r| r["alert"].as_str().expect("an alert").to_string()).collect()
}

#[test]
fn every_alert_passes_promtools_rule_tests_firing_after_its_for_and_not_before_nor_on_a_blip() {
    let dir = std::env::temp_dir().join(format!("lrp-alerts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory");
    let groups = rendered_rules("");
    // JSON is YAML: the rule file is the rendered groups as they are.
    let rules = dir.join("rules.yaml");
    std::fs::write(&rules, groups.to_string()).expect("rules.yaml");
    let tests = dir.join("alerts.test.yaml");
    std::fs::copy(root().join("tests/alerts/alerts.test.yaml"), &tests).expect("the rule tests");
    ok(tool("promtool", &["check", "rules", &rules.display().to_string()]));
    let tested = ok(tool("promtool", &["test", "rules", &tests.display().to_string()]));
    println!("{tested}");
    // Every alert the chart ships is tested there.
    let text = std::fs::read_to_string(&tests).expect("the rule tests");
    let names = alert_names(&groups);
    assert_eq!(names.len(), 10, "{names:?}");
    for name in &names {
        assert!(text.contains(&format!("alertname: {name}")), "{name} has no promtool test");
    }
    // docs/alerts.md, the runbook the alerts link to, has a section per alert and no other.
    let runbook = std::fs::read_to_string(root().join("docs/alerts.md")).expect("docs/alerts.md");
    let sections: BTreeSet<&str> = runbook.lines().filter_map(|l| l.strip_prefix("## ")).collect();
    assert_eq!(sections, names.iter().map(String::as_str).collect(), "docs/alerts.md's sections");
    // Each alert's `for` is held by a case before it ends: with the `for` at 0m, the same tests fail on that alert.
    for name in &names {
        let short = name.trim_start_matches("LocalRegistryPublisher");
        let eager = rendered_rules(&format!("prometheusRule.alerts.{short}.for=0m"));
        std::fs::write(&rules, eager.to_string()).expect("rules.yaml");
        let output = tool("promtool", &["test", "rules", &tests.display().to_string()]);
        let said = String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr);
        let failed_on_it = !output.status.success() && said.contains(&format!("alertname: {name},"));
        assert!(failed_on_it, "{name} with its `for` at 0m still passes its tests (no case before its `for`):\n{said}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn each_alert_can_be_switched_off_relabelled_and_extra_alerts_join_the_group() {
    let all = alert_names(&rendered_rules(""));
    let groups = rendered_rules(
        "prometheusRule.alerts.NoLeader.enabled=false,prometheusRule.alerts.NotPublishing.labels.team=platform,\
         prometheusRule.alerts.NotPublishing.for=1h,prometheusRule.runbookUrl=https://example.test/alerts.md,\
         prometheusRule.extraAlerts[0].alert=Mine,prometheusRule.extraAlerts[0].expr=vector(1)",
    );
    let names = alert_names(&groups);
    assert!(!names.contains(&"LocalRegistryPublisherNoLeader".to_string()), "{names:?}");
    assert_eq!(names.len(), all.len(), "one off, one extra: {names:?}");
    assert_eq!(names.last().map(String::as_str), Some("Mine"));
    let rules = groups["groups"][0]["rules"].as_array().expect("rules");
    let not_publishing = rules.iter().find(|r| r["alert"] == "LocalRegistryPublisherNotPublishing").expect("kept");
    assert_eq!(not_publishing["labels"], json!({"severity": "warning", "team": "platform"}));
    assert_eq!(not_publishing["for"], "1h");
    assert_eq!(
        not_publishing["annotations"]["runbook_url"],
        "https://example.test/alerts.md#localregistrypublishernotpublishing"
    );
    let defaults = ok(tool("helm", &["template", "lrp", &chart()]));
    assert!(!defaults.contains("PrometheusRule"), "opt-in");
}

/// The controller keeping the node plan `plan` for the registries of `ns` (and `controller_flags`), and one node
/// agent writing into `hosts` (with `agent_flags`), both as pods of `ns`; the plan's ConfigMap made as the chart does.
async fn controller_and_agent(
    admin: &kube::Client,
    ns: &str,
    hosts: &Path,
    controller_flags: &[String],
    agent_flags: &[String],
) -> (Controller, Controller) {
    plan_configmap(admin, ns).await;
    std::fs::create_dir_all(hosts).expect("a hosts directory");
    let kubeconfig = format!("--kubeconfig={}", ControlPlane::shared().kubeconfig().display());
    let plan = "--node-plan-configmap=plan".to_string();
    let own =
        [kubeconfig.clone(), format!("--watch-namespaces={ns}"), format!("--configmap-namespace={ns}"), plan.clone()];
    let controller = Controller::start_in_namespace(ns, &[&own[..], controller_flags].concat());
    let mount = format!("--config-path-mount={}", hosts.display());
    let agent =
        Controller::start_in_namespace(ns, &[&["node-agent".into(), kubeconfig, plan, mount], agent_flags].concat());
    (controller, agent)
}

/// The node plan's ConfigMap, `plan`, made empty as the chart does.
async fn plan_configmap(admin: &kube::Client, ns: &str) {
    let plan = serde_json::from_value::<ConfigMap>(json!({"metadata": {"name": "plan"}})).unwrap();
    let configmaps: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
    configmaps.create(&PostParams::default(), &plan).await.expect("the plan's ConfigMap");
}

/// `process`'s /metrics once every line of `lines` is in it, else a panic with its log.
async fn metrics_holding(process: &Controller, lines: &[&str]) -> String {
    let holding = || async {
        let text = process.get("/metrics").filter(|(status, _)| *status == 200).map(|(_, body)| body);
        text.filter(|text| lines.iter().all(|line| text.lines().any(|l| l == *line)))
    };
    wait_until(SOON, holding).await.unwrap_or_else(|| panic!("never {lines:?}; its log:\n{}", process.logs()))
}

/// One process's /metrics as the test read it, and when (Unix seconds).
struct Scrape {
    text: String,
    at: f64,
}

impl Scrape {
    fn of(process: &Controller) -> Self {
        Self::try_of(process).unwrap_or_else(|| panic!("/metrics does not answer; the log:\n{}", process.logs()))
    }

    /// None while the process does not answer 200 yet.
    fn try_of(process: &Controller) -> Option<Self> {
        let text = process.get("/metrics").filter(|(status, _)| *status == 200)?.1;
        let at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("the clock").as_secs_f64();
        Some(Self { text, at })
    }

    /// Its samples by series (`name{labels}`), finite values only.
    fn samples(&self) -> BTreeMap<String, f64> {
        let lines = self.text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty());
        lines
            .filter_map(|line| {
                let (metric, value) = line.rsplit_once(' ')?;
                let value = value.parse::<f64>().ok().filter(|v| v.is_finite())?;
                Some((metric.to_string(), value))
            })
            .collect()
    }
}

/// A promtool rule test over two scrapes of each process (`(pod, first, second)`), seconds apart, as Prometheus
/// would have scraped them for half an hour (with the namespace and pod labels its operator adds), the second at
/// minute 20: each process goes on as it went between the two. A gauge holds the first value, then the second; a
/// counter that grew goes on growing at the rate seen; a Unix timestamp that advanced goes on with the clock and
/// one that did not stands still. So a failure or a stall seen for seconds is judged as Prometheus would judge it
/// ten minutes on. Each rule's expression is evaluated at the window's end: present when `firing` names the alert,
/// empty otherwise.
fn scraped_rule_test(processes: &[(&str, &Scrape, &Scrape)], groups: &serde_json::Value, firing: &[&str]) -> String {
    const WINDOW: u64 = 30;
    const SECOND_FROM: u64 = 20;
    let mut series = Vec::new();
    for (pod, first, second) in processes {
        let (before, after) = (first.samples(), second.samples());
        let names: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
        for metric in names {
            // Simulated time: the second scrape at minute SECOND_FROM; each value as it was then.
            let minutes = |at: &dyn Fn(f64) -> f64| {
                let at_minute = |minute: u64| at((minute as f64 - SECOND_FROM as f64) * 60.0).to_string();
                (0..=WINDOW).map(at_minute).collect::<Vec<_>>().join(" ")
            };
            let (earlier, last) = (before.get(metric).copied(), after.get(metric).copied());
            let values = match (earlier, last) {
                (Some(earlier), Some(last)) if metric.contains("_timestamp_seconds") => {
                    let at_second = last - second.at + (SECOND_FROM * 60) as f64;
                    let advancing = if last > earlier { 1.0 } else { 0.0 };
                    minutes(&|since| at_second + advancing * since)
                }
                (Some(earlier), Some(last)) if metric.contains("_total") && last > earlier => {
                    let per_second = (last - earlier) / (second.at - first.at);
                    minutes(&|since| (last + per_second * since).max(0.0))
                }
                _ => {
                    let held = |value: Option<f64>, minutes: u64| match value {
                        Some(value) => format!("{value}+0x{minutes}"),
                        None => format!("_x{}", minutes + 1),
                    };
                    format!("{} {}", held(earlier, SECOND_FROM - 1), held(last, WINDOW - SECOND_FROM))
                }
            };
            let (name, labels) =
                metric.split_once('{').map_or((metric.as_str(), ""), |(n, l)| (n, l.trim_end_matches('}')));
            let labels = [format!("namespace=\"lrp\",pod=\"{pod}\""), labels.to_string()]
                .into_iter()
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join(",");
            series.push(json!({"series": format!("{name}{{{labels}}}"), "values": values}));
        }
    }
    let rules = groups["groups"][0]["rules"].as_array().expect("rules");
    let checks: Vec<serde_json::Value> = rules
        .iter()
        .map(|rule| {
            let name = rule["alert"].as_str().expect("an alert");
            let expected = if firing.contains(&name) { json!([{"labels": "{}", "value": 1}]) } else { json!([]) };
            json!({
                "expr": format!("clamp_max(count({}), 1)", rule["expr"].as_str().expect("an expr")),
                "eval_time": format!("{WINDOW}m"),
                "exp_samples": expected,
            })
        })
        .collect();
    let test = json!({
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": checks}],
    });
    test.to_string()
}

/// Two scrapes of `process`, 3 s apart: long enough for an agent checking every second to pass in between.
async fn two_scrapes(process: &Controller) -> (Scrape, Scrape) {
    let first = Scrape::of(process);
    tokio::time::sleep(Duration::from_secs(3)).await;
    (first, Scrape::of(process))
}

/// The chart's rules written for promtool, and a directory for the tests run over them (removed when dropped).
struct RuleCheck {
    dir: PathBuf,
    groups: serde_json::Value,
}

impl RuleCheck {
    fn new(ns: &str) -> Self {
        let dir = ControlPlane::shared().dir().join(format!("alerts-{ns}"));
        std::fs::create_dir_all(&dir).expect("a directory for the rules");
        let groups = rendered_rules("");
        std::fs::write(dir.join("rules.yaml"), groups.to_string()).expect("rules.yaml");
        Self { dir, groups }
    }

    /// Fails unless exactly the alerts `firing` hold over the scrapes (see [`scraped_rule_test`]).
    fn evaluate(&self, name: &str, processes: &[(&str, &Scrape, &Scrape)], firing: &[&str]) {
        let file = self.dir.join(format!("{name}.test.yaml"));
        std::fs::write(&file, scraped_rule_test(processes, &self.groups, firing)).expect("the rule test");
        let output = tool("promtool", &["test", "rules", &file.display().to_string()]);
        let said = String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{name}:\n{said}");
    }
}

impl Drop for RuleCheck {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn the_alerts_expressions_hold_on_what_the_real_controller_and_node_agent_export_in_each_state() {
    let plane = ControlPlane::shared();
    let admin = plane.client().await.unwrap();
    let ns = plane.namespace(&admin, "alerts").await.unwrap();
    let rules = RuleCheck::new(&ns);
    let (dir, hosts) = (&rules.dir, rules.dir.join("hosts"));

    // The state: kube-proxy in nftables mode (its configuration, read from this namespace), a mirror whose Service
    // does not exist, a node whose containerd reads another directory and holds someone else's file for the
    // address the plan maps.
    let node_port = 30000 + (std::process::id() % 2000) as i32;
    let proxy = json!({"metadata": {"name": "kube-proxy"}, "data": {"config.conf": "mode: nftables\n"}});
    let configmaps: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);
    configmaps.create(&PostParams::default(), &serde_json::from_value(proxy).unwrap()).await.expect("kube-proxy");
    let loopback = format!("localhost:{node_port}");
    std::fs::create_dir_all(hosts.join(&loopback)).expect("a foreign directory");
    std::fs::write(hosts.join(&loopback).join("hosts.toml"), "server = \"https://elsewhere\"\n").expect("foreign");
    let containerd = dir.join("config.toml");
    let elsewhere = "version = 3\n[plugins.'io.containerd.cri.v1.images'.registry]\n  config_path = '/etc/elsewhere'\n";
    std::fs::write(&containerd, elsewhere).expect("containerd's config");
    let (controller, agent) = controller_and_agent(
        &admin,
        &ns,
        &hosts,
        &[
            format!("--node-mirrors=docker.io=service:{ns}/missing:5000"),
            format!("--kube-proxy-configmap={ns}/kube-proxy"),
        ],
        &[
            format!("--containerd-config={}", containerd.display()),
            "--config-path=/etc/containerd/certs.d".into(),
            "--resync=1s".into(),
        ],
    )
    .await;
    // Nothing published yet: only "not publishing" holds of the registry.
    metrics_holding(&controller, &["local_registry_publisher_node_mirrors_unusable 1"]).await;
    let (first, second) = two_scrapes(&controller).await;
    let firing = ["LocalRegistryPublisherNotPublishing", "LocalRegistryPublisherMirrorUnusable"];
    rules.evaluate("before", &[("controller", &first, &second)], &firing);

    // A NodePort registry published as localhost:<nodePort>, which nftables mode does not serve there, with an
    // annotated cluster-network address that is not its own, so no node file is written for it.
    let annotations = json!({"local-registry-publisher.io/host-from-cluster-network": "registry.example:5000"});
    let spec = json!({"type": "NodePort", "ports": [{"port": 5000, "nodePort": node_port}]});
    apply_in(&admin, &ns, service("registry", registry_label(), annotations, spec)).await;
    metrics_holding(
        &controller,
        &[
            "local_registry_publisher_loopback_addresses_unserved{reader=\"tools\"} 1",
            "local_registry_publisher_node_addresses_refused 1",
        ],
    )
    .await;
    metrics_holding(
        &agent,
        &[
            "local_registry_publisher_node_addresses{state=\"foreign\"} 1",
            "local_registry_publisher_node_containerd_config{state=\"elsewhere\"} 1",
        ],
    )
    .await;
    let firing = [
        "LocalRegistryPublisherMirrorUnusable",
        "LocalRegistryPublisherAddressRefused",
        "LocalRegistryPublisherLoopbackNodePortUnserved",
        "LocalRegistryPublisherNodeFileProblem",
        "LocalRegistryPublisherContainerdReadsElsewhere",
    ];
    let (controller_first, controller_second) = two_scrapes(&controller).await;
    let (agent_first, agent_second) = two_scrapes(&agent).await;
    let scrapes = [("controller", &controller_first, &controller_second), ("agent-a", &agent_first, &agent_second)];
    rules.evaluate("published", &scrapes, &firing);
}

/// The alerts of failures, against the real binaries put in each failing state: a controller whose every write the
/// API server refuses, two controllers undoing each other's writes, a replica that never gets the Lease, and a node
/// agent stuck on an API server that stopped answering, beside one that still passes.
#[tokio::test]
async fn the_failure_alerts_hold_on_what_the_real_controller_and_node_agent_export_while_failing() {
    let plane = ControlPlane::shared();
    let admin = plane.client().await.unwrap();
    let ns = plane.namespace(&admin, "failing").await.unwrap();
    let rules = RuleCheck::new(&ns);
    let kubeconfig = format!("--kubeconfig={}", plane.kubeconfig().display());
    let controller = |flags: &[String]| {
        let own = [kubeconfig.clone(), format!("--watch-namespaces={ns}")];
        Controller::start_in_namespace(&ns, &[&own[..], flags].concat())
    };
    let answering = |process: &Controller| {
        let process = process.get("/metrics").filter(|(status, _)| *status == 200).is_some();
        async move { process.then_some(()) }
    };
    let sum = |scrape: &Scrape, prefix: &str| -> f64 {
        scrape.samples().iter().filter(|(series, _)| series.starts_with(prefix)).map(|(_, value)| value).sum()
    };
    apply_in(&admin, &ns, service("registry", registry_label(), json!({}), json!({"ports": [{"port": 5000}]}))).await;

    // Refused: the ConfigMap's namespace does not exist, so every write fails and is retried.
    let refused = controller(&[format!("--configmap-namespace={ns}-missing")]);
    let errors = |scrape: &Scrape| sum(scrape, "controller_runtime_reconcile_errors_total{controller=\"publisher\"");
    let failing = || async { Scrape::try_of(&refused).filter(|scrape| errors(scrape) >= 1.0) };
    let first = wait_until(SOON, failing).await.unwrap_or_else(|| panic!("no failed pass:\n{}", refused.logs()));
    let again = || async { Scrape::try_of(&refused).filter(|scrape| errors(scrape) > errors(&first)) };
    let second = wait_until(SOON, again).await.unwrap_or_else(|| panic!("no retry:\n{}", refused.logs()));
    let firing = ["LocalRegistryPublisherNotPublishing", "LocalRegistryPublisherReconcileErrors"];
    rules.evaluate("refused", &[("refused", &first, &second)], &firing);
    drop(refused);

    // Fighting: two controllers publish one ConfigMap with different help URLs, each undoing the other's write.
    let fighter = |name: &str| {
        controller(&[format!("--configmap-namespace={ns}"), format!("--help-url=https://{name}.example/registry")])
    };
    let (one, two) = (fighter("one"), fighter("two"));
    for process in [&one, &two] {
        wait_until(SOON, || answering(process)).await.expect("a fighter answers");
    }
    let conflicts = |scrape: &Scrape| sum(scrape, "local_registry_publisher_write_conflicts_total");
    let (one_first, two_first) = (Scrape::of(&one), Scrape::of(&two));
    let before = conflicts(&one_first) + conflicts(&two_first);
    // Each holds its writes back after its third correction, for 30 s, then fights again.
    let fought = || async {
        let (a, b) = (Scrape::of(&one), Scrape::of(&two));
        (conflicts(&a) + conflicts(&b) >= before + 3.0).then_some((a, b))
    };
    let (one_second, two_second) = wait_until(Duration::from_secs(150), fought)
        .await
        .unwrap_or_else(|| panic!("they never held back three times:\n{}", one.logs()));
    let fighters = [("one", &one_first, &one_second), ("two", &two_first, &two_second)];
    rules.evaluate("fighting", &fighters, &["LocalRegistryPublisherWriteConflicts"]);
    drop((one, two));

    // No leader: the Lease is held by another holder that renewed it just now, for longer than the test runs.
    let lease = json!({
        "metadata": {"name": "local-registry-publisher"},
        "spec": {"holderIdentity": "elsewhere", "leaseDurationSeconds": 120,
            "renewTime": k8s_openapi::jiff::Timestamp::now().to_string()},
    });
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(admin.clone(), &ns);
    leases.create(&PostParams::default(), &serde_json::from_value(lease).unwrap()).await.expect("the Lease");
    let standby = controller(&[
        format!("--configmap-namespace={ns}"),
        "--leader-elect".into(),
        format!("--leader-elect-resource-namespace={ns}"),
        "--leader-elect-lease-duration=120s".into(),
    ]);
    let leader = "leader_election_master_status{name=\"local-registry-publisher\"}";
    metrics_holding(&standby, &[&format!("{leader} 0")]).await;
    let (first, second) = two_scrapes(&standby).await;
    assert_eq!(second.samples().get(leader), Some(&0.0), "{}", second.text);
    // The ConfigMap still names the registry the fighters published, which the standby reads: only no leader holds.
    rules.evaluate("no-leader", &[("standby", &first, &second)], &["LocalRegistryPublisherNoLeader"]);
    drop(standby);

    // Stuck: two node agents keeping their NodePullState, one through a proxy that freezes; after the freeze its
    // node's containerd config changes, so its next pass must write, and that write never returns.
    let crd = std::process::Command::new(support::binary::BINARY).arg("crd").output().expect("the CRD");
    ok(stdin_tool("kubectl", &["apply", "--server-side", "-f", "-"], &ok(crd)));
    plan_configmap(&admin, &ns).await;
    let upstream = plane.server().trim_start_matches("https://").parse().expect("the API server's address");
    let proxy = support::proxy::FreezingProxy::start(upstream).await;
    let reads =
        |dir: &str| format!("version = 3\n[plugins.'io.containerd.cri.v1.images'.registry]\n  config_path = '{dir}'\n");
    let agent = |name: &str, kubeconfig: String| {
        let dir = rules.dir.join(name);
        std::fs::create_dir_all(dir.join("hosts")).expect("a hosts directory");
        std::fs::write(dir.join("config.toml"), reads("/etc/containerd/certs.d")).expect("containerd's config");
        let flags = [
            "node-agent".into(),
            kubeconfig,
            "--node-plan-configmap=plan".into(),
            format!("--config-path-mount={}", dir.join("hosts").display()),
            format!("--containerd-config={}", dir.join("config.toml").display()),
            "--config-path=/etc/containerd/certs.d".into(),
            format!("--node-name=alerts-{name}"),
            "--resync=1s".into(),
        ];
        Controller::start_in_namespace(&ns, &flags)
    };
    let healthy = agent("healthy", kubeconfig.clone());
    let via_proxy =
        format!("--kubeconfig={}", support::kubeconfig_via(proxy.address, &format!("{ns}-stuck")).display());
    let stuck = agent("stuck", via_proxy);
    let states: Api<local_registry_publisher::node::api::state::NodePullState> = Api::namespaced(admin.clone(), &ns);
    for name in ["alerts-healthy", "alerts-stuck"] {
        let kept = wait_until(SOON, || async { states.get_opt(name).await.ok().flatten() }).await;
        assert!(kept.is_some(), "{name} keeps its NodePullState:\n{}", stuck.logs());
    }
    // A pass begun after its state was seen proves the write's answer came back: a write the proxy froze in flight
    // would stall the agent before it reads the changed config (the race a loaded machine lost).
    let last_sync_sample = "local_registry_publisher_node_last_sync_timestamp_seconds";
    let seen = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("the clock").as_secs_f64();
    let passed = || async { stuck.metric(last_sync_sample).filter(|at| *at > seen) };
    wait_until(SOON, passed).await.unwrap_or_else(|| panic!("no pass after its state was written:\n{}", stuck.logs()));
    proxy.freeze();
    std::fs::write(rules.dir.join("stuck/config.toml"), reads("/etc/elsewhere")).expect("containerd's config");
    metrics_holding(&stuck, &["local_registry_publisher_node_containerd_config{state=\"elsewhere\"} 1"]).await;
    let (healthy_first, healthy_second) = two_scrapes(&healthy).await;
    let (stuck_first, stuck_second) = two_scrapes(&stuck).await;
    let last_sync = |scrape: &Scrape| scrape.samples().get(last_sync_sample).copied();
    assert!(last_sync(&healthy_second) > last_sync(&healthy_first), "the healthy agent passes every second");
    assert_eq!(last_sync(&stuck_second), last_sync(&stuck_first), "the stuck agent has stopped passing");
    rules.evaluate("healthy", &[("healthy", &healthy_first, &healthy_second)], &[]);
    let agents = [("healthy", &healthy_first, &healthy_second), ("stuck", &stuck_first, &stuck_second)];
    let firing = ["LocalRegistryPublisherAgentNotPassing", "LocalRegistryPublisherContainerdReadsElsewhere"];
    rules.evaluate("stuck", &agents, &firing);
}
