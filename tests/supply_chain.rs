//! `make lint`'s advisories check (hack/deny.sh) never passes without a RustSec database, takes one from a bundle
//! where GitHub cannot be reached, and says how old it is. Each test gives the script a database directory of its
//! own and a GitHub that cannot be reached, whatever this machine's network is.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The RustSec database bundle `.ci/run` gives `make lint`: LRP_ADVISORY_DB when it names a file, as `.ci/run` sets
/// it, else ../shared/ci's. Its date is whatever its commit says; the tests read it from the bundle, never a literal,
/// so a refreshed bundle passes and a wrongly printed date still fails.
fn shared_bundle() -> PathBuf {
    let bundle = std::env::var_os("LRP_ADVISORY_DB")
        .map(PathBuf::from)
        .filter(|named| named.is_file())
        .unwrap_or_else(|| root().join("../shared/ci/rustsec-advisory-db.bundle"));
    assert!(bundle.is_file(), "{} is missing: the RustSec bundle .ci/run gives make lint", bundle.display());
    bundle
}

/// The bundle's commit time in seconds since the epoch, read from a scratch clone of it.
fn bundle_commit_time(bundle: &Path) -> i64 {
    let clone = scratch("bundle-clone");
    let status = Command::new("git")
        .args(["clone", "--quiet"])
        .arg(bundle)
        .arg(clone.join("db"))
        .status()
        .expect("run git clone");
    assert!(status.success(), "git clone {} failed: not a git bundle", bundle.display());
    let output = Command::new("git")
        .arg("-C")
        .arg(clone.join("db"))
        .args(["show", "-s", "--format=%ct", "HEAD"])
        .output()
        .expect("run git show");
    let _ = std::fs::remove_dir_all(&clone);
    let seconds = String::from_utf8_lossy(&output.stdout);
    seconds.trim().parse().unwrap_or_else(|_| panic!("no commit time in {}: {seconds:?}", bundle.display()))
}

/// What hack/deny.sh must print of a database committed at `seconds`: its UTC day and its age in whole days. The
/// age is given as the two values it can have if a day boundary passes between the script and this check.
fn printed_date(seconds: i64) -> (String, [i64; 2]) {
    let output = Command::new("date").args(["-u", "-d", &format!("@{seconds}"), "+%F"]).output().expect("run date");
    let day = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    assert_eq!(day.len(), 10, "date printed {day:?} for @{seconds}");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("a clock after 1970").as_secs()
        as i64;
    let age = (now - seconds) / 86400;
    (format!("RustSec advisory database of {day} ("), [age - 1, age])
}

fn assert_dated(stderr: &str, (date, ages): &(String, [i64; 2])) {
    assert!(stderr.contains(date.as_str()), "the database's date is printed as {date:?}:\n{stderr}");
    assert!(
        ages.iter().any(|age| stderr.contains(&format!("{date}{age} days old"))),
        "the database's age ({} days) is printed:\n{stderr}",
        ages[1]
    );
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lrp-deny-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// hack/deny.sh with its databases in `dbs`, `named` as LRP_ADVISORY_DB, and github.com rewritten to a path that
/// does not exist, so the clone from GitHub fails here as on a machine that cannot reach it.
fn deny(dbs: &Path, named: Option<&Path>) -> (Output, String) {
    let mut command = Command::new("bash");
    command
        .arg(root().join("hack/deny.sh"))
        .env("LRP_ADVISORY_DBS", dbs)
        .env_remove("LRP_ADVISORY_DB")
        .env_remove("LRP_ADVISORY_FETCH")
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", format!("url.{}/.insteadOf", dbs.join("no-github").display()))
        .env("GIT_CONFIG_VALUE_0", "https://github.com/");
    if let Some(named) = named {
        command.env("LRP_ADVISORY_DB", named);
    }
    let output = command.output().expect("run hack/deny.sh");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output, stderr)
}

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t", "-C"])
        .arg(dir)
        .args(args)
        .status()
        .expect("run git");
    assert!(status.success(), "git {args:?} in {}", dir.display());
}

#[test]
fn advisories_check_fails_without_a_database() {
    let dbs = scratch("none");
    let (output, stderr) = deny(&dbs, None);
    assert!(!output.status.success(), "passed with no database:\n{stderr}");
    assert!(stderr.contains("cannot reach github.com, and LRP_ADVISORY_DB names no copy"), "{stderr}");
    assert!(!stderr.contains("RustSec advisory database of"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dbs);
}

#[test]
fn a_repository_without_advisories_is_not_a_database() {
    let dbs = scratch("empty-dbs");
    let empty = scratch("empty-repo");
    git(&empty, &["init", "--quiet"]);
    std::fs::create_dir_all(empty.join("crates")).expect("crates/");
    std::fs::write(empty.join("README.md"), "not the RustSec database\n").expect("a file");
    git(&empty, &["add", "."]);
    git(&empty, &["commit", "--quiet", "-m", "empty"]);
    let (output, stderr) = deny(&dbs, Some(&empty));
    assert!(!output.status.success(), "passed with a database of no advisories:\n{stderr}");
    assert!(stderr.contains("holds no RustSec advisory"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dbs);
    let _ = std::fs::remove_dir_all(&empty);
}

#[test]
fn the_shared_bundle_is_taken_dated_and_kept() {
    let bundle = shared_bundle();
    let expected = printed_date(bundle_commit_time(&bundle));
    let dbs = scratch("bundle");
    let (output, stderr) = deny(&dbs, Some(&bundle));
    assert!(output.status.success(), "the bundle did not pass:\n{stderr}");
    assert!(stderr.contains("cannot reach github.com; taking LRP_ADVISORY_DB"), "{stderr}");
    assert_dated(&stderr, &expected);

    // The copy now in the cache is taken first, with no bundle named and no GitHub.
    let (output, stderr) = deny(&dbs, None);
    assert!(output.status.success(), "the cached copy did not pass:\n{stderr}");
    assert!(!stderr.contains("cloning it from GitHub"), "{stderr}");
    assert_dated(&stderr, &expected);
    let _ = std::fs::remove_dir_all(&dbs);
}
