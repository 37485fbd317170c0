//! The node plan: what the controller publishes in one ConfigMap for every node's agent to apply. A plan of a
//! newer format than an agent knows is refused whole by it ([`PLAN_FORMAT`]).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The key of the plan in its ConfigMap.
pub const PLAN_KEY: &str = "plan.json";
/// The newest plan format this build writes and reads. A plan of a newer format is refused whole by an older agent,
/// which then touches nothing: a field it does not know could change what a file must say. A plan is written in the
/// oldest format that holds it (2 with a mirror's fallback `server`, 3 with a relay), so an agent one release behind
/// keeps working until a feature it lacks is used.
pub const PLAN_FORMAT: u32 = 3;

/// What every node's runtime needs to pull each published address.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePlan {
    /// [`PLAN_FORMAT`] of the controller that wrote it (plans written before it had one are format 1).
    #[serde(default = "first_format")]
    pub format: u32,
    /// One entry per address, sorted by address.
    pub hosts: Vec<HostEntry>,
    /// What every node's agent relays on the node's loopback, sorted by port (format 3).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub relays: Vec<RelayEntry>,
    /// The stamp (`--node-plan-stamp`) of the controller configuration that wrote it: an agent takes the plan as
    /// current only when it matches the stamp the chart put on the ConfigMap ([`crate::keys::chart::PLAN_STAMP`]).
    /// Agents that do not know it ignore it, so it needs no format of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stamp: Option<String>,
}

/// A registry every node's agent serves on the node's loopback, `127.0.0.1:<port>` and `[::1]:<port>`, relaying
/// each connection's bytes to the registry's ClusterIP as they are (TLS passes through; the agent reads no payload
/// and holds no credential). The port is the cluster admin's; the target is the Service's own ClusterIP.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RelayEntry {
    /// The loopback port.
    pub port: u16,
    /// The registry's Service, `namespace/name`: what the agent's metrics and messages name.
    pub registry: String,
    /// Where each connection is relayed to: the Service's ClusterIP and port.
    pub target: std::net::SocketAddr,
}

impl Default for NodePlan {
    fn default() -> Self {
        Self::of(Vec::new())
    }
}

fn first_format() -> u32 {
    1
}

/// One published address and where a node's runtime fetches it from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct HostEntry {
    /// As images name it, `host:port`: the name of its directory under containerd's `config_path`.
    pub address: String,
    /// `http://host:port` (or `https://` for a registry that serves TLS) the node dials instead.
    pub endpoint: Endpoint,
    /// The PEM CA bundle an `https://` endpoint's certificate chains to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca: Option<String>,
    /// For a mirror (`crate::node::mirror`): the upstream the node falls back to when `endpoint` fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<Endpoint>,
}

/// Where a node's runtime dials: `http://` or `https://` and a `host[:port]` (an IPv6 address in brackets), and
/// nothing else, so that it can name no other path and end no string of the file it is written into. It travels as
/// that URL; a plan holding any other text does not parse, and an agent keeps its last plan.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Endpoint(String);

impl Endpoint {
    /// `http://<authority>`, or `https://` with `tls`.
    pub fn new(tls: bool, authority: &str) -> Result<Self, String> {
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']');
        let bracketed = authority.starts_with('[') == authority.contains(']') && authority.matches('[').count() <= 1;
        if authority.is_empty()
            || authority.starts_with(['.', '-', ':'])
            || !authority.chars().all(allowed)
            || !bracketed
        {
            return Err(format!("{authority:?} is not a host[:port]"));
        }
        Ok(Self(format!("{}://{authority}", if tls { "https" } else { "http" })))
    }

    pub fn tls(&self) -> bool {
        self.0.starts_with("https://")
    }

    /// `host[:port]`.
    pub fn authority(&self) -> &str {
        self.0.split_once("://").map_or("", |(_, authority)| authority)
    }

    /// Whether its host is an IPv6 address.
    pub fn is_ipv6(&self) -> bool {
        self.authority().starts_with('[')
    }

    /// The URL.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for Endpoint {
    type Err = String;

    fn from_str(url: &str) -> Result<Self, String> {
        match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(authority), _) => Self::new(false, authority),
            (_, Some(authority)) => Self::new(true, authority),
            _ => Err(format!("{url:?} has no http:// or https://")),
        }
    }
}

impl TryFrom<String> for Endpoint {
    type Error = String;

    fn try_from(url: String) -> Result<Self, String> {
        url.parse()
    }
}

/// The entry unit tests start from: `address` fetched from `endpoint`, no CA, no fallback.
#[cfg(test)]
impl HostEntry {
    pub(crate) fn plain(address: &str, endpoint: &str) -> Self {
        Self { address: address.into(), endpoint: endpoint.into(), ca: None, server: None }
    }
}

/// Test fixtures name endpoints as text: one that does not parse is a broken fixture.
#[cfg(test)]
impl From<&str> for Endpoint {
    fn from(url: &str) -> Self {
        url.parse().unwrap_or_else(|why| panic!("a fixture's endpoint: {why}"))
    }
}

