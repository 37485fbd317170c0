//! Mirrors a cluster admin sets (`--node-mirrors`, chart value `nodeAgent.mirrors`): pulls of a public registry
//! (`docker.io`, `ghcr.io`, ...) go to a cache first, with the upstream as the fallback, on every node. Only the
//! admin names them: a file for `docker.io` decides where every pod of every namespace gets its images from, so
//! nothing a namespace writes (a Service's annotations included) can add or change one ([`super::trust`]).
//! The cache is a Service (its ClusterIP followed live, as the registry's is) or an address beside the cluster
//! (a container on kind's network, which survives a cluster re-create).

use std::fmt;
use std::str::FromStr;

use k8s_openapi::api::core::v1::Service;

use super::{Endpoint, HostEntry};
use crate::hosting::address::{Host, host_and_port};
use crate::watching::{Findings, Keep, WatchKey, is_dns_label};

/// How long a node's containerd (2.1 and later; older releases ignore the key) waits to connect to a mirror before
/// it tries the upstream: a cache that is down must not cost its 30 s default on every pull.
pub const DIAL_TIMEOUT: &str = "2s";

/// One mirror: pulls of `upstream` go to the cache at `via` first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mirror {
    /// The registry images name, `host[:port]` (`docker.io`).
    pub upstream: String,
    pub via: Via,
}

/// Where a mirror's cache is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Via {
    /// A Service in the cluster, reached at its ClusterIP and this port over plain HTTP.
    Service { namespace: String, name: String, port: u16 },
    /// An endpoint the nodes reach by themselves: `http://host[:port]` or `https://host[:port]`.
    Endpoint(Endpoint),
}

impl FromStr for Mirror {
    type Err = String;

    /// `UPSTREAM=service:NAMESPACE/NAME:PORT` or `UPSTREAM=http[s]://HOST[:PORT]`.
    fn from_str(value: &str) -> Result<Self, String> {
        let rule = "a mirror is UPSTREAM=service:NAMESPACE/NAME:PORT or UPSTREAM=http[s]://HOST[:PORT], like \
                    docker.io=service:registry-cache/docker-hub:5000";
        let value = value.trim();
        let Some((upstream, via)) = value.split_once('=') else {
            return Err(format!("{value:?}: no \"=\" ({rule})"));
        };
        if upstream == "_default" {
            return Err(format!("{value:?}: _default is containerd's file for every registry ({rule})"));
        }
        host_and_port(upstream).map_err(|why| format!("{value:?}: the upstream {upstream:?} {why} ({rule})"))?;
        let via = if let Some(service) = via.strip_prefix("service:") {
            let parsed = service.split_once('/').and_then(|(namespace, rest)| {
                let (name, port) = rest.rsplit_once(':')?;
                let port = port.parse::<u16>().ok().filter(|port| *port > 0)?;
                (is_dns_label(namespace) && is_dns_label(name)).then(|| Via::Service {
                    namespace: namespace.into(),
                    name: name.into(),
                    port,
                })
            });
            parsed.ok_or_else(|| format!("{value:?}: {service:?} is not NAMESPACE/NAME:PORT ({rule})"))?
        } else {
            let authority = via.strip_prefix("http://").or_else(|| via.strip_prefix("https://"));
            match authority.map(host_and_port) {
                Some(Ok(_)) => Via::Endpoint(
                    via.parse().map_err(|why| format!("{value:?}: the endpoint {via:?}: {why} ({rule})"))?,
                ),
                Some(Err(why)) => return Err(format!("{value:?}: the endpoint {via:?} {why} ({rule})")),
                None => return Err(format!("{value:?}: the endpoint {via:?} has no http:// or https:// ({rule})")),
            }
        };
        Ok(Self { upstream: upstream.to_string(), via })
    }
}

impl fmt::Display for Mirror {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.via {
            Via::Service { namespace, name, port } => write!(f, "{}=service:{namespace}/{name}:{port}", self.upstream),
            Via::Endpoint(endpoint) => write!(f, "{}={endpoint}", self.upstream),
        }
    }
}

impl Mirror {
    /// The watch that follows its Service, if it is one.
    pub fn service_key(&self) -> Option<WatchKey> {
        match &self.via {
            Via::Service { namespace, name, .. } => Some(WatchKey::in_namespace(namespace).named(name)),
            Via::Endpoint(_) => None,
        }
    }

    /// The cache, in words: `Service <namespace>/<name> port <port>`, or the endpoint.
    fn via_text(&self) -> String {
        match &self.via {
            Via::Service { namespace, name, port } => format!("Service {namespace}/{name} port {port}"),
            Via::Endpoint(endpoint) => endpoint.to_string(),
        }
    }

