//! Nothing outlives the program that started a control plane, even when that program is killed with SIGKILL and
//! runs no destructor: the watchdog stops every component and removes the directory.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Gone, or a zombie (dead, waiting only for a parent that no longer exists to reap it).
fn dead(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[test]
fn a_killed_testbed_leaves_no_process_and_no_directory() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_testbed"))
        .arg("up")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start `testbed up`");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let kubeconfig = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|line| line.trim().strip_prefix("export KUBECONFIG=").map(PathBuf::from))
        .expect("testbed up prints its KUBECONFIG");
    let dir = kubeconfig.parent().map(Path::to_path_buf).expect("the control plane's directory");
    let pgids: Vec<i32> = std::fs::read_to_string(dir.join("pgids"))
        .expect("recorded process groups")
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    assert_eq!(pgids.len(), 5, "etcd, kube-apiserver, controller-manager, scheduler, kwok");
    assert!(pgids.iter().all(|&pid| !dead(pid)), "all components run");

    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    let deadline = Instant::now() + Duration::from_secs(30);
    let cleaned_up = || pgids.iter().all(|&pid| dead(pid)) && !dir.exists();
    while !cleaned_up() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let alive: Vec<i32> = pgids.iter().copied().filter(|&pid| !dead(pid)).collect();
    assert!(alive.is_empty(), "components outlived SIGKILL: {alive:?}");
    assert!(!dir.exists(), "{} was left behind", dir.display());
    drop(lines);
}

/// The machine-wide sysctls kubelet tunes, the value kubelet sets, and a value it does not (set before the node
/// starts, so a change and its undoing can both be seen). `vm/panic_on_oom` is kubelet's 0 already on a sane machine;
/// any other value would panic the machine on the first OOM, so it is only checked to be left as it was.
const KUBELET_SYSCTLS: [(&str, &str, Option<&str>); 4] = [
    ("vm/overcommit_memory", "1", Some("0")),
    ("kernel/panic", "10", Some("3")),
    ("kernel/panic_on_oops", "1", Some("0")),
    ("vm/panic_on_oom", "0", None),
];

fn sysctl(name: &str) -> String {
    std::fs::read_to_string(format!("/proc/sys/{name}")).unwrap_or_default().trim().to_string()
}

fn set_sysctl(name: &str, value: &str) {
    std::fs::write(format!("/proc/sys/{name}"), value).unwrap_or_else(|e| panic!("set {name}={value}: {e}"));
}

