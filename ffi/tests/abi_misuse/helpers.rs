//! The harness the misuse tests share: case table, watchdog, thread-ranks, collective calls.

use oxccl_ffi::abi::ncclResult_t as R;
use oxccl_ffi::abi::{Stream, ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclUniqueId};
use oxccl_ffi::api::*;
use std::ffi::{CStr, c_int, c_void};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

pub(crate) const FLOAT32: ncclDataType_t = ncclDataType_t(7);
pub(crate) const SUM: ncclRedOp_t = ncclRedOp_t(0);
pub(crate) const NO_STREAM: Stream = Stream(std::ptr::null_mut());

/// Every test calls this first: the host backend whatever the machine has.
pub(crate) fn setup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: every test of this binary calls `setup` before anything else, so no other
        // thread of ours reads the environment while it is written (libtest's own threads do
        // not read it after start-up).
        unsafe { std::env::set_var("OXCCL_BACKEND", "host") };
    });
}

pub(crate) fn last_error() -> String {
    // SAFETY: ncclGetLastError returns a NUL-terminated string that outlives this copy.
    unsafe { CStr::from_ptr(ncclGetLastError(ncclComm_t::NULL)) }
        .to_string_lossy()
        .into_owned()
}

/// Ends the process, naming the case, if one call blocks for `limit`.
struct Watchdog {
    current: Arc<Mutex<String>>,
    done: mpsc::Sender<()>,
}

impl Watchdog {
    fn new(limit: Duration) -> Watchdog {
        let current = Arc::new(Mutex::new(String::from("(start)")));
        let (done, rx) = mpsc::channel::<()>();
        let name = current.clone();
        std::thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
                eprintln!(
                    "HANG: case {:?} did not return within {limit:?}",
                    name.lock().unwrap()
                );
                std::process::exit(99);
            }
        });
        Watchdog { current, done }
    }
    fn at(&self, case: &str) {
        *self.current.lock().unwrap() = case.to_string();
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        let _ = self.done.send(());
    }
}

/// The cases run and the failures among them.
pub(crate) struct Table {
    dog: Watchdog,
    run: usize,
    pub(crate) failures: Vec<String>,
    slowest: (Duration, String),
}

impl Table {
    pub(crate) fn new() -> Table {
        Table {
            dog: Watchdog::new(Duration::from_secs(60)),
            run: 0,
            failures: Vec::new(),
            slowest: (Duration::ZERO, String::new()),
        }
    }

    /// Runs one case: `call` must return `want`, and (for failures) leave a last-error
    /// sentence containing `api` and every word of `words` (case-insensitive).
    pub(crate) fn case(
        &mut self,
        name: &str,
        api: &str,
        want: R,
        words: &[&str],
        call: impl FnOnce() -> R,
    ) {
        self.dog.at(name);
        oxccl_ffi::last_error::set("");
        let t = Instant::now();
        let got = call();
        let took = t.elapsed();
        self.run += 1;
        if took > self.slowest.0 {
            self.slowest = (took, name.to_string());
        }
        let text = last_error();
        if got != want {
            self.failures.push(format!(
                "{name}: returned {got:?}, want {want:?} (last error {text:?})"
            ));
            return;
        }
        if want == R::SUCCESS {
            return;
        }
        let lower = text.to_lowercase();
        if text.is_empty() || !text.contains(api) {
            self.failures
                .push(format!("{name}: last error {text:?} does not name {api}"));
        } else if let Some(w) = words.iter().find(|w| !lower.contains(&w.to_lowercase())) {
            self.failures
                .push(format!("{name}: last error {text:?} does not say {w:?}"));
        }
        if took > Duration::from_secs(1) {
            self.failures.push(format!("{name}: took {took:?}"));
        }
    }

    pub(crate) fn finish(self, what: &str) {
        eprintln!(
            "{what}: {} cases, {} failed; slowest {:?} ({})",
            self.run,
            self.failures.len(),
            self.slowest.0,
            self.slowest.1
        );
        assert!(
            self.failures.is_empty(),
            "{what}: {} of {} cases failed:\n{}",
            self.failures.len(),
            self.run,
            self.failures.join("\n")
        );
    }
}

pub(crate) fn unique_id() -> ncclUniqueId {
    let mut id = ncclUniqueId { internal: [0; 128] };
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { ncclGetUniqueId(&mut id) }, R::SUCCESS);
    id
}

