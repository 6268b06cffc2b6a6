//! reliability suite T2 and T4 through the exported C functions (`ncclX` of this crate, called as a C
//! program calls them), on the host backend.
//!
//! T2: a table of every out-of-range argument (data type, reduction operator, root, peer, nranks,
//! rank, counts whose byte size overflows, NULL buffers with a nonzero count, NULL and foreign
//! communicators, NULL out-pointers). Each call must return NVIDIA NCCL's code
//! (`ncclInvalidArgument` for a bad argument, `ncclInvalidUsage` where NCCL says so), leave a
//! `ncclGetLastError` sentence naming the function and the argument, not touch the buffers, and
//! return at once. Afterwards the communicators still compute right results.
//!
//! T4: lifecycle misuse: destroy twice, every call after destroy and after abort, abort after
//! destroy, finalize twice, `ncclGroupEnd` without `ncclGroupStart`, unbalanced nesting, a group
//! whose calls failed.
//!
//! A watchdog ends the process naming the case if any call blocks for 60 s.

use oxccl_ffi::abi::ncclResult_t as R;
use oxccl_ffi::abi::{
    Stream, ncclComm, ncclComm_t, ncclConfig_t, ncclDataType_t, ncclRedOp_t, ncclScalarResidence_t,
    ncclUniqueId,
};
use oxccl_ffi::api::*;
use std::ffi::{CStr, c_int, c_void};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

const FLOAT32: ncclDataType_t = ncclDataType_t(7);
const SUM: ncclRedOp_t = ncclRedOp_t(0);
const NO_STREAM: Stream = Stream(std::ptr::null_mut());

/// Every test calls this first: the host backend whatever the machine has.
fn setup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: every test of this binary calls `setup` before anything else, so no other
        // thread of ours reads the environment while it is written (libtest's own threads do
        // not read it after start-up).
        unsafe { std::env::set_var("OXCCL_BACKEND", "host") };
    });
}

