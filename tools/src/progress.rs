//! Progress bars of long tool runs (a tester's sweep, `hccl_sim`'s proofs and predictions),
//! drawn with `indicatif` on stderr only when stderr is a terminal: in pipes, files and CI
//! nothing is drawn and the output is byte for byte what it is without a bar.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar of `total` steps, or nothing when stderr is not a terminal.
pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// A bar of `total` steps named `what` (e.g. "sizes"), shown only on a terminal.
    pub fn new(total: u64, what: &str) -> Progress {
        Progress::with_target(total, what, std::io::stderr().is_terminal())
    }

    /// As [`Progress::new`], drawn exactly when `shown`.
    pub fn with_target(total: u64, what: &str, shown: bool) -> Progress {
        if !shown {
            return Progress { bar: None };
        }
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        let template = format!("{{bar:30}} {{pos}}/{{len}} {what} [{{elapsed}}] {{msg}}");
        // The template is fixed text, so it always parses.
        if let Ok(style) = ProgressStyle::with_template(&template) {
            bar.set_style(style.progress_chars("=> "));
        }
        // Redraw the elapsed time while one long step (a proof at scale) runs.
        bar.enable_steady_tick(Duration::from_millis(250));
        Progress { bar: Some(bar) }
    }

    /// Whether a bar is drawn.
    pub fn shown(&self) -> bool {
        self.bar.is_some()
    }

    /// Step `i` (from 0) starts; `msg` says what it is.
    pub fn start(&self, i: usize, msg: String) {
        if let Some(b) = &self.bar {
            b.set_position(i as u64);
            b.set_message(msg);
        }
    }

    /// Runs `f` (which prints) with the bar taken off the terminal, so lines never mix with it.
    pub fn print<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.bar {
            Some(b) => b.suspend(f),
            None => f(),
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
