//! A tiny VM: guest RAM in slot 0, an optional in-kernel irqchip with an MSI route, optional
//! per-VM halt polling, and vCPUs in long mode running one [`Program`].

use crate::error::{Error, Result};
use crate::guest::Program;
use crate::layout;
use crate::longmode;
use crate::memory::GuestRam;
use crate::stats::StatsFd;
use kvm_bindings::{
    kvm_enable_cap, kvm_interrupt, kvm_irq_routing_entry, kvm_mp_state,
    kvm_userspace_memory_region, KvmIrqRouting, KVM_CAP_HALT_POLL, KVM_IRQ_ROUTING_MSI,
    KVM_MAX_CPUID_ENTRIES, KVM_MP_STATE_RUNNABLE,
};
use kvm_ioctls::{Kvm, VcpuFd, VmFd};
use std::sync::Arc;
use vmm_sys_util::eventfd::EventFd;
use vmm_sys_util::ioctl::ioctl_with_ref;

/// ioctl request numbers not wrapped by kvm-ioctls.
mod nr {
    #![allow(missing_docs)]
    use kvm_bindings::{kvm_interrupt, KVMIO};
    use vmm_sys_util::ioctl_iow_nr;
    ioctl_iow_nr!(KVM_INTERRUPT, KVMIO, 0x86, kvm_interrupt);
}
use nr::KVM_INTERRUPT;

/// How to build the VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VmConfig {
    /// Create the in-kernel irqchip (LAPIC, IOAPIC, PIC). Without it HLT exits to userspace.
    pub irqchip: bool,
    /// Number of vCPUs (each gets an entry point from the program).
    pub vcpus: usize,
    /// `KVM_CAP_HALT_POLL` value for this VM; `None` keeps the host module default.
    pub halt_poll_ns: Option<u64>,
}

/// One vCPU with its statistics fd (opened before the first run).
#[derive(Debug)]
pub struct Vcpu {
    /// The vCPU.
    pub fd: VcpuFd,
    /// Its binary statistics, when the kernel has them.
    pub stats: Option<StatsFd>,
}

/// The VM and its pieces.
#[derive(Debug)]
pub struct Vm {
    /// The VM fd.
    pub fd: VmFd,
    /// Guest RAM, shared with measurement threads.
    pub ram: Arc<GuestRam>,
    /// vCPUs in id order (vCPU `i` has APIC id `i`).
    pub vcpus: Vec<Vcpu>,
}

/// Open `/dev/kvm` and create a VM, mapping every failure to [`Error::Unavailable`].
///
/// # Errors
/// [`Error::Unavailable`] with the reason in one line.
pub fn open_kvm() -> Result<(Kvm, VmFd)> {
    let kvm = Kvm::new().map_err(|e| {
        let why = match e.errno() {
            libc::ENOENT => "/dev/kvm does not exist".to_string(),
            libc::EACCES | libc::EPERM => "no permission to open /dev/kvm".to_string(),
            _ => format!("opening /dev/kvm failed: {e}"),
        };
        Error::Unavailable(why)
    })?;
    let vm = kvm
        .create_vm()
        .map_err(|e| Error::Unavailable(format!("KVM_CREATE_VM failed: {e}")))?;
    Ok((kvm, vm))
}

/// Check that KVM is usable (for tests and commands that want to bail out early).
///
/// # Errors
/// [`Error::Unavailable`] with the reason.
pub fn probe() -> Result<()> {
    open_kvm().map(|_| ())
}

impl Vm {
    /// Build the VM and load `program` (one entry point per vCPU).
    ///
    /// # Errors
    /// [`Error::Unavailable`] if KVM cannot be used; other variants if setup fails.
    pub fn new(config: VmConfig, program: &Program) -> Result<Self> {
        if program.entries.len() < config.vcpus {
            return Err(Error::Config(format!(
                "program {} has {} entry points for {} vCPUs",
                program.name,
                program.entries.len(),
                config.vcpus
            )));
        }
        let (kvm, fd) = open_kvm()?;
        let ram = Arc::new(GuestRam::new()?);
        ram.write(layout::CODE, &program.code)?;
        longmode::write_tables(&ram, program)?;
        let region = kvm_userspace_memory_region {
            slot: 0,
            flags: 0,
            guest_phys_addr: 0,
            memory_size: layout::RAM_SIZE as u64,
            userspace_addr: ram.host_base()?,
        };
        // SAFETY: the region is RAM_SIZE bytes of anonymous memory owned by `ram`, which the
        // returned Vm keeps alive (Arc) for as long as the VM fd exists.
        unsafe { fd.set_user_memory_region(region) }
            .map_err(Error::kvm("KVM_SET_USER_MEMORY_REGION"))?;
        if config.irqchip {
            if let Err(e) = fd.set_tss_address(0xfffb_d000) {
                tracing::debug!(%e, "KVM_SET_TSS_ADDR failed (only needed on some hosts)");
            }
            fd.create_irq_chip()
                .map_err(Error::kvm("KVM_CREATE_IRQCHIP"))?;
        }
        if let Some(ns) = config.halt_poll_ns {
            set_halt_poll(&fd, ns)?;
        }
        let cpuid = kvm
            .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
            .map_err(Error::kvm("KVM_GET_SUPPORTED_CPUID"))?;
        let mut vcpus = Vec::with_capacity(config.vcpus);
        for (i, &entry) in program.entries.iter().take(config.vcpus).enumerate() {
            vcpus.push(make_vcpu(&fd, &cpuid, i, entry)?);
        }
        Ok(Self { fd, ram, vcpus })
    }

