//! DPDK's testpmd as a child process: the peer (vhost PMD ports whose sockets the client
//! connects to, forwarding port 0 <-> 1, 2 <-> 3, ... in `io` mode) or the reference client
//! (virtio-user ports connecting to a vhost peer). The child is killed when the handle is
//! dropped; [`TestPmd::stop`] ends it with SIGINT so that it prints its forward statistics.
//!
//! Gotchas found on this project's machines (see shared/reference/real-paths.md): testpmd
//! without a terminal needs `--stats-period` or it exits at once; every process needs its
//! own `--file-prefix`; EAL's main lcore is the lowest listed unless `--main-lcore` says
//! otherwise. Without hugepages the vhost peer still runs with `--no-huge` (it only maps
//! the client's memory); virtio-user needs hugepages to share its memory.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Errors starting or stopping testpmd.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// dpdk-testpmd is not installed.
    #[error("dpdk-testpmd not found in PATH (Debian: apt-get install dpdk dpdk-dev)")]
    NotInstalled,
    /// Spawning or talking to the process failed.
    #[error("testpmd process")]
    Process(#[source] std::io::Error),
    /// testpmd exited or did not create its sockets in time.
    #[error("testpmd not ready: {reason}")]
    NotReady {
        /// What happened, with the end of its log.
        reason: String,
    },
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, PeerError>;

/// How long testpmd may take to create its sockets or to start forwarding.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long testpmd may take to exit after SIGINT.
const EXIT_TIMEOUT: Duration = Duration::from_secs(5);

/// The `dpdk-testpmd` executable, if installed.
#[must_use]
pub fn testpmd_exe() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("dpdk-testpmd"))
        .find(|p| p.is_file())
}

/// Free 2 MiB hugepages and whether a hugetlbfs is mounted.
#[must_use]
pub fn hugepages_free_mb() -> Option<u64> {
    let mounts = fs::read_to_string("/proc/mounts").ok()?;
    if !mounts
        .lines()
        .any(|l| l.split_whitespace().nth(2) == Some("hugetlbfs"))
    {
        return None;
    }
    let meminfo = fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| {
        meminfo
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    Some(field("HugePages_Free:")? * field("Hugepagesize:")? / 1024)
}

/// Which side testpmd plays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// vhost PMD ports, one per socket (testpmd creates and listens on them).
    VhostPeer,
    /// virtio-user ports connecting to vhost sockets (the classic loopback client); sends
    /// a first burst (`--tx-first`) so the loop starts.
    VirtioUser,
}

/// How to start testpmd.
#[derive(Debug, Clone)]
pub struct TestPmdConfig {
    /// Role.
    pub role: Role,
    /// vhost-user sockets, in port order.
    pub sockets: Vec<PathBuf>,
    /// EAL lcores (`-l`), e.g. "0,1".
    pub lcores: String,
    /// EAL main lcore; the other listed lcore forwards.
    pub main_lcore: u32,
    /// EAL `--file-prefix` (unique per process).
    pub file_prefix: String,
    /// EAL memory in MiB.
    pub mem_mb: u32,
    /// Use hugepages (otherwise `--no-huge`).
    pub hugepages: bool,
    /// testpmd's `--total-num-mbufs`.
    pub mbufs: u32,
    /// Largest frame testpmd must accept (`--max-pkt-len`), e.g. 9216 for jumbo frames.
    pub max_pkt_len: u32,
    /// Where its output goes.
    pub log: PathBuf,
    /// Queue pairs per port (virtio-user's `queues=N` and `--rxq=N --txq=N`; 1: neither
    /// given).
    pub queues: u16,
}

impl TestPmdConfig {
    /// A vhost peer for `sockets` forwarding on lcore 1 (main lcore 0), logging to `log`.
    #[must_use]
    pub fn vhost_peer(sockets: Vec<PathBuf>, log: PathBuf) -> Self {
        static STARTED: AtomicU32 = AtomicU32::new(0);
        let n = STARTED.fetch_add(1, Ordering::Relaxed);
        let hugepages = hugepages_free_mb().is_some_and(|mb| mb >= 256);
        Self {
            role: Role::VhostPeer,
            sockets,
            lcores: "0,1".into(),
            main_lcore: 0,
            file_prefix: format!("vmirq-peer-{}-{n}", std::process::id()),
            mem_mb: 256,
            hugepages,
            mbufs: 16384,
            max_pkt_len: 9216,
            log,
            queues: 1,
        }
    }

