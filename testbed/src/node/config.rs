//! The configuration files of the real node's daemons. Each setting that differs from the default says why; the
//! errors seen without them are in the project's real-node notes.

use std::net::Ipv4Addr;
use std::path::Path;

/// Pod addresses on every node's bridge (each node has a /24 of it: [`super::Slot::pod_subnet`]). Only the node's
/// namespace routes them, so any range not used there works.
pub(crate) const POD_RANGE: &str = "10.88.0.0/16";
/// The sandbox image every pod starts with; built from source by the testbed and imported before kubelet starts.
pub const PAUSE_IMAGE: &str = "testbed.local/pause:1";

/// containerd's registry hosts directory, under the node's own: one directory, as a path list is silently ignored
/// by the transfer service that pulls for the CRI since containerd 2.1 (containerd#12808).
pub(crate) const HOSTS_DIR: &str = "certs.d";
/// Where kube-proxy serves its metrics and `/proxyMode`, in the node's network namespace.
pub(crate) const PROXY_METRICS: &str = "127.0.0.1:10249";

/// Where each node's own directory is bind-mounted inside its mount namespace: every node sees its own files at
/// the same path, as every node of a cluster has `/etc/containerd`, so one DaemonSet's hostPath serves them all.
pub const NODE_MOUNT: &str = "/var/lib/testbed";

pub(crate) struct Paths<'a> {
    /// The node's own directory (`<plane>/node`, `<plane>/node-2`).
    pub dir: &'a Path,
    pub tools: &'a Path,
    pub ca_cert: &'a Path,
}

impl Paths<'_> {
    pub(crate) fn node(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }

    /// `file` as the node's own daemons see it ([`NODE_MOUNT`]).
    pub(crate) fn on_node(file: &str) -> String {
        format!("{NODE_MOUNT}/{file}")
    }
}

/// containerd's config in the version its release reads: version 3 for containerd 2, version 2 (the CRI plugin's
/// settings all under `io.containerd.grpc.v1.cri`) for 1.7. /run, /var/lib and /var/log are private tmpfs mounts
/// for the node (see `super`), so containerd's default root and state, and libcni's cache, vanish with it.
pub(crate) fn containerd(paths: &Paths, release: &super::ContainerdRelease) -> String {
    let socket = paths.node("containerd.sock");
    let tools = paths.tools.display();
    let cni = paths.node("cni");
    let runc = paths.tools.join("runc");
    let runc = runc.display();
    let hosts = Paths::on_node(HOSTS_DIR);
    if release.config_version() == 2 {
        // As containerd 1.7 reads it (kind v0.26 and older, older k3s and MicroK8s releases ship such files).
        return format!(
            r#"version = 2
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.internal.v1.opt"]

[grpc]
  address = "{socket}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "{tools}"
  conf_dir = "{cni}"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  BinaryName = "{runc}"
  SystemdCgroup = false

[plugins."io.containerd.grpc.v1.cri".registry]
  config_path = "{hosts}"
"#
        );
    }
    format!(
        r#"version = 3
# NRI would listen on /var/run/nri; the opt plugin would create /opt/containerd.
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.internal.v1.opt"]

[grpc]
  address = "{socket}"

[plugins.'io.containerd.cri.v1.runtime']
  # This VM's bounding set lacks CAP_SYS_RESOURCE, so no process may lower oom_score_adj below containerd's own.
  restrict_oom_score_adj = true

[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ["{tools}"]
  conf_dir = "{cni}"

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  BinaryName = "{runc}"
  SystemdCgroup = false

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "{PAUSE_IMAGE}"

[plugins.'io.containerd.cri.v1.images'.registry]
  config_path = "{hosts}"

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"#
    )
}

/// A bridge with host-local addresses, NAT for traffic leaving the pod subnet (pods reach the API server on the
/// machine side of the veth), hairpin for a pod reaching itself through a Service, and hostPorts.
pub(crate) fn cni_conflist(pod_subnet: &str) -> String {
    format!(
        r#"{{
  "cniVersion": "1.0.0",
  "name": "testbed",
  "plugins": [
    {{
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {{"type": "host-local", "ranges": [[{{"subnet": "{pod_subnet}"}}]], "routes": [{{"dst": "0.0.0.0/0"}}]}}
    }},
    {{"type": "portmap", "capabilities": {{"portMappings": true}}}}
  ]
}}
"#
    )
}

pub(crate) fn kubelet(paths: &Paths, node_ip: Ipv4Addr, cgroup: &str, runtime: super::Runtime) -> String {
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: "{node_ip}"
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
# The API server authenticates with a client certificate from the testbed's CA.
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: false}}
  x509: {{clientCAFile: "{ca}"}}
authorization: {{mode: AlwaysAllow}}
containerRuntimeEndpoint: "unix://{socket}"
# This machine kind has cgroup v1 (deprecated in kubelet 1.35+); a cgroup of our own keeps the node's pods apart.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: "/{cgroup}"
clusterDomain: cluster.local
clusterDNS: ["{node_ip}"]
# Pods get only cluster DNS: no search domain or resolver of the machine.
resolvConf: "{resolv}"
failSwapOn: false
# The machine's disk is shared and its fill level is not the node's business.
evictionHard: {{memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
maxPods: 50
"#,
        ca = paths.ca_cert.display(),
        socket = paths.node(match runtime {
            super::Runtime::Containerd => "containerd.sock",
            super::Runtime::Crio => CRIO_SOCKET,
        }),
        resolv = paths.node("resolv.conf"),
    )
}

