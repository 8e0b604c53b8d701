//! Sweep jobs on a Dask distributed cluster. The driver is a small Python program
//! (`python/dask_sweep.py`, embedded here and run with `python -c`) that submits one task
//! per job; each task runs `vmirq sim point -` on a worker with the job's JSON on stdin, so
//! every point is computed by the same Rust code as a local sweep and gives the same
//! result bit for bit. Results come back in completion order as `OK <index> <json>` /
//! `ERR <index> <message>` lines.
//!
//! Why Dask `distributed` and not Ray: a pure-Python wheel set (no native runtime, no
//! object store daemon), a `LocalCluster` that starts in seconds on a 2-core CI machine,
//! and a real cluster is one `dask scheduler` plus `dask worker ADDRESS` per machine.

use super::{Result, SweepError, SweepJob, SweepPoint};
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The driver program.
pub const DRIVER: &str = include_str!("../../python/dask_sweep.py");

/// Where and how to run the jobs.
#[derive(Debug, Clone)]
pub struct DaskEngine {
    /// Python interpreter that has `distributed` installed.
    pub python: PathBuf,
    /// Scheduler address (`tcp://host:8786`), or `local` / `local:N` for a `LocalCluster`
    /// of N single-threaded worker processes started by the driver.
    pub scheduler: String,
    /// Path of the `vmirq` binary on the workers.
    pub vmirq: PathBuf,
}

/// Run `jobs` on the cluster; hand each result to `sink` as it arrives (`(index into
/// jobs, result)`). A failed job is passed to `sink` as an error; `sink` decides whether
/// to stop.
///
/// # Errors
/// [`SweepError::Engine`] if the driver cannot start, fails, or loses jobs; the first
/// error of `sink`.
pub fn run_dask<F>(engine: &DaskEngine, jobs: &[SweepJob], mut sink: F) -> Result<()>
where
    F: FnMut(usize, Result<SweepPoint>) -> Result<()>,
{
    let eng = |m: String| SweepError::Engine(m);
    let mut input = String::new();
    for j in jobs {
        input.push_str(&serde_json::to_string(j).map_err(|e| eng(e.to_string()))?);
        input.push('\n');
    }
    let mut child = Command::new(&engine.python)
        .arg("-c")
        .arg(DRIVER)
        .arg("--scheduler")
        .arg(&engine.scheduler)
        .arg("--vmirq")
        .arg(&engine.vmirq)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| eng(format!("cannot start {}: {e}", engine.python.display())))?;
    // Jobs go in on a thread, so a large grid cannot dead-lock against the output pipe.
    let mut stdin = child.stdin.take().ok_or_else(|| eng("no stdin".into()))?;
    let feeder = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let stdout = child.stdout.take().ok_or_else(|| eng("no stdout".into()))?;
    let mut seen = vec![false; jobs.len()];
    let mut outcome = Ok(());
    for line in BufReader::new(stdout).lines() {
        let line = line.map_err(|e| eng(e.to_string()))?;
        let (i, r) = parse_line(&line, jobs.len()).map_err(eng)?;
        seen[i] = true;
        if let Err(e) = sink(i, r) {
            outcome = Err(e);
            let _ = child.kill();
            break;
        }
    }
    let fed = feeder.join();
    let status = child.wait().map_err(|e| eng(e.to_string()))?;
    outcome?;
    if !matches!(fed, Ok(Ok(()))) {
        return Err(eng("could not pass the jobs to the driver".into()));
    }
    if !status.success() {
        return Err(eng(format!("driver exited with {status}")));
    }
    let lost = seen.iter().filter(|s| !**s).count();
    if lost > 0 {
        return Err(eng(format!("{lost} jobs got no result")));
    }
    Ok(())
}

/// Parse one driver line into `(index, result)`.
fn parse_line(line: &str, n: usize) -> core::result::Result<(usize, Result<SweepPoint>), String> {
    let mut it = line.splitn(3, ' ');
    let (tag, idx, rest) = (it.next(), it.next(), it.next().unwrap_or(""));
    let i: usize = idx
        .and_then(|s| s.parse().ok())
        .filter(|&i| i < n)
        .ok_or_else(|| format!("bad driver line {line:?}"))?;
    match tag {
        Some("OK") => {
            let p = serde_json::from_str::<SweepPoint>(rest)
                .map_err(|e| SweepError::Engine(format!("job {i}: bad point JSON: {e}")));
            Ok((i, p))
        }
        Some("ERR") => Ok((i, Err(SweepError::Engine(format!("job {i}: {rest}"))))),
        _ => Err(format!("bad driver line {line:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_lines_parse_and_bad_ones_are_refused() {
        let ok =
            r#"OK 1 {"point":["a=1"],"run":"r","seed":3,"digest":"d","values":{"x":1.5,"y":null}}"#;
        let (i, p) = parse_line(ok, 2).expect("line");
        let p = p.expect("point");
        assert_eq!((i, p.seed, p.values["x"]), (1, 3, 1.5));
        assert!(p.values["y"].is_nan());
        let (i, e) = parse_line("ERR 0 boom", 2).expect("line");
        assert!(i == 0 && e.is_err());
        assert!(parse_line("OK 2 {}", 2).is_err(), "index out of range");
        assert!(parse_line("hello", 2).is_err());
    }
}
