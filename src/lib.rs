//! local-registry-publisher keeps `kube-public/local-registry-hosting` (KEP-1755) true to the registry that runs in
//! the cluster, so Tilt, Skaffold, ctlptl and in-cluster builders find it with no configuration.
//!
//! The pure core (no I/O; given objects and settings, it decides):
//! - [`keys`]: the project's name and every label and annotation key it reads or writes;
//! - [`settings`]: what the core is told, a plain value; [`watching`]: how it says what it wants watched;
//! - [`hosting`]: the `localRegistryHosting.v1` document, its fields and rules, and the ConfigMap that carries it;
//! - [`registry`]: which Services are registries, what each would publish, and what the publisher watches;
//! - [`publish`]: the publisher's whole decision, in one call;
//! - [`pull`]: the published registry's pull credentials, for namespaces that asked for them;
//! - [`node`]: what each node's container runtime needs to pull every published address, and the node agent's
//!   writes of it.
//!
//! Around it:
//! - [`controller`]: one task per concern (the publisher, pull credentials, the node plan), each with its own
//!   watches, retries, Events and metrics, and `withdraw` for the uninstall hook; [`agent`]: the node agent;
//! - [`leader`]: leader election on a Lease; [`health`]: what the probes say; [`http`]: the probe and metrics
//!   endpoints; [`metrics`]; [`metrics_auth`]: authentication and authorization in front of /metrics;
//! - `events`: every concern's notices as Events, once each; [`escape`]: cluster text made safe for a terminal or
//!   a log;
//! - [`backoff`]: the one retry policy; [`pod`]: this process's name and namespace; [`memory`]: freed heap back to
//!   the system;
//! - [`config`]: flags; [`connection`]: the API client, one HTTP/2 connection; [`app`]: wiring for the binary;
//!   [`cli`]: `get`, `doctor` and `render` for registry users.
//!
//! One monotonic clock, tokio's `Instant`, times everything; wall time appears only in the timestamps /metrics
//! reports. docs/architecture.md maps the modules, the tasks and their watches.
// Two calls into the C library (memory::use_one_arena, memory::release_free_heap) are the only unsafe code, allowed
// there alone.
#![deny(unsafe_code)]

// The node agent writes a Linux node's containerd configuration; the CLI also builds for macOS and Windows.
#[cfg(target_os = "linux")]
pub mod agent;
pub mod app;
pub mod backoff;
pub mod cli;
pub mod config;
pub mod connection;
pub mod controller;
pub mod escape;
pub(crate) mod events;
pub mod health;
pub mod hosting;
pub mod http;
pub mod keys;
pub mod leader;
pub mod memory;
pub mod metrics;
pub mod metrics_auth;
pub mod node;
pub mod pod;
pub mod publish;
pub mod pull;
pub mod registry;
pub mod settings;
pub mod watching;
