//! The watchdog: a background thread per communicator that notices an operation pending longer
//! than `OXCCL_WATCHDOG_SECONDS`, asks every rank for its recent operations over the bootstrap
//! connections (never the data path, which may be what is stuck), and logs at WARN which ranks
//! entered the operation, which are behind and where, and which did not answer.
//!
//! Every rank's thread also answers the others' requests, so a rank that is idle because it
//! skipped a collective still says where it is. Nothing is aborted unless
//! `OXCCL_WATCHDOG_ABORT=1`.

use super::flight::OpRecord;
use super::hang::{self, MAX_STATUS_RECORDS, Request, Status, View};
use super::oplog::OpLog;
use crate::abort::{AbortFlag, PollThread};
use crate::backend::Backend;
use crate::bootstrap::side::{SideChannel, TAG_STATUS_REQ, TAG_STATUS_RESP};
use crate::error::Error;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// How often the thread looks at the operations and serves requests.
const PERIOD: Duration = Duration::from_millis(200);
/// How often it looks while collecting answers.
const COLLECT_PERIOD: Duration = Duration::from_millis(20);
/// Longest a request or answer may take to send (a stopped peer cannot hold the thread).
const SEND_WITHIN: Duration = Duration::from_secs(2);
/// Most threads sending requests at once.
const MAX_SENDERS: usize = 16;

/// The watchdog of one communicator; stopped and joined on drop.
pub(crate) struct Watchdog {
    stop: AbortFlag,
    _thread: PollThread,
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        // Ends a send or collection in progress before the join.
        self.stop.abort();
    }
}

struct Dog<B: Backend> {
    ch: SideChannel,
    log: Arc<OpLog<B>>,
    abort: AbortFlag,
    stop: AbortFlag,
    next_id: u64,
    last_report: Option<((u64, u8, u64), Instant)>,
    last_heard: HashMap<u32, SystemTime>,
}

impl Watchdog {
    /// Starts the watchdog of rank `ch.rank()`, on `log`'s operations; `abort` is the
    /// communicator's (raised only with `OXCCL_WATCHDOG_ABORT=1`).
    pub(crate) fn start<B: Backend>(
        ch: SideChannel,
        log: Arc<OpLog<B>>,
        abort: AbortFlag,
        device: i32,
    ) -> Result<Watchdog, Error> {
        let stop = AbortFlag::new();
        let mut dog = Dog {
            next_id: u64::from(ch.rank()) << 40,
            ch,
            log,
            abort,
            stop: stop.clone(),
            last_report: None,
            last_heard: HashMap::new(),
        };
        let name = format!("oxccl-watchdog-r{}", dog.ch.rank());
        let mut bound = false;
        let thread = PollThread::spawn(name, PERIOD, "spawning the watchdog", move |halted| {
            // An aborted communicator keeps answering until it is dropped, so ranks still
            // waiting learn that this one gave up instead of finding it unreachable.
            if halted || dog.stop.is_aborted() {
                return false;
            }
            if !bound {
                // Event queries of device backends need the communicator's device current.
                if let Err(e) = dog.log.backend().set_device(device) {
                    tracing::warn!(target: "oxccl::watchdog", "binding device {device}: {e}");
                }
                bound = true;
            }
            dog.tick();
            true
        })?;
        Ok(Watchdog {
            stop,
            _thread: thread,
        })
    }
}

impl<B: Backend> Dog<B> {
    fn tick(&mut self) {
        self.log.poll_events();
        self.serve();
        // Answers that arrive outside a collection belong to an exchange that gave up.
        while self.ch.try_recv(TAG_STATUS_RESP).is_some() {}
        if self.abort.is_aborted() {
            return;
        }
        let settings = self.log.settings();
        let Some(limit) = settings.watchdog else {
            return;
        };
        let Some((stuck, waited)) = self.log.recorder.oldest_pending() else {
            return;
        };
        if waited < limit {
            return;
        }
        let key = (stuck.seq, stuck.kind.code(), stuck.issued_ms);
        if let Some((k, at)) = self.last_report
            && k == key
            && at.elapsed() < limit
        {
            return;
        }
        let report = self.exchange(&stuck, waited, limit);
        self.last_report = Some((key, Instant::now()));
        if self.stop.is_aborted() {
            return;
        }
        tracing::warn!(target: "oxccl::watchdog", "{report}");
        self.log.set_report(report.clone());
        if settings.abort_on_hang {
            tracing::warn!(target: "oxccl::watchdog",
                "rank {}: aborting the communicator (OXCCL_WATCHDOG_ABORT=1)", self.ch.rank());
            self.abort
                .record(Error::Timeout(format!("watchdog: {report}")));
            self.abort.abort();
        }
    }

    /// This rank's recent records with their ages.
    fn my_records(&self) -> Vec<(OpRecord, u64)> {
        let now = self.log.recorder.now_ms();
        self.log
            .recorder
            .recent(MAX_STATUS_RECORDS)
            .into_iter()
            .map(|r| (r, now.saturating_sub(r.issued_ms)))
            .collect()
    }

