//! Open vSwitch with DPDK (Debian's `openvswitch-switch-dpdk`) as a second network peer, run
//! privately: its own ovsdb in a temporary directory, `ovs-vswitchd-dpdk` in the foreground as
//! a child of the bench (never the system's service), a `netdev` bridge with `dpdkvhostuser`
//! ports (OVS creates the sockets and the client connects, like testpmd's vhost PMD), and
//! OpenFlow rules forwarding port 1 <-> 2, 3 <-> 4, ... like testpmd's `io` mode. The PMD
//! thread polls on CPU 1 and EAL's main lcore is CPU 0, as testpmd's. The ports ask for a
//! 9000-byte MTU: at OVS's default of 1500 a 9014-byte frame is dropped. Everything is bounded
//! and the processes are killed when the handle is dropped.

use super::{NetError, Result};
use crate::target::find_on_path;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where Debian's package installs the DPDK build of ovs-vswitchd.
const VSWITCHD_DPDK: &str = "/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk";
/// The database schema of the installed Open vSwitch.
const SCHEMA: &str = "/usr/share/openvswitch/vswitch.ovsschema";
/// Longest wait for a socket, a command, or an exit.
const TIMEOUT: Duration = Duration::from_secs(30);
/// EAL memory in MiB (hugepages).
const SOCKET_MEM_MB: u64 = 256;

/// Why OVS cannot run here, or `None` when everything it needs is installed.
#[must_use]
pub fn unavailable() -> Option<String> {
    if !Path::new(VSWITCHD_DPDK).is_file() {
        return Some(format!(
            "{VSWITCHD_DPDK} not found (Debian: apt-get install openvswitch-switch-dpdk)"
        ));
    }
    for tool in ["ovsdb-tool", "ovsdb-server", "ovs-vsctl", "ovs-ofctl"] {
        if tool_path(tool).is_none() {
            return Some(format!("{tool} not found (Debian: openvswitch-switch)"));
        }
    }
    if !Path::new(SCHEMA).is_file() {
        return Some(format!("{SCHEMA} not found"));
    }
    match vmirq_netload::peer::hugepages_free_mb() {
        Some(mb) if mb >= SOCKET_MEM_MB => None,
        Some(mb) => Some(format!(
            "OVS-DPDK needs {SOCKET_MEM_MB} MiB of free hugepages, {mb} MiB free \
             (scripts/hugepages.sh)"
        )),
        None => Some("no hugetlbfs mounted (scripts/hugepages.sh)".into()),
    }
}

fn tool_path(name: &str) -> Option<PathBuf> {
    find_on_path(name).or_else(|| {
        ["/usr/sbin", "/usr/bin"]
            .iter()
            .map(|d| Path::new(d).join(name))
            .find(|p| p.is_file())
    })
}

/// A private Open vSwitch: ovsdb-server and ovs-vswitchd-dpdk, children of this process.
pub struct Ovs {
    /// The vhost-user sockets OVS created, port 0 first.
    pub sockets: Vec<PathBuf>,
    dir: PathBuf,
    ovsdb: Option<Child>,
    vswitchd: Option<Child>,
}

