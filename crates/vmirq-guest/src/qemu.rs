//! One QEMU process running the guest: the command line (q35, shared memfd guest memory so
//! vhost-user backends can map it, vhost-user-blk-pci disks, vhost-user network cards, the kernel and initramfs, the
//! command list as fw_cfg file), the protocol port (a unix socket this side listens on; QEMU
//! connects it as the guest's second serial port) read by a thread into a [`Transcript`], and
//! a bounded wait for the end. QEMU is killed on every path that does not end in its own exit:
//! timeout, too many boots, and [`Drop`].

use crate::accel::Accel;
use crate::error::{GuestError, Result};
use crate::image::Image;
use crate::nic::VhostUserNet;
use crate::process;
use crate::script::Script;
use crate::transcript::{Event, Transcript};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long QEMU may take to connect the protocol port after it starts.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// A vhost-user-blk disk (`-device vhost-user-blk-pci`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VhostUserBlk {
    /// The backend's socket.
    pub socket: PathBuf,
    /// `num-queues`.
    pub queues: u16,
    /// The chardev's `reconnect=S`: QEMU reconnects S seconds after the backend went away
    /// instead of failing (`None`: no reconnect).
    pub reconnect_s: Option<u32>,
}

impl VhostUserBlk {
    /// A disk with `queues` queues on `socket`, no reconnect.
    #[must_use]
    pub fn new(socket: &Path, queues: u16) -> Self {
        Self {
            socket: socket.to_path_buf(),
            queues,
            reconnect_s: None,
        }
    }
}

/// What to boot.
#[derive(Debug, Clone)]
pub struct Machine {
    /// KVM or TCG.
    pub accel: Accel,
    /// vCPUs (`-smp`); Linux gives each vCPU its own virtio-blk queue when there are enough.
    pub cpus: u16,
    /// Guest memory in MiB (a shared memfd).
    pub memory_mib: u32,
    /// The disks, in PCI order (the first is `vda`).
    pub disks: Vec<VhostUserBlk>,
    /// The network cards, in PCI order after the disks (the first is `eth0`).
    pub nics: Vec<VhostUserNet>,
    /// Boots allowed in this process: 1 adds `-no-reboot` (a reset or panic ends QEMU); more
    /// lets the command list reboot, and a boot beyond the count kills QEMU.
    pub boots: u32,
    /// Wall-clock bound of the whole run from QEMU's start.
    pub timeout: Duration,
    /// The QEMU executable.
    pub qemu: PathBuf,
}

impl Machine {
    /// One vCPU, 512 MiB, no disk, one boot, five minutes.
    #[must_use]
    pub fn new(accel: Accel) -> Self {
        Self {
            accel,
            cpus: 1,
            memory_mib: 512,
            disks: Vec::new(),
            nics: Vec::new(),
            boots: 1,
            timeout: Duration::from_secs(300),
            qemu: PathBuf::from(QEMU),
        }
    }

    /// Add a disk.
    #[must_use]
    pub fn disk(mut self, disk: VhostUserBlk) -> Self {
        self.disks.push(disk);
        self
    }

    /// Add a network card.
    #[must_use]
    pub fn nic(mut self, nic: VhostUserNet) -> Self {
        self.nics.push(nic);
        self
    }

    /// Set the guest memory size in MiB (at least 64).
    #[must_use]
    pub fn memory_mib(mut self, mib: u32) -> Self {
        self.memory_mib = mib.max(64);
        self
    }

    /// Set the vCPU count.
    #[must_use]
    pub fn cpus(mut self, cpus: u16) -> Self {
        self.cpus = cpus.max(1);
        self
    }

    /// Set the number of boots allowed (see [`Machine::boots`]).
    #[must_use]
    pub fn boots(mut self, boots: u32) -> Self {
        self.boots = boots.max(1);
        self
    }

    /// Set the wall-clock bound.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    fn args(&self, image: &Image, dir: &Path) -> Vec<String> {
        let mib = self.memory_mib;
        let mut a: Vec<String> = [
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-monitor",
            "none",
            "-accel",
            self.accel.qemu_name(),
            "-cpu",
            self.accel.cpu_model(),
            "-machine",
            "q35,memory-backend=mem",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let mut push = |k: &str, v: String| {
            a.push(k.to_owned());
            a.push(v);
        };
        push("-m", format!("{mib}M"));
        push("-smp", self.cpus.to_string());
        push(
            "-object",
            format!("memory-backend-memfd,id=mem,size={mib}M,share=on"),
        );
        push("-kernel", image.kernel.display().to_string());
        push("-initrd", image.initramfs.display().to_string());
        push("-append", "console=ttyS0 panic=-1 quiet".to_owned());
        push(
            "-serial",
            format!("file:{}", dir.join("console.log").display()),
        );
        push(
            "-chardev",
            format!("socket,id=proto,path={}", escape(&dir.join("proto.sock"))),
        );
        push("-serial", "chardev:proto".to_owned());
        push(
            "-fw_cfg",
            format!("name=opt/vmirq/script,file={}", escape(&dir.join("script"))),
        );
        for (i, d) in self.disks.iter().enumerate() {
            let reconnect = d
                .reconnect_s
                .map_or_else(String::new, |s| format!(",reconnect={s}"));
            push(
                "-chardev",
                format!("socket,id=vblk{i},path={}{reconnect}", escape(&d.socket)),
            );
            push(
                "-device",
                format!("vhost-user-blk-pci,chardev=vblk{i},num-queues={}", d.queues),
            );
        }
        for (i, n) in self.nics.iter().enumerate() {
            for (k, v) in n.args(i) {
                push(k, v);
            }
        }
        if self.boots <= 1 {
            a.push("-no-reboot".to_owned());
        }
        a
    }
}

