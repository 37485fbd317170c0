//! `get`, `render` and the kubectl plugin against the real control plane (the registry users' issue): every exit
//! code, a foreign ConfigMap, a document a reader misreads, none at all, and an unreachable cluster.

mod support;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::PostParams;
use serde_json::json;
use support::binary::BINARY;
use support::*;
use testbed::ControlPlane;

fn run(args: &[&str], input: Option<&str>) -> Output {
    let mut child = Command::new(BINARY)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the binary");
    if let Some(input) = input {
        use std::io::Write;
        // A command that rejects its flags exits without reading its input.
        match child.stdin.take().expect("stdin").write_all(input.as_bytes()) {
            Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => panic!("write stdin: {error}"),
            _ => {}
        }
    }
    drop(child.stdin.take());
    child.wait_with_output().expect("wait")
}

fn get(s: &Scenario, extra: &[&str]) -> Output {
    let kubeconfig = format!("--kubeconfig={}", ControlPlane::shared().kubeconfig().display());
    let namespace = format!("--configmap-namespace={}", s.ns);
    let mut args = vec!["get", kubeconfig.as_str(), namespace.as_str()];
    args.extend(extra);
    run(&args, None)
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test]
async fn get_says_what_each_reader_uses_with_an_exit_code_for_each_case() {
    let s = Scenario::new("cli-get").await;
    // Nothing published.
    let none = get(&s, &[]);
    assert_eq!(none.status.code(), Some(3), "{}", stdout(&none));
    assert!(stdout(&none).contains("Nothing is published"));

    // Published by the controller: every reader accepts it.
    let run = s.start();
    s.apply(service("zot", registry_label(), json!({}), json!({"ports": [{"port": 5000}]}))).await;
    s.wait_cluster_host("zot", 5000).await;
    let ours = get(&s, &[]);
    let text = stdout(&ours);
    assert_eq!(ours.status.code(), Some(0), "{text}");
    assert!(text.contains("written by this controller") && text.contains("in-cluster builders"), "{text}");
    let report: serde_json::Value = serde_json::from_slice(&get(&s, &["-o", "json"]).stdout).expect("JSON");
    assert_eq!(report["ours"], true);
    assert_eq!(report["readers"][2]["uses"], s.cluster_host("zot", 5000).await);
    let yaml = stdout(&get(&s, &["-o", "yaml"]));
    assert!(yaml.contains("readers:"), "{yaml}");
    run.stop().await;
    s.configmaps().delete(TARGET, &Default::default()).await.expect("delete");

    // Another tool's document that line-based readers misread.
    let foreign: ConfigMap = serde_json::from_value(json!({"metadata": {"name": TARGET}, "data": {
        "localRegistryHosting.v1": "host: \"10.0.0.1:5000\"\nhostFromContainerRuntime: \"localhost:5000\"\n"}}))
    .unwrap();
    s.configmaps().create(&PostParams::default(), &foreign).await.expect("a foreign ConfigMap");
    let misread = get(&s, &[]);
    let text = stdout(&misread);
    assert_eq!(misread.status.code(), Some(4), "{text}");
    assert!(text.contains("not this controller") && text.contains("PROBLEM: 2 lines contain"), "{text}");
}

