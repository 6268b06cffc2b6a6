//! `ncclGroupStart`/`ncclGroupEnd`: per-thread nesting, deferred launches, fused send/recv.
//!
//! Inside a group, operations are recorded instead of launched. The outermost `group_end`
//! launches them all (each communicator's sends and receives fused into one plan), then, for
//! backends whose API is synchronous (the host backend), waits for every launched operation.

use crate::error::{Error, Result};
use std::cell::RefCell;

/// A recorded operation, launched at the outermost `group_end`.
pub(crate) trait Deferred {
    /// Communicator identity, so one communicator's sends and receives are fused together.
    fn comm_key(&self) -> usize;
    /// Launches everything this entry holds; returns a waiter when the API is synchronous.
    fn launch(self: Box<Self>, merged: Vec<Box<dyn Deferred>>) -> Result<Option<Waiter>>;
    /// True for sends and receives (fused per communicator); false for collectives and inits.
    fn is_p2p(&self) -> bool;
    /// Lets `launch` of a same-communicator p2p entry downcast its siblings.
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any>;
}

/// Blocks until a launched operation completed (synchronous-API backends, pending inits).
pub(crate) type Waiter = Box<dyn FnOnce() -> Result<()>>;

#[derive(Default)]
struct GroupState {
    depth: u32,
    ops: Vec<Box<dyn Deferred>>,
    error: Option<Error>,
}

thread_local! {
    static GROUP: RefCell<GroupState> = RefCell::new(GroupState::default());
}

/// Opens a (possibly nested) group on this thread.
pub fn group_start() -> Result<()> {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == u32::MAX {
            return Err(Error::usage("too many nested ncclGroupStart calls"));
        }
        g.depth += 1;
        Ok(())
    })
}

/// Closes a group; the outermost close launches everything recorded since the first start.
pub fn group_end() -> Result<()> {
    let (ops, error) = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return Err(Error::usage(
                "ncclGroupEnd called without a matching ncclGroupStart",
            ));
        }
        g.depth -= 1;
        if g.depth > 0 {
            return Ok((Vec::new(), None));
        }
        Ok((std::mem::take(&mut g.ops), g.error.take()))
    })?;
    let r = match error {
        // NCCL drops the whole group when one call in it failed.
        Some(e) => Err(e),
        None => run_group(ops),
    };
    if crate::profiler_plugin::any_context() {
        // After the launches (and the host backend's waits) the group's GroupApi events end.
        crate::profiler_plugin::end_group();
    }
    r
}

/// Depth of the calling thread's group nesting (0 outside a group).
pub fn group_depth() -> u32 {
    GROUP.with(|g| g.borrow().depth)
}

/// Records `op` when inside a group; hands it back to run now otherwise.
pub(crate) fn defer(op: Box<dyn Deferred>) -> Option<Box<dyn Deferred>> {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            Some(op)
        } else {
            g.ops.push(op);
            None
        }
    })
}

/// Remembers a failure inside a group so `group_end` reports it.
pub(crate) fn record_error(e: &Error) {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth > 0 && g.error.is_none() {
            g.error = Some(e.clone());
        }
    })
}

/// Launches a group's operations: collectives and inits in call order, then each
/// communicator's fused sends and receives, then waits for synchronous backends.
fn run_group(ops: Vec<Box<dyn Deferred>>) -> Result<()> {
    let mut waiters = Vec::new();
    let mut first_err: Option<Error> = None;
    let mut p2p: Vec<(usize, Vec<Box<dyn Deferred>>)> = Vec::new();
    for op in ops {
        if op.is_p2p() {
            let key = op.comm_key();
            match p2p.iter_mut().find(|(k, _)| *k == key) {
                Some((_, v)) => v.push(op),
                None => p2p.push((key, vec![op])),
            }
            continue;
        }
        match op.launch(Vec::new()) {
            Ok(Some(w)) => waiters.push(w),
            Ok(None) => {}
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    for (_, mut v) in p2p {
        let head = v.remove(0);
        match head.launch(v) {
            Ok(Some(w)) => waiters.push(w),
            Ok(None) => {}
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    for w in waiters {
        if let Err(e) = w() {
            first_err.get_or_insert(e);
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
