//! The publisher's whole decision in one pure call: given the registries, the stored ConfigMap, what the publisher
//! remembers from earlier passes (readiness, another writer's corrections), leadership and the settings, what to
//! write, which registry readers then see, what to tell users, and when to look again. No I/O; time is passed in.
//! The reconcile loop, `render` and `doctor` all call [`decide`].

pub mod fights;
mod notice;
mod readiness;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use tokio::time::Instant;

use crate::hosting::LocalRegistryHostingV1;
use crate::hosting::configmap::{self, Stored};
use crate::registry::{Ports, Registries, Registry, ServiceId, Wiring};
use crate::settings::Settings;
pub use fights::{Fights, Gate};
pub use notice::{Notice, Reason};
pub use readiness::Readiness;

/// What the publisher carries from one pass to the next.
#[derive(Clone, Debug, Default)]
pub struct Memory {
    pub readiness: Readiness,
    pub fights: Fights,
}

/// Everything a decision depends on.
pub struct Input<'a> {
    pub registries: &'a Registries,
    /// The target ConfigMap as stored; `None` when there is none.
    pub stored: Option<&'a Stored>,
    pub memory: &'a Memory,
    /// Whether this replica may write. Followers decide too (to be ready to take over) but write and tell nothing.
    pub leading: bool,
    pub now: Instant,
    pub settings: &'a Settings,
}

impl<'a> Input<'a> {
    /// A pass now over `registries` and the ConfigMap as `stored`, with what `memory` remembers of earlier passes,
    /// by the leader if `leading`. One-off passes (doctor, render) decide as the leader with nothing remembered.
    pub fn new(
        registries: &'a Registries,
        stored: Option<&'a Stored>,
        memory: &'a Memory,
        leading: bool,
        settings: &'a Settings,
    ) -> Self {
        Self { registries, stored, memory, leading, now: Instant::now(), settings }
    }
}

/// What to do to the ConfigMap.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    Keep,
    /// Server-side apply exactly this object: `document` in our key, or, with none, our key given up while others'
    /// keys stay.
    Apply {
        configmap: Box<ConfigMap>,
        document: Option<LocalRegistryHostingV1>,
    },
    /// Delete the ConfigMap we wrote, if it is still this version: nothing is left to say.
    Delete {
        uid: Option<String>,
        resource_version: Option<String>,
    },
}

/// The registry readers see: what every other concern (pull credentials, nodes) follows.
#[derive(Clone, Debug, PartialEq)]
pub struct Published {
    pub registry: ServiceId,
    pub reference: ObjectReference,
    pub document: LocalRegistryHostingV1,
    /// What the concerns that follow it read of its Service.
    pub wiring: Wiring,
    pub ports: Ports,
    /// The addresses that name its Service alone (see [`Registry::own_addresses`]).
    pub own_addresses: Vec<String>,
}

