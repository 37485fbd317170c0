//! Pull credentials for the published registry, opt-in on both sides: the registry's Service names a Secret in its
//! own namespace (`local-registry-publisher.io/pull-secret`), and a cluster admin labels each namespace that should
//! get them (`local-registry-publisher.io/pull-secret-wanted=true`). Each such namespace then holds one
//! `kubernetes.io/dockerconfigjson` Secret with an entry per published address, and optionally chosen
//! ServiceAccounts list it in `imagePullSecrets`.
//!
//! Pure: given the registry readers see and what the pull watches hold, [`plan`] says what to write, delete and
//! tell, and [`interest`] which watches that needs. Credentials never go to `kube-public`, which every user (even
//! anonymous ones, on some clusters) may read.

pub mod credentials;
mod watched;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ObjectReference, Secret, ServiceAccount};
use kube::ResourceExt;
use kube::api::ObjectMeta;
use serde_json::{Value, json};

use crate::keys::{self, MANAGED_BY, MANAGER};
use crate::publish::Published;
use crate::settings::PullSecrets;
use crate::watching::WatchKey;
pub use credentials::Credentials;
pub(crate) use watched::pull_watch_sets;
pub use watched::{Interest, Observed, WantedNamespace};

pub const SECRET_TYPE: &str = "kubernetes.io/dockerconfigjson";
pub const DATA_KEY: &str = ".dockerconfigjson";
/// Readable by everyone; never a place for credentials.
const PUBLIC_NAMESPACE: &str = "kube-public";

/// Why an Event about pull credentials is posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// The Secret the registry names does not exist.
    PullSecretMissing,
    /// It cannot be read (RBAC).
    PullSecretUnreadable,
    /// It holds no usable credentials.
    PullSecretInvalid,
    /// A namespace already has a Secret of our name that this controller did not write.
    PullSecretNameTaken,
    /// `kube-public` is labelled: it never gets credentials.
    PullSecretRefused,
    /// The API server refused a write.
    PullSecretFailed,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::PullSecretMissing => "PullSecretMissing",
            Reason::PullSecretUnreadable => "PullSecretUnreadable",
            Reason::PullSecretInvalid => "PullSecretInvalid",
            Reason::PullSecretNameTaken => "PullSecretNameTaken",
            Reason::PullSecretRefused => "PullSecretRefused",
            Reason::PullSecretFailed => "PullSecretFailed",
        }
    }
}

/// Something to tell users, as a Warning Event on the published registry's Service.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    pub regarding: ObjectReference,
    pub reason: Reason,
    pub message: Arc<str>,
}

// Every pull notice is a problem in some namespace.
crate::events::impl_tell!(Notice, |_: &Notice| true);

/// The Secret the published registry's Service names for its pull credentials; an empty annotation names none.
pub fn credentials_secret(published: &Published) -> Option<(String, String)> {
    let name = published.wiring.pull_secret.clone()?;
    Some((published.registry.namespace.clone(), name))
}

/// The watches the pull credentials need: the credentials Secret the published registry names, the labelled
/// namespaces, every Secret with our name, and the chosen ServiceAccounts where our Secret is or should be.
pub fn interest(published: Option<&Published>, observed: &Observed, settings: &PullSecrets) -> Interest {
    let mut interest = Interest::default();
    if let Some((namespace, name)) = published.and_then(credentials_secret) {
        interest.credentials.insert(WatchKey::in_namespace(&namespace).named(&name));
    }
    use keys::namespace::{PULL_SECRET_WANTED, PULL_SECRET_WANTED_VALUE};
    let wanted = crate::watching::equal(PULL_SECRET_WANTED, PULL_SECRET_WANTED_VALUE);
    interest.namespaces.insert(WatchKey::everywhere().labels(wanted));
    interest.secrets.insert(WatchKey::everywhere().named(&settings.name));
    // Where our Secret should be, and where it still is until removed (its entries go first).
    let mut namespaces: BTreeSet<&str> = observed.namespaces.iter().map(|n| n.name.as_str()).collect();
    namespaces.extend(observed.secrets.iter().filter(|s| is_ours(s)).filter_map(|s| s.metadata.namespace.as_deref()));
    for namespace in namespaces {
        for account in &settings.service_accounts {
            interest.accounts.insert(WatchKey::in_namespace(namespace).named(account));
        }
    }
    interest
}

/// A change to one ServiceAccount's `imagePullSecrets`: a JSON patch that first tests what it was computed from,
/// so an entry someone else changed in between is never removed or duplicated.
#[derive(Clone, Debug, PartialEq)]
pub struct AccountPatch {
    pub namespace: String,
    pub name: String,
    pub patch: Value,
}

/// What one pass does about pull Secrets.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// The pull Secret's name in every namespace.
    pub secret_name: String,
    /// Secrets to server-side apply.
    pub apply: Vec<Secret>,
    /// Namespaces whose Secret of ours goes (with the uid it was seen with).
    pub delete: Vec<(String, Option<String>)>,
    /// ServiceAccounts to patch; done before deleting, while their namespace is still watched.
    pub accounts: Vec<AccountPatch>,
    pub notices: Vec<Notice>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.apply.is_empty() && self.delete.is_empty() && self.accounts.is_empty()
    }
}

