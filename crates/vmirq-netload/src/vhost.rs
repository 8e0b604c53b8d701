//! The vhost-user frontend session of one virtio-net device, on rust-vmm's
//! `vhost::vhost_user::Frontend`: connect (with a reply timeout, so a hung backend is an
//! error, not a hang), negotiate features the way QEMU does, hand over guest memory and the
//! rings, and stop the rings (GET_VRING_BASE) before disconnecting.

use crate::memory::GuestMemory;
use crate::ring::RingLayout;
use crate::virtio_net::{F_PROTOCOL_FEATURES, F_VERSION_1};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;
use vhost::vhost_user::message::{VhostUserHeaderFlag, VhostUserProtocolFeatures};
use vhost::vhost_user::{Frontend, VhostUserFrontend};
use vhost::{VhostBackend, VhostUserMemoryRegionInfo, VringConfigData};
use vmm_sys_util::eventfd::EventFd;

/// Errors setting up or tearing down a session.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The socket does not accept connections.
    #[error("cannot connect to {path}")]
    Connect {
        /// Socket path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A vhost-user request failed (the backend refused, vanished or did not answer in time).
    #[error("vhost-user {step} failed")]
    Request {
        /// Which request.
        step: &'static str,
        /// What the vhost crate reported.
        #[source]
        source: vhost::Error,
    },
    /// The backend lacks a feature this driver requires.
    #[error("backend offers features {offered:#x}, missing required {missing:#x}")]
    MissingFeature {
        /// Offered virtio features.
        offered: u64,
        /// Required bits not offered.
        missing: u64,
    },
}

/// Result alias of this module.
pub type Result<T> = std::result::Result<T, SessionError>;

fn step(step: &'static str) -> impl FnOnce(vhost::Error) -> SessionError {
    move |source| SessionError::Request { step, source }
}

/// Protocol features this driver implements (it never sets up a backend request channel,
/// inflight tracking or a status register, so it must not accept those).
const PROTOCOL_WANTED: VhostUserProtocolFeatures = VhostUserProtocolFeatures::REPLY_ACK;

/// An open session with features negotiated.
pub struct Session {
    frontend: Frontend,
    features: u64,
    protocol: VhostUserProtocolFeatures,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("features", &format_args!("{:#x}", self.features))
            .field("protocol", &self.protocol)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Connect to `path` and negotiate: the driver acks `wanted & offered` (plus
    /// PROTOCOL_FEATURES when offered) and fails if a bit of `required` is not offered.
    /// Every later request is acknowledged by the backend when it supports REPLY_ACK.
    ///
    /// # Errors
    /// [`SessionError`].
    pub fn connect(path: &Path, wanted: u64, required: u64, timeout: Duration) -> Result<Self> {
        let connect_err = |source| SessionError::Connect {
            path: path.to_path_buf(),
            source,
        };
        let stream = UnixStream::connect(path).map_err(connect_err)?;
        stream
            .set_read_timeout(Some(timeout))
            .and_then(|()| stream.set_write_timeout(Some(timeout)))
            .map_err(connect_err)?;
        // Two virtqueues: RX 0 and TX 1.
        let mut frontend = Frontend::from_stream(stream, 2);
        frontend.set_owner().map_err(step("SET_OWNER"))?;
        let offered = frontend.get_features().map_err(step("GET_FEATURES"))?;
        let missing = (required | F_VERSION_1) & !offered;
        if missing != 0 {
            return Err(SessionError::MissingFeature { offered, missing });
        }
        let mut protocol = VhostUserProtocolFeatures::empty();
        if offered & F_PROTOCOL_FEATURES != 0 {
            let p = frontend
                .get_protocol_features()
                .map_err(step("GET_PROTOCOL_FEATURES"))?;
            protocol = p & PROTOCOL_WANTED;
            frontend
                .set_protocol_features(protocol)
                .map_err(step("SET_PROTOCOL_FEATURES"))?;
            if protocol.contains(VhostUserProtocolFeatures::REPLY_ACK) {
                frontend.set_hdr_flags(VhostUserHeaderFlag::NEED_REPLY);
            }
        }
        let features = offered & (wanted | F_VERSION_1 | F_PROTOCOL_FEATURES);
        frontend
            .set_features(features)
            .map_err(step("SET_FEATURES"))?;
        Ok(Self {
            frontend,
            features,
            protocol,
        })
    }

    /// The negotiated virtio features.
    #[must_use]
    pub const fn features(&self) -> u64 {
        self.features
    }

    /// Hand the guest memory to the backend (one region, GPA 0 at this process's mapping).
    ///
    /// # Errors
    /// [`SessionError::Request`].
    pub fn set_memory(&self, mem: &GuestMemory) -> Result<()> {
        let region = VhostUserMemoryRegionInfo {
            guest_phys_addr: 0,
            memory_size: mem.len(),
            userspace_addr: mem.host_base(),
            mmap_offset: 0,
            mmap_handle: mem.fd(),
        };
        self.frontend
            .set_mem_table(&[region])
            .map_err(step("SET_MEM_TABLE"))?;
        Ok(())
    }

    /// Give the backend ring `index` (addresses as this process's virtual addresses, as
    /// QEMU does), its eventfds, and enable it.
    ///
    /// # Errors
    /// [`SessionError::Request`].
    pub fn start_ring(
        &mut self,
        index: usize,
        layout: RingLayout,
        mem: &GuestMemory,
        kick: &EventFd,
        call: &EventFd,
    ) -> Result<()> {
        let base = mem.host_base();
        let fe = &mut self.frontend;
        fe.set_vring_num(index, layout.size)
            .map_err(step("SET_VRING_NUM"))?;
        fe.set_vring_base(index, 0)
            .map_err(step("SET_VRING_BASE"))?;
        let config = VringConfigData {
            queue_max_size: layout.size,
            queue_size: layout.size,
            flags: 0,
            desc_table_addr: base + layout.desc,
            used_ring_addr: base + layout.used,
            avail_ring_addr: base + layout.avail,
            log_addr: None,
        };
        fe.set_vring_addr(index, &config)
            .map_err(step("SET_VRING_ADDR"))?;
        fe.set_vring_call(index, call)
            .map_err(step("SET_VRING_CALL"))?;
        fe.set_vring_kick(index, kick)
            .map_err(step("SET_VRING_KICK"))?;
        if self.features & F_PROTOCOL_FEATURES != 0 {
            fe.set_vring_enable(index, true)
                .map_err(step("SET_VRING_ENABLE"))?;
        }
        Ok(())
    }

    /// Stop ring `index`; returns the backend's next available index.
    ///
    /// # Errors
    /// [`SessionError::Request`].
    pub fn stop_ring(&mut self, index: usize) -> Result<u32> {
        self.frontend
            .get_vring_base(index)
            .map_err(step("GET_VRING_BASE"))
    }
}
