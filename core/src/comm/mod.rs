//! The communicator: init (blocking, non-blocking, in a group, all-in-one-process), split,
//! shrink, finalize, destroy, abort, and every operation's validation and launch.

mod check;
pub mod flight;
pub mod group;
mod hang;
pub mod oplog;
mod ops;
mod peer_watch;
mod plan_cache;
mod redop;
mod split;
pub mod symmetric;
mod watchdog;

pub use ops::CollArgs;

use crate::abort::AbortFlag;
use crate::backend::{Backend, ConnectContext};
use crate::bootstrap::{Bootstrap, BootstrapOptions, UniqueId};
use crate::config::CommConfig;
use crate::datatype::{DataType, ScalarSource};
use crate::error::{Error, Result};
use crate::plan::HostLayout;
use crate::plan::tuner::Tuner;
use ops::PendingInit;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Condvar, Mutex};
use tracing::info;

/// `ncclSplit` color meaning "not in any new communicator".
pub const SPLIT_NOCOLOR: i32 = -1;

/// Number of built-in `ncclRedOp_t` values; user-created operators start here.
pub const NUM_BUILTIN_OPS: i32 = 5;

pub use crate::bootstrap::MAX_NRANKS;

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
    /// Recent plans, reused by later calls with equal keys (device backends).
    plans: plan_cache::PlanCache,
    /// Recent operations, their completion, and the watchdog's and check mode's settings.
    op_log: Arc<oplog::OpLog<B>>,
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
    /// Shared with the transport's connections made on first use.
    bootstrap: Arc<Bootstrap>,
    transport: Arc<B::Transport>,
    /// Every rank lives in this process, so an address one rank publishes is valid for all
    /// (zero-copy plans).
    one_process: bool,
    /// Buffers of symmetric windows every rank mapped at one address (zero copy across
    /// processes).
    shared_buffers: Mutex<symmetric::SharedBuffers>,
    /// The ranks' hosts when they span several (plans order rings and trees by host).
    hosts: Option<Arc<HostLayout>>,
    /// This communicator's context of the tuner plugin, when one is loaded.
    tuner_plugin: Option<crate::tuner_plugin::TunerContext>,
    /// This communicator's context of the profiler plugin, when one is loaded.
    profiler: Option<crate::profiler_plugin::ProfilerContext>,
    /// Turns a peer's death into an error and an abort, where the backend's kernels wait on
    /// peers out of the bootstrap's sight. Declared last, so it outlives the transport's
    /// teardown, which waits for the last kernel.
    _peer_watch: Option<peer_watch::PeerWatch>,
    /// Reports operations that stop making progress (`OXCCL_WATCHDOG_SECONDS`).
    _watchdog: Option<watchdog::Watchdog>,
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
        if nranks == 0 || nranks > MAX_NRANKS as usize {
            return Err(Error::arg(format!(
                "invalid number of ranks {nranks}: must be in 1..={MAX_NRANKS}"
            )));
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
        let op_log = oplog::OpLog::new(
            backend.clone(),
            oplog::Settings::from_env(),
            &id,
            rank as u32,
        );
        let plans = plan_cache::PlanCache::new(backend.reuses_plans());
        let comm = Communicator {
            inner: Arc::new(Inner {
                backend,
                plans,
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
                op_log,
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
            let host_keys: Vec<u64> = bootstrap.peers().iter().map(|p| p.host_hash).collect();
            let hosts = HostLayout::from_keys(&host_keys);
            let transport = inner.backend.connect(&ConnectContext {
                bootstrap: &bootstrap,
                abort: &inner.abort,
                device: inner.device,
                timeout: inner.config.init_timeout,
                hosts: hosts.as_deref(),
            })?;
            let me = std::process::id();
            let one_process = bootstrap
                .peers()
                .iter()
                .all(|p| p.pid == me && p.shares_proc_with_caller());
            if let Some(h) = hosts.as_ref().filter(|_| inner.rank == 0) {
                let ring: Vec<String> = h.ring().iter().map(u32::to_string).collect();
                info!(target: "oxccl::init",
                    "{} ranks on {} hosts: rings visit them host by host ({}), trees join the hosts' first ranks",
                    inner.nranks, h.hosts(), ring.join(" "));
            }
            let peer_watch = if inner.backend.needs_peer_watch() && inner.nranks > 1 {
                let liveness = bootstrap.liveness();
                Some(peer_watch::PeerWatch::start(
                    format!("oxccl-peers-r{}", inner.rank),
                    move || liveness.failure(),
                    inner.abort.clone(),
                )?)
            } else {
                None
            };
            let watchdog =
                watchdog::start_for(&bootstrap, &inner.op_log, &inner.abort, inner.device)?;
            let tuner_plugin = crate::tuner_plugin::for_communicator(
                &inner.id.0,
                inner.nranks,
                hosts.as_deref(),
                inner.rank,
            );
            let profiler = crate::profiler_plugin::for_communicator(
                crate::tuner_plugin::comm_id(&inner.id.0),
                inner.config.comm_name.as_deref(),
                hosts.as_ref().map_or(1, |h| h.hosts() as usize),
                inner.nranks,
                inner.rank,
            );
            Ok(Arc::new(Connected {
                bootstrap: Arc::new(bootstrap),
                transport: Arc::new(transport),
                one_process,
                shared_buffers: Mutex::default(),
                hosts,
                tuner_plugin,
                profiler,
                _peer_watch: peer_watch,
                _watchdog: watchdog,
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
            // ncclInvalidArgument, as NCCL answers a use before init completed.
            State::Initializing => {
                return Err(Error::arg(
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
    /// The latest hang report of the watchdog (`oxcclCommHangReport`), if one was made.
    pub fn hang_report(&self) -> Option<String> {
        self.inner.op_log.report()
    }
    /// The watchdog and check-mode settings (from the environment at init).
    pub fn reliability(&self) -> oplog::Settings {
        self.inner.op_log.settings()
    }
    /// Replaces the watchdog and check-mode settings; every rank must agree on check mode.
    pub fn set_reliability(&self, s: oplog::Settings) {
        self.inner.op_log.set_settings(s);
    }
    /// The abort flag (for tests and the C layer).
    pub fn abort_flag(&self) -> &AbortFlag {
        &self.inner.abort
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
            // Both ncclInvalidArgument, as in NCCL.
            State::Finalized(_) => Err(Error::arg(
                "communicator was already finalized (ncclCommFinalize called twice)",
            )),
            State::Initializing => Err(Error::arg("communicator is still initializing")),
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
}