fn last_error() -> String {
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
struct Table {
    dog: Watchdog,
    run: usize,
    failures: Vec<String>,
    slowest: (Duration, String),
}

impl Table {
    fn new() -> Table {
        Table {
            dog: Watchdog::new(Duration::from_secs(60)),
            run: 0,
            failures: Vec::new(),
            slowest: (Duration::ZERO, String::new()),
        }
    }

    /// Runs one case: `call` must return `want`, and (for failures) leave a last-error
    /// sentence containing `api` and every word of `words` (case-insensitive).
    fn case(&mut self, name: &str, api: &str, want: R, words: &[&str], call: impl FnOnce() -> R) {
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

    fn finish(self, what: &str) {
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

fn unique_id() -> ncclUniqueId {
    let mut id = ncclUniqueId { internal: [0; 128] };
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { ncclGetUniqueId(&mut id) }, R::SUCCESS);
    id
}

/// A communicator of `n` ranks, one per thread of `f`, each running `f(rank, comm)`.
fn with_ranks<T: Send>(n: usize, f: impl Fn(usize, ncclComm_t) -> T + Sync) -> Vec<T> {
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

/// The collective and point-to-point functions with a common calling shape.
#[derive(Debug, Clone, Copy, PartialEq)]
enum F {
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

const ALL_F: [F; 11] = [
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
    fn api(self) -> &'static str {
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
    fn has_op(self) -> bool {
        matches!(self, F::AllReduce | F::Reduce | F::ReduceScatter)
    }
    /// Root for rooted collectives, peer for send/receive.
    fn has_rank(self) -> bool {
        matches!(
            self,
            F::Broadcast | F::Bcast | F::Reduce | F::Gather | F::Scatter | F::Send | F::Recv
        )
    }
    fn rank_word(self) -> &'static str {
        if self.is_p2p() { "peer" } else { "root" }
    }
    fn is_p2p(self) -> bool {
        matches!(self, F::Send | F::Recv)
    }
    /// Elements of the largest buffer for `count` on `n` ranks.
    fn span(self, count: usize, n: usize) -> usize {
        match self {
            F::AllGather | F::ReduceScatter | F::AlltoAll | F::Gather | F::Scatter => count * n,
            _ => count,
        }
    }

    /// Calls the function; `rank` is the root or peer.
    #[allow(clippy::too_many_arguments)]
    unsafe fn call(
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

/// Sizes in bytes of the 12 data types, in `ncclDataType_t` order.
const TYPE_SIZES: [usize; 12] = [1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1];

/// Buffers that must come back untouched from a refused call.
struct Bufs {
    send: Vec<u8>,
    recv: Vec<u8>,
}

const SENTINEL: u8 = 0xa5;

impl Bufs {
    fn new() -> Bufs {
        Bufs {
            send: vec![SENTINEL; 4096],
            recv: vec![SENTINEL; 4096],
        }
    }
    fn send(&self) -> *const c_void {
        self.send.as_ptr().cast()
    }
    fn recv(&mut self) -> *mut c_void {
        self.recv.as_mut_ptr().cast()
    }
    fn untouched(&self) -> bool {
        self.send.iter().chain(&self.recv).all(|&b| b == SENTINEL)
    }
}

/// The per-argument table of every collective and send/receive on `comm` (rank `me` of `n`).
/// `solo` also runs the calls that succeed (count 0 with NULL buffers), which on more than one
/// rank would need the others.
fn argument_table(t: &mut Table, comm: ncclComm_t, me: usize, n: usize, solo: bool) {
    let mut b = Bufs::new();
    let ni = n as c_int;
    let bad_types: [c_int; 6] = [-1, 12, 13, 255, c_int::MAX, c_int::MIN];
    // 5 is the first user-operator handle: never created on this communicator.
    let bad_ops: [c_int; 6] = [-1, 5, 6, 1000, c_int::MAX, c_int::MIN];
    let bad_ranks: [c_int; 5] = [-1, ni, ni + 1, c_int::MAX, c_int::MIN];
    let foreign = ncclComm_t(&b as *const Bufs as *mut ncclComm);
    #[allow(clippy::too_many_arguments)]
    fn call(
        f: F,
        s: *const c_void,
        r: *mut c_void,
        count: usize,
        dt: ncclDataType_t,
        op: ncclRedOp_t,
        rank: c_int,
        comm: ncclComm_t,
    ) -> R {
        // SAFETY: the buffers passed below are NULL (the case) or hold 4096 bytes, more than any
        // call that is accepted reads or writes; refused calls must not touch them (checked at
        // the end of the table).
        unsafe { f.call(s, r, count, dt, op, rank, comm) }
    }
    for f in ALL_F {
        let api = f.api();
        for &dt in &bad_types {
            let (s, r) = (b.send(), b.recv());
            t.case(
                &format!("{api} datatype {dt}"),
                api,
                R::INVALID_ARGUMENT,
                &["data type"],
                || call(f, s, r, 4, ncclDataType_t(dt), SUM, 0, comm),
            );
        }
        if f.has_op() {
            for &op in &bad_ops {
                let (s, r) = (b.send(), b.recv());
                t.case(
                    &format!("{api} op {op}"),
                    api,
                    R::INVALID_ARGUMENT,
                    &["reduction operator"],
                    || call(f, s, r, 4, FLOAT32, ncclRedOp_t(op), 0, comm),
                );
            }
        }
        if f.has_rank() {
            for &rk in &bad_ranks {
                let (s, r) = (b.send(), b.recv());
                let w = f.rank_word();
                t.case(
                    &format!("{api} {w} {rk} of {n}"),
                    api,
                    R::INVALID_ARGUMENT,
                    &[w],
                    || call(f, s, r, 4, FLOAT32, SUM, rk, comm),
                );
            }
        }
        for (what, c) in [("NULL", ncclComm_t::NULL), ("foreign", foreign)] {
            let (s, r) = (b.send(), b.recv());
            t.case(
                &format!("{api} {what} comm"),
                api,
                R::INVALID_ARGUMENT,
                &["comm"],
                || call(f, s, r, 4, FLOAT32, SUM, 0, c),
            );
        }
        // NULL buffers with a nonzero count; this rank is the root (or the peer), so it uses
        // both buffers.
        let me = me as c_int;
        let null_send = !matches!(f, F::Bcast | F::Recv);
        let null_recv = !matches!(f, F::Send);
        if null_send {
            let r = b.recv();
            t.case(
                &format!("{api} NULL send buffer"),
                api,
                R::INVALID_ARGUMENT,
                &["send buffer is NULL"],
                || call(f, std::ptr::null(), r, 4, FLOAT32, SUM, me, comm),
            );
        }
        if null_recv {
            let s = b.send();
            let word = if matches!(f, F::Bcast) {
                "NULL"
            } else {
                "receive buffer is NULL"
            };
            t.case(
                &format!("{api} NULL receive buffer"),
                api,
                R::INVALID_ARGUMENT,
                &[word],
                || call(f, s, std::ptr::null_mut(), 4, FLOAT32, SUM, me, comm),
            );
        }
        t.case(
            &format!("{api} both buffers NULL, count 7"),
            api,
            R::INVALID_ARGUMENT,
            &["NULL"],
            || {
                call(
                    f,
                    std::ptr::null(),
                    std::ptr::null_mut(),
                    7,
                    FLOAT32,
                    SUM,
                    me,
                    comm,
                )
            },
        );
        // (A send or receive of 0 elements outside a group would wait for its match.)
        if solo && !f.is_p2p() {
            t.case(
                &format!("{api} NULL buffers, count 0"),
                api,
                R::SUCCESS,
                &[],
                || {
                    call(
                        f,
                        std::ptr::null(),
                        std::ptr::null_mut(),
                        0,
                        FLOAT32,
                        SUM,
                        0,
                        comm,
                    )
                },
            );
        }
        // Counts whose byte size overflows size_t (or the address space) for every type, with
        // real (small) buffers: refused before anything is read or written. This rank is the
        // root, so Gather and Scatter span count * nranks elements here.
        for (ty, &esize) in TYPE_SIZES.iter().enumerate() {
            let per = esize * if f.span(1, n) > 1 { n } else { 1 };
            // size_t overflow of count * size (and of count * nranks * size), then a byte size
            // past isize::MAX, the most any buffer can hold.
            let mut counts = vec![usize::MAX];
            counts.extend((usize::MAX / per).checked_add(1));
            counts.push((isize::MAX as usize) / per + 1);
            counts.dedup();
            for count in counts {
                let (s, r) = (b.send(), b.recv());
                t.case(
                    &format!("{api} count {count:#x} of type {ty}"),
                    api,
                    R::INVALID_ARGUMENT,
                    &["count", "overflows"],
                    || call(f, s, r, count, ncclDataType_t(ty as c_int), SUM, me, comm),
                );
            }
        }
    }
    assert!(b.untouched(), "a refused call wrote into a buffer");
}

/// NULL out-pointers, NULL communicators and bad arguments of the functions other than
/// collectives, on the live one-rank `comm`.
fn other_functions_table(t: &mut Table, comm: ncclComm_t) {
    let id = unique_id();
    let mut v: c_int = 0;
    let mut ptr: *mut c_void = std::ptr::null_mut();
    let mut buf = [0f32; 16];
    let garbage = ncclComm_t(0x5a5a_5a5a as *mut ncclComm);
    let ia = R::INVALID_ARGUMENT;
    // SAFETY: (every call below) each pointer is NULL (the case) or valid for the call.
    unsafe {
        t.case(
            "ncclGetVersion(NULL)",
            "ncclGetVersion",
            ia,
            &["NULL"],
            || ncclGetVersion(std::ptr::null_mut()),
        );
        t.case(
            "ncclGetUniqueId(NULL)",
            "ncclGetUniqueId",
            ia,
            &["NULL"],
            || ncclGetUniqueId(std::ptr::null_mut()),
        );
        t.case(
            "ncclCommInitRank NULL out",
            "ncclCommInitRank",
            ia,
            &["comm", "NULL"],
            || ncclCommInitRank(std::ptr::null_mut(), 1, id, 0),
        );
        t.case(
            "ncclCommInitRankConfig NULL out",
            "ncclCommInitRankConfig",
            ia,
            &["NULL"],
            || ncclCommInitRankConfig(std::ptr::null_mut(), 1, id, 0, std::ptr::null_mut()),
        );
        t.case(
            "ncclCommInitRankScalable NULL out",
            "ncclCommInitRankScalable",
            ia,
            &["NULL"],
            || {
                let mut ids = [id];
                ncclCommInitRankScalable(
                    std::ptr::null_mut(),
                    1,
                    0,
                    1,
                    ids.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            },
        );
        t.case(
            "ncclCommInitRankScalable NULL ids",
            "ncclCommInitRankScalable",
            ia,
            &["commIds"],
            || {
                let mut c = ncclComm_t::NULL;
                ncclCommInitRankScalable(
                    &mut c,
                    1,
                    0,
                    1,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            },
        );
        for n_id in [0, -1, c_int::MIN] {
            t.case(
                &format!("ncclCommInitRankScalable nId {n_id}"),
                "ncclCommInitRankScalable",
                ia,
                &["nId"],
                || {
                    let mut c = ncclComm_t::NULL;
                    let mut ids = [id];
                    ncclCommInitRankScalable(
                        &mut c,
                        1,
                        0,
                        n_id,
                        ids.as_mut_ptr(),
                        std::ptr::null_mut(),
                    )
                },
            );
        }
        t.case(
            "ncclCommInitAll NULL out",
            "ncclCommInitAll",
            ia,
            &["NULL"],
            || ncclCommInitAll(std::ptr::null_mut(), 1, std::ptr::null()),
        );
        for ndev in [0, -1, c_int::MIN] {
            t.case(
                &format!("ncclCommInitAll ndev {ndev}"),
                "ncclCommInitAll",
                ia,
                &["devices"],
                || {
                    let mut c = [ncclComm_t::NULL; 1];
                    ncclCommInitAll(c.as_mut_ptr(), ndev, std::ptr::null())
                },
            );
        }
        for dev in [-1, 1 << 20, c_int::MAX, c_int::MIN] {
            t.case(
                &format!("ncclCommInitAll device {dev}"),
                "ncclCommInitAll",
                ia,
                &["device"],
                || {
                    let mut c = [ncclComm_t::NULL; 1];
                    ncclCommInitAll(c.as_mut_ptr(), 1, [dev].as_ptr())
                },
            );
        }
        // Queries: NULL out-pointer on a live comm, then a NULL and a never-issued comm.
        type Query = unsafe extern "C" fn(ncclComm_t, *mut c_int) -> R;
        let queries: [(&str, Query); 3] = [
            ("ncclCommCount", ncclCommCount),
            ("ncclCommCuDevice", ncclCommCuDevice),
            ("ncclCommUserRank", ncclCommUserRank),
        ];
        for (api, q) in queries {
            t.case(&format!("{api} NULL out"), api, ia, &["NULL"], || {
                q(comm, std::ptr::null_mut())
            });
            t.case(&format!("{api} NULL comm"), api, ia, &["comm"], || {
                q(ncclComm_t::NULL, &mut v)
            });
            t.case(
                &format!("{api} garbage comm"),
                api,
                ia,
                &["not a communicator"],
                || q(garbage, &mut v),
            );
        }
        t.case(
            "ncclCommGetAsyncError NULL out",
            "ncclCommGetAsyncError",
            ia,
            &["NULL"],
            || ncclCommGetAsyncError(comm, std::ptr::null_mut()),
        );
        t.case(
            "ncclCommGetAsyncError NULL comm",
            "ncclCommGetAsyncError",
            ia,
            &["comm"],
            || {
                let mut e = R::SUCCESS;
                ncclCommGetAsyncError(ncclComm_t::NULL, &mut e)
            },
        );
        // Split: NULL out, bad colours, NULL parent.
        t.case(
            "ncclCommSplit NULL out",
            "ncclCommSplit",
            ia,
            &["newcomm", "NULL"],
            || ncclCommSplit(comm, 0, 0, std::ptr::null_mut(), std::ptr::null_mut()),
        );
        for color in [-2, -1000, c_int::MIN] {
            t.case(
                &format!("ncclCommSplit color {color}"),
                "ncclCommSplit",
                ia,
                &["color"],
                || {
                    let mut c = ncclComm_t::NULL;
                    ncclCommSplit(comm, color, 0, &mut c, std::ptr::null_mut())
                },
            );
        }
        t.case(
            "ncclCommSplit NULL comm",
            "ncclCommSplit",
            ia,
            &["comm"],
            || {
                let mut c = ncclComm_t::NULL;
                ncclCommSplit(ncclComm_t::NULL, 0, 0, &mut c, std::ptr::null_mut())
            },
        );
        t.case(
            "ncclCommShrink NULL out",
            "ncclCommShrink",
            ia,
            &["NULL"],
            || {
                ncclCommShrink(
                    comm,
                    std::ptr::null_mut(),
                    0,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    0,
                )
            },
        );
        t.case(
            "ncclCommShrink count -1",
            "ncclCommShrink",
            ia,
            &["excludeRanksCount"],
            || {
                let mut c = ncclComm_t::NULL;
                ncclCommShrink(
                    comm,
                    std::ptr::null_mut(),
                    -1,
                    &mut c,
                    std::ptr::null_mut(),
                    0,
                )
            },
        );
        t.case(
            "ncclCommShrink NULL list",
            "ncclCommShrink",
            ia,
            &["excludeRanksList"],
            || {
                let mut c = ncclComm_t::NULL;
                ncclCommShrink(
                    comm,
                    std::ptr::null_mut(),
                    2,
                    &mut c,
                    std::ptr::null_mut(),
                    0,
                )
            },
        );
        for rk in [5, -1, c_int::MAX] {
            t.case(
                &format!("ncclCommShrink exclude {rk}"),
                "ncclCommShrink",
                ia,
                &["out of range"],
                || {
                    let mut c = ncclComm_t::NULL;
                    let mut list = [rk];
                    ncclCommShrink(comm, list.as_mut_ptr(), 1, &mut c, std::ptr::null_mut(), 0)
                },
            );
        }
        // Reduction operators.
        let mut op = ncclRedOp_t(0);
        let scalar: *mut c_void = (&mut buf[0] as *mut f32).cast();
        t.case(
            "ncclRedOpCreatePreMulSum NULL op",
            "ncclRedOpCreatePreMulSum",
            ia,
            &["NULL"],
            || {
                ncclRedOpCreatePreMulSum(
                    std::ptr::null_mut(),
                    scalar,
                    FLOAT32,
                    ncclScalarResidence_t(1),
                    comm,
                )
            },
        );
        t.case(
            "ncclRedOpCreatePreMulSum NULL scalar",
            "ncclRedOpCreatePreMulSum",
            ia,
            &["scalar"],
            || {
                ncclRedOpCreatePreMulSum(
                    &mut op,
                    std::ptr::null_mut(),
                    FLOAT32,
                    ncclScalarResidence_t(1),
                    comm,
                )
            },
        );
        for dt in [-1, 12, c_int::MAX] {
            t.case(
                &format!("ncclRedOpCreatePreMulSum datatype {dt}"),
                "ncclRedOpCreatePreMulSum",
                ia,
                &["data type"],
                || {
                    ncclRedOpCreatePreMulSum(
                        &mut op,
                        scalar,
                        ncclDataType_t(dt),
                        ncclScalarResidence_t(1),
                        comm,
                    )
                },
            );
        }
        for res in [-1, 2, c_int::MAX] {
            t.case(
                &format!("ncclRedOpCreatePreMulSum residence {res}"),
                "ncclRedOpCreatePreMulSum",
                ia,
                &["residence"],
                || {
                    ncclRedOpCreatePreMulSum(
                        &mut op,
                        scalar,
                        FLOAT32,
                        ncclScalarResidence_t(res),
                        comm,
                    )
                },
            );
        }
        t.case(
            "ncclRedOpCreatePreMulSum NULL comm",
            "ncclRedOpCreatePreMulSum",
            ia,
            &["comm"],
            || {
                ncclRedOpCreatePreMulSum(
                    &mut op,
                    scalar,
                    FLOAT32,
                    ncclScalarResidence_t(1),
                    ncclComm_t::NULL,
                )
            },
        );
        for o in [0, 4, -1, 5, 77, c_int::MAX, c_int::MIN] {
            t.case(
                &format!("ncclRedOpDestroy op {o}"),
                "ncclRedOpDestroy",
                ia,
                &[],
                || ncclRedOpDestroy(ncclRedOp_t(o), comm),
            );
        }
        t.case(
            "ncclRedOpDestroy NULL comm",
            "ncclRedOpDestroy",
            ia,
            &["comm"],
            || ncclRedOpDestroy(ncclRedOp_t(5), ncclComm_t::NULL),
        );
        // AlltoAllv (one entry per rank: one here): NULL arrays, bad type, counts and
        // displacements whose sum or byte size overflows.
        let one = [1usize];
        let zero = [0usize];
        let arrays: [(&str, *const usize); 2] = [("NULL", std::ptr::null()), ("ok", one.as_ptr())];
        for (k, name) in ["sendcounts", "sdispls", "recvcounts", "rdispls"]
            .iter()
            .enumerate()
        {
            let pick = |i: usize| if i == k { arrays[0].1 } else { arrays[1].1 };
            let (sp, rp) = (
                buf.as_ptr().cast::<c_void>(),
                buf.as_mut_ptr().cast::<c_void>(),
            );
            t.case(
                &format!("ncclAlltoAllv NULL {name}"),
                "ncclAlltoAllv",
                ia,
                &[name, "NULL"],
                || {
                    ncclAlltoAllv(
                        sp,
                        pick(0),
                        pick(1),
                        rp,
                        pick(2),
                        pick(3),
                        FLOAT32,
                        comm,
                        NO_STREAM,
                    )
                },
            );
        }
        let huge: [(&str, [usize; 1], [usize; 1]); 4] = [
            ("count SIZE_MAX", [usize::MAX], zero),
            ("count SIZE_MAX/4+1", [usize::MAX / 4 + 1], zero),
            ("displacement SIZE_MAX", one, [usize::MAX]),
            (
                "count + displacement past PTRDIFF_MAX",
                [1 << 61],
                [1 << 61],
            ),
        ];
        for (what, counts, displs) in huge {
            for side in ["send", "recv"] {
                let (sp, rp) = (
                    buf.as_ptr().cast::<c_void>(),
                    buf.as_mut_ptr().cast::<c_void>(),
                );
                let (sc, sd, rc, rd) = if side == "send" {
                    (
                        counts.as_ptr(),
                        displs.as_ptr(),
                        one.as_ptr(),
                        zero.as_ptr(),
                    )
                } else {
                    (
                        one.as_ptr(),
                        zero.as_ptr(),
                        counts.as_ptr(),
                        displs.as_ptr(),
                    )
                };
                t.case(
                    &format!("ncclAlltoAllv {side} {what}"),
                    "ncclAlltoAllv",
                    ia,
                    &["overflows"],
                    || ncclAlltoAllv(sp, sc, sd, rp, rc, rd, FLOAT32, comm, NO_STREAM),
                );
            }
        }
        t.case(
            "ncclAlltoAllv datatype 12",
            "ncclAlltoAllv",
            ia,
            &["data type"],
            || {
                let (sp, rp) = (
                    buf.as_ptr().cast::<c_void>(),
                    buf.as_mut_ptr().cast::<c_void>(),
                );
                ncclAlltoAllv(
                    sp,
                    one.as_ptr(),
                    zero.as_ptr(),
                    rp,
                    one.as_ptr(),
                    zero.as_ptr(),
                    ncclDataType_t(12),
                    comm,
                    NO_STREAM,
                )
            },
        );
        t.case(
            "ncclAlltoAllv NULL comm",
            "ncclAlltoAllv",
            ia,
            &["comm"],
            || {
                let (sp, rp) = (
                    buf.as_ptr().cast::<c_void>(),
                    buf.as_mut_ptr().cast::<c_void>(),
                );
                ncclAlltoAllv(
                    sp,
                    one.as_ptr(),
                    zero.as_ptr(),
                    rp,
                    one.as_ptr(),
                    zero.as_ptr(),
                    FLOAT32,
                    ncclComm_t::NULL,
                    NO_STREAM,
                )
            },
        );
        // Memory and registration.
        t.case(
            "ncclMemAlloc NULL out",
            "ncclMemAlloc",
            ia,
            &["NULL"],
            || ncclMemAlloc(std::ptr::null_mut(), 16),
        );
        t.case("ncclMemAlloc size 0", "ncclMemAlloc", ia, &["size"], || {
            ncclMemAlloc(&mut ptr, 0)
        });
        t.case(
            "ncclCommRegister NULL handle",
            "ncclCommRegister",
            ia,
            &["NULL"],
            || ncclCommRegister(comm, buf.as_mut_ptr().cast(), 64, std::ptr::null_mut()),
        );
        t.case(
            "ncclCommRegister NULL buffer",
            "ncclCommRegister",
            ia,
            &["NULL"],
            || ncclCommRegister(comm, std::ptr::null_mut(), 64, &mut ptr),
        );
        t.case(
            "ncclCommRegister NULL comm",
            "ncclCommRegister",
            ia,
            &["comm"],
            || ncclCommRegister(ncclComm_t::NULL, buf.as_mut_ptr().cast(), 64, &mut ptr),
        );
        // Unbalanced group calls with nothing open.
        t.case(
            "ncclGroupEnd without ncclGroupStart",
            "ncclGroupEnd",
            R::INVALID_USAGE,
            &["ncclGroupStart"],
            || ncclGroupEnd(),
        );
    }
}

/// A one-rank AllReduce (sum) of `count` floats, checked element by element.
fn checked_all_reduce(comm: ncclComm_t, n: usize, rank: usize, count: usize) -> usize {
    let send: Vec<f32> = (0..count).map(|i| (rank * 1000 + i) as f32).collect();
    let mut recv = vec![f32::NAN; count];
    // SAFETY: buffers of `count` floats; the host backend completes the call before returning.
    let r = unsafe {
        ncclAllReduce(
            send.as_ptr().cast(),
            recv.as_mut_ptr().cast(),
            count,
            FLOAT32,
            SUM,
            comm,
            NO_STREAM,
        )
    };
    assert_eq!(r, R::SUCCESS, "{}", last_error());
    recv.iter()
        .enumerate()
        .filter(|&(i, &x)| x != (0..n).map(|q| (q * 1000 + i) as f32).sum::<f32>())
        .count()
}

/// T2 on a one-rank communicator: every argument table, then a correct AllReduce.
#[test]
fn out_of_range_arguments_one_rank() {
    setup();
    let t = with_ranks(1, |_, comm| {
        let mut t = Table::new();
        argument_table(&mut t, comm, 0, 1, true);
        other_functions_table(&mut t, comm);
        assert_eq!(
            checked_all_reduce(comm, 1, 0, 1000),
            0,
            "wrong elements after the table"
        );
        t
    });
    t.into_iter().next().unwrap().finish("T2 one rank");
}

/// T2 on 3 thread-ranks: every rank runs the argument table at once (refusals are local and
/// leave nothing half-done), then the ranks compute a correct AllReduce and Broadcast.
#[test]
fn out_of_range_arguments_three_ranks() {
    setup();
    let n = 3;
    let results = with_ranks(n, |rank, comm| {
        let mut t = Table::new();
        argument_table(&mut t, comm, rank, n, false);
        let wrong = checked_all_reduce(comm, n, rank, 4099);
        let mut data: Vec<f32> = if rank == 1 {
            (0..777).map(|i| i as f32 * 0.5).collect()
        } else {
            vec![-1.0; 777]
        };
        // SAFETY: 777 floats, in place; completes before returning.
        let r = unsafe { ncclBcast(data.as_mut_ptr().cast(), 777, FLOAT32, 1, comm, NO_STREAM) };
        assert_eq!(r, R::SUCCESS, "{}", last_error());
        let bwrong = data
            .iter()
            .enumerate()
            .filter(|&(i, &x)| x != i as f32 * 0.5)
            .count();
        (t, wrong + bwrong)
    });
    for (rank, (t, wrong)) in results.into_iter().enumerate() {
        assert_eq!(wrong, 0, "rank {rank}: wrong elements after the table");
        t.finish(&format!("T2 rank {rank} of 3"));
    }
}

/// T2 for init: nranks 0, negative and huge; rank negative and >= nranks. Each fails at once
/// with `ncclInvalidArgument` and leaves the out-pointer NULL.
#[test]
fn out_of_range_init_arguments() {
    setup();
    let mut t = Table::new();
    let id = unique_id();
    let cases: [(c_int, c_int, &str); 13] = [
        (0, 0, "number of ranks"),
        (-1, 0, "number of ranks"),
        (c_int::MIN, 0, "number of ranks"),
        (2, -1, "rank -1"),
        (2, 2, "rank 2"),
        (2, 3, "rank 3"),
        (2, c_int::MAX, "invalid rank"),
        (2, c_int::MIN, "invalid rank"),
        (c_int::MAX, -1, "invalid rank"),
        (1, 1, "rank 1"),
        ((1 << 24) + 1, 0, "number of ranks"),
        (c_int::MAX, 0, "number of ranks"),
        (c_int::MAX, c_int::MAX - 1, "number of ranks"),
    ];
    for (nranks, rank, word) in cases {
        for api in ["ncclCommInitRank", "ncclCommInitRankConfig"] {
            let poisoned = ncclComm_t(0x1234 as *mut ncclComm);
            let mut c = poisoned;
            t.case(
                &format!("{api} nranks {nranks} rank {rank}"),
                api,
                R::INVALID_ARGUMENT,
                &[word],
                || {
                    // SAFETY: valid out-pointer; NULL or an initialised config.
                    unsafe {
                        if api == "ncclCommInitRank" {
                            ncclCommInitRank(&mut c, nranks, id, rank)
                        } else {
                            let mut cfg = ncclConfig_t::initializer();
                            ncclCommInitRankConfig(&mut c, nranks, id, rank, &mut cfg)
                        }
                    }
                },
            );
            if c != ncclComm_t::NULL {
                t.failures.push(format!(
                    "{api} nranks {nranks} rank {rank}: out-pointer left {c:?}, want NULL"
                ));
            }
        }
    }
    t.finish("T2 init arguments");
}

/// Resident memory of this process in KiB.
fn rss_kib() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// T2: the largest nranks accepted (2^24), as rank 0 (whose process hosts the unique id's root)
/// and as the last rank, non-blocking: init returns at once, waits for the missing ranks with
/// bounded memory, and abort ends it at once. (Above 2^24 init is refused: the table
/// above; before, `nranks = INT_MAX` aborted the process on a 16 GiB allocation.)
#[test]
fn largest_nranks_waits_without_memory_and_aborts() {
    setup();
    let n = 1 << 24;
    for rank in [0, n - 1] {
        let before = rss_kib();
        let id = unique_id();
        let mut cfg = ncclConfig_t::initializer();
        cfg.blocking = 0;
        let mut c = ncclComm_t::NULL;
        let t = Instant::now();
        // SAFETY: valid out-pointer and config.
        let r = unsafe { ncclCommInitRankConfig(&mut c, n, id, rank, &mut cfg) };
        let took = t.elapsed();
        assert_eq!(r, R::IN_PROGRESS, "rank {rank} of {n}: {}", last_error());
        assert!(took < Duration::from_secs(1), "{took:?}");
        std::thread::sleep(Duration::from_millis(300));
        let mut e = R::SUCCESS;
        // SAFETY: a live handle and a valid out-pointer.
        assert_eq!(unsafe { ncclCommGetAsyncError(c, &mut e) }, R::SUCCESS);
        assert_eq!(e, R::IN_PROGRESS, "rank {rank}: {}", last_error());
        let grew = rss_kib().saturating_sub(before);
        let t = Instant::now();
        // SAFETY: a live handle, not used afterwards.
        assert_eq!(unsafe { ncclCommAbort(c) }, R::SUCCESS);
        let abort_took = t.elapsed();
        eprintln!(
            "nranks {n} rank {rank}: init returned in {took:?}, RSS +{grew} KiB while waiting, \
             abort {abort_took:?}"
        );
        // The rank's bootstrap connection tables take 16 bytes per rank before the root's
        // table arrives (256 MiB at 2^24); nothing else may grow with nranks.
        let bound = 20 * n as usize / 1024 + 16 * 1024;
        assert!(grew < bound, "RSS grew by {grew} KiB waiting for {n} ranks");
        assert!(abort_took < Duration::from_secs(2), "{abort_took:?}");
    }
}

/// A one-rank communicator.
fn one_rank() -> ncclComm_t {
    let mut c = ncclComm_t::NULL;
    // SAFETY: a valid out-pointer.
    let r = unsafe { ncclCommInitRank(&mut c, 1, unique_id(), 0) };
    assert_eq!(r, R::SUCCESS, "{}", last_error());
    c
}

/// Every call that needs a live communicator, on `c`, must return `want` naming `word`.
fn dead_handle_table(t: &mut Table, c: ncclComm_t, what: &str, want: R, word: &str) {
    let mut b = Bufs::new();
    let mut v: c_int = 0;
    for f in ALL_F {
        let (s, r) = (b.send(), b.recv());
        // SAFETY: 4096-byte buffers; the call must be refused without touching them.
        t.case(
            &format!("{} on a {what} comm", f.api()),
            f.api(),
            want,
            &[word],
            || unsafe { f.call(s, r, 4, FLOAT32, SUM, 0, c) },
        );
    }
    // SAFETY: (every call below) valid out-pointers; `c` is a handle this library issued.
    unsafe {
        t.case(
            &format!("ncclCommCount on a {what} comm"),
            "ncclCommCount",
            want,
            &[word],
            || ncclCommCount(c, &mut v),
        );
        t.case(
            &format!("ncclCommUserRank on a {what} comm"),
            "ncclCommUserRank",
            want,
            &[word],
            || ncclCommUserRank(c, &mut v),
        );
        t.case(
            &format!("ncclCommCuDevice on a {what} comm"),
            "ncclCommCuDevice",
            want,
            &[word],
            || ncclCommCuDevice(c, &mut v),
        );
        t.case(
            &format!("ncclCommGetAsyncError on a {what} comm"),
            "ncclCommGetAsyncError",
            want,
            &[word],
            || {
                let mut e = R::SUCCESS;
                ncclCommGetAsyncError(c, &mut e)
            },
        );
        t.case(
            &format!("ncclCommSplit on a {what} comm"),
            "ncclCommSplit",
            want,
            &[word],
            || {
                let mut n = ncclComm_t::NULL;
                ncclCommSplit(c, 0, 0, &mut n, std::ptr::null_mut())
            },
        );
        t.case(
            &format!("ncclCommFinalize on a {what} comm"),
            "ncclCommFinalize",
            want,
            &[word],
            || ncclCommFinalize(c),
        );
        t.case(
            &format!("ncclCommRevoke on a {what} comm"),
            "ncclCommRevoke",
            want,
            &[word],
            || ncclCommRevoke(c, 0),
        );
        t.case(
            &format!("ncclCommRegister on a {what} comm"),
            "ncclCommRegister",
            want,
            &[word],
            || {
                let mut h: *mut c_void = std::ptr::null_mut();
                ncclCommRegister(c, b.recv.as_mut_ptr().cast(), 64, &mut h)
            },
        );
        t.case(
            &format!("ncclRedOpCreatePreMulSum on a {what} comm"),
            "ncclRedOpCreatePreMulSum",
            want,
            &[word],
            || {
                let mut op = ncclRedOp_t(0);
                let mut x = 2.0f32;
                ncclRedOpCreatePreMulSum(
                    &mut op,
                    (&mut x as *mut f32).cast(),
                    FLOAT32,
                    ncclScalarResidence_t(1),
                    c,
                )
            },
        );
    }
    assert!(b.untouched(), "a refused call wrote into a buffer");
}

/// T4: destroy twice, use after destroy, abort after destroy; abort twice, use and destroy
/// after abort. (NCCL frees the object, so its answer to a dead handle is undefined; oxccl keeps
/// a tombstone per handle and answers `ncclInvalidUsage`, docs/abi.md.)
#[test]
fn destroyed_and_aborted_handles() {
    setup();
    let mut t = Table::new();
    let usage = R::INVALID_USAGE;
    // SAFETY: (every call) handles issued by this library, alive or dead.
    unsafe {
        let c = one_rank();
        t.case("destroy", "ncclCommDestroy", R::SUCCESS, &[], || {
            ncclCommDestroy(c)
        });
        t.case(
            "destroy twice",
            "ncclCommDestroy",
            usage,
            &["destroyed"],
            || ncclCommDestroy(c),
        );
        dead_handle_table(&mut t, c, "destroyed", usage, "destroyed");
        t.case(
            "abort after destroy",
            "ncclCommAbort",
            usage,
            &["destroyed"],
            || ncclCommAbort(c),
        );
        t.case(
            "destroy a third time",
            "ncclCommDestroy",
            usage,
            &["destroyed"],
            || ncclCommDestroy(c),
        );

        let c = one_rank();
        t.case("abort", "ncclCommAbort", R::SUCCESS, &[], || {
            ncclCommAbort(c)
        });
        t.case(
            "abort twice (idempotent)",
            "ncclCommAbort",
            R::SUCCESS,
            &[],
            || ncclCommAbort(c),
        );
        dead_handle_table(&mut t, c, "aborted", usage, "aborted");
        t.case(
            "destroy after abort",
            "ncclCommDestroy",
            usage,
            &["aborted"],
            || ncclCommDestroy(c),
        );

        // NULL: destroy, abort, finalize and revoke are no-ops (as in NCCL).
        t.case("destroy NULL", "ncclCommDestroy", R::SUCCESS, &[], || {
            ncclCommDestroy(ncclComm_t::NULL)
        });
        t.case("abort NULL", "ncclCommAbort", R::SUCCESS, &[], || {
            ncclCommAbort(ncclComm_t::NULL)
        });
        t.case("finalize NULL", "ncclCommFinalize", R::SUCCESS, &[], || {
            ncclCommFinalize(ncclComm_t::NULL)
        });
        t.case("revoke NULL", "ncclCommRevoke", R::SUCCESS, &[], || {
            ncclCommRevoke(ncclComm_t::NULL, 0)
        });

        // Finalize twice: ncclInvalidArgument the second time (NCCL); no operation after
        // finalize; destroy still works.
        let c = one_rank();
        let mut buf = [1.0f32; 8];
        let p: *mut c_void = buf.as_mut_ptr().cast();
        t.case("finalize", "ncclCommFinalize", R::SUCCESS, &[], || {
            ncclCommFinalize(c)
        });
        t.case(
            "finalize twice",
            "ncclCommFinalize",
            R::INVALID_ARGUMENT,
            &["already finalized"],
            || ncclCommFinalize(c),
        );
        t.case(
            "allreduce after finalize",
            "ncclAllReduce",
            usage,
            &["finalized"],
            || ncclAllReduce(p, p, 8, FLOAT32, SUM, c, NO_STREAM),
        );
        t.case(
            "count after finalize",
            "ncclCommCount",
            R::SUCCESS,
            &[],
            || {
                let mut v = 0;
                ncclCommCount(c, &mut v)
            },
        );
        t.case(
            "destroy after finalize",
            "ncclCommDestroy",
            R::SUCCESS,
            &[],
            || ncclCommDestroy(c),
        );
        t.case(
            "finalize after destroy",
            "ncclCommFinalize",
            usage,
            &["destroyed"],
            || ncclCommFinalize(c),
        );
    }
    t.finish("T4 dead handles");
}

/// T4: group misuse on one thread: `ncclGroupEnd` without start, unbalanced nesting (two starts,
/// one end: the operations wait for the second end), a group whose call failed (the end fails
/// with that error and nothing of the group runs), destroy and abort inside an open group.
#[test]
fn unbalanced_and_failed_groups() {
    setup();
    let mut t = Table::new();
    let c = one_rank();
    let n = 64;
    let send: Vec<f32> = (0..n).map(|i| i as f32 + 0.25).collect();
    let mut recv = vec![-7.0f32; n];
    let sp: *const c_void = send.as_ptr().cast();
    let rp: *mut c_void = recv.as_mut_ptr().cast();
    let untouched = |r: &[f32]| r.iter().all(|&x| x == -7.0);
    // SAFETY: (every call) `c` is live until destroyed below; buffers of `n` floats that outlive
    // every group end.
    unsafe {
        t.case(
            "GroupEnd without GroupStart",
            "ncclGroupEnd",
            R::INVALID_USAGE,
            &["ncclGroupStart"],
            || ncclGroupEnd(),
        );
        t.case(
            "GroupEnd without GroupStart again",
            "ncclGroupEnd",
            R::INVALID_USAGE,
            &["ncclGroupStart"],
            || ncclGroupEnd(),
        );

        // Two starts, one end: still inside the group, nothing launched.
        t.case("GroupStart 1", "ncclGroupStart", R::SUCCESS, &[], || {
            ncclGroupStart()
        });
        t.case("GroupStart 2", "ncclGroupStart", R::SUCCESS, &[], || {
            ncclGroupStart()
        });
        t.case(
            "AllReduce in a nested group",
            "ncclAllReduce",
            R::SUCCESS,
            &[],
            || ncclAllReduce(sp, rp, n, FLOAT32, SUM, c, NO_STREAM),
        );
        t.case("inner GroupEnd", "ncclGroupEnd", R::SUCCESS, &[], || {
            ncclGroupEnd()
        });
        if !untouched(&recv) {
            t.failures
                .push("the inner GroupEnd of a nested group launched its operation".into());
        }
        t.case("outer GroupEnd", "ncclGroupEnd", R::SUCCESS, &[], || {
            ncclGroupEnd()
        });
        let wrong = recv.iter().zip(&send).filter(|(r, s)| r != s).count();
        if wrong != 0 {
            t.failures.push(format!(
                "nested group: {wrong} wrong elements after the outer end"
            ));
        }
        t.case(
            "GroupEnd after balance",
            "ncclGroupEnd",
            R::INVALID_USAGE,
            &["ncclGroupStart"],
            || ncclGroupEnd(),
        );

        // A failed call inside a (nested) group: it fails at once, the inner end succeeds, the
        // outer end returns its error and runs nothing of the group.
        recv.fill(-7.0);
        t.case("GroupStart a", "ncclGroupStart", R::SUCCESS, &[], || {
            ncclGroupStart()
        });
        t.case("GroupStart b", "ncclGroupStart", R::SUCCESS, &[], || {
            ncclGroupStart()
        });
        t.case(
            "good AllReduce before the bad one",
            "ncclAllReduce",
            R::SUCCESS,
            &[],
            || ncclAllReduce(sp, rp, n, FLOAT32, SUM, c, NO_STREAM),
        );
        t.case(
            "bad datatype in a group",
            "ncclAllReduce",
            R::INVALID_ARGUMENT,
            &["data type"],
            || ncclAllReduce(sp, rp, n, ncclDataType_t(99), SUM, c, NO_STREAM),
        );
        t.case(
            "bad root in a group",
            "ncclBroadcast",
            R::INVALID_ARGUMENT,
            &["root"],
            || ncclBroadcast(sp, rp, n, FLOAT32, 3, c, NO_STREAM),
        );
        t.case(
            "inner end of a failed group",
            "ncclGroupEnd",
            R::SUCCESS,
            &[],
            || ncclGroupEnd(),
        );
        t.case(
            "outer end of a failed group",
            "ncclGroupEnd",
            R::INVALID_ARGUMENT,
            &["data type"],
            || ncclGroupEnd(),
        );
        if !untouched(&recv) {
            t.failures
                .push("a failed group ran its good operation".into());
        }
        t.case(
            "GroupEnd after a failed group",
            "ncclGroupEnd",
            R::INVALID_USAGE,
            &["ncclGroupStart"],
            || ncclGroupEnd(),
        );
        // The next group and the next plain call are not affected by the failed one.
        t.case(
            "GroupStart after a failed group",
            "ncclGroupStart",
            R::SUCCESS,
            &[],
            || ncclGroupStart(),
        );
        t.case(
            "AllReduce in the next group",
            "ncclAllReduce",
            R::SUCCESS,
            &[],
            || ncclAllReduce(sp, rp, n, FLOAT32, SUM, c, NO_STREAM),
        );
        t.case(
            "GroupEnd of the next group",
            "ncclGroupEnd",
            R::SUCCESS,
            &[],
            || ncclGroupEnd(),
        );
        let wrong = recv.iter().zip(&send).filter(|(r, s)| r != s).count();
        if wrong != 0 {
            t.failures
                .push(format!("group after a failed one: {wrong} wrong elements"));
        }

        // Destroy, and abort, of a communicator with an operation recorded in an open group:
        // the end fails naming it, nothing runs, nothing hangs.
        for (what, word) in [("destroy", "destroyed"), ("abort", "aborted")] {
            let d = one_rank();
            recv.fill(-7.0);
            t.case(
                &format!("GroupStart before {what}"),
                "ncclGroupStart",
                R::SUCCESS,
                &[],
                || ncclGroupStart(),
            );
            t.case(
                &format!("AllReduce before {what}"),
                "ncclAllReduce",
                R::SUCCESS,
                &[],
                || ncclAllReduce(sp, rp, n, FLOAT32, SUM, d, NO_STREAM),
            );
            if what == "destroy" {
                t.case(
                    "destroy inside a group",
                    "ncclCommDestroy",
                    R::SUCCESS,
                    &[],
                    || ncclCommDestroy(d),
                );
            } else {
                t.case(
                    "abort inside a group",
                    "ncclCommAbort",
                    R::SUCCESS,
                    &[],
                    || ncclCommAbort(d),
                );
            }
            t.case(
                &format!("GroupEnd after {what}"),
                "ncclGroupEnd",
                R::INVALID_USAGE,
                &[word],
                || ncclGroupEnd(),
            );
            if !untouched(&recv) {
                t.failures.push(format!(
                    "an operation of a communicator {word} inside the group ran"
                ));
            }
            t.case(
                &format!("GroupEnd after {what} again"),
                "ncclGroupEnd",
                R::INVALID_USAGE,
                &["ncclGroupStart"],
                || ncclGroupEnd(),
            );
        }
        t.case("destroy", "ncclCommDestroy", R::SUCCESS, &[], || {
            ncclCommDestroy(c)
        });
    }
    t.finish("T4 groups");
}

/// T4: calls on a communicator whose non-blocking init is in progress (its second rank never
/// comes): NCCL's `ncclInvalidArgument` for operations and queries, `ncclInProgress` from
/// `ncclCommGetAsyncError`, and abort ends it at once.
#[test]
fn calls_during_in_progress_init() {
    setup();
    let mut t = Table::new();
    let mut cfg = ncclConfig_t::initializer();
    cfg.blocking = 0;
    let mut c = ncclComm_t::NULL;
    // SAFETY: valid out-pointer and config.
    let r = unsafe { ncclCommInitRankConfig(&mut c, 2, unique_id(), 0, &mut cfg) };
    assert_eq!(r, R::IN_PROGRESS, "{}", last_error());
    let mut buf = [1.0f32; 8];
    let p: *mut c_void = buf.as_mut_ptr().cast();
    let ia = R::INVALID_ARGUMENT;
    // SAFETY: (every call) `c` is a live handle until aborted; valid out-pointers.
    unsafe {
        t.case(
            "GetAsyncError while in progress",
            "ncclCommGetAsyncError",
            R::SUCCESS,
            &[],
            || {
                let mut e = R::SUCCESS;
                let r = ncclCommGetAsyncError(c, &mut e);
                if e != R::IN_PROGRESS {
                    return R::INTERNAL_ERROR;
                }
                r
            },
        );
        for f in ALL_F {
            t.case(
                &format!("{} while in progress", f.api()),
                f.api(),
                ia,
                &["still initializing"],
                || f.call(p, p, 8, FLOAT32, SUM, 1, c),
            );
        }
        let mut v = 0;
        t.case(
            "Count while in progress",
            "ncclCommCount",
            ia,
            &["initializing"],
            || ncclCommCount(c, &mut v),
        );
        t.case(
            "UserRank while in progress",
            "ncclCommUserRank",
            ia,
            &["initializing"],
            || ncclCommUserRank(c, &mut v),
        );
        t.case(
            "CuDevice while in progress",
            "ncclCommCuDevice",
            ia,
            &["initializing"],
            || ncclCommCuDevice(c, &mut v),
        );
        t.case(
            "Finalize while in progress",
            "ncclCommFinalize",
            ia,
            &["initializing"],
            || ncclCommFinalize(c),
        );
        t.case(
            "Split while in progress",
            "ncclCommSplit",
            ia,
            &["initializing"],
            || {
                let mut n = ncclComm_t::NULL;
                ncclCommSplit(c, 0, 0, &mut n, std::ptr::null_mut())
            },
        );
        t.case(
            "Abort while in progress",
            "ncclCommAbort",
            R::SUCCESS,
            &[],
            || ncclCommAbort(c),
        );
        t.case(
            "AllReduce after that abort",
            "ncclAllReduce",
            R::INVALID_USAGE,
            &["aborted"],
            || ncclAllReduce(p, p, 8, FLOAT32, SUM, c, NO_STREAM),
        );
    }
    assert!(
        buf.iter().all(|&x| x == 1.0),
        "a refused call wrote into the buffer"
    );
    t.finish("T4 in progress");
}
