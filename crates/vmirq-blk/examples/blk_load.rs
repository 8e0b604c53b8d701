//! A small libblkio load generator for comparing vhost-user-blk backends (vmirq serve,
//! qemu-storage-daemon) on the same machine: 4 KiB random reads (or writes) at a fixed
//! queue depth for a fixed time, interrupt-mode completions, notifications counted from the
//! completion eventfd. Prints one JSON line: `wakeups` counts eventfd reads (a signal may
//! arrive while the client is still running), `sleeps` the client thread's voluntary context
//! switches (it really blocked: each costs a cross-CPU wakeup).
//!
//! With RATE, requests go out open-loop at RATE per second instead (one at a time, each on
//! its own schedule; RATE 0: connected and idle for SECONDS): the trickle and idle cases of
//! `scripts/blk-idle-cpu.sh`.
//!
//! `cargo run --release --example blk_load -- SOCKET QD SECONDS [read|write] [RATE]`
#![allow(missing_docs)]
#![allow(clippy::cast_precision_loss)] // float reporting of counts

use blkio::{Blkio, Completion, ReqFlags};
use std::mem::MaybeUninit;
use std::time::{Duration, Instant};

const BS: usize = 4096;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: blk_load SOCKET QD SECONDS [read|write] [RATE]");
        std::process::exit(2);
    }
    let qd: usize = args[2].parse().expect("QD");
    let secs: f64 = args[3].parse().expect("SECONDS");
    let write = args.get(4).is_some_and(|m| m == "write");
    let rate: Option<f64> = args.get(5).map(|r| r.parse().expect("RATE"));
    let mut b = Blkio::new("virtio-blk-vhost-user").expect("blkio");
    b.set_str("path", &args[1]).expect("path");
    b.connect().expect("connect");
    b.set_i32("num-queues", 1).expect("num-queues");
    let mut out = b.start().expect("start");
    let mut q = out.queues.pop().expect("queue");
    let region = b.alloc_mem_region(qd * BS).expect("region");
    b.map_mem_region(&region).expect("map");
    q.set_completion_fd_enabled(true);
    let fd = q.get_completion_fd().expect("completion fd");
    let blocks = b.get_u64("capacity").expect("capacity") / BS as u64;
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let mut next_lba = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % blocks) * BS as u64
    };
    let mut issued_at = vec![Instant::now(); qd];
    let submit = |q: &mut blkio::Blkioq, slot: usize, lba: u64| {
        let p = (region.addr + slot * BS) as *mut u8;
        if write {
            q.write(lba, p, BS, slot, ReqFlags::empty());
        } else {
            q.read(lba, p, BS, slot, ReqFlags::empty());
        }
    };
    if let Some(rate) = rate {
        let mut submit_one = |q: &mut blkio::Blkioq| submit(q, 0, next_lba());
        paced(&mut q, fd, rate, secs, &mut submit_one);
        return;
    }
    for (slot, t) in issued_at.iter_mut().enumerate() {
        *t = Instant::now();
        submit(&mut q, slot, next_lba());
    }
    let mut lat_ns: Vec<u64> = Vec::with_capacity(1 << 20);
    let mut comps: Vec<MaybeUninit<Completion>> = (0..qd).map(|_| MaybeUninit::uninit()).collect();
    let (mut ios, mut notifications, mut wakeups) = (0u64, 0u64, 0u64);
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    let mut cpu0 = cpu_time();
    let sleeps0 = voluntary_switches();
    let mut inflight = qd;
    while inflight > 0 {
        let n = q.do_io(&mut comps, 0, None, None).expect("do_io");
        let now = Instant::now();
        for c in &comps[..n] {
            // SAFETY: do_io initialised the first n entries.
            let c = unsafe { c.assume_init_ref() };
            assert_eq!(c.ret, 0, "I/O error");
            let slot = c.user_data;
            lat_ns.push(u64::try_from((now - issued_at[slot]).as_nanos()).unwrap_or(u64::MAX));
            ios += 1;
            inflight -= 1;
            if now < end {
                issued_at[slot] = Instant::now();
                submit(&mut q, slot, next_lba());
                inflight += 1;
            }
        }
        if n == 0 {
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let ready = unsafe { libc::poll(&mut pfd, 1, 2000) };
            assert!(ready > 0, "no completion for 2 s: lost notification");
            let mut v = 0u64;
            // SAFETY: reads 8 bytes into v from the eventfd.
            if unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) } == 8 {
                notifications += v;
                wakeups += 1;
            }
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    cpu0 = cpu_time() - cpu0;
    let sleeps = voluntary_switches().saturating_sub(sleeps0);
    lat_ns.sort_unstable();
    let pct = |p: usize| {
        lat_ns
            .get(lat_ns.len().saturating_sub(1) * p / 100)
            .copied()
            .unwrap_or(0)
    };
    println!(
        "{{\"qd\":{qd},\"ios\":{ios},\"iops\":{:.0},\"notifications\":{notifications},\"notif_per_io\":{:.4},\"wakeups\":{wakeups},\"sleeps\":{sleeps},\"sleeps_per_io\":{:.4},\"p50_us\":{:.2},\"p99_us\":{:.2},\"client_cpu_pct\":{:.1}}}",
        ios as f64 / elapsed,
        notifications as f64 / ios.max(1) as f64,
        sleeps as f64 / ios.max(1) as f64,
        pct(50) as f64 / 1000.0,
        pct(99) as f64 / 1000.0,
        cpu0 / elapsed * 100.0
    );
}

