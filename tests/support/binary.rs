//! The real controller binary as a child process, the way operators run it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub const BINARY: &str = env!("CARGO_BIN_EXE_local-registry-publisher");

pub struct Controller {
    child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl Controller {
    /// Starts the binary with `args` plus an HTTP address on a free loopback port; logs go to a file.
    pub fn start(args: &[String]) -> Self {
        Self::start_binary(BINARY, args)
    }

    /// The same with another build of the binary (the benchmarks run the shipped release build).
    pub fn start_binary(binary: &str, args: &[String]) -> Self {
        Self::spawn(binary, args, None)
    }

    /// The same as a pod of namespace `ns` (POD_NAMESPACE), where the node plan is kept and read.
    pub fn start_in_namespace(ns: &str, args: &[String]) -> Self {
        Self::spawn(BINARY, args, Some(ns))
    }

    fn spawn(binary: &str, args: &[String], namespace: Option<&str>) -> Self {
        let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
        let log = std::env::temp_dir().join(format!("lrp-{port}-{}.log", std::process::id()));
        let out = std::fs::File::create(&log).expect("log file");
        let mut command = Command::new(binary);
        if let Some(namespace) = namespace {
            command.env("POD_NAMESPACE", namespace);
        }
        let child = command
            .args(args)
            .arg(format!("--http-address=127.0.0.1:{port}"))
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log file"))
            .stderr(out)
            .spawn()
            .expect("start the controller binary");
        Self { child, port, log }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// (status code, body) of a GET on the controller's HTTP port; `None` when it does not answer.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        let status = response.split_whitespace().nth(1)?.parse().ok()?;
        let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
        Some((status, body))
    }

    /// The value of one sample on /metrics (name with labels as they appear), if present.
    pub fn metric(&self, sample: &str) -> Option<f64> {
        let (_, body) = self.get("/metrics")?;
        body.lines().find_map(|line| line.strip_prefix(sample)?.split_whitespace().next()?.parse().ok())
    }

    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill").arg(format!("-{signal}")).arg(self.pid().to_string()).status();
        assert!(status.is_ok_and(|s| s.success()), "kill -{signal} {}", self.pid());
    }

    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// One field of a process's /proc status, trimmed; empty when the process or the field is gone.
pub fn status_field(pid: u32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().find_map(|l| l.strip_prefix(&format!("{field}:"))).map(|v| v.trim().to_string()).unwrap_or_default()
}

/// A process's resident memory, from /proc.
pub fn resident_kib(pid: u32) -> Option<u64> {
    status_field(pid, "VmRSS").trim_end_matches("kB").trim().parse().ok()
}

/// A process's open sockets: its listeners, and one connection per watch or pooled request to the API server.
pub fn open_sockets(pid: u32) -> usize {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return 0 };
    fds.flatten()
        .filter(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t.to_string_lossy().starts_with("socket:")))
        .count()
}
