//! Per-communicator bookkeeping of operations for the watchdog and check mode: the flight
//! recorder, completion tracking (the waiter's return on synchronous backends, a completion
//! event polled by the watchdog elsewhere), the settings read from the environment, and the
//! latest hang report.

use super::flight::{FlightRecorder, Issue, OpKind, Slot, red_code};
use super::group::Waiter;
use super::ops::CollArgs;
use crate::backend::Backend;
use crate::bootstrap::UniqueId;
use crate::config::{Env, vars};
use crate::datatype::DataType;
use crate::error::Result;
use crate::lock::lock;
use crate::plan::P2pOp;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

/// Most completion events in flight per communicator; operations beyond are counted as done
/// when handed to the device (the watchdog then follows the older ones).
const MAX_TRACKED: usize = 256;

/// Reliability settings of one communicator, from the environment at init.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// `OXCCL_WATCHDOG_SECONDS`: how long an operation may stay incomplete before the ranks
    /// exchange their records and report (`None`: 0, off).
    pub watchdog: Option<Duration>,
    /// `OXCCL_WATCHDOG_ABORT=1`: abort the communicator after reporting a hang.
    pub abort_on_hang: bool,
    /// `OXCCL_CHECK=1`: ranks compare every collective's signature before running it.
    pub check: bool,
}

impl Settings {
    /// Settings from the environment.
    pub fn from_env() -> Settings {
        Settings::from(Env::PROCESS)
    }

    /// Settings from `lookup` (a map in tests).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Settings {
        Settings::from(Env::from_fn(&lookup))
    }

    fn from(env: Env<'_>) -> Settings {
        let watchdog = env.get(&vars::OXCCL_WATCHDOG_SECONDS);
        Settings {
            watchdog: (!watchdog.is_zero()).then_some(watchdog),
            abort_on_hang: env.get(&vars::OXCCL_WATCHDOG_ABORT).0,
            check: env.get(&vars::OXCCL_CHECK).0,
        }
    }
}

struct Events<E> {
    free: Vec<E>,
    /// Completion events in flight, each standing for a range of slots (one launch).
    pending: VecDeque<((Slot, Slot), E)>,
}

/// The operation bookkeeping of one communicator.
pub(crate) struct OpLog<B: Backend> {
    pub recorder: FlightRecorder,
    settings: Mutex<Settings>,
    /// `settings.check`, read on every collective without the lock.
    check: AtomicBool,
    backend: Arc<B>,
    events: Mutex<Events<B::Event>>,
    /// Whether the backend answers event queries (asked once, on the first event).
    queries: OnceLock<bool>,
    /// Whether a failure to make or record a completion event was logged (once per communicator).
    event_failure_logged: AtomicBool,
    report: Mutex<Option<String>>,
}

