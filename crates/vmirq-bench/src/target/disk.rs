//! The shared disk image: one file in memory (`/dev/shm`) that every target serves: bare and
//! qemu-storage-daemon through io_uring, `vmirq serve --image` likewise.

use crate::error::{BenchError, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// A memory-backed disk file, removed on drop.
#[derive(Debug)]
pub struct DiskFile {
    path: PathBuf,
    size: u64,
}

impl DiskFile {
    /// Create `dir/vmirq-bench-<pid>.img` of `size` bytes, every page written once so that no
    /// run pays for first-touch allocation.
    ///
    /// # Errors
    /// The file cannot be created or written.
    pub fn create(dir: &Path, size: u64) -> Result<Self> {
        remove_stale(dir);
        let path = dir.join(format!("vmirq-bench-{}.img", std::process::id()));
        let io = |source| BenchError::File {
            path: path.clone(),
            source,
        };
        let mut file = std::fs::File::create(&path).map_err(io)?;
        let chunk = vec![0xA5u8; 1 << 20];
        let mut left = size;
        while left > 0 {
            let step = left.min(1 << 20);
            let n = usize::try_from(step).unwrap_or(chunk.len());
            file.write_all(&chunk[..n]).map_err(io)?;
            left -= step;
        }
        file.sync_all().map_err(io)?;
        Ok(Self { path, size })
    }

    /// Path of the image.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Size in bytes.
    #[must_use]
    pub fn size(&self) -> u64 {
        self.size
    }
}

/// Remove images left by bench processes that no longer exist (killed before their drop ran):
/// each holds hundreds of MiB of memory in `/dev/shm`.
fn remove_stale(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("vmirq-bench-"))
            .and_then(|n| n.strip_suffix(".img"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            tracing::info!(path = %entry.path().display(), "removing a stale bench disk image");
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

impl Drop for DiskFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::DiskFile;

    #[test]
    fn stale_images_of_dead_processes_are_removed() {
        let dir = std::env::temp_dir().join(format!("vmirq-bench-stale-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        // pid_max is at most 2^22, so this pid cannot exist.
        let dead = dir.join("vmirq-bench-4999999.img");
        let unrelated = dir.join("other.img");
        std::fs::write(&dead, b"x").expect("write");
        std::fs::write(&unrelated, b"x").expect("write");
        let disk = DiskFile::create(&dir, 4096).expect("create");
        assert!(!dead.exists(), "stale image kept");
        assert!(unrelated.exists() && disk.path().exists());
        drop(disk);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn creates_full_size_and_removes_on_drop() {
        let dir = std::env::temp_dir();
        let disk = DiskFile::create(&dir, 3 << 20).expect("create");
        let path = disk.path().to_path_buf();
        assert_eq!(
            std::fs::metadata(&path).map(|m| m.len()).ok(),
            Some(3 << 20)
        );
        drop(disk);
        assert!(!path.exists());
    }
}
