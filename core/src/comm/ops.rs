//! Operations: argument checks, planning, launch, and their deferral inside groups.

mod profile;

use super::group::{self, Deferred, Waiter};
use super::plan_cache::{CollPlanKey, PlanKey};
use super::{Communicator, Connected, P2P_TUNING_BYTES, check};
use crate::backend::{Backend, DevicePtr, Launch};
use crate::datatype::{DataType, RedOp, Reduction};
use crate::error::{Error, Result};
use crate::lock::lock;
use crate::plan::one_shot::{self, OneShot, Variant};
use crate::plan::tuner::{Choice, Topology, Tuner};
use crate::plan::{
    self, Algorithm, AllToAllvLayout, CollKind, CollRequest, P2pDir, P2pOp, Protocol, WorkDesc,
};
use profile::{CallEvents, LaunchProfile};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tracing::debug;

/// Arguments of one collective, as the C API passes them.
#[derive(Debug, Clone, PartialEq)]
pub struct CollArgs {
    /// The operation.
    pub kind: CollKind,
    /// Send buffer.
    pub send: DevicePtr,
    /// Receive buffer.
    pub recv: DevicePtr,
    /// The API's count argument (see [`CollRequest::count`]).
    pub count: u64,
    /// Element type.
    pub dtype: DataType,
    /// Reduction operator (ignored by non-reducing operations).
    pub op: RedOp,
    /// Root rank where the operation has one.
    pub root: u32,
    /// AlltoAllv counts and displacements.
    pub layout: Option<AllToAllvLayout>,
}

impl<B: Backend> Communicator<B> {
    /// Queues a collective on `stream` (recorded until `group_end` inside a group).
    ///
    /// # Safety
    /// The buffers named in `args` are valid backend memory for the sizes the operation implies
    /// until it has run.
    pub unsafe fn collective(&self, args: CollArgs, stream: &B::Stream) -> Result<()> {
        let r = self.validate(&args).and_then(|()| {
            if args.layout.is_none() && args.count == 0 {
                // Nothing to move; every rank passes the same count, so all skip it alike.
                return Ok(());
            }
            let profile = self.profile_coll_call(&args, stream);
            let op = Box::new(PendingColl {
                comm: self.clone(),
                args,
                stream: stream.clone(),
                profile,
            });
            run_or_defer(op)
        });
        if let Err(e) = &r {
            group::record_error(e);
        }
        r
    }

    /// Queues an `ncclSend` (`dir = Send`) or `ncclRecv` of `count` elements with `peer`.
    ///
    /// # Safety
    /// `buf` is valid backend memory of `count` elements until the operation has run.
    pub unsafe fn p2p(
        &self,
        dir: P2pDir,
        buf: DevicePtr,
        count: u64,
        dtype: DataType,
        peer: u32,
        stream: &B::Stream,
    ) -> Result<()> {
        let r = (|| {
            self.connected()?;
            if peer >= self.inner.nranks {
                return Err(Error::arg(format!(
                    "invalid peer {peer}: communicator has {} ranks",
                    self.inner.nranks
                )));
            }
            // As for collectives: no buffer can hold more than isize::MAX bytes, and a larger
            // count would otherwise be cut into billions of plan steps (an allocation failure
            // that aborts the process).
            let bytes = count
                .checked_mul(dtype.size() as u64)
                .filter(|&b| b < isize::MAX as u64)
                .ok_or_else(|| {
                    Error::arg(format!(
                        "count {count} of {} overflows the address space",
                        dtype.name()
                    ))
                })?;
            if buf == 0 && bytes > 0 {
                return Err(Error::arg(format!(
                    "{} buffer is NULL",
                    if dir == P2pDir::Send {
                        "send"
                    } else {
                        "receive"
                    }
                )));
            }
            // Nothing to move, as for a collective of count 0: both ends of a message pass the
            // same count, so both skip it (NCCL still schedules it, for no data).
            if bytes == 0 {
                return Ok(());
            }
            run_or_defer(Box::new(PendingP2p {
                comm: self.clone(),
                dir,
                buf,
                count,
                dtype,
                bytes,
                peer,
                stream: stream.clone(),
                profile: self.profile_p2p_call(dir, count, dtype, stream),
            }))
        })();
        if let Err(e) = &r {
            group::record_error(e);
        }
        r
    }