#[cfg(test)]
impl PartialEq<&str> for Endpoint {
    fn eq(&self, url: &&str) -> bool {
        self.0 == *url
    }
}

impl From<Endpoint> for String {
    fn from(endpoint: Endpoint) -> String {
        endpoint.0
    }
}

impl NodePlan {
    /// The plan of `hosts` (sorted), in the oldest format that holds them.
    pub fn of(hosts: Vec<HostEntry>) -> Self {
        Self::with_relays(hosts, Vec::new())
    }

    /// The plan of `hosts` and `relays` (each sorted), in the oldest format that holds them.
    pub fn with_relays(hosts: Vec<HostEntry>, relays: Vec<RelayEntry>) -> Self {
        let format = if !relays.is_empty() {
            3
        } else if hosts.iter().any(|entry| entry.server.is_some()) {
            2
        } else {
            1
        };
        Self { format, hosts, relays, stamp: None }
    }

    /// Whether this plan is the one the controller configuration `wanted` (the ConfigMap's stamp annotation) has
    /// written; without a stamp wanted (a ConfigMap the chart did not make) any plan the controller wrote is.
    pub fn written_for(&self, wanted: Option<&str>) -> bool {
        wanted.is_none_or(|wanted| self.stamp.as_deref() == Some(wanted))
    }

    /// The plan as its ConfigMap holds it.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_is_a_scheme_and_a_host_port_and_nothing_that_could_leave_its_string() {
        for url in ["http://10.96.0.12:5000", "https://registry.example", "http://[fd00::12]:5000", "https://a-b.c:1"] {
            let endpoint: Endpoint = url.parse().unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(endpoint.to_string(), url);
            assert_eq!(endpoint.tls(), url.starts_with("https"));
            assert_eq!(endpoint.is_ipv6(), url.contains('['), "{url}");
        }
        assert_eq!("http://h:1".parse::<Endpoint>().map(|e| e.authority().to_string()), Ok("h:1".into()));
        for bad in [
            "10.96.0.12:5000",
            "ftp://h",
            "http://",
            "http://h/path",
            "http://h\"]\nserver = \"x",
            "http://../x",
            "http://:5000",
            "http://-h",
            "http://h:5000 ",
            "http://[fd00::1",
            "http://[[fd00::1]]",
            "http://user@h",
        ] {
            assert!(bad.parse::<Endpoint>().is_err(), "{bad:?} was taken");
        }
        let plan = r#"{"format": 1, "hosts": [{"address": "a:5000", "endpoint": "http://h:5000/../x"}]}"#;
        assert!(NodePlan::from_json(plan).is_err(), "a plan with an endpoint that is no host:port does not parse");
        let plan = r#"{"format": 1, "hosts": [{"address": "a:5000", "endpoint": "http://h:5000"}]}"#;
        let read = NodePlan::from_json(plan).expect("a plan");
        assert_eq!(read.hosts[0].endpoint, Endpoint::new(false, "h:5000").expect("an endpoint"));
        assert!(read.to_json().contains("\"endpoint\": \"http://h:5000\""), "it is written as the URL");
        assert!(!read.to_json().contains("relays"), "a plan without relays says nothing of them");
    }

    #[test]
    fn a_plan_is_written_in_the_oldest_format_that_holds_it() {
        let relay =
            RelayEntry { port: 5000, registry: "r/registry".into(), target: "10.96.0.12:5000".parse().unwrap() };
        assert_eq!(NodePlan::of(vec![HostEntry::plain("a:1", "http://h:1")]).format, 1);
        let mirror = HostEntry { server: Some("https://a:1".into()), ..HostEntry::plain("a:1", "http://h:1") };
        assert_eq!(NodePlan::of(vec![mirror.clone()]).format, 2);
        let relayed = NodePlan::with_relays(vec![mirror], vec![relay.clone()]);
        assert_eq!(relayed.format, 3);
        assert!(relayed.format <= PLAN_FORMAT, "this build reads every format it writes");
        let text = relayed.to_json();
        assert!(text.contains("\"target\": \"10.96.0.12:5000\""), "{text}");
        assert_eq!(NodePlan::from_json(&text).expect("reads back"), relayed);
        let bad = r#"{"format": 3, "hosts": [], "relays": [{"port": 5000, "registry": "r/r", "target": "h:5000"}]}"#;
        assert!(NodePlan::from_json(bad).is_err(), "a relay's target is an IP address and port, never a name");
        let ipv6 =
            r#"{"format": 3, "hosts": [], "relays": [{"port": 1, "registry": "r/r", "target": "[fd00::12]:5000"}]}"#;
        assert!(NodePlan::from_json(ipv6).is_ok());
        let zero =
            r#"{"format": 3, "hosts": [], "relays": [{"port": 70000, "registry": "r/r", "target": "1.2.3.4:5"}]}"#;
        assert!(NodePlan::from_json(zero).is_err(), "a port is 16 bits");
    }
}