#[test]
fn get_and_doctor_against_an_unreachable_cluster_exit_5() {
    let dir = TempDir::new("unreachable");
    let kubeconfig = dir.0.join("unreachable.kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: \"https://127.0.0.1:9\", insecure-skip-tls-verify: true}\n\
         users:\n- name: u\n  user: {token: x}\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\n",
    )
    .unwrap();
    for command in ["get", "doctor"] {
        let output = run(&[command, &format!("--kubeconfig={}", kubeconfig.display())], None);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(5), "{command}: {stderr}");
        assert!(stderr.contains("cannot read ConfigMap kube-public/local-registry-hosting"), "{command}: {stderr}");
    }
    // A context named with escape sequences, in the kubeconfig or on the command line: shown, never obeyed.
    let hostile = dir.0.join("hostile.kubeconfig");
    let name = "\u{1b}]0;pwned\u{7}\u{1b}[2Jctx";
    let text = std::fs::read_to_string(&kubeconfig)
        .unwrap()
        .replace("current-context: c", "current-context: \"\\e]0;pwned\\a\\e[2Jctx\"");
    std::fs::write(&hostile, text).unwrap();
    for command in ["get", "doctor"] {
        for args in [
            vec![command.to_string(), format!("--kubeconfig={}", hostile.display())],
            vec![command.to_string(), format!("--kubeconfig={}", kubeconfig.display()), format!("--context={name}")],
        ] {
            let output = run(&args.iter().map(String::as_str).collect::<Vec<_>>(), None);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(5), "{args:?}: {stderr}");
            assert_eq!(raw_control(&stderr), None, "{args:?}: {stderr:?}");
            assert!(stderr.contains("\\u{1b}]0;pwned"), "{args:?}: the name is shown escaped: {stderr:?}");
        }
        // A flag's value the parser refuses is quoted in its answer: escaped too, even where the parser would colour
        // its answer (a terminal, here forced), which passes escape sequences through.
        let output = Command::new(BINARY)
            .args([command, &format!("--configmap-name={name}")])
            .env("CLICOLOR_FORCE", "1")
            .output()
            .expect("run the binary");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert_eq!(raw_control(&stderr), None, "{stderr:?}");
        assert!(stderr.contains("is not a valid object name"), "{stderr:?}");
    }
}

/// A directory of one test's own, removed when the test ends (passed or not).
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("lrp-cli-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const NODEPORT_REGISTRY: &str = "apiVersion: v1
kind: Service
metadata:
  name: registry
  namespace: registry
  labels: {local-registry-publisher.io/registry: \"true\"}
spec:
  type: NodePort
  ports: [{name: registry, port: 5000, nodePort: 30500}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: skipped}
";

#[tokio::test]
async fn render_prints_what_would_be_published_and_the_api_server_accepts_it() {
    let output = run(&["render", "-f", "-", "--node-address", "192.168.49.2"], Some(NODEPORT_REGISTRY));
    let manifest = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let configmap: ConfigMap = serde_saphyr::from_str(&manifest).expect("a ConfigMap manifest");
    assert_eq!(
        configmap.data.unwrap_or_default().get("localRegistryHosting.v1").map(String::as_str),
        Some(
            "host: \"192.168.49.2:30500\"\nhostFromContainerRuntime: \"127.0.0.1:30500\"\n\
             hostFromClusterNetwork: \"registry.registry.svc.cluster.local:5000\"\n"
        )
    );
    // The same manifest, applied as a cluster script would, with a server-side dry run.
    let plane = ControlPlane::shared();
    let mut kubectl = Command::new(plane.tools().join("kubectl"))
        .args(["apply", "--dry-run=server", "-f", "-"])
        .env("KUBECONFIG", plane.kubeconfig())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        kubectl.stdin.take().unwrap().write_all(manifest.as_bytes()).unwrap();
    }
    let applied = kubectl.wait_with_output().unwrap();
    assert!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));

    for invalid in [&["render"][..], &["get", "-o", "xml"][..], &["doctor", "--probe-namespace", "Bad_Name"][..]] {
        assert_eq!(run(invalid, None).status.code(), Some(2), "{invalid:?}: invalid flags");
    }
    let none = run(&["render", "-f", "-"], Some("apiVersion: v1\nkind: Service\nmetadata: {name: web}\n"));
    assert_eq!(none.status.code(), Some(3));
    let ambiguous = "apiVersion: v1\nkind: Service\nmetadata: {name: r, namespace: reg, labels: \
                     {local-registry-publisher.io/registry: \"true\"}}\nspec: {ports: [{port: 80}, {port: 5000}]}\n";
    let problem = run(&["render", "-f", "-"], Some(ambiguous));
    assert_eq!(problem.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&problem.stderr).contains("AmbiguousPort"));
}

