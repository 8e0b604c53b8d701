//! A block device as the image: capacity from the device, and a 4Kn device (4096-byte
//! logical blocks, here a loop device made with `losetup --sector-size 4096`) under O_DIRECT:
//! the server advertises `blk_size` 4096, whole blocks round-trip, and smaller requests are
//! refused without stopping the queue. Needs root and loop devices; without them the test
//! says SKIPPED on stderr and returns.
#![allow(missing_docs)]

mod common;

use common::client::Client;
use common::{checksum, pattern, Running};
use std::path::Path;
use std::process::Command;
use vmirq_blk::DiskSpec;

const DISK: u64 = 16 << 20;
const BLOCK: usize = 4096;

fn skip(reason: &str) {
    common::skip("four_k_native_block_device_under_o_direct", reason);
}

/// A loop device over a file, detached on drop.
struct LoopDevice(String);

impl LoopDevice {
    fn attach(file: &Path, sector_size: u32) -> Result<Self, String> {
        let out = Command::new("losetup")
            .args([
                "--sector-size",
                &sector_size.to_string(),
                "--find",
                "--show",
            ])
            .arg(file)
            .output()
            .map_err(|e| format!("losetup not runnable: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "losetup failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Self(String::from_utf8_lossy(&out.stdout).trim().to_owned()))
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

#[test]
fn four_k_native_block_device_under_o_direct() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip("not root (loop devices need it)");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let backing = dir.path().join("4kn.img");
    std::fs::File::create(&backing)
        .and_then(|f| f.set_len(DISK))
        .expect("backing file");
    let dev = match LoopDevice::attach(&backing, 4096) {
        Ok(d) => d,
        Err(e) => {
            skip(&e);
            return;
        }
    };
    let srv = Running::start(
        DiskSpec::Image {
            path: dev.0.clone().into(),
            direct: true,
        },
        |_| {},
    );
    let mut c = Client::connect(&srv.socket, 1, 4 * BLOCK).expect("connect");
    // The device's size (its metadata says 0) and its logical block size.
    assert_eq!(c.capacity(), DISK);
    assert_eq!(c.request_alignment(), 4096);

    // Two whole blocks written at block 3, read back into another buffer.
    let mut data = vec![0u8; 2 * BLOCK];
    pattern(7, 0, &mut data);
    c.buf()[..2 * BLOCK].copy_from_slice(&data);
    c.write(0, 3 * BLOCK as u64, 0, 2 * BLOCK, 1);
    assert_eq!(c.wait(0, 1), vec![(1, 0)]);
    c.flush(0, 2);
    assert_eq!(c.wait(0, 1), vec![(2, 0)]);
    c.read(0, 3 * BLOCK as u64, 2 * BLOCK, 2 * BLOCK, 3);
    assert_eq!(c.wait(0, 1), vec![(3, 0)]);
    assert_eq!(checksum(&c.buf()[2 * BLOCK..]), checksum(&data));

    // 512 bytes at offset 512: refused (by the server, or by libblkio that knows the
    // alignment), never a hang; the queue keeps serving whole blocks.
    c.read(0, 512, 0, 512, 4);
    let done = c.wait(0, 1);
    assert_eq!(done.len(), 1);
    assert_ne!(done[0].1, 0, "an unaligned read succeeded on a 4Kn device");
    c.read(0, 3 * BLOCK as u64, 0, BLOCK, 5);
    assert_eq!(c.wait(0, 1), vec![(5, 0)]);
    assert_eq!(checksum(&c.buf()[..BLOCK]), checksum(&data[..BLOCK]));
    drop(c);
    srv.stop();
}
