//! `vmirq serve-net --queues`: a multiqueue port with the pmd data path is refused at start-up
//! with an error naming both options (the process exits at once, serving nothing), and an
//! out-of-range pair count is refused the same way.

use std::process::Command;
use std::time::Duration;

fn refused(extra: &[&str]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_vmirq"))
        .arg("serve-net")
        .arg("--socket")
        .arg(dir.path().join("a.sock"))
        .arg("--socket")
        .arg(dir.path().join("b.sock"))
        .args(extra)
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("vmirq runs");
    // Bounded: a server that started anyway is killed and the test fails.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("serve-net {extra:?} kept running");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().expect("output");
    assert!(!status.success(), "serve-net {extra:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn serve_net_refuses_pmd_with_several_queue_pairs() {
    let err = refused(&["--queues", "2", "--datapath", "pmd"]);
    assert!(
        err.contains("--queues 2") && err.contains("--datapath pmd"),
        "{err}"
    );
    let err = refused(&["--queues", "17"]);
    assert!(err.contains("--queues 17"), "{err}");
}
