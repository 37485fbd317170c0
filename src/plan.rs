//! Given the registries, what is published now and the settings: what to write, what to tell users, and when to
//! look again. Pure: no I/O, time passed in.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::ResourceExt;

use crate::hosting::{DATA_KEY, LocalRegistryHostingV1};
use crate::registry::{Registry, ServiceId};
use crate::settings::Settings;

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
    /// That text parsed, once; `None` when absent or unparsable.
    pub document: Option<LocalRegistryHostingV1>,
    /// Holds keys besides ours (a future `localRegistryHosting.v2`, another tool's): withdrawing removes only ours.
    pub shared: bool,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

impl Existing {
    pub fn from_configmap(configmap: &ConfigMap) -> Self {
        let managed_by = configmap.labels().get(MANAGED_BY_LABEL).cloned();
        let first_manager = configmap.managed_fields().iter().find_map(|f| f.manager.clone());
        let text = configmap.data.as_ref().and_then(|d| d.get(DATA_KEY)).cloned();
        Self {
            owned: managed_by.as_deref() == Some(MANAGER),
            writer: managed_by.or(first_manager),
            document: text.as_deref().and_then(|t| LocalRegistryHostingV1::parse(t).ok()),
            text,
            shared: configmap.data.iter().flatten().any(|(key, _)| key != DATA_KEY)
                || configmap.binary_data.as_ref().is_some_and(|b| !b.is_empty()),
            uid: configmap.metadata.uid.clone(),
            resource_version: configmap.metadata.resource_version.clone(),
        }
    }
}

/// Since when each registry has had no ready endpoint.
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    unready_since: BTreeMap<ServiceId, Instant>,
}

impl Readiness {
    pub fn observe(&mut self, registries: &[Registry], now: Instant) {
        // Only a trusted registry can be published, so only its readiness has a grace period to keep.
        let unready: BTreeSet<&ServiceId> =
            registries.iter().filter(|r| r.trusted && !r.ready).map(|r| &r.id).collect();
        self.unready_since.retain(|id, _| unready.contains(id));
        for id in unready {
            self.unready_since.entry(id.clone()).or_insert(now);
        }
    }

