//! The command list a guest runs: shell text that the guest's `/init` sources (QEMU passes it
//! as fw_cfg file `opt/vmirq/script`). Each [`Script::step`] becomes one `step NAME TIMEOUT
//! 'command'` line, so its output and exit status come back separately (see
//! [`crate::transcript`]); [`Script::on_boot`] runs steps only on the n-th boot of a QEMU
//! process (after [`Script::reboot`], a warm reset).

use std::fmt::Write as _;

/// A command list, built step by step.
#[derive(Debug, Clone, Default)]
pub struct Script {
    text: String,
}

impl Script {
    /// An empty list (the guest boots and powers off).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Run `command` with `sh -c` as step `name`, killed after `timeout_s` seconds (exit
    /// status 124). Names are one word (other characters become `_`).
    #[must_use]
    pub fn step(mut self, name: &str, timeout_s: u32, command: &str) -> Self {
        let _ = writeln!(
            self.text,
            "step {} {timeout_s} {}",
            word(name),
            quote(command)
        );
        self
    }

    /// Step `wait-<dev>`: wait up to `timeout_s` seconds for block device `dev` (e.g. `vda`)
    /// to appear; virtio_blk probes it asynchronously after `/init` has started.
    #[must_use]
    pub fn wait_block(self, dev: &str, timeout_s: u32) -> Self {
        let dev = word(dev);
        let tenths = timeout_s.saturating_mul(10);
        let command = format!(
            "i=0; while [ ! -e /sys/block/{dev} ] && [ $i -lt {tenths} ]; do usleep 100000; \
             i=$((i + 1)); done; [ -e /sys/block/{dev} ]"
        );
        self.step(
            &format!("wait-{dev}"),
            timeout_s.saturating_add(5),
            &command,
        )
    }

    /// Steps that run only on boot `boot` (1 = the first boot of the QEMU process, 2 = after
    /// the first warm reset, ...).
    #[must_use]
    pub fn on_boot(mut self, boot: u32, inner: Self) -> Self {
        let _ = writeln!(self.text, "if [ \"$VMIRQ_BOOT\" = {boot} ]; then");
        self.text.push_str(&inner.text);
        self.text.push_str("fi\n");
        self
    }

    /// Reset the machine (`reboot -f`); the same QEMU process boots the guest again and the
    /// list starts over with `$VMIRQ_BOOT` one higher. Needs [`crate::qemu::Machine::boots`]
    /// above 1.
    #[must_use]
    pub fn reboot(mut self) -> Self {
        self.text.push_str("guest_reboot\n");
        self
    }

    /// The shell text.
    #[must_use]
    pub fn render(&self) -> &str {
        &self.text
    }
}

/// `s` as one shell word of safe characters.
fn word(s: &str) -> String {
    let w: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.:+=,".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if w.is_empty() {
        "_".to_owned()
    } else {
        w
    }
}

/// `s` single-quoted for sh.
#[must_use]
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_quoted_and_named_as_one_word() {
        let s = Script::new().step("a b", 5, "echo 'x' && true");
        assert_eq!(s.render(), "step a_b 5 'echo '\\''x'\\'' && true'\n");
    }

    #[test]
    fn boot_blocks_and_reboot() {
        let s = Script::new()
            .on_boot(1, Script::new().step("w", 1, "true").reboot())
            .step("r", 1, "true");
        assert_eq!(
            s.render(),
            "if [ \"$VMIRQ_BOOT\" = 1 ]; then\nstep w 1 'true'\nguest_reboot\nfi\nstep r 1 'true'\n"
        );
    }
}
