//! The alerting rules: promtool's tests over written series, and over what the real binaries export in each state.

use super::*;

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
pub(crate) async fn controller_and_agent(
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

/// What must happen between two scrapes, so the interval the rule test extrapolates over holds a real step of the
/// system rather than a guessed sleep.
enum Step<'a> {
    /// The node agent passed again: its last-sync time moved.
    PassOf(&'a Controller),
    /// The process behind the proxy sent the API server a request again (a standby reading the Lease).
    RequestThrough(&'a support::proxy::FreezingProxy),
}

impl Step<'_> {
    /// A reading that grows when the step happens.
    fn reading(&self) -> Option<f64> {
        match self {
            Step::PassOf(agent) => agent.metric(LAST_SYNC),
            Step::RequestThrough(proxy) => Some(proxy.bytes_sent() as f64),
        }
    }
}

const LAST_SYNC: &str = "local_registry_publisher_node_last_sync_timestamp_seconds";

/// Two scrapes of each of `processes`, the second once `step` has happened after the first.
async fn scrapes_across<const N: usize>(processes: [&Controller; N], step: Step<'_>) -> [(Scrape, Scrape); N] {
    let firsts = processes.map(Scrape::of);
    let mark = step.reading();
    let stepped = || async { (step.reading() > mark).then_some(()) };
    wait_until(SOON, stepped).await.unwrap_or_else(|| panic!("no step between the scrapes: {mark:?}"));
    let mut seconds = processes.map(Scrape::of).into_iter();
    firsts.map(|first| (first, seconds.next().expect("a second scrape of each")))
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
            format!("--runtime-config={}", containerd.display()),
            "--config-path=/etc/containerd/certs.d".into(),
            "--resync=1s".into(),
        ],
    )
    .await;
    // Nothing published yet: only "not publishing" holds of the registry.
    metrics_holding(&controller, &["local_registry_publisher_node_mirrors_unusable 1"]).await;
    let [(first, second)] = scrapes_across([&controller], Step::PassOf(&agent)).await;
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
            "local_registry_publisher_node_runtime_config{state=\"elsewhere\"} 1",
        ],
    )
    .await;
    let firing = [
        "LocalRegistryPublisherMirrorUnusable",
        "LocalRegistryPublisherAddressRefused",
        "LocalRegistryPublisherLoopbackNodePortUnserved",
        "LocalRegistryPublisherNodeFileProblem",
        "LocalRegistryPublisherRuntimeReadsElsewhere",
    ];
    let [(controller_first, controller_second), (agent_first, agent_second)] =
        scrapes_across([&controller, &agent], Step::PassOf(&agent)).await;
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
    let controller_via = |kubeconfig: &str, flags: &[String]| {
        let own = [kubeconfig.to_string(), format!("--watch-namespaces={ns}")];
        Controller::start_in_namespace(&ns, &[&own[..], flags].concat())
    };
    let controller = |flags: &[String]| controller_via(&kubeconfig, flags);
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
    // Through a proxy, so its retries are seen: a standby exports nothing that moves while it waits.
    let upstream = plane.server().trim_start_matches("https://").parse().expect("the API server's address");
    let lease_proxy = support::proxy::FreezingProxy::start(upstream).await;
    let via = |proxy: &support::proxy::FreezingProxy, name: &str| {
        format!("--kubeconfig={}", support::kubeconfig_via(proxy.address, &format!("{ns}-{name}")).display())
    };
    let standby = controller_via(
        &via(&lease_proxy, "standby"),
        &[
            format!("--configmap-namespace={ns}"),
            "--leader-elect".into(),
            format!("--leader-elect-resource-namespace={ns}"),
            "--leader-elect-lease-duration=120s".into(),
        ],
    );
    let leader = "leader_election_master_status{name=\"local-registry-publisher\"}";
    metrics_holding(&standby, &[&format!("{leader} 0")]).await;
    // Its first pass reads the ConfigMap and exports what it names, which the rules read as "publishing".
    let reconciled = "controller_runtime_reconcile_total{controller=\"publisher\",result=\"success\"}";
    let passed = || async { Scrape::try_of(&standby).filter(|s| s.samples().get(reconciled) >= Some(&1.0)) };
    wait_until(SOON, passed).await.unwrap_or_else(|| panic!("the standby never passed:\n{}", standby.logs()));
    let [(first, second)] = scrapes_across([&standby], Step::RequestThrough(&lease_proxy)).await;
    assert_eq!(second.samples().get(leader), Some(&0.0), "{}", second.text);
    // The ConfigMap still names the registry the fighters published, which the standby reads: only no leader holds.
    rules.evaluate("no-leader", &[("standby", &first, &second)], &["LocalRegistryPublisherNoLeader"]);
    drop(standby);

    // Stuck: two node agents keeping their NodePullState, one through a proxy that freezes; after the freeze its
    // node's containerd config changes, so its next pass must write, and that write never returns.
    let crd = std::process::Command::new(support::binary::BINARY).arg("crd").output().expect("the CRD");
    ok(stdin_tool("kubectl", &["apply", "--server-side", "-f", "-"], &ok(crd)));
    plan_configmap(&admin, &ns).await;
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
            format!("--runtime-config={}", dir.join("config.toml").display()),
            "--config-path=/etc/containerd/certs.d".into(),
            format!("--node-name=alerts-{name}"),
            "--resync=1s".into(),
        ];
        Controller::start_in_namespace(&ns, &flags)
    };
    let healthy = agent("healthy", kubeconfig.clone());
    let stuck = agent("stuck", via(&proxy, "stuck"));
    let states: Api<local_registry_publisher::node::api::state::NodePullState> = Api::namespaced(admin.clone(), &ns);
    for name in ["alerts-healthy", "alerts-stuck"] {
        let kept = wait_until(SOON, || async { states.get_opt(name).await.ok().flatten() }).await;
        assert!(kept.is_some(), "{name} keeps its NodePullState:\n{}", stuck.logs());
    }
    // A pass begun after its state was seen proves the write's answer came back: a write the proxy froze in flight
    // would stall the agent before it reads the changed config (the race a loaded machine lost).
    let seen = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("the clock").as_secs_f64();
    let passed = || async { stuck.metric(LAST_SYNC).filter(|at| *at > seen) };
    wait_until(SOON, passed).await.unwrap_or_else(|| panic!("no pass after its state was written:\n{}", stuck.logs()));
    proxy.freeze();
    std::fs::write(rules.dir.join("stuck/config.toml"), reads("/etc/elsewhere")).expect("containerd's config");
    metrics_holding(&stuck, &["local_registry_publisher_node_runtime_config{state=\"elsewhere\"} 1"]).await;
    let [(healthy_first, healthy_second), (stuck_first, stuck_second)] =
        scrapes_across([&healthy, &stuck], Step::PassOf(&healthy)).await;
    let last_sync = |scrape: &Scrape| scrape.samples().get(LAST_SYNC).copied();
    assert_eq!(last_sync(&stuck_second), last_sync(&stuck_first), "the stuck agent has stopped passing");
    rules.evaluate("healthy", &[("healthy", &healthy_first, &healthy_second)], &[]);
    let agents = [("healthy", &healthy_first, &healthy_second), ("stuck", &stuck_first, &stuck_second)];
    let firing = ["LocalRegistryPublisherAgentNotPassing", "LocalRegistryPublisherRuntimeReadsElsewhere"];
    rules.evaluate("stuck", &agents, &firing);
}
