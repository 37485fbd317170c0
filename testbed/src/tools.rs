//! Where the pinned Go tools live. `LRP_TOOLS_DIR` names a directory that already holds them; otherwise
//! `hack/tools.sh` builds whatever is missing (printing its progress) and names the directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::Error;

pub fn bin_dir() -> Result<PathBuf, Error> {
    if let Some(dir) = std::env::var_os("LRP_TOOLS_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../hack/tools.sh");
    let output = Command::new("bash").arg(&script).stderr(Stdio::inherit()).output()?;
    if !output.status.success() {
        return Err(Error::Tools(output.status));
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&output.stdout).trim()))
}