    /// Where the node falls back to when the cache fails: the upstream itself (Docker Hub's API host for
    /// `docker.io`, which is what containerd dials for it).
    pub fn server(&self) -> Option<Endpoint> {
        let host = match self.upstream.as_str() {
            "docker.io" | "index.docker.io" => "registry-1.docker.io",
            upstream => upstream,
        };
        Endpoint::new(true, host).ok()
    }
}

/// What a mirror's Service holds that its node file needs: its ClusterIP and ports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MirrorService {
    pub cluster_ip: Option<String>,
    pub ports: Vec<i32>,
}

impl Keep<Service> for MirrorService {
    fn keep(service: Service) -> Self {
        let spec = service.spec.unwrap_or_default();
        Self { cluster_ip: spec.cluster_ip, ports: spec.ports.unwrap_or_default().iter().map(|p| p.port).collect() }
    }
}

/// Why a mirror the admin set gets no node file: its upstream is pulled directly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MirrorProblem {
    pub mirror: Mirror,
    pub fault: MirrorFault,
}

/// What is wrong with a mirror.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MirrorFault {
    /// An earlier mirror has the same upstream, and is used.
    Second,
    /// Its Service's watch has not reported yet.
    NotReadYet,
    /// The controller may not read its Service: the chart lets it read only the Services the mirrors name.
    Unreadable(String),
    Missing,
    /// A headless or ExternalName Service: nodes reach a mirror at its ClusterIP.
    NoClusterIp,
    NoPort(u16),
}

/// `the mirror of <upstream> (<its cache>): <fault>`.
impl fmt::Display for MirrorProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the mirror of {} ({}): ", self.mirror.upstream, self.mirror.via_text())?;
        match &self.fault {
            MirrorFault::Second => write!(f, "a second mirror for the same upstream: the first is used"),
            MirrorFault::NotReadYet => write!(f, "not read yet"),
            MirrorFault::Unreadable(refused) => write!(
                f,
                "cannot be read ({refused}): the chart lets the controller read the Services nodeAgent.mirrors names"
            ),
            MirrorFault::Missing => write!(f, "does not exist"),
            MirrorFault::NoClusterIp => {
                write!(
                    f,
                    "has no ClusterIP (a headless or ExternalName Service): nodes reach a mirror at its ClusterIP"
                )
            }
            MirrorFault::NoPort(port) => write!(f, "has no port {port}"),
        }
    }
}

/// Each mirror's node entry, or why it has none (its Service cannot be used): one per upstream, in the order given.
pub fn entries(mirrors: &[Mirror], services: &Findings<MirrorService>) -> (Vec<HostEntry>, Vec<MirrorProblem>) {
    let mut entries = Vec::new();
    let mut problems = Vec::new();
    for (index, mirror) in mirrors.iter().enumerate() {
        let second = mirrors[..index].iter().any(|first| first.upstream == mirror.upstream);
        match if second { Err(MirrorFault::Second) } else { endpoint(mirror, services) } {
            Ok(endpoint) => entries.push(HostEntry {
                address: mirror.upstream.clone(),
                endpoint,
                ca: None,
                server: mirror.server(),
            }),
            Err(fault) => problems.push(MirrorProblem { mirror: mirror.clone(), fault }),
        }
    }
    (entries, problems)
}

