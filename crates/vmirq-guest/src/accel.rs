//! KVM or TCG, decided by trying: where `/dev/kvm` opens, a probe guest boots under
//! `-accel kvm -cpu host` with a bounded timeout; if it reaches `/init` the harness uses KVM,
//! otherwise TCG (`-cpu max`), and says why. Some hosts have a `/dev/kvm` that cannot run a
//! Linux guest (a nested KVM that emulates guest kernel code: decompression alone takes about
//! a minute, then it hangs), so the device's presence is not enough. The decision is cached
//! per host boot and QEMU build; `VMIRQ_GUEST_ACCEL=kvm|tcg` forces one.

use crate::image::Image;
use crate::qemu::{Machine, Vm, QEMU};
use crate::script::Script;
use std::fmt;
use std::path::Path;
use std::time::Duration;

/// How long the probe guest may take to boot under KVM. A usable KVM boots it in about a
/// second; this host's nested KVM needs ~55 s for the kernel's decompression alone.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// The accelerator a guest runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Accel {
    /// Hardware virtualization (`-accel kvm -cpu host`).
    Kvm,
    /// QEMU's binary translator (`-accel tcg -cpu max`): slow, timings are not hardware's.
    Tcg,
}

impl Accel {
    /// QEMU's `-accel` value.
    #[must_use]
    pub fn qemu_name(self) -> &'static str {
        match self {
            Self::Kvm => "kvm",
            Self::Tcg => "tcg",
        }
    }

    /// QEMU's `-cpu` value.
    #[must_use]
    pub fn cpu_model(self) -> &'static str {
        match self {
            Self::Kvm => "host",
            Self::Tcg => "max",
        }
    }
}

impl fmt::Display for Accel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Kvm => "KVM",
            Self::Tcg => "TCG",
        })
    }
}

/// The decision and its reason, for the output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// The accelerator.
    pub accel: Accel,
    /// Why, in one line.
    pub reason: String,
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.accel, self.reason)
    }
}

/// Decide for `image`, caching the answer in `cache`.
#[must_use]
pub fn choose(image: &Image, cache: &Path) -> Choice {
    match std::env::var("VMIRQ_GUEST_ACCEL").ok().as_deref() {
        Some("kvm") => return choice(Accel::Kvm, "forced by VMIRQ_GUEST_ACCEL=kvm".into()),
        Some("tcg") => return choice(Accel::Tcg, "forced by VMIRQ_GUEST_ACCEL=tcg".into()),
        _ => {}
    }
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
    {
        return choice(Accel::Tcg, format!("/dev/kvm is not usable: {e}"));
    }
    let key = host_key(image);
    let file = cache.join("accel");
    if let Some(cached) = read_cached(&file, &key) {
        return cached;
    }
    let probed = probe(image);
    let text = format!("{key}\n{}\n{}\n", probed.accel.qemu_name(), probed.reason);
    let tmp = cache.join(format!(".accel.{}", std::process::id()));
    if std::fs::write(&tmp, text).is_ok() {
        let _ = std::fs::rename(&tmp, &file);
    }
    probed
}

fn choice(accel: Accel, reason: String) -> Choice {
    Choice { accel, reason }
}

/// Boot the probe guest under KVM.
fn probe(image: &Image) -> Choice {
    let machine = Machine::new(Accel::Kvm).timeout(PROBE_TIMEOUT);
    let script = Script::new().step("probe", 5, "true");
    let vm = match Vm::start(image, &machine, &script) {
        Ok(vm) => vm,
        Err(e) => return choice(Accel::Tcg, format!("the KVM probe did not start: {e}")),
    };
    let run = vm.finish();
    if run.ok() {
        let secs = run.boot_time().unwrap_or(run.wall).as_secs_f64();
        return choice(
            Accel::Kvm,
            format!("a probe guest booted under KVM in {secs:.1} s"),
        );
    }
    let why = match run.exit {
        crate::qemu::Exit::TimedOut => format!(
            "no Linux guest booted under KVM within {} s (a nested KVM that emulates guest \
             kernel code?)",
            PROBE_TIMEOUT.as_secs()
        ),
        _ => format!(
            "QEMU under KVM {}: {}",
            run.exit,
            run.qemu_stderr
                .lines()
                .next()
                .unwrap_or("no message")
                .trim()
        ),
    };
    choice(Accel::Tcg, why)
}

/// What the decision depends on: this boot of the host, the QEMU build, the kernel.
fn host_key(image: &Image) -> String {
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let qemu = crate::process::find_program(QEMU)
        .and_then(|p| std::fs::metadata(&p).ok().map(|m| (p, m)))
        .map_or_else(String::new, |(p, m)| {
            use std::os::unix::fs::MetadataExt;
            format!("{} {} {}", p.display(), m.len(), m.mtime())
        });
    format!(
        "host {} qemu {qemu} kernel {}",
        boot_id.trim(),
        image.kernel_release()
    )
}

fn read_cached(file: &Path, key: &str) -> Option<Choice> {
    let text = std::fs::read_to_string(file).ok()?;
    let mut lines = text.lines();
    if lines.next()? != key {
        return None;
    }
    let accel = match lines.next()? {
        "kvm" => Accel::Kvm,
        "tcg" => Accel::Tcg,
        _ => return None,
    };
    let reason = format!(
        "{} (probed earlier this host boot)",
        lines.next().unwrap_or("")
    );
    Some(choice(accel, reason))
}