    /// Answers every queued status request.
    fn serve(&self) {
        while let Some((peer, msg)) = self.ch.try_recv(TAG_STATUS_REQ) {
            match Request::decode(&msg) {
                Ok(req) => {
                    tracing::debug!(target: "oxccl::watchdog",
                        "rank {}: rank {peer} waits on #{} and asks where this rank is",
                        self.ch.rank(), req.seq);
                    let answer = Status {
                        id: req.id,
                        records: self.my_records(),
                    };
                    if let Err(e) = self.ch.send(
                        peer,
                        TAG_STATUS_RESP,
                        &answer.encode(),
                        SEND_WITHIN,
                        &self.stop,
                    ) {
                        tracing::debug!(target: "oxccl::watchdog",
                            "rank {}: answering rank {peer}: {e}", self.ch.rank());
                    }
                }
                Err(why) => tracing::warn!(target: "oxccl::watchdog",
                    "rank {}: malformed status request from rank {peer}: {why}", self.ch.rank()),
            }
        }
    }

    /// Sends `msg` to every peer in parallel; returns the peers it could not reach.
    fn ask_all(&self, msg: &[u8]) -> Vec<(u32, Error)> {
        let me = self.ch.rank();
        let peers: Vec<u32> = (0..self.ch.nranks()).filter(|&p| p != me).collect();
        let workers = peers.len().clamp(1, MAX_SENDERS);
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..workers)
                .map(|w| {
                    let mine: Vec<u32> = peers.iter().copied().skip(w).step_by(workers).collect();
                    let spawned = std::thread::Builder::new()
                        .name(format!("oxccl-watchdog-ask{w}"))
                        .spawn_scoped(s, {
                            let mine = mine.clone();
                            move || {
                                mine.into_iter()
                                    .filter_map(|p| {
                                        self.ch
                                            .send(p, TAG_STATUS_REQ, msg, SEND_WITHIN, &self.stop)
                                            .err()
                                            .map(|e| (p, e))
                                    })
                                    .collect::<Vec<_>>()
                            }
                        });
                    (mine, spawned)
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|(mine, h)| match h.map(|h| h.join()) {
                    Ok(Ok(failed)) => failed,
                    _ => mine
                        .into_iter()
                        .map(|p| (p, Error::Internal("request thread failed".into())))
                        .collect(),
                })
                .collect()
        })
    }

    /// Asks every rank where it is and builds the report about `stuck`.
    fn exchange(&mut self, stuck: &OpRecord, waited: Duration, limit: Duration) -> String {
        let me = self.ch.rank();
        let n = self.ch.nranks();
        self.next_id += 1;
        let id = self.next_id;
        let asked_at = SystemTime::now();
        let mut views: BTreeMap<u32, View> = BTreeMap::new();
        views.insert(me, View::Answered(self.my_records()));
        for (p, e) in self.ask_all(&Request { id, seq: stuck.seq }.encode()) {
            let view = match e {
                _ if self.ch.peer_left(p) => View::Left,
                Error::Remote(why) if why.contains("died") => View::Dead(why),
                _ => View::Silent(*self.last_heard.get(&p).unwrap_or(&asked_at)),
            };
            views.insert(p, view);
        }
        let wait = limit.clamp(Duration::from_secs(3), Duration::from_secs(10));
        let until = Instant::now() + wait;
        while views.len() < n as usize && Instant::now() < until && !self.stop.is_aborted() {
            self.serve();
            while let Some((peer, msg)) = self.ch.try_recv(TAG_STATUS_RESP) {
                match Status::decode(&msg) {
                    Ok(st) if st.id == id => {
                        self.last_heard.insert(peer, SystemTime::now());
                        views.insert(peer, View::Answered(st.records));
                    }
                    Ok(_) => {}
                    Err(why) => tracing::warn!(target: "oxccl::watchdog",
                        "rank {me}: malformed status answer from rank {peer}: {why}"),
                }
            }
            std::thread::park_timeout(COLLECT_PERIOD);
        }
        for p in 0..n {
            views.entry(p).or_insert_with(|| {
                if self.ch.peer_left(p) {
                    View::Left
                } else {
                    View::Silent(*self.last_heard.get(&p).unwrap_or(&asked_at))
                }
            });
        }
        if let Some(e) = self.ch.dead_peer() {
            tracing::warn!(target: "oxccl::watchdog", "rank {me}: {e}");
        }
        hang::report(me, stuck, waited, &views)
    }
}

/// The watchdog of a communicator just connected over `bootstrap`, unless it has one rank or
/// `OXCCL_WATCHDOG_SECONDS=0` turned it off at init.
pub(crate) fn start_for<B: Backend>(
    bootstrap: &crate::bootstrap::Bootstrap,
    log: &Arc<OpLog<B>>,
    abort: &AbortFlag,
    device: i32,
) -> Result<Option<Watchdog>, Error> {
    if bootstrap.nranks() < 2 || log.settings().watchdog.is_none() {
        return Ok(None);
    }
    Watchdog::start(bootstrap.side_channel(), log.clone(), abort.clone(), device).map(Some)
}
