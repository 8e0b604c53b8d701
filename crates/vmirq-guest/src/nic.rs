//! A vhost-user network card of the guest (`-netdev vhost-user` with `-device
//! virtio-net-pci`): the backend's socket, the card's MAC and the virtio-net features QEMU
//! may offer the guest. QEMU itself serves the control queue of a vhost-user-net card (it is
//! not passed to the backend), and it passes the backend only the data-path feature bits it
//! knows (QEMU 7.2: no NOTF_COAL), so what the guest acks is read back from the guest
//! (`/sys/class/net/<if>/device/features`), never assumed.
//!
//! MSI-X is off by default (`vectors=0`: one INTx line for the card's queues and
//! configuration changes, `virtioN` in the guest's `/proc/interrupts`): Debian 12's QEMU 7.2
//! under TCG segfaults in `msix_set_vector_notifiers` under `vhost_net_start` (when the
//! guest's driver sets DRIVER_OK) for any vhost-user-net card with MSI-X vectors, with
//! `vmirq serve-net` and with DPDK's vhost PMD alike (seen here with gdb). With INTx the
//! guest's count is of all the card's interrupts, receive and transmit completions together.

use std::path::{Path, PathBuf};

/// One `virtio-net-pci` card backed by a vhost-user-net socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VhostUserNet {
    /// The backend's socket.
    pub socket: PathBuf,
    /// The card's MAC address (`mac=`), which the guest uses as its own.
    pub mac: [u8; 6],
    /// `mrg_rxbuf=`: merged receive buffers (frames larger than one buffer).
    pub mrg_rxbuf: bool,
    /// `event_idx=`: used/available event indexes.
    pub event_idx: bool,
    /// `ctrl_vq=`: the control queue (served by QEMU, never passed to the backend).
    pub ctrl_vq: bool,
    /// MSI-X vectors (QEMU's default) instead of `vectors=0`; see the module docs.
    pub msix: bool,
    /// `rx_queue_size=` (power of two, 256..=1024 in QEMU 7.2).
    pub rx_queue_size: u16,
}

impl VhostUserNet {
    /// A card on `socket` with address `mac`, MRG_RXBUF, EVENT_IDX and the control queue on,
    /// no MSI-X, 256 receive buffers.
    #[must_use]
    pub fn new(socket: &Path, mac: [u8; 6]) -> Self {
        Self {
            socket: socket.to_path_buf(),
            mac,
            mrg_rxbuf: true,
            event_idx: true,
            ctrl_vq: true,
            msix: false,
            rx_queue_size: 256,
        }
    }

    /// The QEMU options of card `index` (`-chardev`, `-netdev`, `-device`), as pairs.
    #[must_use]
    pub fn args(&self, index: usize) -> Vec<(&'static str, String)> {
        let onoff = |b: bool| if b { "on" } else { "off" };
        let m = self.mac;
        // Without the control queue Linux refuses a card that offers features which need it.
        let no_ctrl = if self.ctrl_vq {
            ""
        } else {
            ",ctrl_rx=off,ctrl_vlan=off,ctrl_rx_extra=off,ctrl_mac_addr=off,guest_announce=off,mq=off"
        };
        let vectors = if self.msix { "" } else { ",vectors=0" };
        vec![
            (
                "-chardev",
                format!(
                    "socket,id=vnet{index},path={}",
                    crate::qemu::escape(&self.socket)
                ),
            ),
            (
                "-netdev",
                format!("type=vhost-user,id=net{index},chardev=vnet{index}"),
            ),
            (
                "-device",
                format!(
                    "virtio-net-pci,netdev=net{index},mac={:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x},\
                     mrg_rxbuf={},event_idx={},ctrl_vq={},rx_queue_size={}{vectors}{no_ctrl}",
                    m[0],
                    m[1],
                    m[2],
                    m[3],
                    m[4],
                    m[5],
                    onoff(self.mrg_rxbuf),
                    onoff(self.event_idx),
                    onoff(self.ctrl_vq),
                    self.rx_queue_size
                ),
            ),
        ]
    }
}

/// The feature bits the guest's driver acked, from `/sys/class/net/<if>/device/features` (a
/// string of '0'/'1', bit 0 first); `None` for any other text.
#[must_use]
pub fn parse_features(text: &str) -> Option<u64> {
    let bits = text.trim();
    if bits.is_empty() || bits.len() > 128 || !bits.bytes().all(|b| b == b'0' || b == b'1') {
        return None;
    }
    Some(
        bits.bytes()
            .take(64)
            .enumerate()
            .filter(|&(_, b)| b == b'1')
            .fold(0u64, |acc, (i, _)| acc | (1u64 << i)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn card_options_name_the_socket_mac_and_features() {
        let mut nic = VhostUserNet::new(Path::new("/tmp/a,b.sock"), [0x52, 0x54, 0, 1, 2, 0xab]);
        nic.event_idx = false;
        nic.ctrl_vq = false;
        let args = nic.args(3);
        assert_eq!(
            args[0],
            ("-chardev", "socket,id=vnet3,path=/tmp/a,,b.sock".to_owned())
        );
        assert_eq!(
            args[1],
            (
                "-netdev",
                "type=vhost-user,id=net3,chardev=vnet3".to_owned()
            )
        );
        assert_eq!(
            args[2].1,
            "virtio-net-pci,netdev=net3,mac=52:54:00:01:02:ab,mrg_rxbuf=on,event_idx=off,\
             ctrl_vq=off,rx_queue_size=256,vectors=0,ctrl_rx=off,ctrl_vlan=off,ctrl_rx_extra=off,\
             ctrl_mac_addr=off,guest_announce=off,mq=off"
        );
    }

    #[test]
    fn features_are_read_bit_0_first() {
        let mut text = "0".repeat(64);
        text.replace_range(5..6, "1"); // MAC
        text.replace_range(32..33, "1"); // VERSION_1
        assert_eq!(
            parse_features(&format!("{text}\n")),
            Some((1 << 5) | (1 << 32))
        );
        assert_eq!(parse_features("01x"), None);
        assert_eq!(parse_features(""), None);
    }
}
