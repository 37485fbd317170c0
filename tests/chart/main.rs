//! The Helm chart and plain manifests against the real control plane: lint, schema, rendering, server-side dry run,
//! install/upgrade/uninstall, and least-privilege RBAC proven by running the controller as the chart's
//! ServiceAccount.

#[path = "../support/mod.rs"]
mod support;

mod alerts;
mod cluster;
mod dashboard;
mod metrics_tls;
mod network_policy;
mod node_agent;
mod rbac;
mod records;
mod values;

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