#[test]
fn render_refuses_internal_ip_offline_instead_of_dropping_host() {
    // Offline there is no node, so no InternalIP: before, `host` was left out and the exit status said all is well.
    let output = run(&["render", "-f", "-", "--node-address", "internal-ip"], Some(NODEPORT_REGISTRY));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("registry/registry: host would be <the node's InternalIP>:30500"), "{stderr}");
    assert!(stderr.contains("--node-address 192.168.49.2"), "says what to pass instead: {stderr}");
    assert!(output.stdout.is_empty(), "nothing half-rendered: {}", String::from_utf8_lossy(&output.stdout));
    // A load balancer's address needs no node: the same setting renders.
    let balanced = NODEPORT_REGISTRY.replacen(
        "  type: NodePort\n  ports: [{name: registry, port: 5000, nodePort: 30500}]\n",
        "  type: LoadBalancer\n  ports: [{name: registry, port: 5000, nodePort: 30500}]\n\
         status: {loadBalancer: {ingress: [{ip: 10.0.0.9}]}}\n",
        1,
    );
    assert_ne!(balanced, NODEPORT_REGISTRY);
    let output = run(&["render", "-f", "-", "--node-address", "internal-ip"], Some(&balanced));
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let configmap: ConfigMap = serde_saphyr::from_str(&stdout(&output)).expect("a ConfigMap manifest");
    let document = configmap.data.unwrap_or_default().remove("localRegistryHosting.v1").unwrap_or_default();
    assert!(document.starts_with("host: \"10.0.0.9:5000\"\n"), "{document}");
}

#[tokio::test]
async fn installed_as_kubectl_registry_hosting_it_is_a_kubectl_plugin() {
    let s = Scenario::new("cli-plugin").await;
    let temp = TempDir::new("plugin");
    let dir = temp.0.join("plugins");
    std::fs::create_dir_all(&dir).unwrap();
    let plugin = dir.join("kubectl-registry_hosting");
    let _ = std::fs::remove_file(&plugin);
    std::os::unix::fs::symlink(BINARY, &plugin).expect("install the plugin");
    let plane = ControlPlane::shared();
    let path = format!("{}:{}", dir.display(), std::env::var("PATH").unwrap_or_default());
    let kubectl = |args: &[&str]| {
        Command::new(plane.tools().join("kubectl"))
            .args(args)
            .env("KUBECONFIG", plane.kubeconfig())
            .env("PATH", &path)
            .output()
            .unwrap()
    };
    let namespace = format!("--configmap-namespace={}", s.ns);
    let kubeconfig = format!("--kubeconfig={}", plane.kubeconfig().display());
    let output = kubectl(&["registry-hosting", "get", &kubeconfig, &namespace]);
    assert_eq!(output.status.code(), Some(3), "{}", String::from_utf8_lossy(&output.stderr));
    let bare = kubectl(&["registry-hosting"]);
    assert_eq!(bare.status.code(), Some(2), "as a plugin it never starts the controller");
}

fn doctor(s: &Scenario) -> (Option<i32>, String) {
    let (namespace, watch) = (format!("--configmap-namespace={}", s.ns), format!("--watch-namespaces={}", s.ns));
    let output = support::doctor(ControlPlane::shared(), &[&namespace, &watch, "--no-builtin-registries"]);
    (output.status.code(), format!("{}{}", stdout(&output), String::from_utf8_lossy(&output.stderr)))
}

fn registry_at(host: &str) -> serde_json::Value {
    service(
        "zot",
        registry_label(),
        json!({"local-registry-publisher.io/host": host}),
        json!({"ports": [{"port": 5000}]}),
    )
}