    fn validate(&self, a: &CollArgs) -> Result<()> {
        self.connected()?;
        let n = self.inner.nranks as u64;
        let has_root = matches!(
            a.kind,
            CollKind::Broadcast | CollKind::Reduce | CollKind::Gather | CollKind::Scatter
        );
        if has_root && a.root >= self.inner.nranks {
            return Err(Error::arg(format!(
                "invalid root {}: communicator has {n} ranks",
                a.root
            )));
        }
        if let RedOp::PreMulSum(_) = a.op
            && !matches!(
                a.kind,
                CollKind::AllReduce | CollKind::Reduce | CollKind::ReduceScatter
            )
        {
            return Err(Error::Internal(
                "reduction operator on a non-reducing operation".into(),
            ));
        }
        let esize = a.dtype.size() as u64;
        let (send_elems, recv_elems) = self.buffer_elems(a)?;
        let limit = (isize::MAX as u64) / esize;
        if send_elems >= limit || recv_elems >= limit || a.count >= limit {
            return Err(Error::arg(format!(
                "count {} of {} overflows the address space",
                a.count,
                a.dtype.name()
            )));
        }
        if send_elems > 0 && a.send == 0 {
            return Err(Error::arg("send buffer is NULL"));
        }
        if recv_elems > 0 && a.recv == 0 {
            return Err(Error::arg("receive buffer is NULL"));
        }
        Ok(())
    }

    /// Elements of the send and receive buffers this rank touches in `a`.
    fn buffer_elems(&self, a: &CollArgs) -> Result<(u64, u64)> {
        let n = self.inner.nranks as u64;
        let me = self.inner.rank;
        Ok(match a.kind {
            CollKind::AllReduce => (a.count, a.count),
            CollKind::Broadcast => (if me == a.root { a.count } else { 0 }, a.count),
            CollKind::Reduce => (a.count, if me == a.root { a.count } else { 0 }),
            CollKind::AllGather => (a.count, a.count.saturating_mul(n)),
            CollKind::ReduceScatter => (a.count.saturating_mul(n), a.count),
            CollKind::AllToAll => (a.count.saturating_mul(n), a.count.saturating_mul(n)),
            CollKind::Gather => (
                a.count,
                if me == a.root {
                    a.count.saturating_mul(n)
                } else {
                    0
                },
            ),
            CollKind::Scatter => (
                if me == a.root {
                    a.count.saturating_mul(n)
                } else {
                    0
                },
                a.count,
            ),
            CollKind::AllToAllv => {
                let l = a
                    .layout
                    .as_ref()
                    .ok_or_else(|| Error::arg("AlltoAllv needs counts and displacements"))?;
                if [
                    &l.send_counts,
                    &l.send_displs,
                    &l.recv_counts,
                    &l.recv_displs,
                ]
                .iter()
                .any(|v| v.len() != n as usize)
                {
                    return Err(Error::arg(
                        "AlltoAllv counts and displacements need one entry per rank",
                    ));
                }
                let end = |c: &[u64], d: &[u64]| {
                    c.iter()
                        .zip(d)
                        .filter(|(c, _)| **c > 0)
                        .map(|(c, d)| c.checked_add(*d).unwrap_or(u64::MAX))
                        .max()
                        .unwrap_or(0)
                };
                (
                    end(&l.send_counts, &l.send_displs),
                    end(&l.recv_counts, &l.recv_displs),
                )
            }
            CollKind::SendRecv => {
                return Err(Error::Internal("send/recv is not a collective".into()));
            }
        })
    }

    fn topology(&self, transport: &B::Transport) -> Topology {
        if let Some(t) = self.inner.backend.topology(transport) {
            t
        } else if self.inner.backend.name() == "host" {
            Topology::Host
        } else {
            Topology::SingleNodeGpu { nvlink: true }
        }
    }

    /// The tuner's choice for `kind`, within what the backend's connections can carry.
    fn choose(
        &self,
        kind: CollKind,
        bytes: u64,
        dtype: DataType,
        transport: &B::Transport,
    ) -> Choice {
        self.choose_with(&self.inner.tuner, kind, bytes, dtype, transport)
    }

    /// [`Self::choose`] by `tuner`.
    fn choose_with(
        &self,
        tuner: &Tuner,
        kind: CollKind,
        bytes: u64,
        dtype: DataType,
        transport: &B::Transport,
    ) -> Choice {
        let backend = &self.inner.backend;
        let mut c = tuner.choose(
            kind,
            bytes,
            dtype,
            self.inner.nranks,
            self.topology(transport),
        );
        if let Some(max) = backend.max_channels(transport) {
            c.nchannels = c.nchannels.clamp(1, max);
        }
        if c.algo == Algorithm::Direct
            && let Some(max) = backend.max_direct_channels(transport)
        {
            c.nchannels = c.nchannels.clamp(1, max);
        }
        if let Some(max) = backend.max_chunk_bytes(c.proto) {
            c.chunk_elems = c.chunk_elems.min((max / dtype.size() as u64).max(1));
        }
        c
    }

    /// nccl-tests' message size of `a`, which the tuner's tables are keyed by.
    fn message_bytes(&self, a: &CollArgs) -> u64 {
        let n = u64::from(self.inner.nranks);
        let esize = a.dtype.size() as u64;
        match a.kind {
            CollKind::AllGather
            | CollKind::ReduceScatter
            | CollKind::AllToAll
            | CollKind::Gather
            | CollKind::Scatter => a.count * n * esize,
            // Every rank must choose alike, and an AlltoAllv's totals differ between ranks
            // (8191 bytes on one and 8193 on the other got 2 and 3 LL channels, and hung): it
            // is tuned like a send/receive group, at one size for all.
            CollKind::AllToAllv => P2P_TUNING_BYTES,
            _ => a.count * esize,
        }
    }

