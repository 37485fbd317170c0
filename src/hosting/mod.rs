//! The KEP-1755 `localRegistryHosting.v1` document: its fields, rendering it so every known reader accepts it,
//! parsing it the way readers do, and the rules a value must pass before it is published. [`configmap`] is the
//! ConfigMap that carries it.

use std::fmt;

use serde::{Deserialize, Serialize};

pub mod address;
pub mod configmap;

pub use configmap::DATA_KEY;

/// One field of the document. Matches over it are exhaustive, so a new field makes the compiler list every place
/// that must handle it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Field {
    /// Where tools outside the cluster push, `host[:port]`.
    Host,
    /// What the node's container runtime pulls from; readers fall back to `host`.
    HostFromContainerRuntime,
    /// Where pods reach the registry.
    HostFromClusterNetwork,
    /// A URL explaining how to set up or debug the registry.
    Help,
}

impl Field {
    /// Every field, in the order they are rendered. `host` comes first: line-based readers take the first `host:`.
    pub const ALL: [Field; 4] =
        [Field::Host, Field::HostFromContainerRuntime, Field::HostFromClusterNetwork, Field::Help];

    /// The field's YAML key.
    pub fn key(self) -> &'static str {
        match self {
            Field::Host => "host",
            Field::HostFromContainerRuntime => "hostFromContainerRuntime",
            Field::HostFromClusterNetwork => "hostFromClusterNetwork",
            Field::Help => "help",
        }
    }

    /// The registry Service annotation that overrides the derived value.
    pub fn annotation(self) -> &'static str {
        use crate::keys::service;
        match self {
            Field::Host => service::HOST,
            Field::HostFromContainerRuntime => service::HOST_FROM_CONTAINER_RUNTIME,
            Field::HostFromClusterNetwork => service::HOST_FROM_CLUSTER_NETWORK,
            Field::Help => service::HELP,
        }
    }

    /// Whether its value is a registry address (`host[:port]`) images are pushed to or pulled from.
    pub fn is_address(self) -> bool {
        match self {
            Field::Host | Field::HostFromContainerRuntime | Field::HostFromClusterNetwork => true,
            Field::Help => false,
        }
    }

    /// Checks one value on its own: every rule of this field that does not depend on the other fields.
    pub fn check(self, value: &str) -> Result<(), String> {
        if self.is_address() {
            validate_host(value)?
        } else {
            validate_help(value)?
        }
        // The knative Tiltfile greps for "host:" and keeps every matching line, so only the host line may match.
        if self != Field::Host && value.contains("host:") {
            return Err("must not contain the text \"host:\", which line-based readers take for the host line".into());
        }
        Ok(())
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// One `localRegistryHosting.v1` document. Empty fields are `None` and never rendered: Skaffold counts a
/// present-but-empty `host` as a registry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalRegistryHostingV1 {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_from_container_runtime: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_from_cluster_network: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub help: Option<String>,
}

/// A value that a known reader would reject or misread.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field} {value:?}: {reason}")]
pub struct InvalidValue {
    pub field: Field,
    pub value: String,
    pub reason: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("not a YAML mapping of strings: {0}")]
    Yaml(String),
}

impl LocalRegistryHostingV1 {
    /// A document that only points at help, published while no registry is usable.
    pub fn help_only(help: String) -> Self {
        Self { help: Some(help), ..Self::default() }
    }

    pub fn get(&self, field: Field) -> Option<&str> {
        match field {
            Field::Host => self.host.as_deref(),
            Field::HostFromContainerRuntime => self.host_from_container_runtime.as_deref(),
            Field::HostFromClusterNetwork => self.host_from_cluster_network.as_deref(),
            Field::Help => self.help.as_deref(),
        }
    }

    pub fn set(&mut self, field: Field, value: Option<String>) {
        let slot = match field {
            Field::Host => &mut self.host,
            Field::HostFromContainerRuntime => &mut self.host_from_container_runtime,
            Field::HostFromClusterNetwork => &mut self.host_from_cluster_network,
            Field::Help => &mut self.help,
        };
        *slot = value;
    }

