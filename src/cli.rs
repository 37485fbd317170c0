//! Commands for the people who use the registry, beside the controller: `get` (what each reader sees) and `render`
//! (the ConfigMap the controller would publish for given Services, offline). Also a kubectl plugin: installed as
//! `kubectl-registry_hosting` it runs as `kubectl registry-hosting get`.
//!
//! Exit codes, for scripts: 0 published and every reader accepts it; 3 nothing published (or, for `render`, no
//! registry in the input); 4 published but some reader rejects or misreads it (or, for `render`, a registry has a
//! problem); 5 the cluster could not be read; 2 invalid flags.

use std::collections::BTreeMap;
use std::io::Read;
use std::process::ExitCode;
use std::sync::Arc;
use tokio::time::Instant;

use k8s_openapi::api::core::v1::{ConfigMap, Service};
use kube::Client;
use kube::api::Api;
use serde::Serialize;

use crate::config::{OutputFormat, selector_matches};
use crate::hosting::DATA_KEY;
use crate::plan::{self, Action, Existing, Readiness};
use crate::readers::{self, Verdict};
use crate::registry::{self, Cluster, MICROK8S, MINIKUBE};
use crate::settings::Settings;

pub const EXIT_NONE: u8 = 3;
pub const EXIT_READER_REJECTS: u8 = 4;
pub const EXIT_UNREACHABLE: u8 = 5;

#[derive(Debug, Serialize)]
struct Report {
    configmap: String,
    /// Who wrote it: our managed-by label's value, or the first field manager.
    #[serde(skip_serializing_if = "Option::is_none")]
    writer: Option<String>,
    ours: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    document: Option<String>,
    readers: Vec<Verdict>,
}

/// `get`: reads the published ConfigMap and says what each reader will use.
pub async fn get(client: Client, settings: &Settings, output: OutputFormat) -> ExitCode {
    let target = settings.target();
    let api: Api<ConfigMap> = Api::namespaced(client, &settings.configmap_namespace);
    let configmap = match api.get_opt(&settings.configmap_name).await {
        Ok(configmap) => configmap,
        Err(error) => {
            eprintln!("error: cannot read ConfigMap {target}: {error}");
            return ExitCode::from(EXIT_UNREACHABLE);
        }
    };
    let existing = configmap.as_ref().map(Existing::from_configmap);
    let text = existing.as_ref().and_then(|e| e.text.clone());
    let report = Report {
        configmap: target.clone(),
        writer: existing.as_ref().and_then(|e| e.writer.clone()),
        ours: existing.as_ref().is_some_and(|e| e.owned),
        readers: text.as_deref().map(readers::verdicts).unwrap_or_default(),
        document: text,
    };
    print_report(&report, output);
    if report.document.as_deref().is_none_or(|t| t.trim().is_empty()) {
        ExitCode::from(EXIT_NONE)
    } else if report.readers.iter().any(|v| v.problem.is_some()) {
        ExitCode::from(EXIT_READER_REJECTS)
    } else {
        ExitCode::SUCCESS
    }
}

fn print_report(report: &Report, output: OutputFormat) {
    match output {
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(report).unwrap_or_default()),
        OutputFormat::Yaml => print!("{}", serde_saphyr::to_string(report).unwrap_or_default()),
        OutputFormat::Text => {
            let Some(text) = &report.document else {
                println!("Nothing is published: ConfigMap {} does not exist or has no {DATA_KEY}.", report.configmap);
                return;
            };
            let writer = report.writer.as_deref().unwrap_or("an unknown writer");
            let whose =
                if report.ours { "this controller".to_string() } else { format!("{writer}, not this controller") };
            println!("ConfigMap {} (written by {whose}):", report.configmap);
            for line in text.lines() {
                println!("  {line}");
            }
            println!("\nWhat each reader will use:");
            for verdict in &report.readers {
                match (&verdict.uses, &verdict.problem, &verdict.note) {
                    (_, Some(problem), _) => println!("  {:<20} PROBLEM: {problem}", verdict.reader),
                    (Some(uses), None, _) => println!("  {:<20} {uses}", verdict.reader),
                    (None, None, note) => println!("  {:<20} - ({})", verdict.reader, note.as_deref().unwrap_or("")),
                }
            }
        }
    }
}

