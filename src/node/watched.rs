//! What the node-plan task watches: the one list of its watch sets ([`node_watch_sets`]), from which the
//! [`Interest`], the [`Observed`] snapshot and the controller's watch sets are made.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};

use super::CA_KEY;
use crate::watching::{Keep, interest_and_snapshot};

/// Calls `$then!` with the node plan's watch sets: `name: watched kind => what is kept of each object`.
macro_rules! node_watch_sets {
    ($then:ident! { $($args:tt)* }) => {
        $then! { $($args)*
            /// The ConfigMap a TLS registry names as its CA bundle, by name. A refused watch is an answer (the
            /// chart did not allow that name), not an outage.
            ca_configmaps: ::k8s_openapi::api::core::v1::ConfigMap => $crate::node::CaBundle [findings],
            /// The Secret a TLS registry names as its CA bundle, by name; only its `ca.crt` is kept.
            ca_secrets: ::k8s_openapi::api::core::v1::Secret => $crate::node::CaBundle [findings],
            /// The Service of each mirror the cluster admin set, by name: its ClusterIP is where nodes pull from.
            mirror_services: ::k8s_openapi::api::core::v1::Service => $crate::node::mirror::MirrorService [findings],
        }
    };
}
pub(crate) use node_watch_sets;

interest_and_snapshot!(node_watch_sets, Interest, Observed);

/// What a CA bundle's object holds under `ca.crt`: nothing else of it is kept (a Secret's private key included).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaBundle(pub Option<String>);

impl Keep<ConfigMap> for CaBundle {
    fn keep(configmap: ConfigMap) -> Self {
        CaBundle(configmap.data.and_then(|mut data| data.remove(CA_KEY)))
    }
}

impl Keep<Secret> for CaBundle {
    fn keep(secret: Secret) -> Self {
        let bytes = secret.data.and_then(|mut data| data.remove(CA_KEY));
        CaBundle(bytes.and_then(|bytes| String::from_utf8(bytes.0).ok()))
    }
}
