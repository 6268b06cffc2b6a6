//! The helper threads of a socket network: a thread per data socket up to a limit
//! ([`SocketConfig::workers`](super::socket::SocketConfig::workers)), then threads that serve
//! several sockets each.
//!
//! A thread per data socket, without a limit (what this replaced), gave every channel link of
//! every peer two threads a direction: 195 threads per process with 8 ranks as 8 hosts (NCCL:
//! 11), about 600 estimated with 64 ranks on 8 hosts, and more with every peer beyond.
//!
//! A thread with one socket blocks in its reads and writes, as before. A thread with several
//! cannot block on one of them: a thread waiting to write to a peer that waits, in the same kind
//! of thread, to write to us would never return. It makes non-blocking calls, keeps each
//! socket's parts in order, and sleeps in an edge-triggered epoll set that says which socket may
//! move again. A part handed to a sleeping thread wakes it through an eventfd; a thread with
//! work never sleeps. Sockets join threads only while the network connects, before any part.

use super::epoll::Epoll;
use oxccl_core::error::{Error, Result};
use oxccl_core::lock::lock;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Most helper threads of one network (`OXCCL_SOCKET_WORKERS` is capped here).
pub const MAX_WORKERS: usize = 64;
/// The epoll data of a thread's eventfd (lane ids count up from 0).
const WAKE: u64 = u64::MAX;

/// A byte range in memory the caller keeps valid until its request completes.
#[derive(Clone, Copy)]
pub(super) struct Span {
    pub addr: usize,
    pub len: usize,
}

/// Completion state of one request.
#[derive(Default)]
pub(super) struct ReqState {
    /// Parts still with helper threads.
    pub parts: AtomicUsize,
    /// The first failure of a part.
    pub failed: Mutex<Option<String>>,
}

impl ReqState {
    fn fail(&self, why: &str) {
        lock(&self.failed).get_or_insert_with(|| why.to_string());
    }

    /// One part is through (or failed, which [`ReqState::fail`] recorded first).
    fn part_done(&self) {
        self.parts.fetch_sub(1, Ordering::AcqRel);
    }

    /// The first failure of a part as soon as one is recorded; else `None` while a part is
    /// with a thread, then `Ok`. A failure is returned at once, not after the other parts: a
    /// part on a socket that stays silent would otherwise hold the error back for good.
    pub fn settled(&self) -> Option<std::result::Result<(), String>> {
        self.settled_with(|| {})
    }

    /// [`ReqState::settled`], running `between` between its two reads (tests interleave there).
    /// Parts are counted before failures are read: a part records its failure before it counts
    /// itself back, so a count of none left comes with every failure visible; read the other
    /// way round, a failure landing in between would pass as a complete request.
    fn settled_with(&self, between: impl FnOnce()) -> Option<std::result::Result<(), String>> {
        let left = self.parts.load(Ordering::Acquire);
        between();
        if let Some(why) = lock(&self.failed).clone() {
            return Some(Err(why));
        }
        (left == 0).then_some(Ok(()))
    }
}

/// One part of a message for a data socket.
pub(super) struct Job {
    span: Span,
    state: Arc<ReqState>,
    /// Set by [`Lane::submit`]: counts the part as its lane's until the part is dropped, which
    /// is after the thread's last touch of `span`.
    ticket: Option<LaneTicket>,
}

impl Job {
    /// The part `span` of the request whose completion `state` tracks.
    pub fn new(span: Span, state: Arc<ReqState>) -> Job {
        Job {
            span,
            state,
            ticket: None,
        }
    }
}

/// One part a lane's thread holds (see [`Lane::drain`]).
struct LaneTicket(Arc<AtomicUsize>);

