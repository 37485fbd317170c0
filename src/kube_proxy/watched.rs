//! What the kube-proxy concern watches: the one list of its watch sets ([`proxy_watch_sets`]), from which the
//! [`Interest`], the [`Observed`] snapshot and the controller's watch sets are made.

use k8s_openapi::api::core::v1::ConfigMap;

use super::CONFIG_KEY;
use crate::watching::{Keep, interest_and_snapshot};

/// Calls `$then!` with the kube-proxy concern's watch sets: `name: watched kind => what is kept of each object`.
macro_rules! proxy_watch_sets {
    ($then:ident! { $($args:tt)* }) => {
        $then! { $($args)*
            /// kube-proxy's shared configuration, by name, only while a loopback NodePort address is published. A
            /// refused watch is an answer (the mode is not known), not an outage.
            configs: ::k8s_openapi::api::core::v1::ConfigMap => $crate::kube_proxy::ProxyConfig [findings],
        }
    };
}
pub(crate) use proxy_watch_sets;

interest_and_snapshot!(proxy_watch_sets, Interest, Observed);

/// What kube-proxy's ConfigMap holds under `config.conf`: nothing else of it is kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyConfig(pub Option<String>);

impl Keep<ConfigMap> for ProxyConfig {
    fn keep(configmap: ConfigMap) -> Self {
        ProxyConfig(configmap.data.and_then(|mut data| data.remove(CONFIG_KEY)))
    }
}
