//! What the borrow checker refuses, and why: the misuses the soundness rule (see the crate
//! docs) turns into compile errors. Each example below is compiled by the test suite and must
//! fail with the error code shown; a change that lets one compile breaks the build.
//!
//! # Buffers of an open group
//!
//! Operations of a [`crate::Group`] run when the outermost group ends, so they borrow their
//! buffers until then. Dropping a buffer earlier does not compile:
//!
//! ```compile_fail,E0505
//! # use oxccl::{Collectives, Communicator, Group, ReduceOp, Runtime, UniqueId};
//! # let rt = Runtime::host();
//! # let comm = Communicator::init(&UniqueId::new()?, 0, 1, &rt.device(0)?)?;
//! let mut grads = rt.device(0)?.alloc::<f32>(1024)?;
//! let group = Group::start()?;
//! group.on(&comm).all_reduce_in_place(&mut grads, ReduceOp::Avg)?;
//! drop(grads); // error: `grads` is still borrowed by the open group
//! group.end()?;
//! # Ok::<(), oxccl::Error>(())
//! ```
//!
//! Ending an inner group launches nothing; its buffers stay borrowed until the outer group
//! ends (an inner group shares the outer group's lifetime):
//!
//! ```compile_fail,E0505
//! # use oxccl::{Collectives, Communicator, Group, ReduceOp, Runtime, UniqueId};
//! # let rt = Runtime::host();
//! # let comm = Communicator::init(&UniqueId::new()?, 0, 1, &rt.device(0)?)?;
//! let mut grads = rt.device(0)?.alloc::<f32>(1024)?;
//! let outer = Group::start()?;
//! let inner = outer.nested()?;
//! inner.on(&comm).all_reduce_in_place(&mut grads, ReduceOp::Sum)?;
//! inner.end()?;
//! drop(grads); // error: still borrowed until `outer` ends
//! outer.end()?;
//! # Ok::<(), oxccl::Error>(())
//! ```
//!
//! Groups end in the reverse order of their start: an outer group cannot end while an inner one
//! is open (a second [`crate::Group::start`] on the thread is refused at run time instead):
//!
//! ```compile_fail,E0505
//! # use oxccl::{Group, Runtime};
//! let outer = Group::start()?;
//! let inner = outer.nested()?;
//! outer.end()?; // error: `outer` is borrowed by `inner`
//! inner.end()?;
//! # Ok::<(), oxccl::Error>(())
//! ```
//!
//! The communicator of a recorded operation lives until the group ends:
//!
//! ```compile_fail,E0597
//! # use oxccl::{Collectives, Communicator, Group, ReduceOp, Runtime, UniqueId};
//! # let rt = Runtime::host();
//! let mut grads = rt.device(0)?.alloc::<f32>(1024)?;
//! let group = Group::start()?;
//! {
//!     let comm = Communicator::init(&UniqueId::new()?, 0, 1, &rt.device(0)?)?;
//!     group.on(&comm).all_reduce_in_place(&mut grads, ReduceOp::Sum)?;
//! } // error: `comm` dropped while still borrowed
//! group.end()?;
//! # Ok::<(), oxccl::Error>(())
//! ```
//!
//! Host writes wait for earlier operations, but not for ones a group has not launched yet:
//!
//! ```compile_fail,E0499
//! # use oxccl::{Collectives, Communicator, Group, ReduceOp, Runtime, UniqueId};
//! # let rt = Runtime::host();
//! # let comm = Communicator::init(&UniqueId::new()?, 0, 1, &rt.device(0)?)?;
//! let mut grads = rt.device(0)?.alloc::<f32>(4)?;
//! let group = Group::start()?;
//! group.on(&comm).all_reduce_in_place(&mut grads, ReduceOp::Sum)?;
//! grads.copy_from_host(&[1.0; 4])?; // error: `grads` is mutably borrowed by the group
//! group.end()?;
//! # Ok::<(), oxccl::Error>(())
//! ```
//!
//! A group belongs to its thread (the runtime's group state is per thread):
//!
//! ```compile_fail,E0277
//! # use oxccl::Group;
//! let group = Group::start()?;
//! std::thread::spawn(move || group.end()); // error: `Group` is not `Send`
//! # Ok::<(), oxccl::Error>(())
//! ```
//!
//! # Sealed traits
//!
//! Which borrows an operation keeps is decided by this crate's implementations of
//! [`crate::Collectives`], [`crate::DeviceInput`] and [`crate::DeviceOutput`], so no other
//! crate may implement them:
//!
//! ```compile_fail,E0277
//! struct Forwarder;
//! impl<'b> oxccl::Collectives<'b> for Forwarder {} // error: the trait is sealed
//! ```
//!
//! ```compile_fail,E0277
//! struct Fake;
//! impl<'b> oxccl::DeviceOutput<'b, f32> for Fake { // error: the trait is sealed
//!     fn output(self) -> oxccl::DeviceSliceMut<'b, f32> { unimplemented!() }
//! }
//! ```
//!
//! # Views
//!
//! A buffer used as both input and output of one operation:
//!
//! ```compile_fail,E0502
//! # use oxccl::{Collectives, Communicator, ReduceOp, Runtime, UniqueId};
//! # let rt = Runtime::host();
//! # let comm = Communicator::init(&UniqueId::new()?, 0, 1, &rt.device(0)?)?;
//! let mut buf = rt.device(0)?.alloc::<f32>(8)?;
//! comm.all_reduce(&buf, &mut buf, ReduceOp::Sum)?; // error: shared and mutable borrow
//! # Ok::<(), oxccl::Error>(())
//! ```
//!
//! Overlapping exclusive views:
//!
//! ```compile_fail,E0499
//! # use oxccl::Runtime;
//! let mut buf = Runtime::host().device(0)?.alloc::<f32>(8)?;
//! let a = buf.slice_mut(0..4)?;
//! let b = buf.slice_mut(2..6)?; // error: `buf` is already mutably borrowed by `a`
//! drop((a, b));
//! # Ok::<(), oxccl::Error>(())
//! ```
//!
//! A shared view cannot be written:
//!
//! ```compile_fail,E0277
//! # use oxccl::{Collectives, Communicator, ReduceOp, Runtime, UniqueId};
//! # let rt = Runtime::host();
//! # let comm = Communicator::init(&UniqueId::new()?, 0, 1, &rt.device(0)?)?;
//! let buf = rt.device(0)?.alloc::<f32>(8)?;
//! comm.all_reduce_in_place(buf.slice(0..4)?, ReduceOp::Sum)?; // error: not a DeviceOutput
//! # Ok::<(), oxccl::Error>(())
//! ```
//!
//! A view of a group's operation keeps its buffer borrowed until the group ends:
//!
//! ```compile_fail,E0505
//! # use oxccl::{Collectives, Communicator, Group, ReduceOp, Runtime, UniqueId};
//! # let rt = Runtime::host();
//! # let comm = Communicator::init(&UniqueId::new()?, 0, 1, &rt.device(0)?)?;
//! let mut flat = rt.device(0)?.alloc::<f32>(1024)?;
//! let group = Group::start()?;
//! for bucket in flat.chunks_mut(256)? {
//!     group.on(&comm).all_reduce_in_place(bucket, ReduceOp::Avg)?;
//! }
//! drop(flat); // error: borrowed by the buckets recorded in the group
//! group.end()?;
//! # Ok::<(), oxccl::Error>(())
//! ```