/// `render`: the ConfigMap the controller would publish for the Services in `input` (YAML, several documents
/// allowed, other kinds ignored), offline: every Service counts as ready and every namespace as allowed, since
/// there is no cluster to ask.
pub fn render(input: &str, settings: &Settings) -> ExitCode {
    let text = match read_input(input) {
        Ok(text) => text,
        Err(error) => {
            eprintln!("error: cannot read {input}: {error}");
            return ExitCode::from(2);
        }
    };
    let mut cluster = Cluster::default();
    for document in text.split("\n---") {
        let Ok(value) = serde_saphyr::from_str::<serde_json::Value>(document) else { continue };
        if value["kind"] != "Service" {
            continue;
        }
        let service: Service = match serde_json::from_value(value) {
            Ok(service) => service,
            Err(error) => {
                eprintln!("error: a Service in {input} is not valid: {error}");
                return ExitCode::from(2);
            }
        };
        let labels = service.metadata.labels.clone().unwrap_or_default();
        let id = registry::service_id(&service);
        let builtin = [MINIKUBE, MICROK8S].contains(&(id.namespace.as_str(), id.name.as_str()));
        if selector_matches(&settings.registry_selector, &labels) {
            cluster.labelled_services.push(Arc::new(service));
        } else if builtin && settings.builtin_registries {
            cluster.builtin_services.push(Arc::new(service));
        }
    }
    // Offline, every namespace counts as allowed and every Service as ready.
    let namespaces = cluster.labelled_services.iter().chain(&cluster.builtin_services).map(|s| registry::service_id(s));
    cluster.allowed_namespaces = namespaces.map(|id| id.namespace).collect();
    let mut registries = registry::registries(&cluster, settings);
    for registry in &mut registries {
        registry.ready = true;
    }
    for registry in &registries {
        if let Err(problem) = &registry.document {
            eprintln!("{}: {} ({})", registry.id, problem.message, problem.reason);
        }
    }
    let now = Instant::now();
    let mut readiness = Readiness::default();
    readiness.observe(&registries, now);
    let decision = plan::decide(&registries, None, &readiness, now, settings);
    match decision.action {
        Action::Apply { document, source } => {
            let configmap = plan::desired_configmap(Some(&document), settings);
            if let Some(source) = source {
                eprintln!("# from registry {source}");
            }
            let manifest =
                Manifest { api_version: "v1", kind: "ConfigMap", metadata: &configmap.metadata, data: &configmap.data };
            print!("{}", serde_saphyr::to_string(&manifest).unwrap_or_default());
            ExitCode::SUCCESS
        }
        _ if registries.iter().any(|r| r.document.is_err()) => ExitCode::from(EXIT_READER_REJECTS),
        _ => {
            eprintln!("no registry Service in {input} matches {:?}", settings.registry_selector);
            ExitCode::from(EXIT_NONE)
        }
    }
}

/// `render-pull-secret`: a pull Secret for `servers`, with the password or token read from standard input.
pub fn render_pull_secret(servers: &[String], username: Option<&str>, name: &str, namespace: Option<&str>) -> ExitCode {
    for server in servers {
        let probe = crate::hosting::LocalRegistryHostingV1 { host: Some(server.clone()), ..Default::default() };
        if let Err(problem) = probe.validate() {
            eprintln!("error: --server {server:?}: {}", problem.reason);
            return ExitCode::from(2);
        }
    }
    let mut input = String::new();
    if let Err(error) = std::io::stdin().read_to_string(&mut input) {
        eprintln!("error: cannot read the password or token from standard input: {error}");
        return ExitCode::from(2);
    }
    let secret = crate::pull::credentials::without_line_break(&input);
    if secret.is_empty() {
        eprintln!("error: standard input is empty: pipe in the password or token");
        return ExitCode::from(2);
    }
    let credentials = match crate::pull::Credentials::new(username.map(String::from), secret.to_string()) {
        Ok(credentials) => credentials,
        Err(why) => {
            eprintln!("error: {why}");
            return ExitCode::from(2);
        }
    };
    let config = crate::pull::credentials::docker_config(servers, &credentials);
    let secret = k8s_openapi::api::core::v1::Secret {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(name.to_string()),
            namespace: namespace.map(Into::into),
            ..Default::default()
        },
        type_: Some(crate::pull::SECRET_TYPE.into()),
        data: Some([(crate::pull::DATA_KEY.to_string(), k8s_openapi::ByteString(config.into_bytes()))].into()),
        ..Default::default()
    };
    print!("{}", serde_saphyr::to_string(&secret).unwrap_or_default());
    ExitCode::SUCCESS
}

fn read_input(input: &str) -> std::io::Result<String> {
    if input == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text)?;
        return Ok(text);
    }
    std::fs::read_to_string(input)
}

/// The ConfigMap as a manifest, apiVersion and kind first.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Manifest<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    data: &'a Option<BTreeMap<String, String>>,
}
