//! The devices a network cell runs against, each a process of its own with two vhost-user
//! sockets forwarding port 0 <-> 1: DPDK testpmd's vhost PMD (the peer every ratio is taken
//! against), Open vSwitch with DPDK (a second peer, where it runs; [`super::ovs`]), and
//! `vmirq serve-net` with its defaults or one moderation policy. The polling peers forward on
//! CPU 1 (the backend CPU of the `split` placement) and serve-net is pinned there too, so
//! every device gets the same one CPU while the client runs on CPU 0.

use super::ovs::Ovs;
use super::{NetError, Result};
use crate::cpu::Placement;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};
use vmirq_netload::peer::{self, TestPmd, TestPmdConfig};
use vmirq_policy::spec::ModerationSpec;

/// How long serve-net may take to create its sockets, and to exit after SIGTERM.
const SERVE_NET_TIMEOUT: Duration = Duration::from_secs(10);

/// A network target on the command line (`--net --target ...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetTarget {
    /// `testpmd`: DPDK testpmd's vhost PMD in `io` forwarding mode (the peer).
    Testpmd,
    /// `ovs`: Open vSwitch with DPDK, two `dpdkvhostuser` ports and port-to-port flows.
    Ovs,
    /// `vmirq` (its defaults: no policy flags) or `vmirq:SPEC` (`--moderation SPEC`), each
    /// with `+pmd` for serve-net's polling data path (`--datapath pmd:cpu=N`, N the backend
    /// CPU: one thread polls every port in bursts, like OVS-DPDK's PMD thread).
    Vmirq {
        /// The moderation policy, or `None` for serve-net's defaults.
        moderation: Option<ModerationSpec>,
        /// `--datapath pmd` instead of the default per-port workers.
        pmd: bool,
    },
}

impl NetTarget {
    /// Whether this is a peer (a device vmirq is compared with).
    #[must_use]
    pub const fn is_peer(&self) -> bool {
        matches!(self, Self::Testpmd | Self::Ovs)
    }
}

impl fmt::Display for NetTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Testpmd => f.write_str("testpmd"),
            Self::Ovs => f.write_str("ovs-dpdk"),
            Self::Vmirq { moderation, pmd } => {
                f.write_str("vmirq")?;
                if let Some(m) = moderation {
                    write!(f, ":{m}")?;
                }
                if *pmd {
                    f.write_str("+pmd")?;
                }
                Ok(())
            }
        }
    }
}

impl FromStr for NetTarget {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        match s {
            "testpmd" => Ok(Self::Testpmd),
            "ovs" | "ovs-dpdk" => Ok(Self::Ovs),
            _ => {
                let (base, pmd) = match s.strip_suffix("+pmd") {
                    Some(b) => (b, true),
                    None => (s, false),
                };
                if base == "vmirq" {
                    return Ok(Self::Vmirq {
                        moderation: None,
                        pmd,
                    });
                }
                let spec = base.strip_prefix("vmirq:").ok_or_else(|| {
                    format!("unknown network target {s:?} (testpmd, ovs, vmirq[:MODERATION][+pmd])")
                })?;
                let m = spec.parse::<ModerationSpec>().map_err(|e| e.to_string())?;
                Ok(Self::Vmirq {
                    moderation: Some(m),
                    pmd,
                })
            }
        }
    }
}

/// What starting a target needs.
#[derive(Debug, Clone)]
pub struct NetSetup {
    /// The `vmirq` executable providing `serve-net`.
    pub vmirq_exe: PathBuf,
    /// Where sockets, logs and OVS's database go (one directory per target start is made
    /// inside).
    pub dir: PathBuf,
    /// CPU placement of client and backend.
    pub placement: Placement,
}

enum Process {
    Testpmd(TestPmd),
    Ovs(Ovs),
    ServeNet { child: Child, log: PathBuf },
}

/// A started target with its sockets; stopped (killed at worst) on drop.
pub struct NetRunning {
    /// Its vhost-user sockets, port 0 first.
    pub sockets: Vec<PathBuf>,
    /// The command line (or configuration) it runs with.
    pub describe: String,
    process: Option<Process>,
    dir: PathBuf,
}

impl NetRunning {
    /// Start `target` with two ports in a fresh directory under `setup.dir`.
    ///
    /// # Errors
    /// [`NetError`]: the program is missing, exits, or makes no sockets in time.
    pub fn start(target: &NetTarget, setup: &NetSetup, tag: &str) -> Result<Self> {
        let dir = setup.dir.join(tag);
        std::fs::create_dir_all(&dir).map_err(|source| NetError::Io {
            what: "creating the target's directory",
            source,
        })?;
        let sockets: Vec<PathBuf> = (0..2).map(|i| peer::socket_path(&dir, i)).collect();
        let (process, describe, sockets) = match target {
            NetTarget::Testpmd => {
                let cfg = TestPmdConfig::vhost_peer(sockets.clone(), dir.join("testpmd.log"));
                let pmd = TestPmd::start(&cfg)?;
                let describe = pmd.cmdline().to_string();
                (Process::Testpmd(pmd), describe, sockets)
            }
            NetTarget::Ovs => {
                let ovs = Ovs::start(&dir, 2)?;
                let describe = ovs.describe();
                let sockets = ovs.sockets.clone();
                (Process::Ovs(ovs), describe, sockets)
            }
            NetTarget::Vmirq { moderation, pmd } => {
                let log = dir.join("serve-net.log");
                let (child, log, describe) =
                    start_serve_net(setup, &sockets, *moderation, *pmd, &log)?;
                (Process::ServeNet { child, log }, describe, sockets)
            }
        };
        Ok(Self {
            sockets,
            describe,
            process: Some(process),
            dir,
        })
    }

