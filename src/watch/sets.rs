//! Each concern's runtime watch sets, made from the same list as its pure interest and snapshot: the controller's
//! tasks run them, and `doctor` reads through them once ([`super::observe`]).

use super::watch_sets;
use crate::kube_proxy::{self, proxy_watch_sets};
use crate::node::{self, node_watch_sets};
use crate::pull::{self, pull_watch_sets};
use crate::registry::{self, watched::publisher_watch_sets};

watch_sets!(publisher_watch_sets, PublisherWatches, registry::Interest, registry::Cluster);
watch_sets!(pull_watch_sets, PullWatches, pull::Interest, pull::Observed);
watch_sets!(node_watch_sets, NodeWatches, node::Interest, node::Observed);
watch_sets!(proxy_watch_sets, ProxyWatches, kube_proxy::Interest, kube_proxy::Observed);
