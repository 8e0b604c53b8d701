//! The vhost-user message guard: every message from the frontend is read whole, checked
//! ([`rules`]) and only then passed to rust-vmm's vhost-user handler, over a private socket
//! pair of this process. A message that breaks a rule is refused: a failure ack when the
//! frontend asked for one (REPLY_ACK), one warning line naming the rule, and the connection
//! is closed, as `vhost` does with the messages it refuses itself. Replies from the handler
//! pass through unchanged.
//!
//! Why not only rust-vmm's checks: see [`rules`]; the worst gap is a memory region mapped past
//! the end of its file, which lets a frontend kill the backend with SIGBUS.
//!
//! The handler (`VhostUserDaemon`) only takes a listening socket or a path to connect to, so
//! the guard listens on a fresh socket in a private (0700) directory, the daemon connects to
//! it (`start_client`), and the guard accepts that one connection after checking that the
//! peer is this process.
//!
//! The guard also implements INFLIGHT_SHMFD ([`inflight`]), which the handler refuses: it
//! answers GET/SET_INFLIGHT_FD itself and adds the feature to the handler's
//! GET_PROTOCOL_FEATURES reply, so replies pass as whole messages.

pub mod inflight;
pub mod rules;
pub mod wire;

use crate::inflight::InflightState;
use inflight::{Inflight, Step};
use rules::{Limits, Rules};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use wire::{Message, WireError, FLAG_NEED_REPLY, FLAG_REPLY};

/// How long the daemon may take to connect to the guard's private socket.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A private listening socket the vhost-user daemon connects to.
pub struct Rendezvous {
    dir: PathBuf,
    path: PathBuf,
    listener: UnixListener,
}

impl Rendezvous {
    /// Create a 0700 directory under the temporary directory and listen in it.
    ///
    /// # Errors
    /// When the directory or socket cannot be created.
    pub fn new() -> io::Result<Self> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "vmirq-guard-{}-{seq}-{}",
            std::process::id(),
            crate::clock::now_ns()
        ));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let path = dir.join("backend.sock");
        let listener = match UnixListener::bind(&path) {
            Ok(l) => l,
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                return Err(e);
            }
        };
        Ok(Self {
            dir,
            path,
            listener,
        })
    }

    /// Where the daemon connects.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Accept the daemon's connection (it must come from this process) and remove the socket.
    ///
    /// # Errors
    /// When nothing connects in time, or the peer is another process.
    pub fn accept_own(self) -> io::Result<UnixStream> {
        self.listener.set_nonblocking(true)?;
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        let stream = loop {
            match self.listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => return Err(e),
            }
        };
        stream.set_nonblocking(false)?;
        if peer_pid(&stream)? != std::process::id() {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "guard socket connected from another process",
            ));
        }
        Ok(stream)
    }
}

impl Drop for Rendezvous {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Process id of the peer of a unix socket.
///
/// # Errors
/// When SO_PEERCRED fails.
pub fn peer_pid(s: &UnixStream) -> io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = libc::socklen_t::try_from(std::mem::size_of::<libc::ucred>())
        .map_err(|_| io::Error::other("ucred size"))?;
    // SAFETY: `cred` is a live ucred and `len` its size; SO_PEERCRED writes at most `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    u32::try_from(cred.pid).map_err(|_| io::Error::other("bad peer pid"))
}

/// A running guard: one thread between the frontend and the handler.
pub struct Guard {
    frontend: UnixStream,
    thread: Option<JoinHandle<()>>,
}

impl Guard {
    /// Start guarding `frontend`, passing accepted messages to `backend` (the handler's side).
    /// With `inflight`, INFLIGHT_SHMFD is offered and implemented over that state.
    ///
    /// # Errors
    /// When the sockets cannot be cloned or the thread cannot start.
    pub fn spawn(
        frontend: UnixStream,
        backend: UnixStream,
        limits: Limits,
        inflight: Option<Arc<InflightState>>,
    ) -> io::Result<Self> {
        let front = frontend.try_clone()?;
        let hook = inflight.map(Inflight::new);
        let thread = std::thread::Builder::new()
            .name("vmirq-guard".to_owned())
            .spawn(move || relay(&front, &backend, Rules::new(limits), hook))?;
        Ok(Self {
            frontend,
            thread: Some(thread),
        })
    }

