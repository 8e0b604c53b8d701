//! Hostile and malformed guest input, driven through the mock guest (descriptor level).
//!
//! Every case runs under every moderation policy, without and with kick polling
//! ([`harness::configs`]). Each checks the answer (a status byte for a sound chain with a bad
//! request; no completion and a broken queue for a chain that breaks a ring rule), that guest
//! memory outside the device-writable buffers handed over is unchanged (canaries), and that
//! the queue serves verified I/O afterwards (at once, or after the frontend stops the ring).
#![allow(missing_docs)]

mod harness;

mod broken;
mod rejected;
