//! Which published addresses the nodes may be redirected for. containerd looks a `hosts.toml` up by the registry
//! name an image carries, so a file for an address sends every pull naming it, from every namespace, where the file
//! says: one for `registry.k8s.io` would send every node's pause, CoreDNS and kube-proxy pulls to whoever wrote it.
//! Naming the cluster's registry is what an allowed namespace may do; choosing where the whole cluster pulls other
//! names from is the cluster admin's. So a node file is written only for an address that names the registry's
//! Service alone ([`crate::registry::Registry::own_addresses`]: its ClusterIP and cluster DNS names, which the
//! cluster gives it; its nodePort, which the cluster allocates unless the Service's author asked for one; its
//! hostPort, which the pod's author chose; its load balancer's address as the load balancer reports it, which may
//! be one the author requested; each on the node addresses the controller's flags set), or that matches
//! a pattern the admin listed ([`AddressPattern`], chart value `nodeAgent.allowedAddresses`). Every other published
//! address stays published and gets no file, and the refusal is told.

use std::fmt;
use std::str::FromStr;

use crate::hosting::address::{Host, host_and_port};

/// An address a cluster admin lets node files be written for: `host:port` (that address only), `host` (that host
/// at any port or none), or either with `*.` before a DNS name (every name under it, not the name itself).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddressPattern {
    host: HostPattern,
    port: Option<u16>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum HostPattern {
    Exactly(Host),
    /// The names ending in `.<this>`.
    Under(String),
}

impl FromStr for AddressPattern {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, String> {
        let value = value.trim();
        let rule = "an allowed address is host[:port], optionally with \"*.\" before a DNS name";
        match value.strip_prefix("*.") {
            Some(rest) => match host_and_port(rest) {
                Ok((Host::Name(name), port)) => Ok(Self { host: HostPattern::Under(name), port }),
                Ok(_) => Err(format!("{value:?}: \"*.\" needs a DNS name after it, not an IP address ({rule})")),
                Err(why) => Err(format!("{value:?}: {rest:?} {why} ({rule})")),
            },
            None => match host_and_port(value) {
                Ok((host, port)) => Ok(Self { host: HostPattern::Exactly(host), port }),
                Err(why) => Err(format!("{value:?} {why} ({rule})")),
            },
        }
    }
}

impl fmt::Display for AddressPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            HostPattern::Exactly(host) => write!(f, "{host}")?,
            HostPattern::Under(name) => write!(f, "*.{name}")?,
        }
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

impl AddressPattern {
    /// Whether `address` (as published: `host[:port]`) is one this pattern allows.
    pub fn matches(&self, address: &str) -> bool {
        let Ok((host, port)) = host_and_port(address) else {
            return false;
        };
        if self.port.is_some_and(|wanted| port != Some(wanted)) {
            return false;
        }
        match (&self.host, &host) {
            (HostPattern::Exactly(wanted), host) => wanted == host,
            // A checked name has no empty label, so a head ending in '.' holds one label at least.
            (HostPattern::Under(suffix), Host::Name(name)) => {
                name.strip_suffix(suffix.as_str()).is_some_and(|head| head.ends_with('.'))
            }
            (HostPattern::Under(_), _) => false,
        }
    }
}

/// Why a published address gets no node file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// It does not name the registry's Service alone, and no allowed pattern matches it.
    NotAllowed,
    /// It is no registry address a node file may be written for (containerd's `_default`, a path).
    Invalid(String),
    /// It is the upstream of a mirror the cluster admin set, whose file it gets instead.
    Mirrored,
}

/// Why, as the predicate of a sentence whose subject is the address: worded once, for the controller's Event and
/// `doctor` alike.
impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::NotAllowed => f.write_str(
                "does not name this Service alone (its ClusterIP, cluster DNS names, nodePort or hostPort) and \
                 matches no address a cluster admin allowed (chart value nodeAgent.allowedAddresses)",
            ),
            Refusal::Invalid(why) => write!(f, "is no address a node file may be written for: {why}"),
            Refusal::Mirrored => f.write_str(
                "is a public registry the cluster admin mirrors (chart value nodeAgent.mirrors): its node file \
                 sends pulls to that mirror, not to this registry",
            ),
        }
    }
}

