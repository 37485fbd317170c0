//! The label-selector grammar of `--registry-selector`, read as the API server reads it, into the typed selector
//! `watching` hands to watches: a typo exits at start instead of failing every watch.

use kube::core::{Expression, Selector};

use crate::watching::is_object_name;

/// Reads a label selector as the API server would, so a typo exits at start instead of failing every watch.
pub fn parse(value: &str) -> Result<Selector, String> {
    if value.trim().is_empty() {
        return Err("must not be empty: it would select every Service".into());
    }
    split_requirements(value)
        .into_iter()
        .map(|requirement| expression(requirement.trim()).map_err(|e| format!("{requirement:?}: {e}")))
        .collect()
}

/// Splits on commas outside parentheses: `a in (x,y),b` is two requirements.
fn split_requirements(value: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in value.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&value[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&value[start..]);
    parts
}

/// One requirement: `!key`, `key!=value`, `key==value`, `key=value`, `key notin (a,b)`, `key in (a,b)` or `key`.
fn expression(requirement: &str) -> Result<Expression, String> {
    if let Some(key) = requirement.strip_prefix('!') {
        return Ok(Expression::DoesNotExist(label_key(key.trim())?));
    }
    for operator in ["!=", "==", "="] {
        if let Some((key, value)) = requirement.split_once(operator) {
            let (key, value) = (label_key(key.trim())?, label_value(value.trim())?);
            return Ok(if operator == "!=" { Expression::NotEqual(key, value) } else { Expression::Equal(key, value) });
        }
    }
    for operator in [" notin ", " in "] {
        if let Some((key, values)) = requirement.split_once(operator) {
            let key = label_key(key.trim())?;
            let inner = values
                .trim()
                .strip_prefix('(')
                .and_then(|v| v.strip_suffix(')'))
                .ok_or("a set needs parentheses, like in (a,b)")?;
            let values = inner.split(',').map(|v| label_value(v.trim())).collect::<Result<_, _>>()?;
            return Ok(if operator == " in " { Expression::In(key, values) } else { Expression::NotIn(key, values) });
        }
    }
    Ok(Expression::Exists(label_key(requirement)?))
}

fn label_key(key: &str) -> Result<String, String> {
    check_label_key(key).map(|()| key.to_string())
}

fn label_value(value: &str) -> Result<String, String> {
    check_label_value(value).map(|()| value.to_string())
}

fn check_label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !is_object_name(prefix)
    {
        return Err(format!("label key prefix {prefix:?} is not a DNS subdomain"));
    }
    if name.is_empty() || !is_label_name(name) {
        return Err(format!("{key:?} is not a valid label key"));
    }
    Ok(())
}

fn check_label_value(value: &str) -> Result<(), String> {
    if value.is_empty() || is_label_name(value) { Ok(()) } else { Err(format!("{value:?} is not a valid label value")) }
}

fn is_label_name(name: &str) -> bool {
    name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_selectors_are_read_into_expressions_that_match_as_the_api_server_evaluates_them() {
        use kube::core::SelectorExt;
        let labels: std::collections::BTreeMap<String, String> =
            [("app", "zot"), ("tier", "infra")].map(|(k, v)| (k.to_string(), v.to_string())).into();
        let selector_matches = |text: &str, labels| parse(text).expect(text).matches(labels);
        for (selector, expected) in [
            ("app=zot", true),
            ("app==zot,tier=infra", true),
            ("app!=zot", false),
            ("app in (harbor, zot)", true),
            ("app notin (zot)", false),
            ("tier", true),
            ("!tier", false),
            ("missing", false),
            ("app=zot,missing=x", false),
        ] {
            assert_eq!(selector_matches(selector, &labels), expected, "{selector}");
        }
        let parsed = parse("app.kubernetes.io/name in (registry,zot),tier!=test,!legacy").unwrap();
        assert_eq!(parsed.to_string(), "app.kubernetes.io/name in (registry,zot),tier!=test,!legacy");
        let default = crate::settings::default_selector();
        assert_eq!(parse(&default.to_string()), Ok(default));
    }
}
