//! Turns the decision's notices into `events.k8s.io/v1` Events, once each: a notice is published when it first
//! appears or its message changes, and forgotten when it goes away, so a condition that comes back is told again.
//!
//! kube's `Recorder` is not used: it keys Events without their note, so a changed message ("published host A",
//! then "published host B") would only bump the first Event's count and users would read the stale note.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use tracing::{info, warn};

use crate::plan::{MANAGER, Notice};

/// The Events API rejects longer notes.
const NOTE_LIMIT: usize = 1024;

pub struct EventLog {
    client: Client,
    instance: String,
    /// (regarding object, reason) -> the message last published.
    said: BTreeMap<(String, &'static str), String>,
}

impl EventLog {
    pub fn new(client: Client) -> Self {
        Self { client, instance: crate::pod::name(), said: BTreeMap::new() }
    }

    pub async fn record(&mut self, notices: &[Notice]) {
        let mut current = BTreeSet::new();
        for notice in notices {
            let reference = &notice.regarding;
            let namespace = reference.namespace.clone().unwrap_or_else(|| "default".into());
            let name = reference.name.clone().unwrap_or_default();
            let object = format!("{namespace}/{name}");
            let key = (format!("{object}/{}", reference.uid.as_deref().unwrap_or_default()), notice.reason);
            current.insert(key.clone());
            if self.said.get(&key) == Some(&notice.message) {
                continue;
            }
            if notice.warning {
                warn!(service = %object, reason = notice.reason, "{}", notice.message);
            } else {
                info!(service = %object, reason = notice.reason, "{}", notice.message);
            }
            match self.publish(notice, &namespace, &name).await {
                Ok(()) => {
                    self.said.insert(key, notice.message.clone());
                }
                Err(error) => warn!(service = %object, %error, "could not record an Event; will try again"),
            }
        }
        self.said.retain(|key, _| current.contains(key));
    }

    async fn publish(&self, notice: &Notice, namespace: &str, name: &str) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let mut note = notice.message.clone();
        if note.len() > NOTE_LIMIT {
            let cut = (0..=NOTE_LIMIT - 3).rev().find(|i| note.is_char_boundary(*i)).unwrap_or(0);
            note.truncate(cut);
            note.push_str("...");
        }
        let mut event = Event {
            action: Some("Publish".into()),
            reason: Some(notice.reason.into()),
            note: Some(note),
            type_: Some(if notice.warning { "Warning" } else { "Normal" }.into()),
            event_time: Some(MicroTime(now)),
            regarding: Some(notice.regarding.clone()),
            reporting_controller: Some(MANAGER.into()),
            reporting_instance: Some(self.instance.chars().take(128).collect()),
            ..Event::default()
        };
        event.metadata.namespace = Some(namespace.to_string());
        event.metadata.name = Some(format!("{name}.{:x}", now.as_nanosecond()));
        Api::<Event>::namespaced(self.client.clone(), namespace).create(&PostParams::default(), &event).await?;
        Ok(())
    }
}
