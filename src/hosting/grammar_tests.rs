//! Generated values against the rules readers apply. Every host value the validators accept matches the registry
//! part of an image reference (`distribution/reference`'s grammar, written below as its regexp), is read by Docker as
//! a registry rather than a Docker Hub namespace, survives the YAML round trip, and comes out of the knative
//! Tiltfile's line reader unchanged; every value they reject names the rule it broke.
//!
//! `make test` runs the default number of cases; `make fuzz` runs many more (PROPTEST_CASES).

use super::LocalRegistryHostingV1;
use std::sync::LazyLock;

use proptest::prelude::*;
use regex::Regex;

/// distribution/reference regexp.go: domainAndPort, anchored.
fn reference_domain() -> &'static Regex {
    static DOMAIN: LazyLock<Regex> = LazyLock::new(|| {
        let component = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])";
        let domain_name = format!(r"{component}(?:\.{component})*");
        let ipv6 = r"\[(?:[a-fA-F0-9:]+)\]";
        Regex::new(&format!(r"^(?:{domain_name}|{ipv6})(?::[0-9]+)?$")).expect("regexp")
    });
    &DOMAIN
}

/// `grep "host:" | sed 's/ *host: *//' | tr -d '"'`, the knative Tiltfile's reader.
fn line_reader(document: &str) -> Vec<String> {
    static SED: LazyLock<Regex> = LazyLock::new(|| Regex::new(r" *host: *").expect("regexp"));
    document.lines().filter(|l| l.contains("host:")).map(|l| SED.replacen(l, 1, "").replace('"', "")).collect()
}

/// Pieces real and hostile inputs are made of.
fn host_like() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        Just("localhost".to_string()),
        Just("registry".to_string()),
        Just("unknown".to_string()),
        "[a-z0-9-]{1,12}(\\.[a-z0-9-]{1,8}){0,3}",
        "[A-Za-z0-9._-]{1,20}",
        "(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])(\\.(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])){3}",
        "\\[[0-9a-fA-F:]{0,24}\\]",
        "\\[[0-9a-zA-Z:.%]{0,20}\\]",
        "\\[(fd00|fe80|0|2001:db8)(::[0-9a-f]{1,4}){0,3}(::)?\\]",
        "[\\PC]{1,8}",
        ".{0,16}",
    ];
    let port = prop_oneof![Just(String::new()), "(:[1-9][0-9]{0,4})", "(:[+-]?[0-9]{0,6})", Just(":".to_string()),];
    (name, port, prop_oneof![Just(String::new()), Just("/".to_string()), Just("\u{feff}".to_string())])
        .prop_map(|(name, port, tail)| format!("{name}{port}{tail}"))
}

fn help_like() -> impl Strategy<Value = String> {
    (
        prop_oneof!["https?://", Just(String::new()), "[a-z]{2,5}://"],
        host_like(),
        "(/[a-zA-Z0-9._~%-]{0,10}){0,3}",
        ".{0,3}",
    )
        .prop_map(|(scheme, host, path, junk)| format!("{scheme}{host}{path}{junk}"))
}

/// What every accepted host must satisfy; the error says which reader would disagree.
fn readers_accept(value: &str) -> Result<(), String> {
    let document = LocalRegistryHostingV1 { host: Some(value.to_string()), ..Default::default() };
    if !reference_domain().is_match(value) {
        return Err(format!("{value:?} is no image-reference registry"));
    }
    // Docker takes the first component for a registry only with a dot, a port, or as localhost.
    if !(value.contains('.') || value.contains(':') || value == "localhost") {
        return Err(format!("{value:?} would be a Docker Hub namespace"));
    }
    if value.chars().any(|c| c.is_ascii_uppercase()) {
        return Err(format!("{value:?} is not lowercase"));
    }
    let rendered = document.render();
    if LocalRegistryHostingV1::parse(&rendered).ok() != Some(document) {
        return Err(format!("{value:?} does not survive YAML"));
    }
    if line_reader(&rendered) != [value.to_string()] {
        return Err(format!("{value:?} does not survive the line reader: {:?}", line_reader(&rendered)));
    }
    Ok(())
}

/// Host values every reader should accept: DNS names with and without ports, `localhost`, canonical IPv4 and
/// bracketed IPv6 addresses. Some still break a rule on purpose (a name ending in `host`, a port beyond 65535), so
/// both sides of the validator are reached.
fn valid_host() -> impl Strategy<Value = String> {
    let label = "[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?";
    let name = prop_oneof![
        Just("localhost".to_string()),
        proptest::string::string_regex(&format!("{label}(\\.{label}){{1,3}}")).expect("regex"),
        "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])(\\.(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])){3}",
        "\\[(fd00|2001:db8|fc00)::([1-9a-f][0-9a-f]{0,3}(:[0-9a-f]{1,4}){0,3})?\\]",
        Just("[::1]".to_string()),
        "[a-z]{1,8}\\.local(host)?",
    ];
    let port = prop_oneof![2 => Just(String::new()), 7 => "(:[1-9][0-9]{0,3})", 1 => "(:[1-9][0-9]{4})"];
    (name, port).prop_map(|(name, port)| format!("{name}{port}"))
}