    /// The algorithm, protocol, channels and chunk a plan for `kind` moving `bytes` (per rank,
    /// as nccl-tests counts them) of `dtype` runs with: oxccl's tuner, then what a tuner plugin
    /// changes (one-shot kernels and zero-copy plans, which the choice may replace, aside).
    pub fn tuning(&self, kind: CollKind, bytes: u64, dtype: DataType) -> Result<Choice> {
        let c = self.connected()?;
        Ok(self
            .steered(&c, kind, bytes, dtype)
            .unwrap_or_else(|| self.choose(kind, bytes, dtype, &c.transport)))
    }

    /// The choice a tuner plugin (`NCCL_TUNER_PLUGIN`) makes for `kind` moving `bytes`, where
    /// one is loaded and it changes oxccl's; `None` otherwise. It replaces one-shot kernels and
    /// zero-copy plans too, as a forced algorithm does.
    fn steered(
        &self,
        c: &Connected<B>,
        kind: CollKind,
        bytes: u64,
        dtype: DataType,
    ) -> Option<Choice> {
        let plugin = c.tuner_plugin.as_ref()?;
        let ours = self.choose(kind, bytes, dtype, &c.transport);
        let candidates: Vec<(Algorithm, Protocol)> = plan::algorithms_for(kind)
            .iter()
            .filter(|&&a| a != Algorithm::Direct)
            .flat_map(|&a| [Protocol::Ll, Protocol::Ll128, Protocol::Simple].map(|p| (a, p)))
            .collect();
        let steer = plugin.steer(
            kind,
            bytes,
            self.inner.nranks,
            (ours.algo, ours.proto),
            ours.nchannels,
            &candidates,
        );
        if !steer.any() {
            return None;
        }
        let (algo, proto) = steer.algo_proto.unwrap_or((ours.algo, ours.proto));
        let forced = Tuner::with(Some(algo), Some(proto));
        let mut choice = self.choose_with(&forced, kind, bytes, dtype, &c.transport);
        if let Some(n) = steer.nchannels {
            let max = self
                .inner
                .backend
                .max_channels(&c.transport)
                .unwrap_or(plan::tags::MAX_CHANNELS);
            choice.nchannels = n.clamp(1, max);
        }
        debug!(target: "oxccl::tuning", "rank {} {:?} {} bytes: tuner plugin chose {:?}/{:?} x{} (oxccl: {:?}/{:?} x{})",
            self.inner.rank, kind, bytes, choice.algo, choice.proto, choice.nchannels,
            ours.algo, ours.proto, ours.nchannels);
        Some(choice)
    }

    /// Whether this is a one-rank communicator whose data-only operations are plain copies on
    /// the stream, without a kernel (NCCL does the same); a synchronous backend returns no
    /// event for a copy, so it runs plans.
    fn single_rank_copies(&self) -> bool {
        self.inner.nranks == 1 && !self.inner.backend.synchronous_api()
    }

    /// Bytes to copy when `a` runs on a single rank and its output is its input. `None`: a plan
    /// must run (PreMulSum scales, AlltoAllv moves blocks, or no [`Self::single_rank_copies`]).
    fn single_rank_copy(&self, a: &CollArgs) -> Option<u64> {
        (self.single_rank_copies()
            && !matches!(a.op, RedOp::PreMulSum(_))
            && a.kind != CollKind::AllToAllv)
            .then(|| a.count * a.dtype.size() as u64)
    }

    /// Queues a copy of `bytes` bytes from `src` to `dst` on `stream`; nothing when they are the
    /// same buffer or empty.
    ///
    /// # Safety
    /// Both ranges are valid for `bytes` bytes until the copy has run.
    unsafe fn copy_on_stream(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: u64,
        stream: &B::Stream,
    ) -> Result<()> {
        if dst == src || bytes == 0 {
            return Ok(());
        }
        let inner = &self.inner;
        // SAFETY: the caller's contract.
        unsafe {
            inner
                .backend
                .memcpy_async(inner.device, dst, src, bytes as usize, stream)
        }
    }

    /// The one-shot variant `a` runs on, if any: an operation the kernels implement, a
    /// communicator small enough, the tuner's word, and a message the backend's kernels take.
    fn one_shot_variant(&self, a: &CollArgs, transport: &B::Transport) -> Option<Variant> {
        let inner = &self.inner;
        let bytes = a.count * a.dtype.size() as u64;
        if !one_shot::supports(a.kind)
            || a.layout.is_some()
            || !(2..=one_shot::MAX_RANKS).contains(&inner.nranks)
        {
            return None;
        }
        let variant =
            inner
                .tuner
                .one_shot(a.kind, bytes, inner.nranks, self.topology(transport))?;
        (bytes <= inner.backend.one_shot_bytes(transport, variant)).then_some(variant)
    }

