//! Operations on cudarc's device memory and streams (feature `cudarc`), so programs built on
//! cudarc (candle's CUDA backend is) call oxccl without copying.
//!
//! Ordering and release follow cudarc's rules: each buffer is taken through cudarc's
//! `device_ptr`/`device_ptr_mut` on the stream the operation runs on, which makes that stream
//! wait for the buffer's earlier writes (and reads, for outputs) and records the operation's
//! use, so cudarc's stream-ordered free and its later uses wait for it.

use crate::Element;
use crate::collectives::coll_args;
use crate::comm::Communicator;
use crate::dispatch::{AnyStream, CommOps, RuntimeBackend};
use crate::error::{Error, Result};
use crate::op::ReduceOp;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use oxccl_core::datatype::RedOp;
use oxccl_core::plan::{CollKind, P2pDir};
use std::sync::Arc;

/// A communicator's operations on a cudarc stream ([`Communicator::on_cudarc`]).
pub struct CudarcOps<'a> {
    comm: &'a Communicator,
    cudarc: &'a Arc<CudaStream>,
    stream: AnyStream,
}

impl Communicator {
    /// The operations on cudarc's `stream`, taking `CudaSlice`s. The communicator must be a
    /// CUDA one on the stream's device.
    pub fn on_cudarc<'a>(&'a self, stream: &'a Arc<CudaStream>) -> Result<CudarcOps<'a>> {
        if self.runtime().name() != "cuda" {
            return Err(Error::arg(format!(
                "cudarc streams need a CUDA communicator, this one runs on {}",
                self.runtime().name()
            )));
        }
        let ordinal = stream.context().ordinal();
        if ordinal != self.device.ordinal() {
            return Err(Error::arg(format!(
                "the cudarc stream is on device {ordinal}, the communicator on device {}",
                self.device.ordinal()
            )));
        }
        // SAFETY: the handle belongs to a live cudarc stream of this device, which `stream`
        // keeps alive for as long as the returned value borrows it.
        let handle = unsafe {
            self.runtime()
                .backend
                .stream_from_raw(stream.cu_stream() as usize)
        }?;
        Ok(CudarcOps {
            comm: self,
            cudarc: stream,
            stream: handle,
        })
    }
}

impl CudarcOps<'_> {
    /// `ncclAllReduce`; equal lengths.
    pub fn all_reduce<T: Element>(
        &self,
        send: &CudaSlice<T>,
        recv: &mut CudaSlice<T>,
        op: ReduceOp<T>,
    ) -> Result<()> {
        check_len("all_reduce", send.len(), recv.len())?;
        self.out_of_place(CollKind::AllReduce, send, recv, send.len(), op.lower())
    }

    /// `ncclAllReduce` in place.
    pub fn all_reduce_in_place<T: Element>(
        &self,
        buf: &mut CudaSlice<T>,
        op: ReduceOp<T>,
    ) -> Result<()> {
        let n = buf.len();
        self.in_place(CollKind::AllReduce, buf, 0, 0, n, op.lower(), 0)
    }

    /// `ncclBroadcast` in place from `root`.
    pub fn broadcast_in_place<T: Element>(
        &self,
        buf: &mut CudaSlice<T>,
        root: usize,
    ) -> Result<()> {
        self.check_rank(root)?;
        let n = buf.len();
        self.in_place(CollKind::Broadcast, buf, 0, 0, n, RedOp::Sum, root)
    }

    /// `ncclAllGather`: `recv` has nranks times `send`'s length.
    pub fn all_gather<T: Element>(
        &self,
        send: &CudaSlice<T>,
        recv: &mut CudaSlice<T>,
    ) -> Result<()> {
        check_len("all_gather", send.len() * self.comm.size(), recv.len())?;
        self.out_of_place(CollKind::AllGather, send, recv, send.len(), RedOp::Sum)
    }

    /// `ncclReduceScatter`: `send` has nranks times `recv`'s length.
    pub fn reduce_scatter<T: Element>(
        &self,
        send: &CudaSlice<T>,
        recv: &mut CudaSlice<T>,
        op: ReduceOp<T>,
    ) -> Result<()> {
        check_len("reduce_scatter", recv.len() * self.comm.size(), send.len())?;
        self.out_of_place(CollKind::ReduceScatter, send, recv, recv.len(), op.lower())
    }

    /// `ncclSend` of all of `buf` to `peer`.
    pub fn send<T: Element>(&self, buf: &CudaSlice<T>, peer: usize) -> Result<()> {
        self.check_rank(peer)?;
        let (p, _used) = buf.device_ptr(self.cudarc);
        // SAFETY: `p` is `buf`'s memory, live until cudarc's stream-ordered free, which waits for
        // this stream's work through the use `_used` records when dropped after the call.
        Ok(unsafe {
            self.comm.comm.p2p_on(
                P2pDir::Send,
                p,
                buf.len() as u64,
                T::DTYPE,
                peer as u32,
                &self.stream,
            )
        }?)
    }

    /// `ncclRecv` of all of `buf` from `peer`.
    pub fn recv<T: Element>(&self, buf: &mut CudaSlice<T>, peer: usize) -> Result<()> {
        self.check_rank(peer)?;
        let n = buf.len() as u64;
        let (p, _used) = buf.device_ptr_mut(self.cudarc);
        // SAFETY: as in `send`.
        Ok(unsafe {
            self.comm
                .comm
                .p2p_on(P2pDir::Recv, p, n, T::DTYPE, peer as u32, &self.stream)
        }?)
    }

    fn check_rank(&self, r: usize) -> Result<()> {
        if r >= self.comm.size() {
            return Err(Error::arg(format!(
                "rank {r} is out of range for a communicator of {} ranks",
                self.comm.size()
            )));
        }
        Ok(())
    }

    fn out_of_place<T: Element>(
        &self,
        kind: CollKind,
        send: &CudaSlice<T>,
        recv: &mut CudaSlice<T>,
        count: usize,
        op: RedOp,
    ) -> Result<()> {
        Communicator::check_no_group()?;
        let (s, _read) = send.device_ptr(self.cudarc);
        let (r, _written) = recv.device_ptr_mut(self.cudarc);
        // SAFETY: both are live cudarc allocations of the sizes checked by the caller; the
        // guards record this stream's use when dropped after the call, which cudarc's later
        // uses and its stream-ordered free wait for.
        Ok(unsafe {
            self.comm
                .comm
                .collective_on(coll_args(kind, s, r, count, T::DTYPE, op, 0), &self.stream)
        }?)
    }

    #[allow(clippy::too_many_arguments)]
    fn in_place<T: Element>(
        &self,
        kind: CollKind,
        buf: &mut CudaSlice<T>,
        send_at: usize,
        recv_at: usize,
        count: usize,
        op: RedOp,
        root: usize,
    ) -> Result<()> {
        Communicator::check_no_group()?;
        let size = size_of::<T>() as u64;
        let (p, _written) = buf.device_ptr_mut(self.cudarc);
        let a = coll_args(
            kind,
            p + send_at as u64 * size,
            p + recv_at as u64 * size,
            count,
            T::DTYPE,
            op,
            root,
        );
        // SAFETY: as in `out_of_place`, for one buffer.
        Ok(unsafe { self.comm.comm.collective_on(a, &self.stream) }?)
    }
}

fn check_len(what: &str, want: usize, got: usize) -> Result<()> {
    if want != got {
        return Err(Error::arg(format!(
            "{what}: a buffer has {got} elements, it must have {want}"
        )));
    }
    Ok(())
}