#[tokio::test]
async fn doctor_probes_a_real_registry_up_down_and_on_the_wrong_port_and_finds_a_stale_configmap() {
    let s = Scenario::new("cli-doctor").await;
    let nothing = doctor(&s);
    assert_eq!(nothing.0, Some(3), "{}", nothing.1);
    let registry = LocalRegistry::start(ControlPlane::shared().tools());
    let host = format!("127.0.0.1:{}", registry.port);
    s.apply(registry_at(&host)).await;
    // No controller runs yet: the registry is what one would publish, not what is published.
    let (code, text) = doctor(&s);
    assert_eq!(code, Some(3), "nothing is published until a controller runs: {text}");
    let unkept = format!("): would be published (no running controller pod found for {}/", s.ns);
    assert!(text.contains(&unkept) && !text.contains("): published"), "{text}");
    let run = s.start_in_pod().await;
    s.wait_host(&host).await;
    // The Event follows the write; doctor reports the last one.
    s.wait_event("zot", "Published").await;

    let (code, text) = doctor(&s);
    eprintln!("{text}");
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("a registry answers over HTTP (GET /v2/: 200); HTTPS: TLS failed"), "{text}");
    assert!(text.contains(&format!("{}/zot (labelled Service", s.ns)) && text.contains("): published"), "{text}");
    assert!(text.contains("the ConfigMap is current"), "{text}");
    assert!(text.contains("the controller's last Event on it: Published"), "{text}");

    // The wrong port: nothing listens there.
    let wrong = format!("127.0.0.1:{}", registry.port + 1);
    s.apply(registry_at(&wrong)).await;
    s.wait_host(&wrong).await;
    let (code, text) = doctor(&s);
    assert_eq!(code, Some(4), "{text}");
    assert!(text.contains(&format!("host {wrong}: cannot connect")), "{text}");
    // A loopback host that does not answer: doctor points to the chart value for a node that is not this machine.
    assert!(
        text.contains("hint: if this machine is not the registry's node") && text.contains("internal-ip"),
        "{text}"
    );

    // Back on the right port, then the registry goes down.
    s.apply(registry_at(&host)).await;
    s.wait_host(&host).await;
    drop(registry);
    let (code, text) = doctor(&s);
    assert_eq!(code, Some(4), "{text}");
    assert!(text.contains("Connection refused"), "{text}");

    // With the controller stopped, a change makes the ConfigMap stale.
    run.stop().await;
    s.apply(registry_at("registry.example:5000")).await;
    let (code, text) = doctor(&s);
    assert_eq!(code, Some(4), "{text}");
    assert!(text.contains("STALE: the controller would publish host=registry.example:5000"), "{text}");
}

#[tokio::test]
async fn render_pull_secret_writes_a_token_only_secret_with_an_entry_per_address_that_the_api_server_accepts() {
    let s = Scenario::new("cli-pull").await;
    let servers = ["--server", "localhost:30500", "--server", "registry.registry.svc.cluster.local:5000"];
    let mut args = vec!["render-pull-secret", "--name", "pull", "-n", s.ns.as_str()];
    args.extend(servers);
    let rendered = run(&args, Some("a-token\n"));
    assert_eq!(rendered.status.code(), Some(0), "{}", String::from_utf8_lossy(&rendered.stderr));
    let manifest = stdout(&rendered);
    let plane = ControlPlane::shared();
    let mut apply = Command::new(plane.tools().join("kubectl"))
        .args(["apply", "-f", "-"])
        .env("KUBECONFIG", plane.kubeconfig())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl");
    {
        use std::io::Write;
        apply.stdin.take().expect("stdin").write_all(manifest.as_bytes()).expect("write");
    }
    let applied = apply.wait_with_output().expect("kubectl apply");
    assert!(applied.status.success(), "{}\n{manifest}", String::from_utf8_lossy(&applied.stderr));

    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> = kube::Api::namespaced(s.client.clone(), &s.ns);
    let secret = secrets.get("pull").await.expect("the Secret was created");
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/dockerconfigjson"));
    let config: serde_json::Value = serde_json::from_slice(&secret.data.unwrap()[".dockerconfigjson"].0).unwrap();
    let auths = config["auths"].as_object().expect("auths");
    assert_eq!(auths.keys().collect::<Vec<_>>(), ["localhost:30500", "registry.registry.svc.cluster.local:5000"]);
    for entry in auths.values() {
        assert_eq!(entry["username"], "oauth2accesstoken", "the documented placeholder");
        assert_eq!(entry["password"], "a-token", "the trailing line break is not part of the token");
    }

    // A user name, and the errors: each exits 2 with the reason.
    let named = run(&["render-pull-secret", "--server", "localhost:5001", "--username", "ci"], Some("pw"));
    assert!(stdout(&named).contains("dockerconfigjson"), "{}", String::from_utf8_lossy(&named.stderr));
    let huge = "t".repeat(20 * 1024 * 1024);
    for (args, input, reason) in [
        (vec!["render-pull-secret", "--server", "localhost:5001"], "", "standard input is empty"),
        (vec!["render-pull-secret", "--server", "localhost:5001", "--username", ""], "t", "\"username\" is empty"),
        (vec!["render-pull-secret", "--server", "localhost:5001"], "   \t ", "only white space"),
        (vec!["render-pull-secret", "--server", "localhost:5001"], huge.as_str(), "longer than 65536 bytes"),
        (vec!["render-pull-secret", "--server", "localhost:5001"], "pass\u{1b}[2Jword", "control character"),
        (vec!["render-pull-secret", "--server", "localhost:5001", "--username", "ci\nadmin"], "t", "control character"),
        (vec!["render-pull-secret", "--server", "https://localhost:5001"], "t", "must not have a scheme"),
        (vec!["render-pull-secret"], "t", "--server"),
        (vec!["render-pull-secret", "--server", "localhost:5001", "--username", "a:b"], "t", "colon"),
        (vec!["--pull-secret-service-accounts=default"], "", "--pull-secrets"),
    ] {
        let output = run(&args, Some(input));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(reason), "{args:?}: {stderr}");
    }
}

