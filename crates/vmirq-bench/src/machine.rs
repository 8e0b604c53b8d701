//! What the reports say about where they were measured: git revision, CPU model, CPU count,
//! kernel, and whether qemu-storage-daemon was there.

use serde::{Deserialize, Serialize};
use std::process::Command;

/// Description of the machine a report was measured on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Machine {
    /// Host name.
    pub hostname: String,
    /// CPU model name from /proc/cpuinfo.
    pub cpu_model: String,
    /// CPUs available to the bench.
    pub cpus: usize,
    /// Kernel release.
    pub kernel: String,
    /// Total memory in MiB.
    pub memory_mib: u64,
    /// Whether /dev/kvm exists (the machine may itself be a VM).
    pub hypervisor_flag: bool,
    /// qemu-storage-daemon version line, if installed.
    pub qemu_storage_daemon: Option<String>,
}

fn first_line_of(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()?
        .trim()
        .to_owned();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn cpuinfo_field(cpuinfo: &str, key: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_owned())
}

impl Machine {
    /// Describe this machine; `qsd` is the peer executable if found.
    #[must_use]
    pub fn describe(qsd: Option<&std::path::Path>) -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_kib: u64 = cpuinfo_field(&meminfo, "MemTotal")
            .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
            .unwrap_or(0);
        Self {
            hostname: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|s| s.trim().to_owned())
                .unwrap_or_default(),
            cpu_model: cpuinfo_field(&cpuinfo, "model name").unwrap_or_else(|| "unknown".into()),
            cpus: crate::cpu::online_cpus(),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_owned())
                .unwrap_or_default(),
            memory_mib: memory_kib / 1024,
            hypervisor_flag: cpuinfo_field(&cpuinfo, "flags")
                .is_some_and(|f| f.split_whitespace().any(|x| x == "hypervisor")),
            qemu_storage_daemon: qsd
                .and_then(|p| first_line_of(&p.to_string_lossy(), &["--version"])),
        }
    }

    /// One line for the terminal and HTML headers.
    #[must_use]
    pub fn summary(&self) -> String {
        format!(
            "{} CPUs ({}), {} MiB, Linux {}{}",
            self.cpus,
            self.cpu_model,
            self.memory_mib,
            self.kernel,
            if self.hypervisor_flag {
                ", itself a VM"
            } else {
                ""
            }
        )
    }
}

/// The git revision (`git describe --always --dirty`) of the source tree this binary was
/// built from, recorded by the build script; "unknown" outside a git checkout.
#[must_use]
pub fn git_revision() -> String {
    env!("VMIRQ_BENCH_BUILD_REV").to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_fields_are_found() {
        let text = "processor\t: 0\nmodel name\t: Test CPU @ 2GHz\nflags\t\t: fpu hypervisor\n";
        assert_eq!(
            cpuinfo_field(text, "model name").as_deref(),
            Some("Test CPU @ 2GHz")
        );
        assert!(cpuinfo_field(text, "flags").is_some_and(|f| f.contains("hypervisor")));
        assert_eq!(cpuinfo_field(text, "missing"), None);
    }

    #[test]
    fn revision_is_found_from_the_source_tree() {
        let rev = git_revision();
        assert!(!rev.is_empty());
        // In a git checkout the source tree has a revision; outside one "unknown" is honest.
        let in_git = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .any(|d| d.join(".git").exists());
        assert_eq!(rev == "unknown", !in_git, "{rev}");
    }

    #[test]
    fn this_machine_is_described() {
        let m = Machine::describe(None);
        assert!(m.cpus >= 1);
        assert!(m.summary().contains("CPUs"));
    }
}
