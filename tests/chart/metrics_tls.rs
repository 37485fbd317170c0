//! Metrics behind Kubernetes authentication, over HTTPS, as the chart wires them.

use super::*;
use crate::rbac::scoped_release;

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

/// The release's metrics TLS Secret written out as files (the pod's mount), when the release made one.
pub(crate) async fn metrics_tls_files(admin: &kube::Client, release: &str, ns: &str) -> Option<PathBuf> {
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
