//! The node plan: what the controller publishes in one ConfigMap for every node's agent to apply. A plan of a
//! newer format than an agent knows is refused whole by it ([`PLAN_FORMAT`]).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The key of the plan in its ConfigMap.
pub const PLAN_KEY: &str = "plan.json";
/// The newest plan format this build writes and reads. A plan of a newer format is refused whole by an older agent,
/// which then touches nothing: a field it does not know could change what a file must say. A plan is written in the
/// oldest format that holds it (2 only with a mirror's fallback `server`), so an agent one release behind keeps
/// working until a feature it lacks is used.
pub const PLAN_FORMAT: u32 = 2;

/// What every node's runtime needs to pull each published address.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePlan {
    /// [`PLAN_FORMAT`] of the controller that wrote it (plans written before it had one are format 1).
    #[serde(default = "first_format")]
    pub format: u32,
    /// One entry per address, sorted by address.
    pub hosts: Vec<HostEntry>,
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
        let format = if hosts.iter().any(|entry| entry.server.is_some()) { 2 } else { 1 };
        Self { format, hosts }
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
    }
}