fn endpoint(mirror: &Mirror, services: &Findings<MirrorService>) -> Result<Endpoint, MirrorFault> {
    let (namespace, name, port) = match &mirror.via {
        Via::Endpoint(endpoint) => return Ok(endpoint.clone()),
        Via::Service { namespace, name, port } => (namespace, name, *port),
    };
    let key = WatchKey::in_namespace(namespace).named(name);
    let found = match services.get(&key) {
        None => return Err(MirrorFault::NotReadYet),
        Some(Err(refused)) => return Err(MirrorFault::Unreadable(refused.clone())),
        Some(Ok(found)) => found.first().cloned(),
    };
    let service = found.ok_or(MirrorFault::Missing)?;
    let ip = service.cluster_ip.as_deref().filter(|ip| *ip != "None").and_then(|ip| Host::normalise(ip).ok());
    let ip = ip.ok_or(MirrorFault::NoClusterIp)?;
    if !service.ports.contains(&i32::from(port)) {
        return Err(MirrorFault::NoPort(port));
    }
    Endpoint::new(false, &ip.with_port(Some(i32::from(port)))).map_err(|_| MirrorFault::NoClusterIp)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn mirror(text: &str) -> Mirror {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn a_mirror_is_an_upstream_and_a_service_or_an_endpoint() {
        let service = mirror("docker.io=service:registry-cache/docker-hub:5000");
        assert_eq!(service.upstream, "docker.io");
        let wanted = Via::Service { namespace: "registry-cache".into(), name: "docker-hub".into(), port: 5000 };
        assert_eq!(service.via, wanted);
        assert_eq!(service.to_string(), "docker.io=service:registry-cache/docker-hub:5000");
        assert_eq!(service.server().expect("a server"), "https://registry-1.docker.io");
        let beside = mirror(" ghcr.io=http://kind-registry-cache:5000 ");
        assert_eq!(beside.via, Via::Endpoint("http://kind-registry-cache:5000".into()));
        assert_eq!(beside.server().expect("a server"), "https://ghcr.io");
        assert_eq!(beside.service_key(), None);
        assert_eq!(mirror("quay.io=https://cache.example").server().expect("a server"), "https://quay.io");
    }

    #[test]
    fn what_is_no_mirror_is_refused_with_the_rule() {
        for (bad, why) in [
            ("docker.io", "no \"=\""),
            ("Docker.io=http://cache:5000", "lowercase"),
            ("_default=http://cache:5000", "_default is containerd's file for every registry"),
            ("docker_io=http://cache:5000", "the upstream \"docker_io\" is not a valid DNS name"),
            ("docker.io=cache:5000", "no http://"),
            ("docker.io=http://cache:5000/v2", "no path"),
            ("docker.io=service:cache/docker-hub", "NAMESPACE/NAME:PORT"),
            ("docker.io=service:docker-hub:5000", "NAMESPACE/NAME:PORT"),
            ("docker.io=service:cache/Docker-hub:5000", "NAMESPACE/NAME:PORT"),
            ("docker.io=service:cache/docker-hub:0", "NAMESPACE/NAME:PORT"),
        ] {
            let error = bad.parse::<Mirror>().expect_err(bad);
            assert!(error.contains(why) && error.contains("a mirror is UPSTREAM="), "{bad}: {error}");
            let said = error.split(" (a mirror is").next().unwrap_or_default();
            assert_eq!(said.matches(&format!("{bad:?}")).count(), 1, "the value is named once: {error}");
        }
    }

    fn services(found: Option<Result<Option<MirrorService>, String>>) -> Findings<MirrorService> {
        let key = WatchKey::in_namespace("cache").named("docker-hub");
        found.map(|found| (key, found.map(|s| s.map(Arc::new).into_iter().collect()))).into_iter().collect()
    }

    #[test]
    fn a_service_mirror_follows_its_cluster_ip_and_says_why_it_cannot_be_used() {
        let mirrors = [mirror("docker.io=service:cache/docker-hub:5000"), mirror("ghcr.io=http://beside:5000")];
        let service = |ip: &str, port| MirrorService { cluster_ip: Some(ip.into()), ports: vec![port] };
        let (found, problems) = entries(&mirrors, &services(Some(Ok(Some(service("10.96.0.50", 5000))))));
        assert!(problems.is_empty(), "{problems:?}");
        let endpoints: Vec<(&str, &str, Option<&str>)> = found
            .iter()
            .map(|e| (e.address.as_str(), e.endpoint.as_str(), e.server.as_ref().map(Endpoint::as_str)))
            .collect();
        assert_eq!(
            endpoints,
            [
                ("docker.io", "http://10.96.0.50:5000", Some("https://registry-1.docker.io")),
                ("ghcr.io", "http://beside:5000", Some("https://ghcr.io")),
            ]
        );
        let (found, _) = entries(&mirrors[..1], &services(Some(Ok(Some(service("fd00::50", 5000))))));
        assert_eq!(found[0].endpoint, "http://[fd00::50]:5000");
        for (found, why) in [
            (None, "not read yet"),
            (Some(Err("forbidden".to_string())), "cannot be read (forbidden)"),
            (Some(Ok(None)), "does not exist"),
            (Some(Ok(Some(service("None", 5000)))), "has no ClusterIP"),
            (Some(Ok(Some(service("10.96.0.50", 5001)))), "has no port 5000"),
            (Some(Ok(Some(MirrorService { cluster_ip: None, ports: vec![5000] }))), "has no ClusterIP"),
        ] {
            let (none, problems) = entries(&mirrors[..1], &services(found));
            let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
            assert!(none.is_empty());
            assert_eq!(problems.len(), 1);
            assert!(problems[0].starts_with("the mirror of docker.io (Service cache/docker-hub port 5000): "));
            assert!(problems[0].contains(why), "{problems:?}");
        }
        let twice = [mirrors[1].clone(), mirror("ghcr.io=http://other:5000")];
        let (found, problems) = entries(&twice, &Findings::default());
        assert_eq!(problems[0].fault, MirrorFault::Second);
        let problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(found.iter().map(|e| e.endpoint.as_str()).collect::<Vec<_>>(), ["http://beside:5000"]);
        assert!(problems[0].starts_with("the mirror of ghcr.io (http://other:5000): a second mirror"), "{problems:?}");
    }
}
