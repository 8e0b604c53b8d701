//! Test-only decoding of assembled guest programs, for the unit tests that check a loop's
//! structure and compare timed spans byte for byte ([`super::paired`], [`super::icr`]).

use super::Program;
use crate::layout;
use iced_x86::{Decoder, Instruction, Mnemonic, Register};

/// The instructions of `p` from guest address `ip` to the end of its code.
pub fn decode_from(p: &Program, ip: u64) -> Vec<Instruction> {
    let offset = usize::try_from(ip - layout::CODE).expect("an address of the code");
    Decoder::with_ip(64, &p.code[offset..], ip, 0)
        .into_iter()
        .collect()
}

/// The loop that starts after entry point `ip`: from the target of the first `jnz` that
/// follows a `dec r12` (the loops' counter) to that `jnz`, both included.
pub fn loop_body(p: &Program, ip: u64) -> Vec<Instruction> {
    let all = decode_from(p, ip);
    let jnz = all
        .windows(2)
        .position(|w| {
            w[0].mnemonic() == Mnemonic::Dec
                && w[0].op0_register() == Register::R12
                && w[1].mnemonic() == Mnemonic::Jne
        })
        .expect("a `dec r12; jnz` loop")
        + 1;
    let top = all[jnz].near_branch_target();
    let start = all.iter().position(|i| i.ip() == top).expect("top decoded");
    all[start..=jnz].to_vec()
}

/// `body` cut after each `add rdi, 8` (the end of a timed span: its sample stored); the last
/// piece is what follows the last span.
pub fn split_after_spans(body: &[Instruction]) -> Vec<Vec<Instruction>> {
    let mut out = vec![Vec::new()];
    for ins in body {
        out.last_mut().expect("open piece").push(*ins);
        if ins.mnemonic() == Mnemonic::Add
            && ins.op0_register() == Register::RDI
            && ins.immediate(1) == 8
        {
            out.push(Vec::new());
        }
    }
    out
}

/// The machine code of `ins` (consecutive instructions of `p`).
pub fn bytes(p: &Program, ins: &[Instruction]) -> Vec<u8> {
    let from = usize::try_from(ins[0].ip() - layout::CODE).expect("small");
    let last = ins.last().expect("non-empty");
    let to = usize::try_from(last.next_ip() - layout::CODE).expect("small");
    p.code[from..to].to_vec()
}
