//! The driver ring against rust-vmm's device-side `virtio_queue::Queue` on the same shared
//! memory (a device implementation this crate did not write), plus a hand-written hostile
//! device for the faults. Names follow the virtio 1.x clauses they check.

use super::*;
use crate::test_device::TestDevice as Device;
use virtio_queue::QueueT;

fn setup(size: u16, event_idx: bool) -> (GuestMemory, DriverRing, Device) {
    let mem = GuestMemory::new(1 << 20).expect("memfd");
    let layout = RingLayout::new(size, 4096).expect("layout");
    let ring = DriverRing::new(&mem, layout, event_idx).expect("ring");
    let dev = Device::new(&mem, layout, event_idx);
    (mem, ring, dev)
}

fn add(ring: &mut DriverRing, mem: &GuestMemory, writable: bool, len: u32) -> Option<u16> {
    ring.add_with::<RingError>(mem, writable, |id| {
        Ok((0x8_0000 + u64::from(id) * 4096, len))
    })
    .expect("add")
}

#[test]
fn layout_refuses_bad_sizes_and_bases() {
    assert!(RingLayout::new(0, 0).is_err());
    assert!(RingLayout::new(3, 0).is_err());
    assert!(RingLayout::new(256, 100).is_err());
    let l = RingLayout::new(256, 8192).expect("ok");
    assert_eq!(l.avail, 8192 + 4096);
    assert_eq!(l.used % 4096, 0);
    assert!(l.used >= l.avail + 6 + 512);
    assert!(l.end() >= l.used + 6 + 8 * 256);
}

#[test]
fn need_event_matches_the_spec_formula() {
    // Moving 10 -> 12 passes events 10 and 11, not 12 or 9.
    assert!(need_event(10, 12, 10));
    assert!(need_event(11, 12, 10));
    assert!(!need_event(12, 12, 10));
    assert!(!need_event(9, 12, 10));
    // Across the 16-bit wrap.
    assert!(need_event(u16::MAX, 1, u16::MAX - 1));
    assert!(!need_event(1, 1, u16::MAX));
}

#[test]
fn buffers_round_trip_through_the_device() {
    let (mem, mut ring, mut dev) = setup(8, true);
    let ids: Vec<u16> = (0..8)
        .map(|_| add(&mut ring, &mem, true, 2048).expect("free"))
        .collect();
    assert_eq!(add(&mut ring, &mem, true, 2048), None, "full");
    assert!(ring.publish(&mem).is_ok());
    let seen = dev.take_all();
    assert_eq!(seen.len(), 8);
    for (head, addr, len, w) in &seen {
        assert!(ids.contains(head));
        assert_eq!(*addr, 0x8_0000 + u64::from(*head) * 4096);
        assert_eq!((*len, *w), (2048, true));
    }
    for (head, ..) in seen.iter().rev() {
        dev.complete(*head, 100 + u32::from(*head));
    }
    let mut got = Vec::new();
    while let Some(u) = ring.pop_used(&mem).expect("valid") {
        assert_eq!(u.len, 100 + u32::from(u.id));
        assert_eq!(u.desc_len, 2048);
        got.push(u.id);
    }
    let expected: Vec<u16> = seen.iter().rev().map(|s| s.0).collect();
    assert_eq!(got, expected, "used order is the device's order");
    assert_eq!(ring.free_count(), 8);
    assert_eq!(ring.in_flight(), 0);
}

#[test]
fn spec_2_7_10_kicks_follow_avail_event() {
    let (mem, mut ring, mut dev) = setup(8, true);
    // The device asked for nothing yet: avail_event is 0, so publishing 0 -> 1 kicks.
    add(&mut ring, &mem, false, 64);
    assert!(ring.publish(&mem).expect("publish"));
    // Publishing 1 -> 2 does not pass event 0.
    add(&mut ring, &mem, false, 64);
    assert!(!ring.publish(&mem).expect("publish"));
    // Nothing new: no kick.
    assert!(!ring.publish(&mem).expect("publish"));
    // The device consumes both and re-arms (avail_event = 2): the next buffer kicks, the one
    // after does not.
    assert_eq!(dev.take_all().len(), 2);
    assert!(!dev.q.enable_notification(&dev.gm).expect("enable"));
    add(&mut ring, &mem, false, 64);
    assert!(ring.publish(&mem).expect("publish"));
    add(&mut ring, &mem, false, 64);
    add(&mut ring, &mem, false, 64);
    assert!(!ring.publish(&mem).expect("publish"));
}

