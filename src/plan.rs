//! Given the registries, what is published now and the settings: what to write, what to tell users, and when to
//! look again. Pure: no I/O, time passed in.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::ResourceExt;

use crate::config::PublishArgs;
use crate::hosting::{DATA_KEY, LocalRegistryHostingV1};
use crate::registry::{Registry, ServiceId};

pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGER: &str = "local-registry-publisher";

/// What the target ConfigMap holds now.
#[derive(Clone, Debug)]
pub struct Existing {
    /// Carries our managed-by label: ours to change and delete.
    pub owned: bool,
    /// The managed-by label's value, or the first field manager, to name the other writer.
    pub writer: Option<String>,
    /// The `localRegistryHosting.v1` text.
    pub text: Option<String>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

impl Existing {
    pub fn from_configmap(configmap: &ConfigMap) -> Self {
        let managed_by = configmap.labels().get(MANAGED_BY_LABEL).cloned();
        let first_manager = configmap
            .managed_fields()
            .iter()
            .find_map(|f| f.manager.clone());
        Self {
            owned: managed_by.as_deref() == Some(MANAGER),
            writer: managed_by.or(first_manager),
            text: configmap
                .data
                .as_ref()
                .and_then(|d| d.get(DATA_KEY))
                .cloned(),
            uid: configmap.metadata.uid.clone(),
            resource_version: configmap.metadata.resource_version.clone(),
        }
    }

    fn document(&self) -> Option<LocalRegistryHostingV1> {
        self.text
            .as_deref()
            .and_then(|t| LocalRegistryHostingV1::parse(t).ok())
    }
}

/// Since when each registry has had no ready endpoint.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    unready_since: BTreeMap<ServiceId, Instant>,
}

impl Readiness {
    pub fn observe(&mut self, registries: &[Registry], now: Instant) {
        self.unready_since
            .retain(|id, _| registries.iter().any(|r| &r.id == id && !r.ready));
        for registry in registries.iter().filter(|r| !r.ready) {
            self.unready_since.entry(registry.id.clone()).or_insert(now);
        }
    }

    /// Time left before an unready registry is withdrawn; `None` once it is past.
    fn grace_left(&self, id: &ServiceId, now: Instant, grace: Duration) -> Option<Duration> {
        let since = self.unready_since.get(id)?;
        grace
            .checked_sub(now.saturating_duration_since(*since))
            .filter(|left| !left.is_zero())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing to write.
    Keep,
    /// Server-side apply this document; `source` is the registry it describes (none for a help-only one).
    Apply {
        document: LocalRegistryHostingV1,
        source: Option<ServiceId>,
    },
    /// Delete the ConfigMap we wrote; nothing is left to say.
    Delete,
}

/// Something to tell users, as an Event on `regarding`.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    pub regarding: ObjectReference,
    pub warning: bool,
    /// Bounded PascalCase label.
    pub reason: &'static str,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub action: Action,
    pub notices: Vec<Notice>,
    /// Look again then even if nothing changes: a grace period runs out.
    pub recheck_after: Option<Duration>,
    /// Why nothing is written although the published document is not the desired one, for the log.
    pub held_back: Option<String>,
}

