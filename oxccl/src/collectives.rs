//! Every collective and point-to-point operation as a safe method on typed buffers, with
//! lengths, ranks and places checked before anything is queued.

use crate::Element;
use crate::buffer::{DeviceInput, DeviceOutput, DeviceSlice, DeviceSliceMut};
use crate::comm::Communicator;
use crate::dispatch::CommOps;
use crate::error::{Error, Result};
use crate::op::ReduceOp;
use crate::stream::Stream;
use oxccl_core::CollArgs;
use oxccl_core::backend::DevicePtr;
use oxccl_core::datatype::{DataType, RedOp};
use oxccl_core::plan::{AllToAllvLayout, CollKind, P2pDir};

use crate::private::{Sealed, Target, Targeted};

/// Block layout of [`Collectives::all_to_allv`]: per peer, element counts and offsets.
#[derive(Debug, Clone, Copy)]
pub struct AllToAllv<'a> {
    /// Elements sent to each peer.
    pub send_counts: &'a [usize],
    /// Offset in the send buffer of each peer's block.
    pub send_offsets: &'a [usize],
    /// Elements received from each peer.
    pub recv_counts: &'a [usize],
    /// Offset in the receive buffer of each peer's block.
    pub recv_offsets: &'a [usize],
}

/// The operations, on [`Communicator`] (its own stream), [`OnStream`] (another stream) and
/// [`crate::GroupOps`] (recorded in a group). Buffers are borrowed for `'b`: the call for plain
/// operations, the whole group for grouped ones. Where a buffer is read, a `&DeviceBuffer` or a
/// view ([`crate::DeviceInput`]) goes; where one is written, a `&mut DeviceBuffer` or an
/// exclusive view ([`crate::DeviceOutput`]); the root-only buffers of rooted operations are
/// views (`Some(buf.as_slice())`, `Some(buf.as_mut_slice())`). Sealed: only this crate
/// implements it.
///
/// Lengths are element counts; a length that does not fit the communicator, a root or peer out
/// of range, or a buffer of another device or runtime is an [`Error::InvalidArgument`], and
/// nothing is queued.
pub trait Collectives<'b>: Targeted {
    /// `ncclAllReduce`: `recv[i]` = `op` over every rank's `send[i]`; equal lengths.
    fn all_reduce<T: Element>(
        &self,
        send: impl DeviceInput<'b, T>,
        recv: impl DeviceOutput<'b, T>,
        op: ReduceOp<T>,
    ) -> Result<()> {
        let send = send.input();
        let recv = recv.output();
        same_len("all_reduce", send.len(), recv.len())?;
        let a = coll_args(
            CollKind::AllReduce,
            send.addr(0),
            recv.addr(0),
            send.len(),
            T::DTYPE,
            op.lower(),
            0,
        );
        self.target().launch(&[send.access(), recv.access()], a)
    }

    /// `ncclAllReduce` in place.
    fn all_reduce_in_place<T: Element>(
        &self,
        buf: impl DeviceOutput<'b, T>,
        op: ReduceOp<T>,
    ) -> Result<()> {
        let buf = buf.output();
        let a = coll_args(
            CollKind::AllReduce,
            buf.addr(0),
            buf.addr(0),
            buf.len(),
            T::DTYPE,
            op.lower(),
            0,
        );
        self.target().launch(&[buf.access()], a)
    }

    /// `ncclBroadcast`: every rank's `recv` gets the root's `send` (`Some` on the root, of
    /// `recv`'s length; ignored elsewhere).
    fn broadcast<T: Element>(
        &self,
        send: Option<DeviceSlice<'b, T>>,
        recv: impl DeviceOutput<'b, T>,
        root: usize,
    ) -> Result<()> {
        let recv = recv.output();
        let want = recv.len();
        self.target()
            .spread_from_root(CollKind::Broadcast, "broadcast", send, recv, want, root)
    }

    /// `ncclBroadcast` in place (`ncclBcast`): the root's `buf` is copied to every rank's.
    fn broadcast_in_place<T: Element>(
        &self,
        buf: impl DeviceOutput<'b, T>,
        root: usize,
    ) -> Result<()> {
        let buf = buf.output();
        self.target().check_rank("root", root)?;
        let a = coll_args(
            CollKind::Broadcast,
            buf.addr(0),
            buf.addr(0),
            buf.len(),
            T::DTYPE,
            RedOp::Sum,
            root,
        );
        self.target().launch(&[buf.access()], a)
    }

    /// `ncclReduce`: the root's `recv` (`Some` on the root, of `send`'s length; ignored
    /// elsewhere) gets `op` over every rank's `send`.
    fn reduce<T: Element>(
        &self,
        send: impl DeviceInput<'b, T>,
        recv: Option<DeviceSliceMut<'b, T>>,
        op: ReduceOp<T>,
        root: usize,
    ) -> Result<()> {
        let send = send.input();
        let want = send.len();
        self.target().collect_at_root(
            CollKind::Reduce,
            "reduce",
            send,
            recv,
            want,
            op.lower(),
            root,
        )
    }

    /// `ncclReduce` in place: the root's `buf` gets `op` over every rank's `buf`.
    fn reduce_in_place<T: Element>(
        &self,
        buf: impl DeviceOutput<'b, T>,
        op: ReduceOp<T>,
        root: usize,
    ) -> Result<()> {
        let buf = buf.output();
        self.target().check_rank("root", root)?;
        let a = coll_args(
            CollKind::Reduce,
            buf.addr(0),
            buf.addr(0),
            buf.len(),
            T::DTYPE,
            op.lower(),
            root,
        );
        self.target().launch(&[buf.access()], a)
    }

    /// `ncclAllGather`: `recv` (nranks times `send`'s length) gets every rank's `send`, in rank
    /// order.
    fn all_gather<T: Element>(
        &self,
        send: impl DeviceInput<'b, T>,
        recv: impl DeviceOutput<'b, T>,
    ) -> Result<()> {
        let send = send.input();
        let recv = recv.output();
        let t = self.target();
        t.check_multiple("all_gather", "receive", recv.len(), send.len())?;
        let a = coll_args(
            CollKind::AllGather,
            send.addr(0),
            recv.addr(0),
            send.len(),
            T::DTYPE,
            RedOp::Sum,
            0,
        );
        t.launch(&[send.access(), recv.access()], a)
    }

    /// `ncclAllGather` in place: each rank's block `rank` of `buf` (length a multiple of
    /// nranks) is copied to that block of every rank's `buf`.
    fn all_gather_in_place<T: Element>(&self, buf: impl DeviceOutput<'b, T>) -> Result<()> {
        let buf = buf.output();
        let t = self.target();
        let count = t.block("all_gather_in_place", buf.len())?;
        let me = t.comm.rank();
        let a = coll_args(
            CollKind::AllGather,
            buf.addr(me * count),
            buf.addr(0),
            count,
            T::DTYPE,
            RedOp::Sum,
            0,
        );
        t.launch(&[buf.access()], a)
    }

    /// `ncclReduceScatter`: `recv` gets block `rank` of `op` over every rank's `send` (nranks
    /// times `recv`'s length).
    fn reduce_scatter<T: Element>(
        &self,
        send: impl DeviceInput<'b, T>,
        recv: impl DeviceOutput<'b, T>,
        op: ReduceOp<T>,
    ) -> Result<()> {
        let send = send.input();
        let recv = recv.output();
        let t = self.target();
        t.check_multiple("reduce_scatter", "send", send.len(), recv.len())?;
        let a = coll_args(
            CollKind::ReduceScatter,
            send.addr(0),
            recv.addr(0),
            recv.len(),
            T::DTYPE,
            op.lower(),
            0,
        );
        t.launch(&[send.access(), recv.access()], a)
    }

    /// `ncclReduceScatter` in place: block `rank` of `buf` (length a multiple of nranks) gets
    /// that block of `op` over every rank's `buf`.
    fn reduce_scatter_in_place<T: Element>(
        &self,
        buf: impl DeviceOutput<'b, T>,
        op: ReduceOp<T>,
    ) -> Result<()> {
        let buf = buf.output();
        let t = self.target();
        let count = t.block("reduce_scatter_in_place", buf.len())?;
        let me = t.comm.rank();
        let a = coll_args(
            CollKind::ReduceScatter,
            buf.addr(0),
            buf.addr(me * count),
            count,
            T::DTYPE,
            op.lower(),
            0,
        );
        t.launch(&[buf.access()], a)
    }

    /// `ncclAlltoAll`: block `p` of `send` goes to rank `p`, whose block `rank` of `recv` gets
    /// it; equal lengths, a multiple of nranks.
    fn all_to_all<T: Element>(
        &self,
        send: impl DeviceInput<'b, T>,
        recv: impl DeviceOutput<'b, T>,
    ) -> Result<()> {
        let send = send.input();
        let recv = recv.output();
        let t = self.target();
        same_len("all_to_all", send.len(), recv.len())?;
        let count = t.block("all_to_all", send.len())?;
        let a = coll_args(
            CollKind::AllToAll,
            send.addr(0),
            recv.addr(0),
            count,
            T::DTYPE,
            RedOp::Sum,
            0,
        );
        t.launch(&[send.access(), recv.access()], a)
    }

    /// `ncclAlltoAllv`: `send_counts[p]` elements at `send_offsets[p]` go to rank `p`, which
    /// receives them at its `recv_offsets[rank]` (`recv_counts[rank]` elements, equal to what
    /// was sent). Every block must lie inside its buffer.
    fn all_to_allv<T: Element>(
        &self,
        send: impl DeviceInput<'b, T>,
        recv: impl DeviceOutput<'b, T>,
        layout: AllToAllv<'_>,
    ) -> Result<()> {
        let send = send.input();
        let recv = recv.output();
        let t = self.target();
        let n = t.comm.size();
        let table = |name: &str, v: &[usize]| -> Result<Vec<u64>> {
            if v.len() != n {
                return Err(Error::arg(format!(
                    "all_to_allv: {name} has {} entries, the communicator {}",
                    v.len(),
                    ranks(n)
                )));
            }
            Ok(v.iter().map(|&x| x as u64).collect())
        };
        let l = AllToAllvLayout {
            send_counts: table("send_counts", layout.send_counts)?,
            send_displs: table("send_offsets", layout.send_offsets)?,
            recv_counts: table("recv_counts", layout.recv_counts)?,
            recv_displs: table("recv_offsets", layout.recv_offsets)?,
        };
        let fits = |counts: &[u64], offsets: &[u64], len: usize, which: &str| -> Result<()> {
            for (p, (&c, &o)) in counts.iter().zip(offsets).enumerate() {
                if c > 0 && c.checked_add(o).is_none_or(|end| end > len as u64) {
                    return Err(Error::arg(format!(
                        "all_to_allv: {which} block of rank {p} ({c} elements at {o}) exceeds the \
                         {len} elements of the {which} buffer"
                    )));
                }
            }
            Ok(())
        };
        fits(&l.send_counts, &l.send_displs, send.len(), "send")?;
        fits(&l.recv_counts, &l.recv_displs, recv.len(), "receive")?;
        let mut a = coll_args(
            CollKind::AllToAllv,
            send.addr(0),
            recv.addr(0),
            0,
            T::DTYPE,
            RedOp::Sum,
            0,
        );
        a.layout = Some(l);
        t.launch(&[send.access(), recv.access()], a)
    }

    /// `ncclGather`: the root's `recv` (`Some` on the root, nranks times `send`'s length;
    /// ignored elsewhere) gets every rank's `send`, in rank order.
    fn gather<T: Element>(
        &self,
        send: impl DeviceInput<'b, T>,
        recv: Option<DeviceSliceMut<'b, T>>,
        root: usize,
    ) -> Result<()> {
        let send = send.input();
        let t = self.target();
        let want = send.len().saturating_mul(t.comm.size());
        t.collect_at_root(
            CollKind::Gather,
            "gather",
            send,
            recv,
            want,
            RedOp::Sum,
            root,
        )
    }

    /// `ncclGather` in place: block `rank` of every rank's `buf` (length a multiple of nranks)
    /// is copied to that block of the root's `buf`.
    fn gather_in_place<T: Element>(
        &self,
        buf: impl DeviceOutput<'b, T>,
        root: usize,
    ) -> Result<()> {
        let buf = buf.output();
        let t = self.target();
        t.check_rank("root", root)?;
        let count = t.block("gather_in_place", buf.len())?;
        let me = t.comm.rank();
        let a = coll_args(
            CollKind::Gather,
            buf.addr(me * count),
            buf.addr(0),
            count,
            T::DTYPE,
            RedOp::Sum,
            root,
        );
        t.launch(&[buf.access()], a)
    }

    /// `ncclScatter`: block `p` of the root's `send` (`Some` on the root, nranks times
    /// `recv`'s length; ignored elsewhere) goes to rank `p`'s `recv`.
    fn scatter<T: Element>(
        &self,
        send: Option<DeviceSlice<'b, T>>,
        recv: impl DeviceOutput<'b, T>,
        root: usize,
    ) -> Result<()> {
        let recv = recv.output();
        let t = self.target();
        let want = recv.len().saturating_mul(t.comm.size());
        t.spread_from_root(CollKind::Scatter, "scatter", send, recv, want, root)
    }

    /// `ncclScatter` in place: block `p` of the root's `buf` (length a multiple of nranks)
    /// goes to block `p` of rank `p`'s `buf`.
    fn scatter_in_place<T: Element>(
        &self,
        buf: impl DeviceOutput<'b, T>,
        root: usize,
    ) -> Result<()> {
        let buf = buf.output();
        let t = self.target();
        t.check_rank("root", root)?;
        let count = t.block("scatter_in_place", buf.len())?;
        let me = t.comm.rank();
        let a = coll_args(
            CollKind::Scatter,
            buf.addr(0),
            buf.addr(me * count),
            count,
            T::DTYPE,
            RedOp::Sum,
            root,
        );
        t.launch(&[buf.access()], a)
    }

    /// `ncclSend`: all of `buf` to rank `peer`, which receives it with [`Collectives::recv`]
    /// of the same length. A rank exchanging with itself, or two ranks sending to each other,
    /// put both halves in one [`crate::Group`].
    fn send<T: Element>(&self, buf: impl DeviceInput<'b, T>, peer: usize) -> Result<()> {
        let buf = buf.input();
        self.target().p2p(P2pDir::Send, buf.access(), peer)
    }

    /// `ncclRecv`: fills all of `buf` with what rank `peer` sends.
    fn recv<T: Element>(&self, buf: impl DeviceOutput<'b, T>, peer: usize) -> Result<()> {
        let buf = buf.output();
        self.target().p2p(P2pDir::Recv, buf.access(), peer)
    }
}