/// Valid pull and pod addresses: as [`valid_host`], but never a name a line reader could take for `host:`.
fn valid_address() -> impl Strategy<Value = String> {
    valid_host().prop_map(|value| value.replace("localhost", "registry.example"))
}

/// Help URLs that pass: http(s), a valid host that is no `host:` look-alike, a plain path.
fn valid_help() -> impl Strategy<Value = String> {
    (prop_oneof![Just("https://"), Just("http://")], valid_address(), "(/[a-zA-Z0-9._~%-]{0,10}){0,3}")
        .prop_map(|(scheme, host, path)| format!("{scheme}{host}{path}"))
}

/// How many generated cases a property must send through its checks: at least one in this many (the generators
/// reach far more, about a quarter to nine tenths; this leaves room for chance).
const SHARE: usize = 10;

/// Runs `property` over `strategy` for the configured number of cases (PROPTEST_CASES), and fails unless at least
/// one case in [`SHARE`] reached the checks (`property` returns whether it did).
fn run_counting<S: Strategy>(strategy: S, property: impl Fn(S::Value) -> Result<bool, TestCaseError>) {
    let reached = std::sync::atomic::AtomicUsize::new(0);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::default());
    let cases = runner.config().cases as usize;
    let result = runner.run(&strategy, |value| {
        if property(value)? {
            reached.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
    let reached = reached.into_inner();
    assert!(reached * SHARE >= cases, "only {reached} of {cases} cases reached the checks: the property is vacuous");
    eprintln!("{reached} of {cases} cases reached the checks");
}

#[test]
fn the_checks_hold_for_known_good_values() {
    for value in ["localhost", "localhost:5000", "[fd00:10::200]:5000", "10.0.0.1:30500", "registry.local", "[::1]"] {
        let document = LocalRegistryHostingV1 { host: Some(value.into()), ..Default::default() };
        assert_eq!(document.validate(), Ok(()), "{value}");
        assert_eq!(readers_accept(value), Ok(()), "{value}");
    }
    assert!(readers_accept("registry").is_err() && readers_accept("[evil.example]:5000").is_err());
}

/// Every accepted host is what readers accept; every rejected one names its rule. Hostile pieces and valid values
/// both, so each side is reached.
#[test]
fn accepted_hosts_are_image_reference_registries_and_survive_every_reader() {
    for (accepted_side, strategy) in [(true, valid_host().boxed()), (false, host_like().boxed())] {
        run_counting(strategy, |value| {
            let document = LocalRegistryHostingV1 { host: Some(value.clone()), ..Default::default() };
            match document.validate() {
                Ok(()) => {
                    prop_assert_eq!(readers_accept(&value), Ok(()));
                    Ok(accepted_side)
                }
                Err(invalid) => {
                    prop_assert_eq!(invalid.field, super::Field::Host);
                    prop_assert!(!invalid.reason.trim().is_empty(), "{value:?} was rejected without a rule");
                    Ok(!accepted_side)
                }
            }
        });
    }
}

/// An accepted document keeps `host` the only line a line-based reader takes, round-trips through YAML, and holds
/// only registries and http(s) help URLs. Its fields are mostly valid, so most cases reach the checks; some carry
/// `localhost:` in a pull or pod address, which must be refused.
#[test]
fn accepted_documents_keep_host_the_only_line_a_line_reader_takes() {
    let address = || prop_oneof![10 => valid_address(), 1 => valid_host(), 1 => host_like()];
    let strategy = (valid_host(), address(), address(), prop_oneof![8 => valid_help(), 1 => help_like()]);
    run_counting(strategy, |(host, runtime, cluster, help)| {
        let document = LocalRegistryHostingV1 {
            host: Some(host.clone()),
            host_from_container_runtime: Some(runtime),
            host_from_cluster_network: Some(cluster),
            help: Some(help),
        };
        if document.validate().is_err() {
            return Ok(false);
        }
        let rendered = document.render();
        prop_assert_eq!(LocalRegistryHostingV1::parse(&rendered).expect("parses"), document.clone());
        prop_assert_eq!(line_reader(&rendered), vec![host]);
        for value in [&document.host_from_container_runtime, &document.host_from_cluster_network] {
            let value = value.as_deref().unwrap_or_default();
            prop_assert!(reference_domain().is_match(value), "{value:?}");
            prop_assert!(!value.contains("host:"), "{value:?} would be read as the host line");
        }
        let help = document.help.as_deref().unwrap_or_default();
        prop_assert!(help.starts_with("http://") || help.starts_with("https://"), "{help:?}");
        prop_assert!(help.chars().all(|c| c.is_ascii_graphic()), "{help:?}");
        prop_assert!(!help.split('/').nth(2).unwrap_or_default().contains('@'), "{help:?}");
        Ok(true)
    });
}
