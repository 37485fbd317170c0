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
