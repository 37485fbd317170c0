//! How the agent knows its own files in a runtime's configuration, whatever the runtime: two marking lines at the
//! top, the project's and the node plan's it follows (comments in TOML, text a PEM reader skips).

/// The first line of every file the agent writes for a runtime: how it knows its own (k3s deletes files with its own
/// header at start, so ours differs).
pub const HEADER: &str =
    "# Written by local-registry-publisher's node agent, which removes it when the address is withdrawn.";

/// The agent a file of ours belongs to, named on the line after [`HEADER`] by the node plan it follows: without it,
/// an agent of another release on the same node would take this one's files for its own and remove them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner(String);

impl Owner {
    /// The agents following the plan in ConfigMap `namespace/configmap` (Kubernetes names: no line breaks).
    pub fn new(namespace: &str, configmap: &str) -> Self {
        let name = |text: &str| -> String {
            text.chars().filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-')).collect()
        };
        Self(format!("# Following the node plan {}/{}.", name(namespace), name(configmap)))
    }

    /// `body` with our two marking lines before it.
    pub fn mark(&self, body: &str) -> String {
        format!("{HEADER}\n{}\n{body}", self.0)
    }

    pub fn marks(&self, text: &str) -> bool {
        let mut lines = text.lines();
        lines.next() == Some(HEADER) && lines.next() == Some(self.0.as_str())
    }
}
