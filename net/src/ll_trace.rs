//! Where a small NET message's time goes, recorded when `OXCCL_NET_TRACE=<dir>` is set (a
//! measuring aid; off, each event costs one branch). The proxy's threads write to `<dir>`:
//!
//! - `ll-<send|recv>-pid<P>-p<peer>-c<channel>.csv`, per LL connection as it closes: for each
//!   slot position, when the proxy saw the slot complete, when `isend` returned and when the
//!   send was done (send side), or when the slot landed and when the kernel's `ll_head` showed
//!   it consumed (receive side);
//! - `passes-pid<P>-<thread>.csv` and `.txt` (one per proxy thread): the start, length, outcome
//!   and time in the socket network's system calls of the thread's latest passes, and a summary
//!   of those calls (count and mean time, for the whole process). `bench/tools/net_trace.py`
//!   reads a directory of these.
//!
//! The times are `CLOCK_MONOTONIC` nanoseconds, one clock for every process of a machine, so a
//! sender's and a receiver's records of the same position subtract across processes when the
//! "hosts" share a machine (as in tests/gpu/run.sh).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// Positions (and passes, four times as many) kept; the oldest half goes beyond this.
const KEEP: usize = 1 << 16;

/// The directory traces go to, if tracing is on (read once per process).
fn dir() -> Option<&'static str> {
    static DIR: OnceLock<Option<String>> = OnceLock::new();
    DIR.get_or_init(|| {
        oxccl_core::config::get(&oxccl_core::config::vars::OXCCL_NET_TRACE)
            .filter(|d| !d.is_empty())
    })
    .as_deref()
}

/// `CLOCK_MONOTONIC` now, in nanoseconds.
fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Nanoseconds spent in system calls of the socket network and their number, this process:
/// readiness refreshes (`epoll_wait`), reads with data, reads without, writes, ACK-mode changes.
static SYSCALLS: [[AtomicU64; 2]; 5] = [const { [AtomicU64::new(0), AtomicU64::new(0)] }; 5];

/// Which system call [`time_syscall`] timed.
#[derive(Clone, Copy)]
pub(crate) enum Syscall {
    Refresh = 0,
    Read = 1,
    ReadNothing = 2,
    Write = 3,
    /// `setsockopt(TCP_QUICKACK)`.
    AckMode = 4,
}

/// Runs `f`, a system call, and when tracing is on counts its time under the kind `kind_of`
/// gives its result.
pub(crate) fn time_syscall<T>(f: impl FnOnce() -> T, kind_of: impl FnOnce(&T) -> Syscall) -> T {
    if dir().is_none() {
        return f();
    }
    let t = now_ns();
    let r = f();
    let k = kind_of(&r) as usize;
    let ns = now_ns() - t;
    SYSCALLS[k][0].fetch_add(ns, Ordering::Relaxed);
    SYSCALLS[k][1].fetch_add(1, Ordering::Relaxed);
    IN_SYSCALLS.with(|c| c.set(c.get() + ns));
    r
}

