//! Starting and stopping a target: spawn the backend pinned to its CPU, wait until its
//! vhost-user socket accepts connections, and kill it when the handle is dropped.

use super::{DiskFile, TargetSpec};
use crate::client::Endpoint;
use crate::cpu::Placement;
use crate::error::{BenchError, Result};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a `--once` backend may take to exit after the client disconnects.
const EXIT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a backend may take to create its socket.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// What every target needs to start: the disk, the programs, where sockets go.
#[derive(Debug)]
pub struct Setup {
    /// The memory-backed disk file every target uses (bare and qemu-storage-daemon through
    /// io_uring, `vmirq serve --image` likewise).
    pub disk: DiskFile,
    /// The `vmirq` executable that provides `serve`.
    pub vmirq_exe: PathBuf,
    /// The qemu-storage-daemon executable, if installed.
    pub qsd_exe: Option<PathBuf>,
    /// Directory for sockets.
    pub socket_dir: PathBuf,
    /// CPU placement of client and backend.
    pub placement: Placement,
}

/// A started target; the backend process (if any) is killed on drop.
#[derive(Debug)]
pub struct Running {
    /// Where the client connects.
    pub endpoint: Endpoint,
    child: Option<Child>,
    socket: Option<PathBuf>,
    log: Option<PathBuf>,
    /// The backend exits by itself when the client disconnects (`vmirq serve --once`).
    once: bool,
}

impl Running {
    /// The backend's process id, for CPU accounting.
    #[must_use]
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Start `spec` (bare needs no process).
    ///
    /// # Errors
    /// The program is missing or fails to start, or its socket does not appear in time.
    pub fn start(spec: &TargetSpec, setup: &Setup, tag: &str) -> Result<Self> {
        if matches!(spec, TargetSpec::Bare) {
            let endpoint = Endpoint::IoUring(setup.disk.path().to_path_buf());
            return Ok(Self {
                endpoint,
                child: None,
                socket: None,
                log: None,
                once: false,
            });
        }
        let socket = setup
            .socket_dir
            .join(format!("vmirq-bench-{}-{tag}.sock", std::process::id()));
        let _ = std::fs::remove_file(&socket);
        let mut cmd = match spec {
            TargetSpec::Qsd | TargetSpec::QsdPoll => qsd_command(setup, &socket, spec)?,
            _ => vmirq_command(setup, &socket, spec),
        };
        pin_child(&mut cmd, setup.placement.backend_cpu());
        let log = socket.with_extension("log");
        let log_file = std::fs::File::create(&log).map_err(|source| BenchError::File {
            path: log.clone(),
            source,
        })?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file);
        let program = cmd.get_program().to_string_lossy().into_owned();
        tracing::debug!(?cmd, "starting target");
        let child = cmd
            .spawn()
            .map_err(|source| BenchError::Spawn { program, source })?;
        let mut running = Self {
            endpoint: Endpoint::VhostUser(socket.clone()),
            child: Some(child),
            socket: Some(socket),
            log: Some(log),
            once: spec.is_vmirq(),
        };
        running.wait_ready(spec)?;
        Ok(running)
    }

    fn wait_ready(&mut self, spec: &TargetSpec) -> Result<()> {
        let start = Instant::now();
        let Some(socket) = self.socket.clone() else {
            return Ok(());
        };
        while start.elapsed() < READY_TIMEOUT {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    let stderr = self.log.as_deref().map(read_log).unwrap_or_default();
                    return Err(BenchError::NotReady {
                        target: spec.to_string(),
                        reason: format!("exited with {status}: {stderr}"),
                    });
                }
            }
            if socket.exists() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Err(BenchError::NotReady {
            target: spec.to_string(),
            reason: format!("no socket at {} after {READY_TIMEOUT:?}", socket.display()),
        })
    }
}

impl Running {
    /// Wait (bounded) for a `--once` backend to exit after the client disconnected, and read
    /// the counters it printed. `None` for bare, the peer, or a backend that did not exit.
    #[must_use]
    pub fn stop(mut self) -> Option<super::BackendCounters> {
        if !self.once {
            return None;
        }
        let child = self.child.as_mut()?;
        let start = Instant::now();
        while start.elapsed() < EXIT_TIMEOUT {
            match child.try_wait() {
                Ok(Some(_)) => {
                    let text = std::fs::read_to_string(self.log.as_deref()?).ok()?;
                    return super::BackendCounters::parse(&text);
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => return None,
            }
        }
        None
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        for path in [self.socket.take(), self.log.take()].into_iter().flatten() {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn read_log(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.trim().chars().take(600).collect()
}

fn qsd_command(setup: &Setup, socket: &Path, spec: &TargetSpec) -> Result<Command> {
    let Some(exe) = setup.qsd_exe.as_ref() else {
        return Err(BenchError::NotReady {
            target: spec.to_string(),
            reason: "qemu-storage-daemon is not installed".into(),
        });
    };
    let mut cmd = Command::new(exe);
    let mut export_extra = "";
    if *spec == TargetSpec::QsdPoll {
        // QEMU's polling mode: an IOThread that polls its handlers for up to poll-max-ns
        // (adapted like KVM's halt polling) before it blocks; the same window as `+kvm`.
        cmd.arg("--object")
            .arg("iothread,id=iot0,poll-max-ns=200000");
        export_extra = ",iothread=iot0";
    }
    cmd.arg("--blockdev")
        .arg(format!(
            "driver=file,node-name=disk0,filename={},cache.direct=off,aio=io_uring",
            setup.disk.path().display()
        ))
        .arg("--export")
        .arg(format!(
            "type=vhost-user-blk,id=exp0,node-name=disk0,addr.type=unix,addr.path={},\
             writable=on,num-queues=1{export_extra}",
            socket.display()
        ));
    Ok(cmd)
}

fn vmirq_command(setup: &Setup, socket: &Path, spec: &TargetSpec) -> Command {
    let mut cmd = Command::new(&setup.vmirq_exe);
    cmd.arg("serve")
        .arg("--socket")
        .arg(socket)
        .arg("--image")
        .arg(setup.disk.path())
        .arg("--once");
    if let TargetSpec::Vmirq { moderation, poll } = spec {
        cmd.arg("--moderation").arg(moderation.to_string());
        if let Some(p) = poll {
            cmd.arg("--poll").arg(p.to_string());
        }
    }
    cmd
}

/// Pin the child (all its future threads inherit) to `cpu` before it executes.
pub(crate) fn pin_child(cmd: &mut Command, cpu: Option<usize>) {
    let Some(cpu) = cpu else { return };
    // SAFETY: cpu_set_t is a plain bit array for which all-zero is a valid (empty) value.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: CPU_SET writes one bit inside `set`; `cpu` is an online CPU index (< 1024).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: the closure runs in the forked child before exec; it only makes the
    // async-signal-safe sched_setaffinity system call on a set built before the fork, and
    // allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

/// Find `name` on `PATH`.
#[must_use]
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}