/// The QEMU executable the harness uses.
pub const QEMU: &str = "qemu-system-x86_64";

/// A path inside a QEMU option value (commas doubled).
pub(crate) fn escape(p: &Path) -> String {
    p.display().to_string().replace(',', ",,")
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// QEMU exited by itself (the guest powered off, or QEMU failed) with this status.
    Exited(Option<i32>),
    /// Still running at [`Machine::timeout`]: killed.
    TimedOut,
    /// The guest booted more often than [`Machine::boots`] (a panic or an unplanned reset):
    /// killed.
    TooManyBoots,
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Exited(Some(code)) => write!(f, "exited with status {code}"),
            Self::Exited(None) => f.write_str("killed by a signal"),
            Self::TimedOut => f.write_str("still running at the timeout: killed"),
            Self::TooManyBoots => f.write_str("booted more often than allowed: killed"),
        }
    }
}

/// The result of a run.
#[derive(Debug, Clone)]
pub struct Run {
    /// The protocol: boots, steps, outputs, exit statuses.
    pub transcript: Transcript,
    /// Kernel console (ttyS0).
    pub console: String,
    /// QEMU's own stderr.
    pub qemu_stderr: String,
    /// How QEMU ended.
    pub exit: Exit,
    /// Wall time from QEMU's start to its end.
    pub wall: Duration,
    /// The accelerator it ran under.
    pub accel: Accel,
}

impl Run {
    /// QEMU exited 0 after the list ran to its end and every step exited 0.
    #[must_use]
    pub fn ok(&self) -> bool {
        self.exit == Exit::Exited(Some(0))
            && self.transcript.done
            && self.transcript.failed_steps().is_empty()
    }

    /// Host time from QEMU's start to the first `READY`.
    #[must_use]
    pub fn boot_time(&self) -> Option<Duration> {
        self.transcript.boots.first().and_then(|b| b.ready_at)
    }

    /// Output of step `name` (first boot it ran in); empty if it never ran.
    #[must_use]
    pub fn output(&self, name: &str) -> &str {
        self.transcript.step(name).map_or("", |s| s.output.as_str())
    }

    /// A report for a failed test: how QEMU ended, the failed steps with their output, the
    /// tail of the console and QEMU's stderr.
    #[must_use]
    pub fn diagnostics(&self) -> String {
        use std::fmt::Write as _;
        let mut out = format!(
            "QEMU ({}) {} after {:.1} s; boots {}, list done: {}\n",
            self.accel,
            self.exit,
            self.wall.as_secs_f64(),
            self.transcript.boots.len(),
            self.transcript.done
        );
        for s in self.transcript.failed_steps() {
            let _ = writeln!(
                out,
                "--- step {} (boot {}) status {:?}:\n{}",
                s.name,
                s.boot,
                s.status,
                tail(&s.output, 40)
            );
        }
        if !self.transcript.stray.is_empty() {
            let _ = writeln!(
                out,
                "--- other output:\n{}",
                tail(&self.transcript.stray, 20)
            );
        }
        let _ = writeln!(out, "--- console (tail):\n{}", tail(&self.console, 30));
        if !self.qemu_stderr.trim().is_empty() {
            let _ = writeln!(out, "--- QEMU stderr:\n{}", tail(&self.qemu_stderr, 20));
        }
        out
    }
}

/// The last `n` lines of `text`.
#[must_use]
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[derive(Default)]
struct Shared {
    transcript: Mutex<Transcript>,
    changed: Condvar,
}

/// A running guest. Dropping it kills QEMU.
pub struct Vm {
    child: Option<Child>,
    dir: tempfile::TempDir,
    started: Instant,
    shared: Arc<Shared>,
    reader: Option<std::thread::JoinHandle<()>>,
    boots: u32,
    timeout: Duration,
    accel: Accel,
}

impl std::fmt::Debug for Vm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vm")
            .field("dir", &self.dir.path())
            .field("accel", &self.accel)
            .finish_non_exhaustive()
    }
}