#[test]
fn spec_2_7_10_no_event_idx_kicks_unless_no_notify() {
    let (mem, mut ring, mut dev) = setup(8, false);
    add(&mut ring, &mem, false, 64);
    assert!(ring.publish(&mem).expect("publish"));
    dev.q.disable_notification(&dev.gm).expect("disable");
    add(&mut ring, &mem, false, 64);
    assert!(!ring.publish(&mem).expect("publish"));
    dev.q.enable_notification(&dev.gm).expect("enable");
    add(&mut ring, &mem, false, 64);
    assert!(ring.publish(&mem).expect("publish"));
}

#[test]
fn spec_2_7_7_used_event_arms_one_notification() {
    let (mem, mut ring, mut dev) = setup(16, true);
    for _ in 0..6 {
        add(&mut ring, &mem, true, 1500);
    }
    ring.publish(&mem).expect("publish");
    let heads: Vec<u16> = dev.take_all().iter().map(|s| s.0).collect();
    // Armed at used index 0: the first completion notifies, the second does not.
    assert!(ring.enable_cb(&mem).expect("enable"), "nothing pending yet");
    assert!(dev.complete(heads[0], 60));
    assert!(!dev.complete(heads[1], 60));
    // The driver drains with callbacks disabled: no notification.
    ring.disable_cb(&mem).expect("disable");
    assert!(ring.pop_used(&mem).expect("ok").is_some());
    assert!(ring.pop_used(&mem).expect("ok").is_some());
    assert!(!dev.complete(heads[2], 60));
    // Arming while an element is pending reports it (the caller must not sleep).
    assert!(!ring.enable_cb(&mem).expect("enable"));
    ring.pop_used(&mem).expect("ok");
    // Armed at used index 3 with nothing pending: the next completion notifies.
    assert!(ring.enable_cb(&mem).expect("enable"));
    assert!(dev.complete(heads[3], 60));
}

#[test]
fn spec_2_7_7_no_interrupt_flag_without_event_idx() {
    // virtio-queue's device ignores VIRTQ_AVAIL_F_NO_INTERRUPT, so read the flag directly.
    let (mem, mut ring, mut dev) = setup(8, false);
    let avail_flags = |mem: &GuestMemory| {
        let mut b = [0u8; 2];
        mem.read(ring_layout(8).avail, &mut b).expect("in bounds");
        u16::from_le_bytes(b)
    };
    for _ in 0..2 {
        add(&mut ring, &mem, true, 1500);
    }
    ring.publish(&mem).expect("publish");
    let heads: Vec<u16> = dev.take_all().iter().map(|s| s.0).collect();
    assert_eq!(avail_flags(&mem), 0);
    ring.disable_cb(&mem).expect("disable");
    assert_eq!(avail_flags(&mem), AVAIL_F_NO_INTERRUPT);
    dev.complete(heads[0], 60);
    assert!(!ring.enable_cb(&mem).expect("enable"), "one pending");
    assert_eq!(avail_flags(&mem), 0);
    ring.pop_used(&mem).expect("ok");
    assert!(ring.enable_cb(&mem).expect("enable"));
    dev.complete(heads[1], 60);
    assert!(ring.has_used(&mem).expect("ok"));
}

fn ring_layout(size: u16) -> RingLayout {
    RingLayout::new(size, 4096).expect("layout")
}