/// Arguments of a collective without an AlltoAllv layout.
pub(crate) fn coll_args(
    kind: CollKind,
    send: DevicePtr,
    recv: DevicePtr,
    count: usize,
    dtype: DataType,
    op: RedOp,
    root: usize,
) -> CollArgs {
    CollArgs {
        kind,
        send,
        recv,
        count: count as u64,
        dtype,
        op,
        root: root as u32,
        layout: None,
    }
}

/// "1 rank", "3 ranks".
fn ranks(n: usize) -> String {
    if n == 1 {
        "1 rank".into()
    } else {
        format!("{n} ranks")
    }
}

fn check_root_len(what: &str, which: &str, got: usize, want: usize) -> Result<()> {
    if got != want {
        return Err(Error::arg(format!(
            "{what}: the root's {which} buffer has {got} elements, it must have {want}"
        )));
    }
    Ok(())
}

fn same_len(what: &str, send: usize, recv: usize) -> Result<()> {
    if send != recv {
        return Err(Error::arg(format!(
            "{what}: send buffer has {send} elements, receive buffer {recv}; they must be equal"
        )));
    }
    Ok(())
}

impl Target<'_> {
    /// Checks a root or peer rank.
    fn check_rank(&self, what: &str, r: usize) -> Result<()> {
        let n = self.comm.size();
        if r >= n {
            return Err(Error::arg(format!(
                "{what} {r} is out of range for a communicator of {}",
                ranks(n)
            )));
        }
        Ok(())
    }

    /// `len` / nranks, which must divide evenly.
    fn block(&self, what: &str, len: usize) -> Result<usize> {
        let n = self.comm.size();
        if !len.is_multiple_of(n) {
            return Err(Error::arg(format!(
                "{what}: buffer length {len} is not a multiple of the {}",
                ranks(n)
            )));
        }
        Ok(len / n)
    }

    /// Checks that `big` is nranks times `small`.
    fn check_multiple(&self, what: &str, which: &str, big: usize, small: usize) -> Result<()> {
        let n = self.comm.size();
        if small.checked_mul(n) != Some(big) {
            return Err(Error::arg(format!(
                "{what}: {which} buffer has {big} elements, it must have {} x {small}",
                ranks(n)
            )));
        }
        Ok(())
    }

    /// A rooted operation whose input lives on the root: `send` is required there (of `want`
    /// elements) and ignored elsewhere; every rank's `recv` gets `recv.len()` elements.
    fn spread_from_root<T: Element>(
        &self,
        kind: CollKind,
        what: &str,
        send: Option<DeviceSlice<'_, T>>,
        recv: DeviceSliceMut<'_, T>,
        want: usize,
        root: usize,
    ) -> Result<()> {
        self.check_rank("root", root)?;
        let send = if self.comm.rank() == root {
            let b =
                send.ok_or_else(|| Error::arg(format!("{what}: the root needs a send buffer")))?;
            check_root_len(what, "send", b.len(), want)?;
            Some(b)
        } else {
            None
        };
        let s = send.map_or(recv.addr(0), |b| b.addr(0));
        let a = coll_args(
            kind,
            s,
            recv.addr(0),
            recv.len(),
            T::DTYPE,
            RedOp::Sum,
            root,
        );
        match send {
            Some(b) => self.launch(&[b.access(), recv.access()], a),
            None => self.launch(&[recv.access()], a),
        }
    }

    /// A rooted operation whose output lives on the root: `recv` is required there (of `want`
    /// elements) and ignored elsewhere; every rank sends all of `send`.
    #[allow(clippy::too_many_arguments)]
    fn collect_at_root<T: Element>(
        &self,
        kind: CollKind,
        what: &str,
        send: DeviceSlice<'_, T>,
        recv: Option<DeviceSliceMut<'_, T>>,
        want: usize,
        op: RedOp,
        root: usize,
    ) -> Result<()> {
        self.check_rank("root", root)?;
        let recv = if self.comm.rank() == root {
            let b =
                recv.ok_or_else(|| Error::arg(format!("{what}: the root needs a receive buffer")))?;
            check_root_len(what, "receive", b.len(), want)?;
            Some(b)
        } else {
            None
        };
        let r = recv.as_ref().map_or(send.addr(0), |b| b.addr(0));
        let a = coll_args(kind, send.addr(0), r, send.len(), T::DTYPE, op, root);
        match recv {
            Some(b) => self.launch(&[send.access(), b.access()], a),
            None => self.launch(&[send.access()], a),
        }
    }

    /// Checks places and group state, orders the buffers' streams, queues the collective.
    fn launch<T: Element>(&self, bufs: &[(DeviceSlice<'_, T>, bool)], a: CollArgs) -> Result<()> {
        self.prepare(bufs)?;
        // SAFETY: every address lies in a live `DeviceBuffer` of this communicator's device,
        // sized for the operation by the checks above. The buffers are borrowed until the call
        // (or, in a group, the group's end) returns, and afterwards their release and host
        // access wait for `stream`, on which `track` recorded this use.
        Ok(unsafe { self.comm.comm.collective_on(a, self.stream.handle()) }?)
    }

    fn p2p<T: Element>(
        &self,
        dir: P2pDir,
        buf: (DeviceSlice<'_, T>, bool),
        peer: usize,
    ) -> Result<()> {
        self.check_rank("peer", peer)?;
        self.prepare(&[buf])?;
        let (view, _) = buf;
        // SAFETY: as in `launch`, for the view's `len` elements.
        Ok(unsafe {
            self.comm.comm.p2p_on(
                dir,
                view.addr(0),
                view.len() as u64,
                T::DTYPE,
                peer as u32,
                self.stream.handle(),
            )
        }?)
    }

    fn prepare<T: Element>(&self, bufs: &[(DeviceSlice<'_, T>, bool)]) -> Result<()> {
        if !self.grouped {
            Communicator::check_no_group()?;
        }
        let (rt, dev) = (&self.comm.device.runtime, self.comm.device.ordinal);
        if !self.stream.is_on(rt, dev) {
            return Err(Error::arg(format!(
                "the stream is on device {} (or another runtime), the communicator on device {dev}",
                self.stream.device()
            )));
        }
        let names: &[&str] = if bufs.len() == 2 {
            &["send", "receive"]
        } else {
            &["the"]
        };
        for ((b, _), name) in bufs.iter().zip(names) {
            b.buffer().check_place(rt, dev, name)?;
        }
        for (b, whole) in bufs {
            b.buffer().track(self.stream, *whole)?;
        }
        Ok(())
    }
}

impl Sealed for Communicator {}

impl<'b> Collectives<'b> for Communicator {}

impl Targeted for Communicator {
    fn target(&self) -> Target<'_> {
        Target {
            comm: self,
            stream: &self.stream,
            grouped: false,
        }
    }
}

/// A communicator's operations on another stream ([`Communicator::on`]).
#[derive(Clone, Copy)]
pub struct OnStream<'a> {
    comm: &'a Communicator,
    stream: &'a Stream,
}

impl Communicator {
    /// The operations queued on `stream` instead of the communicator's own.
    pub fn on<'a>(&'a self, stream: &'a Stream) -> OnStream<'a> {
        OnStream { comm: self, stream }
    }
}

impl Sealed for OnStream<'_> {}

impl<'b> Collectives<'b> for OnStream<'_> {}

impl Targeted for OnStream<'_> {
    fn target(&self) -> Target<'_> {
        Target {
            comm: self.comm,
            stream: self.stream,
            grouped: false,
        }
    }
}