    /// Time left before an unready registry is withdrawn; `None` once it is past.
    fn grace_left(&self, id: &ServiceId, now: Instant, grace: Duration) -> Option<Duration> {
        let since = self.unready_since.get(id)?;
        grace.checked_sub(now.saturating_duration_since(*since)).filter(|left| !left.is_zero())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing to write.
    Keep,
    /// Server-side apply this document; `source` is the registry it describes (none for a help-only one).
    Apply { document: LocalRegistryHostingV1, source: Option<ServiceId> },
    /// Delete the ConfigMap we wrote; nothing is left to say.
    Delete,
    /// Remove only our key: others' keys share the ConfigMap.
    RemoveKey,
}

/// Something to tell users, as an Event on `regarding`.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    pub regarding: ObjectReference,
    pub warning: bool,
    /// Bounded PascalCase label.
    pub reason: &'static str,
    /// Shared: a thousand ignored registries in one namespace are told the same words.
    pub message: Arc<str>,
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
    settings: &Settings,
) -> Decision {
    let published = existing.and_then(|e| e.document.as_ref());
    // A registry from a namespace that may not name the cluster's registry takes no part; it is only told why.
    let (trusted, untrusted): (Vec<&Registry>, Vec<&Registry>) = registries.iter().partition(|r| r.trusted);
    let registries = trusted;
    let grace = |r: &Registry| readiness.grace_left(&r.id, now, settings.grace_period);
    // An unready registry keeps its place only while its grace lasts, and only if it is what readers see now:
    // a registry that was never ready here is not published on credit.
    let eligible = |r: &Registry| r.ready || (grace(r).is_some() && r.document.as_ref().ok() == published);
    let winner = registries.iter().copied().find(|r| eligible(r));
    let recheck_after = registries.iter().copied().filter(|r| eligible(r) && !r.ready).filter_map(grace).min();

    let mut said_to: BTreeMap<&str, Arc<str>> = BTreeMap::new();
    let mut notices: Vec<Notice> = untrusted
        .iter()
        .map(|r| {
            let namespace = r.id.namespace.as_str();
            let message =
                said_to.entry(namespace).or_insert_with(|| crate::registry::untrusted_message(namespace).into());
            warning(r, "NamespaceNotAllowed", message.clone())
        })
        .collect();
    for &registry in &registries {
        if let Err(problem) = &registry.document {
            notices.push(warning(registry, problem.reason, problem.message.clone()));
        } else if winner.is_none_or(|w| w.id != registry.id) {
            let message = match winner {
                Some(w) if eligible(registry) => format!(
                    "not published: registry {} ranks higher (priority {} vs {}, then oldest, then by name)",
                    w.id, w.priority, registry.priority
                ),
                Some(w) => format!("not published: no ready endpoint; registry {} is published instead", w.id),
                None => "not published: no ready endpoint".to_string(),
            };
            notices.push(normal(registry, "NotPublished", message));
        }
    }

    let desired = match winner {
        Some(Registry { document: Err(_), .. }) => None,
        Some(Registry { document: Ok(document), id, .. }) => Some(Some((document.clone(), Some(id.clone())))),
        None => Some(help_only(&registries, settings).map(|d| (d, None))),
    };
    let target = settings.target();
    let (action, held_back) = match (desired, existing) {
        // The winner is misconfigured: the last good document stays.
        (None, _) => {
            (Action::Keep, winner.map(|w| format!("registry {} has a problem; {target} is left as it is", w.id)))
        }
        (Some(None), None) => (Action::Keep, None),
        (Some(Some((document, source))), None) => (Action::Apply { document, source }, None),
        (Some(desired), Some(existing)) if !existing.owned && !settings.take_over => {
            let differs = desired.as_ref().map(|(d, _)| d) != published;
            let why = format!(
                "{target} was written by {} and is not changed without --take-over",
                existing.writer.as_deref().unwrap_or("another tool")
            );
            if let (true, Some(winner)) = (differs, winner) {
                notices.push(warning(winner, "ForeignConfigMap", format!("not published: {why}")));
            }
            (Action::Keep, differs.then_some(why))
        }
        (Some(Some((document, source))), Some(existing)) => {
            let current = existing.owned && existing.text.as_deref() == Some(document.render().as_str());
            (if current { Action::Keep } else { Action::Apply { document, source } }, None)
        }
        (Some(None), Some(existing)) => (withdrawal(existing), None),
    };
    if let Some(Registry { document: Ok(document), .. }) = winner {
        let readers_see_it = match &action {
            Action::Apply { source, .. } => source.is_some(),
            _ => published == Some(document),
        };
        if let (true, Some(winner)) = (readers_see_it, winner) {
            notices.push(normal(winner, "Published", format!("published to {target}: {document}")));
        }
    }
    Decision { action, notices, recheck_after, held_back }
}

/// How to say nothing: delete the ConfigMap we wrote, or only our key when others share it.
pub fn withdrawal(existing: &Existing) -> Action {
    match existing {
        Existing { owned: false, .. } => Action::Keep,
        Existing { shared: false, .. } => Action::Delete,
        Existing { text: Some(_), .. } => Action::RemoveKey,
        _ => Action::Keep,
    }
}

/// The help-only document for when no registry is usable: the configured URL, else the best registry's own.
fn help_only(registries: &[&Registry], settings: &Settings) -> Option<LocalRegistryHostingV1> {
    let annotated = registries.iter().find_map(|r| r.document.as_ref().ok()?.help.clone());
    settings.help_url.clone().or(annotated).map(LocalRegistryHostingV1::help_only)
}

/// The ConfigMap to server-side apply for `document`; with none, an apply that gives up our key (server-side apply
/// removes a field its only manager no longer sets) and keeps our label.
pub fn desired_configmap(document: Option<&LocalRegistryHostingV1>, settings: &Settings) -> ConfigMap {
    let mut configmap = released_configmap(settings);
    configmap.metadata.labels = Some(BTreeMap::from([(MANAGED_BY_LABEL.to_string(), MANAGER.to_string())]));
    configmap.data = document.map(|document| BTreeMap::from([(DATA_KEY.to_string(), document.render())]));
    configmap
}