pub(crate) fn kube_proxy(paths: &Paths, node_name: &str, mode: super::ProxyMode) -> String {
    format!(
        r#"apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {{kubeconfig: "{kubeconfig}"}}
hostnameOverride: {node_name}
mode: {mode}
clusterCIDR: "{POD_RANGE}"
# Service traffic leaves with the node's address, so replies from the machine side of the veth find their way back.
# localhostNodePorts is the iptables mode's only: nftables mode serves no NodePort on the node's loopback.
iptables: {{masqueradeAll: true, localhostNodePorts: true}}
nftables: {{masqueradeAll: true}}
# conntrack limits are machine-wide; leave them alone.
conntrack: {{maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}}
metricsBindAddress: {PROXY_METRICS}
healthzBindAddress: 127.0.0.1:10256
"#,
        kubeconfig = paths.node("kube-proxy.kubeconfig"),
        mode = mode.as_str(),
    )
}

/// Cluster DNS only: nothing is forwarded, so no query leaves the machine.
pub(crate) fn corefile(paths: &Paths, node_ip: Ipv4Addr) -> String {
    format!(
        r#".:53 {{
    bind {node_ip}
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig} testbed
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }}
    cache 5
}}
"#,
        kubeconfig = paths.node("coredns.kubeconfig"),
    )
}

/// CRI-O's config, for the node's CRI-O (`LRP_NODE_RUNTIME=crio`): images and state on the node's private /var/lib
/// and /run, the runc the containerd node runs too (behind Debian's conmon), the node's CNI, and the registries'
/// drop-ins reloaded as they change (`auto_reload_registries`), which the node agent reads back. Its registry
/// configuration is the node's own /etc/containers (see `super::recipes`).
pub(crate) fn crio(paths: &Paths) -> String {
    let tools = paths.tools.display();
    format!(
        r#"[crio]
root = "/var/lib/containers/storage"
runroot = "/run/containers/storage"
storage_driver = "overlay"
log_dir = "/var/log/crio/pods"

[crio.api]
listen = "{socket}"
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
pinns_path = "{tools}/pinns"

[crio.runtime.runtimes.runc]
runtime_path = "{runc}"
runtime_type = "oci"
runtime_root = "/run/runc"
monitor_path = "/usr/bin/conmon"
monitor_cgroup = "pod"

[crio.image]
pause_image = "{PAUSE_IMAGE}"
pinned_images = ["{PAUSE_IMAGE}"]
signature_policy = "/etc/containers/policy.json"
auto_reload_registries = true

[crio.network]
network_dir = "{cni}"
plugin_dirs = ["{tools}"]
"#,
        socket = paths.node(CRIO_SOCKET),
        cni = paths.node("cni"),
        runc = paths.node(RESTRICTED_RUNC),
    )
}

/// The runc CRI-O's node runs: the same runc, with a container's `oomScoreAdj` raised to 0 when kubelet asks for
/// less. This VM's bounding set lacks CAP_SYS_RESOURCE, so no process may lower it ("runc create failed: ...
/// nsexec: failed to update /proc/self/oom_score_adj: Permission denied" for the chart's system-node-critical
/// agent); containerd's node has `restrict_oom_score_adj` for that, CRI-O has no such setting.
pub(crate) fn restricted_runc(paths: &Paths) -> String {
    format!(
        r#"#!/bin/sh
bundle= previous=
for arg in "$@"; do
  case $previous in --bundle|-b) bundle=$arg ;; esac
  case $arg in --bundle=*) bundle=${{arg#--bundle=}} ;; esac
  previous=$arg
done
if [ -n "$bundle" ] && [ -f "$bundle/config.json" ]; then
  jq 'if (.process.oomScoreAdj // 0) < 0 then .process.oomScoreAdj = 0 else . end' "$bundle/config.json"     >"$bundle/config.json.restricted" && mv "$bundle/config.json.restricted" "$bundle/config.json"
fi
exec "{runc}" "$@"
"#,
        runc = paths.tools.join("runc").display()
    )
}

pub(crate) const RESTRICTED_RUNC: &str = "runc-restricted";

/// Where CRI-O serves the CRI, in the node's directory.
pub(crate) const CRIO_SOCKET: &str = "crio.sock";
/// The node's /etc/containers (a directory of its own, bind-mounted there for CRI-O's node).
pub(crate) const CONTAINERS_DIR: &str = "containers";

/// The files CRI-O's node starts with in /etc/containers: no registry table of the distribution's, and a signature policy
/// accepting every image (CRI-O refuses to pull without one).
pub(crate) fn containers_files() -> [(&'static str, &'static str); 2] {
    [
        // As Debian's and minikube's: short names (the chart's own image from a checkout) are docker.io's.
        (
            "registries.conf",
            "# The testbed's CRI-O node: no registry but what the node agent's drop-ins add.\n\
             unqualified-search-registries = [\"docker.io\"]\n",
        ),
        ("policy.json", "{\"default\": [{\"type\": \"insecureAcceptAnything\"}]}\n"),
    ]
}