/// What every opted-in namespace should hold.
enum Desired {
    /// No pull Secret: nothing published, or the published registry names no source.
    Nothing,
    /// The source cannot be used now: what was distributed stays, as the last good state.
    Unchanged,
    /// This `.dockerconfigjson`.
    Config(String),
}

/// The pull Secrets for `published`, the registry readers see now (if any).
pub fn plan(published: Option<&Published>, observed: &Observed, settings: &PullSecrets) -> Plan {
    let mut plan = Plan { secret_name: settings.name.clone(), ..Plan::default() };
    let desired = desired(published, observed, &mut plan.notices);
    let mut ours: BTreeMap<&str, &Secret> = BTreeMap::new();
    let mut foreign: BTreeSet<&str> = BTreeSet::new();
    for secret in &observed.secrets {
        let namespace = secret.metadata.namespace.as_deref().unwrap_or_default();
        if is_ours(secret) {
            ours.insert(namespace, secret);
        } else {
            foreign.insert(namespace);
        }
    }
    // Namespaces that hold (or will hold) our Secret once this plan is carried out.
    let mut holding: BTreeSet<&str> = BTreeSet::new();
    // A namespace being deleted takes our Secret and its ServiceAccounts with it, and refuses anything new: left alone.
    let terminating: BTreeSet<&str> =
        observed.namespaces.iter().filter(|n| n.terminating).map(|n| n.name.as_str()).collect();
    for namespace in &observed.namespaces {
        let namespace = namespace.name.as_str();
        if terminating.contains(namespace) {
            continue;
        }
        if namespace == PUBLIC_NAMESPACE {
            if let (Some(registry), Desired::Config(_)) = (published, &desired) {
                plan.notices.push(warning(
                    registry,
                    Reason::PullSecretRefused,
                    format!("no pull Secret is written to {PUBLIC_NAMESPACE}: every user may read it"),
                ));
            }
            continue;
        }
        if foreign.contains(namespace) {
            if let (Some(registry), Desired::Config(_)) = (published, &desired) {
                plan.notices.push(warning(
                    registry,
                    Reason::PullSecretNameTaken,
                    format!(
                        "namespace {namespace} already has a Secret {} that this controller did not write; it is left \
                         untouched and that namespace gets no pull credentials (rename one of them, or choose \
                         another name with --pull-secret-name)",
                        settings.name
                    ),
                ));
            }
            continue;
        }
        let existing = ours.get(namespace);
        match &desired {
            Desired::Config(config) => {
                if existing.is_none_or(|s| !holds(s, config)) {
                    plan.apply.push(pull_secret(namespace, config, settings, published));
                }
                holding.insert(namespace);
            }
            Desired::Unchanged if existing.is_some() => {
                holding.insert(namespace);
            }
            Desired::Unchanged | Desired::Nothing => {}
        }
    }
    for (namespace, secret) in &ours {
        if !holding.contains(namespace) && !terminating.contains(namespace) {
            plan.delete.push((namespace.to_string(), secret.metadata.uid.clone()));
        }
    }
    for account in &observed.accounts {
        let namespace = account.metadata.namespace.as_deref().unwrap_or_default();
        let chosen = settings.service_accounts.iter().any(|n| Some(n) == account.metadata.name.as_ref());
        if !chosen || terminating.contains(namespace) {
            continue;
        }
        let patch = if holding.contains(namespace) {
            add_entry(account, &settings.name)
        } else if ours.contains_key(namespace) || marked(account).contains(settings.name.as_str()) {
            remove_entry(account, &settings.name)
        } else {
            None
        };
        if let Some(patch) = patch {
            plan.accounts.push(AccountPatch { namespace: namespace.to_string(), name: account.name_any(), patch });
        }
    }
    plan
}

fn desired(published: Option<&Published>, observed: &Observed, notices: &mut Vec<Notice>) -> Desired {
    let Some(registry) = published else { return Desired::Nothing };
    let Some((namespace, name)) = credentials_secret(registry) else { return Desired::Nothing };
    let keep = |reason: Reason, why: String, notices: &mut Vec<Notice>| {
        let message = format!("pull Secret {namespace}/{name} {why}; the pull Secrets already distributed stay");
        notices.push(warning(registry, reason, message));
        Desired::Unchanged
    };
    let key = WatchKey::in_namespace(&namespace).named(&name);
    match observed.credentials.get(&key) {
        // Its watch has not reported yet.
        None => Desired::Unchanged,
        Some(Err(why)) => keep(Reason::PullSecretUnreadable, format!("cannot be read: {why}"), notices),
        Some(Ok(found)) => match found.first() {
            None => keep(Reason::PullSecretMissing, "does not exist".into(), notices),
            Some(secret) => match Credentials::from_source(secret.data.as_ref().unwrap_or(&BTreeMap::new())) {
                Ok(credentials) => {
                    let addresses = credentials::addresses(&registry.document);
                    Desired::Config(credentials::docker_config(&addresses, &credentials))
                }
                Err(why) => keep(Reason::PullSecretInvalid, format!("is not usable: {why}"), notices),
            },
        },
    }
}