impl Published {
    pub(crate) fn of(registry: &Registry, document: &LocalRegistryHostingV1) -> Self {
        Self {
            registry: registry.id.clone(),
            reference: registry.reference.clone(),
            document: document.clone(),
            wiring: registry.wiring.clone(),
            ports: registry.ports,
            own_addresses: registry.own_addresses.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Decision {
    pub action: Action,
    /// The registry readers see once the action is carried out; `None` for a help-only document or none.
    pub published: Option<Published>,
    /// The registry readers see now, before the action: what they keep seeing if a write is refused.
    pub published_now: Option<Published>,
    /// The winner has a problem, so the stored document stays as it is: whatever follows from it stays too, although
    /// `published` cannot name a registry that derives it now.
    pub kept: bool,
    /// What our ConfigMap holds once the action is carried out.
    pub document: Option<LocalRegistryHostingV1>,
    /// Who a refused write is told on: the registry it was for, else the ConfigMap.
    pub subject: ObjectReference,
    pub notices: Vec<Notice>,
    /// Told only once the action went through: the winner's `Published`, when this pass writes it.
    pub confirmation: Option<Notice>,
    /// Look again then even if nothing changes: a grace period or a hold runs out.
    pub recheck_after: Option<Duration>,
    /// Why nothing is written although the stored document is not the one wanted, for the log.
    pub held_back: Option<String>,
    /// A write is due but held back: another writer keeps undoing ours.
    pub held: bool,
    /// What to remember for the next pass.
    pub memory: Memory,
}

/// How to say nothing: delete the ConfigMap we wrote, or only our key when others share it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Withdrawal {
    Nothing,
    Delete,
    RemoveKey,
}

pub fn withdrawal(stored: &Stored) -> Withdrawal {
    match stored {
        Stored { owned: false, .. } => Withdrawal::Nothing,
        Stored { shared: false, .. } => Withdrawal::Delete,
        Stored { text: Some(_), .. } => Withdrawal::RemoveKey,
        _ => Withdrawal::Nothing,
    }
}

pub fn decide(input: &Input) -> Decision {
    let Input { registries, stored, now, settings, .. } = *input;
    let mut memory = input.memory.clone();
    memory.readiness.observe(&registries.counted, now);
    let readiness = &memory.readiness;
    let target = settings.target();
    let published = stored.and_then(|s| s.document.as_ref());
    let grace = |r: &Registry| readiness.grace_left(&r.id, now, settings.grace_period);
    // An unready registry keeps its place only while its grace lasts, and only if it is what readers see now:
    // a registry that was never ready here is not published on credit.
    let eligible = |r: &Registry| r.ready || (grace(r).is_some() && r.document.as_ref().ok() == published);
    let winner = registries.counted.iter().find(|r| eligible(r));
    let mut recheck_after = registries.counted.iter().filter(|r| eligible(r) && !r.ready).filter_map(grace).min();

    let mut notices = ignored_notices(registries);
    for registry in &registries.counted {
        if let Err(problem) = &registry.document {
            notices.push(Notice::new(
                &registry.reference,
                Reason::Misconfigured(problem.fault),
                problem.message.clone(),
            ));
        } else if winner.is_none_or(|w| w.id != registry.id) {
            // Said in words of this registry's own state only, so a new winner among a thousand registries costs
            // Events on the two that changed, not one per loser: the ConfigMap and the winner's Event name it.
            let message = if eligible(registry) {
                format!(
                    "not published: another registry ranks higher (this one has priority {}; the highest priority \
                     wins, then the oldest, then by name; {target} names the one published)",
                    registry.priority
                )
            } else {
                "not published: no ready endpoint".to_string()
            };
            notices.push(Notice::new(&registry.reference, Reason::NotPublished, message));
        }
    }

    // The document wanted: `None` when the winner is misconfigured (the last good one stays).
    let wanted: Option<Option<(LocalRegistryHostingV1, Option<&Registry>)>> = match winner {
        Some(Registry { document: Err(_), .. }) => None,
        Some(registry @ Registry { document: Ok(document), .. }) => Some(Some((document.clone(), Some(registry)))),
        None => Some(help_only(&registries.counted, settings).map(|d| (d, None))),
    };
    let mut held_back = None;
    let mut action = Action::Keep;
    let mut writing_for = None;
    let kept = wanted.is_none() && stored.and_then(Stored::ours).is_some();
    match (wanted, stored) {
        (None, _) => {
            held_back = winner.map(|w| format!("registry {} has a problem; {target} is left as it is", w.id));
        }
        (Some(None), None) => {}
        (Some(wanted), Some(stored)) if !stored.owned && !settings.take_over => {
            let differs = wanted.as_ref().map(|(d, _)| d) != published;
            let why = format!(
                "{target} was written by {} and is not changed without --take-over",
                stored.writer.as_deref().unwrap_or("another tool")
            );
            if let (true, Some(winner)) = (differs, winner) {
                notices.push(Notice::new(&winner.reference, Reason::ForeignConfigMap, format!("not published: {why}")));
            }
            held_back = differs.then_some(why);
        }
        (Some(Some((document, registry))), stored) => {
            let current = stored.is_some_and(|s| s.owned && s.text.as_deref() == Some(document.render().as_str()));
            if !current {
                writing_for = registry;
                let configmap = Box::new(configmap::desired(Some(&document), settings));
                action = Action::Apply { configmap, document: Some(document) };
            }
        }
        (Some(None), Some(stored)) => {
            action = match withdrawal(stored) {
                Withdrawal::Nothing => Action::Keep,
                Withdrawal::Delete => {
                    Action::Delete { uid: stored.uid.clone(), resource_version: stored.resource_version.clone() }
                }
                Withdrawal::RemoveKey => {
                    Action::Apply { configmap: Box::new(configmap::desired(None, settings)), document: None }
                }
            };
        }
    }
    let subject = writing_for.map_or_else(|| configmap::reference(settings, stored), |r| r.reference.clone());

    let published_now = readers_see(stored, registries);
    // Followers watch and decide, so they are ready to take over, but only the leader writes and tells.
    if !input.leading {
        (action, held_back) = (Action::Keep, None);
        notices.clear();
    }
    let mut held = false;
    if action != Action::Keep {
        let stored_version = stored.and_then(|s| s.resource_version.as_deref());
        if let Gate::Hold { until, started, hold } = memory.fights.before_write(stored_version, now) {
            held = true;
            if started {
                notices.push(conflict_notice(settings, stored, hold));
            }
            let left = until.saturating_duration_since(now);
            recheck_after = Some(recheck_after.map_or(left, |recheck| recheck.min(left)));
            action = Action::Keep;
        }
    }
    let (published, document) = match &action {
        Action::Apply { document: Some(document), .. } => {
            (writing_for.map(|registry| Published::of(registry, document)), Some(document.clone()))
        }
        Action::Apply { document: None, .. } | Action::Delete { .. } => (None, None),
        Action::Keep => (published_now.clone(), stored.and_then(Stored::ours).cloned()),
    };
    // The winner is told it is published once readers see its document, whoever wrote it: now, or once this pass's
    // write went through.
    let mut confirmation = None;
    if let (true, Some(Registry { document: Ok(wanted), reference, .. })) = (input.leading, winner) {
        let told = || Notice::new(reference, Reason::Published, format!("published to {target}: {wanted}"));
        match &action {
            // Writing the winner's document: told once the write went through.
            Action::Apply { document: Some(_), .. } => confirmation = Some(told()),
            Action::Keep if stored.and_then(|s| s.document.as_ref()) == Some(wanted) => notices.push(told()),
            Action::Apply { .. } | Action::Keep | Action::Delete { .. } => {}
        }
    }
    Decision {
        action,
        published,
        published_now,
        kept,
        document,
        subject,
        notices,
        confirmation,
        recheck_after,
        held_back,
        held,
        memory,
    }
}

/// The allowed registry whose document our stored ConfigMap holds.
fn readers_see(stored: Option<&Stored>, registries: &Registries) -> Option<Published> {
    let document = stored?.ours()?;
    let registry = registries.counted.iter().find(|r| r.document.as_ref().ok() == Some(document))?;
    Some(Published::of(registry, document))
}

/// Every ignored registry is told why; a thousand in one namespace share one message.
fn ignored_notices(registries: &Registries) -> Vec<Notice> {
    let mut said_to: BTreeMap<&str, Arc<str>> = BTreeMap::new();
    registries
        .ignored
        .iter()
        .map(|ignored| {
            let namespace = ignored.id.namespace.as_str();
            let message =
                said_to.entry(namespace).or_insert_with(|| crate::registry::not_allowed_message(namespace).into());
            Notice {
                regarding: ignored.reference.clone(),
                reason: Reason::NamespaceNotAllowed,
                message: message.clone(),
            }
        })
        .collect()
}

/// The help-only document for when no registry is usable: the configured URL, else the best registry's own.
fn help_only(registries: &[Registry], settings: &Settings) -> Option<LocalRegistryHostingV1> {
    let annotated = registries.iter().find_map(|r| r.document.as_ref().ok()?.help.clone());
    settings.help_url.clone().or(annotated).map(LocalRegistryHostingV1::help_only)
}

fn conflict_notice(settings: &Settings, stored: Option<&Stored>, hold: Duration) -> Notice {
    let other = stored.and_then(|s| s.writer.as_deref()).unwrap_or("deleted it");
    let message = format!(
        "another writer keeps undoing what this controller publishes ({other}); writes wait {}s instead of fighting: \
         run one controller per ConfigMap (a second Helm release, a local run, a script?)",
        hold.as_secs()
    );
    Notice::new(&configmap::reference(settings, stored), Reason::ConflictingWriter, message)
}

#[cfg(test)]
mod tests;
