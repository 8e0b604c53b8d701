//! What came back from the guest: the protocol lines `/init` writes on its second serial port
//! (`@@VMIRQ HELLO`, `READY`, `BEGIN`, `END`, `REBOOT`, `DONE`; see scripts/guest/init.sh),
//! parsed as they arrive into boots and steps with their output, exit status and the host
//! time each was seen.

use std::time::Duration;

const MARK: &str = "@@VMIRQ ";

/// One boot of the guest inside a QEMU process.
#[derive(Debug, Clone, PartialEq)]
pub struct Boot {
    /// 1 for the first boot, then one more per warm reset.
    pub number: u32,
    /// Host time (since QEMU started) of `HELLO`: `/init` is running.
    pub hello_at: Duration,
    /// Host time of `READY`: the command list starts.
    pub ready_at: Option<Duration>,
    /// The guest's `/proc/uptime` at `READY`.
    pub uptime_s: Option<f64>,
}

/// One step of the command list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepResult {
    /// The boot it ran in.
    pub boot: u32,
    /// 1-based position in that boot's list.
    pub index: u32,
    /// The step's name.
    pub name: String,
    /// Its stdout and stderr, interleaved as the guest wrote them.
    pub output: String,
    /// Its exit status (`None`: the guest never finished it: crash, reset or host timeout).
    pub status: Option<i32>,
    /// Host time it started.
    pub started: Duration,
    /// Host time it ended.
    pub finished: Option<Duration>,
}

impl StepResult {
    /// Whether it exited with status 0.
    #[must_use]
    pub fn ok(&self) -> bool {
        self.status == Some(0)
    }

    /// How long it ran (host time), if it finished.
    #[must_use]
    pub fn elapsed(&self) -> Option<Duration> {
        self.finished.map(|f| f.saturating_sub(self.started))
    }
}

/// Everything the guest said, in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Transcript {
    /// Boots seen (a `HELLO` each).
    pub boots: Vec<Boot>,
    /// Steps seen, in order, across boots.
    pub steps: Vec<StepResult>,
    /// `REBOOT` lines seen.
    pub reboots: u32,
    /// `DONE` seen: the list ran to its end and the guest is powering off.
    pub done: bool,
    /// Lines outside any step (other than protocol lines).
    pub stray: String,
}

/// What the reader must do after a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A boot said `HELLO`: answer `boot=<n>`.
    Hello(u32),
    /// Nothing to answer.
    None,
}

impl Transcript {
    /// Take one line (without its newline) seen at host time `at`.
    pub fn feed_line(&mut self, line: &str, at: Duration) -> Event {
        let line = line.trim_end_matches('\r');
        let Some(rest) = line.strip_prefix(MARK) else {
            match self.open_step() {
                Some(step) => {
                    step.output.push_str(line);
                    step.output.push('\n');
                }
                None => {
                    self.stray.push_str(line);
                    self.stray.push('\n');
                }
            }
            return Event::None;
        };
        let mut words = rest.split_whitespace();
        match words.next() {
            Some("HELLO") => {
                let number = u32::try_from(self.boots.len())
                    .unwrap_or(u32::MAX)
                    .saturating_add(1);
                self.boots.push(Boot {
                    number,
                    hello_at: at,
                    ready_at: None,
                    uptime_s: None,
                });
                return Event::Hello(number);
            }
            Some("READY") => {
                if let Some(boot) = self.boots.last_mut() {
                    boot.ready_at = Some(at);
                    boot.uptime_s = field(rest, "uptime").and_then(|v| v.parse().ok());
                }
            }
            Some("BEGIN") => {
                let index = words.next().and_then(|w| w.parse().ok()).unwrap_or(0);
                let name = words.next().unwrap_or("").to_owned();
                let boot = self.boots.last().map_or(0, |b| b.number);
                self.steps.push(StepResult {
                    boot,
                    index,
                    name,
                    output: String::new(),
                    status: None,
                    started: at,
                    finished: None,
                });
            }
            Some("END") => {
                let status = field(rest, "rc").and_then(|v| v.parse().ok());
                if let Some(step) = self.open_step() {
                    step.status = status;
                    step.finished = Some(at);
                }
            }
            Some("REBOOT") => self.reboots = self.reboots.saturating_add(1),
            Some("DONE") => self.done = true,
            _ => {
                self.stray.push_str(line);
                self.stray.push('\n');
            }
        }
        Event::None
    }

    fn open_step(&mut self) -> Option<&mut StepResult> {
        self.steps.last_mut().filter(|s| s.finished.is_none())
    }

    /// The first step named `name` of boot `boot`.
    #[must_use]
    pub fn step_in(&self, boot: u32, name: &str) -> Option<&StepResult> {
        self.steps.iter().find(|s| s.boot == boot && s.name == name)
    }

    /// The first step named `name` (any boot).
    #[must_use]
    pub fn step(&self, name: &str) -> Option<&StepResult> {
        self.steps.iter().find(|s| s.name == name)
    }

    /// Whether step `name` of the last boot has started.
    #[must_use]
    pub fn started(&self, name: &str) -> bool {
        let boot = self.boots.last().map_or(0, |b| b.number);
        self.step_in(boot, name).is_some()
    }

    /// Steps that did not exit with status 0.
    #[must_use]
    pub fn failed_steps(&self) -> Vec<&StepResult> {
        self.steps.iter().filter(|s| !s.ok()).collect()
    }
}

/// The value of `key=value` in a protocol line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(t: &mut Transcript, text: &str) -> Vec<Event> {
        text.lines()
            .enumerate()
            .map(|(i, l)| t.feed_line(l, Duration::from_millis(u64::try_from(i).unwrap_or(0))))
            .collect()
    }

    #[test]
    fn steps_carry_output_and_status_across_a_reboot() {
        let mut t = Transcript::default();
        let events = feed(
            &mut t,
            "@@VMIRQ HELLO\n@@VMIRQ READY boot=1 uptime=3.5\n@@VMIRQ BEGIN 1 a\nx\r\ny\n\
             @@VMIRQ END 1 rc=0\n@@VMIRQ REBOOT\nnoise\n@@VMIRQ HELLO\n@@VMIRQ READY boot=2 \
             uptime=2.0\n@@VMIRQ BEGIN 1 b\n@@VMIRQ END 1 rc=124\n@@VMIRQ DONE",
        );
        assert_eq!(events[0], Event::Hello(1));
        assert_eq!(events[8], Event::Hello(2));
        assert_eq!(t.boots.len(), 2);
        assert_eq!(t.boots[0].uptime_s, Some(3.5));
        let a = t.step_in(1, "a").expect("a");
        assert_eq!((a.output.as_str(), a.status), ("x\ny\n", Some(0)));
        let b = t.step_in(2, "b").expect("b");
        assert_eq!(b.status, Some(124));
        assert_eq!(t.failed_steps().len(), 1);
        assert_eq!((t.reboots, t.done), (1, true));
        assert_eq!(t.stray, "noise\n");
    }

    #[test]
    fn an_unfinished_step_has_no_status() {
        let mut t = Transcript::default();
        feed(&mut t, "@@VMIRQ HELLO\n@@VMIRQ BEGIN 1 a\npartial");
        let a = t.step("a").expect("a");
        assert_eq!((a.status, a.finished), (None, None));
        assert!(!a.ok() && t.started("a") && !t.done);
    }
}
