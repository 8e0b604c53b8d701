//! `vmirq sim sweep` on this machine and on a Dask `LocalCluster` give the same JSON line
//! for every (point, run), bit for bit; an interrupted results file is resumed. The Dask
//! part needs `distributed` (scripts/setup.sh installs it in target/py); without it the
//! test says SKIPPED on stderr.
#![allow(missing_docs)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn vmirq() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_vmirq"))
}

fn scenario() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/kvm_wakeup.toml")
}

/// The python that has `distributed`: $VMIRQ_PYTHON, else setup.sh's target/py venv.
fn dask_python() -> Option<PathBuf> {
    let venv = vmirq().parent()?.parent()?.join("py/bin/python");
    let p = std::env::var_os("VMIRQ_PYTHON").map_or(venv, PathBuf::from);
    let ok = Command::new(&p)
        .args(["-c", "import distributed"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(p)
}

/// Run vmirq with `args`, killed after 300 s.
fn run(args: &[&str], out: &Path, extra: &[&str]) -> Output {
    let mut child = Command::new(vmirq())
        .args(["sim", "sweep"])
        .arg(scenario())
        .args(args)
        .arg("--out")
        .arg(out)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start vmirq");
    let start = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > Duration::from_secs(300) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("vmirq sim sweep did not finish in 300 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = child.wait_with_output().expect("output");
    assert!(
        o.status.success(),
        "vmirq sim sweep {args:?} {extra:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn sorted_lines(p: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_to_string(p)
        .expect("results file")
        .lines()
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

const GRID: &[&str] = &[
    "--grid",
    "duration_us=3000,5000",
    "--seed",
    "7",
    "--metric",
    "wakeup_ns.p50",
];
/// 2 grid points x the scenario's 17 runs.
const JOBS: usize = 34;

#[test]
fn dask_local_cluster_gives_the_local_result_bit_for_bit_and_resumes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let local = dir.path().join("local.jsonl");
    let o = run(GRID, &local, &[]);
    let want = sorted_lines(&local);
    assert_eq!(want.len(), JOBS);
    assert!(String::from_utf8_lossy(&o.stderr).contains(&format!("[{JOBS}/{JOBS}]")));

    // Resume on this machine: 5 points kept, a cut sixth line dropped, the rest run.
    let part = dir.path().join("part.jsonl");
    let text = std::fs::read_to_string(&local).expect("read");
    let mut f = std::fs::File::create(&part).expect("create");
    for l in text.lines().take(5) {
        writeln!(f, "{l}").expect("write");
    }
    write!(f, "{}", &text.lines().nth(5).expect("line 6")[..40]).expect("write");
    drop(f);
    let o = run(GRID, &part, &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("5 of 34 points already there"), "{err}");
    assert!(err.contains("[29/29]"), "{err}");
    assert_eq!(sorted_lines(&part), want);

    let Some(py) = dask_python() else {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED dask_local_cluster_gives_the_local_result_bit_for_bit_and_resumes \
             (Dask part): no python with `distributed` (run scripts/setup.sh)"
        );
        return;
    };
    let py = py.to_string_lossy().into_owned();
    let dask = dir.path().join("dask.jsonl");
    let engine = [
        "--engine",
        "dask",
        "--scheduler",
        "local:2",
        "--python",
        &py,
    ];
    run(GRID, &dask, &engine);
    assert_eq!(sorted_lines(&dask), want, "dask and local results differ");

    // An interrupted Dask sweep resumes (on Dask) to the same file.
    let text = std::fs::read_to_string(&dask).expect("read");
    let kept: String = text.lines().take(20).map(|l| format!("{l}\n")).collect();
    std::fs::write(&dask, kept).expect("write");
    let o = run(GRID, &dask, &engine);
    assert!(String::from_utf8_lossy(&o.stderr).contains("20 of 34 points already there"));
    assert_eq!(sorted_lines(&dask), want);
}