    /// Numbers, records, checks (in check mode) and launches a collective of a call, with its
    /// profiler events' `prof`.
    fn launch_coll(
        &self,
        a: &CollArgs,
        stream: &B::Stream,
        prof: LaunchProfile<'_>,
    ) -> Result<Option<Waiter>> {
        let c = self.connected()?;
        let seq = self.inner.coll_seq.fetch_add(1, Ordering::Relaxed);
        let log = &self.inner.op_log;
        let slot = log.issue_coll(seq, a, stream);
        let r = if log.check() {
            check::run(&c.bootstrap, seq, a)
        } else {
            Ok(())
        };
        let r = r.and_then(|()| self.launch_coll_as(&c, seq, a, stream, prof));
        log.track(Some((slot, slot)), r, stream)
    }

    fn launch_coll_as(
        &self,
        c: &Connected<B>,
        seq: u64,
        a: &CollArgs,
        stream: &B::Stream,
        prof: LaunchProfile<'_>,
    ) -> Result<Option<Waiter>> {
        let inner = &self.inner;
        let n = inner.nranks as u64;
        let empty = match &a.layout {
            Some(l) => l.send_counts.iter().chain(&l.recv_counts).all(|&c| c == 0),
            None => a.count == 0,
        };
        if empty {
            return Ok(None);
        }
        if let Some(bytes) = self.single_rank_copy(a) {
            // SAFETY: `collective`'s caller guarantees both buffers hold `bytes` bytes until
            // the copy has run.
            unsafe { self.copy_on_stream(a.recv, a.send, bytes, stream) }?;
            return Ok(None);
        }
        let bytes = self.message_bytes(a);
        let steered = self.steered(c, a.kind, bytes, a.dtype);
        if steered.is_none()
            && let Some(variant) = self.one_shot_variant(a, &c.transport)
        {
            let op = OneShot {
                variant,
                kind: a.kind,
                dtype: a.dtype,
                reduction: Reduction::lower(a.op, inner.nranks as usize),
                count: a.count,
                send: a.send,
                recv: a.recv,
            };
            debug!(target: "oxccl::coll", "rank {} {:?} count {} {} one-shot {:?} seq {}",
                inner.rank, a.kind, a.count, a.dtype.name(), variant, seq);
            // One channel, timed on the host (`ChannelTimes::spans`).
            let _times = prof.channel_times(None);
            let _launch = self.profile_kernel_launch(c, prof.group_api, stream);
            // SAFETY: `collective`'s caller guarantees the buffers stay valid until the op has
            // run; `one_shot_proto` checked that the kernels take this message.
            unsafe {
                inner
                    .backend
                    .launch_one_shot(stream, &c.transport, &op, &inner.abort)
            }?;
            return Ok(None);
        }
        let choice = steered.unwrap_or_else(|| self.choose(a.kind, bytes, a.dtype, &c.transport));
        let req = CollRequest {
            kind: a.kind,
            rank: inner.rank,
            nranks: inner.nranks,
            count: a.count,
            root: a.root,
            layout: a.layout.clone(),
            dtype: a.dtype,
            reduction: Reduction::lower(a.op, inner.nranks as usize),
            seq,
            algo: choice.algo,
            proto: choice.proto,
            nchannels: choice.nchannels,
            chunk_elems: choice.chunk_elems,
            hosts: c.hosts.clone(),
        };
        let block = a.count.saturating_mul(a.dtype.size() as u64);
        let topo = self.topology(&c.transport);
        // Across processes, only buffers of windows mapped at one address on every rank may be
        // read by peers, at their aliases there; the plan is wrapped on every rank alike once
        // the communicator has such windows (see `SharedBuffers::ever`).
        let shared = (!c.one_process)
            .then(|| lock(&c.shared_buffers))
            .filter(|s| s.ever);
        let shared_ever = shared.is_some();
        let aliases = match shared {
            Some(s) => {
                let (send_elems, recv_elems) = self.buffer_elems(a)?;
                let esize = a.dtype.size() as u64;
                // `validate` bounded both products below isize::MAX.
                s.aliases([(a.send, send_elems * esize), (a.recv, recv_elems * esize)])
            }
            None => None,
        };
        // An AlltoAll whose buffers overlap: each receive must wait for the sends before it.
        let all_to_all_overlap = a.kind == CollKind::AllToAll && {
            let span = block.saturating_mul(n);
            byte_ranges_cross([(a.send, span, false), (a.recv, span, true)].into_iter())
        };
        let zero_copy = steered.is_none()
            && (c.one_process || shared_ever)
            && inner.backend.zero_copy()
            && plan::zero_copy::handles(&req)
            && (2..=u64::from(plan::zero_copy::MAX_RANKS)).contains(&n)
            // Peers' buffers are read directly: no pair may meet through host memory.
            && !matches!(topo, Topology::MultiNode { .. })
            && inner.tuner.zero_copy(a.kind, bytes, inner.nranks, topo);
        // A zero-copy AlltoAll keeps its own block's copy apart too (`zero_copy::wrap`).
        let copies_apart = match a.kind {
            CollKind::AllToAll => true,
            CollKind::Scatter | CollKind::Gather => !zero_copy,
            _ => false,
        } && inner.tuner.copies_apart(block, topo);
        // Only a FIFO AlltoAll splits; in place each receive waits for the sends before it.
        let split = (a.kind == CollKind::AllToAll
            && !zero_copy
            && inner
                .tuner
                .split_directions(block, all_to_all_overlap, topo))
        .then(|| all_to_all_overlap.then_some(inner.rank));
        // A zero-copy AlltoAll swaps elements pairwise, which is safe in place but not when the
        // buffers overlap otherwise: then this rank hides them and every rank falls back.
        // Whether to wrap must not depend on one rank's buffers (all ranks wrap alike).
        let exposed = zero_copy
            && !(all_to_all_overlap && a.send != a.recv)
            && if c.one_process {
                let backend = &inner.backend;
                [a.send, a.recv]
                    .iter()
                    .all(|&p| p == 0 || backend.exposable(p))
            } else {
                aliases.is_some()
            };
        let key = || {
            let plain = a.layout.is_none() && req.reduction.pre_scale.is_none();
            plain.then_some(PlanKey::Coll(CollPlanKey {
                kind: a.kind,
                count: a.count,
                root: a.root,
                dtype: a.dtype,
                reduce: (req.reduction.op, req.reduction.post_div),
                choice,
                zero_copy,
                exposed,
                copies_apart,
                split,
            }))
        };
        let work = inner.plans.get_or_build(key, || {
            let mut work = plan::build_coll(&req)?;
            if copies_apart {
                plan::local_copies_apart(&mut work);
            }
            if let Some(overlap) = split {
                plan::split_directions(&mut work, overlap);
            }
            if zero_copy {
                work = plan::zero_copy::wrap(&req, work);
                work.exposed = exposed;
            }
            Ok(work)
        })?;
        // The aliases name the same memory, so the fallback branch may use them too.
        let [send, recv] = match aliases {
            Some(al) if zero_copy => al,
            _ => [a.send, a.recv],
        };
        debug!(target: "oxccl::coll", "rank {} {:?} count {} {} {:?}/{:?} x{} seq {} zero-copy {} exposed {}",
            inner.rank, a.kind, a.count, a.dtype.name(), choice.algo, choice.proto, choice.nchannels, seq,
            zero_copy, work.exposed);
        // SAFETY: `collective`'s caller guarantees the buffers stay valid until the op has run.
        unsafe { self.launch_work(c, work, vec![send, recv, 0], stream, prof) }
    }