/// Whether this controller wrote the Secret: its field manager applied it. The managed-by label alone proves
/// nothing (anyone may set it), and a copy of ours whose label someone removed is still ours to remove.
pub fn is_ours(secret: &Secret) -> bool {
    let entries = secret.metadata.managed_fields.as_deref().unwrap_or_default();
    entries.iter().any(|e| e.manager.as_deref() == Some(MANAGER) && e.operation.as_deref() == Some("Apply"))
}

/// Whether an existing Secret already is what we would write.
fn holds(secret: &Secret, config: &str) -> bool {
    secret.type_.as_deref() == Some(SECRET_TYPE)
        && secret.data.as_ref().and_then(|d| d.get(DATA_KEY)).map(|b| b.0.as_slice()) == Some(config.as_bytes())
}

/// Exactly the fields we own in each namespace's pull Secret.
fn pull_secret(namespace: &str, config: &str, settings: &PullSecrets, from: Option<&Published>) -> Secret {
    let registry = from.map(|r| r.registry.to_string()).unwrap_or_default();
    Secret {
        metadata: ObjectMeta {
            name: Some(settings.name.clone()),
            namespace: Some(namespace.to_string()),
            labels: Some([(MANAGED_BY.to_string(), MANAGER.to_string())].into()),
            annotations: Some([(keys::pull::FROM_REGISTRY.to_string(), registry)].into()),
            ..ObjectMeta::default()
        },
        type_: Some(SECRET_TYPE.into()),
        data: Some([(DATA_KEY.to_string(), ByteString(config.as_bytes().to_vec()))].into()),
        ..Secret::default()
    }
}

/// JSON pointer escaping (RFC 6901) of one path segment.
fn pointer(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

fn annotation_path() -> String {
    format!("/metadata/annotations/{}", pointer(keys::pull::ADDED_PULL_SECRETS))
}

/// The entries the account's mark says were added here.
fn marked(account: &ServiceAccount) -> BTreeSet<&str> {
    let mark = account.annotations().get(keys::pull::ADDED_PULL_SECRETS).map(String::as_str).unwrap_or_default();
    mark.split(',').map(str::trim).filter(|n| !n.is_empty()).collect()
}

/// The operation that leaves the mark at `names` (the resourceVersion test makes rewriting it safe).
fn set_mark(account: &ServiceAccount, names: &BTreeSet<&str>) -> Value {
    let value = names.iter().copied().collect::<Vec<_>>().join(",");
    match &account.metadata.annotations {
        None => json!({"op": "add", "path": "/metadata/annotations", "value": {keys::pull::ADDED_PULL_SECRETS: value}}),
        Some(_) if names.is_empty() => json!({"op": "remove", "path": annotation_path()}),
        Some(annotations) if annotations.contains_key(keys::pull::ADDED_PULL_SECRETS) => {
            json!({"op": "replace", "path": annotation_path(), "value": value})
        }
        Some(_) => json!({"op": "add", "path": annotation_path(), "value": value}),
    }
}

/// Adds `name` to the account's `imagePullSecrets` if it is not there, and marks it as ours to remove later. An
/// entry someone else put there first is left theirs: no mark.
fn add_entry(account: &ServiceAccount, name: &str) -> Option<Value> {
    let entries = account.image_pull_secrets.as_deref().unwrap_or_default();
    if entries.iter().any(|e| e.name == name) {
        return None;
    }
    let version = account.metadata.resource_version.clone().unwrap_or_default();
    let mut operations = vec![json!({"op": "test", "path": "/metadata/resourceVersion", "value": version})];
    if account.image_pull_secrets.is_none() {
        operations.push(json!({"op": "add", "path": "/imagePullSecrets", "value": [{"name": name}]}));
    } else {
        operations.push(json!({"op": "add", "path": "/imagePullSecrets/-", "value": {"name": name}}));
    }
    let mut mark = marked(account);
    mark.insert(name);
    operations.push(set_mark(account, &mark));
    Some(Value::Array(operations))
}

/// Removes the entry this controller added (marked), and the mark; entries it did not add stay.
fn remove_entry(account: &ServiceAccount, name: &str) -> Option<Value> {
    let mut mark = marked(account);
    if !mark.remove(name) {
        return None;
    }
    let version = account.metadata.resource_version.clone().unwrap_or_default();
    let mut operations = vec![json!({"op": "test", "path": "/metadata/resourceVersion", "value": version})];
    let entries = account.image_pull_secrets.as_deref().unwrap_or_default();
    if let Some(index) = entries.iter().position(|e| e.name == name) {
        operations.push(json!({"op": "remove", "path": format!("/imagePullSecrets/{index}")}));
    }
    operations.push(set_mark(account, &mark));
    Some(Value::Array(operations))
}

fn warning(registry: &Published, reason: Reason, message: String) -> Notice {
    Notice { regarding: registry.reference.clone(), reason, message: message.into() }
}

#[cfg(test)]
pub(crate) mod fixtures;
#[cfg(test)]
mod tests;
