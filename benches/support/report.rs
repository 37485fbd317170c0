//! Writes a bench's section of docs/benchmarks.md (between `<!-- begin NAME -->` and `<!-- end NAME -->`), so each
//! bench replaces only its own figures and the README can quote the file.

use std::path::Path;

const HEADER: &str = "# Benchmarks\n\nWritten by `make bench` on the machine it ran on; every figure comes from one run, \
and each is given as a ratio to a baseline measured in the same run, because these machines are shared and noisy. \
Tests never assert on these numbers.\n";

pub fn write_section(name: &str, markdown: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/benchmarks.md");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|_| HEADER.to_string());
    let (begin, end) = (format!("<!-- begin {name} -->"), format!("<!-- end {name} -->"));
    let section = format!("{begin}\n{}\n{end}", markdown.trim_end());
    let text = match (text.find(&begin), text.find(&end)) {
        (Some(from), Some(to)) if from < to => format!("{}{section}{}", &text[..from], &text[to + end.len()..]),
        _ => format!("{}\n{section}\n", text.trim_end()),
    };
    std::fs::write(&path, text).expect("write docs/benchmarks.md");
    println!("wrote the {name} section of {}", path.display());
}

/// "1.23 0.98 0.75" from /proc/loadavg: the 1, 5 and 15 minute load averages.
pub fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// The machine, for the reader to judge the figures: cores, memory, kernel.
pub fn machine() -> String {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| m.lines().next()?.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or("?".into(), |kib| format!("{:.0} GiB", kib as f64 / 1024.0 / 1024.0));
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cores} cores, {memory}, Linux {}", kernel.trim())
}

/// The shipped release build of the controller (`make bench` builds it), not the bench profile's own build;
/// LRP_CONTROLLER names another build to compare.
pub fn controller_binary() -> String {
    if let Ok(path) = std::env::var("LRP_CONTROLLER") {
        return path;
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/local-registry-publisher");
    assert!(path.exists(), "{} is missing: run the benchmarks with `make bench`", path.display());
    path.display().to_string()
}