    pub fn is_empty(&self) -> bool {
        self.fields().all(|(_, value)| value.is_none())
    }

    /// Each field with its value, in render order. Destructured whole, so a new field cannot be left out.
    pub fn fields(&self) -> impl Iterator<Item = (Field, Option<&str>)> {
        let Self { host, host_from_container_runtime, host_from_cluster_network, help } = self;
        [
            (Field::Host, host),
            (Field::HostFromContainerRuntime, host_from_container_runtime),
            (Field::HostFromClusterNetwork, host_from_cluster_network),
            (Field::Help, help),
        ]
        .into_iter()
        .map(|(field, value)| (field, value.as_deref()))
    }

    /// Checks every rule; the first broken one is returned.
    pub fn validate(&self) -> Result<(), InvalidValue> {
        for (field, value) in self.fields() {
            let Some(value) = value else { continue };
            field.check(value).map_err(|reason| InvalidValue { field, value: value.to_string(), reason })?;
        }
        if let (Some(runtime), None, None) =
            (&self.host_from_container_runtime, &self.host, &self.host_from_cluster_network)
        {
            return Err(InvalidValue {
                field: Field::HostFromContainerRuntime,
                value: runtime.clone(),
                reason: "needs host or hostFromClusterNetwork beside it: a way to pull but none to push".into(),
            });
        }
        Ok(())
    }

    /// Block YAML, one `key: "value"` line per non-empty field, `host` first. Call [`validate`](Self::validate)
    /// first: validated values hold no character that needs escaping.
    pub fn render(&self) -> String {
        self.fields().filter_map(|(field, value)| value.map(|v| format!("{field}: \"{v}\"\n"))).collect()
    }

    /// Parses a document the way readers do: a YAML mapping, unknown keys ignored.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        serde_saphyr::from_str(text).map_err(|e| ParseError::Yaml(e.to_string()))
    }
}

impl fmt::Display for LocalRegistryHostingV1 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> =
            self.fields().filter_map(|(field, value)| value.map(|v| format!("{field}={v}"))).collect();
        if parts.is_empty() { f.write_str("(empty)") } else { f.write_str(&parts.join(" ")) }
    }
}

/// `name[:port]` as container tools parse an image reference's registry part (see [`address`]), plus what readers
/// make of names: a bare one is a Docker Hub namespace.
fn validate_host(value: &str) -> Result<(), String> {
    address::check(value)?;
    let name = value.split(':').next().unwrap_or_default();
    if name == "unknown" {
        return Err("\"unknown\" is a placeholder, not a host".into());
    }
    // Docker normalises a first path component without a dot or a port, other than localhost, to docker.io/<it>.
    // (An IP address always has a dot or a colon, so only names get here.)
    if !value.contains(':') && !name.contains('.') && name != "localhost" {
        return Err(format!(
            "a bare name like {name:?} is read as a Docker Hub namespace: add a port, use a dotted name, or localhost"
        ));
    }
    Ok(())
}

/// The longest help URL published; readers print it, and a longer one is more likely an attack than a link.
const MAX_HELP_LEN: usize = 2048;