/// Text a tenant with `edit` can write: an OSC 52 clipboard write, a window title, clear screen, a fake verdict,
/// and a bidirectional override.
const HOSTILE: &str = "\u{1b}]52;c;cGF5bG9hZA==\u{7}\u{1b}]0;pwned\u{7}\u{1b}[2J\u{1b}[HPUBLISHED OK\u{202e}\u{9b}1m";

/// Whether any byte of `text` could make a terminal do more than show a glyph (line breaks aside).
fn raw_control(text: &str) -> Option<char> {
    text.chars().find(|c| (c.is_control() && *c != '\n') || ('\u{202a}'..='\u{202e}').contains(c))
}

/// A scenario whose controller runs as if in a pod of the chart's, publishing a registry `zot` and told so.
async fn published_by_a_controller_pod(prefix: &str) -> (Scenario, Running) {
    let s = Scenario::new(prefix).await;
    let controller = s.start_in_pod().await;
    s.apply(service("zot", registry_label(), json!({}), json!({"ports": [{"port": 5000}]}))).await;
    s.wait_cluster_host("zot", 5000).await;
    s.wait_event("zot", "Published").await;
    (s, controller)
}

#[tokio::test]
async fn forged_events_and_hostile_text_never_reach_the_terminal_raw() {
    let (s, controller) = published_by_a_controller_pod("cli-hostile").await;
    // A tenant's forged Event: reportingController says it is the controller's, nothing ties it to a controller pod.
    let forged = json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "zot.forged"},
        "eventTime": "2030-01-01T00:00:00.000000Z",
        "reportingController": "local-registry-publisher", "reportingInstance": "not-a-controller-pod",
        "action": "Publish", "reason": "Published", "type": "Normal", "note": HOSTILE,
        "regarding": {"apiVersion": "v1", "kind": "Service", "namespace": s.ns, "name": "zot"}
    });
    // Created as JSON, which carries control characters (server-side apply's YAML would refuse them).
    let forged: k8s_openapi::api::events::v1::Event = serde_json::from_value(forged).expect("an Event");
    let events: kube::Api<k8s_openapi::api::events::v1::Event> = kube::Api::namespaced(s.client.clone(), &s.ns);
    events.create(&PostParams::default(), &forged).await.expect("the tenant's forged Event");
    let (code, text) = doctor(&s);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(raw_control(&text), None, "{text:?}");
    // Naming only the ConfigMap is enough: doctor judges with the running controller's settings (this namespace
    // watched and allowed, no built-in addons), read from its pod; its own defaults would call the ConfigMap stale.
    let kubeconfig = format!("--kubeconfig={}", ControlPlane::shared().kubeconfig().display());
    let output = run(&["doctor", &kubeconfig, &format!("--configmap-namespace={}", s.ns)], None);
    let report = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{report}");
    let source = format!("settings: those of controller pod {0}/lrp-controller-{0} (its arguments)", s.ns);
    assert!(report.contains(&source) && report.contains("the ConfigMap is current"), "{report}");
    assert!(!text.contains("PUBLISHED OK"), "the forged Event is not shown as the controller's: {text}");
    assert!(text.contains("the controller's last Event on it: Published: published to"), "{text}");
    assert!(
        text.contains("1 Event(s) on these registries claim to come from the controller but name none of its pods"),
        "{text}"
    );
    controller.stop().await;

    // Another tool's ConfigMap holding the same text: every output format escapes it; doctor and get agree.
    s.configmaps().delete(TARGET, &Default::default()).await.expect("delete");
    let hostile: ConfigMap = serde_json::from_value(json!({"metadata": {"name": TARGET}, "data": {
        "localRegistryHosting.v1": format!("host: \"localhost:5000\"\nhelp: \"{HOSTILE}\"\n")}}))
    .unwrap();
    s.configmaps().create(&PostParams::default(), &hostile).await.expect("a hostile ConfigMap");
    for format in ["text", "json", "yaml"] {
        let output = get(&s, &["-o", format]);
        let text = stdout(&output);
        assert_eq!(output.status.code(), Some(4), "{format}: a reader rejects the help value: {text}");
        assert_eq!(raw_control(&text), None, "{format}: {text:?}");
        assert!(text.contains("\\u{1b}]52") || text.contains("\\\\u{1b}]52"), "{format}: shown escaped: {text}");
    }
    let (code, text) = doctor(&s);
    assert_eq!((code, raw_control(&text)), (Some(4), None), "{text:?}");

    // A document that does not parse: both say a reader rejects it (4), neither that nothing is published (3).
    s.configmaps().delete(TARGET, &Default::default()).await.expect("delete");
    let broken: ConfigMap = serde_json::from_value(json!({"metadata": {"name": TARGET}, "data": {
        "localRegistryHosting.v1": "host: [unclosed"}}))
    .unwrap();
    s.configmaps().create(&PostParams::default(), &broken).await.expect("an unparsable ConfigMap");
    assert_eq!(get(&s, &[]).status.code(), Some(4));
    let (code, text) = doctor(&s);
    assert_eq!(code, Some(4), "{text}");
    assert!(text.contains("not YAML they can read"), "{text}");

    // render -f: a Service name from the input file is escaped on stderr too.
    let dir = TempDir::new("hostile-render");
    let file = dir.0.join("services.yaml");
    let name = "zot\u{1b}]0;pwned\u{7}";
    std::fs::write(
        &file,
        format!(
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: \"{}\"\n  namespace: reg\n  labels: {{local-registry-publisher.io/registry: \"true\"}}\n  annotations: {{local-registry-publisher.io/port: nope}}\nspec:\n  ports: [{{port: 5000}}, {{port: 5001}}]\n",
            name.replace('\u{1b}', "\\e").replace('\u{7}', "\\a")
        ),
    )
    .unwrap();
    let output = run(&["render", "-f", &file.display().to_string()], None);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(4), "{stderr}");
    assert_eq!(raw_control(&stderr), None, "{stderr:?}");
    assert!(stderr.contains("reg/zot\\u{1b}]0;pwned\\u{7}"), "{stderr}");
}