    /// Runs a caller-built plan as one collective (custom algorithms such as MSCCL's).
    ///
    /// `build` receives the collective sequence number, identical on every rank, from which
    /// message tags must be derived (see [`plan::coll_tag`]), and returns this rank's plan over
    /// the buffer table `[send, recv, scratch]`. Inside a group it runs at `group_end`.
    ///
    /// # Safety
    /// `send` and `recv` are valid backend memory for every region the plan touches until the
    /// operation has run.
    pub unsafe fn run_plan(
        &self,
        build: Box<dyn FnOnce(u64) -> Result<WorkDesc> + Send>,
        send: DevicePtr,
        recv: DevicePtr,
        stream: &B::Stream,
    ) -> Result<()> {
        let r = self.connected().and_then(|_| {
            run_or_defer(Box::new(PendingPlan {
                comm: self.clone(),
                build,
                buffers: [send, recv],
                stream: stream.clone(),
            }))
        });
        if let Err(e) = &r {
            group::record_error(e);
        }
        r
    }

    /// Numbers, records and launches a caller-built plan.
    fn launch_plan(
        &self,
        build: Box<dyn FnOnce(u64) -> Result<WorkDesc> + Send>,
        buffers: [DevicePtr; 2],
        stream: &B::Stream,
    ) -> Result<Option<Waiter>> {
        let c = self.connected()?;
        let seq = self.inner.coll_seq.fetch_add(1, Ordering::Relaxed);
        let slot = self.inner.op_log.issue_plan(seq, stream);
        let r = self.launch_plan_as(&c, seq, build, buffers, stream);
        self.inner.op_log.track(Some((slot, slot)), r, stream)
    }

    fn launch_plan_as(
        &self,
        c: &Connected<B>,
        seq: u64,
        build: Box<dyn FnOnce(u64) -> Result<WorkDesc> + Send>,
        [send, recv]: [DevicePtr; 2],
        stream: &B::Stream,
    ) -> Result<Option<Waiter>> {
        let work = Arc::new(build(seq)?);
        // SAFETY: `run_plan`'s caller guarantees the buffers stay valid until the op has run.
        unsafe {
            self.launch_work(
                c,
                work,
                vec![send, recv, 0],
                stream,
                LaunchProfile::default(),
            )
        }
    }

