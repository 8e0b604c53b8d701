//! The one harness a test binary shares between its guest tests, and the SKIPPED line a test
//! prints when this machine cannot run guests (QEMU not installed). Used by the block and the
//! network device's real-guest tests alike.

use crate::{GuestError, Harness};
use std::io::Write as _;
use std::sync::OnceLock;

/// Report a test that cannot run here, straight to stderr (the test harness hides
/// `eprintln!` output of passing tests, which would make the skip silent).
pub fn skip(test: &str, reason: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {reason}");
}

/// The harness of this process, prepared on first use; `None` after a SKIPPED line for
/// `test` when QEMU is not installed.
///
/// # Panics
/// Any other problem preparing it (the kernel or busybox missing, an initramfs that cannot be
/// built) fails the test.
pub fn shared_harness(test: &str) -> Option<&'static Harness> {
    static HARNESS: OnceLock<Result<Harness, String>> = OnceLock::new();
    let h = HARNESS.get_or_init(|| match Harness::prepare() {
        Ok(h) => {
            let _ = writeln!(
                std::io::stderr(),
                "guest: kernel {}, {}",
                h.image.kernel_release(),
                h.accel
            );
            Ok(h)
        }
        Err(GuestError::Missing { program, hint }) => Err(format!("{program} missing ({hint})")),
        Err(e) => panic!("the guest harness cannot be prepared: {e}"),
    });
    match h {
        Ok(h) => Some(h),
        Err(reason) => {
            skip(test, reason);
            None
        }
    }
}
