//! Child processes that never outlive the program that started them.
//!
//! Every component runs in a process group of its own and its group id is appended to `<dir>/pgids`. A watchdog
//! (a small shell in its own group) holds the read end of a pipe whose write end only this process holds: when this
//! process ends in any way — a normal exit with statics never dropped, a panic, SIGKILL — the pipe closes and the
//! watchdog stops every recorded group in reverse order, undoes a real node (`node::host`) and removes the
//! directory.

use std::fs::{File, OpenOptions};
use std::io::{PipeWriter, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::Error;

const WATCHDOG: &str = r#"
trap '' INT TERM HUP
cat >/dev/null
if [ -f "$1/pgids" ]; then
  for g in $(tac "$1/pgids"); do kill -TERM -- "-$g" 2>/dev/null; done
  sleep 2
  for g in $(tac "$1/pgids"); do kill -KILL -- "-$g" 2>/dev/null; done
fi
node_teardown "$1"
rm -rf "$1"
"#;

/// Removes `dir` and every process recorded in it once this process is gone.
pub struct Watchdog {
    _alive: PipeWriter,
}

impl Watchdog {
    pub fn guard(dir: &Path) -> Result<Self, Error> {
        let (reader, writer) = std::io::pipe()?;
        Command::new("bash")
            .arg("-c")
            .arg(format!("{}{WATCHDOG}", crate::node::host::TEARDOWN))
            .arg("watchdog")
            .arg(dir)
            .stdin(reader)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        Ok(Self { _alive: writer })
    }
}

/// One running component of the control plane.
pub struct Component {
    pub name: String,
    pub log: PathBuf,
    child: Child,
}

/// Where the component `name` of the plane in `dir` writes its log.
pub fn log_path(dir: &Path, name: &str) -> PathBuf {
    dir.join("logs").join(format!("{name}.log"))
}

impl Component {
    pub fn spawn(name: &str, program: &Path, args: &[String], dir: &Path) -> Result<Self, Error> {
        let log = log_path(dir, name);
        std::fs::create_dir_all(log.parent().unwrap_or(dir))?;
        let out = File::create(&log)?;
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0)
            .spawn()
            .map_err(|source| Error::Spawn { program: program.to_path_buf(), source })?;
        let mut pgids = OpenOptions::new().create(true).append(true).open(dir.join("pgids"))?;
        writeln!(pgids, "{}", child.id())?;
        Ok(Self { name: name.to_string(), log, child })
    }

    /// The last lines of this component's log, for error messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(25)..].join("\n")
    }

    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` to the component's whole process group.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) with a negative pid signals a process group; it has no memory-safety preconditions.
        unsafe {
            libc::kill(-(self.child.id() as i32), signal);
        }
    }

    /// SIGTERM, then SIGKILL if it has not exited after `grace`.
    pub fn stop(&mut self, grace: Duration) {
        if self.exited().is_some() {
            return;
        }
        self.signal(libc::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if self.exited().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.signal(libc::SIGKILL);
        let _ = self.child.wait();
    }
}

impl Drop for Component {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}