/// The ConfigMap to server-side apply to give up everything we claimed, key and label, for good (uninstall); the
/// fields other managers own stay.
pub fn released_configmap(settings: &Settings) -> ConfigMap {
    let mut configmap = ConfigMap::default();
    configmap.metadata.name = Some(settings.configmap_name.clone());
    configmap.metadata.namespace = Some(settings.configmap_namespace.clone());
    configmap
}

/// The registry readers see once `action` is carried out: the one written, or for no write the one whose document
/// the ConfigMap (ours) holds.
pub fn published_registry<'a>(
    action: &Action,
    existing: Option<&Existing>,
    registries: &'a [Registry],
) -> Option<&'a Registry> {
    match action {
        Action::Apply { source, .. } => registries.iter().find(|r| Some(&r.id) == source.as_ref()),
        Action::Keep => {
            let document = existing.filter(|e| e.owned).and_then(|e| e.document.as_ref())?;
            registries.iter().find(|r| r.trusted && r.document.as_ref().ok() == Some(document))
        }
        Action::Delete | Action::RemoveKey => None,
    }
}

/// The published ConfigMap as an Event's subject, for what concerns no registry.
pub fn configmap_reference(settings: &Settings, existing: Option<&Existing>) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        namespace: Some(settings.configmap_namespace.clone()),
        name: Some(settings.configmap_name.clone()),
        uid: existing.and_then(|e| e.uid.clone()),
        ..ObjectReference::default()
    }
}

fn warning(registry: &Registry, reason: &'static str, message: impl Into<Arc<str>>) -> Notice {
    Notice { regarding: registry.reference.clone(), warning: true, reason, message: message.into() }
}

