//! `vmirq serve` as a process: SIGUSR1 prints the per-queue counters, SIGTERM stops it with
//! exit status 0 and the final counters, and bad arguments fail with a clear message.
#![allow(missing_docs)]

use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn vmirq() -> Command {
    Command::new(env!("CARGO_BIN_EXE_vmirq"))
}

fn wait_for(path: &Path, child: &mut Child) {
    let start = Instant::now();
    while !path.exists() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("vmirq serve exited early: {status}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "socket never appeared"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill {sig} failed");
}

fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("vmirq serve did not exit after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigusr1_prints_counters_and_sigterm_exits_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("v.sock");
    let mut child = vmirq()
        .args(["serve", "--null", "16M", "--queues", "2", "--socket"])
        .arg(&sock)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn vmirq serve");
    wait_for(&sock, &mut child);
    signal(&child, "-USR1");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().expect("try_wait").is_none(),
        "SIGUSR1 stopped the server"
    );
    signal(&child, "-TERM");
    let status = wait_exit(&mut child);
    let mut err = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("read stderr");
    assert!(status.success(), "exit status {status}; stderr:\n{err}");
    // Once for SIGUSR1, once on exit, each with a line per queue.
    for q in ["queue 0:", "queue 1:"] {
        assert_eq!(
            err.matches(q).count(),
            2,
            "expected two counter dumps for {q}; stderr:\n{err}"
        );
    }
    assert!(err.contains("requests=0"), "stderr:\n{err}");
}

#[test]
fn bad_arguments_fail_with_a_message_naming_the_problem() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("v.sock");
    let cases: [(&[&str], &str); 3] = [
        (&["--ram", "12X"], "12X"),
        (&["--null", "1G", "--moderation", "vic:bogus=1"], "bogus"),
        (
            &["--image", "/nonexistent/disk.img"],
            "/nonexistent/disk.img",
        ),
    ];
    for (args, needle) in cases {
        let out = vmirq()
            .arg("serve")
            .args(args)
            .arg("--socket")
            .arg(&sock)
            .output()
            .expect("run vmirq serve");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            err.contains(needle),
            "{args:?}: error does not name {needle:?}:\n{err}"
        );
        assert!(!err.contains("panicked"), "{args:?} panicked:\n{err}");
    }
}