#[test]
fn enable_cb_delayed_waits_for_three_quarters() {
    let (mem, mut ring, mut dev) = setup(8, true);
    for _ in 0..8 {
        add(&mut ring, &mem, false, 64);
    }
    ring.publish(&mem).expect("publish");
    let heads: Vec<u16> = dev.take_all().iter().map(|s| s.0).collect();
    // 8 in flight: event at used index 6, so completions 1..=6 are silent, the 7th notifies.
    assert!(ring.enable_cb_delayed(&mem).expect("arm"));
    for (i, head) in heads.iter().enumerate() {
        let notified = dev.complete(*head, 0);
        assert_eq!(notified, i == 6, "completion {i}");
    }
}

#[test]
fn indices_wrap_past_u16_with_event_idx() {
    let (mem, mut ring, mut dev) = setup(4, true);
    let mut kicks = 0u32;
    let mut notified = 0u32;
    let mut done = 0u32;
    // 70_000 buffers through a 4-entry ring: both indices wrap.
    while done < 70_000 {
        while add(&mut ring, &mem, true, 256).is_some() {}
        if ring.publish(&mem).expect("publish") {
            kicks += 1;
        }
        for (head, ..) in dev.take_all() {
            notified += u32::from(dev.complete(head, 7));
        }
        assert!(!dev.q.enable_notification(&dev.gm).expect("enable"));
        while let Some(u) = ring.pop_used(&mem).expect("valid") {
            assert_eq!(u.len, 7);
            done += 1;
        }
        assert!(ring.enable_cb(&mem).expect("arm"));
    }
    // The device re-arms after every batch and the driver publishes one batch at a time:
    // one kick and one notification per batch of 4.
    assert_eq!(kicks, 70_000 / 4);
    assert_eq!(notified, 70_000 / 4);
    assert_ne!(ring.last_used(), 0);
}

/// Write a used element and the used index the way a (broken) device would.
fn device_writes_used(mem: &GuestMemory, layout: RingLayout, slot: u16, id: u32, idx: u16) {
    let at = layout.used + 4 + 8 * u64::from(slot);
    mem.write(at, &id.to_le_bytes()).expect("in bounds");
    mem.write(at + 4, &9u32.to_le_bytes()).expect("in bounds");
    mem.write(layout.used + 2, &idx.to_le_bytes())
        .expect("in bounds");
}

#[test]
fn hostile_used_ids_are_faults_not_panics() {
    let (mem, mut ring, _dev) = setup(8, true);
    let layout = ring.layout();
    let a = add(&mut ring, &mem, true, 100).expect("free");
    let b = add(&mut ring, &mem, true, 100).expect("free");
    ring.publish(&mem).expect("publish");
    // An id outside the table.
    device_writes_used(&mem, layout, 0, 4096, 1);
    let e = ring.pop_used(&mem).expect_err("fault");
    assert!(matches!(
        e,
        RingError::Fault(Fault::UsedIdOutOfRange { id: 4096 })
    ));
    // A real id, then the same id again (not in flight any more).
    device_writes_used(&mem, layout, 1, u32::from(a), 2);
    assert_eq!(ring.pop_used(&mem).expect("ok").map(|u| u.id), Some(a));
    device_writes_used(&mem, layout, 2, u32::from(a), 3);
    let e = ring.pop_used(&mem).expect_err("fault");
    assert!(matches!(e, RingError::Fault(Fault::UsedIdNotInFlight { id }) if id == a));
    assert!(!matches!(e, RingError::Fault(f) if f.is_fatal()));
    // The other buffer still comes back.
    device_writes_used(&mem, layout, 3, u32::from(b), 4);
    let u = ring.pop_used(&mem).expect("ok").expect("used");
    assert_eq!((u.id, u.len, u.desc_len), (b, 9, 100));
}

#[test]
fn hostile_used_index_jump_breaks_the_ring() {
    let (mem, mut ring, _dev) = setup(8, true);
    let layout = ring.layout();
    add(&mut ring, &mem, true, 100);
    ring.publish(&mem).expect("publish");
    // One buffer in flight, the device claims 5 used.
    device_writes_used(&mem, layout, 0, 0, 5);
    let e = ring.pop_used(&mem).expect_err("fault");
    assert!(matches!(e, RingError::Fault(f) if f.is_fatal()));
    let e = ring.pop_used(&mem).expect_err("still broken");
    assert!(matches!(e, RingError::Fault(Fault::Broken)));
}

