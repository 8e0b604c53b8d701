//! Drives arbitrary sequences of virtio-net control commands (raw bytes, and the device-side
//! calls) through `vmirq_net::ctrl::Ctrl` and checks it against a simple model of the
//! coalescing table: never a panic, the ack sits where the reply says inside the writable
//! part, a refused command changes nothing, and every queue's values match the model.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use vmirq_net::ctrl::{Action, Coal, CoalTarget, Ctrl, CtrlError, VIRTIO_NET_OK};

#[derive(Debug, Arbitrary)]
enum Op {
    /// A raw command: class, command, data, size of the writable part.
    Command { class: u8, command: u8, data: Vec<u8>, writable: u8 },
    /// The device programs a queue itself.
    NoteApplied { vq: u16, max_packets: u32, max_usecs: u32 },
    QueueReset { vq: u16 },
    Reset,
}

#[derive(Debug, Arbitrary)]
struct Input {
    features: u64,
    max_pairs: u8,
    ops: Vec<Op>,
}

/// The model: per-queue values plus the last TX_SET / RX_SET.
struct Model {
    vq: Vec<Coal>,
    all: [Coal; 2],
}

impl Model {
    fn set(&mut self, target: CoalTarget, coal: Coal) {
        for (i, c) in self.vq.iter_mut().enumerate() {
            let hit = match target {
                CoalTarget::AllRx => i % 2 == 0,
                CoalTarget::AllTx => i % 2 == 1,
                CoalTarget::Queue(q) => usize::from(q) == i,
            };
            if hit {
                *c = coal;
            }
        }
        match target {
            CoalTarget::AllRx => self.all[0] = coal,
            CoalTarget::AllTx => self.all[1] = coal,
            CoalTarget::Queue(_) => {}
        }
    }
}

fuzz_target!(|input: Input| {
    let pairs = u16::from(input.max_pairs % 5).max(1);
    let mut ctrl = Ctrl::new(input.features, pairs);
    let mut model = Model { vq: vec![Coal::default(); usize::from(pairs) * 2], all: [Coal::default(); 2] };
    for op in input.ops.into_iter().take(256) {
        match op {
            Op::Command { class, command, data, writable } => {
                let mut readable = vec![class % 8, command % 8];
                readable.extend(data.into_iter().take(512));
                let mut w = vec![0xAA; usize::from(writable % 16)];
                let before = ctrl.clone();
                match ctrl.handle(&readable, &mut w) {
                    Err(CtrlError::NoStatusByte) => {
                        assert!(w.is_empty());
                        assert_eq!(ctrl, before);
                    }
                    Ok(r) => {
                        assert!(r.used_len >= 1 && r.used_len <= w.len());
                        assert_eq!(w[r.used_len - 1], r.ack);
                        assert_eq!(r.ack == VIRTIO_NET_OK, r.outcome.is_ok());
                        match r.outcome {
                            Err(_) => assert_eq!(ctrl, before),
                            Ok(Action::Coalesce { target, coal }) => model.set(target, coal),
                            Ok(Action::CoalReport { vq, coal }) => {
                                assert_eq!(w[..8], coal.to_bytes());
                                assert_eq!(model.vq.get(usize::from(vq)), Some(&coal));
                            }
                            Ok(_) => {}
                        }
                    }
                }
            }
            Op::NoteApplied { vq, max_packets, max_usecs } => {
                let coal = Coal { max_packets, max_usecs };
                ctrl.note_applied(vq, coal);
                model.set(CoalTarget::Queue(vq), coal);
            }
            Op::QueueReset { vq } => {
                let got = ctrl.queue_reset(vq);
                let want = model.vq.get(usize::from(vq)).map(|_| model.all[usize::from(vq % 2)]);
                if let (Some(c), Some(slot)) = (want, model.vq.get_mut(usize::from(vq))) {
                    *slot = c;
                }
                assert_eq!(got, want);
            }
            Op::Reset => {
                ctrl.reset();
                model.vq.iter_mut().for_each(|c| *c = Coal::default());
                model.all = [Coal::default(); 2];
            }
        }
        for (i, want) in model.vq.iter().enumerate() {
            assert_eq!(ctrl.coal(u16::try_from(i).unwrap_or(u16::MAX)), Some(*want));
        }
    }
});
