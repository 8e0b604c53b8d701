//! Helpers shared by the end-to-end tests: a silent progress sink, the `vmirq` binary
//! (for `vmirq serve` and `vmirq serve-net` targets), and the SKIPPED line.

#![allow(dead_code, reason = "each test binary uses a subset")]

use std::path::PathBuf;
use vmirq_bench::runner::Progress;

/// Progress that prints only notices.
pub struct Quiet;

impl Progress for Quiet {
    fn begin(&self, _runs: u64) {}
    fn start(&self, _label: &str) {}
    fn finish(&self) {}
    fn notice(&self, text: &str) {
        eprintln!("notice: {text}");
    }
}

/// The `vmirq` binary: $VMIRQ_BIN, or one built in this test's target directory (debug or
/// release).
pub fn vmirq_bin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("VMIRQ_BIN") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let profile_dir = exe.parent()?.parent()?; // target/<profile>/deps/e2e-* -> target/<profile>
    let target_dir = profile_dir.parent()?;
    [
        profile_dir.join("vmirq"),
        target_dir.join("debug/vmirq"),
        target_dir.join("release/vmirq"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// Report what could not be checked here. Straight to stderr: the test harness hides
/// `eprintln!` output of passing tests, which would make the skip silent.
pub fn skipped(what: &str) {
    use std::io::Write;
    // Nothing useful can be done if stderr itself fails.
    let _ = writeln!(std::io::stderr(), "SKIPPED {what}");
}