/// Whether node files may be written for `address` of a registry whose own addresses are `own`.
pub fn admit(address: &str, own: &[String], allowed: &[AddressPattern]) -> Result<(), Refusal> {
    crate::hosting::address::check(address).map_err(Refusal::Invalid)?;
    if own.iter().any(|own| own == address) || allowed.iter().any(|pattern| pattern.matches(address)) {
        Ok(())
    } else {
        Err(Refusal::NotAllowed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(text: &str) -> AddressPattern {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn a_pattern_with_a_port_allows_that_address_only_and_one_without_allows_every_port() {
        let exact = pattern("registry.example:5000");
        assert!(exact.matches("registry.example:5000"));
        assert!(!exact.matches("registry.example:5001"));
        assert!(!exact.matches("registry.example"));
        assert!(!exact.matches("other.registry.example:5000"));
        let any_port = pattern("docker.io");
        assert!(any_port.matches("docker.io"));
        assert!(any_port.matches("docker.io:443"));
        assert!(!any_port.matches("docker.io.evil.example"));
        assert!(!any_port.matches("registry-1.docker.io"));
    }

    #[test]
    fn a_wildcard_allows_the_names_under_a_domain_but_not_the_domain_itself() {
        let under = pattern("*.corp.example:5000");
        assert!(under.matches("a.corp.example:5000"));
        assert!(under.matches("a.b.corp.example:5000"));
        assert!(!under.matches("corp.example:5000"));
        assert!(!under.matches(".corp.example:5000"), "no name");
        assert!(!under.matches("evilcorp.example:5000"));
        assert!(!under.matches("a.corp.example:5001"));
        assert!(pattern("*.corp.example").matches("a.corp.example"));
    }

    #[test]
    fn ip_addresses_match_as_the_same_address_however_published() {
        assert!(pattern("10.0.0.1:5000").matches("10.0.0.1:5000"));
        assert!(pattern("[fd00::1]:5000").matches("[fd00::1]:5000"));
        assert!(!pattern("10.0.0.1:5000").matches("10.0.0.10:5000"));
    }

    #[test]
    fn what_is_no_address_is_refused_with_the_rule() {
        for (bad, rule) in [
            ("*", "is not a valid DNS name"),
            ("*.", "is empty"),
            ("*.10.0.0.1", "not an IP address"),
            ("Registry.Example", "lowercase"),
            ("https://registry.example", "scheme"),
            ("registry.example/path", "no path"),
            ("_default", "is not a valid DNS name"),
            ("team_a.example", "has the label \"team_a\", which is not valid"),
            ("docker.io:0", "plain digits"),
        ] {
            let error = bad.parse::<AddressPattern>().expect_err(bad);
            assert!(error.contains(rule) && error.contains("allowed address is host[:port]"), "{bad}: {error}");
            let said = error.split(" (an allowed address").next().unwrap_or_default();
            assert_eq!(said.matches(&format!("{bad:?}")).count(), 1, "the value is named once: {error}");
        }
        assert_eq!(pattern(" *.corp.example:5000 ").to_string(), "*.corp.example:5000");
    }

    #[test]
    fn only_the_registrys_own_addresses_and_allowed_ones_are_admitted() {
        let own = vec!["10.96.0.12:5000".to_string(), "registry.reg.svc.cluster.local:5000".to_string()];
        assert_eq!(admit("10.96.0.12:5000", &own, &[]), Ok(()));
        assert_eq!(admit("registry.k8s.io", &own, &[]), Err(Refusal::NotAllowed));
        assert_eq!(admit("registry.k8s.io", &own, &[pattern("registry.k8s.io")]), Ok(()));
        // containerd reads `_default` for every registry without a directory of its own: never written.
        assert!(matches!(admit("_default", &own, &[pattern("docker.io")]), Err(Refusal::Invalid(_))));
        assert!(matches!(admit("../etc", &["../etc".to_string()], &[]), Err(Refusal::Invalid(_))));
    }
}