fn normal(registry: &Registry, reason: &'static str, message: impl Into<Arc<str>>) -> Notice {
    Notice { regarding: registry.reference.clone(), warning: false, reason, message: message.into() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{Problem, Source};

    const HELP: &str = "https://docs.example/registry";

    fn registry(name: &str, priority: i32, ready: bool) -> Registry {
        let document = LocalRegistryHostingV1 {
            host: Some(format!("localhost:{}", 30000 + priority)),
            host_from_cluster_network: Some(format!("{name}.reg.svc.cluster.local:5000")),
            ..LocalRegistryHostingV1::default()
        };
        Registry {
            id: ServiceId { namespace: "reg".into(), name: name.into() },
            source: Source::Labelled,
            priority,
            created: None,
            ready,
            document: Ok(document),
            reference: ObjectReference { name: Some(name.into()), namespace: Some("reg".into()), ..Default::default() },
            trusted: true,
            pull_secret: None,
        }
    }

    fn broken(name: &str) -> Registry {
        let problem = Problem { reason: "AmbiguousPort", message: "two ports".into() };
        Registry { document: Err(problem), ..registry(name, 0, true) }
    }

    fn existing(owned: bool, document: Option<&LocalRegistryHostingV1>) -> Existing {
        Existing {
            owned,
            writer: Some(if owned { MANAGER } else { "ctlptl" }.into()),
            text: document.map(LocalRegistryHostingV1::render),
            document: document.cloned(),
            shared: false,
            uid: Some("uid-1".into()),
            resource_version: Some("7".into()),
        }
    }

    fn doc(r: &Registry) -> LocalRegistryHostingV1 {
        r.document.clone().expect("a valid fixture")
    }

    fn decide_now(registries: &[Registry], current: Option<&Existing>, settings: &Settings) -> Decision {
        let now = Instant::now();
        let mut readiness = Readiness::default();
        readiness.observe(registries, now);
        decide(registries, current, &readiness, now, settings)
    }

    fn reasons(decision: &Decision) -> Vec<(&str, &'static str)> {
        decision.notices.iter().map(|n| (n.regarding.name.as_deref().unwrap_or_default(), n.reason)).collect()
    }

    #[test]
    fn publishes_the_ready_registry_and_says_so() {
        let zot = registry("zot", 0, true);
        let decision = decide_now(std::slice::from_ref(&zot), None, &Settings::default());
        assert_eq!(decision.action, Action::Apply { document: doc(&zot), source: Some(zot.id.clone()) });
        assert_eq!(reasons(&decision), [("zot", "Published")]);
    }

    #[test]
    fn writes_nothing_when_the_published_document_is_current() {
        let zot = registry("zot", 0, true);
        let current = existing(true, Some(&doc(&zot)));
        let decision = decide_now(std::slice::from_ref(&zot), Some(&current), &Settings::default());
        assert_eq!(decision.action, Action::Keep);
        assert_eq!(reasons(&decision), [("zot", "Published")], "the state is still worth stating once");
    }

    #[test]
    fn corrects_a_drifted_document_it_owns() {
        let zot = registry("zot", 0, true);
        let mut edited = doc(&zot);
        edited.host = Some("localhost:1".into());
        let decision =
            decide_now(std::slice::from_ref(&zot), Some(&existing(true, Some(&edited))), &Settings::default());
        assert!(matches!(decision.action, Action::Apply { .. }));
    }

    #[test]
    fn leaves_a_foreign_configmap_alone_unless_told_to_take_over() {
        let zot = registry("zot", 0, true);
        let foreign = existing(
            false,
            Some(&LocalRegistryHostingV1 { host: Some("localhost:5001".into()), ..Default::default() }),
        );
        let decision = decide_now(std::slice::from_ref(&zot), Some(&foreign), &Settings::default());
        assert_eq!(decision.action, Action::Keep);
        assert!(reasons(&decision).contains(&("zot", "ForeignConfigMap")));
        assert!(decision.held_back.as_deref().is_some_and(|why| why.contains("ctlptl") && why.contains("--take-over")));

        let agreeing = existing(false, Some(&doc(&zot)));
        let quiet = decide_now(std::slice::from_ref(&zot), Some(&agreeing), &Settings::default());
        assert_eq!((quiet.action, quiet.held_back), (Action::Keep, None), "nothing to complain about");

        let take_over = Settings { take_over: true, ..Settings::default() };
        let decision = decide_now(std::slice::from_ref(&zot), Some(&foreign), &take_over);
        assert!(matches!(decision.action, Action::Apply { .. }));
        let gone = decide_now(&[], Some(&foreign), &take_over);
        assert_eq!(gone.action, Action::Keep, "a foreign ConfigMap is never deleted");
    }

    #[test]
    fn an_unready_published_registry_stays_for_the_grace_period_then_gives_way_to_help() {
        let settings = Settings { help_url: Some(HELP.into()), ..Settings::default() };
        let zot = registry("zot", 0, false);
        let current = existing(true, Some(&doc(&zot)));
        let start = Instant::now();
        let mut readiness = Readiness::default();
        readiness.observe(std::slice::from_ref(&zot), start);

        let during =
            decide(std::slice::from_ref(&zot), Some(&current), &readiness, start + Duration::from_secs(5), &settings);
        assert_eq!(during.action, Action::Keep);
        assert_eq!(during.recheck_after, Some(Duration::from_secs(10)));

        let after =
            decide(std::slice::from_ref(&zot), Some(&current), &readiness, start + Duration::from_secs(15), &settings);
        assert_eq!(
            after.action,
            Action::Apply { document: LocalRegistryHostingV1::help_only(HELP.into()), source: None }
        );
        assert_eq!(after.recheck_after, None);
    }

    #[test]
    fn without_a_help_url_a_withdrawn_registry_means_deleting_what_we_wrote() {
        let zot = registry("zot", 0, true);
        let current = existing(true, Some(&doc(&zot)));
        assert_eq!(decide_now(&[], Some(&current), &Settings::default()).action, Action::Delete);
        assert_eq!(decide_now(&[], None, &Settings::default()).action, Action::Keep);
    }

    #[test]
    fn withdrawing_from_a_shared_configmap_removes_only_our_key() {
        let zot = registry("zot", 0, true);
        let shared = Existing { shared: true, ..existing(true, Some(&doc(&zot))) };
        assert_eq!(decide_now(&[], Some(&shared), &Settings::default()).action, Action::RemoveKey);
        // Once our key is gone there is nothing more to withdraw, and the others' keys are not ours to delete.
        let removed = Existing { text: None, document: None, ..shared.clone() };
        assert_eq!(decide_now(&[], Some(&removed), &Settings::default()).action, Action::Keep);
        let foreign = Existing { shared: true, ..existing(false, Some(&doc(&zot))) };
        assert_eq!(decide_now(&[], Some(&foreign), &Settings::default()).action, Action::Keep);
        let ours_only = desired_configmap(None, &Settings::default());
        assert!(ours_only.data.is_none() && ours_only.labels().contains_key(MANAGED_BY_LABEL));
    }

    #[test]
    fn other_keys_and_binary_data_make_a_configmap_shared() {
        let mut configmap = desired_configmap(Some(&doc(&registry("zot", 0, true))), &Settings::default());
        assert!(!Existing::from_configmap(&configmap).shared);
        configmap.data.get_or_insert_default().insert("localRegistryHosting.v2".into(), "{}".into());
        assert!(Existing::from_configmap(&configmap).shared);
        configmap.data = None;
        configmap.binary_data = Some(BTreeMap::from([("x".into(), k8s_openapi::ByteString(vec![1]))]));
        assert!(Existing::from_configmap(&configmap).shared);
    }

    #[test]
    fn a_registry_never_seen_ready_is_not_published_on_credit() {
        let fresh = registry("fresh", 10, false);
        let steady = registry("steady", 0, true);
        let decision = decide_now(&[fresh.clone(), steady.clone()], None, &Settings::default());
        assert_eq!(decision.action, Action::Apply { document: doc(&steady), source: Some(steady.id.clone()) });
        assert!(reasons(&decision).contains(&("fresh", "NotPublished")));
    }

    #[test]
    fn a_registry_from_a_namespace_not_allowed_takes_no_part_and_is_told_why() {
        let real = registry("real", 0, true);
        let mut hijack = Registry { priority: i32::MAX, ..registry("hijack", 9, true) };
        hijack.trusted = false;
        hijack.document.as_mut().unwrap().help = Some("https://evil.example/help".into());
        let settings = Settings { help_url: None, ..Settings::default() };
        let decision = decide_now(&[hijack.clone(), real.clone()], None, &settings);
        assert_eq!(decision.action, Action::Apply { document: doc(&real), source: Some(real.id.clone()) });
        let told = decision.notices.iter().find(|n| n.reason == "NamespaceNotAllowed").expect("a notice");
        assert!(told.warning && told.message.contains("kubectl label namespace reg"), "{}", told.message);
        // With the real registry gone, the untrusted one's help annotation is not published either.
        let current = existing(true, Some(&doc(&real)));
        assert_eq!(decide_now(&[hijack.clone()], Some(&current), &settings).action, Action::Delete);
        // Never ready and untrusted: it cannot freeze what is published while the real registry moves.
        hijack.ready = false;
        let mut moved = real.clone();
        moved.document.as_mut().unwrap().host = Some("localhost:30999".into());
        let decision = decide_now(&[hijack, moved.clone()], Some(&current), &settings);
        assert_eq!(decision.action, Action::Apply { document: doc(&moved), source: Some(moved.id.clone()) });
    }

    #[test]
    fn losers_are_told_who_won() {
        let (high, low) = (registry("high", 5, true), registry("low", 0, true));
        let decision = decide_now(&[high.clone(), low], None, &Settings::default());
        let loser = decision.notices.iter().find(|n| n.reason == "NotPublished").expect("a notice for the loser");
        assert!(loser.message.contains("reg/high") && loser.message.contains("priority 5 vs 0"), "{}", loser.message);
    }

    #[test]
    fn a_misconfigured_winner_keeps_the_last_good_document() {
        let zot = registry("zot", 0, true);
        let current = existing(true, Some(&doc(&zot)));
        let decision = decide_now(&[broken("zot")], Some(&current), &Settings::default());
        assert_eq!(decision.action, Action::Keep);
        assert_eq!(reasons(&decision), [("zot", "AmbiguousPort")]);
        assert!(decision.held_back.is_some());
    }

    #[test]
    fn the_desired_configmap_carries_one_key_and_our_label() {
        let settings = Settings::default();
        let configmap = desired_configmap(Some(&doc(&registry("zot", 0, true))), &settings);
        assert_eq!(configmap.metadata.namespace.as_deref(), Some("kube-public"));
        assert_eq!(configmap.metadata.name.as_deref(), Some("local-registry-hosting"));
        assert_eq!(configmap.labels().get(MANAGED_BY_LABEL).map(String::as_str), Some(MANAGER));
        assert_eq!(
            configmap.data.as_ref().map(|d| d.keys().cloned().collect::<Vec<_>>()),
            Some(vec![DATA_KEY.to_string()])
        );
    }
}