    /// Numbers, records and launches a communicator's sends and receives of one group, with
    /// their profiler events' `prof`.
    fn launch_p2p(&self, ops: &[PendingP2p<B>], prof: LaunchProfile<'_>) -> Result<Option<Waiter>> {
        let c = self.connected()?;
        let inner = &self.inner;
        let mut seqs = inner.p2p_seq.lock().unwrap_or_else(|p| p.into_inner());
        let planned: Vec<P2pOp> = ops
            .iter()
            .map(|o| {
                let table = match o.dir {
                    P2pDir::Send => &mut seqs.send,
                    P2pDir::Recv => &mut seqs.recv,
                };
                let peer_seq = table[o.peer as usize];
                table[o.peer as usize] += 1;
                P2pOp {
                    dir: o.dir,
                    peer: o.peer,
                    count: o.bytes,
                    peer_seq,
                }
            })
            .collect();
        drop(seqs);
        let stream = &ops[0].stream;
        let slots = inner.op_log.issue_p2p(&planned, stream);
        let r = self.launch_p2p_as(&c, ops, &planned, prof);
        inner.op_log.track(slots, r, stream)
    }

    fn launch_p2p_as(
        &self,
        c: &Connected<B>,
        ops: &[PendingP2p<B>],
        planned: &[P2pOp],
        prof: LaunchProfile<'_>,
    ) -> Result<Option<Waiter>> {
        let inner = &self.inner;
        let self_copies = self
            .single_rank_copies()
            .then(|| plan::only_self_copies(inner.rank, planned))
            .flatten();
        if let Some(copies) = self_copies {
            // A one-rank group is copies only: the copy engine does them faster than one
            // kernel channel per message, and with no launch.
            for (s, r) in copies {
                let (from, to) = (&ops[s], &ops[r]);
                // SAFETY: `p2p`'s caller guarantees both buffers hold `bytes` bytes until the
                // copy has run.
                unsafe { self.copy_on_stream(to.buf, from.buf, from.bytes, &ops[0].stream) }?;
            }
            return Ok(None);
        }
        let choice = self.p2p_choice(c);
        let topo = self.topology(&c.transport);
        let shape = inner.tuner.p2p_shape(
            inner.nranks,
            topo,
            &choice,
            inner.backend.max_chunk_bytes(Protocol::Ll),
        );
        let largest = ops.iter().map(|o| o.bytes).max().unwrap_or(0);
        let overlap = sends_overlap_receives(ops);
        let split = if !inner.tuner.split_directions(largest, overlap, topo) {
            plan::Split::No
        } else if overlap {
            plan::Split::Ordered
        } else {
            plan::Split::Unordered
        };
        let group = plan::P2pGroup {
            rank: inner.rank,
            nranks: inner.nranks,
            ops: planned,
            dtype: DataType::Uint8,
            shape,
            split,
        };
        let work = inner.plans.get_or_build(
            || Some(PlanKey::P2p(plan::p2p_plan_key(group))),
            || Ok(plan::build_p2p(group)),
        )?;
        let mut buffers = vec![0, 0, 0];
        buffers.extend(ops.iter().map(|o| o.buf));
        // SAFETY: `p2p`'s caller guarantees the buffers stay valid until the op has run.
        unsafe { self.launch_work(c, work, buffers, &ops[0].stream, prof) }
    }

    /// The channels and chunks of every send/receive plan: both ends of a message must chunk
    /// it identically, and they only share the message itself, so the choice must not depend
    /// on the rest of either side's group.
    fn p2p_choice(&self, c: &Connected<B>) -> Choice {
        self.choose(
            CollKind::SendRecv,
            P2P_TUNING_BYTES,
            DataType::Uint8,
            &c.transport,
        )
    }

    /// Connects the peers `work` reaches that are still unconnected (`Backend::connect_on_use`)
    /// and launches it on `stream` with `buffers`, with the profiler events' `prof` of its calls.
    ///
    /// # Safety
    /// `buffers` stay valid for the plan's regions until the operation has run.
    unsafe fn launch_work(
        &self,
        c: &Connected<B>,
        work: Arc<WorkDesc>,
        buffers: Vec<DevicePtr>,
        stream: &B::Stream,
        prof: LaunchProfile<'_>,
    ) -> Result<Option<Waiter>> {
        let inner = &self.inner;
        inner
            .backend
            .connect_on_use(&c.transport, &work, &c.bootstrap, &inner.abort)?;
        let channel_times = prof.channel_times(Some(&work));
        let launch = Launch {
            channel_times,
            // After the task events started (with KernelCh events, in `channel_times`).
            proxy_parents: prof.proxy_parents(),
            work,
            buffers,
            transport: c.transport.clone(),
            abort: inner.abort.clone(),
        };
        let kernel_launch = self.profile_kernel_launch(c, prof.group_api, stream);
        // SAFETY: the caller's contract.
        let done = unsafe { inner.backend.launch(stream, launch)? };
        drop(kernel_launch);
        Ok(self.waiter(done))
    }

