//! Guest programs, written as readable assembly with iced-x86's code assembler. Each program
//! lives in its own module and returns a [`Program`]: machine code to load at
//! [`layout::CODE`], one entry point per vCPU, and the interrupt handlers the IDT points to.
//!
//! Conventions shared by every program: `r15` holds [`layout::MAILBOX`] for the whole run
//! (handlers rely on it); unexpected exceptions write their vector to [`port::FAULT`].

#[cfg(test)]
mod decode;
pub mod device;
pub mod exits;
pub mod forced;
pub mod icr;
pub mod ipi;
pub mod paired;
pub mod timer;
pub mod wake;

use crate::error::{Error, Result};
use crate::layout::{self, port};
use crate::longmode;
use iced_x86::code_asm::{
    al, eax, ecx, edx, qword_ptr, r15, rax, rdx, rsp, CodeAssembler, CodeLabel,
};
use iced_x86::{BlockEncoderOptions, IcedError};

/// An assembled guest program.
#[derive(Debug, Clone)]
pub struct Program {
    /// Name, for errors and reports.
    pub name: &'static str,
    /// Machine code, loaded at [`layout::CODE`].
    pub code: Vec<u8>,
    /// Entry point of vCPU `i` is `entries[i]`.
    pub entries: Vec<u64>,
    /// Handler address per vector (all 256 filled: unexpected vectors go to fault stubs).
    handlers: Vec<u64>,
}

impl Program {
    /// Handler address of `vector`.
    #[must_use]
    pub fn handler(&self, vector: u8) -> u64 {
        self.handlers[usize::from(vector)]
    }
}

/// MSR numbers the programs use.
pub mod msr {
    /// IA32_APIC_BASE: bit 11 enables the APIC, bit 10 selects x2APIC mode.
    pub const APIC_BASE: u32 = 0x1b;
    /// x2APIC task priority register.
    pub const X2APIC_TPR: u32 = 0x808;
    /// x2APIC end-of-interrupt register.
    pub const X2APIC_EOI: u32 = 0x80b;
    /// x2APIC spurious-interrupt vector register (bit 8 software-enables the APIC).
    pub const X2APIC_SVR: u32 = 0x80f;
    /// x2APIC interrupt command register (64-bit; destination in the high half).
    pub const X2APIC_ICR: u32 = 0x830;
}

/// Assembler plus the labels a [`Program`] needs resolved.
pub(crate) struct Builder {
    pub(crate) a: CodeAssembler,
    name: &'static str,
    entries: Vec<CodeLabel>,
    vectors: Vec<(u8, CodeLabel)>,
}

/// Shorthand for the assembler's error type inside program bodies.
pub(crate) type AsmResult<T = ()> = std::result::Result<T, IcedError>;

impl Builder {
    pub(crate) fn new(name: &'static str) -> Result<Self> {
        let a = CodeAssembler::new(64).map_err(|e| asm_error(name, &e))?;
        Ok(Self {
            a,
            name,
            entries: Vec::new(),
            vectors: Vec::new(),
        })
    }

    /// Start the entry point of the next vCPU here; loads `r15` with the mailbox address.
    pub(crate) fn entry(&mut self) -> AsmResult {
        let mut label = self.a.create_label();
        self.a.set_label(&mut label)?;
        self.entries.push(label);
        self.a.mov(r15, layout::MAILBOX)
    }

    /// Start the handler of `vector` here.
    pub(crate) fn handler(&mut self, vector: u8) -> AsmResult {
        let mut label = self.a.create_label();
        self.a.set_label(&mut label)?;
        self.vectors.push((vector, label));
        Ok(())
    }

    /// `wrmsr` of a constant 64-bit value (clobbers eax, ecx, edx).
    pub(crate) fn wrmsr_const(&mut self, msr: u32, value: u64) -> AsmResult {
        self.a.mov(ecx, msr)?;
        self.a.mov(eax, (value & 0xffff_ffff) as u32)?;
        self.a.mov(edx, (value >> 32) as u32)?;
        self.a.wrmsr()
    }

    /// `rax` = the 64-bit TSC (`rdtsc; shl rdx, 32; or rax, rdx`; clobbers `rdx`).
    pub(crate) fn tsc_to_rax(&mut self) -> AsmResult {
        self.a.rdtsc()?;
        self.a.shl(rdx, 32)?;
        self.a.or(rax, rdx)
    }

    /// Switch the local APIC to x2APIC mode, software-enable it, accept every priority.
    pub(crate) fn enable_x2apic(&mut self) -> AsmResult {
        self.a.mov(ecx, msr::APIC_BASE)?;
        self.a.rdmsr()?;
        self.a.or(eax, 0xc00)?;
        self.a.wrmsr()?;
        self.wrmsr_const(msr::X2APIC_SVR, 0x1ff)?;
        self.wrmsr_const(msr::X2APIC_TPR, 0)
    }

    /// Continue at `target` in ring 3 with IOPL 3 (so `out`, `cli`, `sti` stay allowed) and
    /// interrupts enabled, on the ring-3 stack; interrupts come back to ring 0 on TSS.RSP0.
    pub(crate) fn enter_ring3(&mut self, target: CodeLabel) -> AsmResult {
        self.a.mov(rax, u64::from(longmode::USER_DATA_SEL))?;
        self.a.push(rax)?; // SS
        self.a
            .mov(rax, layout::STACK_TOP - 2 * layout::STACK_SIZE)?;
        self.a.push(rax)?; // RSP
        self.a.push(0x3202)?; // RFLAGS: IOPL 3, IF
        self.a.mov(rax, u64::from(longmode::USER_CODE_SEL))?;
        self.a.push(rax)?; // CS
        self.a.lea(rax, qword_ptr(target))?;
        self.a.push(rax)?; // RIP
        self.a.iretq()
    }

