//! The C layer's view of `ncclGroupStart`/`ncclGroupEnd`.
//!
//! Core's group (opened alongside) records inits and launches recorded operations at the
//! outermost end. The C layer keeps the group's collectives and sends/receives itself until that
//! end, and only then hands them to core, for two reasons:
//! - `ncclGroupSimulateEnd` must close a group without launching anything: the recorded
//!   operations are estimated and dropped instead of handed over;
//! - work that must follow the group's operations (a grouped `ncclCommSplit` filling its
//!   `newcomm`) runs after core's group end returned.
//!
//! Argument errors are still reported at the call, as NCCL does, and fail the group end too.

use oxccl::dispatch::{AnyComm, CommOps};
use oxccl_core::backend::DevicePtr;
use oxccl_core::comm::group as core_group;
use oxccl_core::datatype::DataType;
use oxccl_core::plan::{CollKind, P2pDir};
use oxccl_core::{CollArgs, Error, Result};
use std::cell::RefCell;

/// One recorded operation.
pub enum Op {
    /// A collective.
    Coll(CollArgs),
    /// One send or receive.
    P2p {
        /// Send or receive.
        dir: P2pDir,
        /// The buffer.
        buf: DevicePtr,
        /// Elements.
        count: u64,
        /// Element type.
        dtype: DataType,
        /// The other rank.
        peer: u32,
    },
}

/// Work to run after the group's operations completed.
pub type After = Box<dyn FnOnce() -> Result<()>>;

/// Collective host work that needs every rank of a communicator at once (window registration,
/// device communicators): one thread recording it for several ranks in one group must not run
/// the ranks' parts one after another, so the group end runs them side by side, one thread per
/// communicator. A communicator's own pieces run in the order they were recorded: every rank
/// must meet the others' pieces in the same order (a rank's second window must not pair with a
/// peer's first).
pub type Together = Box<dyn FnOnce() -> Result<()> + Send>;

struct Recorded {
    comm: AnyComm,
    op: Op,
    stream: usize,
}

#[derive(Default)]
struct State {
    depth: u32,
    ops: Vec<Recorded>,
    together: Vec<(usize, Together)>,
    after: Vec<After>,
    error: Option<Error>,
}

thread_local! {
    static GROUP: RefCell<State> = RefCell::new(State::default());
}

/// Depth of this thread's group nesting.
pub fn depth() -> u32 {
    GROUP.with(|g| g.borrow().depth)
}

/// `ncclGroupStart`.
pub fn start() -> Result<()> {
    core_group::group_start()?;
    GROUP.with(|g| g.borrow_mut().depth += 1);
    Ok(())
}

/// Remembers a failed call inside a group so the group end fails too (NCCL drops the group).
pub fn record_error(e: &Error) {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth > 0 && g.error.is_none() && !matches!(e, Error::InProgress) {
            g.error = Some(e.clone());
        }
    })
}

/// Hands one operation to core (which runs it now, or records it in its own open group).
///
/// # Safety
/// As for [`CommOps::collective`] / [`CommOps::p2p`].
unsafe fn submit(r: Recorded) -> Result<()> {
    match r.op {
        // SAFETY: forwarded from the caller.
        Op::Coll(args) => unsafe { r.comm.collective(args, r.stream) },
        Op::P2p {
            dir,
            buf,
            count,
            dtype,
            peer,
        } => {
            // SAFETY: forwarded from the caller.
            unsafe { r.comm.p2p(dir, buf, count, dtype, peer, r.stream) }
        }
    }
}

/// Runs `op` now outside a group, or records it for the group end.
///
/// # Safety
/// The buffers stay valid until the operation has run (for a group: until its end returned);
/// `stream` is 0 or a live stream handle.
pub unsafe fn enqueue(comm: &AnyComm, op: Op, stream: usize) -> Result<()> {
    let rec = Recorded {
        comm: comm.clone(),
        op,
        stream,
    };
    let rec = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            Some(rec)
        } else {
            g.ops.push(rec);
            None
        }
    });
    match rec {
        // SAFETY: forwarded from the caller.
        Some(rec) => unsafe { submit(rec) },
        None => Ok(()),
    }
}

/// Runs `f` after the current group's operations completed, or now outside a group.
pub fn after(f: After) -> Result<()> {
    let f = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            Some(f)
        } else {
            g.after.push(f);
            None
        }
    });
    match f {
        Some(f) => f(),
        None => Ok(()),
    }
}

/// Runs `f`, collective work of the communicator `key` names, now outside a group, or at the
/// group end beside the group's other [`Together`] work, before its operations.
pub fn together(key: usize, f: Together) -> Result<()> {
    let f = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            Some(f)
        } else {
            g.together.push((key, f));
            None
        }
    });
    match f {
        Some(f) => f(),
        None => Ok(()),
    }
}

/// Runs each communicator's pieces of `work` in order, the communicators side by side (one
/// thread each, one inline), and returns the first error.
fn run_together(work: Vec<(usize, Together)>) -> Result<()> {
    let mut per_comm: Vec<(usize, Vec<Together>)> = Vec::new();
    for (key, f) in work {
        match per_comm.iter_mut().find(|(k, _)| *k == key) {
            Some((_, fs)) => fs.push(f),
            None => per_comm.push((key, vec![f])),
        }
    }
    let in_order = |fs: Vec<Together>| fs.into_iter().try_for_each(|f| f());
    if per_comm.len() <= 1 {
        return per_comm.into_iter().try_for_each(|(_, fs)| in_order(fs));
    }
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = per_comm
            .into_iter()
            .map(|(_, fs)| s.spawn(move || in_order(fs)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(Error::Internal(
                        "a grouped collective registration panicked".into(),
                    ))
                })
            })
            .collect()
    });
    results.into_iter().collect()
}