    /// For synchronous-API backends, a closure waiting for the operation whose completion
    /// event `launch` returned. It waits for that operation only: ranks of one process may
    /// share a stream, and waiting for the stream would wait for other ranks' later operations.
    fn waiter(&self, done: Option<B::Event>) -> Option<Waiter> {
        let done = done?;
        let (backend, abort) = (self.inner.backend.clone(), self.inner.abort.clone());
        Some(Box::new(move || {
            backend.event_synchronize(&done)?;
            // Failed operations record their error on the communicator.
            if let Some(e) = abort.error() {
                return Err(e);
            }
            abort.check()
        }))
    }
}

/// Runs `op` now (waiting for synchronous backends) or records it in the open group.
fn run_or_defer(op: Box<dyn Deferred>) -> Result<()> {
    match group::defer(op) {
        None => Ok(()),
        Some(op) => match op.launch(Vec::new())? {
            Some(wait) => wait(),
            None => Ok(()),
        },
    }
}

struct PendingColl<B: Backend> {
    comm: Communicator<B>,
    args: CollArgs,
    stream: B::Stream,
    /// The call's profiler events, when a profiler plugin is loaded.
    profile: Option<CallEvents>,
}

impl<B: Backend> Deferred for PendingColl<B> {
    fn comm_key(&self) -> usize {
        Arc::as_ptr(&self.comm.inner) as *const () as usize
    }
    fn launch(self: Box<Self>, _merged: Vec<Box<dyn Deferred>>) -> Result<Option<Waiter>> {
        let this = *self;
        let Some(call) = this.profile else {
            return this
                .comm
                .launch_coll(&this.args, &this.stream, LaunchProfile::default());
        };
        let group_api = call.group_api();
        let events = this.comm.profile_coll_launch(&this.args, call);
        let prof = events.as_ref().map(|e| e.profile(group_api));
        let r = this
            .comm
            .launch_coll(&this.args, &this.stream, prof.unwrap_or_default());
        profile::until_done(r, events, &this.comm.inner.backend, &this.stream)
    }
    fn is_p2p(&self) -> bool {
        false
    }
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
}

/// Whether a receive buffer of the group overlaps one of its send buffers: its receives then
/// stay behind the sends before them (`plan::Split::Ordered`), as an in-place exchange needs.
fn sends_overlap_receives<B: Backend>(ops: &[PendingP2p<B>]) -> bool {
    byte_ranges_cross(ops.iter().map(|o| (o.buf, o.bytes, o.dir == P2pDir::Recv)))
}

/// Whether a range of one side overlaps a range of the other, among (start, bytes, side)s.
fn byte_ranges_cross(ranges: impl Iterator<Item = (DevicePtr, u64, bool)>) -> bool {
    let mut spans: Vec<(u64, u64, bool)> = ranges
        .filter(|r| r.1 > 0)
        .map(|(start, bytes, side)| (start, start.saturating_add(bytes), side))
        .collect();
    spans.sort_unstable_by_key(|s| s.0);
    // In order of start, a range overlaps an earlier one iff it starts before that one's end.
    let mut end = [0u64; 2];
    for (start, stop, side) in spans {
        if start < end[usize::from(!side)] {
            return true;
        }
        end[usize::from(side)] = end[usize::from(side)].max(stop);
    }
    false
}

struct PendingP2p<B: Backend> {
    comm: Communicator<B>,
    dir: P2pDir,
    buf: DevicePtr,
    /// Elements, of `dtype`.
    count: u64,
    dtype: DataType,
    bytes: u64,
    peer: u32,
    stream: B::Stream,
    /// The call's profiler events, when a profiler plugin is loaded.
    profile: Option<CallEvents>,
}

impl<B: Backend> Deferred for PendingP2p<B> {
    fn comm_key(&self) -> usize {
        Arc::as_ptr(&self.comm.inner) as *const () as usize
    }
    fn launch(self: Box<Self>, merged: Vec<Box<dyn Deferred>>) -> Result<Option<Waiter>> {
        let mut ops = vec![*self];
        for m in merged {
            let p = m.into_any().downcast::<PendingP2p<B>>().map_err(|_| {
                Error::Internal("mixed backends in one communicator's group".into())
            })?;
            ops.push(*p);
        }
        let comm = ops[0].comm.clone();
        // Calls outside a group launch one by one: a launch has one GroupApi event at most.
        let group_api = ops
            .iter()
            .find_map(|o| o.profile.as_ref().map(|p| p.group_api()));
        let events = comm.profile_p2p_launch(&mut ops);
        let prof = match &events {
            Some(e) => e.profile(group_api.unwrap_or(0)),
            None => LaunchProfile::default(),
        };
        let r = comm.launch_p2p(&ops, prof);
        profile::until_done(r, events, &comm.inner.backend, &ops[0].stream)
    }
    fn is_p2p(&self) -> bool {
        true
    }
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
}