impl<B: Backend> OpLog<B> {
    /// A log for a communicator on `backend`, registered for [`hang_report_of`].
    pub fn new(backend: Arc<B>, settings: Settings, id: &UniqueId, rank: u32) -> Arc<OpLog<B>> {
        let log = Arc::new(OpLog {
            recorder: FlightRecorder::default(),
            check: AtomicBool::new(settings.check),
            settings: Mutex::new(settings),
            backend,
            events: Mutex::new(Events {
                free: Vec::new(),
                pending: VecDeque::with_capacity(MAX_TRACKED),
            }),
            queries: OnceLock::new(),
            event_failure_logged: AtomicBool::new(false),
            report: Mutex::new(None),
        });
        let weak: Weak<dyn ReportSource> = Arc::downgrade(&log) as Weak<dyn ReportSource>;
        register(id, rank, weak);
        log
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<B> {
        &self.backend
    }

    /// The current settings.
    pub fn settings(&self) -> Settings {
        lock(&self.settings).clone()
    }

    /// Replaces the settings (the watchdog reads them at its next look).
    pub fn set_settings(&self, s: Settings) {
        self.check.store(s.check, Ordering::Relaxed);
        *lock(&self.settings) = s;
    }

    /// Whether check mode is on.
    pub fn check(&self) -> bool {
        self.check.load(Ordering::Relaxed)
    }

    /// Records a collective about to launch.
    pub fn issue_coll(&self, seq: u64, a: &CollArgs, stream: &B::Stream) -> Slot {
        self.recorder.issue(Issue {
            seq,
            kind: OpKind::Coll(a.kind),
            count: a.count,
            dtype: a.dtype,
            red: red_code(a.op),
            root_or_peer: a.root,
            stream: self.backend.stream_id(stream),
        })
    }

    /// Records a caller-built plan about to launch.
    pub fn issue_plan(&self, seq: u64, stream: &B::Stream) -> Slot {
        self.recorder.issue(Issue {
            seq,
            kind: OpKind::Plan,
            count: 0,
            dtype: DataType::Uint8,
            red: 0,
            root_or_peer: u32::MAX,
            stream: self.backend.stream_id(stream),
        })
    }

    /// Records the sends and receives of one group (counts in bytes); returns the first and
    /// last slot (the group completes as a whole).
    pub fn issue_p2p(&self, planned: &[P2pOp], stream: &B::Stream) -> Option<(Slot, Slot)> {
        let id = self.backend.stream_id(stream);
        let mut first_last = None::<(Slot, Slot)>;
        for p in planned {
            let s = self.recorder.issue(Issue {
                seq: p.peer_seq,
                kind: match p.dir {
                    crate::plan::P2pDir::Send => OpKind::Send,
                    crate::plan::P2pDir::Recv => OpKind::Recv,
                },
                count: p.count,
                dtype: DataType::Uint8,
                red: 0,
                root_or_peer: p.peer,
                stream: id,
            });
            first_last = Some((first_last.map_or(s, |(f, _)| f), s));
        }
        first_last
    }

    /// Follows the outcome of a launch whose slots run from `first` to `last`: a failure ends
    /// them now, a waiter ends them when it returns, an asynchronous launch when the completion
    /// event recorded on `stream` now has run.
    pub fn track(
        self: &Arc<Self>,
        slots: Option<(Slot, Slot)>,
        r: Result<Option<Waiter>>,
        stream: &B::Stream,
    ) -> Result<Option<Waiter>> {
        let Some((first, last)) = slots else {
            return r;
        };
        match r {
            Err(e) => {
                self.finish_range(first, last, false);
                Err(e)
            }
            Ok(Some(wait)) => {
                let log = self.clone();
                Ok(Some(Box::new(move || {
                    let r = wait();
                    log.finish_range(first, last, r.is_ok());
                    r
                })))
            }
            Ok(None) => {
                if self.backend.synchronous_api() || !self.track_event((first, last), stream) {
                    self.finish_range(first, last, true);
                }
                Ok(None)
            }
        }
    }

    fn finish_range(&self, first: Slot, last: Slot, ok: bool) {
        let mut s = first;
        loop {
            self.recorder.finish(s, ok);
            if s == last {
                break;
            }
            s = s.next();
        }
    }

    /// Records a completion event for the slots `range` on `stream`; false when the backend cannot tell
    /// completion, the watchdog is off, or too many are in flight.
    fn track_event(&self, range: (Slot, Slot), stream: &B::Stream) -> bool {
        if lock(&self.settings).watchdog.is_none() || self.queries.get() == Some(&false) {
            return false;
        }
        // A captured operation runs at each graph launch, not now: nothing to follow.
        if self.backend.is_capturing(stream).unwrap_or(true) {
            return false;
        }
        let mut ev = lock(&self.events);
        if ev.pending.len() >= MAX_TRACKED {
            return false;
        }
        let e = match ev.free.pop() {
            Some(e) => e,
            None => match self.backend.event_create(stream) {
                Ok(e) => e,
                Err(err) => {
                    self.event_failed(&err);
                    return false;
                }
            },
        };
        if let Err(err) = self.backend.event_record(&e, stream) {
            self.event_failed(&err);
            ev.free.push(e);
            return false;
        }
        let answers = || matches!(self.backend.event_query(&e), Ok(Some(_)));
        if !*self.queries.get_or_init(answers) {
            ev.free.push(e);
            return false;
        }
        ev.pending.push_back((range, e));
        true
    }

    /// Says once per communicator that the watchdog cannot follow its operations: a hang among
    /// them would go unreported.
    fn event_failed(&self, err: &crate::error::Error) {
        if !self.event_failure_logged.swap(true, Ordering::Relaxed) {
            tracing::warn!(target: "oxccl::watchdog",
                "the watchdog cannot follow this communicator's operations (a completion event failed: {err}); a hang among them would not be reported");
        }
    }

    /// Ends the operations whose completion events have run (called by the watchdog). Looks
    /// from the oldest and stops at the first still running, so the launching thread never
    /// waits long for the lock; a later event that ran first is ended on a later look.
    pub fn poll_events(&self) {
        let mut ev = lock(&self.events);
        while let Some((_, e)) = ev.pending.front() {
            let done = self.backend.event_query(e);
            if matches!(done, Ok(Some(false))) {
                break;
            }
            let ((first, last), e) = ev.pending.pop_front().expect("front exists");
            self.finish_range(first, last, done.is_ok());
            ev.free.push(e);
        }
    }

    /// Stores the latest hang report.
    pub fn set_report(&self, report: String) {
        *lock(&self.report) = Some(report);
    }

    /// The latest hang report.
    pub fn report(&self) -> Option<String> {
        lock(&self.report).clone()
    }
}

/// What the registry needs of a log: its report, whatever the backend.
trait ReportSource: Send + Sync {
    fn latest(&self) -> Option<String>;
}

impl<B: Backend> ReportSource for OpLog<B> {
    fn latest(&self) -> Option<String> {
        self.report()
    }
}

type Registry = Vec<(
    [u8; crate::bootstrap::UNIQUE_ID_BYTES],
    u32,
    Weak<dyn ReportSource>,
)>;

/// Live logs by (unique id, rank), so the C layer can read a report without knowing the backend.
static REGISTRY: Mutex<Registry> = Mutex::new(Vec::new());

fn register(id: &UniqueId, rank: u32, log: Weak<dyn ReportSource>) {
    let mut reg = lock(&REGISTRY);
    reg.retain(|(_, _, w)| w.strong_count() > 0);
    reg.push((id.0, rank, log));
}

/// The latest hang report of the live communicator of rank `rank` created from `id`, if it has
/// one (see [`super::Communicator::hang_report`]).
pub fn hang_report_of(id: &UniqueId, rank: u32) -> Option<String> {
    let reg = lock(&REGISTRY);
    reg.iter()
        .rev()
        .filter(|(i, r, _)| *i == id.0 && *r == rank)
        .find_map(|(_, _, w)| w.upgrade())
        .and_then(|log| log.latest())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::comm::flight::OpState;
    use crate::host::HostBackend;

    #[test]
    fn settings_from_lookup() {
        let s = Settings::from_lookup(|_| None);
        assert_eq!(s.watchdog, Some(Duration::from_secs(120)));
        assert!(!s.abort_on_hang && !s.check);
        let s = Settings::from_lookup(|k| match k {
            "OXCCL_WATCHDOG_SECONDS" => Some("0".into()),
            "OXCCL_CHECK" => Some("1".into()),
            "OXCCL_WATCHDOG_ABORT" => Some("1".into()),
            _ => None,
        });
        assert_eq!(s.watchdog, None);
        assert!(s.abort_on_hang && s.check);
        let s = Settings::from_lookup(|k| (k == "OXCCL_WATCHDOG_SECONDS").then(|| "2.5".into()));
        assert_eq!(s.watchdog, Some(Duration::from_millis(2500)));
        let s = Settings::from_lookup(|k| (k == "OXCCL_WATCHDOG_SECONDS").then(|| "soon".into()));
        assert_eq!(s.watchdog, Some(Duration::from_secs(120)));
    }

    /// The device-backend path (completion events polled by the watchdog), on host streams.
    #[test]
    fn completion_events_end_operations_in_order() {
        let backend = Arc::new(HostBackend::new());
        let settings = Settings::from_lookup(|_| None);
        let log = OpLog::new(backend.clone(), settings, &UniqueId([7; 128]), 0);
        let stream = backend.stream_create().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        stream.push(Box::new(move || {
            let _ = rx.recv();
            Ok(())
        }));
        let a = CollArgs {
            kind: crate::plan::CollKind::AllReduce,
            send: 1,
            recv: 1,
            count: 8,
            dtype: DataType::Float32,
            op: crate::datatype::RedOp::Sum,
            root: 0,
            layout: None,
        };
        let s0 = log.issue_coll(0, &a, &stream);
        assert!(log.track_event((s0, s0), &stream));
        let s1 = log.issue_coll(1, &a, &stream);
        assert!(log.track_event((s1, s1), &stream));
        log.poll_events();
        assert_eq!(log.recorder.oldest_pending().unwrap().0.seq, 0);
        tx.send(()).unwrap();
        stream.synchronize().unwrap();
        log.poll_events();
        assert!(log.recorder.oldest_pending().is_none());
        assert!(
            log.recorder
                .recent(2)
                .iter()
                .all(|r| r.state == OpState::Done)
        );
        // Both events went back to the pool.
        assert_eq!(lock(&log.events).free.len(), 2);
        assert_eq!(hang_report_of(&UniqueId([7; 128]), 0), None);
        log.set_report("r".into());
        assert_eq!(hang_report_of(&UniqueId([7; 128]), 0).as_deref(), Some("r"));
    }
}
