//! The terminal progress bar (indicatif) for a bench run; notices print above the bar.

use crate::runner::Progress;
use indicatif::{ProgressBar, ProgressStyle};

/// A progress bar on stderr; hidden when stderr is not a terminal.
#[derive(Debug)]
pub struct Bar {
    bar: ProgressBar,
}

impl Bar {
    /// A bar with no length yet (set by [`Progress::begin`]).
    #[must_use]
    pub fn new() -> Self {
        let bar = ProgressBar::new(0);
        let style = ProgressStyle::with_template(
            "{elapsed_precise} [{bar:32}] {pos}/{len} runs, eta {eta}  {msg}",
        )
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        Self { bar }
    }
}

impl Default for Bar {
    fn default() -> Self {
        Self::new()
    }
}

impl Progress for Bar {
    fn begin(&self, runs: u64) {
        self.bar.set_length(runs);
    }

    fn start(&self, label: &str) {
        self.bar.set_message(label.to_owned());
    }

    fn finish(&self) {
        self.bar.inc(1);
        if self.bar.length().is_some_and(|l| self.bar.position() >= l) {
            self.bar.finish_and_clear();
        }
    }

    fn notice(&self, text: &str) {
        self.bar.println(format!("notice: {text}"));
    }
}
