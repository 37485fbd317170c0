use super::*;
use crate::keys::MANAGER;
use crate::registry::fixtures::{ignored, registry};
use crate::registry::{Fault, Problem};

const HELP: &str = "https://docs.example/registry";

fn broken(name: &str) -> Registry {
    let problem = Problem { fault: Fault::AmbiguousPort, message: "two ports".into() };
    Registry { document: Err(problem), ..registry(name, 0, true) }
}

fn stored(owned: bool, document: Option<&LocalRegistryHostingV1>) -> Stored {
    Stored {
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

fn allowed(list: &[Registry]) -> Registries {
    let mut allowed = list.to_vec();
    allowed.sort_by(|a, b| a.rank_key().cmp(&b.rank_key()));
    Registries { counted: allowed, ignored: Vec::new() }
}

fn decide_with(
    registries: &Registries,
    stored: Option<&Stored>,
    memory: &Memory,
    now: Instant,
    settings: &Settings,
) -> Decision {
    decide(&Input { registries, stored, memory, leading: true, now, settings })
}

fn decide_now(list: &[Registry], stored: Option<&Stored>, settings: &Settings) -> Decision {
    decide_with(&allowed(list), stored, &Memory::default(), Instant::now(), settings)
}

fn reasons(decision: &Decision) -> Vec<(&str, Reason)> {
    decision.notices.iter().map(|n| (n.regarding.name.as_deref().unwrap_or_default(), n.reason)).collect()
}

/// The document an Apply writes; `None` for any other action.
fn applied(decision: &Decision) -> Option<Option<&LocalRegistryHostingV1>> {
    match &decision.action {
        Action::Apply { document, configmap } => {
            let text = configmap.data.as_ref().and_then(|d| d.get(crate::hosting::DATA_KEY));
            assert_eq!(text, document.as_ref().map(LocalRegistryHostingV1::render).as_ref(), "the object carries it");
            Some(document.as_ref())
        }
        _ => None,
    }
}

#[test]
fn publishes_the_ready_registry_says_so_and_hands_it_on() {
    let zot = registry("zot", 0, true);
    let decision = decide_now(std::slice::from_ref(&zot), None, &Settings::default());
    assert_eq!(applied(&decision), Some(Some(&doc(&zot))));
    assert!(reasons(&decision).is_empty(), "nothing is said published before the write went through");
    let confirmation = decision.confirmation.as_ref().expect("told once written");
    assert!(confirmation.regards("reg", "zot") && confirmation.reason == Reason::Published);
    let published = decision.published.expect("the registry readers will see");
    assert_eq!((published.registry, published.document), (zot.id.clone(), doc(&zot)));
    assert_eq!(decision.document, Some(doc(&zot)));
    assert_eq!(decision.published_now, None, "until the write goes through, readers see nothing");
    assert_eq!(decision.subject, zot.reference, "a refused write is told on the registry it was for");
}

#[test]
fn writes_nothing_when_the_published_document_is_current() {
    let zot = registry("zot", 0, true);
    let current = stored(true, Some(&doc(&zot)));
    let decision = decide_now(std::slice::from_ref(&zot), Some(&current), &Settings::default());
    assert_eq!(decision.action, Action::Keep);
    assert_eq!(reasons(&decision), [("zot", Reason::Published)], "the state is still worth stating once");
    assert_eq!(decision.published.map(|p| p.registry), Some(zot.id.clone()), "readers still see it");
}

#[test]
fn corrects_a_drifted_document_it_owns() {
    let zot = registry("zot", 0, true);
    let mut edited = doc(&zot);
    edited.host = Some("localhost:1".into());
    let decision = decide_now(std::slice::from_ref(&zot), Some(&stored(true, Some(&edited))), &Settings::default());
    assert_eq!(applied(&decision), Some(Some(&doc(&zot))));
    assert_eq!(decision.published_now, None, "readers see a document no registry publishes");
    let moved = registry("zot", 1, true);
    let decision =
        decide_now(std::slice::from_ref(&moved), Some(&stored(true, Some(&doc(&zot)))), &Settings::default());
    assert_eq!(applied(&decision), Some(Some(&doc(&moved))));
    assert_eq!(decision.published_now, None, "the old values belong to no registry any more");
}

#[test]
fn leaves_a_foreign_configmap_alone_unless_told_to_take_over() {
    let zot = registry("zot", 0, true);
    let other = LocalRegistryHostingV1 { host: Some("localhost:5001".into()), ..Default::default() };
    let foreign = stored(false, Some(&other));
    let decision = decide_now(std::slice::from_ref(&zot), Some(&foreign), &Settings::default());
    assert_eq!(decision.action, Action::Keep);
    assert!(reasons(&decision).contains(&("zot", Reason::ForeignConfigMap)));
    assert!(decision.held_back.as_deref().is_some_and(|why| why.contains("ctlptl") && why.contains("--take-over")));
    assert_eq!(decision.published, None, "what another tool wrote is not handed on");

    let agreeing = stored(false, Some(&doc(&zot)));
    let quiet = decide_now(std::slice::from_ref(&zot), Some(&agreeing), &Settings::default());
    assert_eq!((&quiet.action, &quiet.held_back), (&Action::Keep, &None), "nothing to complain about");
    assert_eq!(reasons(&quiet), [("zot", Reason::Published)], "readers see its values");

    let take_over = Settings { take_over: true, ..Settings::default() };
    let decision = decide_now(std::slice::from_ref(&zot), Some(&foreign), &take_over);
    assert_eq!(applied(&decision), Some(Some(&doc(&zot))));
    let gone = decide_now(&[], Some(&foreign), &take_over);
    assert_eq!(gone.action, Action::Keep, "a foreign ConfigMap is never deleted");
}

#[test]
fn an_unready_published_registry_stays_for_the_grace_period_then_gives_way_to_help() {
    let settings = Settings { help_url: Some(HELP.into()), ..Settings::default() };
    let zot = registry("zot", 0, false);
    let current = stored(true, Some(&doc(&zot)));
    let registries = allowed(std::slice::from_ref(&zot));
    let start = Instant::now();
    let first = decide_with(&registries, Some(&current), &Memory::default(), start, &settings);
    assert_eq!(first.recheck_after, Some(Duration::from_secs(15)));

    let during = decide_with(&registries, Some(&current), &first.memory, start + Duration::from_secs(5), &settings);
    assert_eq!(during.action, Action::Keep);
    assert_eq!(during.recheck_after, Some(Duration::from_secs(10)), "the grace runs from when it was first unready");

    let after = decide_with(&registries, Some(&current), &during.memory, start + Duration::from_secs(15), &settings);
    assert_eq!(applied(&after), Some(Some(&LocalRegistryHostingV1::help_only(HELP.into()))));
    assert_eq!((after.recheck_after, after.published), (None, None));
}

#[test]
fn without_a_help_url_a_withdrawn_registry_means_deleting_what_we_wrote() {
    let zot = registry("zot", 0, true);
    let current = stored(true, Some(&doc(&zot)));
    let decision = decide_now(&[], Some(&current), &Settings::default());
    assert_eq!(decision.action, Action::Delete { uid: Some("uid-1".into()), resource_version: Some("7".into()) });
    assert_eq!((decision.published, decision.document), (None, None));
    assert_eq!(decide_now(&[], None, &Settings::default()).action, Action::Keep);
}

#[test]
fn withdrawing_from_a_shared_configmap_removes_only_our_key() {
    let zot = registry("zot", 0, true);
    let shared = Stored { shared: true, ..stored(true, Some(&doc(&zot))) };
    assert_eq!(applied(&decide_now(&[], Some(&shared), &Settings::default())), Some(None));
    assert_eq!(withdrawal(&shared), Withdrawal::RemoveKey);
    // Once our key is gone there is nothing more to withdraw, and the others' keys are not ours to delete.
    let removed = Stored { text: None, document: None, ..shared.clone() };
    assert_eq!(decide_now(&[], Some(&removed), &Settings::default()).action, Action::Keep);
    let foreign = Stored { shared: true, ..stored(false, Some(&doc(&zot))) };
    assert_eq!(decide_now(&[], Some(&foreign), &Settings::default()).action, Action::Keep);
    assert_eq!(withdrawal(&stored(true, None)), Withdrawal::Delete);
}

#[test]
fn a_registry_never_seen_ready_is_not_published_on_credit() {
    let fresh = registry("fresh", 10, false);
    let steady = registry("steady", 0, true);
    let decision = decide_now(&[fresh.clone(), steady.clone()], None, &Settings::default());
    assert_eq!(applied(&decision), Some(Some(&doc(&steady))));
    assert!(reasons(&decision).contains(&("fresh", Reason::NotPublished)));
    let notice = decision.notices.iter().find(|n| n.reason == Reason::NotPublished).expect("told");
    assert_eq!(&*notice.message, "not published: no ready endpoint");
    // Its grace is no reason to look again: it could not be published when the grace ends either.
    assert_eq!(decision.recheck_after, None);
}

#[test]
fn an_ignored_registry_takes_no_part_and_is_told_why_once_per_namespace_message() {
    let real = registry("real", 0, true);
    let registries = Registries {
        counted: vec![real.clone()],
        ignored: vec![ignored("tenant", "hijack-1"), ignored("tenant", "hijack-2")],
    };
    let settings = Settings::default();
    let decision = decide_with(&registries, None, &Memory::default(), Instant::now(), &settings);
    assert_eq!(applied(&decision), Some(Some(&doc(&real))));
    let told: Vec<&Notice> = decision.notices.iter().filter(|n| n.reason == Reason::NamespaceNotAllowed).collect();
    assert_eq!(told.len(), 2);
    assert!(
        told[0].reason.warning() && told[0].message.contains("kubectl label namespace tenant"),
        "{}",
        told[0].message
    );
    assert!(Arc::ptr_eq(&told[0].message, &told[1].message), "one message shared by the namespace");
    // With the real registry gone, nothing of the ignored ones is published: ours is deleted.
    let current = stored(true, Some(&doc(&real)));
    let only_ignored = Registries { counted: Vec::new(), ..registries };
    let decision = decide_with(&only_ignored, Some(&current), &Memory::default(), Instant::now(), &settings);
    assert!(matches!(decision.action, Action::Delete { .. }));
}

#[test]
fn losers_are_told_in_words_of_their_own_state_so_a_new_winner_does_not_retell_them() {
    let (high, low, lowest) = (registry("high", 5, true), registry("low", 0, true), registry("lowest", -1, true));
    let decision = decide_now(&[high.clone(), low.clone(), lowest.clone()], None, &Settings::default());
    let told = |decision: &Decision, name: &str| -> Notice {
        let notice = decision.notices.iter().find(|n| n.regards("reg", name) && n.reason == Reason::NotPublished);
        notice.cloned().unwrap_or_else(|| panic!("{name} is told: {:?}", reasons(decision)))
    };
    let loser = told(&decision, "low");
    assert!(
        loser.message.contains("another registry ranks higher") && loser.message.contains("priority 0"),
        "{}",
        loser.message
    );
    assert!(loser.message.contains("kube-public/local-registry-hosting names the one published"), "{}", loser.message);
    assert!(!loser.reason.warning());
    // A new winner: the other losers' words do not change, so their Events are not posted again.
    let new_winner = registry("high", 20, true);
    let again = decide_now(&[new_winner, low, lowest], None, &Settings::default());
    assert_eq!(told(&again, "lowest").message, told(&decision, "lowest").message);
    let unready = decide_now(&[high, registry("low", 9, false)], None, &Settings::default());
    assert_eq!(&*told(&unready, "low").message, "not published: no ready endpoint");
}

#[test]
fn a_misconfigured_winner_keeps_the_last_good_document() {
    let zot = registry("zot", 0, true);
    let current = stored(true, Some(&doc(&zot)));
    let decision = decide_now(&[broken("zot")], Some(&current), &Settings::default());
    assert_eq!(decision.action, Action::Keep);
    assert_eq!(reasons(&decision), [("zot", Reason::Misconfigured(Fault::AmbiguousPort))]);
    assert!(decision.held_back.is_some());
    assert_eq!(decision.document, Some(doc(&zot)), "readers keep the last good document");
    // No registry derives that document now, so nothing names who publishes it; what follows from it (node files,
    // pull Secrets) is kept rather than withdrawn.
    assert_eq!(decision.published, None);
    assert!(decision.kept, "the other concerns keep what follows from the kept document");
    // With nothing stored there is nothing to keep; a healthy winner is not kept either.
    assert!(!decide_now(&[broken("zot")], None, &Settings::default()).kept);
    assert!(!decide_now(std::slice::from_ref(&zot), Some(&current), &Settings::default()).kept);
}

#[test]
fn the_help_url_comes_from_the_settings_else_the_best_registrys_annotation() {
    let mut zot = registry("zot", 0, false);
    zot.document.as_mut().unwrap().help = Some("https://wiki.example/zot".into());
    let annotated = decide_now(std::slice::from_ref(&zot), None, &Settings::default());
    assert_eq!(applied(&annotated), Some(Some(&LocalRegistryHostingV1::help_only("https://wiki.example/zot".into()))));
    let configured = Settings { help_url: Some(HELP.into()), ..Settings::default() };
    let decision = decide_now(std::slice::from_ref(&zot), None, &configured);
    assert_eq!(applied(&decision), Some(Some(&LocalRegistryHostingV1::help_only(HELP.into()))));
    assert_eq!(decision.subject.kind.as_deref(), Some("ConfigMap"), "a help-only write concerns no registry");
}

#[test]
fn a_follower_decides_but_neither_writes_nor_tells() {
    let zot = registry("zot", 0, true);
    let registries = allowed(std::slice::from_ref(&zot));
    let (settings, memory, now) = (Settings::default(), Memory::default(), Instant::now());
    let follower = |stored: Option<&Stored>| {
        decide(&Input { registries: &registries, stored, memory: &memory, leading: false, now, settings: &settings })
    };
    let fresh = follower(None);
    assert_eq!(fresh.action, Action::Keep);
    assert!(fresh.notices.is_empty() && fresh.published.is_none());
    let current = stored(true, Some(&doc(&zot)));
    let knows = follower(Some(&current));
    assert!(knows.notices.is_empty() && knows.confirmation.is_none(), "the leader tells it is published");
    assert_eq!(knows.document.as_ref(), Some(&doc(&zot)));
    assert_eq!(knows.published.map(|p| p.registry), Some(zot.id.clone()), "it knows what readers see");
    let mut other = doc(&zot);
    other.host = Some("localhost:1".into());
    let foreign = Stored { owned: false, writer: Some("kind".into()), ..stored(false, Some(&other)) };
    let waits = follower(Some(&foreign));
    assert!(waits.held_back.is_none() && waits.notices.is_empty() && !waits.held, "{waits:?}");
    let stale = follower(Some(&stored(true, Some(&other))));
    assert_eq!(stale.action, Action::Keep, "what the leader would write, a follower does not");
    assert_eq!(stale.document, Some(other));
}

#[test]
fn a_fight_holds_writes_back_tells_once_and_publishes_nothing_unwritten() {
    let zot = registry("zot", 0, true);
    let registries = allowed(std::slice::from_ref(&zot));
    let settings = Settings::default();
    let start = Instant::now();
    let mut memory = Memory::default();
    memory.fights.wrote(Some("ours".into()));
    let mut edited = doc(&zot);
    edited.host = Some("localhost:1".into());
    // Three corrections of a state we did not leave, within a minute, make a fight.
    let mut decisions = Vec::new();
    for version in ["a", "b", "c"] {
        let theirs = Stored { resource_version: Some(version.into()), ..stored(true, Some(&edited)) };
        let decision = decide_with(&registries, Some(&theirs), &memory, start, &settings);
        memory = decision.memory.clone();
        memory.fights.wrote(Some(format!("ours-{version}")));
        decisions.push(decision);
    }
    assert!(applied(&decisions[0]).is_some() && applied(&decisions[1]).is_some());
    let held = &decisions[2];
    assert_eq!(held.action, Action::Keep);
    assert_eq!(held.recheck_after, Some(Duration::from_secs(30)));
    assert!(reasons(held).contains(&("local-registry-hosting", Reason::ConflictingWriter)), "{:?}", reasons(held));
    assert!(!reasons(held).contains(&("zot", Reason::Published)), "nothing was written, so nothing is said published");
    assert_eq!(held.confirmation, None);
    let theirs = Stored { resource_version: Some("d".into()), ..stored(true, Some(&edited)) };
    let still = decide_with(&registries, Some(&theirs), &held.memory, start + Duration::from_secs(10), &settings);
    assert_eq!(still.action, Action::Keep);
    assert!(!reasons(&still).iter().any(|(_, r)| *r == Reason::ConflictingWriter), "told once per hold");
}

#[test]
fn every_reason_has_a_bounded_label_and_a_type() {
    let all = [
        Reason::Published,
        Reason::NotPublished,
        Reason::NamespaceNotAllowed,
        Reason::Misconfigured(Fault::InvalidAnnotation),
        Reason::Misconfigured(Fault::InvalidValue),
        Reason::Misconfigured(Fault::AmbiguousPort),
        Reason::Misconfigured(Fault::NoPort),
        Reason::ForeignConfigMap,
        Reason::ConflictingWriter,
        Reason::PublishFailed,
    ];
    let labels: std::collections::BTreeSet<&str> = all.iter().map(|r| r.as_str()).collect();
    assert_eq!(labels.len(), all.len(), "each its own label");
    let normal: Vec<&str> = all.iter().filter(|r| !r.warning()).map(|r| r.as_str()).collect();
    assert_eq!(normal, ["Published", "NotPublished"]);
}
