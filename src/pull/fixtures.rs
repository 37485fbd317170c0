//! Fixtures of the pull credentials' decision, for its tests and for doctor's judgement of it.

use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};

use super::{Observed, WantedNamespace};
use crate::hosting::LocalRegistryHostingV1;
use crate::keys;
use crate::publish::Published;
use crate::registry::fixtures::service;
use crate::registry::{ServiceId, Wiring};
use crate::settings::PullSecrets;
use crate::watching::WatchKey;

/// The registry readers see, naming `credentials` as its pull credentials.
pub fn registry(credentials: Option<&str>) -> Published {
    let service = service("reg", "registry").build();
    Published {
        registry: ServiceId { namespace: "reg".into(), name: "registry".into() },
        reference: crate::registry::Identity::of(&service.metadata).reference(),
        document: LocalRegistryHostingV1 {
            host: Some("localhost:30500".into()),
            host_from_cluster_network: Some("registry.reg.svc.cluster.local:5000".into()),
            ..LocalRegistryHostingV1::default()
        },
        wiring: Wiring { pull_secret: credentials.map(String::from), ..Wiring::default() },
        ports: crate::registry::Ports {
            service: Some(5000),
            node: Some(30500),
            host_port: false,
            tls: false,
            relay: None,
        },
        own_addresses: Vec::new(),
    }
}

pub fn credentials(found: Result<Option<Arc<Secret>>, String>) -> crate::watching::Findings<Secret> {
    let key = WatchKey::in_namespace("reg").named("creds");
    [(key, found.map(|secret| secret.into_iter().collect()))].into()
}

pub fn source(pairs: &[(&str, &str)]) -> Arc<Secret> {
    let data = pairs.iter().map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec()))).collect();
    Arc::new(Secret { data: Some(data), ..Secret::default() })
}

pub fn observed(namespaces: &[&str], token: &str) -> Observed {
    Observed {
        credentials: credentials(Ok(Some(source(&[("token", token)])))),
        namespaces: namespaces
            .iter()
            .map(|n| Arc::new(WantedNamespace { name: n.to_string(), terminating: false }))
            .collect(),
        ..Observed::default()
    }
}

pub fn settings(accounts: &[&str]) -> PullSecrets {
    PullSecrets { service_accounts: accounts.iter().map(|a| a.to_string()).collect(), ..PullSecrets::default() }
}

/// The Secret as the API server stores our apply: with a uid and our field manager's entry.
pub fn stored(secret: Secret) -> Arc<Secret> {
    let applied = ManagedFieldsEntry {
        manager: Some(keys::MANAGER.into()),
        operation: Some("Apply".into()),
        ..ManagedFieldsEntry::default()
    };
    let metadata = ObjectMeta { uid: Some("uid-1".into()), managed_fields: Some(vec![applied]), ..secret.metadata };
    Arc::new(Secret { metadata, ..secret })
}