    /// The virtio-user reference client for `sockets` (a vhost peer's), forwarding on lcore
    /// 0 (main lcore 1), so that it and a peer forwarding on lcore 1 do not share a CPU.
    /// virtio-user shares its memory with the peer, so it needs hugepages.
    #[must_use]
    pub fn virtio_user_client(sockets: Vec<PathBuf>, log: PathBuf) -> Self {
        let mut cfg = Self::vhost_peer(sockets, log);
        cfg.role = Role::VirtioUser;
        cfg.main_lcore = 1;
        cfg.file_prefix = format!("{}-client", cfg.file_prefix);
        cfg.hugepages = true;
        cfg.max_pkt_len = 1518;
        cfg
    }

    fn args(&self) -> Vec<String> {
        let mut a = vec![
            "-l".into(),
            self.lcores.clone(),
            "--main-lcore".into(),
            self.main_lcore.to_string(),
            "--no-pci".into(),
            format!("--file-prefix={}", self.file_prefix),
            "-m".into(),
            self.mem_mb.to_string(),
        ];
        if self.hugepages {
            a.push("--in-memory".into());
            a.push("--single-file-segments".into());
        } else {
            // --no-huge implies legacy memory, which --in-memory refuses.
            a.push("--no-huge".into());
        }
        for (i, s) in self.sockets.iter().enumerate() {
            a.push("--vdev".into());
            a.push(match self.role {
                Role::VhostPeer => format!("net_vhost{i},iface={}", s.display()),
                Role::VirtioUser if self.queues > 1 => format!(
                    "net_virtio_user{i},path={},queues={}",
                    s.display(),
                    self.queues
                ),
                Role::VirtioUser => format!("net_virtio_user{i},path={}", s.display()),
            });
        }
        a.extend(
            [
                "--",
                "--forward-mode=io",
                "--auto-start",
                "--stats-period",
                "1",
                "--nb-cores=1",
            ]
            .map(String::from),
        );
        a.push(format!("--total-num-mbufs={}", self.mbufs));
        if self.queues > 1 {
            a.push(format!("--rxq={}", self.queues));
            a.push(format!("--txq={}", self.queues));
        }
        a.push(format!("--max-pkt-len={}", self.max_pkt_len));
        if self.max_pkt_len > 2048 {
            // One mbuf per jumbo frame (the default 2176-byte mbufs would chain five).
            a.push(format!("--mbuf-size={}", self.max_pkt_len + 256));
        }
        if self.role == Role::VirtioUser {
            a.push("--tx-first".into());
        }
        a
    }
}

/// A running testpmd; killed on drop.
#[derive(Debug)]
pub struct TestPmd {
    child: Option<Child>,
    log: PathBuf,
    cmdline: String,
    file_prefix: String,
}

impl TestPmd {
    /// Start testpmd; for a vhost peer, wait until every socket exists.
    ///
    /// # Errors
    /// [`PeerError`].
    pub fn start(cfg: &TestPmdConfig) -> Result<Self> {
        let exe = testpmd_exe().ok_or(PeerError::NotInstalled)?;
        if cfg.role == Role::VhostPeer {
            for s in &cfg.sockets {
                let _ = fs::remove_file(s);
            }
        }
        let log = fs::File::create(&cfg.log).map_err(PeerError::Process)?;
        let log2 = log.try_clone().map_err(PeerError::Process)?;
        let args = cfg.args();
        let cmdline = format!("{} {}", exe.display(), args.join(" "));
        tracing::debug!(%cmdline, "starting testpmd");
        let child = Command::new(&exe)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(PeerError::Process)?;
        let mut pmd = Self {
            child: Some(child),
            log: cfg.log.clone(),
            cmdline,
            file_prefix: cfg.file_prefix.clone(),
        };
        if cfg.role == Role::VhostPeer {
            pmd.wait_until(|| cfg.sockets.iter().all(|s| s.exists()), "sockets")?;
        }
        Ok(pmd)
    }

    /// The command line it was started with.
    #[must_use]
    pub fn cmdline(&self) -> &str {
        &self.cmdline
    }