    /// The process whose CPU time is the backend's (testpmd, ovs-vswitchd, serve-net).
    #[must_use]
    pub fn pid(&self) -> Option<u32> {
        match self.process.as_ref()? {
            Process::Testpmd(p) => p.pid(),
            Process::Ovs(o) => o.pid(),
            Process::ServeNet { child, .. } => Some(child.id()),
        }
    }

    /// Stop the target (SIGINT/SIGTERM first, so it prints its counters), bounded.
    ///
    /// # Errors
    /// [`NetError`] when it cannot be stopped cleanly (it is killed then).
    pub fn stop(mut self) -> Result<()> {
        match self.process.take() {
            Some(Process::Testpmd(p)) => {
                p.stop()?;
            }
            Some(Process::Ovs(o)) => o.stop(),
            Some(Process::ServeNet { child, log }) => stop_serve_net(child, &log)?,
            None => {}
        }
        Ok(())
    }
}

impl Drop for NetRunning {
    fn drop(&mut self) {
        if let Some(Process::ServeNet { mut child, .. }) = self.process.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // testpmd and OVS kill their processes in their own Drop.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start_serve_net(
    setup: &NetSetup,
    sockets: &[PathBuf],
    moderation: Option<ModerationSpec>,
    pmd: bool,
    log: &Path,
) -> Result<(Child, PathBuf, String)> {
    let mut cmd = Command::new(&setup.vmirq_exe);
    cmd.arg("serve-net");
    for s in sockets {
        cmd.arg("--socket").arg(s);
    }
    if let Some(m) = moderation {
        cmd.arg("--moderation").arg(m.to_string());
    }
    if pmd {
        let cpu = setup.placement.backend_cpu();
        cmd.arg("--datapath")
            .arg(cpu.map_or_else(|| "pmd".to_string(), |c| format!("pmd:cpu={c}")));
    }
    let describe = format!("{cmd:?}").replace('"', "");
    crate::target::pin_child(&mut cmd, setup.placement.backend_cpu());
    let file = std::fs::File::create(log).map_err(|source| NetError::Io {
        what: "creating serve-net's log",
        source,
    })?;
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(file);
    let mut child = cmd.spawn().map_err(|source| NetError::Spawn {
        program: setup.vmirq_exe.display().to_string(),
        source,
    })?;
    let start = Instant::now();
    while !sockets.iter().all(|s| s.exists()) {
        let exited = child.try_wait().ok().flatten();
        if exited.is_some() || start.elapsed() > SERVE_NET_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(NetError::NotReady {
                target: "vmirq serve-net".into(),
                reason: format!(
                    "{}: {}",
                    exited.map_or_else(|| "no sockets in time".to_string(), |s| s.to_string()),
                    log_tail(log)
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok((child, log.to_path_buf(), describe))
}

fn stop_serve_net(mut child: Child, log: &Path) -> Result<()> {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: signalling our own child, which has not been reaped (we own its handle).
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    let start = Instant::now();
    while start.elapsed() < SERVE_NET_TIMEOUT {
        if let Ok(Some(status)) = child.try_wait() {
            tracing::debug!(counters = %log_tail(log), "serve-net stopped");
            return if status.success() {
                Ok(())
            } else {
                Err(NetError::NotReady {
                    target: "vmirq serve-net".into(),
                    reason: format!("exited with {status}: {}", log_tail(log)),
                })
            };
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = child.kill();
    let _ = child.wait();
    Err(NetError::NotReady {
        target: "vmirq serve-net".into(),
        reason: format!("did not exit within {SERVE_NET_TIMEOUT:?} of SIGTERM"),
    })
}

/// The last lines of a log, for error messages.
pub(crate) fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(8)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_names_round_trip() {
        for s in [
            "testpmd",
            "ovs-dpdk",
            "vmirq",
            "vmirq:dim",
            "vmirq:none",
            "vmirq+pmd",
            "vmirq:dim+pmd",
        ] {
            let t: NetTarget = s.parse().expect(s);
            assert_eq!(t.to_string(), s);
        }
        assert_eq!("ovs".parse::<NetTarget>(), Ok(NetTarget::Ovs));
        assert!("vmirq:nonsense".parse::<NetTarget>().is_err());
        assert!("qemu".parse::<NetTarget>().is_err());
        assert!("vmirq+poll".parse::<NetTarget>().is_err());
        assert!(
            NetTarget::Testpmd.is_peer() && !"vmirq".parse::<NetTarget>().expect("ok").is_peer()
        );
    }
}
