//! What the publisher tells users, as Events: a bounded reason and a message, on a registry Service or the
//! ConfigMap.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;

use crate::registry::Fault;

/// Why an Event is posted: a bounded label for Events, logs and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// This registry is what readers see.
    Published,
    /// Another registry ranks higher, or this one has no ready endpoint.
    NotPublished,
    /// Its namespace may not name the cluster's registry.
    NamespaceNotAllowed,
    /// Its configuration is wrong; it is not published and the last good document stays.
    Misconfigured(Fault),
    /// Another tool wrote the ConfigMap, which is not changed without --take-over.
    ForeignConfigMap,
    /// Another writer keeps undoing the ConfigMap; writes wait instead of fighting.
    ConflictingWriter,
    /// The API server refused a write.
    PublishFailed,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Published => "Published",
            Reason::NotPublished => "NotPublished",
            Reason::NamespaceNotAllowed => "NamespaceNotAllowed",
            Reason::Misconfigured(fault) => fault.as_str(),
            Reason::ForeignConfigMap => "ForeignConfigMap",
            Reason::ConflictingWriter => "ConflictingWriter",
            Reason::PublishFailed => "PublishFailed",
        }
    }

    /// Whether users must act: a Warning Event.
    pub fn warning(self) -> bool {
        match self {
            Reason::Published | Reason::NotPublished => false,
            Reason::NamespaceNotAllowed
            | Reason::Misconfigured(_)
            | Reason::ForeignConfigMap
            | Reason::ConflictingWriter
            | Reason::PublishFailed => true,
        }
    }
}

/// Something to tell users, as an Event on `regarding`.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    pub regarding: ObjectReference,
    pub reason: Reason,
    /// Shared: a thousand ignored registries in one namespace are told the same words.
    pub message: Arc<str>,
}

// A hold starting is told once per hold, by the pass that starts it.
crate::events::impl_tell!(Notice, |n: &Notice| n.reason.warning(), |n: &Notice| n.reason == Reason::ConflictingWriter);

impl Notice {
    pub fn new(regarding: &ObjectReference, reason: Reason, message: impl Into<Arc<str>>) -> Self {
        Self { regarding: regarding.clone(), reason, message: message.into() }
    }

    /// A write the API server refused (`operation`: apply or delete, of the ConfigMap `target`, refused with
    /// `refusal`), told on the registry it was for, else the ConfigMap (`subject`).
    pub fn publish_failed(subject: &ObjectReference, operation: &str, target: &str, refusal: &str) -> Self {
        let message = format!("could not {operation} {target}: {refusal}; what readers see is unchanged");
        Self::new(subject, Reason::PublishFailed, message)
    }

    /// Whether it is about this object.
    pub fn regards(&self, namespace: &str, name: &str) -> bool {
        self.regarding.namespace.as_deref() == Some(namespace) && self.regarding.name.as_deref() == Some(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_notice_regards_exactly_its_own_object() {
        let zot = ObjectReference { namespace: Some("reg".into()), name: Some("zot".into()), ..Default::default() };
        let notice = Notice::new(&zot, Reason::NotPublished, "not published");
        assert!(notice.regards("reg", "zot"));
        for (namespace, name) in [("reg", "other"), ("other", "zot"), ("other", "other")] {
            assert!(!notice.regards(namespace, name), "{namespace}/{name}");
        }
    }

    #[test]
    fn a_refused_write_says_what_was_refused_by_whom_and_that_readers_see_no_change() {
        let zot = ObjectReference { namespace: Some("reg".into()), name: Some("zot".into()), ..Default::default() };
        let notice =
            Notice::publish_failed(&zot, "apply", "kube-public/local-registry-hosting", "forbidden (Forbidden)");
        assert_eq!((notice.reason, notice.regards("reg", "zot")), (Reason::PublishFailed, true));
        assert_eq!(
            &*notice.message,
            "could not apply kube-public/local-registry-hosting: forbidden (Forbidden); what readers see is unchanged"
        );
    }
}
