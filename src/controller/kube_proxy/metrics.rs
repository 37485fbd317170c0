//! What the kube-proxy task counts of its own: the published loopback nodePort addresses kube-proxy's mode does not
//! serve, and those it serves only until its default mode becomes nftables, per reader.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::kube_proxy::{Reader, Unserved};
use crate::metrics::gauge_value;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReaderLabels {
    reader: &'static str,
}

/// The kube-proxy task's own metrics; cheap to clone (shared handles).
#[derive(Clone, Debug, Default)]
pub struct KubeProxyMetrics {
    unserved: Family<ReaderLabels, Gauge>,
    at_risk: Family<ReaderLabels, Gauge>,
}

impl KubeProxyMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "local_registry_publisher_loopback_addresses_unserved",
            "Published addresses on a node's loopback at the registry's nodePort that kube-proxy's mode does not serve \
             there, per reader: tools on a node's machine (host), or the node's container runtime where no node agent \
             file maps them",
            self.unserved.clone(),
        );
        registry.register(
            "local_registry_publisher_loopback_addresses_at_risk",
            "Published addresses on a node's loopback at the registry's nodePort that kube-proxy serves only because \
             it runs its default mode, iptables, and stops serving once its default is nftables (Kubernetes 1.40, \
             KEP-5343), per reader as local_registry_publisher_loopback_addresses_unserved",
            self.at_risk.clone(),
        );
    }

    /// What a pass found, per reader (every reader's series set, at 0 when none).
    pub fn observed(&self, unserved: &[Unserved], at_risk: &[Unserved]) {
        for reader in Reader::ALL {
            let labels = ReaderLabels { reader: reader.as_str() };
            let count = |found: &[Unserved]| gauge_value(found.iter().filter(|u| u.reader == reader).count());
            self.unserved.get_or_create(&labels).set(count(unserved));
            self.at_risk.get_or_create(&labels).set(count(at_risk));
        }
    }
}
