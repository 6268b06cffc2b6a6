//! Groups: operations recorded together and launched at the group's end
//! (`ncclGroupStart`/`ncclGroupEnd`).

use crate::collectives::Collectives;
use crate::comm::Communicator;
use crate::error::Result;
use crate::private::Target;
use crate::stream::Stream;
use std::marker::PhantomData;

/// An open group on this thread (`ncclGroupStart`); [`Group::end`] or dropping it launches what
/// was recorded (`ncclGroupEnd`), fusing each communicator's sends and receives.
///
/// Operations go through [`Group::on`] and borrow their buffers for `'b`, until the group ends,
/// because they only run then: a buffer cannot be dropped, moved or written from the host
/// while a group that uses it is open. Groups nest; the outermost end launches. A group
/// belongs to the thread that opened it (it is neither `Send` nor `Sync`).
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
/// group.on(&comm).all_reduce_in_place(&mut b, ReduceOp::Max)?;
/// group.end()?;
/// assert_eq!(b.to_vec()?, [5]);
/// # Ok::<(), oxccl::Error>(())
/// ```
///
/// Freeing a buffer before the group that uses it has ended does not compile:
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
    ended: bool,
    /// Invariant in `'b` (so recorded borrows cannot be shortened) and neither `Send` nor
    /// `Sync` (the runtime's group is per thread).
    _borrows: PhantomData<*mut &'b ()>,
}

impl<'b> Group<'b> {
    /// Opens a group on this thread.
    pub fn start() -> Result<Group<'b>> {
        oxccl_core::comm::group::group_start()?;
        Ok(Group {
            ended: false,
            _borrows: PhantomData,
        })
    }

    /// `comm`'s operations, recorded in this group, on its own stream.
    pub fn on<'g>(&'g self, comm: &'g Communicator) -> GroupOps<'g, 'b> {
        GroupOps {
            _group: self,
            comm,
            stream: &comm.stream,
        }
    }

    /// `comm`'s operations, recorded in this group, on `stream`.
    pub fn on_stream<'g>(&'g self, comm: &'g Communicator, stream: &'g Stream) -> GroupOps<'g, 'b> {
        GroupOps {
            _group: self,
            comm,
            stream,
        }
    }

    /// Closes the group; the outermost close launches the recorded operations (and, on the
    /// host backend, waits for them). Reports the first failure of any of them.
    pub fn end(mut self) -> Result<()> {
        self.ended = true;
        Ok(oxccl_core::comm::group::group_end()?)
    }
}

impl Drop for Group<'_> {
    fn drop(&mut self) {
        if !self.ended {
            // Dropped without `end` (an early `?` return): close it anyway, so the thread is not
            // left inside a group; the failure that caused the return is the one to report.
            if let Err(e) = oxccl_core::comm::group::group_end() {
                tracing::warn!(target: "oxccl::coll", "ending a dropped group: {e}");
            }
        }
    }
}

/// One communicator's operations recorded in a [`Group`] ([`Group::on`]).
pub struct GroupOps<'g, 'b> {
    _group: &'g Group<'b>,
    comm: &'g Communicator,
    stream: &'g Stream,
}

impl<'b> Collectives<'b> for GroupOps<'_, 'b> {
    fn target(&self) -> Target<'_> {
        Target {
            comm: self.comm,
            stream: self.stream,
            grouped: true,
        }
    }
}