impl Drop for LaneTicket {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What a thread is told, in order.
enum Msg {
    /// Serve a socket: it writes (`sending`) or reads its parts.
    Add {
        id: u64,
        stream: TcpStream,
        sending: bool,
    },
    /// A part for a socket, after the parts sent before it.
    Job { id: u64, job: Job },
    /// Forget a socket; its parts not yet through fail.
    Remove { id: u64 },
    /// The network is gone: end.
    Stop,
}

/// What a thread and those who hand it work share.
struct Inbox {
    msgs: Vec<Msg>,
    /// The thread is in (or about to enter) `epoll_wait`: a message must write the eventfd.
    sleeping: bool,
    /// The thread has ended (a panic, or [`Msg::Stop`]): parts posted now fail at once.
    ended: bool,
}

/// One helper thread's side that others see.
struct Worker {
    inbox: Mutex<Inbox>,
    /// An eventfd, written to wake the thread from `epoll_wait`.
    wake: OwnedFd,
}

impl Worker {
    fn post(&self, msg: Msg) {
        let wake = {
            let mut ib = lock(&self.inbox);
            if ib.ended {
                drop(ib);
                fail_unserved(msg);
                return;
            }
            ib.msgs.push(msg);
            std::mem::take(&mut ib.sleeping)
        };
        if wake {
            let one = 1u64;
            // SAFETY: our eventfd, and 8 readable bytes for the duration of the call. A failed
            // write can only mean the counter is full, and then the thread is awake anyway.
            unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
    }
}

/// The helper threads of one socket network; dropping the last handle (the network's, and each
/// [`Lane`]'s) ends them.
pub(super) struct SocketWorkers {
    /// Threads started so far: one per lane until there are `most`.
    workers: Mutex<Vec<Arc<Worker>>>,
    most: usize,
    /// Next lane id; once every thread is started, lanes go to the threads in turn.
    next: AtomicU64,
}

impl SocketWorkers {
    /// Helper threads for the lanes to come: a thread per lane, at most `most` (at least one).
    pub fn new(most: usize) -> Arc<SocketWorkers> {
        Arc::new(SocketWorkers {
            workers: Mutex::new(Vec::new()),
            most: most.max(1),
            next: AtomicU64::new(0),
        })
    }

    /// Starts helper thread number `i`.
    fn spawn(i: usize) -> Result<Arc<Worker>> {
        let what = "creating a network helper thread's epoll set";
        let epoll = Epoll::new().map_err(|e| Error::io(what, e))?;
        // SAFETY: plain system call; the result is checked.
        let wake = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if wake < 0 {
            return Err(Error::io(what, io::Error::last_os_error()));
        }
        // SAFETY: a descriptor just opened and owned by nothing else.
        let wake = unsafe { OwnedFd::from_raw_fd(wake) };
        watch(&epoll, wake.as_raw_fd(), WAKE)?;
        let shared = Arc::new(Worker {
            inbox: Mutex::new(Inbox {
                msgs: Vec::new(),
                sleeping: false,
                ended: false,
            }),
            wake,
        });
        let w = WorkerThread {
            shared: shared.clone(),
            epoll,
            lanes: HashMap::new(),
        };
        std::thread::Builder::new()
            .name(format!("oxccl-net-w{i}"))
            .spawn(move || w.run())
            .map_err(|e| Error::io("spawning a network helper thread", e))?;
        Ok(shared)
    }

