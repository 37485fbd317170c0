//! `render` and `render-pull-secret`: what the controller would write, without a cluster.

use std::collections::BTreeMap;
use std::io::Read;
use std::process::ExitCode;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use kube::core::SelectorExt;
use serde::Serialize;

use super::text::shout;
use super::{EXIT_INVALID, EXIT_NONE, EXIT_READER_REJECTS};
use crate::publish::{self, Action, Memory};
use crate::registry::{self, Cluster, MICROK8S, MINIKUBE};
use crate::settings::Settings;

/// `render`: the ConfigMap the controller would publish for the Services in `input` (YAML, several documents
/// allowed, other kinds ignored), offline: every Service counts as ready and every namespace as allowed, since
/// there is no cluster to ask.
pub fn render(input: &str, settings: &Settings) -> ExitCode {
    let text = match read_input(input) {
        Ok(text) => text,
        Err(error) => {
            shout!("error: cannot read {input}: {error}");
            return ExitCode::from(EXIT_INVALID);
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
                shout!("error: a Service in {input} is not valid: {error}");
                return ExitCode::from(EXIT_INVALID);
            }
        };
        let labels = service.metadata.labels.clone().unwrap_or_default();
        let id = registry::service_id(&service);
        let builtin = [MINIKUBE, MICROK8S].contains(&(id.namespace.as_str(), id.name.as_str()));
        if settings.registry_selector.matches(&labels) {
            cluster.labelled_services.push(Arc::new(service));
        } else if builtin && settings.builtin_registries {
            cluster.builtin_services.push(Arc::new(service));
        }
    }
    // Offline, every namespace counts as allowed and every Service as ready.
    let services = cluster.labelled_services.iter().chain(&cluster.builtin_services);
    cluster.allowed_namespaces = services.map(|s| Arc::new(registry::service_id(s).namespace)).collect();
    let mut registries = registry::registries(&cluster, settings);
    for registry in &mut registries.counted {
        registry.ready = true;
        if let Some(node_port) = needs_node_ip(registry, settings) {
            shout!(
                "error: {}: host would be <the node's InternalIP>:{node_port}, and offline there is no node to read \
                 it from: pass the address itself, for example --node-address 192.168.49.2",
                registry.id
            );
            return ExitCode::from(EXIT_INVALID);
        }
        if let Err(problem) = &registry.document {
            shout!("{}: {} ({})", registry.id, problem.message, problem.fault.as_str());
        }
    }
    let decision = publish::decide(&publish::Input::new(&registries, None, &Memory::default(), true, settings));
    match decision.action {
        Action::Apply { configmap, document: Some(_) } => {
            if let Some(published) = &decision.published {
                shout!("# from registry {}", published.registry);
            }
            let manifest =
                Manifest { api_version: "v1", kind: "ConfigMap", metadata: &configmap.metadata, data: &configmap.data };
            crate::cli::text::print_document(&crate::cli::text::yaml(&manifest));
            ExitCode::SUCCESS
        }
        _ if registries.counted.iter().any(|r| r.document.is_err()) => ExitCode::from(EXIT_READER_REJECTS),
        _ => {
            shout!("no registry Service in {input} matches {:?}", settings.registry_selector.to_string());
            ExitCode::from(EXIT_NONE)
        }
    }
}

/// `render-pull-secret`: a pull Secret for `servers`, with the password or token read from standard input.
pub fn render_pull_secret(servers: &[String], username: Option<&str>, name: &str, namespace: Option<&str>) -> ExitCode {
    for server in servers {
        if let Err(reason) = crate::hosting::Field::Host.check(server) {
            shout!("error: --server {server:?}: {reason}");
            return ExitCode::from(EXIT_INVALID);
        }
    }
    let mut input = String::new();
    if let Err(error) = std::io::stdin().read_to_string(&mut input) {
        shout!("error: cannot read the password or token from standard input: {error}");
        return ExitCode::from(EXIT_INVALID);
    }
    let secret = crate::pull::credentials::without_line_break(&input);
    if secret.is_empty() {
        shout!("error: standard input is empty: pipe in the password or token");
        return ExitCode::from(EXIT_INVALID);
    }
    let credentials = match crate::pull::Credentials::new(username.map(String::from), secret.to_string()) {
        Ok(credentials) => credentials,
        Err(why) => {
            shout!("error: {why}");
            return ExitCode::from(EXIT_INVALID);
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
    crate::cli::text::print_document(&crate::cli::text::yaml(&secret));
    ExitCode::SUCCESS
}

/// The node's port whose published host needs a node's InternalIP, when nothing else (a load balancer, an annotation)
/// gives the host: offline that address does not exist, and dropping `host` silently would mislead.
fn needs_node_ip(registry: &registry::Registry, settings: &Settings) -> Option<i32> {
    let host_missing = registry.document.as_ref().is_ok_and(|d| d.host.is_none());
    if !host_missing || !registry::needs_node_address(&registry.origin, settings) {
        return None;
    }
    registry.ports.node
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