/// A communicator of `n` ranks, one per thread of `f`, each running `f(rank, comm)`.
pub(crate) fn with_ranks<T: Send>(n: usize, f: impl Fn(usize, ncclComm_t) -> T + Sync) -> Vec<T> {
    let id = unique_id();
    std::thread::scope(|s| {
        let f = &f;
        let handles: Vec<_> = (0..n)
            .map(|rank| {
                s.spawn(move || {
                    let mut comm = ncclComm_t::NULL;
                    // SAFETY: a valid out-pointer.
                    let r = unsafe { ncclCommInitRank(&mut comm, n as c_int, id, rank as c_int) };
                    assert_eq!(r, R::SUCCESS, "init rank {rank}: {}", last_error());
                    let out = f(rank, comm);
                    // SAFETY: live handle, not used afterwards.
                    let r = unsafe { ncclCommDestroy(comm) };
                    assert_eq!(r, R::SUCCESS, "destroy rank {rank}: {}", last_error());
                    out
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// A one-rank communicator.
pub(crate) fn one_rank() -> ncclComm_t {
    let mut c = ncclComm_t::NULL;
    // SAFETY: a valid out-pointer.
    let r = unsafe { ncclCommInitRank(&mut c, 1, unique_id(), 0) };
    assert_eq!(r, R::SUCCESS, "{}", last_error());
    c
}

/// The collective and point-to-point functions with a common calling shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum F {
    AllReduce,
    Broadcast,
    Bcast,
    Reduce,
    AllGather,
    ReduceScatter,
    AlltoAll,
    Gather,
    Scatter,
    Send,
    Recv,
}

pub(crate) const ALL_F: [F; 11] = [
    F::AllReduce,
    F::Broadcast,
    F::Bcast,
    F::Reduce,
    F::AllGather,
    F::ReduceScatter,
    F::AlltoAll,
    F::Gather,
    F::Scatter,
    F::Send,
    F::Recv,
];

impl F {
    pub(crate) fn api(self) -> &'static str {
        match self {
            F::AllReduce => "ncclAllReduce",
            F::Broadcast => "ncclBroadcast",
            F::Bcast => "ncclBcast",
            F::Reduce => "ncclReduce",
            F::AllGather => "ncclAllGather",
            F::ReduceScatter => "ncclReduceScatter",
            F::AlltoAll => "ncclAlltoAll",
            F::Gather => "ncclGather",
            F::Scatter => "ncclScatter",
            F::Send => "ncclSend",
            F::Recv => "ncclRecv",
        }
    }
    pub(crate) fn has_op(self) -> bool {
        matches!(self, F::AllReduce | F::Reduce | F::ReduceScatter)
    }
    /// Root for rooted collectives, peer for send/receive.
    pub(crate) fn has_rank(self) -> bool {
        matches!(
            self,
            F::Broadcast | F::Bcast | F::Reduce | F::Gather | F::Scatter | F::Send | F::Recv
        )
    }
    pub(crate) fn rank_word(self) -> &'static str {
        if self.is_p2p() { "peer" } else { "root" }
    }
    pub(crate) fn is_p2p(self) -> bool {
        matches!(self, F::Send | F::Recv)
    }
    /// Elements of the largest buffer for `count` on `n` ranks.
    pub(crate) fn span(self, count: usize, n: usize) -> usize {
        match self {
            F::AllGather | F::ReduceScatter | F::AlltoAll | F::Gather | F::Scatter => count * n,
            _ => count,
        }
    }

    /// Calls the function; `rank` is the root or peer.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn call(
        self,
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        dt: ncclDataType_t,
        op: ncclRedOp_t,
        rank: c_int,
        comm: ncclComm_t,
    ) -> R {
        let s = NO_STREAM;
        // SAFETY: forwarded from the caller.
        unsafe {
            match self {
                F::AllReduce => ncclAllReduce(send, recv, count, dt, op, comm, s),
                F::Broadcast => ncclBroadcast(send, recv, count, dt, rank, comm, s),
                F::Bcast => ncclBcast(recv, count, dt, rank, comm, s),
                F::Reduce => ncclReduce(send, recv, count, dt, op, rank, comm, s),
                F::AllGather => ncclAllGather(send, recv, count, dt, comm, s),
                F::ReduceScatter => ncclReduceScatter(send, recv, count, dt, op, comm, s),
                F::AlltoAll => ncclAlltoAll(send, recv, count, dt, comm, s),
                F::Gather => ncclGather(send, recv, count, dt, rank, comm, s),
                F::Scatter => ncclScatter(send, recv, count, dt, rank, comm, s),
                F::Send => ncclSend(send, count, dt, rank, comm, s),
                F::Recv => ncclRecv(recv, count, dt, rank, comm, s),
            }
        }
    }
}

/// Buffers that must come back untouched from a refused call.
pub(crate) struct Bufs {
    send: Vec<u8>,
    pub(crate) recv: Vec<u8>,
}

const SENTINEL: u8 = 0xa5;

impl Bufs {
    pub(crate) fn new() -> Bufs {
        Bufs {
            send: vec![SENTINEL; 4096],
            recv: vec![SENTINEL; 4096],
        }
    }
    pub(crate) fn send(&self) -> *const c_void {
        self.send.as_ptr().cast()
    }
    pub(crate) fn recv(&mut self) -> *mut c_void {
        self.recv.as_mut_ptr().cast()
    }
    pub(crate) fn untouched(&self) -> bool {
        self.send.iter().chain(&self.recv).all(|&b| b == SENTINEL)
    }
}