impl Ovs {
    /// Start OVS in `dir` with `ports` vhost-user ports forwarding in pairs.
    ///
    /// # Errors
    /// [`NetError::Ovs`] with the failing step and the end of its log.
    pub fn start(dir: &Path, ports: usize) -> Result<Self> {
        if let Some(reason) = unavailable() {
            return Err(NetError::Ovs {
                step: "checking the installation",
                reason,
            });
        }
        let mut ovs = Self {
            sockets: (0..ports).map(|i| dir.join(format!("vhu{i}"))).collect(),
            dir: dir.to_path_buf(),
            ovsdb: None,
            vswitchd: None,
        };
        ovs.run_tool(
            "creating the database",
            "ovsdb-tool",
            &["create", &ovs.path("conf.db"), SCHEMA],
        )?;
        ovs.ovsdb = Some(ovs.spawn(
            "starting ovsdb-server",
            tool_path("ovsdb-server").unwrap_or_default(),
            &[
                ovs.path("conf.db"),
                format!("--remote=punix:{}", ovs.path("db.sock")),
                format!("--unixctl={}", ovs.path("ovsdb.ctl")),
                format!("--log-file={}", ovs.path("ovsdb.log")),
            ],
        )?);
        ovs.wait_for(&dir.join("db.sock"), "ovsdb-server's socket")?;
        let dpdk_extra = format!(
            "other_config:dpdk-extra=--no-pci --in-memory --file-prefix={}",
            file_prefix()
        );
        ovs.vsctl(
            "configuring DPDK",
            &[
                "--no-wait",
                "init",
                "--",
                "set",
                "Open_vSwitch",
                ".",
                "other_config:dpdk-init=true",
                &dpdk_extra,
                &format!("other_config:dpdk-socket-mem={SOCKET_MEM_MB}"),
                "other_config:dpdk-lcore-mask=0x1",
                "other_config:pmd-cpu-mask=0x2",
            ],
        )?;
        ovs.vswitchd = Some(ovs.spawn(
            "starting ovs-vswitchd-dpdk",
            PathBuf::from(VSWITCHD_DPDK),
            &[
                format!("unix:{}", ovs.path("db.sock")),
                format!("--unixctl={}", ovs.path("vswitchd.ctl")),
                format!("--log-file={}", ovs.path("vswitchd.log")),
            ],
        )?);
        ovs.vsctl(
            "adding the bridge",
            &[
                "add-br",
                "br0",
                "--",
                "set",
                "bridge",
                "br0",
                "datapath_type=netdev",
            ],
        )?;
        for i in 0..ports {
            let (name, ofport) = (format!("vhu{i}"), format!("ofport_request={}", i + 1));
            ovs.vsctl(
                "adding a dpdkvhostuser port",
                &[
                    "add-port",
                    "br0",
                    &name,
                    "--",
                    "set",
                    "Interface",
                    &name,
                    "type=dpdkvhostuser",
                    &ofport,
                    "mtu_request=9000",
                ],
            )?;
        }
        let mgmt = format!("unix:{}", ovs.path("br0.mgmt"));
        ovs.run_tool(
            "removing the default flow",
            "ovs-ofctl",
            &["del-flows", &mgmt],
        )?;
        for a in (1..=ports).step_by(2) {
            let b = a + 1;
            for (from, to) in [(a, b), (b, a)] {
                let flow = format!("in_port={from},actions=output:{to}");
                ovs.run_tool("adding a flow", "ovs-ofctl", &["add-flow", &mgmt, &flow])?;
            }
        }
        for s in ovs.sockets.clone() {
            ovs.wait_for(&s, "a vhost-user socket")?;
        }
        Ok(ovs)
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    fn command(&self, program: PathBuf) -> Command {
        let mut cmd = Command::new(program);
        for var in ["OVS_RUNDIR", "OVS_DBDIR", "OVS_LOGDIR", "OVS_SYSCONFDIR"] {
            cmd.env(var, &self.dir);
        }
        cmd.stdin(Stdio::null());
        cmd
    }

    fn spawn(&self, step: &'static str, program: PathBuf, args: &[String]) -> Result<Child> {
        let log = std::fs::File::create(self.dir.join(format!("{step}.out").replace(' ', "-")))
            .map_err(|source| NetError::Io {
                what: "creating an OVS log",
                source,
            })?;
        self.command(program)
            .args(args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| NetError::Ovs {
                step,
                reason: e.to_string(),
            })
    }

    fn vsctl(&self, step: &'static str, args: &[&str]) -> Result<()> {
        let db = format!("--db=unix:{}", self.path("db.sock"));
        let timeout = format!("--timeout={}", TIMEOUT.as_secs());
        let mut all = vec![db.as_str(), timeout.as_str()];
        all.extend_from_slice(args);
        self.run_tool(step, "ovs-vsctl", &all)
    }

    fn run_tool(&self, step: &'static str, tool: &str, args: &[&str]) -> Result<()> {
        let program = tool_path(tool).ok_or_else(|| NetError::Ovs {
            step,
            reason: format!("{tool} not found"),
        })?;
        let out = self
            .command(program)
            .args(args)
            .output()
            .map_err(|e| NetError::Ovs {
                step,
                reason: e.to_string(),
            })?;
        if out.status.success() {
            Ok(())
        } else {
            Err(NetError::Ovs {
                step,
                reason: format!(
                    "{tool} {}: {}; ovs-vswitchd log: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim(),
                    super::target::log_tail(&self.dir.join("vswitchd.log"))
                ),
            })
        }
    }

    fn wait_for(&mut self, path: &Path, what: &str) -> Result<()> {
        let start = Instant::now();
        while !path.exists() {
            for child in [self.ovsdb.as_mut(), self.vswitchd.as_mut()]
                .into_iter()
                .flatten()
            {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(NetError::Ovs {
                        step: "waiting for a socket",
                        reason: format!(
                            "a process exited with {status} before {what}; log: {}",
                            super::target::log_tail(&self.dir.join("vswitchd.log"))
                        ),
                    });
                }
            }
            if start.elapsed() > TIMEOUT {
                return Err(NetError::Ovs {
                    step: "waiting for a socket",
                    reason: format!("no {what} at {} after {TIMEOUT:?}", path.display()),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// ovs-vswitchd's process id (its PMD thread is where the forwarding CPU goes).
    #[must_use]
    pub fn pid(&self) -> Option<u32> {
        self.vswitchd.as_ref().map(Child::id)
    }

    /// The configuration, for the report.
    #[must_use]
    pub fn describe(&self) -> String {
        "ovs-vswitchd-dpdk (Open vSwitch 3.1, DPDK 22.11): netdev bridge, dpdkvhostuser ports \
         with mtu_request=9000, flows in_port=1->2 and 2->1, dpdk-lcore-mask=0x1 pmd-cpu-mask=0x2 dpdk-socket-mem=256"
            .into()
    }

    /// Stop both processes (SIGTERM, then SIGKILL after a bound).
    pub fn stop(mut self) {
        self.terminate();
    }

    fn terminate(&mut self) {
        for child in [self.vswitchd.take(), self.ovsdb.take()]
            .into_iter()
            .flatten()
        {
            end(child);
        }
        // EAL leaves its runtime directory behind even with --in-memory.
        let _ = std::fs::remove_dir_all(Path::new("/var/run/dpdk").join(file_prefix()));
    }
}

/// EAL's `--file-prefix` of this process's OVS (one runs at a time).
fn file_prefix() -> String {
    format!("vmirq-ovs-{}", std::process::id())
}

fn end(mut child: Child) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: signalling our own child, which has not been reaped (we own its handle).
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}

impl Drop for Ovs {
    fn drop(&mut self) {
        self.terminate();
    }
}
