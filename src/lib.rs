//! local-registry-publisher keeps `kube-public/local-registry-hosting` (KEP-1755) true to the registry that runs in
//! the cluster, so Tilt, Skaffold, ctlptl and in-cluster builders find it with no configuration.
//!
#![doc = include_str!("pure.md")]
//!
//! Around it:
//! - [`controller`]: one task per concern (the publisher, pull credentials, the node plan), each with its own
//!   watches, retries, Events and metrics, and `withdraw` for the uninstall hook; [`agent`]: the node agent, its
//!   node's runtime behind one trait (`agent::runtime`, containerd its one implementation, with a conformance
//!   suite every implementation passes);
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
pub mod kube_proxy;
pub mod leader;
pub mod memory;
pub mod metrics;
pub mod metrics_auth;
pub mod node;
pub mod pod;
pub mod publish;
pub mod pull;
pub mod registry;
pub mod selector;
pub mod settings;
pub mod watch;
pub mod watching;

#[cfg(test)]
mod layering_tests;
#[cfg(test)]
mod mock_api;
#[cfg(test)]
mod purity_tests;