#[test]
fn a_failing_fill_leaves_the_ring_unchanged() {
    let (mem, mut ring, _dev) = setup(4, true);
    let r =
        ring.add_with::<RingError>(&mem, false, |_| Err(RingError::Layout { size: 0, base: 0 }));
    assert!(r.is_err());
    assert_eq!(ring.free_count(), 4);
    assert!(!ring.publish(&mem).expect("nothing to publish"));
}

/// A small deterministic generator (xorshift64*), so a failing sequence reproduces by seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

#[test]
fn random_operation_sequences_keep_every_buffer_accounted_for() {
    for seed in 1..=20u64 {
        let (mem, mut ring, mut dev) = setup(16, seed % 2 == 0);
        let mut rng = Rng(seed * 0x9E37_79B9);
        let mut held: Vec<u16> = Vec::new(); // device holds these
        let mut outstanding = std::collections::BTreeSet::new(); // driver's model
        for _ in 0..5_000 {
            match rng.below(6) {
                0 | 1 => {
                    if let Some(id) = add(&mut ring, &mem, rng.below(2) == 0, 512) {
                        assert!(
                            outstanding.insert(id),
                            "seed {seed}: id {id} handed out twice"
                        );
                    }
                }
                2 => {
                    ring.publish(&mem).expect("publish");
                    held.extend(dev.take_all().into_iter().map(|a| a.0));
                }
                3 if !held.is_empty() => {
                    let i = usize::try_from(rng.below(held.len() as u64)).expect("small");
                    let head = held.swap_remove(i);
                    dev.complete(head, u32::try_from(rng.below(513)).expect("small"));
                }
                4 => {
                    while let Some(u) = ring.pop_used(&mem).expect("an honest device") {
                        assert!(
                            outstanding.remove(&u.id),
                            "seed {seed}: {u:?} not outstanding"
                        );
                        assert!(u.len <= 512 && u.desc_len == 512);
                    }
                }
                _ => {
                    if rng.below(2) == 0 {
                        ring.disable_cb(&mem).expect("disable");
                    } else {
                        let _ = ring.enable_cb(&mem).expect("enable");
                    }
                }
            }
            assert_eq!(
                ring.free_count() + usize::from(ring.in_flight()),
                16,
                "seed {seed}"
            );
            assert_eq!(
                usize::from(ring.in_flight()),
                outstanding.len(),
                "seed {seed}"
            );
        }
    }
}

#[test]
fn a_random_hostile_used_ring_never_panics_or_loses_count() {
    for seed in 1..=50u64 {
        let (mem, mut ring, _dev) = setup(8, true);
        let layout = ring.layout();
        let mut rng = Rng(seed);
        for step in 0..2_000u32 {
            if rng.below(3) == 0 {
                add(&mut ring, &mem, true, 100);
                ring.publish(&mem).expect("publish");
            }
            // Garbage in the used ring: any id, any length, any index.
            let slot = u16::try_from(rng.below(8)).expect("small");
            let id = u32::try_from(rng.below(12)).expect("small");
            let idx = u16::try_from(rng.below(u64::from(u16::MAX) + 1)).expect("u16");
            let idx = if rng.below(4) == 0 {
                idx
            } else {
                ring.last_used().wrapping_add(1)
            };
            device_writes_used(&mem, layout, slot, id, idx);
            match ring.pop_used(&mem) {
                Ok(Some(u)) => assert!(u.id < 8 && u.desc_len == 100, "seed {seed} step {step}"),
                Ok(None) => {}
                Err(RingError::Fault(f)) if f.is_fatal() => break,
                Err(RingError::Fault(_)) => {}
                Err(e) => panic!("seed {seed} step {step}: {e}"),
            }
            assert_eq!(
                ring.free_count() + usize::from(ring.in_flight()),
                8,
                "seed {seed}"
            );
        }
    }
}