    /// Route `gsi` to an MSI that delivers `vector` to the APIC with id `dest`, and return an
    /// irqfd (eventfd) that raises it.
    ///
    /// # Errors
    /// [`Error::Kvm`] if routing or irqfd registration fails.
    pub fn msi_irqfd(&self, gsi: u32, dest: u8, vector: u8) -> Result<EventFd> {
        let mut entry = kvm_irq_routing_entry {
            gsi,
            type_: KVM_IRQ_ROUTING_MSI,
            ..Default::default()
        };
        entry.u.msi.address_lo = 0xfee0_0000 | (u32::from(dest) << 12);
        entry.u.msi.address_hi = 0;
        entry.u.msi.data = u32::from(vector);
        let routing = KvmIrqRouting::from_entries(&[entry])
            .map_err(|e| Error::Config(format!("GSI routing table: {e:?}")))?;
        self.fd
            .set_gsi_routing(&routing)
            .map_err(Error::kvm("KVM_SET_GSI_ROUTING"))?;
        let efd = EventFd::new(libc::EFD_NONBLOCK).map_err(Error::io("eventfd"))?;
        self.fd
            .register_irqfd(&efd, gsi)
            .map_err(Error::kvm("KVM_IRQFD"))?;
        Ok(efd)
    }
}

/// `KVM_ENABLE_CAP(KVM_CAP_HALT_POLL)`: the VM's maximum halt-poll window in nanoseconds.
///
/// # Errors
/// [`Error::Kvm`] if the host does not support per-VM halt polling.
pub fn set_halt_poll(vm: &VmFd, ns: u64) -> Result<()> {
    let mut cap = kvm_enable_cap {
        cap: KVM_CAP_HALT_POLL,
        ..Default::default()
    };
    cap.args[0] = ns;
    vm.enable_cap(&cap)
        .map_err(Error::kvm("KVM_ENABLE_CAP(HALT_POLL)"))
}

fn make_vcpu(vm: &VmFd, cpuid: &kvm_bindings::CpuId, index: usize, entry: u64) -> Result<Vcpu> {
    let fd = vm
        .create_vcpu(index as u64)
        .map_err(Error::kvm("KVM_CREATE_VCPU"))?;
    let mut cpuid = cpuid.clone();
    let apic_id = u32::try_from(index).map_err(|_| Error::Config("too many vCPUs".into()))?;
    for e in cpuid.as_mut_slice() {
        match e.function {
            1 => e.ebx = (e.ebx & 0x00ff_ffff) | (apic_id << 24),
            0xb | 0x1f => e.edx = apic_id,
            _ => {}
        }
    }
    fd.set_cpuid2(&cpuid)
        .map_err(Error::kvm("KVM_SET_CPUID2"))?;
    let stack = layout::STACK_TOP - index as u64 * layout::STACK_SIZE;
    longmode::configure_vcpu(&fd, entry, stack)?;
    if index > 0 {
        // With an in-kernel irqchip, application processors start waiting for INIT/SIPI;
        // make them runnable at the entry point instead.
        let state = kvm_mp_state {
            mp_state: KVM_MP_STATE_RUNNABLE,
        };
        fd.set_mp_state(state)
            .map_err(Error::kvm("KVM_SET_MP_STATE"))?;
    }
    let stats = match StatsFd::open(&fd) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(%e, "no KVM binary stats for this vCPU");
            None
        }
    };
    Ok(Vcpu { fd, stats })
}

/// `KVM_INTERRUPT`: queue external interrupt `vector` on a vCPU of a VM without an in-kernel
/// irqchip. Delivered on the next entry if the guest has interrupts enabled.
///
/// # Errors
/// [`Error::Kvm`] if KVM refuses (for example an interrupt is already queued).
pub fn inject_interrupt(vcpu: &VcpuFd, vector: u8) -> Result<()> {
    let irq = kvm_interrupt {
        irq: u32::from(vector),
    };
    // SAFETY: KVM_INTERRUPT reads one kvm_interrupt from the pointer, which is valid for the
    // duration of the call; the vCPU fd is valid.
    let rc = unsafe { ioctl_with_ref(vcpu, KVM_INTERRUPT(), &irq) };
    if rc != 0 {
        return Err(Error::kvm("KVM_INTERRUPT")(
            vmm_sys_util::errno::Error::last(),
        ));
    }
    Ok(())
}
