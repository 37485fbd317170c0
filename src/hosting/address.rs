//! Registry addresses as image references spell them: the registry part of `distribution/reference`, which every
//! reader (Docker, containerd, Tilt, Skaffold, ko) parses. `name[:port]`, where the name is
//! - a lowercase DNS name (ASCII; an internationalised name must be given in its `xn--` form),
//! - an IPv4 address, or
//! - an IPv6 address in brackets, `[fd00::1]`: hex digits and colons only, so no zone (`%eth0`) and no dotted tail,
//!
//! and the port is 1 to 65535 in plain digits. Addresses nothing can connect to (`0.0.0.0`, `[::]` however spelled)
//! and link-local IPv6 (unusable without a zone) are refused.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The longest host value accepted: a full DNS name plus a port.
const MAX_LEN: usize = 253 + 6;

/// The name part of an address, canonical.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Host {
    Name(String),
    V4(Ipv4Addr),
    V6(Ipv6Addr),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::V4(ip) => write!(f, "{ip}"),
            Host::V6(ip) => write!(f, "[{ip}]"),
        }
    }
}

impl Host {
    /// Reads an address as the cluster or a user gives it: an IP in any usual spelling (IPv6 with or without
    /// brackets), or a DNS name in any case with or without its trailing root dot. The result is checked with the
    /// same rules as a published value.
    pub fn normalise(address: &str) -> Result<Host, String> {
        let address = address.trim();
        let unbracketed = address.strip_prefix('[').and_then(|a| a.strip_suffix(']')).unwrap_or(address);
        let host = match unbracketed.parse::<IpAddr>() {
            Ok(IpAddr::V4(ip)) => Host::V4(ip),
            Ok(IpAddr::V6(ip)) => Host::V6(ip),
            Err(_) => Host::Name(address.strip_suffix('.').unwrap_or(address).to_ascii_lowercase()),
        };
        check(&host.to_string())?;
        Ok(host)
    }

    /// `host:port`, with IPv6 in brackets.
    pub fn with_port(&self, port: Option<i32>) -> String {
        match port {
            Some(port) => format!("{self}:{port}"),
            None => self.to_string(),
        }
    }
}

/// Checks a value against the grammar above, exactly as written: no normalisation. The error says which rule.
pub fn check(value: &str) -> Result<Host, String> {
    if value.is_empty() {
        return Err("is empty".into());
    }
    if value.len() > MAX_LEN {
        return Err(format!("is {} characters long; a host and port fit in {MAX_LEN}", value.len()));
    }
    if let Some(bad) = value.chars().find(|c| !c.is_ascii_graphic() || matches!(c, '"' | '\\')) {
        return Err(format!("must not contain {bad:?} (printable ASCII only; IDN names in their xn-- form)"));
    }
    if value.contains("://") {
        return Err("must not have a scheme (no http:// or https://)".into());
    }
    if value.contains('/') {
        return Err("must be host[:port] with no path or trailing slash".into());
    }
    if value.chars().any(|c| c.is_ascii_uppercase()) {
        return Err("must be lowercase (image references reject upper-case registry names)".into());
    }
    let (name, port) = split(value)?;
    if let Some(port) = port {
        let digits = !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) && !port.starts_with('0');
        if !digits || port.parse::<u16>().is_err() {
            return Err(format!("port {port:?} is not a number from 1 to 65535 in plain digits"));
        }
    }
    if let Some(inside) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        return ipv6(inside).map(Host::V6);
    }
    if let Ok(ip) = name.parse::<Ipv4Addr>() {
        if ip.is_unspecified() {
            return Err("0.0.0.0 is a listen address, not one to connect to".into());
        }
        if ip.is_broadcast() {
            return Err("255.255.255.255 is the limited broadcast address, not one to connect to".into());
        }
        return Ok(Host::V4(ip));
    }
    // `256.1.1.1`, `010.0.0.1`, `0x7f.0.0.1` or `2130706433` is no IPv4 address in canonical form, and parsers
    // disagree on it: inet_aton, browsers and some Go and C libraries read hex, octal and fewer than four parts as
    // 127.0.0.1 or 10.0.0.1, others read a name or refuse it.
    if numeric_ipv4_spelling(name) {
        return Err(
            "has a numeric host that is not four dotted decimal octets (hex, octal, a leading zero, fewer parts or an \
             octet over 255), which parsers read differently; write an IPv4 address as four decimal octets, like \
             10.0.0.1"
                .into(),
        );
    }
    dns_name(name)?;
    Ok(Host::Name(name.to_string()))
}

/// A valid address split into its host and port, as [`check`] reads it.
pub fn host_and_port(value: &str) -> Result<(Host, Option<u16>), String> {
    let host = check(value)?;
    let (_, port) = split(value)?;
    Ok((host, port.and_then(|port| port.parse().ok())))
}

/// Whether `name` is what inet_aton and its kin would read as an IPv4 address although it is not four decimal
/// octets: one to four dot-separated parts, each decimal digits or `0x` and hex digits.
fn numeric_ipv4_spelling(name: &str) -> bool {
    let numeric = |part: &str| {
        let hex = part.strip_prefix("0x").is_some_and(|rest| rest.bytes().all(|b| b.is_ascii_hexdigit()));
        hex || (!part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()))
    };
    let parts: Vec<&str> = name.split('.').collect();
    parts.len() <= 4 && parts.iter().all(|part| numeric(part))
}

