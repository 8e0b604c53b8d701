//! Guest physical memory layout shared by the VMM and every guest program. Everything is
//! identity-mapped (guest virtual = guest physical) by the page tables the VMM builds.

/// Size of guest RAM (one memory slot at guest physical 0).
pub const RAM_SIZE: usize = 4 << 20;
/// Global descriptor table.
pub const GDT: u64 = 0x1000;
/// Interrupt descriptor table (256 gates of 16 bytes).
pub const IDT: u64 = 0x2000;
/// Task-state segment (104 bytes; required for a valid TR in long mode).
pub const TSS: u64 = 0x3000;
/// Page-map level 4.
pub const PML4: u64 = 0x4000;
/// Page-directory-pointer table.
pub const PDPT: u64 = 0x5000;
/// Page directory: 512 entries of 2 MiB identity-map the first GiB.
pub const PD: u64 = 0x6000;
/// Where guest code is assembled and loaded.
pub const CODE: u64 = 0x10000;
/// Largest guest program.
pub const CODE_MAX: usize = 0x30000;
/// Top of vCPU `i`'s stack is `STACK_TOP - i * STACK_SIZE`.
pub const STACK_TOP: u64 = 0x80000;
/// Stack size per vCPU.
pub const STACK_SIZE: u64 = 0x8000;
/// Mailbox: counters and timestamps shared between guest and VMM (see [`mailbox`]).
pub const MAILBOX: u64 = 0x100000;
/// Sample/ring area for guest programs that record many values.
pub const ARRAY: u64 = 0x200000;
/// Bytes available in [`ARRAY`].
pub const ARRAY_SIZE: usize = RAM_SIZE - 0x200000;
/// A guest-physical address with no memory behind it: accesses exit as MMIO.
pub const MMIO_ADDR: u64 = 0x1000_0000;
/// The moderated device's MMIO doorbell (an ioeventfd; MMIO rather than a port because on
/// the PVM host a port write from guest ring 3 to an ioeventfd port faults with #GP).
pub const DOORBELL_MMIO: u64 = MMIO_ADDR + 0x1000;

/// Offsets (bytes from [`MAILBOX`]) of 8-byte mailbox cells.
pub mod mailbox {
    /// Count of interrupts the guest handler has run.
    pub const IRQ_COUNT: u64 = 0x00;
    /// TSC read by the handler's first instruction, last interrupt.
    pub const IRQ_TSC: u64 = 0x08;
    /// Set to non-zero by the VMM to make the guest leave its loop.
    pub const STOP: u64 = 0x10;
    /// TSC the sending vCPU read just before it sent an IPI.
    pub const SEND_TSC: u64 = 0x18;
    /// TSC the guest read at start (TSC offset check).
    pub const BOOT_TSC: u64 = 0x20;
    /// General-purpose result cells used by individual programs.
    pub const RESULT0: u64 = 0x28;
    /// Second result cell.
    pub const RESULT1: u64 = 0x30;
    /// Third result cell.
    pub const RESULT2: u64 = 0x38;
    /// Fourth result cell.
    pub const RESULT3: u64 = 0x40;
    /// Fault stubs store the top two stack words here (error code and/or RIP).
    pub const FAULT_STACK0: u64 = 0x48;
    /// Second stack word at a fault.
    pub const FAULT_STACK1: u64 = 0x50;
}

/// I/O ports the guest programs use to talk to the VMM (all exit to userspace unless a test
/// registers an ioeventfd on them). Chosen clear of the ports KVM's in-kernel irqchip
/// emulates (PIC 0x20/0x21/0xa0/0xa1, PIT 0x40-0x43, ELCR 0x4d0/0x4d1).
pub mod port {
    /// The guest finished setup and is about to wait (data: 0).
    pub const READY: u16 = 0x10;
    /// The guest program is done (data: 0).
    pub const DONE: u16 = 0x11;
    /// An unexpected exception: data is the vector number.
    pub const FAULT: u16 = 0x12;
    /// The IPI sender asks the VMM when to send next (`in`: 0 = send, 1 = stop).
    pub const GO: u16 = 0x13;
    /// Port used for exit-cost loops that exit to userspace.
    pub const PIO_USER: u16 = 0x30;
    /// Port used for exit-cost loops with an ioeventfd registered (handled in the kernel).
    pub const PIO_EVENTFD: u16 = 0x31;
    /// Doorbell of the moderated device (ioeventfd).
    pub const DOORBELL: u16 = 0x32;
}

/// Interrupt vector used for device/IPI wakeups.
pub const WAKE_VECTOR: u8 = 0x40;
/// GSI the MSI route for the wake irqfd lives on.
pub const WAKE_GSI: u32 = 24;
