//! `--tap`: a Linux tap device as a port of the switch, in a network namespace of the test's
//! own (the test thread unshares its network namespace; the server's threads and the
//! commands it runs inherit it). Port 0 is a hand-driven vhost-user frontend, port 1 the tap.
//! The kernel's `ping` (busybox) to an address behind port 0 sends an ARP request through
//! the tap to port 0, which answers it; the kernel then sends an ICMP echo request, which
//! port 0 answers too: ping succeeds only if frames crossed the switch both ways.
//!
//! SKIPPED when the namespace or the tap cannot be created (no CAP_NET_ADMIN, no
//! /dev/net/tun), or `ip`/busybox are missing.

mod common;

use common::raw::{RawPort, DATA, F_WRITE};
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use vmirq_net::queues::Datapath;
use vmirq_net::virtio::{F_EVENT_IDX, HDR_LEN};

const RX: usize = 0;
const TX: usize = 1;
const TAP: &str = "vmirqtap0";
/// The kernel's address on the tap, and the address port 0 answers for (link-local, in the
/// test's own namespace only).
const HOST_IP: [u8; 4] = [169, 254, 88, 1];
const PEER_IP: [u8; 4] = [169, 254, 88, 2];
const PEER_MAC: [u8; 6] = [2, 0, 0, 0x88, 0, 2];
/// Receive buffers port 0 keeps posted.
const RX_BUFS: u16 = 32;
/// Where port 0's transmit buffers start (after the receive buffers).
const TX_AREA: u64 = DATA + 0x2_0000;

fn skip(reason: &str) {
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED kernel_frames_cross_the_tap_port_both_ways: {reason}"
    );
}

fn run(cmd: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{cmd} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn post_rx(p: &mut RawPort, i: u16) {
    p.desc(RX, i, DATA + u64::from(i) * 2048, 2048, F_WRITE, 0);
    p.offer(RX, i);
}

/// Frames port 0 received since `*seen` (recycling their buffers).
fn receive(p: &mut RawPort, seen: &mut u16) -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    while *seen != p.used_idx(RX) {
        let (id, len) = p.used(RX, *seen);
        let id = u16::try_from(id).expect("a posted buffer");
        assert!(id < RX_BUFS, "used id {id} was never posted");
        let len = usize::try_from(len).expect("fits");
        assert!(len >= HDR_LEN + 14, "runt {len}");
        frames.push(p.read(DATA + u64::from(id) * 2048 + HDR_LEN as u64, len - HDR_LEN));
        post_rx(p, id);
        *seen = seen.wrapping_add(1);
    }
    frames
}

fn send(p: &mut RawPort, n: &mut u16, frame: &[u8]) {
    let slot = *n % 16;
    let addr = TX_AREA + u64::from(slot) * 2048;
    let mut buf = vec![0u8; HDR_LEN];
    buf.extend_from_slice(frame);
    p.write(addr, &buf);
    p.desc(
        TX,
        slot,
        addr,
        u32::try_from(buf.len()).expect("small"),
        0,
        0,
    );
    p.offer(TX, slot);
    *n = n.wrapping_add(1);
    assert!(p.wait_used(TX, *n), "port 0's frame was taken");
}

fn checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !u16::try_from(sum).expect("folded")
}

/// The ARP reply to `req` (an ARP request for PEER_IP), or `None` if `req` is not one.
fn arp_reply(req: &[u8]) -> Option<Vec<u8>> {
    if req.len() < 42 || req[12..14] != [0x08, 0x06] || req[20..22] != [0, 1] {
        return None;
    }
    if req[38..42] != PEER_IP {
        return None;
    }
    let mut r = req[..42].to_vec();
    r[..6].copy_from_slice(&req[6..12]);
    r[6..12].copy_from_slice(&PEER_MAC);
    r[20..22].copy_from_slice(&[0, 2]);
    r[22..28].copy_from_slice(&PEER_MAC);
    r[28..32].copy_from_slice(&PEER_IP);
    r[32..38].copy_from_slice(&req[22..28]);
    r[38..42].copy_from_slice(&req[28..32]);
    Some(r)
}

