//! What a real node changes on this machine, and how every change is undone.
//!
//! Everything is recorded in `<dir>/node/cleanup.env` and `<dir>/node/sysctls` (`node-2/` for a second node) before
//! it is made, and
//! [`TEARDOWN`] undoes it from those files alone, so the same script serves a normal stop and the watchdog after a
//! SIGKILL:
//! - a network namespace `testbed-<n>` holding the node's side of a veth pair; deleting the namespace removes the
//!   pair, the machine-side address and its link route, and every iptables rule, route and per-namespace sysctl the
//!   node made (they all live inside it);
//! - a cgroup `/testbed-<n>` in every cgroup hierarchy: the node's daemons, their shims and every container run
//!   under it, so killing what it holds stops them all, and removing it leaves nothing;
//! - the machine-wide sysctls kubelet tunes (`vm.overcommit_memory`, `kernel.panic`, ...), restored to the values
//!   read before kubelet started.
//!
//! Mounts need no list: the daemons share one private mount namespace (see `super`), which the kernel tears down
//! with every mount in it when its last process exits.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Error;

/// Undoes a real node from the files it recorded. `$1` is the control plane's directory.
pub(crate) const TEARDOWN: &str = r#"
node_teardown() {
  local d
  for d in "$1"/node-[0-9]* "$1"/node; do node_teardown_one "$d"; done
}
node_teardown_one() {
  local d="$1" NETNS="" CGROUP="" roots pids path value i
  [ -f "$d/cleanup.env" ] || return 0
  . "$d/cleanup.env"
  [ -n "$CGROUP" ] && roots=$(ls -d /sys/fs/cgroup/"$CGROUP" /sys/fs/cgroup/*/"$CGROUP" 2>/dev/null)
  if [ -n "$roots" ]; then
    for i in $(seq 100); do
      pids=$(find $roots -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)
      [ -z "$pids" ] && break
      kill -KILL $pids 2>/dev/null
      sleep 0.1
    done
    find $roots -depth -type d -exec rmdir {} \; 2>/dev/null
  fi
  if [ -f "$d/sysctls" ]; then
    while read -r path value; do echo "$value" >"$path" 2>/dev/null; done <"$d/sysctls"
  fi
  # The pair goes with the namespace only once the kernel frees it, a moment after its last process: deleted here
  # first, so the next node to claim the namespace's number finds its link name free.
  [ -n "$NETNS" ] && ip link delete "tb${NETNS#testbed-}-host" 2>/dev/null
  [ -n "$NETNS" ] && ip netns delete "$NETNS" 2>/dev/null
  rm -f "$d/cleanup.env"
}
"#;

/// Machine-wide sysctls kubelet sets at start (`setupKernelTunables`), restored at teardown.
const KUBELET_SYSCTLS: [&str; 6] = [
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
];

/// The node's network: a namespace and a veth pair whose machine side holds `host_ip`.
#[derive(Clone, Debug)]
pub struct HostNetwork {
    pub netns: String,
    /// The machine's end of the veth: the API server listens here, and the node reaches it here.
    pub host_ip: Ipv4Addr,
    /// The node's InternalIP, on `eth0` inside the namespace.
    pub node_ip: Ipv4Addr,
    pub cgroup: String,
}

/// Fails with a message naming what this machine lacks for a real node.
pub(crate) fn preflight() -> Result<(), Error> {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if uid != 0 {
        return Err(Error::NodeUnsupported(format!(
            "it needs root (network namespaces, cgroups, mounts), and this process runs as uid {uid}"
        )));
    }
    if cgroup_roots()?.is_empty() {
        return Err(Error::NodeUnsupported("no cgroup filesystem is mounted under /sys/fs/cgroup".into()));
    }
    for program in ["ip", "nsenter", "unshare", "iptables", "cc", "ldd"] {
        let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
            .any(|dir| dir.join(program).is_file());
        if !found {
            return Err(Error::NodeUnsupported(format!(
                "`{program}` is not installed (hack/tools.sh installs the Debian packages the node needs)"
            )));
        }
    }
    Ok(())
}

impl HostNetwork {
    /// Claims the first free `testbed-<n>` namespace (creation is the lock) and wires it to the machine; `api_ip`
    /// is where the API server listens, on the first node's veth.
    pub(crate) fn create(dir: &Path, slot: super::Slot, api_ip: Option<Ipv4Addr>) -> Result<Self, Error> {
        let node_dir = dir.join(slot.dir_name());
        std::fs::create_dir_all(&node_dir)?;
        for n in 1..=250u8 {
            let netns = format!("testbed-{n}");
            if !Command::new("ip").args(["netns", "add", &netns]).output()?.status.success() {
                continue;
            }
            // A node whose namespace was just deleted may still hold its link for a moment: not free yet.
            if Command::new("ip").args(["link", "show", &format!("tb{n}-host")]).output()?.status.success() {
                run("ip", &["netns", "delete", &netns])?;
                continue;
            }
            let network = Self {
                netns: netns.clone(),
                host_ip: Ipv4Addr::new(10, 213, n, 1),
                node_ip: Ipv4Addr::new(10, 213, n, 2),
                cgroup: netns.clone(),
            };
            std::fs::write(node_dir.join("cleanup.env"), format!("NETNS={netns}\nCGROUP={netns}\n"))?;
            network.wire(n, api_ip)?;
            return Ok(network);
        }
        Err(Error::NodeUnsupported("no free network namespace testbed-1 ... testbed-250".into()))
    }

    fn wire(&self, n: u8, api_ip: Option<Ipv4Addr>) -> Result<(), Error> {
        let (host_link, node_link) = (format!("tb{n}-host"), format!("tb{n}-node"));
        let host_cidr = format!("{}/24", self.host_ip);
        let node_cidr = format!("{}/24", self.node_ip);
        run("ip", &["link", "add", &host_link, "type", "veth", "peer", "name", &node_link, "netns", &self.netns])?;
        run("ip", &["addr", "add", &host_cidr, "dev", &host_link])?;
        run("ip", &["link", "set", &host_link, "up"])?;
        let inside = |args: &[&str]| {
            let mut all = vec!["-n", self.netns.as_str()];
            all.extend_from_slice(args);
            run("ip", &all)
        };
        inside(&["link", "set", &node_link, "name", "eth0"])?;
        inside(&["addr", "add", &node_cidr, "dev", "eth0"])?;
        inside(&["link", "set", "eth0", "up"])?;
        inside(&["link", "set", "lo", "up"])?;
        // No default route: nothing inside can reach past the machine. Service IPs need a route for the node's own
        // connections, which kube-proxy rewrites before they leave.
        inside(&["route", "add", crate::SERVICE_CIDR, "dev", "eth0"])?;
        // A later node reaches the API server on the first node's veth, a local address of the machine.
        if let Some(api_ip) = api_ip.filter(|ip| *ip != self.host_ip) {
            inside(&["route", "add", &format!("{api_ip}/32"), "via", &self.host_ip.to_string()])?;
        }
        Ok(())
    }

    /// Links this node's namespace and `other`'s directly, as a cluster's pod network would: a veth pair between the
    /// two (`peer` in each, 10.212.0.1 here and 10.212.0.2 there) and a route to each one's pod subnet and address through it, so
    /// a Service's endpoint on one node answers the other (kube-proxy sends a connection to a pod on either). The
    /// pair lives in the two namespaces and goes with them; the machine's own network is not touched.
    pub(crate) fn link(&self, subnet: &str, other: &HostNetwork, other_subnet: &str) -> Result<(), Error> {
        let (mine, theirs) = ("10.212.0.1", "10.212.0.2");
        let n = |network: &HostNetwork| network.netns.trim_start_matches("testbed-").to_string();
        let (a, b) = (format!("tb{}p{}", n(self), n(other)), format!("tb{}p{}", n(other), n(self)));
        run(
            "ip",
            &["link", "add", &a, "netns", &self.netns, "type", "veth", "peer", "name", &b, "netns", &other.netns],
        )?;
        let (my_ip, their_ip) = (format!("{}/32", self.node_ip), format!("{}/32", other.node_ip));
        for (network, link, address, subnet, node, via) in
            [(self, &a, mine, other_subnet, &their_ip, theirs), (other, &b, theirs, subnet, &my_ip, mine)]
        {
            let inside = |args: &[&str]| {
                let mut all = vec!["-n", network.netns.as_str()];
                all.extend_from_slice(args);
                run("ip", &all)
            };
            inside(&["link", "set", link, "name", "peer"])?;
            inside(&["addr", "add", &format!("{address}/24"), "dev", "peer"])?;
            inside(&["link", "set", "peer", "up"])?;
            // The other's pods, and the other node itself: a connection a node makes to a Service leaves from its
            // own address, and the endpoint's node answers it there.
            inside(&["route", "add", subnet, "via", via, "dev", "peer"])?;
            inside(&["route", "add", node, "via", via, "dev", "peer"])?;
        }
        Ok(())
    }

    /// Creates the node's cgroup in every hierarchy, with a `node` child for the daemons, and returns the
    /// `cgroup.procs` files a daemon joins.
    pub(crate) fn create_cgroups(&self) -> Result<Vec<PathBuf>, Error> {
        let mut procs = Vec::new();
        for root in cgroup_roots()? {
            let base = root.join(&self.cgroup);
            let daemons = base.join("node");
            std::fs::create_dir_all(&daemons)?;
            // A v1 cpuset cgroup holds no task until it is given CPUs and memory nodes.
            for file in ["cpuset.cpus", "cpuset.mems"] {
                if root.join(file).exists() {
                    let value = std::fs::read_to_string(root.join(file))?;
                    std::fs::write(base.join(file), &value)?;
                    std::fs::write(daemons.join(file), &value)?;
                }
            }
            procs.push(daemons.join("cgroup.procs"));
        }
        Ok(procs)
    }

    /// The most memory the node (its daemons and every pod) has used: v1's `memory.max_usage_in_bytes`, or v2's
    /// `memory.peak`.
    pub fn peak_memory_bytes(&self) -> Option<u64> {
        cgroup_dirs(&self.cgroup).into_iter().find_map(|dir| {
            ["memory.max_usage_in_bytes", "memory.peak"]
                .iter()
                .find_map(|file| std::fs::read_to_string(dir.join(file)).ok()?.trim().parse().ok())
        })
    }
}

/// Records the machine-wide sysctls kubelet may change, so teardown can restore them; `dir` is the node's own.
pub(crate) fn record_sysctls(dir: &Path) -> Result<(), Error> {
    let mut lines = String::new();
    for name in KUBELET_SYSCTLS {
        let path = Path::new("/proc/sys").join(name);
        if let Ok(value) = std::fs::read_to_string(&path) {
            lines.push_str(&format!("{} {}\n", path.display(), value.trim()));
        }
    }
    std::fs::write(dir.join("sysctls"), lines)?;
    Ok(())
}

/// Undoes everything recorded under `dir/node` (see [`TEARDOWN`]).
pub(crate) fn teardown(dir: &Path) {
    let script = format!("{TEARDOWN}\nnode_teardown \"$1\"");
    let _ = Command::new("bash").arg("-c").arg(script).arg("teardown").arg(dir).status();
}

/// The node's cgroup `name` in every hierarchy this machine has (cgroup v1's, or the v2 root), found from the
/// mounts rather than assumed: what tests read processes and memory from, and check is gone after teardown.
pub fn cgroup_dirs(name: &str) -> Vec<PathBuf> {
    cgroup_roots().unwrap_or_default().into_iter().map(|root| root.join(name)).collect()
}

/// Cgroup hierarchies to create the node's cgroup in: every v1 hierarchy, or the v2 root.
fn cgroup_roots() -> Result<Vec<PathBuf>, Error> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
    let mut v1 = Vec::new();
    let mut v2 = Vec::new();
    for line in mountinfo.lines() {
        let Some((before, after)) = line.split_once(" - ") else { continue };
        let mount_point = before.split_whitespace().nth(4).unwrap_or_default();
        match after.split_whitespace().next() {
            Some("cgroup") => v1.push(PathBuf::from(mount_point)),
            Some("cgroup2") => v2.push(PathBuf::from(mount_point)),
            _ => {}
        }
    }
    // In a hybrid layout the v2 mount holds no controller kubelet uses; v1 is what it manages.
    Ok(if v1.is_empty() { v2 } else { v1 })
}

fn run(program: &str, args: &[&str]) -> Result<(), Error> {
    let output = Command::new(program).args(args).output()?;
    if output.status.success() {
        return Ok(());
    }
    Err(Error::NodeUnsupported(format!(
        "`{program} {}` failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr).trim()
    )))
}
