//! The communicator: init (blocking, non-blocking, in a group, all-in-one-process), split,
//! shrink, finalize, destroy, abort, and every operation's validation and launch.

pub mod group;

use crate::abort::AbortFlag;
use crate::backend::{Backend, ConnectContext, DevicePtr, Launch};
use crate::bootstrap::{Bootstrap, BootstrapOptions, UniqueId};
use crate::config::CommConfig;
use crate::datatype::{DataType, RedOp, Reduction, ScalarSource};
use crate::error::{Error, Result};
use crate::plan::tuner::{Topology, Tuner};
use crate::plan::{self, AllToAllvLayout, CollKind, CollRequest, P2pDir, P2pOp};
use group::{Deferred, Waiter};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use tracing::{debug, info};

/// `ncclSplit` color meaning "not in any new communicator".
pub const SPLIT_NOCOLOR: i32 = -1;

/// Number of built-in `ncclRedOp_t` values; user-created operators start here.
pub const NUM_BUILTIN_OPS: i32 = 5;

/// Message size the tuner is asked about for every send/recv group (see `launch_p2p`).
const P2P_TUNING_BYTES: u64 = 1 << 30;

/// Bootstrap tags used by communicator management (top bit free for the bootstrap's own use).
const TAG_SPLIT: u64 = 0x5350_0000_0000;
/// Bootstrap tags of `shrink` (see there).
const TAG_SHRINK: u64 = 0x5348_0000_0000;

/// A communicator of one rank, over backend `B`. Cloning shares it.
pub struct Communicator<B: Backend> {
    inner: Arc<Inner<B>>,
}