    /// `out port, al` (8-bit port number).
    pub(crate) fn out(&mut self, port: u16) -> AsmResult {
        self.a.out(u32::from(port), al)
    }

    /// Assemble, adding fault stubs for every vector without a handler.
    pub(crate) fn finish(mut self) -> Result<Program> {
        let name = self.name;
        let stubs = self.fault_stubs().map_err(|e| asm_error(name, &e))?;
        let result = self
            .a
            .assemble_options(
                layout::CODE,
                BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS,
            )
            .map_err(|e| asm_error(name, &e))?;
        let ip = |l: &CodeLabel| result.label_ip(l).map_err(|e| asm_error(name, &e));
        let mut handlers = Vec::with_capacity(256);
        for vector in 0..=255u8 {
            let stub = &stubs[usize::from(vector.min(32))];
            handlers.push(ip(stub)?);
        }
        for (vector, label) in &self.vectors {
            handlers[usize::from(*vector)] = ip(label)?;
        }
        let entries = self.entries.iter().map(ip).collect::<Result<Vec<_>>>()?;
        let code = result.inner.code_buffer;
        if code.len() > layout::CODE_MAX {
            return Err(Error::Assemble {
                program: name,
                message: "program too large".into(),
            });
        }
        Ok(Program {
            name,
            code,
            entries,
            handlers,
        })
    }

    /// 33 stubs: one per exception vector 0..32 reporting its number, one (reporting 0xff)
    /// for any other unexpected vector. Each parks the vCPU with `cli; hlt`.
    fn fault_stubs(&mut self) -> AsmResult<Vec<CodeLabel>> {
        let mut labels = Vec::with_capacity(33);
        for vector in 0..=32u32 {
            let mut label = self.a.create_label();
            self.a.set_label(&mut label)?;
            self.a.mov(rax, qword_ptr(rsp))?;
            self.a
                .mov(qword_ptr(r15 + layout::mailbox::FAULT_STACK0), rax)?;
            self.a.mov(rax, qword_ptr(rsp + 8))?;
            self.a
                .mov(qword_ptr(r15 + layout::mailbox::FAULT_STACK1), rax)?;
            self.a.mov(al, if vector == 32 { 0xff } else { vector })?;
            self.a.out(u32::from(port::FAULT), al)?;
            self.a.cli()?;
            self.a.hlt()?;
            labels.push(label);
        }
        Ok(labels)
    }
}

pub(crate) fn asm_error(program: &'static str, e: &IcedError) -> Error {
    Error::Assemble {
        program,
        message: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::exits::ExitOp;
    use super::wake::{Idle, WakeGuest};
    use crate::layout::{self, WAKE_VECTOR};

    #[test]
    fn wake_program_has_one_entry_per_vcpu_and_its_own_handler() {
        let one = super::wake::program(WakeGuest {
            apic: true,
            idle: Idle::Halt,
            sender: false,
            pad_eoi: false,
        })
        .expect("assembles");
        let two = super::wake::program(WakeGuest {
            apic: true,
            idle: Idle::Halt,
            sender: true,
            pad_eoi: false,
        })
        .expect("assembles");
        assert_eq!((one.entries.len(), two.entries.len()), (1, 2));
        assert_eq!(
            one.entries[0],
            layout::CODE,
            "vCPU 0 starts at the load address"
        );
        let handler = one.handler(WAKE_VECTOR);
        assert_ne!(
            handler,
            one.handler(WAKE_VECTOR + 1),
            "other vectors go to fault stubs"
        );
        assert_ne!(
            one.handler(13),
            one.handler(14),
            "each exception has its own stub"
        );
        let offset = usize::try_from(handler - layout::CODE).expect("small");
        assert_eq!(
            &one.code[offset..offset + 2],
            &[0x0f, 0x31],
            "handler starts with rdtsc"
        );
    }

    /// Instructions from the wake handler's entry to its `iretq`.
    fn handler_instructions(apic: bool, pad_eoi: bool) -> usize {
        let p = super::wake::program(WakeGuest {
            apic,
            idle: Idle::Halt,
            sender: false,
            pad_eoi,
        })
        .expect("assembles");
        let start = p.handler(WAKE_VECTOR);
        let offset = usize::try_from(start - layout::CODE).expect("small");
        let mut d = iced_x86::Decoder::with_ip(64, &p.code[offset..], start, 0);
        let mut n = 0;
        for ins in &mut d {
            n += 1;
            if ins.mnemonic() == iced_x86::Mnemonic::Iretq {
                return n;
            }
        }
        panic!("no iretq in the handler");
    }

    #[test]
    fn padded_handler_without_apic_runs_as_many_instructions_as_the_eoi_one() {
        assert_eq!(
            handler_instructions(false, true),
            handler_instructions(true, false)
        );
        assert_eq!(
            handler_instructions(false, false) + 4,
            handler_instructions(true, false)
        );
    }

    #[test]
    fn every_exit_loop_and_the_device_driver_assemble_within_limits() {
        for op in ExitOp::ALL {
            let p = super::exits::program(op, 10).expect("assembles");
            assert!(p.code.len() < layout::CODE_MAX);
        }
        assert!(super::exits::program(ExitOp::Baseline, 0).is_err());
        use super::device::DriverMode;
        assert!(super::device::program(16, DriverMode::Halt).is_ok());
        assert!(super::device::program(16, DriverMode::SpinUser).is_ok());
        assert!(super::device::program(0, DriverMode::Halt).is_err());
    }
}