pub fn decide(
    registries: &[Registry],
    existing: Option<&Existing>,
    readiness: &Readiness,
    now: Instant,
    settings: &PublishArgs,
) -> Decision {
    let published = existing.and_then(Existing::document);
    let grace = |r: &Registry| readiness.grace_left(&r.id, now, settings.grace_period);
    // An unready registry keeps its place only while its grace lasts, and only if it is what readers see now:
    // a registry that was never ready here is not published on credit.
    let eligible = |r: &Registry| {
        r.ready || (grace(r).is_some() && r.document.as_ref().ok() == published.as_ref())
    };
    let winner = registries.iter().find(|r| eligible(r));
    let recheck_after = registries
        .iter()
        .filter(|r| eligible(r) && !r.ready)
        .filter_map(grace)
        .min();

    let mut notices = Vec::new();
    for registry in registries {
        if let Err(problem) = &registry.document {
            notices.push(warning(registry, problem.reason, problem.message.clone()));
        } else if Some(registry.id.clone()) != winner.map(|w| w.id.clone()) {
            let message = match winner {
                Some(w) if eligible(registry) => format!(
                    "not published: registry {} ranks higher (priority {} vs {}, then oldest, then by name)",
                    w.id, w.priority, registry.priority
                ),
                Some(w) => format!(
                    "not published: no ready endpoint; registry {} is published instead",
                    w.id
                ),
                None => "not published: no ready endpoint".to_string(),
            };
            notices.push(normal(registry, "NotPublished", message));
        }
    }

    let desired = match winner {
        Some(Registry {
            document: Err(_), ..
        }) => None,
        Some(Registry {
            document: Ok(document),
            id,
            ..
        }) => Some(Some((document.clone(), Some(id.clone())))),
        None => Some(help_only(registries, settings).map(|d| (d, None))),
    };
    let target = format!(
        "{}/{}",
        settings.configmap_namespace, settings.configmap_name
    );
    let (action, held_back) = match (desired, existing) {
        // The winner is misconfigured: the last good document stays.
        (None, _) => (
            Action::Keep,
            winner.map(|w| format!("registry {} has a problem; {target} is left as it is", w.id)),
        ),
        (Some(None), None) => (Action::Keep, None),
        (Some(Some((document, source))), None) => (Action::Apply { document, source }, None),
        (Some(desired), Some(existing)) if !existing.owned && !settings.take_over => {
            let differs = desired.as_ref().map(|(d, _)| d) != published.as_ref();
            let why = format!(
                "{target} was written by {} and is not changed without --take-over",
                existing.writer.as_deref().unwrap_or("another tool")
            );
            if let (true, Some(winner)) = (differs, winner) {
                notices.push(warning(
                    winner,
                    "ForeignConfigMap",
                    format!("not published: {why}"),
                ));
            }
            (Action::Keep, differs.then_some(why))
        }
        (Some(Some((document, source))), Some(existing)) => {
            let current =
                existing.owned && existing.text.as_deref() == Some(document.render().as_str());
            (
                if current {
                    Action::Keep
                } else {
                    Action::Apply { document, source }
                },
                None,
            )
        }
        (Some(None), Some(existing)) => (
            if existing.owned {
                Action::Delete
            } else {
                Action::Keep
            },
            None,
        ),
    };
    if let Some(Registry {
        document: Ok(document),
        ..
    }) = winner
    {
        let readers_see_it = match &action {
            Action::Apply { source, .. } => source.is_some(),
            _ => published.as_ref() == Some(document),
        };
        if let (true, Some(winner)) = (readers_see_it, winner) {
            notices.push(normal(
                winner,
                "Published",
                format!("published to {target}: {document}"),
            ));
        }
    }
    Decision {
        action,
        notices,
        recheck_after,
        held_back,
    }
}

/// The help-only document for when no registry is usable: the configured URL, else the best registry's own.
fn help_only(registries: &[Registry], settings: &PublishArgs) -> Option<LocalRegistryHostingV1> {
    let annotated = registries
        .iter()
        .find_map(|r| r.document.as_ref().ok()?.help.clone());
    settings
        .help_url
        .clone()
        .or(annotated)
        .map(LocalRegistryHostingV1::help_only)
}

/// The ConfigMap to server-side apply for `document`.
pub fn desired_configmap(document: &LocalRegistryHostingV1, settings: &PublishArgs) -> ConfigMap {
    let mut configmap = ConfigMap::default();
    configmap.metadata.name = Some(settings.configmap_name.clone());
    configmap.metadata.namespace = Some(settings.configmap_namespace.clone());
    configmap.metadata.labels = Some(BTreeMap::from([(
        MANAGED_BY_LABEL.to_string(),
        MANAGER.to_string(),
    )]));
    configmap.data = Some(BTreeMap::from([(DATA_KEY.to_string(), document.render())]));
    configmap
}

fn warning(registry: &Registry, reason: &'static str, message: String) -> Notice {
    Notice {
        regarding: registry.reference.clone(),
        warning: true,
        reason,
        message,
    }
}

fn normal(registry: &Registry, reason: &'static str, message: String) -> Notice {
    Notice {
        regarding: registry.reference.clone(),
        warning: false,
        reason,
        message,
    }
}
