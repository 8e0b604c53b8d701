//! 64-bit long-mode machine state the VMM sets up before the first `KVM_RUN`: identity page
//! tables (2 MiB pages over the first GiB), a GDT with one 64-bit code segment, one data
//! segment and a TSS, an IDT of 64-bit interrupt gates, and the control registers that turn
//! paging and long mode on.

use crate::error::{Error, Result};
use crate::guest::Program;
use crate::layout;
use crate::memory::GuestRam;
use kvm_bindings::{kvm_regs, kvm_segment};
use kvm_ioctls::VcpuFd;

// The GDT follows Linux's x86-64 layout (kernel CS 0x10, DS 0x18, user DS 0x2b, user CS
// 0x33, TSS at entry 8): the paging-based nested KVM (PVM) this was developed on switches
// between guest rings with these selectors and faults (#NP) on others.

/// Kernel code segment selector (GDT entry 2).
pub const CODE_SEL: u16 = 0x10;
/// Kernel data segment selector (GDT entry 3).
pub const DATA_SEL: u16 = 0x18;
/// TSS selector (GDT entries 8-9, a 16-byte system descriptor).
pub const TSS_SEL: u16 = 0x40;
/// User data segment selector with RPL 3 (GDT entry 5).
pub const USER_DATA_SEL: u16 = 0x28 | 3;
/// User 64-bit code segment selector with RPL 3 (GDT entry 6).
pub const USER_CODE_SEL: u16 = 0x30 | 3;
/// Ring-0 stack the CPU switches to when an interrupt arrives in ring 3 (TSS.RSP0).
pub const RING0_STACK: u64 = layout::STACK_TOP - 4 * layout::STACK_SIZE;
const GDT_ENTRIES: u16 = 10;

/// Present, writable, user-accessible (ring 3 code may run on every page; SMEP/SMAP are off).
const PTE_PRESENT_RW: u64 = 0x7;
const PDE_LARGE: u64 = 0x80;
const TSS_LIMIT: u32 = 0x67;

const CR0_PE: u64 = 1;
const CR0_MP: u64 = 1 << 1;
const CR0_ET: u64 = 1 << 4;
const CR0_NE: u64 = 1 << 5;
const CR0_WP: u64 = 1 << 16;
const CR0_PG: u64 = 1 << 31;
const CR4_PAE: u64 = 1 << 5;
const EFER_LME: u64 = 1 << 8;
const EFER_LMA: u64 = 1 << 10;

/// Write page tables, GDT, TSS and the IDT for `program` into guest RAM.
///
/// # Errors
/// [`Error::Memory`] if a table does not fit (cannot happen with [`layout`]).
pub fn write_tables(ram: &GuestRam, program: &Program) -> Result<()> {
    ram.write(layout::PML4, &(layout::PDPT | PTE_PRESENT_RW).to_le_bytes())?;
    ram.write(layout::PDPT, &(layout::PD | PTE_PRESENT_RW).to_le_bytes())?;
    let mut pd = Vec::with_capacity(512 * 8);
    for i in 0..512u64 {
        pd.extend_from_slice(&((i << 21) | PDE_LARGE | PTE_PRESENT_RW).to_le_bytes());
    }
    ram.write(layout::PD, &pd)?;
    ram.write(layout::GDT, &gdt_bytes())?;
    // TSS.RSP0 (offset 4): the stack for interrupts taken in ring 3.
    ram.write(layout::TSS + 4, &RING0_STACK.to_le_bytes())?;
    let mut idt = Vec::with_capacity(256 * 16);
    for vector in 0..=255u8 {
        idt.extend_from_slice(&interrupt_gate(program.handler(vector)));
    }
    ram.write(layout::IDT, &idt)
}

