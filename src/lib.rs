//! local-registry-publisher keeps `kube-public/local-registry-hosting` (KEP-1755) true to the registry that runs in
//! the cluster, so Tilt, Skaffold, ctlptl and in-cluster builders find it with no configuration.
//!
//! - [`settings`]: what the pure core is told, a plain value.
//! - [`hosting`]: the `localRegistryHosting.v1` document and the rules its values must pass.
//! - [`registry`]: which Services are registries and what each would publish (pure).
//! - [`plan`]: what to write, given the registries and what is published (pure).
//! - [`pull`]: the published registry's pull credentials, for namespaces that asked for them (pure).
//! - [`controller`]: watches, the reconcile loop, Events, every ConfigMap write, the uninstall hook's `withdraw`.
//! - [`leader`]: leader election on a Lease; [`health`]: what the probes say; [`http`]: the probe and metrics
//!   endpoints; [`metrics`]; [`metrics_auth`]: Kubernetes authentication and authorization in front of /metrics.
//! - [`backoff`]: the one retry policy; [`pod`]: this process's name and namespace; [`memory`]: freed heap back
//!   to the system.
//! - [`config`]: flags; [`app`]: wiring for the binary.
//! - [`cli`]: `get` and `render` for registry users; [`readers`]: what each known reader makes of a document.
//!
//! One monotonic clock, tokio's `Instant`, times everything; wall time appears only in the timestamps /metrics
//! reports. docs/architecture.md maps the modules and the watches.
// Two calls into the C library (memory::use_one_arena, memory::release_free_heap) are the only unsafe code, allowed
// there alone.
#![deny(unsafe_code)]

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
pub mod memory;
pub mod metrics;
pub mod metrics_auth;
pub mod plan;
pub mod pod;
pub mod probe;
pub mod pull;
pub mod readers;
pub mod registry;
pub mod settings;
