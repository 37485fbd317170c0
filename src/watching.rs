//! The words the pure core uses to say what it wants watched: a [`WatchKey`] names one server-side filtered watch,
//! and [`Keep`] says what of each received object is kept. The controller maps them onto watches mechanically.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use kube::core::{Expression, Selector};

/// One server-side filtered watch: a namespace (or all), a label selector, and an object name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchKey {
    pub namespace: Option<String>,
    pub labels: Option<Selector>,
    pub name: Option<String>,
}

impl WatchKey {
    /// Every namespace (or, for a cluster-scoped kind, every object).
    pub fn everywhere() -> Self {
        Self::default()
    }

    pub fn in_namespace(namespace: &str) -> Self {
        Self { namespace: Some(namespace.to_string()), ..Self::default() }
    }

    pub fn labels(mut self, selector: Selector) -> Self {
        self.labels = Some(selector);
        self
    }

    /// Only the object with this name (a `metadata.name` field selector).
    pub fn named(mut self, name: &str) -> Self {
        self.name = Some(name.to_string());
        self
    }

    /// The label selector as the API server takes it.
    pub fn label_selector(&self) -> Option<String> {
        self.labels.as_ref().map(ToString::to_string)
    }

    /// The field selector as the API server takes it.
    pub fn field_selector(&self) -> Option<String> {
        self.name.as_deref().map(name_selector)
    }

    fn order_key(&self) -> (Option<&str>, Option<String>, Option<&str>) {
        (self.namespace.as_deref(), self.label_selector(), self.name.as_deref())
    }
}

/// The field selector of the one object named `name`: a watch of it costs the API server and us one object, not
/// the namespace's.
pub fn name_selector(name: &str) -> String {
    format!("metadata.name={name}")
}

// kube's `Selector` has no order; its text is canonical (set values are sorted), so keys order by it.
impl Ord for WatchKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.order_key().cmp(&other.order_key())
    }
}

impl PartialOrd for WatchKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for WatchKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "namespace={}", self.namespace.as_deref().unwrap_or("*"))?;
        if let Some(labels) = &self.labels {
            write!(f, " labels={labels}")?;
        }
        if let Some(name) = &self.name {
            write!(f, " name={name}")?;
        }
        Ok(())
    }
}

/// A DNS label (RFC 1123): what a namespace name must be.
pub fn is_dns_label(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= 63
        && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !label.starts_with('-')
        && !label.ends_with('-')
}

/// Dot-separated DNS labels.
pub fn is_dns_name(name: &str) -> bool {
    name.split('.').all(is_dns_label)
}

/// A DNS subdomain of at most 253 characters: what the API server takes as the name of most objects, and so what
/// a [`WatchKey::named`] may select.
pub fn is_object_name(name: &str) -> bool {
    name.len() <= 253 && is_dns_name(name)
}

/// `key=value`.
pub fn equal(key: &str, value: &str) -> Selector {
    Expression::Equal(key.to_string(), value.to_string()).into()
}

/// `key in (values)`.
pub fn one_of<'a>(key: &str, values: impl IntoIterator<Item = &'a str>) -> Expression {
    Expression::In(key.to_string(), values.into_iter().map(str::to_string).collect::<BTreeSet<_>>())
}

/// Per watch of a set whose failures are answers (a Secret this controller may not read): its objects, or why the
/// API server refuses it. A watch that has not reported yet is absent.
pub type Findings<T> = BTreeMap<WatchKey, Result<Vec<Arc<T>>, String>>;

/// Makes the pure halves of a list of watch sets (see `registry::watched`): `$interest`, the watches wanted now,
/// and `$snapshot`, what they hold. A set marked `[findings]` holds [`Findings`] instead of objects.
macro_rules! interest_and_snapshot {
    ($list:ident, $interest:ident, $snapshot:ident) => {
        $list!(interest_and_snapshot! { @make $interest, $snapshot, });
    };
    (@make $interest:ident, $snapshot:ident,
     $( $(#[$doc:meta])* $name:ident : $from:ty => $kept:ty $([$view:ident])? ),* $(,)?) => {
        /// The watches wanted now, per watch set: the controller runs exactly these.
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct $interest {
            $( $(#[$doc])* pub $name: std::collections::BTreeSet<$crate::watching::WatchKey>, )*
        }

        /// What the watches hold, per watch set, each sorted by namespace and name.
        #[derive(Clone, Debug, Default)]
        pub struct $snapshot {
            $( $(#[$doc])* pub $name: $crate::watching::held!($kept $(, $view)?), )*
        }
    };
}
pub(crate) use interest_and_snapshot;

/// What a snapshot holds of one set: its objects, or per watch its [`Findings`].
macro_rules! held {
    ($kept:ty) => { Vec<std::sync::Arc<$kept>> };
    ($kept:ty, findings) => { $crate::watching::Findings<$kept> };
}
pub(crate) use held;

/// What a watch keeps of each object it receives: only what the decision reads, so memory does not grow with the
/// fields nobody looks at.
pub trait Keep<From>: Sized {
    fn keep(object: From) -> Self;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_render_as_the_api_server_takes_them_and_order_by_that_text() {
        let key = WatchKey::in_namespace("reg")
            .labels(Selector::from_iter([one_of("app", ["zot", "harbor"]), Expression::Exists("tier".into())]))
            .named("zot");
        assert_eq!(key.label_selector().as_deref(), Some("app in (harbor,zot),tier"));
        assert_eq!(key.field_selector().as_deref(), Some("metadata.name=zot"));
        assert_eq!(key.to_string(), "namespace=reg labels=app in (harbor,zot),tier name=zot");
        let keys: BTreeSet<WatchKey> =
            [WatchKey::in_namespace("b"), WatchKey::everywhere(), WatchKey::in_namespace("a")].into();
        let order: Vec<Option<&str>> = keys.iter().map(|k| k.namespace.as_deref()).collect();
        assert_eq!(order, [None, Some("a"), Some("b")]);
        assert_eq!(equal("k", "v").to_string(), "k=v");
    }
}