    /// The process id.
    #[must_use]
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Everything testpmd printed so far.
    #[must_use]
    pub fn log_text(&self) -> String {
        fs::read(&self.log)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Wait until `ready()` holds, failing if testpmd exits first or time runs out.
    ///
    /// # Errors
    /// [`PeerError::NotReady`].
    pub fn wait_until(&mut self, mut ready: impl FnMut() -> bool, what: &str) -> Result<()> {
        let start = Instant::now();
        loop {
            if ready() {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(self.not_ready(format!("exited with {status} before {what}")));
                }
            }
            if start.elapsed() > READY_TIMEOUT {
                return Err(self.not_ready(format!("no {what} after {READY_TIMEOUT:?}")));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn not_ready(&self, reason: String) -> PeerError {
        let log = self.log_text();
        let tail: Vec<&str> = log.lines().rev().take(15).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        PeerError::NotReady {
            reason: format!("{reason}; log:\n{}", tail.join("\n")),
        }
    }

    /// End testpmd with SIGINT (it stops forwarding and prints its statistics), killing it
    /// if it does not exit in time; returns its whole log.
    ///
    /// # Errors
    /// [`PeerError::Process`] when it cannot be signalled or waited for.
    pub fn stop(mut self) -> Result<String> {
        if let Some(mut child) = self.child.take() {
            // A pid that does not fit is never 0 here: 0 would signal our process group.
            if let Ok(pid) = libc::pid_t::try_from(child.id()) {
                // SAFETY: signalling our own child, which has not been reaped (we own it).
                unsafe { libc::kill(pid, libc::SIGINT) };
            }
            let start = Instant::now();
            while start.elapsed() < EXIT_TIMEOUT {
                if child.try_wait().map_err(PeerError::Process)?.is_some() {
                    return Ok(self.log_text());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            child.wait().map_err(PeerError::Process)?;
        }
        Ok(self.log_text())
    }

    /// Remove EAL's runtime directory of this process (config and fbarray files stay
    /// behind otherwise, megabytes per run without `--in-memory`).
    fn remove_runtime_dir(&self) {
        let base = if std::env::var_os("XDG_RUNTIME_DIR").is_some() && !is_root() {
            std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from)
        } else {
            Some(PathBuf::from("/var/run"))
        };
        if let Some(base) = base {
            let _ = fs::remove_dir_all(base.join("dpdk").join(&self.file_prefix));
        }
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

impl Drop for TestPmd {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.remove_runtime_dir();
    }
}

/// One port's totals from testpmd's final "Forward statistics" block.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ForwardStats {
    /// Packets received from the client on this port.
    pub rx_packets: u64,
    /// Received packets dropped.
    pub rx_dropped: u64,
    /// Packets sent to the client on this port.
    pub tx_packets: u64,
    /// Packets that could not be sent to the client (no receive buffer).
    pub tx_dropped: u64,
}

/// Parse the per-port "Forward statistics" blocks testpmd prints when it stops.
#[must_use]
pub fn forward_stats(log: &str) -> Vec<ForwardStats> {
    let mut out = Vec::new();
    let mut current: Option<ForwardStats> = None;
    for line in log.lines() {
        if line.contains("Forward statistics for port") {
            out.extend(current.take());
            current = Some(ForwardStats::default());
            continue;
        }
        let Some(stats) = current.as_mut() else {
            continue;
        };
        let mut words = line.split_whitespace();
        while let (Some(k), Some(v)) = (words.next(), words.next()) {
            let v = v.parse().unwrap_or(0);
            match k {
                "RX-packets:" => stats.rx_packets = v,
                "RX-dropped:" => stats.rx_dropped = v,
                "TX-packets:" => stats.tx_packets = v,
                "TX-dropped:" => stats.tx_dropped = v,
                _ => {}
            }
        }
        if line.contains("Accumulated forward statistics") {
            break;
        }
    }
    out.extend(current);
    out
}

/// The per-port receive rates (packets/s) of every periodic statistics report, in order.
#[must_use]
pub fn rx_pps_samples(log: &str) -> Vec<Vec<u64>> {
    let mut reports = Vec::new();
    let mut current = Vec::new();
    for line in log.lines() {
        if line.contains("Port statistics ====") && !current.is_empty() {
            reports.push(std::mem::take(&mut current));
        }
        if let Some(rest) = line.trim_start().strip_prefix("Rx-pps:") {
            if let Some(v) = rest.split_whitespace().next().and_then(|v| v.parse().ok()) {
                current.push(v);
            }
        }
    }
    if !current.is_empty() {
        reports.push(current);
    }
    reports
}

/// What the classic vhost loopback moved: testpmd's virtio-user client forwarding through
/// testpmd's vhost peer, both polling, 64-byte frames circulating from `--tx-first`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loopback {
    /// Received packets/s (all client ports) of each statistics report after warm-up.
    pub pps: Vec<u64>,
    /// The client's command line.
    pub client_cmdline: String,
    /// The peer's command line.
    pub peer_cmdline: String,
}

impl Loopback {
    /// Median of the reports.
    #[must_use]
    pub fn median_pps(&self) -> u64 {
        let mut v = self.pps.clone();
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(0)
    }
}

/// Run the classic loopback for `seconds` (plus two seconds of warm-up) with sockets and
/// logs in `dir`: the reference packet rate of this machine for a polling client.
///
/// # Errors
/// [`PeerError`]; [`PeerError::NotReady`] when hugepages are missing.
pub fn loopback_reference(dir: &Path, seconds: u32) -> Result<Loopback> {
    check_loopback_hugepages()?;
    let sockets = vec![socket_path(dir, 0), socket_path(dir, 1)];
    let peer_cfg = TestPmdConfig::vhost_peer(sockets.clone(), dir.join("loopback-peer.log"));
    let peer = TestPmd::start(&peer_cfg)?;
    let mut r = loopback_client(dir, &sockets, seconds)?;
    r.peer_cmdline = peer.cmdline().to_string();
    peer.stop()?;
    Ok(r)
}

fn check_loopback_hugepages() -> Result<()> {
    if hugepages_free_mb().is_none_or(|mb| mb < 512) {
        return Err(PeerError::NotReady {
            reason: "virtio-user needs 512 MiB of free hugepages (scripts/hugepages.sh)".into(),
        });
    }
    Ok(())
}

/// The loopback's client alone: testpmd's virtio-user ports on `sockets` (a vhost peer's,
/// already listening: testpmd's or another backend's) forwarding in `io` mode from
/// `--tx-first`, for `seconds` after two seconds of warm-up. `peer_cmdline` is left empty.
///
/// # Errors
/// [`PeerError`]; [`PeerError::NotReady`] when hugepages are missing.
pub fn loopback_client(dir: &Path, sockets: &[PathBuf], seconds: u32) -> Result<Loopback> {
    check_loopback_hugepages()?;
    let client_cfg =
        TestPmdConfig::virtio_user_client(sockets.to_vec(), dir.join("loopback-client.log"));
    let mut client = TestPmd::start(&client_cfg)?;
    let warmup = 2;
    let want = usize::try_from(seconds + warmup).unwrap_or(usize::MAX);
    let log = client_cfg.log.clone();
    client.wait_until(
        || {
            let text = fs::read_to_string(&log).unwrap_or_default();
            rx_pps_samples(&text).len() > want
        },
        "statistics reports",
    )?;
    let client_cmdline = client.cmdline().to_string();
    let text = client.stop()?;
    let pps = rx_pps_samples(&text)
        .into_iter()
        .skip(usize::try_from(warmup).unwrap_or(0) + 1)
        .map(|ports| ports.iter().sum())
        .collect();
    Ok(Loopback {
        pps,
        client_cmdline,
        peer_cmdline: String::new(),
    })
}

/// Path of socket `i` of a set in `dir`.
#[must_use]
pub fn socket_path(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("vhost-net-{i}.sock"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_forward_statistics() {
        let log = "\
  ---------------------- Forward statistics for port 0  ----------------------
  RX-packets: 1000           RX-dropped: 0             RX-total: 1000
  TX-packets: 998            TX-dropped: 2             TX-total: 1000
  ----------------------------------------------------------------------------

  ---------------------- Forward statistics for port 1  ----------------------
  RX-packets: 1000           RX-dropped: 0             RX-total: 1000
  TX-packets: 1000           TX-dropped: 0             TX-total: 1000
  ----------------------------------------------------------------------------

  +++++++++++++++ Accumulated forward statistics for all ports+++++++++++++++
  RX-packets: 2000           RX-dropped: 0             RX-total: 2000
";
        let s = forward_stats(log);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].tx_dropped, 2);
        assert_eq!(s[0].tx_packets, 998);
        assert_eq!(s[1].rx_packets, 1000);
    }

    #[test]
    fn parses_periodic_rates() {
        let log = "\
Port statistics ====================================
  Rx-pps:            5          Rx-bps:            0
  Rx-pps:            7          Rx-bps:            0
Port statistics ====================================
  Rx-pps:      1000000          Rx-bps:            0
  Rx-pps:      2000000          Rx-bps:            0
";
        assert_eq!(
            rx_pps_samples(log),
            vec![vec![5, 7], vec![1_000_000, 2_000_000]]
        );
    }

    #[test]
    fn peer_arguments_follow_the_tried_command() {
        let cfg = TestPmdConfig::vhost_peer(vec!["/t/a".into(), "/t/b".into()], "/t/log".into());
        let a = cfg.args().join(" ");
        assert!(a.contains("--vdev net_vhost0,iface=/t/a --vdev net_vhost1,iface=/t/b"));
        assert!(a.contains("--forward-mode=io"));
        assert!(a.contains("--stats-period 1"));
        assert!(a.contains("--main-lcore 0"));
    }
}