/// What the outermost group end takes over.
struct Taken {
    ops: Vec<Recorded>,
    together: Vec<(usize, Together)>,
    after: Vec<After>,
    error: Option<Error>,
}

/// Leaves one nesting level; at the outermost, takes what the group recorded.
fn leave() -> Option<Taken> {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        g.depth -= 1;
        if g.depth > 0 {
            return None;
        }
        Some(Taken {
            ops: std::mem::take(&mut g.ops),
            together: std::mem::take(&mut g.together),
            after: std::mem::take(&mut g.after),
            error: g.error.take(),
        })
    })
}

/// `ncclGroupEnd`.
pub fn end() -> Result<()> {
    if depth() == 0 {
        // Core owns the wording of this usage error.
        return core_group::group_end();
    }
    let Some(Taken {
        ops,
        together,
        after,
        error,
    }) = leave()
    else {
        return core_group::group_end();
    };
    if let Some(e) = error {
        // Close core's group too; a failure there is secondary to the recorded one.
        let _ = core_group::group_end();
        return Err(e);
    }
    let mut first: Option<Error> = run_together(together).err();
    for r in ops {
        // SAFETY: the callers of `enqueue` guaranteed validity until the group end returns.
        if let Err(e) = unsafe { submit(r) } {
            first.get_or_insert(e);
        }
    }
    let ended = core_group::group_end();
    if let Some(e) = first {
        return Err(e);
    }
    ended?;
    // Every one runs (a grouped split fills its handle even when another failed).
    let mut first: Option<Error> = None;
    for f in after {
        if let Err(e) = f() {
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

/// `ncclGroupSimulateEnd`: closes one level without launching; returns the estimated time in
/// microseconds of the operations recorded so far.
pub fn simulate_end() -> Result<f32> {
    if depth() == 0 {
        return Err(Error::usage(
            "ncclGroupSimulateEnd called without a matching ncclGroupStart",
        ));
    }
    let estimate = GROUP.with(|g| g.borrow().ops.iter().map(estimate_us).sum::<f64>());
    // Inits recorded in core's group still complete: a simulated group does not undo them.
    let closed = core_group::group_end();
    if leave().is_some() {
        // Outermost level: the recorded operations are dropped, never launched.
    }
    closed?;
    Ok(estimate as f32)
}

/// Latency plus bandwidth model of one operation (host-memory bandwidth, ring-like step count);
/// only has to be plausible, the group is never run.
fn estimate_us(r: &Recorded) -> f64 {
    const LATENCY_US: f64 = 5.0;
    const BYTES_PER_US: f64 = 10_000.0; // 10 GB/s
    let n = r.comm.nranks().max(1) as f64;
    let (bytes, steps) = match &r.op {
        Op::P2p { count, dtype, .. } => (*count as f64 * dtype.size() as f64, 1.0),
        Op::Coll(a) => {
            let esize = a.dtype.size() as f64;
            let count = a.count as f64;
            match a.kind {
                CollKind::AllReduce => (2.0 * (n - 1.0) / n * count * esize, 2.0 * (n - 1.0)),
                CollKind::AllGather | CollKind::ReduceScatter | CollKind::AllToAll => {
                    ((n - 1.0) * count * esize, n - 1.0)
                }
                CollKind::AllToAllv => {
                    let total: u64 = a
                        .layout
                        .as_ref()
                        .map(|l| l.send_counts.iter().sum())
                        .unwrap_or(0);
                    (total as f64 * esize, n - 1.0)
                }
                CollKind::Gather | CollKind::Scatter => ((n - 1.0) * count * esize, n - 1.0),
                _ => (count * esize, n.log2().ceil().max(1.0)),
            }
        }
    };
    LATENCY_US * steps.max(1.0) + bytes / BYTES_PER_US
}

#[cfg(test)]
mod together_tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A communicator's pieces keep their order (a rank's second window must not pair with a
    /// peer's first), whatever the other communicators do.
    #[test]
    fn each_communicators_pieces_run_in_order() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut work: Vec<(usize, Together)> = Vec::new();
        for (i, key) in [1usize, 2, 1, 2, 1, 3].into_iter().enumerate() {
            let log = log.clone();
            work.push((
                key,
                Box::new(move || {
                    // The later pieces of a communicator would overtake a slow first one if
                    // they ran on threads of their own.
                    if i == 0 {
                        std::thread::sleep(std::time::Duration::from_millis(50));
                    }
                    log.lock().unwrap().push((key, i));
                    Ok(())
                }),
            ));
        }
        run_together(work).unwrap();
        let log = log.lock().unwrap();
        for key in [1, 2, 3] {
            let order: Vec<usize> = log.iter().filter(|(k, _)| *k == key).map(|e| e.1).collect();
            let mut sorted = order.clone();
            sorted.sort_unstable();
            assert_eq!(order, sorted, "communicator {key}");
        }
        assert_eq!(log.len(), 6);
    }
}