impl<B: Backend> Clone for Communicator<B> {
    fn clone(&self) -> Self {
        Communicator {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<B: Backend> {
    backend: Arc<B>,
    rank: u32,
    nranks: u32,
    device: i32,
    config: CommConfig,
    id: UniqueId,
    abort: AbortFlag,
    state: Mutex<State<B>>,
    state_changed: Condvar,
    coll_seq: AtomicU64,
    splits: AtomicU64,
    shrinks: AtomicU64,
    p2p_seq: Mutex<PeerSeq>,
    red_ops: Mutex<Vec<Option<(DataType, ScalarSource)>>>,
    tuner: Tuner,
}

#[derive(Default)]
struct PeerSeq {
    send: Vec<u64>,
    recv: Vec<u64>,
}

enum State<B: Backend> {
    Initializing,
    Ready(Arc<Connected<B>>),
    Failed(Error),
    // Keeps the connections open until destroy, for operations still in flight.
    Finalized(
        #[expect(dead_code, reason = "held only to keep connections alive")] Arc<Connected<B>>,
    ),
    Destroyed,
    Aborted,
}

struct Connected<B: Backend> {
    bootstrap: Bootstrap,
    transport: Arc<B::Transport>,
}

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
    /// `ncclCommInitRank`: joins rank `rank` of `nranks` through `id` on `device`.
    ///
    /// Blocking configs return once every rank has connected. Non-blocking configs, and calls
    /// inside a group, return at once; [`Communicator::status`] reports `InProgress` until done.
    pub fn init_rank(
        backend: Arc<B>,
        nranks: usize,
        id: UniqueId,
        rank: usize,
        device: i32,
        config: CommConfig,
    ) -> Result<Communicator<B>> {
        crate::logging::init_from_env();
        if nranks == 0 || nranks > u32::MAX as usize / 2 {
            return Err(Error::arg(format!("invalid number of ranks {nranks}")));
        }
        if rank >= nranks {
            return Err(Error::arg(format!(
                "invalid rank {rank}: must be in 0..{nranks}"
            )));
        }
        let ndev = backend.device_count()?;
        if device < 0 || device as usize >= ndev {
            return Err(Error::arg(format!(
                "invalid device {device}: {} backend has {ndev} devices",
                backend.name()
            )));
        }
        let comm = Communicator {
            inner: Arc::new(Inner {
                backend,
                rank: rank as u32,
                nranks: nranks as u32,
                device,
                id,
                abort: AbortFlag::new(),
                state: Mutex::new(State::Initializing),
                state_changed: Condvar::new(),
                coll_seq: AtomicU64::new(0),
                splits: AtomicU64::new(0),
                shrinks: AtomicU64::new(0),
                p2p_seq: Mutex::new(PeerSeq {
                    send: vec![0; nranks],
                    recv: vec![0; nranks],
                }),
                red_ops: Mutex::new(Vec::new()),
                tuner: Tuner::from_env(),
                config,
            }),
        };
        let in_group = group::group_depth() > 0;
        if comm.inner.config.blocking && !in_group {
            comm.connect()?;
            return Ok(comm);
        }
        let worker = comm.clone();
        std::thread::Builder::new()
            .name(format!("oxccl-init-r{rank}"))
            .spawn(move || {
                let _ = worker.connect();
            })
            .map_err(|e| Error::io("spawning the init thread", e))?;
        if in_group && comm.inner.config.blocking {
            let _ = group::defer(Box::new(PendingInit(comm.clone())));
        }
        Ok(comm)
    }

    /// `ncclCommInitAll`: one communicator per device, all in this process.
    pub fn init_all(backend: Arc<B>, devices: &[i32]) -> Result<Vec<Communicator<B>>> {
        if devices.is_empty() {
            return Err(Error::arg("ncclCommInitAll needs at least one device"));
        }
        let id = UniqueId::generate(&BootstrapOptions::from_env())?;
        let n = devices.len();
        std::thread::scope(|s| {
            let handles: Vec<_> = devices
                .iter()
                .enumerate()
                .map(|(rank, &dev)| {
                    let backend = backend.clone();
                    let mut config = CommConfig::from_env();
                    config.blocking = true;
                    s.spawn(move || Communicator::init_rank(backend, n, id, rank, dev, config))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(Error::Internal("init thread panicked".into())))
                })
                .collect()
        })
    }

    /// Runs the rendezvous and connects the transport; records the outcome in the state.
    fn connect(&self) -> Result<()> {
        let inner = &self.inner;
        let result = (|| -> Result<Arc<Connected<B>>> {
            inner.backend.set_device(inner.device)?;
            let mut opts = BootstrapOptions::from_env();
            opts.init_timeout = inner.config.init_timeout;
            let bootstrap =
                Bootstrap::init(&inner.id, inner.rank, inner.nranks, &opts, &inner.abort)?;
            let transport = inner.backend.connect(&ConnectContext {
                bootstrap: &bootstrap,
                abort: &inner.abort,
                device: inner.device,
                timeout: inner.config.init_timeout,
            })?;
            Ok(Arc::new(Connected {
                bootstrap,
                transport: Arc::new(transport),
            }))
        })();
        let mut state = inner.state.lock().unwrap_or_else(|p| p.into_inner());
        let out = match result {
            Ok(c) => {
                if matches!(*state, State::Initializing) {
                    info!(target: "oxccl::init", "rank {} of {} ready on {} device {} ({})",
                        inner.rank, inner.nranks, inner.backend.name(), inner.device,
                        inner.config.comm_name.as_deref().unwrap_or("unnamed"));
                    *state = State::Ready(c);
                }
                Ok(())
            }
            Err(e) => {
                if matches!(*state, State::Initializing) {
                    *state = State::Failed(e.clone());
                }
                Err(e)
            }
        };
        inner.state_changed.notify_all();
        out
    }

    /// Blocks until a pending init finished; returns its outcome.
    pub fn wait_ready(&self) -> Result<()> {
        let mut state = self.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        while matches!(*state, State::Initializing) {
            state = self
                .inner
                .state_changed
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
        drop(state);
        self.status()
    }

    /// `ncclCommGetAsyncError`: `Err(InProgress)` while init runs, the first asynchronous failure
    /// (dead peer, network error) once one happened, `Ok` otherwise.
    pub fn status(&self) -> Result<()> {
        let state = self.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        match &*state {
            State::Initializing => Err(Error::InProgress),
            State::Failed(e) => Err(e.clone()),
            _ => match self.inner.abort.error() {
                Some(e) => Err(e),
                None => Ok(()),
            },
        }
    }

    fn connected(&self) -> Result<Arc<Connected<B>>> {
        let state = self.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        let c = match &*state {
            State::Ready(c) => c.clone(),
            State::Initializing => {
                return Err(Error::usage(
                    "communicator is still initializing; poll ncclCommGetAsyncError until it returns ncclSuccess",
                ));
            }
            State::Failed(e) => return Err(e.clone()),
            State::Finalized(_) => return Err(Error::usage("communicator was finalized")),
            State::Destroyed => return Err(Error::usage("communicator was destroyed")),
            State::Aborted => return Err(Error::usage("communicator was aborted")),
        };
        drop(state);
        if let Some(e) = self.inner.abort.error() {
            return Err(e);
        }
        Ok(c)
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.inner.rank as usize
    }
    /// Number of ranks.
    pub fn nranks(&self) -> usize {
        self.inner.nranks as usize
    }
    /// Device this rank runs on.
    pub fn device(&self) -> i32 {
        self.inner.device
    }
    /// The backend.
    pub fn backend(&self) -> &Arc<B> {
        &self.inner.backend
    }
    /// The unique id this communicator was created from (`ncclCommGetUniqueId`).
    pub fn unique_id(&self) -> UniqueId {
        self.inner.id
    }
    /// The configuration it was created with.
    pub fn config(&self) -> &CommConfig {
        &self.inner.config
    }
    /// The abort flag (for tests and the C layer).
    pub fn abort_flag(&self) -> &AbortFlag {
        &self.inner.abort
    }

    /// `ncclCommSplit`: ranks with the same `color` form a new communicator, ordered by `key`
    /// then old rank. `SPLIT_NOCOLOR` takes part but gets `None`. Collective over all ranks.
    pub fn split(
        &self,
        color: i32,
        key: i32,
        config: Option<CommConfig>,
    ) -> Result<Option<Communicator<B>>> {
        if color < SPLIT_NOCOLOR {
            return Err(Error::arg(format!(
                "invalid split color {color}: must be >= 0 or NCCL_SPLIT_NOCOLOR"
            )));
        }
        let c = self.connected()?;
        let split = self.inner.splits.fetch_add(1, Ordering::Relaxed);
        let mut mine = color.to_le_bytes().to_vec();
        mine.extend_from_slice(&key.to_le_bytes());
        let all = c.bootstrap.all_gather(&mine)?;
        if color == SPLIT_NOCOLOR {
            return Ok(None);
        }
        let mut members: Vec<(i32, u32)> = Vec::new();
        for (r, bytes) in all.iter().enumerate() {
            if bytes.len() != 8 {
                return Err(Error::Internal("malformed split message".into()));
            }
            let col = i32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes"));
            let k = i32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
            if col == color {
                members.push((k, r as u32));
            }
        }
        members.sort();
        let ranks: Vec<u32> = members.iter().map(|&(_, r)| r).collect();
        let config = config.unwrap_or_else(|| self.inner.config.clone());
        self.subset(&c, &ranks, TAG_SPLIT + split, config).map(Some)
    }

    /// `ncclCommShrink`: the ranks not in `exclude` form a new communicator, in old rank order.
    /// Only surviving ranks call it; excluded ranks may be dead.
    pub fn shrink(&self, exclude: &[u32], config: Option<CommConfig>) -> Result<Communicator<B>> {
        if exclude.contains(&self.inner.rank) {
            return Err(Error::arg("this rank is in its own exclude list"));
        }
        if let Some(bad) = exclude.iter().find(|&&r| r >= self.inner.nranks) {
            return Err(Error::arg(format!("excluded rank {bad} is out of range")));
        }
        let c = self.connected_or_failed()?;
        // Excluded ranks do not take part, so the tag must not depend on a counter they share:
        // survivors agree on the exclude list and on how many shrinks they did together.
        let shrink = self.inner.shrinks.fetch_add(1, Ordering::Relaxed);
        let excluded = exclude
            .iter()
            .fold(0u64, |h, &r| h.rotate_left(7) ^ u64::from(r));
        let tag = TAG_SHRINK + ((excluded & 0xff_ffff) << 16) + (shrink & 0xffff);
        let ranks: Vec<u32> = (0..self.inner.nranks)
            .filter(|r| !exclude.contains(r))
            .collect();
        let config = config.unwrap_or_else(|| self.inner.config.clone());
        self.subset(&c, &ranks, tag, config)
    }

    /// Shrink must work on a communicator whose peer died: skip the async-error check.
    fn connected_or_failed(&self) -> Result<Arc<Connected<B>>> {
        let state = self.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        match &*state {
            State::Ready(c) => Ok(c.clone()),
            _ => {
                drop(state);
                self.connected()
            }
        }
    }

    /// Builds a communicator of `ranks` (old rank numbers, in new rank order): the first one
    /// creates a unique id and sends it to the others over the old bootstrap network.
    fn subset(
        &self,
        c: &Connected<B>,
        ranks: &[u32],
        tag: u64,
        config: CommConfig,
    ) -> Result<Communicator<B>> {
        let me = self.inner.rank;
        let new_rank = ranks
            .iter()
            .position(|&r| r == me)
            .ok_or_else(|| Error::Internal("rank missing from its own subset".into()))?;
        let id = if new_rank == 0 {
            let id = UniqueId::generate(&BootstrapOptions::from_env())?;
            for &r in &ranks[1..] {
                c.bootstrap.send(r, tag, &id.0)?;
            }
            id
        } else {
            let bytes = c.bootstrap.recv(ranks[0], tag)?;
            let arr: [u8; 128] = bytes
                .as_slice()
                .try_into()
                .map_err(|_| Error::Internal("malformed unique id from split leader".into()))?;
            UniqueId(arr)
        };
        debug!(target: "oxccl::init", "rank {me} -> rank {new_rank} of {} in a new communicator", ranks.len());
        Communicator::init_rank(
            self.inner.backend.clone(),
            ranks.len(),
            id,
            new_rank,
            self.inner.device,
            config,
        )
    }

    /// `ncclCommFinalize`: no new operations; outstanding ones complete.
    pub fn finalize(&self) -> Result<()> {
        let mut state = self.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        match &*state {
            State::Ready(c) => {
                let c = c.clone();
                *state = State::Finalized(c);
                Ok(())
            }
            State::Finalized(_) => Ok(()),
            State::Initializing => Err(Error::usage("communicator is still initializing")),
            State::Failed(e) => Err(e.clone()),
            State::Destroyed => Err(Error::usage("communicator was destroyed")),
            State::Aborted => Err(Error::usage("communicator was aborted")),
        }
    }

    /// `ncclCommDestroy`: releases the connections (peers see a clean close).
    pub fn destroy(&self) -> Result<()> {
        let mut state = self.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        let prev = std::mem::replace(&mut *state, State::Destroyed);
        drop(state);
        match prev {
            State::Destroyed => Err(Error::usage("communicator was already destroyed")),
            State::Initializing => {
                // Let the init thread give up instead of finishing into a destroyed communicator.
                self.inner.abort.abort();
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// `ncclCommAbort`: stops every wait of this communicator and drops its connections.
    /// Local, idempotent, callable from any thread; returns at once.
    pub fn abort(&self) {
        self.inner.abort.abort();
        let mut state = self.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        *state = State::Aborted;
        drop(state);
        self.inner.state_changed.notify_all();
        info!(target: "oxccl::init", "rank {} aborted", self.inner.rank);
    }

    /// `ncclRedOpCreatePreMulSum`: a new operator handle multiplying inputs by `scalar`.
    pub fn create_premul_sum(&self, dtype: DataType, scalar: ScalarSource) -> Result<i32> {
        let mut ops = self.inner.red_ops.lock().unwrap_or_else(|p| p.into_inner());
        let slot = match ops.iter().position(|o| o.is_none()) {
            Some(i) => {
                ops[i] = Some((dtype, scalar));
                i
            }
            None => {
                ops.push(Some((dtype, scalar)));
                ops.len() - 1
            }
        };
        Ok(NUM_BUILTIN_OPS + slot as i32)
    }

    /// `ncclRedOpDestroy`.
    pub fn destroy_red_op(&self, op: i32) -> Result<()> {
        if op < NUM_BUILTIN_OPS {
            return Err(Error::arg(format!(
                "operator {op} is built in and cannot be destroyed"
            )));
        }
        let mut ops = self.inner.red_ops.lock().unwrap_or_else(|p| p.into_inner());
        match ops.get_mut((op - NUM_BUILTIN_OPS) as usize) {
            Some(slot @ Some(_)) => {
                *slot = None;
                Ok(())
            }
            _ => Err(Error::arg(format!(
                "operator {op} was not created on this communicator"
            ))),
        }
    }

    /// Resolves a raw `ncclRedOp_t` for an operation on `dtype`.
    pub fn resolve_op(&self, raw: i32, dtype: DataType) -> Result<RedOp> {
        match raw {
            0 => Ok(RedOp::Sum),
            1 => Ok(RedOp::Prod),
            2 => Ok(RedOp::Max),
            3 => Ok(RedOp::Min),
            4 => Ok(RedOp::Avg),
            r if r >= NUM_BUILTIN_OPS => {
                let ops = self.inner.red_ops.lock().unwrap_or_else(|p| p.into_inner());
                match ops.get((r - NUM_BUILTIN_OPS) as usize) {
                    Some(Some((t, s))) if *t == dtype => Ok(RedOp::PreMulSum(*s)),
                    Some(Some((t, _))) => Err(Error::arg(format!(
                        "operator {r} was created for {} but the operation uses {}",
                        t.name(),
                        dtype.name()
                    ))),
                    _ => Err(Error::arg(format!(
                        "invalid reduction operator {r} (not created on this communicator or destroyed)"
                    ))),
                }
            }
            r => Err(Error::arg(format!("invalid reduction operator {r}"))),
        }
    }

    /// Queues a collective on `stream` (recorded until `group_end` inside a group).
    ///
    /// # Safety
    /// The buffers named in `args` are valid backend memory for the sizes the operation implies
    /// until it has run.
    pub unsafe fn collective(&self, args: CollArgs, stream: &B::Stream) -> Result<()> {
        let r = self.validate(&args).and_then(|()| {
            let op = Box::new(PendingColl {
                comm: self.clone(),
                args,
                stream: stream.clone(),
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
            let bytes = count
                .checked_mul(dtype.size() as u64)
                .ok_or_else(|| Error::arg("count overflows the address space"))?;
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
            run_or_defer(Box::new(PendingP2p {
                comm: self.clone(),
                dir,
                buf,
                bytes,
                peer,
                stream: stream.clone(),
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
        let me = self.inner.rank;
        // Elements of the send and receive buffers this rank touches.
        let (send_elems, recv_elems) = match a.kind {
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
        };
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

    fn topology(&self) -> Topology {
        if self.inner.backend.name() == "host" {
            Topology::Host
        } else {
            Topology::SingleNodeGpu { nvlink: true }
        }
    }

    fn launch_coll(&self, a: &CollArgs, stream: &B::Stream) -> Result<Option<Waiter>> {
        let c = self.connected()?;
        let inner = &self.inner;
        let seq = inner.coll_seq.fetch_add(1, Ordering::Relaxed);
        let n = inner.nranks as u64;
        let empty = match &a.layout {
            Some(l) => l.send_counts.iter().chain(&l.recv_counts).all(|&c| c == 0),
            None => a.count == 0,
        };
        if empty {
            return Ok(None);
        }
        let esize = a.dtype.size() as u64;
        // nccl-tests' message size for each operation, which the tuner's tables are keyed by.
        let bytes = match a.kind {
            CollKind::AllGather | CollKind::ReduceScatter | CollKind::AllToAll => {
                a.count * n * esize
            }
            CollKind::Gather | CollKind::Scatter => a.count * n * esize,
            CollKind::AllToAllv => a
                .layout
                .as_ref()
                .map(|l| l.send_counts.iter().sum::<u64>() * esize)
                .unwrap_or(0),
            _ => a.count * esize,
        };
        let choice = inner
            .tuner
            .choose(a.kind, bytes, a.dtype, inner.nranks, self.topology());
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
        };
        let work = Arc::new(plan::build_coll(&req)?);
        debug!(target: "oxccl::coll", "rank {} {:?} count {} {} {:?}/{:?} x{} seq {}",
            inner.rank, a.kind, a.count, a.dtype.name(), choice.algo, choice.proto, choice.nchannels, seq);
        let launch = Launch {
            work,
            buffers: vec![a.send, a.recv, 0],
            transport: c.transport.clone(),
            abort: inner.abort.clone(),
        };
        // SAFETY: `collective`'s caller guarantees the buffers stay valid until the op has run.
        let done = unsafe { inner.backend.launch(stream, launch)? };
        Ok(self.waiter(done))
    }

    fn launch_p2p(&self, ops: &[PendingP2p<B>]) -> Result<Option<Waiter>> {
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
        // Both ends of a message must chunk it identically, and they only share the message
        // itself: the choice must not depend on the rest of either side's group.
        let choice = inner.tuner.choose(
            CollKind::SendRecv,
            P2P_TUNING_BYTES,
            DataType::Uint8,
            inner.nranks,
            self.topology(),
        );
        let work = Arc::new(plan::build_p2p(
            inner.rank,
            inner.nranks,
            &planned,
            DataType::Uint8,
            choice.nchannels,
            choice.chunk_elems,
        ));
        let mut buffers = vec![0, 0, 0];
        buffers.extend(ops.iter().map(|o| o.buf));
        let launch = Launch {
            work,
            buffers,
            transport: c.transport.clone(),
            abort: inner.abort.clone(),
        };
        let stream = &ops[0].stream;
        // SAFETY: `p2p`'s caller guarantees the buffers stay valid until the op has run.
        let done = unsafe { inner.backend.launch(stream, launch)? };
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
}

impl<B: Backend> Deferred for PendingColl<B> {
    fn comm_key(&self) -> usize {
        Arc::as_ptr(&self.comm.inner) as *const () as usize
    }
    fn launch(self: Box<Self>, _merged: Vec<Box<dyn Deferred>>) -> Result<Option<Waiter>> {
        self.comm.launch_coll(&self.args, &self.stream)
    }
    fn is_p2p(&self) -> bool {
        false
    }
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
}

struct PendingP2p<B: Backend> {
    comm: Communicator<B>,
    dir: P2pDir,
    buf: DevicePtr,
    bytes: u64,
    peer: u32,
    stream: B::Stream,
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
        comm.launch_p2p(&ops)
    }
    fn is_p2p(&self) -> bool {
        true
    }
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
}

/// A blocking init started inside a group: `group_end` waits for it.
struct PendingInit<B: Backend>(Communicator<B>);

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
