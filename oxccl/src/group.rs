//! Groups: operations recorded together and launched at the group's end
//! (`ncclGroupStart`/`ncclGroupEnd`).

use crate::collectives::Collectives;
use crate::comm::Communicator;
use crate::error::{Error, Result};
use crate::private::{Sealed, Target, Targeted};
use crate::stream::Stream;
use oxccl_core::comm::group::{group_depth, group_end, group_start};
use std::marker::PhantomData;

/// An open group on this thread (`ncclGroupStart`); [`Group::end`] or dropping it launches what
/// was recorded (`ncclGroupEnd`), fusing each communicator's sends and receives.
///
/// Operations go through [`Group::on`] and borrow their buffers and communicators for `'b`,
/// until the group ends, because they only run then: a buffer cannot be dropped, moved or
/// written from the host while a group that uses it is open. A group belongs to the thread
/// that opened it (it is neither `Send` nor `Sync`).
///
/// One group is open per thread at a time: [`Group::start`] while one is open is an
/// [`Error::InvalidUsage`]. Inner groups come from [`Group::nested`]; they share the outer
/// group's `'b` and borrow it, so they end first, and the outer end launches everything. An
/// inner group that is never ended (`std::mem::forget`) is ended with its outer group, and its
/// operations run then. A forgotten outermost group stays open: its operations never run, and
/// every later operation or group on the thread is refused with an error saying so.
///
/// ```
/// use oxccl::{Collectives, Communicator, Group, ReduceOp, Runtime, UniqueId};
///
/// let rt = Runtime::host();
/// let id = UniqueId::new()?;
/// let comm = Communicator::init(&id, 0, 1, &rt.device(0)?)?;
/// let mut a = rt.device(0)?.buffer_from(&[1.0f32, 2.0])?;
/// let mut b = rt.device(0)?.buffer_from(&[5i64])?;
/// let group = Group::start()?;
/// group.on(&comm).all_reduce_in_place(&mut a, ReduceOp::Sum)?;
/// let inner = group.nested()?;
/// inner.on(&comm).all_reduce_in_place(&mut b, ReduceOp::Max)?;
/// inner.end()?; // launches nothing: the outer group is still open
/// group.end()?; // launches both
/// assert_eq!(b.to_vec()?, [5]);
/// # Ok::<(), oxccl::Error>(())
/// ```
///
/// Freeing a buffer before the group that uses it has ended does not compile (nor does it
/// after an inner group ended: see [`crate::soundness`]):
///
/// ```compile_fail,E0505
/// use oxccl::{Collectives, Communicator, Group, ReduceOp, Runtime, UniqueId};
///
/// let rt = Runtime::host();
/// let comm = Communicator::init(&UniqueId::new()?, 0, 1, &rt.device(0)?)?;
/// let mut grads = rt.device(0)?.alloc::<f32>(1024)?;
/// let group = Group::start()?;
/// group.on(&comm).all_reduce_in_place(&mut grads, ReduceOp::Avg)?;
/// drop(grads); // error: `grads` is still borrowed by the open group
/// group.end()?;
/// # Ok::<(), oxccl::Error>(())
/// ```
pub struct Group<'b> {
    /// Its nesting depth on the thread's group stack (1 for the outermost).
    level: u32,
    ended: bool,
    /// Invariant in `'b` (so recorded borrows cannot be shortened) and neither `Send` nor
    /// `Sync` (the runtime's group is per thread).
    _borrows: PhantomData<*mut &'b ()>,
}

impl<'b> Group<'b> {
    /// Opens a group on this thread; an [`Error::InvalidUsage`] when one is open already (use
    /// [`Group::nested`] on it).
    pub fn start() -> Result<Group<'b>> {
        if group_depth() > 0 {
            return Err(Error::usage(
                "a group is already open on this thread: open an inner group with \
                 Group::nested on it, or end it first (a group passed to std::mem::forget \
                 stays open, and its operations never run)",
            ));
        }
        Group::open()
    }

    /// An inner group (a nested `ncclGroupStart`): its operations share this group's `'b` and
    /// run when the outermost group ends.
    pub fn nested(&self) -> Result<NestedGroup<'_, 'b>> {
        Ok(NestedGroup {
            group: Group::open()?,
            _outer: PhantomData,
        })
    }

    fn open() -> Result<Group<'b>> {
        group_start()?;
        Ok(Group {
            level: group_depth(),
            ended: false,
            _borrows: PhantomData,
        })
    }

    /// `comm`'s operations, recorded in this group, on its own stream.
    pub fn on<'g>(&'g self, comm: &'b Communicator) -> GroupOps<'g, 'b> {
        GroupOps {
            _group: PhantomData,
            comm,
            stream: &comm.stream,
        }
    }

    /// `comm`'s operations, recorded in this group, on `stream`.
    pub fn on_stream<'g>(&'g self, comm: &'b Communicator, stream: &'b Stream) -> GroupOps<'g, 'b> {
        GroupOps {
            _group: PhantomData,
            comm,
            stream,
        }
    }

    /// Closes the group; the outermost close launches the recorded operations (and, on the
    /// host backend, waits for them). Reports the first failure of any of them.
    pub fn end(mut self) -> Result<()> {
        self.ended = true;
        self.close()
    }

    /// Closes this group and any inner one left open (forgotten) above it on the stack.
    fn close(&self) -> Result<()> {
        let depth = group_depth();
        if depth < self.level {
            return Err(Error::usage(format!(
                "this group (depth {}) was already closed by another group end on this thread \
                 (depth now {depth})",
                self.level
            )));
        }
        if depth > self.level {
            tracing::warn!(
                target: "oxccl::coll",
                "{} inner group(s) were never ended; ending them with their outer group",
                depth - self.level
            );
        }
        let mut first: Option<Error> = None;
        while group_depth() >= self.level {
            if let Err(e) = group_end() {
                first.get_or_insert(e.into());
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for Group<'_> {
    fn drop(&mut self) {
        if !self.ended {
            // Dropped without `end` (an early `?` return): close it anyway, so the thread is not
            // left inside a group; the failure that caused the return is the one to report.
            if let Err(e) = self.close() {
                tracing::warn!(target: "oxccl::coll", "ending a dropped group: {e}");
            }
        }
    }
}

/// An inner group ([`Group::nested`]): borrows its outer group, so it ends (or is dropped)
/// first; dereferences to a [`Group`] with the outer group's `'b`.
pub struct NestedGroup<'o, 'b> {
    group: Group<'b>,
    _outer: PhantomData<&'o Group<'b>>,
}

impl<'b> NestedGroup<'_, 'b> {
    /// Closes the inner group (it launches nothing: the outer group is still open).
    pub fn end(self) -> Result<()> {
        self.group.end()
    }
}

impl<'b> std::ops::Deref for NestedGroup<'_, 'b> {
    type Target = Group<'b>;
    fn deref(&self) -> &Group<'b> {
        &self.group
    }
}

/// One communicator's operations recorded in a [`Group`] ([`Group::on`]).
pub struct GroupOps<'g, 'b> {
    _group: PhantomData<&'g Group<'b>>,
    comm: &'b Communicator,
    stream: &'b Stream,
}

impl Sealed for GroupOps<'_, '_> {}

impl<'b> Collectives<'b> for GroupOps<'_, 'b> {}

impl Targeted for GroupOps<'_, '_> {
    fn target(&self) -> Target<'_> {
        Target {
            comm: self.comm,
            stream: self.stream,
            grouped: true,
        }
    }
}