/// A caller-built plan, launched in call order like a collective.
struct PendingPlan<B: Backend> {
    comm: Communicator<B>,
    build: Box<dyn FnOnce(u64) -> Result<WorkDesc> + Send>,
    buffers: [DevicePtr; 2],
    stream: B::Stream,
}

impl<B: Backend> Deferred for PendingPlan<B> {
    fn comm_key(&self) -> usize {
        Arc::as_ptr(&self.comm.inner) as *const () as usize
    }
    fn launch(self: Box<Self>, _merged: Vec<Box<dyn Deferred>>) -> Result<Option<Waiter>> {
        let this = *self;
        this.comm
            .launch_plan(this.build, this.buffers, &this.stream)
    }
    fn is_p2p(&self) -> bool {
        false
    }
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
}

/// A blocking init started inside a group: `group_end` waits for it.
pub(super) struct PendingInit<B: Backend>(pub(super) Communicator<B>);

impl<B: Backend> Deferred for PendingInit<B> {
    fn comm_key(&self) -> usize {
        Arc::as_ptr(&self.0.inner) as *const () as usize
    }
    fn launch(self: Box<Self>, _merged: Vec<Box<dyn Deferred>>) -> Result<Option<Waiter>> {
        let comm = self.0;
        Ok(Some(Box::new(move || comm.wait_ready())))
    }
    fn is_p2p(&self) -> bool {
        false
    }
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::byte_ranges_cross;
    use crate::backend::Backend;
    use crate::comm::group;
    use crate::datatype::DataType;
    use crate::plan::P2pDir;

    #[test]
    fn zero_byte_sends_and_receives_move_nothing_and_wait_for_nobody() {
        // A regression waits forever for the missing partner: fail instead of hanging.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(exchange_beside_unmatched_empty_ops()));
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the group with unmatched empty sends and receives did not end");
        assert_eq!(got, vec![[11; 3], [10; 3]]);
    }

    /// Two host ranks swap three elements in a group where rank 0 also posts an empty send and
    /// receive that rank 1 does not match; what each received.
    fn exchange_beside_unmatched_empty_ops() -> Vec<[i32; 3]> {
        crate::testing::on_host_ranks(
            2,
            |_| {},
            |rank, comm, stream| {
                let peer = 1 - rank as u32;
                let send = [rank as i32 + 10; 3];
                let mut recv = [0i32; 3];
                group::group_start().unwrap();
                // SAFETY: the buffers outlive the group, which the host backend completes
                // before its end returns; the 0-element ones name no memory.
                unsafe {
                    // Only rank 0 posts an empty send and receive: rank 1 has no partner for
                    // them, so they must not wait for one.
                    if rank == 0 {
                        comm.p2p(P2pDir::Send, 0, 0, DataType::Int32, peer, stream)
                            .unwrap();
                        comm.p2p(P2pDir::Recv, 0, 0, DataType::Int32, peer, stream)
                            .unwrap();
                    }
                    comm.p2p(
                        P2pDir::Send,
                        send.as_ptr() as u64,
                        3,
                        DataType::Int32,
                        peer,
                        stream,
                    )
                    .unwrap();
                    comm.p2p(
                        P2pDir::Recv,
                        recv.as_mut_ptr() as u64,
                        3,
                        DataType::Int32,
                        peer,
                        stream,
                    )
                    .unwrap();
                }
                group::group_end().unwrap();
                comm.backend().stream_synchronize(stream).unwrap();
                recv
            },
        )
    }

    #[test]
    fn byte_ranges_cross_only_between_sides() {
        let cross = |r: &[(u64, u64, bool)]| byte_ranges_cross(r.iter().copied());
        assert!(!cross(&[]));
        // Disjoint, touching, and empty ranges do not cross.
        assert!(!cross(&[(0, 16, false), (16, 16, true)]));
        assert!(!cross(&[(32, 16, true), (0, 32, false)]));
        assert!(!cross(&[(0, 64, false), (8, 0, true)]));
        // Ranges of one side may overlap each other.
        assert!(!cross(&[(0, 64, false), (8, 8, false), (64, 8, true)]));
        // Overlap in any order, the same start, one inside the other, the last byte.
        assert!(cross(&[(0, 16, false), (15, 16, true)]));
        assert!(cross(&[(15, 16, true), (0, 16, false)]));
        assert!(cross(&[(100, 8, true), (100, 8, false)]));
        assert!(cross(&[(0, 1000, true), (10, 1, false), (2000, 8, false)]));
        assert!(cross(&[(0, 8, false), (0, 100, false), (99, 1, true)]));
    }
}