/// Puts the machine's own values back when the test ends, whatever happened.
struct RestoreSysctls(Vec<(&'static str, String)>);

impl Drop for RestoreSysctls {
    fn drop(&mut self) {
        for (name, value) in &self.0 {
            let _ = std::fs::write(format!("/proc/sys/{name}"), value);
        }
    }
}

fn command_output(program: &str, args: &[&str]) -> String {
    let output = Command::new(program).args(args).output().unwrap_or_else(|e| panic!("run {program}: {e}"));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Waits until no other real node is being torn down: a test binary that ran just before this one ends its nodes
/// from its watchdog after it exits, restoring the sysctls it recorded, which would overwrite this test's.
fn no_other_real_node() {
    let deadline = Instant::now() + Duration::from_secs(120);
    let others = || command_output("ip", &["netns", "list"]).lines().any(|l| l.starts_with("testbed-"));
    while others() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(!others(), "another real node still runs: {}", command_output("ip", &["netns", "list"]));
}

#[test]
fn a_killed_testbed_with_a_real_node_leaves_no_process_container_namespace_cgroup_mount_or_sysctl() {
    no_other_real_node();
    let machine = RestoreSysctls(KUBELET_SYSCTLS.iter().map(|(name, _, _)| (*name, sysctl(name))).collect());
    for (name, kubelets, ours) in KUBELET_SYSCTLS {
        match ours {
            Some(value) => set_sysctl(name, value),
            None => assert_eq!(sysctl(name), kubelets, "{name}: a machine that panics on OOM is not one to test on"),
        }
    }
    let sysctls_before: Vec<String> = KUBELET_SYSCTLS.iter().map(|(name, _, _)| sysctl(name)).collect();
    let mut child = Command::new(env!("CARGO_BIN_EXE_testbed"))
        .args(["up", "--real-node"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start `testbed up --real-node`");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut kubeconfig = None;
    let mut tools = None;
    for line in lines.by_ref().map_while(Result::ok) {
        let line = line.trim();
        if let Some(path) = line.strip_prefix("export KUBECONFIG=") {
            kubeconfig = Some(PathBuf::from(path));
        }
        if let Some(rest) = line.strip_prefix("export PATH=") {
            tools = rest.split(':').next().map(PathBuf::from);
        }
        if line.starts_with("Stop it with") {
            break;
        }
    }
    let kubeconfig = kubeconfig.expect("testbed up prints its KUBECONFIG");
    let kubectl = tools.expect("testbed up prints the tools' directory").join("kubectl");
    let dir = kubeconfig.parent().map(Path::to_path_buf).expect("the control plane's directory");
    let recorded = std::fs::read_to_string(dir.join("node/cleanup.env")).expect("the node's cleanup record");
    let netns = recorded.lines().find_map(|l| l.strip_prefix("NETNS=")).expect("NETNS").to_string();
    let cgroup = recorded.lines().find_map(|l| l.strip_prefix("CGROUP=")).expect("CGROUP").to_string();

    // A running pod: a shim and a container outside the testbed's process groups.
    let kube = |args: &[&str]| {
        let output = Command::new(&kubectl).args(args).env("KUBECONFIG", &kubeconfig).output().expect("kubectl");
        assert!(output.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    };
    kube(&["run", "sleeper", "--image=testbed.local/pause:1", "--image-pull-policy=Never"]);
    kube(&["wait", "--for=condition=Ready", "pod/sleeper", "--timeout=120s"]);
    // The node's cgroup in each hierarchy the machine has (v1's, or the v2 root), not an assumed path.
    let cgroup_dirs = testbed::node::cgroup_dirs(&cgroup);
    assert!(!cgroup_dirs.is_empty() && cgroup_dirs.iter().all(|d| d.is_dir()), "the node's cgroups: {cgroup_dirs:?}");
    let mut find: Vec<String> = cgroup_dirs.iter().map(|d| d.display().to_string()).collect();
    find.extend(["-name".into(), "cgroup.procs".into()]);
    let procs = command_output("find", &find.iter().map(String::as_str).collect::<Vec<_>>());
    let node_pids: Vec<i32> = procs
        .lines()
        .flat_map(|file| {
            std::fs::read_to_string(file).unwrap_or_default().lines().map(String::from).collect::<Vec<_>>()
        })
        .filter_map(|pid| pid.trim().parse().ok())
        .collect();
    // containerd, kubelet, kube-proxy, CoreDNS, the namespace holder, a shim, the sandbox and the container.
    assert!(node_pids.len() >= 8, "the node's processes: {node_pids:?}");
    assert!(command_output("ip", &["netns", "list"]).contains(&netns));
    let host_link = format!(" tb{}-host@", netns.trim_start_matches("testbed-"));
    assert!(command_output("ip", &["-o", "link"]).contains(&host_link), "the machine's end of the node's veth");
    assert!(command_output("cat", &["/proc/self/mountinfo"]).contains(&format!(" /run/netns/{netns} ")));
    // kubelet tuned the machine-wide sysctls while the node ran: the restore below is not of values left alone.
    for (name, kubelets, _) in KUBELET_SYSCTLS {
        assert_eq!(sysctl(name), kubelets, "{name} as kubelet sets it while the node runs");
    }

    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    let deadline = Instant::now() + Duration::from_secs(60);
    // The kernel destroys the veth pair asynchronously once the namespace's last reference is gone, so the host
    // end may outlive the namespace's name by a moment on a loaded machine: wait for it too.
    let cleaned_up = || {
        node_pids.iter().all(|&pid| dead(pid))
            && !dir.exists()
            && !command_output("ip", &["netns", "list"]).contains(&netns)
            && !command_output("ip", &["-o", "link"]).contains(&host_link)
    };
    while !cleaned_up() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let alive: Vec<i32> = node_pids.iter().copied().filter(|&pid| !dead(pid)).collect();
    assert!(alive.is_empty(), "node processes outlived SIGKILL: {alive:?}");
    assert!(!dir.exists(), "{} was left behind", dir.display());
    assert!(!command_output("ip", &["netns", "list"]).contains(&netns), "network namespace {netns} was left behind");
    let links = command_output("ip", &["-o", "link"]);
    assert!(!links.contains(&host_link), "the veth{host_link} was left behind: {links}");
    let left: Vec<&PathBuf> = cgroup_dirs.iter().filter(|d| d.exists()).collect();
    assert!(left.is_empty(), "cgroups were left behind: {left:?}");
    let cgroups =
        command_output("sh", &["-c", &format!("ls -d /sys/fs/cgroup/{cgroup} /sys/fs/cgroup/*/{cgroup} 2>/dev/null")]);
    assert!(cgroups.trim().is_empty(), "cgroups were left behind: {cgroups}");
    let mounts = command_output("cat", &["/proc/self/mountinfo"]);
    let dir_text = dir.display().to_string();
    assert!(!mounts.contains(&dir_text) && !mounts.contains(&format!("/run/netns/{netns}")), "mounts left: {mounts}");
    let sysctls_after: Vec<String> = KUBELET_SYSCTLS.iter().map(|(name, _, _)| sysctl(name)).collect();
    assert_eq!(sysctls_after, sysctls_before, "kubelet's sysctls are restored to what the machine had");
    drop((lines, machine));
}

#[test]
fn without_root_the_real_node_fails_with_a_message_naming_what_is_missing() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test drops root to show what a machine without it gets");
    let output = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_testbed"))
        .args(["up", "--real-node"])
        .output()
        .expect("run testbed as nobody");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "it must not pass silently: {stderr}");
    assert!(stderr.contains("cannot run the testbed's real node: it needs root"), "{stderr}");
}