#[tokio::test]
async fn a_look_alike_controller_pod_that_an_edit_user_creates_is_reported_and_never_used() {
    let (s, controller) = published_by_a_controller_pod("cli-lookalike").await;
    // A user holding only `edit` in her own namespace: a pod with the chart's labels, sorted before the real one,
    // whose arguments would allow her namespace and send readers to her page, and an Event claiming to be its.
    let plane = ControlPlane::shared();
    let tenant_ns = plane.namespace(&s.client, "aaa-lookalike").await.expect("namespace");
    let tenant = edit_only_client(&s.client, plane.kubeconfig(), &tenant_ns).await;
    let mut args = controller_args(&s.settings);
    args.extend([format!("--allowed-namespaces={tenant_ns}"), "--help-url=https://evil.example/setup".into()]);
    let look_alike = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "aaa-controller", "labels": {
            "app.kubernetes.io/part-of": "local-registry-publisher", "app.kubernetes.io/component": "controller"}},
        "spec": {"containers": [{"name": "controller", "image": "local-registry-publisher:test", "args": args}]}});
    apply_in(&tenant, &tenant_ns, look_alike).await;
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(s.client.clone(), &tenant_ns);
    let running = wait_until(SOON, || async {
        (pods.get("aaa-controller").await.ok()?.status?.phase? == "Running").then_some(())
    });
    assert!(running.await.is_some(), "the look-alike pod runs");
    let (code, text) = doctor(&s);
    assert_eq!(code, Some(0), "{text}");
    let source = format!("settings: those of controller pod {0}/lrp-controller-{0} (its arguments)", s.ns);
    assert!(text.contains(&source), "{text}");
    let reported =
        format!("pod {tenant_ns}/aaa-controller looks like a controller (its labels) but its ServiceAccount");
    assert!(text.contains(&reported) && text.contains("not the controller, not used"), "{text}");
    assert!(!text.contains("evil.example"), "{text}");
    assert!(text.contains(&format!("controller pod {0}/lrp-controller-{0}: Running", s.ns)), "{text}");

    // A cluster-wide `view` user may not create SubjectAccessReviews: neither pod can be verified, so neither is
    // taken for the controller (the look-alike sorts first), and doctor says so.
    let kubectl = |args: &[&str]| ok(support::tool(plane, "kubectl", args));
    kubectl(&["create", "serviceaccount", "viewer", "-n", &tenant_ns]);
    let binding = format!("viewer-{tenant_ns}");
    let subject = format!("--serviceaccount={tenant_ns}:viewer");
    kubectl(&["create", "clusterrolebinding", &binding, "--clusterrole=view", &subject]);
    let token = kubectl(&["create", "token", "viewer", "-n", &tenant_ns]);
    let viewer = token_kubeconfig(token.trim(), &binding);
    let (namespace, watch) = (format!("--configmap-namespace={}", s.ns), format!("--watch-namespaces={}", s.ns));
    let listed = wait_until(SOON, || async {
        let output = run(&["doctor", &format!("--kubeconfig={}", viewer.display()), &namespace, &watch], None);
        let text = stdout(&output);
        text.contains("aaa-controller looks like a controller (its labels)").then_some(text)
    })
    .await;
    let text = listed.unwrap_or_else(|| panic!("the view user's doctor never listed the pods"));
    let unverified = format!(
        "pod {tenant_ns}/aaa-controller looks like a controller (its labels): Running, but could not be verified"
    );
    assert!(text.contains(&unverified) && text.contains("so it is not used"), "{text}");
    assert!(
        text.contains("settings: this command's flags (a pod that looks like the controller could not be verified"),
        "{text}"
    );
    assert!(!text.contains("evil.example") && !text.contains("settings: those of controller pod"), "{text}");
    kubectl(&["delete", "clusterrolebinding", &binding]);
    controller.stop().await;
    plane.delete_namespace(&s.client, &tenant_ns).await.expect("delete namespace");
}

