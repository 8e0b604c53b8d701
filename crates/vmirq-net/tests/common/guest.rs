//! Linux guests (vmirq-guest: Debian's cloud kernel and busybox under QEMU) whose
//! virtio-net card is a port of the server under test: the harness (SKIPPED only when QEMU
//! is not installed), the command lists that bring `eth0` up with a static address, and
//! parsers for what the guest prints (its RX interrupts and packet counts, ping summaries,
//! the feature bits its driver acked).

use std::path::Path;
use vmirq_guest::{Harness, Machine, Script, VhostUserNet};

/// The guests' network: link-local addresses that exist only on the test's own switch.
pub const NET_PREFIX: &str = "169.254.77";

/// Guest `n`'s address (`n` from 1).
pub fn ip(n: u8) -> String {
    format!("{NET_PREFIX}.{n}")
}

pub use vmirq_guest::shared_harness as harness;

/// A one-vCPU, 512 MiB guest (the uncompressed initramfs needs more than 256) whose `eth0` is a vhost-user card on `socket` with `mac`.
pub fn machine(h: &Harness, socket: &Path, mac: [u8; 6]) -> Machine {
    h.machine()
        .timeout(std::time::Duration::from_secs(150))
        .nic(VhostUserNet::new(socket, mac))
}

/// Step `net`: wait for `eth0`, give it address `ip(n)`/24 and MTU `mtu`, bring it up; prints
/// the virtio device's name (`virtioN`) and the feature bits the driver acked.
pub fn net_up(s: Script, n: u8, mtu: u32) -> Script {
    s.step(
        "net",
        30,
        &format!(
            "i=0; while [ ! -e /sys/class/net/eth0 ] && [ $i -lt 200 ]; do usleep 100000; \
             i=$((i + 1)); done; ip link set eth0 mtu {mtu} && ip addr add {}/24 dev eth0 && \
             ip link set eth0 up && basename $(readlink /sys/class/net/eth0/device) && \
             cat /sys/class/net/eth0/device/features",
            ip(n)
        ),
    )
}

/// A step printing `rx_packets=N` and the guest's `/proc/interrupts` line(s) of eth0's virtio
/// device (`virtioN` for the card's INTx line; `virtioN-input.0` etc. with MSI-X).
pub fn snapshot(s: Script, name: &str) -> Script {
    s.step(
        name,
        10,
        "echo rx_packets=$(cat /sys/class/net/eth0/statistics/rx_packets); \
         d=$(basename $(readlink /sys/class/net/eth0/device)); grep -E \" $d(-|$)\" /proc/interrupts",
    )
}

/// What a [`snapshot`] step printed: (the card's interrupts, packets received).
pub fn parse_snapshot(out: &str, dev: &str) -> Option<(u64, u64)> {
    let rx = out
        .lines()
        .find_map(|l| l.strip_prefix("rx_packets="))?
        .trim()
        .parse()
        .ok()?;
    let irqs = vmirq_guest::interrupts::parse(out)
        .iter()
        .filter(|s| s.name == dev || s.name.starts_with(&format!("{dev}-")))
        .fold(0u64, |a, s| a.saturating_add(s.total()));
    Some((irqs, rx))
}

/// The first line of step `net`'s output is the virtio device's name, the second the
/// feature bits.
pub fn parse_net(out: &str) -> Option<(String, u64)> {
    let mut lines = out.lines();
    let dev = lines.next()?.trim().to_owned();
    let features = vmirq_guest::nic::parse_features(lines.next()?)?;
    dev.starts_with("virtio").then_some((dev, features))
}

/// busybox ping's summary: (transmitted, received, average round trip in ms).
pub fn parse_ping(out: &str) -> Option<(u64, u64, f64)> {
    let stats = out.lines().find(|l| l.contains("packets transmitted"))?;
    let mut nums = stats
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .map(|w| w.parse::<u64>().ok());
    let sent = nums.next()??;
    let got = nums.next()??;
    let rtt = out
        .lines()
        .find(|l| l.contains("round-trip"))
        .and_then(|l| l.split('=').nth(1))
        .and_then(|v| v.trim().split('/').nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN);
    Some((sent, got, rtt))
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_what_the_guest_prints() {
        let out = "rx_packets=120\n 21:         40   IO-APIC  21-fasteoi   virtio0\n \
                   22:          3   IO-APIC  22-fasteoi   virtio01\n";
        assert_eq!(super::parse_snapshot(out, "virtio0"), Some((40, 120)));
        let ping = "PING 169.254.77.2 (169.254.77.2): 1472 data bytes\n\n--- 169.254.77.2 ping \
                    statistics ---\n20 packets transmitted, 19 packets received, 5% packet \
                    loss\nround-trip min/avg/max = 0.512/1.250/3.100 ms\n";
        let (sent, got, avg) = super::parse_ping(ping).expect("summary");
        assert_eq!((sent, got), (20, 19));
        assert!((avg - 1.25).abs() < 1e-9);
    }
}
