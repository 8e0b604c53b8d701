//! The vhost-user-blk backend a guest's disk is served by, as a child process: `vmirq serve`
//! or qemu-storage-daemon with a file node export. Started and waited for until its socket
//! exists; [`Backend::kill`] and [`Backend::restart`] let a test take it away under a running
//! guest and bring it back on the same socket; [`Backend::stop`] ends it with SIGTERM and
//! returns its stderr (vmirq serve prints its per-queue counters there). Killed on drop.

use crate::error::{GuestError, Result};
use crate::process;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a backend may take to create its socket.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a backend may take to exit after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// A backend process serving one vhost-user socket.
#[derive(Debug)]
pub struct Backend {
    name: String,
    program: PathBuf,
    args: Vec<OsString>,
    envs: Vec<(OsString, OsString)>,
    socket: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl Backend {
    /// Start `program args...`, which must create the vhost-user socket `socket`; its stderr
    /// goes to `socket` with extension `log`.
    ///
    /// # Errors
    /// It cannot be started, exits, or creates no socket within 20 s.
    pub fn start(name: &str, program: &Path, args: Vec<OsString>, socket: &Path) -> Result<Self> {
        Self::start_with_env(name, program, args, Vec::new(), socket)
    }

    fn start_with_env(
        name: &str,
        program: &Path,
        args: Vec<OsString>,
        envs: Vec<(OsString, OsString)>,
        socket: &Path,
    ) -> Result<Self> {
        let mut backend = Self {
            name: name.to_owned(),
            program: program.to_path_buf(),
            args,
            envs,
            socket: socket.to_path_buf(),
            log: socket.with_extension("log"),
            child: None,
        };
        backend.spawn()?;
        Ok(backend)
    }

    /// `vmirq serve --socket SOCKET ARGS...` (ARGS: the disk and policies, e.g. `--ram 64M
    /// --moderation vic --poll kvm`).
    ///
    /// # Errors
    /// As [`Backend::start`].
    pub fn vmirq_serve(vmirq: &Path, socket: &Path, args: &[&str]) -> Result<Self> {
        let mut all: Vec<OsString> = vec!["serve".into(), "--socket".into(), socket.into()];
        all.extend(args.iter().map(OsString::from));
        Self::start("vmirq serve", vmirq, all, socket)
    }

    /// As [`Backend::vmirq_serve`], with `VMIRQ_LOG=filter` in its environment (e.g. `info`
    /// for the lines a restart logs), kept across [`Backend::restart`].
    ///
    /// # Errors
    /// As [`Backend::start`].
    pub fn vmirq_serve_logged(
        vmirq: &Path,
        socket: &Path,
        args: &[&str],
        filter: &str,
    ) -> Result<Self> {
        let mut all: Vec<OsString> = vec!["serve".into(), "--socket".into(), socket.into()];
        all.extend(args.iter().map(OsString::from));
        Self::start_with_env(
            "vmirq serve",
            vmirq,
            all,
            vec![("VMIRQ_LOG".into(), filter.into())],
            socket,
        )
    }

    /// qemu-storage-daemon exporting `image` (a raw file node; discards unmap) over
    /// vhost-user-blk with `queues` queues.
    ///
    /// # Errors
    /// As [`Backend::start`].
    pub fn qemu_storage_daemon(
        qsd: &Path,
        socket: &Path,
        image: &Path,
        queues: u16,
        read_only: bool,
    ) -> Result<Self> {
        let file = image.display().to_string().replace(',', ",,");
        let sock = socket.display().to_string().replace(',', ",,");
        let writable = if read_only { "off" } else { "on" };
        let node_ro = if read_only { ",read-only=on" } else { "" };
        let args: Vec<OsString> = vec![
            "--blockdev".into(),
            format!(
                "driver=file,node-name=disk0,filename={file},cache.direct=off,aio=io_uring,\
                 discard=unmap{node_ro}"
            )
            .into(),
            "--export".into(),
            format!(
                "type=vhost-user-blk,id=exp0,node-name=disk0,addr.type=unix,addr.path={sock},\
                 writable={writable},num-queues={queues}"
            )
            .into(),
        ];
        Self::start("qemu-storage-daemon", qsd, args, socket)
    }

    fn spawn(&mut self) -> Result<()> {
        let _ = std::fs::remove_file(&self.socket);
        let log =
            std::fs::File::create(&self.log).map_err(GuestError::io("creating", &self.log))?;
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        process::die_with_parent(&mut cmd);
        tracing::debug!(?cmd, "starting backend");
        let mut child = cmd.spawn().map_err(|source| GuestError::Spawn {
            program: self.program.display().to_string(),
            source,
        })?;
        let start = Instant::now();
        while !self.socket.exists() {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(
                    self.not_ready(format!("exited with {status}: {}", self.log_text().trim()))
                );
            }
            if start.elapsed() > READY_TIMEOUT {
                process::kill(&mut child);
                return Err(self.not_ready(format!("no socket after {READY_TIMEOUT:?}")));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.child = Some(child);
        Ok(())
    }

    fn not_ready(&self, reason: String) -> GuestError {
        GuestError::NotReady {
            backend: self.name.clone(),
            reason,
        }
    }

    /// The socket it serves.
    #[must_use]
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Its process id while it runs.
    #[must_use]
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.as_mut().map(Child::try_wait), Some(Ok(None)))
    }

    /// Its stderr so far.
    #[must_use]
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Send SIGUSR1 (vmirq serve prints its counters).
    pub fn usr1(&self) {
        if let Some(child) = &self.child {
            process::signal(child, libc::SIGUSR1);
        }
    }

    /// SIGKILL it (a crash, from the guest's point of view).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            process::kill(&mut child);
        }
    }

    /// Kill it if it runs and start it again with the same arguments on the same socket. Its
    /// log starts afresh: read [`Backend::log_text`] first to keep the old one.
    ///
    /// # Errors
    /// As [`Backend::start`].
    pub fn restart(&mut self) -> Result<()> {
        self.kill();
        self.spawn()
    }

    /// End it with SIGTERM (SIGKILL after 10 s) and return its stderr and whether it exited
    /// by itself with status 0.
    pub fn stop(&mut self) -> (String, bool) {
        let mut clean = false;
        if let Some(mut child) = self.child.take() {
            process::signal(&child, libc::SIGTERM);
            match process::wait_timeout(&mut child, STOP_TIMEOUT) {
                Some(status) => clean = status.success(),
                None => process::kill(&mut child),
            }
        }
        (self.log_text(), clean)
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_file(&self.log);
    }
}