impl Vm {
    /// Start QEMU on `image` with `script` as the command list and wait until it has
    /// connected the protocol port.
    ///
    /// # Errors
    /// QEMU is missing, exits at once (its stderr is in the error), or never connects.
    pub fn start(image: &Image, machine: &Machine, script: &Script) -> Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("vmirq-guest-")
            .tempdir()
            .map_err(GuestError::io(
                "creating a directory in",
                std::env::temp_dir(),
            ))?;
        let script_path = dir.path().join("script");
        std::fs::write(&script_path, script.render())
            .map_err(GuestError::io("writing", &script_path))?;
        let sock = dir.path().join("proto.sock");
        let listener = UnixListener::bind(&sock).map_err(GuestError::io("listening on", &sock))?;
        listener
            .set_nonblocking(true)
            .map_err(GuestError::io("configuring", &sock))?;
        let err_path = dir.path().join("qemu.stderr");
        let err_file =
            std::fs::File::create(&err_path).map_err(GuestError::io("creating", &err_path))?;
        let mut cmd = Command::new(&machine.qemu);
        cmd.args(machine.args(image, dir.path()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err_file);
        process::die_with_parent(&mut cmd);
        tracing::debug!(?cmd, "starting QEMU");
        let started = Instant::now();
        let child = cmd.spawn().map_err(|source| GuestError::Spawn {
            program: machine.qemu.display().to_string(),
            source,
        })?;
        let mut vm = Self {
            child: Some(child),
            dir,
            started,
            shared: Arc::new(Shared::default()),
            reader: None,
            boots: machine.boots,
            timeout: machine.timeout,
            accel: machine.accel,
        };
        let stream = vm.accept(&listener)?;
        let shared = Arc::clone(&vm.shared);
        vm.reader = Some(std::thread::spawn(move || {
            read_protocol(&stream, &shared, started)
        }));
        Ok(vm)
    }

    fn accept(&mut self, listener: &UnixListener) -> Result<UnixStream> {
        while self.started.elapsed() < CONNECT_TIMEOUT {
            match listener.accept() {
                Ok((stream, _)) => {
                    stream
                        .set_nonblocking(false)
                        .map_err(GuestError::io("configuring", self.dir.path()))?;
                    return Ok(stream);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(GuestError::io("accepting on", self.dir.path())(e)),
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                return Err(GuestError::NoGuest(format!(
                    "QEMU exited with {status}: {}",
                    self.stderr().trim()
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(GuestError::NoGuest(format!(
            "QEMU did not connect its serial port in {CONNECT_TIMEOUT:?}"
        )))
    }

    fn lock(&self) -> MutexGuard<'_, Transcript> {
        self.shared
            .transcript
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A copy of what the guest has said so far.
    #[must_use]
    pub fn transcript(&self) -> Transcript {
        self.lock().clone()
    }

    /// Host time since QEMU started.
    #[must_use]
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Wait up to `limit` until `pred` holds for the transcript. `false` if it did not (the
    /// limit passed, or QEMU ended first).
    pub fn wait_until(&mut self, limit: Duration, pred: impl Fn(&Transcript) -> bool) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if pred(&self.lock()) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline || self.exited() {
                return pred(&self.lock());
            }
            let guard = self.lock();
            let step = (deadline - now).min(Duration::from_millis(50));
            drop(self.shared.changed.wait_timeout(guard, step));
        }
    }

    fn exited(&mut self) -> bool {
        !matches!(self.child.as_mut().map(Child::try_wait), Some(Ok(None)))
    }

    /// Wait for QEMU to end (bounded by [`Machine::timeout`] from its start; a boot beyond
    /// [`Machine::boots`] also ends it) and collect the run.
    #[must_use]
    pub fn finish(mut self) -> Run {
        let exit = self.wait_exit();
        if let Some(reader) = self.reader.take() {
            // QEMU is gone, so the socket is closed and the reader sees EOF.
            let _ = reader.join();
        }
        let console =
            std::fs::read_to_string(self.dir.path().join("console.log")).unwrap_or_default();
        Run {
            transcript: self.transcript(),
            console,
            qemu_stderr: self.stderr(),
            exit,
            wall: self.started.elapsed(),
            accel: self.accel,
        }
    }

    fn wait_exit(&mut self) -> Exit {
        let Some(mut child) = self.child.take() else {
            return Exit::Exited(None);
        };
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Exit::Exited(status.code());
            }
            let too_many =
                self.lock().boots.len() > usize::try_from(self.boots).unwrap_or(usize::MAX);
            if too_many || self.started.elapsed() >= self.timeout {
                process::kill(&mut child);
                return if too_many {
                    Exit::TooManyBoots
                } else {
                    Exit::TimedOut
                };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("qemu.stderr")).unwrap_or_default()
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            process::kill(&mut child);
        }
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

/// The reader thread: lines from the protocol port into the transcript, answering `HELLO`
/// with the boot number. Ends at EOF (QEMU exited or was killed).
fn read_protocol(stream: &UnixStream, shared: &Shared, started: Instant) {
    let mut reader = BufReader::new(stream);
    let mut writer = stream;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let line = String::from_utf8_lossy(&buf);
        let line = line.trim_end_matches('\n');
        let event = shared
            .transcript
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .feed_line(line, started.elapsed());
        if let Event::Hello(n) = event {
            let _ = writeln!(writer, "boot={n}");
        }
        shared.changed.notify_all();
    }
    shared.changed.notify_all();
}
