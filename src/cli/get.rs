//! `get`: the published document, and what each known reader will use of it.

use std::process::ExitCode;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::Api;
use serde::Serialize;

use super::readers::{self, Verdict};
use super::text::{safe, say, shout};
use super::{EXIT_UNREACHABLE, published_status};
use crate::config::OutputFormat;
use crate::hosting::DATA_KEY;
use crate::hosting::configmap::Stored;
use crate::settings::Settings;

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
            shout!("error: cannot read ConfigMap {target}: {error}");
            return ExitCode::from(EXIT_UNREACHABLE);
        }
    };
    let existing = configmap.as_ref().map(Stored::read);
    let text = existing.as_ref().and_then(|e| e.text.clone());
    let verdicts = text.as_deref().map(readers::verdicts).unwrap_or_default();
    let status = published_status(text.as_deref(), &verdicts);
    // Every string that came from the cluster is made safe to print, whatever the output format.
    let report = Report {
        configmap: target.clone(),
        writer: existing.as_ref().and_then(|e| e.writer.as_deref()).map(|w| safe(w).into_owned()),
        ours: existing.as_ref().is_some_and(|e| e.owned),
        readers: verdicts.into_iter().map(safe_verdict).collect(),
        document: text.as_deref().map(safe_lines),
    };
    print_report(&report, output);
    ExitCode::from(status)
}

/// Each line made safe, the line breaks kept.
fn safe_lines(text: &str) -> String {
    text.lines().map(|line| safe(line).into_owned() + "\n").collect()
}

fn safe_verdict(verdict: Verdict) -> Verdict {
    let clean = |value: Option<String>| value.map(|v| safe(&v).into_owned());
    Verdict { uses: clean(verdict.uses), problem: clean(verdict.problem), note: clean(verdict.note), ..verdict }
}

fn print_report(report: &Report, output: OutputFormat) {
    match output {
        OutputFormat::Json => crate::cli::text::print_document(&crate::cli::text::json(report)),
        OutputFormat::Yaml => crate::cli::text::print_document(&crate::cli::text::yaml(report)),
        OutputFormat::Text => {
            let Some(text) = &report.document else {
                say!("Nothing is published: ConfigMap {} does not exist or has no {DATA_KEY}.", report.configmap);
                return;
            };
            let writer = report.writer.as_deref().unwrap_or("an unknown writer");
            let whose =
                if report.ours { "this controller".to_string() } else { format!("{writer}, not this controller") };
            say!("ConfigMap {} (written by {whose}):", report.configmap);
            for line in crate::cli::readers::document_lines(text) {
                say!("  {line}");
            }
            say!();
            say!("What each reader will use:");
            for verdict in &report.readers {
                match (&verdict.uses, &verdict.problem, &verdict.note) {
                    (_, Some(problem), _) => say!("  {:<20} PROBLEM: {problem}", verdict.reader),
                    (Some(uses), None, _) => say!("  {:<20} {uses}", verdict.reader),
                    (None, None, note) => say!("  {:<20} - ({})", verdict.reader, note.as_deref().unwrap_or("")),
                }
            }
        }
    }
}