fn split(value: &str) -> Result<(&str, Option<&str>), String> {
    if value.starts_with('[') {
        let end = value.find(']').ok_or("an IPv6 address lacks its closing bracket")?;
        let (name, after) = value.split_at(end + 1);
        return match after {
            "" => Ok((name, None)),
            _ => after.strip_prefix(':').map(|p| (name, Some(p))).ok_or_else(|| format!("{after:?} after ]")),
        };
    }
    match value.split_once(':') {
        None => Ok((value, None)),
        Some((_, port)) if port.contains(':') => Err("an IPv6 address must be in brackets, like [fd00::1]:5000".into()),
        Some((name, port)) => Ok((name, Some(port))),
    }
}

fn ipv6(inside: &str) -> Result<Ipv6Addr, String> {
    if inside.is_empty() || !inside.bytes().all(|b| b.is_ascii_hexdigit() || b == b':') {
        return Err(format!(
            "[{inside}] must hold an IPv6 address in hex digits and colons, like [fd00::1] (no zone, no dotted tail)"
        ));
    }
    let ip: Ipv6Addr = inside.parse().map_err(|_| format!("[{inside}] is not a valid IPv6 address"))?;
    if ip.is_unspecified() {
        return Err(format!("[{inside}] is the unspecified address, not one to connect to"));
    }
    if ip.is_unicast_link_local() {
        return Err(format!("[{inside}] is link-local, which needs a zone that image references cannot carry"));
    }
    Ok(ip)
}

fn dns_name(name: &str) -> Result<(), String> {
    if name.len() > 253 {
        return Err("the name is longer than 253 characters".into());
    }
    for label in name.split('.') {
        let valid = !label.is_empty()
            && label.len() <= 63
            && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-');
        // Said of the value the caller names: a one-label name is not named a second time.
        if !valid && label == name {
            return Err("is not a valid DNS name (lowercase letters, digits and inner hyphens)".into());
        }
        if !valid {
            return Err(format!("has the label {label:?}, which is not valid in a DNS name"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_what_clusters_and_users_give() {
        for (given, canonical) in [
            ("fd00:10::200", "[fd00:10::200]"),
            ("[FD00:10:0:0:0:0:0:200]", "[fd00:10::200]"),
            ("::1", "[::1]"),
            ("10.0.0.10", "10.0.0.10"),
            ("Registry.Example.", "registry.example"),
            ("kind-registry", "kind-registry"),
        ] {
            assert_eq!(Host::normalise(given).map(|h| h.to_string()), Ok(canonical.to_string()), "{given}");
        }
        assert_eq!(Host::normalise("fd00:10::200").unwrap().with_port(Some(5000)), "[fd00:10::200]:5000");
        for bad in [
            "0.0.0.0",
            "255.255.255.255",
            "::",
            "[0:0::0]",
            "fe80::1",
            "fe80::1%eth0",
            "a..b",
            "-x.example",
            "",
            "010.0.0.1",
        ] {
            assert!(Host::normalise(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_rule_names_itself() {
        let cases = [
            ("[evil.example]:5000", "hex digits and colons"),
            ("[]:5000", "hex digits and colons"),
            ("[::g]", "hex digits and colons"),
            ("[fe80::1%eth0]", "hex digits and colons"),
            ("[fe80::1]:5000", "link-local"),
            ("[0:0::0]:5000", "unspecified"),
            ("[::ffff:1.2.3.4]", "no dotted tail"),
            ("[1:2:3]:5000", "not a valid IPv6"),
            ("[::1", "closing bracket"),
            ("[::1]5000", "after ]"),
            ("localhost:+5000", "plain digits"),
            ("localhost:05000", "plain digits"),
            ("localhost:", "plain digits"),
            ("localhost:65536", "plain digits"),
            ("\u{feff}localhost", "printable ASCII"),
            ("local\u{202e}host", "printable ASCII"),
            ("регистр.example", "xn--"),
            ("fd00::1:5000", "brackets"),
            ("0.0.0.0:5000", "listen address"),
            ("255.255.255.255:5000", "broadcast"),
            ("256.1.1.1:5000", "four dotted decimal octets"),
            ("010.0.0.1:5000", "four dotted decimal octets"),
            ("1.2.3:5000", "four dotted decimal octets"),
            ("12345", "four dotted decimal octets"),
            ("0x7f.0.0.1:5000", "four dotted decimal octets"),
            ("0x7f000001:5000", "four dotted decimal octets"),
            ("0x7f.1:5000", "four dotted decimal octets"),
            ("0x:5000", "four dotted decimal octets"),
        ];
        for (value, rule) in cases {
            let error = check(value).expect_err(value);
            assert!(error.contains(rule), "{value}: {error}");
        }
        let long = format!("[{}]:5000", "a:".repeat(5000));
        assert!(check(&long).unwrap_err().contains("characters long"));
        // The longest DNS name (253 characters) with the longest port fits; one character more does not.
        let label = "a".repeat(63);
        let longest = format!("{label}.{label}.{label}.{}:65535", "a".repeat(61));
        assert_eq!((longest.len(), check(&longest).is_ok()), (MAX_LEN, true));
        let name_over = format!("a{}", longest.trim_end_matches(":65535"));
        assert_eq!(check(&name_over).unwrap_err(), "the name is longer than 253 characters");
        let over = format!("a{longest}");
        assert_eq!(
            check(&over).unwrap_err(),
            format!("is {} characters long; a host and port fit in 259", MAX_LEN + 1)
        );
    }

    #[test]
    fn accepts_real_addresses() {
        for value in [
            "[fd00:10::200]:5000",
            "[::1]:5000",
            "[2001:db8::1]",
            "127.0.0.1:5000",
            "xn--e1afmkfd.example:443",
            "1.registry.example:5000",
            "reg.123abc:5000",
        ] {
            assert!(check(value).is_ok(), "{value}");
        }
    }
}
