//! Progress on stderr: one updating line on a terminal, else a plain line per operation.

use super::ops::op_name;
use oxccl_core::plan::CollKind;
use std::io::{IsTerminal, Write};
use std::sync::Mutex;

/// Progress of one library's sweep.
pub struct Progress {
    label: String,
    total: usize,
    tty: bool,
    state: Mutex<(usize, Option<CollKind>)>,
}

impl Progress {
    /// A sweep of `total` points labelled `label`.
    pub fn new(label: &str, total: usize) -> Progress {
        Progress {
            label: label.to_string(),
            total,
            tty: std::io::stderr().is_terminal(),
            state: Mutex::new((0, None)),
        }
    }

    /// One point of `k` at `bytes` is done.
    pub fn point(&self, k: CollKind, bytes: usize) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.0 += 1;
        let mut err = std::io::stderr().lock();
        if self.tty {
            let _ = write!(
                err,
                "\r\x1b[2K[{}] {} {} B  ({}/{})",
                self.label,
                op_name(k),
                bytes,
                st.0,
                self.total
            );
            let _ = err.flush();
        } else if st.1 != Some(k) {
            let _ = writeln!(
                err,
                "oxccl-bench: [{}] {} ({}/{} points done)",
                self.label,
                op_name(k),
                st.0,
                self.total
            );
        }
        st.1 = Some(k);
    }

    /// Clears the terminal line.
    pub fn finish(&self) {
        if self.tty {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
        }
    }
}