fn gdt_bytes() -> Vec<u8> {
    let null = 0u64;
    // Present, DPL 0, code, execute/read, L=1 (64-bit), G=1.
    let code = 0x00af_9a00_0000_ffffu64;
    // Present, DPL 0, data, read/write, D/B=1, G=1.
    let data = 0x00cf_9200_0000_ffffu64;
    let base = layout::TSS;
    let limit = u64::from(TSS_LIMIT);
    // Present, type 9 (available 64-bit TSS).
    let tss_low = (limit & 0xffff)
        | ((base & 0xff_ffff) << 16)
        | (0x89u64 << 40)
        | (((base >> 24) & 0xff) << 56);
    let tss_high = base >> 32;
    // Ring-3 segments (DPL 3) for programs that drop to ring 3, which runs natively on hosts
    // that emulate guest ring 0.
    let user32_code = 0x00cf_fa00_0000_ffffu64;
    let user_data = 0x00cf_f200_0000_ffffu64;
    let user_code = 0x00af_fa00_0000_ffffu64;
    [
        null,
        null,
        code,
        data,
        user32_code,
        user_data,
        user_code,
        null,
        tss_low,
        tss_high,
    ]
    .iter()
    .flat_map(|q| q.to_le_bytes())
    .collect()
}

/// A 64-bit interrupt gate (type 0xE, present, DPL 0) to `handler` in the code segment.
fn interrupt_gate(handler: u64) -> [u8; 16] {
    let low = (handler & 0xffff)
        | (u64::from(CODE_SEL) << 16)
        | (0x8eu64 << 40)
        | (((handler >> 16) & 0xffff) << 48);
    let high = handler >> 32;
    let mut gate = [0u8; 16];
    gate[..8].copy_from_slice(&low.to_le_bytes());
    gate[8..].copy_from_slice(&high.to_le_bytes());
    gate
}

fn segment(selector: u16, type_: u8, code: bool) -> kvm_segment {
    kvm_segment {
        base: 0,
        limit: 0xffff_ffff,
        selector,
        type_,
        present: 1,
        dpl: 0,
        db: u8::from(!code),
        s: 1,
        l: u8::from(code),
        g: 1,
        avl: 0,
        unusable: 0,
        padding: 0,
    }
}

/// Put `vcpu` in 64-bit mode at `entry` with stack pointer `stack`, interrupts disabled.
///
/// # Errors
/// [`Error::Kvm`] if reading or writing the registers fails.
pub fn configure_vcpu(vcpu: &VcpuFd, entry: u64, stack: u64) -> Result<()> {
    let mut sregs = vcpu.get_sregs().map_err(Error::kvm("KVM_GET_SREGS"))?;
    sregs.cs = segment(CODE_SEL, 0xb, true);
    let data = segment(DATA_SEL, 0x3, false);
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
    sregs.tr = kvm_segment {
        base: layout::TSS,
        limit: TSS_LIMIT,
        selector: TSS_SEL,
        type_: 0xb,
        present: 1,
        s: 0,
        ..Default::default()
    };
    sregs.gdt.base = layout::GDT;
    sregs.gdt.limit = GDT_ENTRIES * 8 - 1;
    sregs.idt.base = layout::IDT;
    sregs.idt.limit = 256 * 16 - 1;
    sregs.cr3 = layout::PML4;
    sregs.cr4 = CR4_PAE;
    sregs.cr0 = CR0_PE | CR0_MP | CR0_ET | CR0_NE | CR0_WP | CR0_PG;
    sregs.efer = EFER_LME | EFER_LMA;
    vcpu.set_sregs(&sregs)
        .map_err(Error::kvm("KVM_SET_SREGS"))?;
    let regs = kvm_regs {
        rip: entry,
        rsp: stack,
        rflags: 0x2,
        ..Default::default()
    };
    vcpu.set_regs(&regs).map_err(Error::kvm("KVM_SET_REGS"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interrupt_gate_splits_the_handler_address() {
        let gate = interrupt_gate(0x1234_5678_9abc_def0);
        assert_eq!(&gate[0..2], &[0xf0, 0xde]);
        assert_eq!(&gate[2..4], &CODE_SEL.to_le_bytes());
        assert_eq!(gate[5], 0x8e);
        assert_eq!(&gate[6..8], &[0xbc, 0x9a]);
        assert_eq!(&gate[8..12], &[0x78, 0x56, 0x34, 0x12]);
    }

    #[test]
    fn gdt_has_a_present_64bit_tss() {
        let gdt = gdt_bytes();
        assert_eq!(gdt.len(), 80);
        let tss = usize::from(TSS_SEL);
        assert_eq!(gdt[tss + 5], 0x89, "TSS access byte");
        assert_eq!(u16::from_le_bytes([gdt[tss], gdt[tss + 1]]), 0x67);
        assert_eq!(
            gdt[usize::from(USER_CODE_SEL & !3) + 5],
            0xfa,
            "user code DPL 3"
        );
    }
}
