//! The sandbox ("pause") image the real node's pods start first, built here as containerd would pull it.

use std::path::{Path, PathBuf};
use std::process::Command;

use xtask::image::{Image, ImageSpec};

use crate::Error;

/// The sandbox ("pause") program every pod starts first: it only waits, and reaps orphans as PID 1 must.
const PAUSE_C: &str = r#"
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
static void stop(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, NULL, WNOHANG) > 0) {} }
int main(void) {
  signal(SIGINT, stop);
  signal(SIGTERM, stop);
  signal(SIGCHLD, reap);
  for (;;) pause();
}
"#;

/// Compiles the pause program statically into `dir` (with the C compiler every machine of this kind has).
fn build_pause(dir: &Path) -> Result<PathBuf, Error> {
    let source = dir.join("pause.c");
    let binary = dir.join("pause.bin");
    std::fs::write(&source, PAUSE_C)?;
    let output = Command::new("cc").args(["-static", "-O2", "-o"]).arg(&binary).arg(&source).output()?;
    if !output.status.success() {
        return Err(Error::Io(std::io::Error::other(format!(
            "compiling the pause program failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ))));
    }
    Ok(binary)
}

/// The sandbox image, `testbed.local/pause:1`, built from [`PAUSE_C`].
pub fn pause(dir: &Path) -> Result<Image, Error> {
    std::fs::create_dir_all(dir)?;
    let binary = build_pause(dir)?;
    ImageSpec {
        name: crate::node::PAUSE_IMAGE.into(),
        files: vec![("/pause".into(), binary)],
        entrypoint: vec!["/pause".into()],
        user: Some("65535:65535".into()),
        ..ImageSpec::default()
    }
    .write(dir, "pause")
    .map_err(Error::from)
}