/// Open loop: one request every `1 / rate` seconds for `secs` (none when `rate` is 0), each
/// waited for in interrupt mode before the next is due. Prints one JSON line.
fn paced(
    q: &mut blkio::Blkioq,
    fd: i32,
    rate: f64,
    secs: f64,
    submit_one: &mut dyn FnMut(&mut blkio::Blkioq),
) {
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    let mut comps: Vec<MaybeUninit<Completion>> = vec![MaybeUninit::uninit()];
    let (mut ios, mut notifications, mut lat_max_us) = (0u64, 0u64, 0f64);
    let mut due = start;
    while rate > 0.0 && due < end {
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let t = Instant::now();
        submit_one(q);
        loop {
            if q.do_io(&mut comps, 0, None, None).expect("do_io") == 1 {
                break;
            }
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let ready = unsafe { libc::poll(&mut pfd, 1, 2000) };
            assert!(ready > 0, "no completion for 2 s: lost notification");
            let mut v = 0u64;
            // SAFETY: reads 8 bytes into v from the eventfd.
            if unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) } == 8 {
                notifications += v;
            }
        }
        lat_max_us = lat_max_us.max(t.elapsed().as_secs_f64() * 1e6);
        ios += 1;
        due += Duration::from_secs_f64(1.0 / rate);
    }
    if let Some(rest) = end.checked_duration_since(Instant::now()) {
        std::thread::sleep(rest);
    }
    let elapsed = start.elapsed().as_secs_f64();
    println!(
        "{{\"rate\":{rate},\"ios\":{ios},\"iops\":{:.1},\"notifications\":{notifications},\"lat_max_us\":{lat_max_us:.1},\"seconds\":{elapsed:.2}}}",
        ios as f64 / elapsed
    );
}

/// `getrusage(who)`.
fn rusage(who: libc::c_int) -> libc::rusage {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage; `who` is one of the RUSAGE_* constants.
    unsafe { libc::getrusage(who, &mut ru) };
    ru
}

/// Voluntary context switches of this thread (the client runs on the main thread).
fn voluntary_switches() -> u64 {
    u64::try_from(rusage(libc::RUSAGE_THREAD).ru_nvcsw).unwrap_or(0)
}

/// CPU time of the process, seconds.
fn cpu_time() -> f64 {
    let ru = rusage(libc::RUSAGE_SELF);
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}
