//! The case matrix and the checks shared by every case.

use vmirq_blk::mock_guest::BlkRequests;
use vmirq_blk::mock_guest::{DeviceOpts, MockGuest, Submitted, TestDevice};
use vmirq_blk::virtio::{req, status};

pub const SECTOR: u32 = 512;

/// Every moderation policy, each without kick polling and with a fixed 20 µs poll.
pub const MODERATION: &[&str] = vmirq_blk::mock_guest::EVERY_MODERATION;
pub const POLL: &[&str] = &["never", "fixed:ns=20000"];

/// `(label, options)` for every configuration, on top of `base`.
pub fn configs(base: DeviceOpts) -> Vec<(String, DeviceOpts)> {
    let mut out = Vec::new();
    for m in MODERATION {
        for p in POLL {
            let o = DeviceOpts {
                moderation: m.parse().expect("moderation spec"),
                poll: p.parse().expect("poll spec"),
                ..base
            };
            out.push((format!("--moderation {m} --poll {p}"), o));
        }
    }
    out
}

/// Run `case` under every configuration; a failure names the configuration.
pub fn each_config(case: fn(DeviceOpts)) {
    each_config_from(DeviceOpts::default(), case);
}

/// Like [`each_config`] on top of `base`.
pub fn each_config_from(base: DeviceOpts, case: fn(DeviceOpts)) {
    for (label, o) in configs(base) {
        if std::panic::catch_unwind(move || case(o)).is_err() {
            panic!("case failed under {label}");
        }
    }
}

/// One `#[test]` per case function, each running the case under every configuration.
macro_rules! matrix {
    ($($case:ident),* $(,)?) => {
        mod matrix {
            $(
                #[test]
                fn $case() {
                    crate::harness::each_config(super::$case);
                }
            )*
        }
    };
}
pub(crate) use matrix;

/// Submit one request, kick, and return its used entry (exactly one is expected).
pub fn run_one(
    d: &mut TestDevice,
    kind: u32,
    sector: u64,
    lens: &[u32],
    write: bool,
) -> (Submitted, (u32, u32)) {
    let s = d.guest.submit(kind, sector, lens, write);
    d.kick();
    let used = d.guest.take_used();
    assert_eq!(
        used.len(),
        1,
        "expected exactly one completion, got {used:?}"
    );
    (s, used[0])
}

/// Header + status buffers for a hand-built request.
pub fn hdr_and_status(g: &mut MockGuest, kind: u32, sector: u64) -> (u64, u64) {
    let h = g.alloc(16);
    g.write_header(h, kind, sector);
    (h, g.alloc_status())
}

/// The queue serves a write and a read of the same sector, and the read returns the data.
pub fn assert_still_serves(d: &mut TestDevice) {
    let w = d.guest.submit(req::OUT, 8, &[SECTOR], false);
    d.guest.fill(&w.data[0], 0xC3);
    d.kick();
    assert_eq!(
        d.guest.take_used(),
        vec![(u32::from(w.head), 1)],
        "queue stopped serving writes"
    );
    assert_eq!(d.guest.status(&w), status::OK, "write status");
    let (r, (_, rlen)) = run_one(d, req::IN, 8, &[SECTOR], true);
    assert_eq!(d.guest.status(&r), status::OK, "read status");
    assert_eq!(rlen, SECTOR + 1);
    assert!(
        d.guest.read(&r.data[0]).iter().all(|&b| b == 0xC3),
        "read did not return the data written"
    );
    assert!(!d.engine.is_broken());
}

/// The device-writable range of a submitted request's data buffers and status byte.
pub fn writable(s: &Submitted) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = s
        .data
        .iter()
        .filter(|d| d.write)
        .map(|d| (d.addr, d.addr + u64::from(d.len)))
        .collect();
    out.push((s.status.0, s.status.0 + 1));
    out
}

/// Kick, and check the answer of the one request `s`: exactly one completion, status `want`,
/// and no byte outside `allowed` (plus the status byte) changed since `canary`. Returns the
/// used length.
pub fn expect_status(
    d: &mut TestDevice,
    head: u16,
    status_addr: u64,
    want: u8,
    canary: &vmirq_blk::mock_guest::Canary,
    allowed: &[(u64, u64)],
) -> u32 {
    d.kick();
    d.timer();
    let used = d.guest.take_used();
    assert_eq!(used.len(), 1, "expected one completion, got {used:?}");
    assert_eq!(used[0].0, u32::from(head), "completed head");
    assert_eq!(d.guest.byte_at(status_addr), want, "status byte");
    let mut allowed = allowed.to_vec();
    allowed.push((status_addr, status_addr + 1));
    d.guest.assert_canary(canary, &allowed);
    assert!(!d.engine.is_broken(), "a sound chain broke the queue");
    used[0].1
}
