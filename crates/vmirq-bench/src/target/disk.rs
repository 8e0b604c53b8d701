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

impl Drop for DiskFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::DiskFile;

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
