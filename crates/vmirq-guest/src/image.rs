//! The guest's kernel and initramfs: built from the host's Debian packages by
//! scripts/guest/build-initramfs.sh (compiled into this crate, so any binary that links it can
//! build the guest) and cached under a directory keyed by the package versions.

use crate::error::{GuestError, Result};
use crate::process;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const BUILD_SCRIPT: &str = include_str!("../../../scripts/guest/build-initramfs.sh");
const INIT_SCRIPT: &str = include_str!("../../../scripts/guest/init.sh");
/// A build takes a few seconds; this bounds a stuck one.
const BUILD_TIMEOUT: Duration = Duration::from_secs(300);

/// A built guest.
#[derive(Debug, Clone)]
pub struct Image {
    /// The cached directory.
    pub dir: PathBuf,
    /// `vmlinuz` (bzImage) for `-kernel`.
    pub kernel: PathBuf,
    /// `initramfs.cpio` for `-initrd`.
    pub initramfs: PathBuf,
    /// What it was built from: kernel release and package versions.
    pub manifest: String,
}

impl Image {
    /// The cached guest for the installed packages, built first if there is none.
    ///
    /// # Errors
    /// The script fails (a package is missing: the message names it) or does not finish.
    pub fn prepare(cache: &Path) -> Result<Self> {
        std::fs::create_dir_all(cache).map_err(GuestError::io("creating", cache))?;
        let scripts = tempfile::Builder::new()
            .prefix(".scripts-")
            .tempdir_in(cache)
            .map_err(GuestError::io("creating a directory in", cache))?;
        let build = scripts.path().join("build-initramfs.sh");
        let init = scripts.path().join("init.sh");
        std::fs::write(&build, BUILD_SCRIPT).map_err(GuestError::io("writing", &build))?;
        std::fs::write(&init, INIT_SCRIPT).map_err(GuestError::io("writing", &init))?;
        let out_path = scripts.path().join("out");
        let err_path = scripts.path().join("err");
        let out_file =
            std::fs::File::create(&out_path).map_err(GuestError::io("creating", &out_path))?;
        let err_file =
            std::fs::File::create(&err_path).map_err(GuestError::io("creating", &err_path))?;
        let mut cmd = Command::new("bash");
        cmd.arg(&build)
            .arg(cache)
            .stdin(Stdio::null())
            .stdout(out_file)
            .stderr(err_file);
        process::die_with_parent(&mut cmd);
        let mut child = cmd.spawn().map_err(|source| GuestError::Spawn {
            program: "bash".into(),
            source,
        })?;
        let status = process::wait_timeout(&mut child, BUILD_TIMEOUT);
        if status.is_none() {
            process::kill(&mut child);
        }
        let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
        let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
        match status {
            Some(s) if s.success() => {}
            Some(s) => return Err(GuestError::Build(format!("{s}: {}", stderr.trim()))),
            None => {
                return Err(GuestError::Build(format!(
                    "no result after {BUILD_TIMEOUT:?}"
                )))
            }
        }
        let dir = PathBuf::from(stdout.lines().last().unwrap_or("").trim());
        let image = Self {
            kernel: dir.join("vmlinuz"),
            initramfs: dir.join("initramfs.cpio"),
            manifest: std::fs::read_to_string(dir.join("manifest")).unwrap_or_default(),
            dir,
        };
        if !image.kernel.is_file() || !image.initramfs.is_file() {
            return Err(GuestError::Build(format!(
                "the script named {} but it holds no vmlinuz/initramfs.cpio",
                image.dir.display()
            )));
        }
        Ok(image)
    }

    /// The kernel release (first manifest line, `kernel <release>`).
    #[must_use]
    pub fn kernel_release(&self) -> &str {
        self.manifest
            .lines()
            .find_map(|l| l.strip_prefix("kernel "))
            .unwrap_or("?")
    }
}

/// Where guests are cached: `$VMIRQ_GUEST_CACHE`; else `guest/` in the cargo target directory
/// the running executable lives in (the first ancestor holding `CACHEDIR.TAG`); else
/// `$XDG_CACHE_HOME/vmirq/guest` (or `~/.cache/vmirq/guest`).
#[must_use]
pub fn default_cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("VMIRQ_GUEST_CACHE") {
        return PathBuf::from(dir);
    }
    if let Ok(exe) = std::env::current_exe() {
        if let Some(target) = exe.ancestors().find(|d| d.join("CACHEDIR.TAG").is_file()) {
            return target.join("guest");
        }
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("vmirq").join("guest")
}
