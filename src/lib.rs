//! local-registry-publisher keeps `kube-public/local-registry-hosting` (KEP-1755) true to the registry that runs in
//! the cluster, so Tilt, Skaffold, ctlptl and in-cluster builders find it with no configuration.
//!
//! - [`hosting`]: the `localRegistryHosting.v1` document and the rules its values must pass.
//! - [`registry`]: which Services are registries and what each would publish (pure).
//! - [`plan`]: what to write, given the registries and what is published (pure).
//! - [`controller`]: watches, the reconcile loop, Events.
//! - [`leader`]: leader election on a Lease; [`http`]: health probes and metrics; [`metrics`];
//!   [`metrics_auth`]: Kubernetes authentication and authorization in front of /metrics.
//! - [`config`]: flags; [`app`]: wiring for the binary; [`withdraw`]: the chart's uninstall hook.
//! - [`cli`]: `get` and `render` for registry users; [`readers`]: what each known reader makes of a document.
#![forbid(unsafe_code)]

pub mod app;
pub mod backoff;
pub mod cli;
pub mod config;
pub mod controller;
pub mod doctor;
pub mod health;
pub mod hosting;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod metrics_auth;
pub mod plan;
pub mod pod;
pub mod probe;
pub mod readers;
pub mod registry;
pub mod settings;