/// An absolute http(s) URL whose authority is a real host, in printable ASCII (percent-encode the rest).
fn validate_help(value: &str) -> Result<(), String> {
    if value.len() > MAX_HELP_LEN {
        return Err(format!("is {} characters long; at most {MAX_HELP_LEN}", value.len()));
    }
    let rest = value
        .strip_prefix("https://")
        .or_else(|| value.strip_prefix("http://"))
        .ok_or("must be an absolute http:// or https:// URL")?;
    if let Some(bad) = value.chars().find(|c| !c.is_ascii_graphic() || matches!(c, '"' | '\\')) {
        return Err(format!("must not contain {bad:?} (printable ASCII only; percent-encode the rest)"));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.is_empty() {
        return Err("the URL has no host".into());
    }
    if authority.contains('@') {
        return Err("must not carry user information (kube-public is readable by every user)".into());
    }
    address::check(&authority.to_ascii_lowercase())
        .map_err(|reason| format!("the URL's host {authority:?} {reason}"))?;
    Ok(())
}

#[cfg(test)]
mod grammar_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(host: &str, runtime: &str, cluster: &str, help: &str) -> LocalRegistryHostingV1 {
        let some = |s: &str| (!s.is_empty()).then(|| s.to_string());
        LocalRegistryHostingV1 {
            host: some(host),
            host_from_container_runtime: some(runtime),
            host_from_cluster_network: some(cluster),
            help: some(help),
        }
    }

    #[test]
    fn every_field_is_listed_once_in_render_order_and_reaches_its_own_value() {
        let mut document = LocalRegistryHostingV1::default();
        for (i, field) in Field::ALL.into_iter().enumerate() {
            document.set(field, Some(format!("value-{i}")));
        }
        let fields: Vec<(Field, Option<&str>)> = document.fields().collect();
        let expected: Vec<(Field, Option<String>)> =
            Field::ALL.into_iter().enumerate().map(|(i, f)| (f, Some(format!("value-{i}")))).collect();
        assert_eq!(fields.len(), Field::ALL.len(), "ALL lists every field of the document");
        for ((field, value), (wanted, wanted_value)) in fields.into_iter().zip(expected) {
            assert_eq!((field, value), (wanted, wanted_value.as_deref()));
            assert_eq!(document.get(field), value);
        }
        let keys: Vec<&str> = Field::ALL.iter().map(|f| f.key()).collect();
        assert_eq!(keys, ["host", "hostFromContainerRuntime", "hostFromClusterNetwork", "help"]);
        let addresses: Vec<bool> = Field::ALL.iter().map(|f| f.is_address()).collect();
        assert_eq!(addresses, [true, true, true, false]);
        let annotations: std::collections::BTreeSet<&str> = Field::ALL.iter().map(|f| f.annotation()).collect();
        assert_eq!(annotations.len(), 4, "each field its own annotation");
        assert!(annotations.contains(crate::keys::service::HOST_FROM_CLUSTER_NETWORK));
    }

    #[test]
    fn renders_block_yaml_in_reader_order_with_empty_fields_left_out() {
        let d = doc("localhost:5001", "", "registry.reg.svc.cluster.local:5000", "https://example.dev/registry");
        assert_eq!(
            d.render(),
            "host: \"localhost:5001\"\n\
             hostFromClusterNetwork: \"registry.reg.svc.cluster.local:5000\"\n\
             help: \"https://example.dev/registry\"\n"
        );
    }

    #[test]
    fn parses_what_it_renders_and_what_other_writers_write() {
        let d = doc("10.0.0.10:30500", "127.0.0.1:30500", "registry.reg.svc.cluster.local:5000", "http://x.dev/");
        assert_eq!(LocalRegistryHostingV1::parse(&d.render()).unwrap(), d);
        // kind's documented script: unquoted keys, a comment-free block, an unknown future key.
        let kind =
            "host: \"localhost:5001\"\nhelp: \"https://kind.sigs.k8s.io/docs/user/local-registry/\"\nfuture: 1\n";
        let parsed = LocalRegistryHostingV1::parse(kind).unwrap();
        assert_eq!(parsed.host.as_deref(), Some("localhost:5001"));
        assert!(LocalRegistryHostingV1::parse("host: [unclosed").is_err());
    }

    #[test]
    fn accepts_the_host_forms_readers_accept() {
        for ok in [
            "localhost",
            "localhost:5000",
            "registry.local",
            "registry:5000",
            "10.0.0.1:32000",
            "[::1]:5000",
            "my-reg.my-ns.svc.cluster.local:5000",
            "k3d-registry.localhost:5000",
        ] {
            assert_eq!(validate_host(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn rejects_host_forms_some_reader_rejects() {
        let cases = [
            ("", "empty"),
            ("http://localhost:5000", "scheme"),
            ("localhost:5000/", "path"),
            ("localhost:5000/team", "path"),
            ("Registry.local:5000", "lowercase"),
            ("registry", "Docker Hub"),
            ("0.0.0.0:5000", "listen address"),
            ("unknown:5000", "placeholder"),
            ("localhost:0", "port"),
            ("localhost:70000", "port"),
            ("localhost:http", "port"),
            ("::1:5000", "brackets"),
            ("reg istry:5000", "contain"),
            ("-bad.local:5000", "not valid in a DNS name"),
            ("[::]:5000", "unspecified"),
            ("[0:0::0]:5000", "unspecified"),
            ("[evil.example]:5000", "IPv6 address"),
            ("localhost:+5000", "plain digits"),
        ];
        for (value, reason) in cases {
            let error = validate_host(value).expect_err(value);
            assert!(error.contains(reason), "{value}: {error}");
        }
    }

    #[test]
    fn a_help_only_document_has_help_alone_and_an_empty_one_says_so() {
        let help = LocalRegistryHostingV1::help_only("https://x.dev/".into());
        assert_eq!(help, doc("", "", "", "https://x.dev/"));
        assert!(!help.is_empty());
        assert!(LocalRegistryHostingV1::default().is_empty());
        assert!(!doc("localhost:5001", "", "", "").is_empty());
        // How it reads in Events and logs.
        assert_eq!(help.to_string(), "help=https://x.dev/");
        assert_eq!(
            doc("localhost:5001", "", "r.ns.svc:5000", "").to_string(),
            "host=localhost:5001 hostFromClusterNetwork=r.ns.svc:5000"
        );
        assert_eq!(LocalRegistryHostingV1::default().to_string(), "(empty)");
    }

    #[test]
    fn help_must_be_an_absolute_http_url() {
        assert_eq!(validate_help("https://kind.sigs.k8s.io/docs/user/local-registry/"), Ok(()));
        assert_eq!(validate_help("http://wiki.example/registry?x=1"), Ok(()));
        // At most MAX_HELP_LEN characters: the longest is published, one more is not.
        let longest = format!("https://x.dev/{}", "a".repeat(MAX_HELP_LEN - "https://x.dev/".len()));
        assert_eq!((longest.len(), validate_help(&longest)), (MAX_HELP_LEN, Ok(())));
        assert!(validate_help(&format!("{longest}a")).unwrap_err().contains("at most 2048"));
        let long = format!("https://x.dev/{}", "a".repeat(10_000));
        for bad in [
            "kind.sigs.k8s.io",
            "ftp://x.dev",
            "https://",
            "https://@/",
            "https://user:secret@x.dev/",
            "https://x.dev/a b",
            "https://x.dev/\"q\"",
            "\u{feff}https://x.dev/",
            "https://x.dev/\u{202e}",
            "https://x.dev/\u{fffe}",
            "https://[::g]/",
            long.as_str(),
        ] {
            assert!(validate_help(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_the_host_line_may_contain_host_colon() {
        let error = doc("10.0.0.1:5000", "localhost:5000", "", "").validate().unwrap_err();
        assert_eq!(error.field, Field::HostFromContainerRuntime);
        assert!(error.reason.contains("line-based"));
        assert!(doc("", "", "r.ns.svc.cluster.local:5000", "http://localhost:8080/help").validate().is_err());
        assert_eq!(doc("localhost:5000", "127.0.0.1:5000", "", "").validate(), Ok(()));
    }

    #[test]
    fn a_runtime_host_alone_is_rejected() {
        assert!(doc("", "127.0.0.1:5000", "", "").validate().is_err());
        assert_eq!(doc("", "", "", "https://x.dev/help").validate(), Ok(()));
    }
}
