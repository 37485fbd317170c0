//! Commands for the people who use the registry, beside the controller: `get` (what each reader sees), `doctor`
//! (why), `render` (the ConfigMap the controller would publish for given Services, offline) and
//! `render-pull-secret`. Also a kubectl plugin: installed as `kubectl-registry_hosting` it runs as
//! `kubectl registry-hosting get`.
//!
//! Exit codes, for scripts: 0 published and every reader accepts it; 3 nothing published (or, for `render`, no
//! registry in the input); 4 published but some reader rejects or misreads it (or, for `render`, a registry has a
//! problem); 5 the cluster could not be read; 2 invalid flags or input.

mod controllers;
pub mod doctor;
mod get;
mod nodes;
pub mod probe;
pub mod readers;
mod render;
mod section;
pub mod text;

pub use get::get;
pub use render::{render, render_pull_secret};

/// The exit status for a published text and the readers' verdicts on it: 3 when there is no text (or only white
/// space), 4 when a reader rejects or misreads it (one it cannot even parse included), else 0. `get` and `doctor`
/// both answer with it.
pub fn published_status(text: Option<&str>, verdicts: &[readers::Verdict]) -> u8 {
    if text.is_none_or(|t| t.trim().is_empty()) {
        EXIT_NONE
    } else if verdicts.iter().any(|v| v.problem.is_some()) {
        EXIT_READER_REJECTS
    } else {
        0
    }
}

/// The name kubectl finds a plugin by (`kubectl registry-hosting`).
pub const PLUGIN: &str = "kubectl-registry_hosting";

/// Whether the program was started under the plugin's name: `argv[0]` as kubectl or a shell passes it, a path with
/// `/` or, on Windows, `\` separators, and there with `.exe` (krew copies the binary under that name).
pub fn invoked_as_plugin(argv0: &str) -> bool {
    let file = argv0.rsplit(['/', '\\']).next().unwrap_or_default();
    let stem =
        file.len().checked_sub(4).filter(|&at| file.is_char_boundary(at) && file[at..].eq_ignore_ascii_case(".exe"));
    stem.map_or(file, |at| &file[..at]) == PLUGIN
}

pub const EXIT_INVALID: u8 = 2;
pub const EXIT_NONE: u8 = 3;
pub const EXIT_READER_REJECTS: u8 = 4;
pub const EXIT_UNREACHABLE: u8 = 5;

#[cfg(test)]
mod tests {
    use super::readers::Verdict;
    use super::{EXIT_NONE, EXIT_READER_REJECTS, invoked_as_plugin, published_status};

    #[test]
    fn the_exit_status_says_nothing_is_published_a_reader_rejects_it_or_all_is_well() {
        let verdict = |problem: Option<&str>| Verdict {
            reader: "Tilt",
            uses: None,
            problem: problem.map(str::to_string),
            note: None,
        };
        let (fine, rejects) = (verdict(None), verdict(Some("no host")));
        assert_eq!(published_status(None, &[]), EXIT_NONE);
        assert_eq!(published_status(Some(" \n"), std::slice::from_ref(&fine)), EXIT_NONE, "white space is nothing");
        assert_eq!(published_status(Some("host: localhost:5000"), &[fine.clone(), rejects]), EXIT_READER_REJECTS);
        assert_eq!(published_status(Some("host: localhost:5000"), &[fine]), 0);
    }

    #[test]
    fn the_plugin_name_is_recognised_however_the_system_spells_the_path() {
        for plugin in [
            "kubectl-registry_hosting",
            "/home/me/.krew/bin/kubectl-registry_hosting",
            "C:\\Users\\me\\.krew\\bin\\kubectl-registry_hosting.exe",
            "C:/Users/me/.krew/bin/kubectl-registry_hosting.EXE",
        ] {
            assert!(invoked_as_plugin(plugin), "{plugin}");
        }
        for other in
            ["local-registry-publisher", "C:\\bin\\local-registry-publisher.exe", "kubectl-registry_hosting.sh", ""]
        {
            assert!(!invoked_as_plugin(other), "{other}");
        }
    }
}