    /// Close the frontend connection and wait for the guard thread.
    pub fn close(mut self) {
        let _ = self.frontend.shutdown(std::net::Shutdown::Both);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Pass messages until either side closes or a message is refused; then close both.
fn relay(front: &UnixStream, back: &UnixStream, mut rules: Rules, mut hook: Option<Inflight>) {
    loop {
        match wait_readable(front, back) {
            Ok((f, b)) => {
                if b && !reply(back, front, hook.as_ref()) {
                    break;
                }
                if f && !forward(front, back, &mut rules, hook.as_mut()) {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "vhost-user guard cannot poll its sockets");
                break;
            }
        }
    }
    let _ = back.shutdown(std::net::Shutdown::Both);
    let _ = front.shutdown(std::net::Shutdown::Both);
}

/// Pass the handler's replies on: raw bytes, or whole messages when INFLIGHT_SHMFD is offered
/// (a reply may be rewritten). Returns `false` when the handler's side closed.
fn reply(back: &UnixStream, front: &UnixStream, hook: Option<&Inflight>) -> bool {
    let Some(hook) = hook else {
        return matches!(wire::pass_through(back, front), Ok(true));
    };
    match wire::read_message(back) {
        Ok(Some(mut msg)) => {
            hook.rewrite_reply(&mut msg);
            wire::send_all(front, &msg.to_bytes(), &msg.files).is_ok()
        }
        Ok(None) => false,
        Err(e) => {
            tracing::warn!(error = %e, "bad reply from the vhost-user handler");
            false
        }
    }
}

/// Read one frontend message and pass it on if it is allowed (or answer it, for the ones
/// [`inflight`] handles). Returns `false` when the connection must end.
fn forward(
    front: &UnixStream,
    back: &UnixStream,
    rules: &mut Rules,
    hook: Option<&mut Inflight>,
) -> bool {
    let mut msg = match wire::read_message(front) {
        Ok(Some(m)) => m,
        Ok(None) => return false,
        Err(WireError::Io(e)) => {
            tracing::debug!(error = %e, "frontend socket error");
            return false;
        }
        Err(e) => {
            tracing::warn!("vhost-user message refused: {e}; closing the connection");
            return false;
        }
    };
    tracing::trace!(
        request = msg.request,
        flags = msg.flags,
        payload = ?msg.payload.get(..8),
        "vhost-user message"
    );
    let step = match rules.check(&msg) {
        Ok(()) if rules.early_vring_enable(&msg) => {
            tracing::debug!(
                vring = msg.u32_at(0),
                enable = msg.u32_at(4),
                "SET_VRING_ENABLE before PROTOCOL_FEATURES was acked: answered by the guard"
            );
            let ack = rules.reply_ack() && msg.flags & FLAG_NEED_REPLY != 0;
            Ok((Step::Answered(ack.then(|| ack_reply(&msg, 0))), None))
        }
        Ok(()) => match hook {
            Some(h) => h
                .request(&mut msg)
                .map(|s| (s, Some(h)))
                .map_err(|e| e.to_string()),
            None => Ok((Step::Forward, None)),
        },
        Err(refusal) => Err(refusal.to_string()),
    };
    match step {
        Ok((Step::Forward, hook)) => {
            let mut sent = wire::send_all(back, &msg.to_bytes(), &msg.files).is_ok();
            if let (true, Some(h)) = (sent, hook) {
                h.forwarded(&msg);
            }
            if let (true, Some(late)) = (sent, rules.after_forward(&msg)) {
                // No NEED_REPLY flag: the handler answers nothing the frontend does not expect.
                sent = wire::send_all(back, &late.to_bytes(), &[]).is_ok();
            }
            sent
        }
        Ok((Step::Answered(answer), _)) => {
            answer.is_none_or(|a| wire::send_all(front, &a.to_bytes(), &a.files).is_ok())
        }
        Err(refusal) => {
            tracing::warn!("vhost-user message refused: {refusal}; closing the connection");
            if rules.reply_ack() && msg.flags & FLAG_NEED_REPLY != 0 {
                let _ = wire::send_all(front, &ack_reply(&msg, 1).to_bytes(), &[]);
            }
            false
        }
    }
}

/// A REPLY_ACK reply to `msg`: 0 says it succeeded, anything else that it failed.
fn ack_reply(msg: &Message, status: u64) -> Message {
    Message {
        request: msg.request,
        flags: 1 | FLAG_REPLY,
        payload: status.to_le_bytes().to_vec(),
        files: Vec::new(),
    }
}

/// Block until either socket is readable (or hung up); returns which.
fn wait_readable(front: &UnixStream, back: &UnixStream) -> io::Result<(bool, bool)> {
    let mut fds = [
        libc::pollfd {
            fd: front.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: back.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: `fds` is a live array of two pollfd structs and the count says 2.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if n >= 0 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    let ready = |p: &libc::pollfd| p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0;
    Ok((ready(&fds[0]), ready(&fds[1])))
}