/// The ICMP echo reply to `req` (an IPv4 echo request to PEER_IP), or `None`.
fn echo_reply(req: &[u8]) -> Option<Vec<u8>> {
    if req.len() < 42 || req[12..14] != [0x08, 0x00] || req[23] != 1 || req[30..34] != PEER_IP {
        return None;
    }
    let ihl = usize::from(req[14] & 0xf) * 4;
    let icmp = 14 + ihl;
    let total = 14 + usize::from(u16::from_be_bytes([req[16], req[17]]));
    if req.get(icmp) != Some(&8) || total > req.len() {
        return None;
    }
    let mut r = req[..total].to_vec();
    r[..6].copy_from_slice(&req[6..12]);
    r[6..12].copy_from_slice(&PEER_MAC);
    r[26..30].copy_from_slice(&PEER_IP);
    r[30..34].copy_from_slice(&req[26..30]);
    r[icmp] = 0;
    r[icmp + 2..icmp + 4].copy_from_slice(&[0, 0]);
    let c = checksum(&r[icmp..total]);
    r[icmp + 2..icmp + 4].copy_from_slice(&c.to_be_bytes());
    Some(r)
}

fn dotted(ip: [u8; 4]) -> String {
    format!("{}.{}.{}.{}", ip[0], ip[1], ip[2], ip[3])
}

#[test]
fn kernel_frames_cross_the_tap_port_both_ways() {
    across_the_tap(Datapath::PerPort);
}

/// The same with `--datapath pmd`, whose bursts hand a tap's frames to the per-frame path.
#[test]
fn kernel_frames_cross_the_tap_port_both_ways_pmd() {
    across_the_tap(Datapath::Pmd { cpu: None });
}

fn across_the_tap(datapath: Datapath) {
    if tools_present().is_err() {
        return;
    }
    // Everything below runs in a thread of its own network namespace.
    let t = std::thread::spawn(move || in_namespace(datapath));
    t.join().expect("the namespace thread");
}

/// `ip` and busybox present.
fn tools_present() -> Result<(), ()> {
    for (prog, args) in [("ip", &["-V"][..]), ("busybox", &["true"][..])] {
        if let Err(e) = run(prog, args) {
            skip(&format!("{prog} unusable: {e}"));
            return Err(());
        }
    }
    Ok(())
}

fn in_namespace(datapath: Datapath) {
    // SAFETY: unshare(2) with CLONE_NEWNET moves only the calling thread (this one, which
    // the test spawned for it) into a new network namespace; no memory is involved.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        skip(&format!(
            "cannot create a network namespace: {}",
            std::io::Error::last_os_error()
        ));
        return;
    }
    let server = match std::panic::catch_unwind(|| {
        common::start(1, |c| {
            c.taps = vec![TAP.to_owned()];
            c.policies.datapath = datapath;
        })
    }) {
        Ok(s) => s,
        Err(_) => {
            skip("the tap cannot be created here (no /dev/net/tun or CAP_NET_ADMIN?)");
            return;
        }
    };
    let host = format!("{}/24", dotted(HOST_IP));
    for args in [
        &["link", "set", "lo", "up"][..],
        &["link", "set", TAP, "up"][..],
        &["addr", "add", host.as_str(), "dev", TAP][..],
    ] {
        run("ip", args).expect("configure the tap");
    }
    let mut p0 = RawPort::connect(&server.sockets[0], F_EVENT_IDX);
    for i in 0..RX_BUFS {
        post_rx(&mut p0, i);
    }
    let mut ping = Command::new("busybox")
        .args(["ping", "-c", "3", "-W", "5", &dotted(PEER_IP)])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("busybox ping");
    let (mut seen, mut sent) = (0u16, 0u16);
    let (mut arps, mut echoes) = (0, 0);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        for frame in receive(&mut p0, &mut seen) {
            if let Some(r) = arp_reply(&frame) {
                arps += 1;
                send(&mut p0, &mut sent, &r);
            } else if let Some(r) = echo_reply(&frame) {
                echoes += 1;
                send(&mut p0, &mut sent, &r);
            }
        }
        if let Ok(Some(_)) = ping.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let _ = ping.kill();
    let out = ping.wait_with_output().expect("ping output");
    let text = String::from_utf8_lossy(&out.stdout);
    let counters = server.handle.counters();
    let _ = writeln!(
        std::io::stderr(),
        "tap: {arps} ARP and {echoes} echo requests answered; ping: {}; switch {counters:?}",
        text.lines().rev().nth(1).unwrap_or("")
    );
    assert!(arps >= 1, "no ARP request came through the tap: {text}");
    assert!(echoes >= 3, "echo requests through the tap: {echoes}");
    assert!(
        out.status.success() && text.contains("3 packets received"),
        "the kernel got the replies back through the tap: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        counters[1].tx_frames >= 4 && counters[1].rx_frames >= 4,
        "{counters:?}"
    );
    drop(p0);
    server.stop();
}