#[tokio::test]
async fn doctor_names_a_namespace_label_under_the_projects_prefix_that_nothing_reads() {
    let s = Scenario::new("cli-labels").await;
    let plane = ControlPlane::shared();
    // The pull-secret label's name before its rename: it gets nothing, and says so.
    let renamed = plane.namespace(&s.client, "old-label").await.expect("namespace");
    ok(support::tool(
        plane,
        "kubectl",
        &["label", "namespace", &renamed, "local-registry-publisher.io/pull-secret=wanted"],
    ));
    let (code, text) = doctor(&s);
    assert_eq!(code, Some(3), "a label nothing reads is not a fault: {text}");
    let said = format!(
        "namespace {renamed}: label local-registry-publisher.io/pull-secret=\"wanted\" means nothing to \
         local-registry-publisher"
    );
    assert!(text.contains(&said), "{text}");
    assert!(text.contains("local-registry-publisher.io/pull-secret-wanted=true (this namespace gets"), "{text}");
    plane.delete_namespace(&s.client, &renamed).await.expect("delete namespace");
}

#[test]
fn make_install_puts_the_cli_and_its_kubectl_plugin_name_on_a_prefix() {
    let temp = TempDir::new("install");
    let prefix = temp.0.join("prefix");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut make = Command::new("make");
    make.args(["-C", &root.display().to_string(), "install", &format!("PREFIX={}", prefix.display())]);
    let install = support::as_a_user(&mut make)
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .output()
        .expect("run make install");
    let said = String::from_utf8_lossy(&install.stdout);
    assert!(install.status.success(), "{said}{}", String::from_utf8_lossy(&install.stderr));
    assert!(said.contains(&format!("add {}/bin to PATH", prefix.display())), "says PATH lacks it: {said}");
    for name in ["local-registry-publisher", "kubectl-registry_hosting"] {
        let version = Command::new(prefix.join("bin").join(name)).arg("--version").output().expect(name);
        assert_eq!(stdout(&version), format!("local-registry-publisher {}\n", env!("CARGO_PKG_VERSION")), "{name}");
    }
}

