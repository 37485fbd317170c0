//! `doctor`: why readers see what they see. From this machine it probes the published `host`; from the cluster it
//! lists every registry candidate with why it is or is not published (the controller's own snapshot and decision,
//! not a copy), whether the ConfigMap is ours, foreign or stale, and which controller pods run and lead (a pod is the
//! controller only when it may write the ConfigMap, see `cli::controllers`); with `--from-cluster` it probes
//! `hostFromClusterNetwork` from a short-lived pod and removes it; for each node, whether its runtime is configured to
//! pull the published addresses that need it (its agent's NodePullState, see `cli::nodes`). A closing summary
//! names the sections that found something wrong.
//!
//! Exit status as `get`: 0 all is well; 3 nothing is published; 4 something is wrong (said in the output);
//! 5 the cluster could not be read.
//!
//! Each section is read by `gather` (API calls only), judged by `judge` (pure: its lines, whether it is wrong,
//! the exit status) and printed here, escaped.

mod gather;
mod judge;

use std::process::ExitCode;

use kube::Client;

use super::controllers::controller_pods;
use super::text::{say, shout};
use super::{EXIT_UNREACHABLE, probe};
use crate::publish::{self, Memory};
use crate::registry;
use crate::settings::Settings;
use judge::Effective;

pub use gather::unknown_namespace_labels;

/// Where and with what image `--from-cluster` runs its probe pod.
pub struct FromCluster {
    pub image: String,
    pub namespace: String,
}

/// `flags` name the ConfigMap to check; what decides it are the settings of the running controller that publishes
/// that ConfigMap (read from its pod's arguments), so a chart value that differs from a flag default is no false
/// alarm. Without such a controller, the flags stand in for it. Each section is read, judged, then printed, in
/// the order a reader follows them.
pub async fn doctor(client: Client, flags: &Settings, from_cluster: Option<FromCluster>) -> ExitCode {
    let target = flags.target();
    let pods = controller_pods(&client, flags).await;
    let Effective { settings, node_plan, source, kept } = judge::effective_settings(flags, &pods);
    let settings = &settings;
    let document = match gather::published_text(&client, settings).await {
        Ok(text) => judge::Document::of(text),
        Err(error) => {
            shout!("error: cannot read ConfigMap {target}: {error}");
            return ExitCode::from(EXIT_UNREACHABLE);
        }
    };
    document.section(&target).show();
    // The sections that found something wrong, named in the closing summary.
    let mut wrong: Vec<&str> = Vec::new();

    let probed = match &document.document.host {
        Some(host) => Some(probe::probe(host).await),
        None => None,
    };
    if judge::from_this_machine(&document.document, probed.as_ref()).show() {
        wrong.push("From this machine");
    }

    say!();
    say!("== From the cluster (what the controller sees and decides)");
    say!("  settings: {source}");
    say!("  reading the registries, their endpoints and the ConfigMap...");
    let Some(cluster) = gather::snapshot(&client, settings).await else {
        shout!("error: the cluster's objects could not be read within {:?}", gather::CLUSTER_TIMEOUT);
        return ExitCode::from(EXIT_UNREACHABLE);
    };
    let registries = registry::registries(&cluster, settings);
    let stored = cluster.stored();
    let decision = publish::decide(&publish::Input::new(&registries, stored, &Memory::default(), true, settings));
    let ids = registries.counted.iter().map(|r| &r.id).chain(registries.ignored.iter().map(|r| &r.id));
    let events = gather::controller_events(&client, ids.map(|id| id.namespace.as_str())).await;
    let unknown_labels = gather::unknown_namespace_labels(&client).await;
    let found = judge::Cluster {
        target: &target,
        settings,
        registries: &registries,
        decision: &decision,
        stored,
        kept,
        events: &events,
        pods: &pods,
        unknown_labels: &unknown_labels,
    };
    if judge::from_the_cluster(&found).show() {
        wrong.push("From the cluster");
    }
    let leases = gather::leases(&client, &judge::lease_namespaces(&pods)).await;
    judge::controllers(&pods, &leases).show();

    let published = decision.published.as_ref();
    if let Some(pull) = &settings.pull_secrets {
        let Some(observed) = gather::pull_objects(&client, published, pull).await else {
            shout!("error: the pull credentials' objects could not be read within {:?}", gather::CLUSTER_TIMEOUT);
            return ExitCode::from(EXIT_UNREACHABLE);
        };
        if judge::pull_credentials(published, &observed, pull).show() {
            wrong.push("Pull credentials");
        }
    }
    let nodes = super::nodes::report(&client, published, decision.kept, node_plan.as_ref()).await;
    if !nodes.well {
        wrong.push("Node pulls");
    }

    if let Some(from_cluster) = from_cluster {
        say!();
        say!("== From a pod");
        match document.document.host_from_cluster_network.as_ref().or(document.document.host.as_ref()) {
            Some(address) => {
                let probed = match gather::start_probe_pod(&client, &from_cluster, address).await {
                    Ok(name) => {
                        let (namespace, image) = (&from_cluster.namespace, &from_cluster.image);
                        say!("  probing {address} from pod {namespace}/{name} (image {image})...");
                        gather::finish_probe_pod(&client, &from_cluster, &name).await
                    }
                    Err(not_started) => not_started,
                };
                if judge::from_a_pod(&probed).show() {
                    wrong.push("From a pod");
                }
            }
            None => say!("  nothing to probe: neither hostFromClusterNetwork nor host is published"),
        }
    }
    let (summary, status) = judge::summary(document.status, &wrong, &nodes.not_done);
    summary.show();
    ExitCode::from(status)
}