    /// Hands `stream` (a blocking socket) to a helper thread (a new one while there are fewer
    /// than the most), which writes (`sending`) or reads each part given to the returned lane,
    /// in order.
    pub fn lane(self: &Arc<Self>, stream: TcpStream, sending: bool) -> Result<Lane> {
        let keep = stream
            .try_clone()
            .map_err(|e| Error::io("cloning a data socket", e))?;
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let worker = {
            let mut ws = lock(&self.workers);
            if ws.len() < self.most {
                let w = SocketWorkers::spawn(ws.len())?;
                ws.push(w);
            }
            ws[id as usize % ws.len()].clone()
        };
        worker.post(Msg::Add {
            id,
            stream,
            sending,
        });
        Ok(Lane {
            id,
            worker,
            _workers: self.clone(),
            stream: keep,
            held: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// Helper threads started.
    #[cfg(test)]
    fn threads(&self) -> usize {
        lock(&self.workers).len()
    }
}

impl Drop for SocketWorkers {
    fn drop(&mut self) {
        for w in lock(&self.workers).iter() {
            w.post(Msg::Stop);
        }
    }
}

/// A data socket served by a helper thread.
pub(super) struct Lane {
    id: u64,
    worker: Arc<Worker>,
    /// Keeps the threads running while the lane lives.
    _workers: Arc<SocketWorkers>,
    /// The socket (for shutting it down; the thread holds a clone).
    pub stream: TcpStream,
    /// Parts given to the thread and not yet dropped by it.
    held: Arc<AtomicUsize>,
}

impl Lane {
    /// Queues a part behind the lane's earlier ones.
    pub fn submit(&self, mut job: Job) {
        self.held.fetch_add(1, Ordering::AcqRel);
        job.ticket = Some(LaneTicket(self.held.clone()));
        self.worker.post(Msg::Job { id: self.id, job });
    }

    /// Waits, at most `limit`, until the thread holds none of the lane's parts, so that no
    /// helper reads or writes their memory any more; false if some are still held. A part
    /// whose socket was shut down fails within a system call, so a closed connection drains
    /// at once.
    pub fn drain(&self, limit: std::time::Duration) -> bool {
        let start = std::time::Instant::now();
        while self.held.load(Ordering::Acquire) != 0 {
            if start.elapsed() >= limit {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        true
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        // Ends a blocking call of a thread that serves only this socket, so it sees the removal.
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        self.worker.post(Msg::Remove { id: self.id });
    }
}

/// A socket as its thread sees it.
struct LaneState {
    stream: TcpStream,
    sending: bool,
    /// Parts in order; the first has `done` bytes through.
    jobs: VecDeque<Job>,
    done: usize,
    /// The socket may move (no `WouldBlock` since the last epoll edge).
    ready: bool,
    /// In the thread's epoll set (once the thread serves more than this socket).
    watched: bool,
    broken: Option<String>,
}

impl LaneState {
    /// Moves the parts as far as the socket takes them now; true when some bytes moved. A
    /// thread with this one lane (`alone`) blocks in each call, as a thread per socket would:
    /// it has nothing else to serve, and a blocking call costs one system call where a
    /// non-blocking one that finds nothing costs three (it, `epoll_wait`, and the call again).
    fn progress(&mut self, alone: bool) -> bool {
        let flags = if alone { 0 } else { libc::MSG_DONTWAIT };
        let mut moved = false;
        while (alone || self.ready) && self.broken.is_none() {
            let Some(job) = self.jobs.front() else {
                break;
            };
            let rest = job.span.len - self.done;
            let at = (job.span.addr + self.done) as *mut libc::c_void;
            let fd = self.stream.as_raw_fd();
            let n = if rest == 0 {
                0
            } else if self.sending {
                // SAFETY: isend's contract keeps the span readable until the request is done,
                // which needs this part; MSG_NOSIGNAL: a reset peer is an error, not SIGPIPE.
                unsafe { libc::send(fd, at, rest, flags | libc::MSG_NOSIGNAL) }
            } else {
                // SAFETY: irecv's contract: the span is ours (writable, unaliased) until the
                // request is done, which needs this part.
                unsafe { libc::recv(fd, at, rest, flags) }
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock => self.ready = false,
                    io::ErrorKind::Interrupted => {}
                    _ => self.break_with(e.to_string()),
                }
                continue;
            }
            let n = n as usize;
            if n == 0 && rest > 0 {
                self.break_with(if self.sending {
                    "the connection closed".into()
                } else {
                    "the peer closed the connection mid-message".into()
                });
                continue;
            }
            moved |= n > 0;
            self.done += n;
            if self.done == job.span.len {
                self.done = 0;
                self.jobs
                    .pop_front()
                    .expect("the first part")
                    .state
                    .part_done();
            }
        }
        moved
    }

    /// The socket failed: every part queued now or later fails with `why`.
    fn break_with(&mut self, why: String) {
        self.broken = Some(why);
        self.fail_all();
    }

    fn fail_all(&mut self) {
        let why = self.broken.as_deref().unwrap_or("the connection closed");
        for job in self.jobs.drain(..) {
            job.state.fail(why);
            job.state.part_done();
        }
        self.done = 0;
    }
}

/// Adds `fd` to a helper thread's epoll set, edge triggered, with `data` in its events.
fn watch(epoll: &Epoll, fd: RawFd, data: u64) -> Result<()> {
    let events = libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET;
    epoll
        .add(fd, events, data)
        .map_err(|e| Error::io("watching a data socket", e))
}

/// One helper thread's own state.
struct WorkerThread {
    shared: Arc<Worker>,
    epoll: Epoll,
    lanes: HashMap<u64, LaneState>,
}

impl WorkerThread {
    fn run(mut self) {
        loop {
            let msgs = std::mem::take(&mut lock(&self.shared.inbox).msgs);
            for m in msgs {
                if !self.take(m) {
                    return;
                }
            }
            let alone = self.lanes.len() == 1;
            let mut moved = false;
            for l in self.lanes.values_mut() {
                moved |= l.progress(alone);
            }
            if moved {
                continue;
            }
            {
                let mut ib = lock(&self.shared.inbox);
                if !ib.msgs.is_empty() {
                    continue;
                }
                ib.sleeping = true;
            }
            self.wait();
            lock(&self.shared.inbox).sleeping = false;
        }
    }

    /// Acts on one message; false on [`Msg::Stop`].
    fn take(&mut self, m: Msg) -> bool {
        match m {
            Msg::Add {
                id,
                stream,
                sending,
            } => {
                let l = LaneState {
                    stream,
                    sending,
                    jobs: VecDeque::new(),
                    done: 0,
                    ready: true,
                    watched: false,
                    broken: None,
                };
                self.lanes.insert(id, l);
                if self.lanes.len() > 1 {
                    // Sharing starts (while connecting, before any part): from now on the
                    // epoll set says which socket may move. A thread with one socket blocks in
                    // its calls and watches only its eventfd, so no readiness of that socket
                    // wakes it for nothing.
                    for (&id, l) in self.lanes.iter_mut().filter(|(_, l)| !l.watched) {
                        l.watched = true;
                        if let Err(e) = watch(&self.epoll, l.stream.as_raw_fd(), id) {
                            // Parts for it fail as they come.
                            l.broken = Some(e.to_string());
                        }
                    }
                }
            }
            Msg::Job { id, job } => match self.lanes.get_mut(&id) {
                Some(l) => {
                    l.jobs.push_back(job);
                    if l.broken.is_some() {
                        l.fail_all();
                    }
                }
                None => fail_unserved(Msg::Job { id, job }),
            },
            Msg::Remove { id } => {
                if let Some(mut l) = self.lanes.remove(&id) {
                    self.epoll.remove(l.stream.as_raw_fd());
                    l.fail_all();
                }
            }
            Msg::Stop => return false,
        }
        true
    }

    /// Sleeps until a socket may move or a message comes.
    fn wait(&mut self) {
        let (wake, lanes) = (&self.shared.wake, &mut self.lanes);
        self.epoll.wait(-1, |data| {
            if data == WAKE {
                let mut v = 0u64;
                // SAFETY: our eventfd, 8 writable bytes; non-blocking, so at worst EAGAIN.
                unsafe { libc::read(wake.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
            } else if let Some(l) = lanes.get_mut(&data) {
                l.ready = true;
            }
        });
    }
}

/// Fails the part a message carries, if any: no thread will serve it.
fn fail_unserved(msg: Msg) {
    if let Msg::Job { job, .. } = msg {
        job.state.fail("the connection closed");
        job.state.part_done();
    }
}

impl Drop for WorkerThread {
    /// Also on a panic of the thread: every part it holds or will be given fails, so no request
    /// waits for it.
    fn drop(&mut self) {
        for l in self.lanes.values_mut() {
            l.fail_all();
        }
        let left = {
            let mut ib = lock(&self.shared.inbox);
            ib.ended = true;
            std::mem::take(&mut ib.msgs)
        };
        left.into_iter().for_each(fail_unserved);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;
    use std::time::{Duration, Instant};

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    #[test]
    fn a_request_fails_at_its_first_failed_part_and_completes_after_its_last() {
        let state = ReqState::default();
        state.parts.store(2, Ordering::Release);
        assert_eq!(state.settled(), None);
        state.part_done();
        assert_eq!(state.settled(), None, "one part still out");
        state.part_done();
        assert_eq!(state.settled(), Some(Ok(())));
        state.parts.store(2, Ordering::Release);
        state.fail("reset");
        state.part_done();
        assert_eq!(state.settled(), Some(Err("reset".into())), "at once");
    }

    /// The last part failing between the two reads: the request fails, never completes.
    #[test]
    fn a_part_failing_while_a_request_is_tested_fails_it() {
        let state = ReqState::default();
        state.parts.store(1, Ordering::Release);
        let got = state.settled_with(|| {
            state.fail("reset");
            state.part_done();
        });
        assert_ne!(got, Some(Ok(())), "a failed part passed as complete");
        assert_eq!(state.settled(), Some(Err("reset".into())));
    }

    fn job(addr: *const u8, len: usize, state: &Arc<ReqState>) -> Job {
        Job::new(
            Span {
                addr: addr as usize,
                len,
            },
            state.clone(),
        )
    }

    fn wait_parts(state: &ReqState) {
        let until = Instant::now() + Duration::from_secs(20);
        while state.parts.load(Ordering::Acquire) != 0 {
            assert!(Instant::now() < until, "parts never finished");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn one_thread_moves_both_ways_over_many_sockets_without_deadlock() {
        // Each socket's writer and reader share the one thread: a blocking write would wait
        // forever for the read queued behind it.
        let w = SocketWorkers::new(1);
        let mut lanes = Vec::new();
        for _ in 0..4 {
            let (a, b) = pair();
            lanes.push((w.lane(a, true).unwrap(), w.lane(b, false).unwrap()));
        }
        let len = (8 << 20) + 3;
        let src: Vec<Vec<u8>> = (0..4u8)
            .map(|k| (0..len).map(|i| (i as u8) ^ k.wrapping_mul(37)).collect())
            .collect();
        let mut dst: Vec<Vec<u8>> = (0..4).map(|_| vec![0xA5u8; len]).collect();
        let state = Arc::new(ReqState::default());
        // Three parts per socket each way, of unequal sizes.
        state.parts.store(4 * 3 * 2, Ordering::Release);
        let third = len / 3;
        for ((tx, rx), (s, d)) in lanes.iter().zip(src.iter().zip(dst.iter_mut())) {
            for (off, n) in [
                (0, third),
                (third, third + 5),
                (2 * third + 5, len - 2 * third - 5),
            ] {
                tx.submit(job(s[off..].as_ptr(), n, &state));
                rx.submit(job(d[off..].as_mut_ptr(), n, &state));
            }
        }
        wait_parts(&state);
        assert!(lock(&state.failed).is_none(), "{:?}", lock(&state.failed));
        assert_eq!(src, dst);
        assert_eq!(w.threads(), 1);
    }

    /// A part waiting for bytes that never come stays held until its socket is shut down;
    /// then the lane drains at once, for a thread serving it alone (blocked in `recv`) and for
    /// one serving several (asleep in `epoll_wait`), and the part has failed.
    #[test]
    fn a_shut_down_lane_drains_its_held_parts() {
        for most in [8, 1] {
            let w = SocketWorkers::new(most);
            let (a, b) = pair();
            let (_peer, rx) = (w.lane(a, true).unwrap(), w.lane(b, false).unwrap());
            let mut dst = vec![0u8; 4096];
            let state = Arc::new(ReqState::default());
            state.parts.store(1, Ordering::Release);
            rx.submit(job(dst.as_mut_ptr(), dst.len(), &state));
            assert!(
                !rx.drain(Duration::from_millis(50)),
                "held while no byte came"
            );
            rx.stream.shutdown(std::net::Shutdown::Both).unwrap();
            assert!(rx.drain(Duration::from_secs(5)), "threads: {most}");
            assert_eq!(state.parts.load(Ordering::Acquire), 0);
            assert!(lock(&state.failed).is_some());
        }
    }

    #[test]
    fn threads_with_one_lane_each_move_a_message_in_parts() {
        let w = SocketWorkers::new(8);
        let (a, b) = pair();
        let (tx, rx) = (w.lane(a, true).unwrap(), w.lane(b, false).unwrap());
        assert_eq!(w.threads(), 2);
        let len = (1 << 20) * 3 + 7;
        let src: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
        let mut dst = vec![0x5Au8; len];
        let state = Arc::new(ReqState::default());
        state.parts.store(4, Ordering::Release);
        let half = len / 2;
        for (off, n) in [(0, half), (half, len - half)] {
            rx.submit(job(dst[off..].as_mut_ptr(), n, &state));
            tx.submit(job(src[off..].as_ptr(), n, &state));
        }
        wait_parts(&state);
        assert!(lock(&state.failed).is_none(), "{:?}", lock(&state.failed));
        assert_eq!(src, dst);
    }

    #[test]
    fn parts_for_an_ended_thread_fail_at_once() {
        let w = SocketWorkers::new(1);
        let (_a, b) = pair();
        let rx = w.lane(b, false).unwrap();
        rx.worker.post(Msg::Stop);
        let until = Instant::now() + Duration::from_secs(20);
        while !lock(&rx.worker.inbox).ended {
            assert!(Instant::now() < until, "the thread never ended");
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut buf = vec![0u8; 64];
        let state = Arc::new(ReqState::default());
        state.parts.store(1, Ordering::Release);
        rx.submit(job(buf.as_mut_ptr(), buf.len(), &state));
        assert_eq!(state.parts.load(Ordering::Acquire), 0);
        assert!(lock(&state.failed).is_some());
    }

    #[test]
    fn each_lane_gets_a_thread_until_the_most_then_they_share() {
        let w = SocketWorkers::new(3);
        let mut keep = Vec::new();
        for n in 1..=5 {
            let (a, b) = pair();
            keep.push((w.lane(a, true).unwrap(), b));
            assert_eq!(w.threads(), n.min(3));
        }
    }

    #[test]
    fn a_closed_peer_fails_the_waiting_part_and_every_later_one() {
        let w = SocketWorkers::new(2);
        let (a, b) = pair();
        let rx = w.lane(b, false).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let state = Arc::new(ReqState::default());
        state.parts.store(1, Ordering::Release);
        rx.submit(job(buf.as_mut_ptr(), buf.len(), &state));
        (&a).write_all(&[7u8; 1000]).unwrap();
        drop(a);
        wait_parts(&state);
        let why = lock(&state.failed).clone().expect("a failure");
        assert!(why.contains("mid-message"), "{why}");
        let later = Arc::new(ReqState::default());
        later.parts.store(1, Ordering::Release);
        rx.submit(job(buf.as_mut_ptr(), buf.len(), &later));
        wait_parts(&later);
        assert!(lock(&later.failed).is_some());
        assert_eq!(&buf[..1000], &[7u8; 1000][..]);
    }

    #[test]
    fn parts_of_a_removed_lane_fail_instead_of_waiting() {
        let w = SocketWorkers::new(1);
        let (_a, b) = pair();
        let rx = w.lane(b, false).unwrap();
        let mut buf = vec![0u8; 64];
        let state = Arc::new(ReqState::default());
        state.parts.store(1, Ordering::Release);
        rx.submit(job(buf.as_mut_ptr(), buf.len(), &state));
        drop(rx);
        wait_parts(&state);
        assert!(lock(&state.failed).is_some());
        assert_eq!(w.threads(), 1);
    }
}