/// The line breaks and separators a value from the cluster may carry: LF, CR, NEL, and the line and paragraph
/// separators, each as YAML's double-quoted escape and as the character itself.
const BREAKS: [(&str, char); 5] =
    [("\\n", '\n'), ("\\r", '\r'), ("\\N", '\u{85}'), ("\\L", '\u{2028}'), ("\\P", '\u{2029}')];

#[tokio::test]
async fn line_breaks_from_the_cluster_never_start_a_line_of_their_own_in_any_output() {
    let s = Scenario::new("cli-breaks").await;
    // Lines of the report a forger would want: doctor's closing verdict and its heading.
    let fake = |escape: &str| format!("https://help.example/{escape}== Summary{escape}  all is well{escape}");
    let count = |text: &str, line: &str| text.lines().filter(|l| *l == line).count();
    for (escape, character) in BREAKS {
        // A foreign ConfigMap whose help value holds the break (a reader rejects it, so both commands say 4).
        let _ = s.configmaps().delete(TARGET, &Default::default()).await;
        let document = format!("host: \"localhost:5000\"\nhelp: \"{}\"\n", fake(escape));
        let configmap: ConfigMap = serde_json::from_value(json!({"metadata": {"name": TARGET},
            "data": {"localRegistryHosting.v1": document}}))
        .unwrap();
        s.configmaps().create(&PostParams::default(), &configmap).await.expect("the ConfigMap");
        let (code, report) = doctor(&s);
        assert_eq!(code, Some(4), "{escape}: {report}");
        assert_eq!(count(&report, "== Summary"), 1, "{escape}: a second summary:\n{report}");
        assert_eq!(count(&report, "  all is well"), 0, "{escape}: a forged verdict:\n{report}");
        assert!(!report.contains(character) || character == '\n', "{escape}: a raw {character:?}:\n{report:?}");
        for format in ["text", "json", "yaml"] {
            let output = stdout(&get(&s, &["-o", format]));
            assert!(!output.lines().any(|l| l.trim() == "== Summary"), "{escape} {format}:\n{output}");
            assert!(!output.contains(character) || character == '\n', "{escape} {format}: {output:?}");
            if format == "json" {
                let value: serde_json::Value = serde_json::from_str(&output).expect("still JSON");
                assert!(value.to_string().contains("== Summary"), "the same value, escaped: {output}");
            }
        }
    }
    // The character itself inside a quoted value, which YAML folds: the stored text is shown as one line.
    for (escape, character) in BREAKS {
        let _ = s.configmaps().delete(TARGET, &Default::default()).await;
        let document =
            format!("host: \"localhost:5000\"\nhelp: \"{}\"\n", fake(escape).replace(escape, &character.to_string()));
        let configmap: ConfigMap = serde_json::from_value(json!({"metadata": {"name": TARGET},
            "data": {"localRegistryHosting.v1": document}}))
        .unwrap();
        s.configmaps().create(&PostParams::default(), &configmap).await.expect("the ConfigMap");
        let (_, report) = doctor(&s);
        assert_eq!(count(&report, "== Summary"), 1, "{escape} raw: a second summary:\n{report}");
        assert_eq!(count(&report, "  all is well"), 0, "{escape} raw: a forged verdict:\n{report}");
        let output = stdout(&get(&s, &[]));
        assert!(
            !output.lines().any(|l| l.trim() == "== Summary" || l.trim() == "all is well"),
            "{escape} raw:\n{output}"
        );
    }
}
