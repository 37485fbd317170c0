//! Turns the decision's notices into Kubernetes Events, once each: a notice is published when it first appears or
//! its message changes, and forgotten when it goes away, so a condition that comes back is told again.

use std::collections::{BTreeMap, BTreeSet};

use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tracing::{info, warn};

use crate::plan::{MANAGER, Notice};

pub struct EventLog {
    recorder: Recorder,
    /// (regarding object, reason) -> the message last published.
    said: BTreeMap<(String, &'static str), String>,
}

impl EventLog {
    pub fn new(client: Client) -> Self {
        let instance = std::env::var("POD_NAME")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok());
        let reporter = Reporter {
            controller: MANAGER.into(),
            instance,
        };
        Self {
            recorder: Recorder::new(client, reporter),
            said: BTreeMap::new(),
        }
    }

    pub async fn record(&mut self, notices: &[Notice]) {
        let mut current = BTreeSet::new();
        for notice in notices {
            let reference = &notice.regarding;
            let object = format!(
                "{}/{}",
                reference.namespace.as_deref().unwrap_or_default(),
                reference.name.as_deref().unwrap_or_default()
            );
            let key = (
                format!("{object}/{}", reference.uid.as_deref().unwrap_or_default()),
                notice.reason,
            );
            current.insert(key.clone());
            if self.said.get(&key) == Some(&notice.message) {
                continue;
            }
            if notice.warning {
                warn!(service = %object, reason = notice.reason, "{}", notice.message);
            } else {
                info!(service = %object, reason = notice.reason, "{}", notice.message);
            }
            let event = Event {
                type_: if notice.warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: notice.reason.into(),
                note: Some(notice.message.clone()),
                action: "Publish".into(),
                secondary: None,
            };
            match self.recorder.publish(&event, &notice.regarding).await {
                Ok(()) => {
                    self.said.insert(key, notice.message.clone());
                }
                Err(error) => {
                    warn!(service = %object, %error, "could not record an Event; will try again")
                }
            }
        }
        self.said.retain(|key, _| current.contains(key));
    }
}
