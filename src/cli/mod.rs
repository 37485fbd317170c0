//! Commands for the people who use the registry, beside the controller: `get` (what each reader sees), `doctor`
//! (why), `render` (the ConfigMap the controller would publish for given Services, offline) and
//! `render-pull-secret`. Also a kubectl plugin: installed as `kubectl-registry_hosting` it runs as
//! `kubectl registry-hosting get`.
//!
//! Exit codes, for scripts: 0 published and every reader accepts it; 3 nothing published (or, for `render`, no
//! registry in the input); 4 published but some reader rejects or misreads it (or, for `render`, a registry has a
//! problem); 5 the cluster could not be read; 2 invalid flags or input.

pub mod doctor;
mod get;
pub mod probe;
pub mod readers;
mod render;

pub use get::get;
pub use render::{render, render_pull_secret};

pub const EXIT_INVALID: u8 = 2;
pub const EXIT_NONE: u8 = 3;
pub const EXIT_READER_REJECTS: u8 = 4;
pub const EXIT_UNREACHABLE: u8 = 5;