thread_local! {
    /// Nanoseconds this thread spent in timed system calls, for the pass log's `sys_ns`.
    static IN_SYSCALLS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The events of one connection: rows of (position, up to three times).
#[derive(Default)]
pub(crate) struct LlTrace {
    on: bool,
    rows: Vec<[u64; 4]>,
}

impl LlTrace {
    /// A trace that records only when `OXCCL_NET_TRACE` is set.
    pub(crate) fn new() -> LlTrace {
        LlTrace {
            on: dir().is_some(),
            rows: Vec::new(),
        }
    }

    /// Records time column `col` (1 to 3) of position `pos`; column 1 opens the row.
    pub(crate) fn mark(&mut self, pos: u64, col: usize) {
        if !self.on {
            return;
        }
        let t = now_ns();
        if col == 1 {
            if self.rows.len() == KEEP {
                self.rows.drain(..KEEP / 2);
            }
            self.rows.push([pos, t, 0, 0]);
        } else if let Some(r) = self.rows.iter_mut().rev().find(|r| r[0] == pos) {
            r[col] = t;
        }
    }

    /// The rows as CSV, a header line first.
    fn csv(&self) -> String {
        let mut s = String::from("pos,t1,t2,t3\n");
        for r in &self.rows {
            s.push_str(&format!("{},{},{},{}\n", r[0], r[1], r[2], r[3]));
        }
        s
    }

    /// Writes the rows to `<dir>/<name>.csv`; errors are only logged.
    pub(crate) fn write(&self, name: &str) {
        let (Some(d), true) = (dir(), self.on && !self.rows.is_empty()) else {
            return;
        };
        if let Err(e) = std::fs::write(format!("{d}/{name}.csv"), self.csv()) {
            tracing::warn!(target: "oxccl::net", "OXCCL_NET_TRACE: writing {name}: {e}");
        }
    }
}

/// Counts a proxy thread's passes; with tracing on, writes `<dir>/passes-pid<P>-<thread>.txt`
/// when dropped.
pub(crate) struct PassCount {
    on: bool,
    passes: u64,
    moved: u64,
    /// Nanoseconds the passes took.
    busy: u64,
    /// The longest pass, and passes over 10 us.
    max: u64,
    long: u64,
    /// When the current pass began, and this thread's system-call time then.
    at: u64,
    sys_at: u64,
    /// (begin, duration, moved, time in system calls) of the latest passes.
    log: Vec<(u64, u64, bool, u64)>,
}

impl PassCount {
    /// A counter that counts only when `OXCCL_NET_TRACE` is set.
    pub(crate) fn new() -> PassCount {
        PassCount {
            on: dir().is_some(),
            passes: 0,
            moved: 0,
            busy: 0,
            max: 0,
            long: 0,
            at: 0,
            sys_at: 0,
            log: Vec::new(),
        }
    }

    /// A pass begins.
    pub(crate) fn begin(&mut self) {
        if self.on {
            self.at = now_ns();
            self.sys_at = IN_SYSCALLS.with(|c| c.get());
        }
    }

    /// The pass ended, having moved something or not.
    pub(crate) fn end(&mut self, moved: bool) {
        if self.on {
            self.passes += 1;
            self.moved += u64::from(moved);
            let ns = now_ns() - self.at;
            self.busy += ns;
            self.max = self.max.max(ns);
            self.long += u64::from(ns > 10_000);
            if self.log.len() == 4 * KEEP {
                self.log.drain(..2 * KEEP);
            }
            let sys = IN_SYSCALLS.with(|c| c.get()) - self.sys_at;
            self.log.push((self.at, ns, moved, sys));
        }
    }
}

impl Drop for PassCount {
    fn drop(&mut self) {
        let Some(d) = dir().filter(|_| self.on) else {
            return;
        };
        let mut s = format!(
            "passes {} moved {} ns/pass {:.0} max {} over-10us {} |",
            self.passes,
            self.moved,
            self.busy as f64 / self.passes.max(1) as f64,
            self.max,
            self.long,
        );
        for (name, c) in ["refresh", "read", "read-nothing", "write", "ack-mode"]
            .iter()
            .zip(&SYSCALLS)
        {
            let (ns, n) = (c[0].load(Ordering::Relaxed), c[1].load(Ordering::Relaxed));
            s.push_str(&format!(
                " {name} {n} x {:.0} ns",
                ns as f64 / n.max(1) as f64
            ));
        }
        s.push('\n');
        let path = format!("{d}/passes-pid{}-{}", std::process::id(), thread_name());
        let _ = std::fs::write(format!("{path}.txt"), s);
        let mut csv = String::from("begin,ns,moved,sys_ns\n");
        for (b, ns, m, sys) in &self.log {
            csv.push_str(&format!("{b},{ns},{},{sys}\n", u8::from(*m)));
        }
        let _ = std::fs::write(format!("{path}.csv"), csv);
    }
}

/// The calling thread's name, for trace file names (a communicator may run several proxies).
fn thread_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("unnamed")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Column 1 opens a position's row, later columns fill the latest row of that position,
    /// a mark for a position without a row is dropped, and a full trace drops its older half.
    #[test]
    fn marks_fill_rows_by_position_and_old_rows_go_first() {
        let mut t = LlTrace {
            on: true,
            rows: Vec::new(),
        };
        t.mark(5, 1);
        t.mark(6, 1);
        t.mark(5, 3);
        t.mark(9, 2);
        assert_eq!(t.rows.len(), 2);
        assert_eq!((t.rows[0][0], t.rows[1][0]), (5, 6));
        assert!(t.rows[0][1] > 0 && t.rows[0][3] >= t.rows[0][1] && t.rows[0][2] == 0);
        assert_eq!(t.rows[1][3], 0);
        let csv = t.csv();
        assert_eq!(csv.lines().count(), 3);
        assert!(csv.starts_with("pos,t1,t2,t3\n5,"));
        for p in 0..KEEP as u64 {
            t.mark(100 + p, 1);
        }
        assert_eq!(
            t.rows.len(),
            KEEP / 2 + 2,
            "2 + KEEP rows, the oldest KEEP / 2 dropped"
        );
        assert_eq!(t.rows.last().unwrap()[0], 100 + KEEP as u64 - 1);
        let off = LlTrace::default();
        assert!(!off.on, "tracing is off unless asked for");
    }
}
