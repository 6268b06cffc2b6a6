//! Checks every collective on a device backend (CUDA, or HIP) with device buffers, on real GPUs.
//!
//! ```text
//! gpu-check [--backend cuda|hip] --mode initall|threads|procs --ranks N
//!           [--counts 0,1,7|none] [--types all|f32,bf16]
//!           [--big-types f32] [--big-count 1048579] [--big-ops allreduce,...,sendrecv]
//!           [--big-redops sum,avg] [--p2p-counts 1,7,4099,200000|none]
//!           [--graph REPLAYS] [--split] [--offsets] [--vmm] [--window] [--p2p-alltoall]
//!           [--in-place-alltoall] [--list]
//! gpu-check --mode procs --ranks N --dead-peer COUNT
//! ```
//! Every rank `r` runs on device `r % devices`. `initall` drives every rank from one thread
//! (`ncclCommInitAll` + group calls), `threads` runs one thread per rank, `procs` one process per
//! rank (this program re-executed with `--worker`). Prints one `FAIL` line per wrong case and
//! `RESULT pass=P fail=F`; exits 1 on a failure, 2 when no GPU is present, 3 on a hang.
//! `--list` prints the cases the other arguments select and exits.
//!
//! `--backend hip` runs the same suite through the HIP backend (librccl.so.1's code path); on an
//! NVIDIA GPU that is `tests/hip-on-cuda`'s runtime, chosen with `OXCCL_HIP_RUNTIME` and
//! `OXCCL_HIP_CODE_OBJECT` (`tests/gpu/hip-on-cuda.sh`). The backend's device operations are
//! in `oxccl_tests::check_device`.
//!
//! Variants, combinable:
//! - `--graph N`: every operation is captured into a graph on the rank's
//!   stream instead of being issued eagerly, the graph is replayed N-1 times, the inputs are
//!   refilled and the outputs poisoned, and one last replay is checked element by element.
//! - `--split`: the cases run on a communicator split from the world one with the ranks reversed
//!   (one color, key `nranks - 1 - rank`), and are checked with the new rank numbers.
//! - `--offsets`: each rank allocates one send and one receive arena once, and case `i` uses
//!   buffers at element offsets that change from case to case (`3i + rank` and `5i + 2 rank + 1`
//!   modulo a few thousand, so neither 16-byte nor even element-pair aligned in general); 64
//!   poisoned guard bytes on each side of both buffers must survive the operation.
//! - `--vmm`: buffers come from the backend's `mem_alloc` (VMM memory, what `ncclMemAlloc`
//!   returns) instead of `cuMemAlloc` / `hipMalloc`.
//! - `--window` (threads, procs): `--offsets` and `--vmm`, with both arenas registered as
//!   symmetric windows (the device API's flat mapping, collective). Across processes that
//!   mapped them at one address, zero-copy plans read and write the peers' arenas directly;
//!   the buffers' offsets differ between ranks, which the plans must not assume away.
//! - `--hide-rank R`: rank R's buffers come from a stream-ordered memory pool, which its peers
//!   cannot map: zero-copy plans must take their fallback branch (CUDA).
//! - `--p2p-alltoall`: out-of-place AlltoAll cases are issued as nccl-tests and PyTorch issue
//!   them, a group of `ncclSend` / `ncclRecv` to and from every rank, instead of through
//!   `ncclAlltoAll`: send/receive plans give each rank distance a channel of its own, so this
//!   reaches channels that ring shifts and collectives never use.
//! - `--in-place-alltoall`: adds an in-place AlltoAll (send and receive buffer the same) of
//!   `--big-count` elements per big type, which NCCL leaves undefined and oxccl keeps right
//!   (from 64 MiB per peer its split receives wait for order tokens).
//! - `--dead-peer COUNT` (procs): the last rank exits right after init without destroying its
//!   communicator; every other rank runs an AllReduce of COUNT f32 elements, which must end
//!   within 15 s with the communicator reporting the death as a remote error (one pass each).
//! - `--big-ops` / `--big-redops`: restrict the `--big-count` cases to some operations and
//!   reduction operators (`sendrecv` adds a ring shift of `--big-count` elements per big type).
//!   Inputs are generated and outputs checked in 64 MiB chunks on every core, so counts of 256M
//!   elements (1 GiB per f32 buffer) need little host memory and seconds per case.

use oxccl_core::backend::DevicePtr;
use oxccl_core::bootstrap::{BootstrapOptions, UniqueId};
use oxccl_core::comm::CollArgs;
use oxccl_core::comm::group::{group_end, group_start};
use oxccl_core::comm::symmetric::FlatWindow;
use oxccl_core::config::CommConfig;
use oxccl_core::datatype::{DataType, RedOp};
use oxccl_core::error::Error;
use oxccl_core::plan::{CollKind, P2pDir};
use oxccl_core::{Communicator, Result};
use oxccl_cuda::CudaBackend;
use oxccl_hip::HipBackend;
use oxccl_tests::check_device::{CheckDevice, Graph};
use oxccl_tests::suite::full_matrix;
use oxccl_tests::{Case, POISON, TestOp, count_wrong, fill_input};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

struct Opts {
    /// `cuda` or `hip`.
    backend: String,
    mode: String,
    ranks: usize,
    counts: Vec<usize>,
    types: Vec<DataType>,
    big_types: Vec<DataType>,
    big_count: usize,
    /// Operations of the big cases (None: every collective, no send/recv).
    big_ops: Option<Vec<CollKind>>,
    /// Reduction operators of the big cases (None: all).
    big_redops: Option<Vec<TestOp>>,
    /// Byte counts of the grouped send/recv ring shifts.
    p2p_counts: Vec<usize>,
    /// Graph replays per case (0: issue eagerly).
    graph: usize,
    split: bool,
    offsets: bool,
    vmm: bool,
    window: bool,
    /// The rank whose buffers its peers cannot map.
    hide_rank: Option<usize>,
    /// Out-of-place AlltoAll cases as grouped sends and receives.
    p2p_alltoall: bool,
    in_place_alltoall: bool,
    /// Print the cases and exit (no GPU needed).
    list: bool,
    worker: Option<usize>,
    /// The dead-peer check's AllReduce count, instead of the cases.
    dead_peer: Option<u64>,
}

fn parse_types(s: &str) -> Vec<DataType> {
    if s == "all" {
        return DataType::ALL.to_vec();
    }
    list(s)
        .map(|x| {
            *DataType::ALL
                .iter()
                .find(|t| t.name() == x || short(**t) == x)
                .unwrap_or_else(|| panic!("unknown type {x}"))
        })
        .collect()
}

/// The items of a comma-separated list ("none" or "" is the empty list).
fn list(s: &str) -> impl Iterator<Item = &str> {
    s.split(',').filter(|x| !x.is_empty() && *x != "none")
}

fn parse_counts(s: &str) -> Vec<usize> {
    list(s).map(|x| x.parse().expect("count")).collect()
}

fn parse_ops(s: &str) -> Vec<CollKind> {
    list(s)
        .map(|x| match x.to_ascii_lowercase().as_str() {
            "allreduce" => CollKind::AllReduce,
            "broadcast" => CollKind::Broadcast,
            "reduce" => CollKind::Reduce,
            "allgather" => CollKind::AllGather,
            "reducescatter" => CollKind::ReduceScatter,
            "alltoall" => CollKind::AllToAll,
            "alltoallv" => CollKind::AllToAllv,
            "gather" => CollKind::Gather,
            "scatter" => CollKind::Scatter,
            "sendrecv" => CollKind::SendRecv,
            other => panic!("unknown operation {other}"),
        })
        .collect()
}

fn parse_redops(s: &str) -> Vec<TestOp> {
    list(s)
        .map(|x| match x.to_ascii_lowercase().as_str() {
            "sum" => TestOp::Sum,
            "prod" => TestOp::Prod,
            "max" => TestOp::Max,
            "min" => TestOp::Min,
            "avg" => TestOp::Avg,
            "premulsum" => TestOp::PreMulSum,
            other => panic!("unknown reduction operator {other}"),
        })
        .collect()
}

fn short(t: DataType) -> &'static str {
    match t {
        DataType::Int8 => "i8",
        DataType::Uint8 => "u8",
        DataType::Int32 => "i32",
        DataType::Uint32 => "u32",
        DataType::Int64 => "i64",
        DataType::Uint64 => "u64",
        DataType::Float16 => "f16",
        DataType::Float32 => "f32",
        DataType::Float64 => "f64",
        DataType::Bfloat16 => "bf16",
        DataType::Float8E4M3 => "f8e4m3",
        DataType::Float8E5M2 => "f8e5m2",
    }
}

// Send/recv sizes in bytes. Sends of 1 MiB and more deadlocked before the p2p plans alternated
// sends and receives per channel (bounded device FIFOs); `--p2p-counts` or
// `--big-ops sendrecv` exercise larger ones.
const P2P_COUNTS: [usize; 4] = [1, 7, 4099, 200_000];

fn opts() -> Opts {
    let mut o = Opts {
        backend: "cuda".into(),
        mode: "initall".into(),
        ranks: 2,
        counts: vec![0, 1, 7],
        types: DataType::ALL.to_vec(),
        big_types: vec![DataType::Float32],
        big_count: 1_048_579,
        big_ops: None,
        big_redops: None,
        p2p_counts: P2P_COUNTS.to_vec(),
        graph: 0,
        split: false,
        offsets: false,
        vmm: false,
        window: false,
        hide_rank: None,
        p2p_alltoall: false,
        in_place_alltoall: false,
        list: false,
        worker: None,
        dead_peer: None,
    };
    let a: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < a.len() {
        let v = a.get(i + 1).cloned().unwrap_or_default();
        let mut flag = false;
        match a[i].as_str() {
            "--backend" => o.backend = v,
            "--mode" => o.mode = v,
            "--ranks" => o.ranks = v.parse().expect("--ranks N"),
            "--counts" => o.counts = parse_counts(&v),
            "--types" => o.types = parse_types(&v),
            "--big-types" => o.big_types = parse_types(&v),
            "--big-count" => o.big_count = v.parse().expect("--big-count N"),
            "--big-ops" => o.big_ops = Some(parse_ops(&v)),
            "--big-redops" => o.big_redops = Some(parse_redops(&v)),
            "--p2p-counts" => o.p2p_counts = parse_counts(&v),
            "--graph" => o.graph = v.parse().expect("--graph REPLAYS"),
            "--worker" => o.worker = Some(v.parse().expect("--worker RANK")),
            "--dead-peer" => o.dead_peer = Some(v.parse().expect("--dead-peer COUNT")),
            "--hide-rank" => o.hide_rank = Some(v.parse().expect("--hide-rank RANK")),
            "--split" => (o.split, flag) = (true, true),
            "--offsets" => (o.offsets, flag) = (true, true),
            "--vmm" => (o.vmm, flag) = (true, true),
            "--window" => (o.window, o.offsets, o.vmm, flag) = (true, true, true, true),
            "--p2p-alltoall" => (o.p2p_alltoall, flag) = (true, true),
            "--in-place-alltoall" => (o.in_place_alltoall, flag) = (true, true),
            "--list" => (o.list, flag) = (true, true),
            other => panic!("unknown argument {other}"),
        }
        i += if flag { 1 } else { 2 };
    }
    o
}

/// Every case of the run, in order: the full matrix at the small counts, the big cases, then
/// the send/recv ring shifts (kind `SendRecv`: send to rank + 1, receive from rank - 1).
fn cases(o: &Opts) -> Vec<Case> {
    let mut v = full_matrix(o.ranks, &o.counts, &o.types);
    let big = o.big_count > 0 && !o.big_types.is_empty();
    if big {
        v.extend(
            full_matrix(o.ranks, &[o.big_count], &o.big_types)
                .into_iter()
                .filter(|c| o.big_ops.as_ref().is_none_or(|ops| ops.contains(&c.kind)))
                .filter(|c| match (c.op, &o.big_redops) {
                    (Some(op), Some(ops)) => ops.contains(&op),
                    _ => true,
                }),
        );
    }
    if big && o.in_place_alltoall {
        v.extend(o.big_types.iter().map(|&dtype| Case {
            kind: CollKind::AllToAll,
            dtype,
            op: None,
            count: o.big_count,
            root: 0,
            in_place: true,
        }));
    }
    let ring_shift = |dtype, count| Case {
        kind: CollKind::SendRecv,
        dtype,
        op: None,
        count,
        root: 0,
        in_place: false,
    };
    v.extend(o.p2p_counts.iter().map(|&c| ring_shift(DataType::Uint8, c)));
    if big
        && o.big_ops
            .as_ref()
            .is_some_and(|ops| ops.contains(&CollKind::SendRecv))
    {
        v.extend(o.big_types.iter().map(|&t| ring_shift(t, o.big_count)));
    }
    v
}

/// Bytes of poison checked on each side of every buffer with `--offsets`.
const GUARD: usize = 64;

/// Element offsets of case `idx`'s send and receive buffers inside the arenas (`--offsets`):
/// different for consecutive cases and ranks, and rarely a multiple of 16 bytes.
fn offsets(idx: usize, rank: usize) -> (usize, usize) {
    ((idx * 3 + rank) % 3001, (idx * 5 + 2 * rank + 1) % 2999)
}

/// One send and one receive allocation a rank reuses for every case (`--offsets`).
struct Arena {
    send: DevicePtr,
    recv: DevicePtr,
    mem: Mem,
    /// Both arenas' flat mappings (`--window`).
    windows: Vec<FlatWindow>,
}

/// Where a rank's buffers come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mem {
    /// `cuMemAlloc` / `hipMalloc`.
    Plain,
    /// The backend's `mem_alloc` (`--vmm`).
    Vmm,
    /// Memory its peers cannot map (`--hide-rank`).
    Unshared,
}

impl Mem {
    fn of(o: &Opts, rank: usize) -> Mem {
        if o.hide_rank == Some(rank) {
            Mem::Unshared
        } else if o.vmm {
            Mem::Vmm
        } else {
            Mem::Plain
        }
    }
}

/// One rank driven by the calling thread.
struct RankCtx<B: CheckDevice> {
    comm: Communicator<B>,
    stream: B::Stream,
    dev: i32,
    arena: Option<Arena>,
}

fn dalloc<B: CheckDevice>(b: &B, dev: i32, bytes: usize, mem: Mem) -> Result<DevicePtr> {
    match mem {
        Mem::Vmm => b.mem_alloc(dev, bytes.max(1)),
        Mem::Plain => b.alloc_plain(dev, bytes),
        Mem::Unshared => b.alloc_unshared(dev, bytes),
    }
}

/// # Safety
/// `p` came from [`dalloc`] with the same `mem` and no work uses it any more.
unsafe fn dfree<B: CheckDevice>(b: &B, dev: i32, p: DevicePtr, mem: Mem) -> Result<()> {
    // SAFETY: forwarded from the caller.
    unsafe {
        match mem {
            Mem::Vmm => b.mem_free(p),
            Mem::Plain => b.free_plain(dev, p),
            Mem::Unshared => b.free_unshared(dev, p),
        }
    }
}

/// The arenas of `comm`'s rank, mapped flat with `--window` (collective then).
fn make_arena<B: CheckDevice>(b: &B, o: &Opts, dev: i32, comm: &Communicator<B>) -> Result<Arena> {
    let (n, rank) = (comm.nranks(), comm.rank());
    let (mut send, mut recv) = (0, 0);
    for (idx, case) in cases(o).iter().enumerate() {
        let es = case.dtype.size();
        let (se, re) = case.sizes(n, rank);
        let (so, ro) = offsets(idx, rank);
        send = send.max((so + se) * es + GUARD);
        recv = recv.max((ro + re) * es + GUARD);
    }
    let mem = Mem::of(o, rank);
    let s = dalloc(b, dev, send, mem)?;
    let mut arena = match dalloc(b, dev, recv, mem) {
        Ok(r) => Arena {
            send: s,
            recv: r,
            mem,
            windows: Vec::new(),
        },
        Err(e) => {
            // SAFETY: just allocated, unused.
            let _ = unsafe { dfree(b, dev, s, mem) };
            return Err(e);
        }
    };
    if o.window {
        for (p, bytes) in [(arena.send, send), (arena.recv, recv)] {
            // SAFETY: the arena stays allocated until `free_arena` unmaps it first.
            let w = unsafe { comm.map_flat(p, bytes as u64) };
            match w {
                Ok(w) => arena.windows.push(w),
                Err(e) => {
                    free_arena_memory(b, comm, dev, arena);
                    return Err(e);
                }
            }
        }
        println!(
            "rank {rank}: arenas mapped at one address on every rank: {}",
            arena.windows.iter().all(|w| w.shared)
        );
    }
    Ok(arena)
}

/// Unmaps and frees an arena no work uses any more.
fn free_arena_memory<B: CheckDevice>(b: &B, comm: &Communicator<B>, dev: i32, a: Arena) {
    // SAFETY: every case's operation completed (its stream was synchronised).
    unsafe {
        for w in &a.windows {
            let _ = comm.unmap_flat(w);
        }
        let _ = dfree(b, dev, a.send, a.mem);
        let _ = dfree(b, dev, a.recv, a.mem);
    }
}

fn free_arena<B: CheckDevice>(b: &B, rc: &mut RankCtx<B>) {
    if let Some(a) = rc.arena.take() {
        free_arena_memory(b, &rc.comm, rc.dev, a);
    }
}

/// A case's device buffers on one rank.
struct Prep {
    dev: i32,
    /// Rank in the communicator the case runs on.
    rank: usize,
    nranks: usize,
    dsend: DevicePtr,
    drecv: DevicePtr,
    send_len: usize,
    recv_len: usize,
    /// Allocated for this case alone (freed afterwards), not inside an arena.
    owned: bool,
    mem: Mem,
    args: CollArgs,
    /// Where the output to check starts, and its bytes.
    out: DevicePtr,
    out_len: usize,
    /// Elements `(at, len)` of the receive buffer that start as this rank's input (in place).
    seg: Option<(usize, usize)>,
    /// Poisoned ranges around the buffers that nothing may write (`--offsets`).
    guards: Vec<(DevicePtr, usize)>,
}

/// Places (and allocates, without `--offsets`) case `idx`'s buffers for `rc`'s rank.
fn prepare<B: CheckDevice>(
    b: &B,
    o: &Opts,
    rc: &RankCtx<B>,
    idx: usize,
    case: &Case,
) -> Result<Prep> {
    let (n, rank) = (rc.comm.nranks(), rc.comm.rank());
    let t = case.dtype;
    let es = t.size();
    let (se, re) = case.sizes(n, rank);
    let (send_len, recv_len) = (se * es, re * es);
    let mem = Mem::of(o, rank);
    let (dsend, drecv, owned, guards) = match &rc.arena {
        Some(a) => {
            let (so, ro) = offsets(idx, rank);
            let (sb, rb) = (so * es, ro * es);
            let (ds, dr) = (a.send + sb as u64, a.recv + rb as u64);
            let guards = vec![
                (ds - sb.min(GUARD) as u64, sb.min(GUARD)),
                (ds + send_len as u64, GUARD),
                (dr - rb.min(GUARD) as u64, rb.min(GUARD)),
                (dr + recv_len as u64, GUARD),
            ];
            (ds, dr, false, guards)
        }
        None => {
            let s = dalloc(b, rc.dev, send_len, mem)?;
            let r = match dalloc(b, rc.dev, recv_len, mem) {
                Ok(r) => r,
                Err(e) => {
                    // SAFETY: just allocated, unused.
                    let _ = unsafe { dfree(b, rc.dev, s, mem) };
                    return Err(e);
                }
            };
            (s, r, true, Vec::new())
        }
    };
    let c = case.count;
    // The pointers as NCCL's in-place convention for the operation places them.
    let mut seg = None;
    let (sp, rp) = if case.in_place {
        match case.kind {
            CollKind::AllReduce | CollKind::Broadcast | CollKind::Reduce => {
                seg = Some((0, c));
                (drecv, drecv)
            }
            CollKind::AllGather | CollKind::Gather
                if case.kind == CollKind::AllGather || rank == case.root =>
            {
                let off = case.in_place_offset(rank);
                seg = Some((off, c));
                (drecv + (off * es) as u64, drecv)
            }
            CollKind::ReduceScatter => (dsend, dsend + (rank * c * es) as u64),
            CollKind::AllToAll => {
                seg = Some((0, n * c));
                (drecv, drecv)
            }
            CollKind::Scatter if rank == case.root => (dsend, dsend + (case.root * c * es) as u64),
            _ => (dsend, drecv),
        }
    } else {
        (dsend, drecv)
    };
    let args = CollArgs {
        kind: case.kind,
        send: sp,
        recv: rp,
        count: c as u64,
        dtype: t,
        op: case.op.map_or(RedOp::Sum, |op| op.red_op(t)),
        root: case.root as u32,
        layout: (case.kind == CollKind::AllToAllv)
            .then(|| oxccl_tests::alltoallv_layout(c, n, rank)),
    };
    Ok(Prep {
        dev: rc.dev,
        rank,
        nranks: n,
        dsend,
        drecv,
        send_len,
        recv_len,
        owned,
        mem,
        args,
        out: rp,
        out_len: recv_len,
        seg,
        guards,
    })
}

/// Host staging per copy: inputs are generated and outputs checked this much at a time.
const CHUNK_BYTES: usize = 64 << 20;

/// Generator of `buf` = the elements from `first` on of some buffer.
type Gen<'a> = &'a (dyn Fn(usize, &mut [u8]) + Sync);

fn threads_for(bytes: usize) -> usize {
    if bytes < (1 << 20) {
        1
    } else {
        std::thread::available_parallelism().map_or(4, |n| n.get().min(16))
    }
}

/// Whole elements per thread for `bytes` bytes of `es`-byte elements.
fn piece_bytes(bytes: usize, es: usize) -> usize {
    ((bytes / es).div_ceil(threads_for(bytes)) * es).max(es)
}

/// Fills `buf` (elements `first`..) with `make`, on several threads when it is large.
fn gen_par(buf: &mut [u8], es: usize, first: usize, make: Gen) {
    if threads_for(buf.len()) == 1 {
        make(first, buf);
        return;
    }
    let piece = piece_bytes(buf.len(), es);
    std::thread::scope(|s| {
        for (i, p) in buf.chunks_mut(piece).enumerate() {
            s.spawn(move || make(first + i * piece / es, p));
        }
    });
}

/// Writes `len` bytes generated by `make` to device memory at `dst`, chunk by chunk.
fn upload<B: CheckDevice>(
    b: &B,
    dev: i32,
    dst: DevicePtr,
    len: usize,
    es: usize,
    make: Gen,
) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    let mut host = vec![0u8; CHUNK_BYTES.min(len)];
    let mut at = 0;
    while at < len {
        let m = host.len().min(len - at);
        gen_par(&mut host[..m], es, at / es, make);
        // SAFETY: the caller's allocation holds `len` bytes at `dst`.
        unsafe { b.upload(dev, dst + at as u64, &host[..m])? };
        at += m;
        tick();
    }
    Ok(())
}

/// Counts the elements of the `len` bytes at `src` that differ from what `want` generates.
fn verify<B: CheckDevice>(
    b: &B,
    dev: i32,
    src: DevicePtr,
    len: usize,
    t: DataType,
    op: Option<TestOp>,
    want: Gen,
) -> Result<usize> {
    let es = t.size();
    if len == 0 {
        return Ok(0);
    }
    let mut got = vec![0u8; CHUNK_BYTES.min(len)];
    let mut exp = vec![0u8; got.len()];
    let (mut at, mut wrong) = (0, 0);
    while at < len {
        let m = got.len().min(len - at);
        // SAFETY: the caller's allocation holds `len` bytes at `src`.
        unsafe { b.download(dev, &mut got[..m], src + at as u64)? };
        let (g, e) = (&got[..m], &mut exp[..m]);
        let first = at / es;
        wrong += if threads_for(m) == 1 {
            want(first, e);
            count_wrong(t, op, g, e)
        } else {
            let piece = piece_bytes(m, es);
            std::thread::scope(|s| {
                let hs: Vec<_> = g
                    .chunks(piece)
                    .zip(e.chunks_mut(piece))
                    .enumerate()
                    .map(|(i, (g, e))| {
                        s.spawn(move || {
                            want(first + i * piece / es, e);
                            count_wrong(t, op, g, e)
                        })
                    })
                    .collect();
                hs.into_iter()
                    .map(|h| h.join().expect("check thread"))
                    .sum::<usize>()
            })
        };
        at += m;
        tick();
    }
    Ok(wrong)
}

/// Writes the case's inputs and poisons its outputs and guards (synchronous copies).
fn fill<B: CheckDevice>(b: &B, p: &Prep, case: &Case) -> Result<()> {
    let (t, op, rank) = (case.dtype, case.op, p.rank);
    let es = t.size();
    upload(b, p.dev, p.dsend, p.send_len, es, &|first, buf| {
        fill_input(t, op, rank, first, buf)
    })?;
    let seg = p.seg;
    upload(b, p.dev, p.drecv, p.recv_len, es, &|first, buf| {
        buf.fill(POISON);
        if let Some((at, n)) = seg {
            let (lo, hi) = (at.max(first), (at + n).min(first + buf.len() / es));
            if lo < hi {
                fill_input(
                    t,
                    op,
                    rank,
                    lo - at,
                    &mut buf[(lo - first) * es..(hi - first) * es],
                );
            }
        }
    })?;
    for &(g, len) in &p.guards {
        // SAFETY: guards lie inside the arena (see `make_arena`).
        unsafe { b.upload(p.dev, g, &[POISON; GUARD][..len])? };
    }
    Ok(())
}

/// Wrong output elements plus overwritten guard bytes of a completed case.
fn check_prep<B: CheckDevice>(b: &B, p: &Prep, case: &Case) -> Result<usize> {
    let (t, n, rank) = (case.dtype, p.nranks, p.rank);
    let mut wrong = 0;
    if case.kind == CollKind::SendRecv {
        let from = (rank + n - 1) % n;
        wrong += verify(b, p.dev, p.out, p.out_len, t, None, &|first, buf| {
            fill_input(t, None, from, first, buf)
        })?;
    } else if case.expected_into(n, rank, 0, &mut []) {
        wrong += verify(b, p.dev, p.out, p.out_len, t, case.op, &|first, buf| {
            case.expected_into(n, rank, first, buf);
        })?;
    }
    for &(g, len) in &p.guards {
        let mut host = [0u8; GUARD];
        // SAFETY: guards lie inside the arena.
        unsafe { b.download(p.dev, &mut host[..len], g)? };
        let bad = host[..len].iter().filter(|&&x| x != POISON).count();
        if bad > 0 {
            println!(
                "GUARD rank {rank} {case:?}: {bad} bytes written at {:#x} (outside the buffers)",
                g
            );
            wrong += bad;
        }
    }
    Ok(wrong)
}

/// Frees a case's own buffers (arena buffers stay).
fn release<B: CheckDevice>(b: &B, p: &Prep) {
    if p.owned {
        // SAFETY: the operation completed (its stream was synchronised).
        unsafe {
            let _ = dfree(b, p.dev, p.dsend, p.mem);
            let _ = dfree(b, p.dev, p.drecv, p.mem);
        }
    }
}

/// Issues one rank's part of the case on its stream (inside the caller's group, if any).
///
/// # Safety
/// The buffers live until the stream has run the operation.
unsafe fn issue<B: CheckDevice>(
    rc: &RankCtx<B>,
    p: &Prep,
    case: &Case,
    p2p_alltoall: bool,
) -> Result<()> {
    let comm = &rc.comm;
    if as_sends(case, p2p_alltoall) {
        let (n, count) = (comm.nranks(), case.count as u64);
        let block = count * case.dtype.size() as u64;
        for q in 0..n {
            let at = u64::from(q as u32) * block;
            // SAFETY: both buffers hold `n` blocks of `count` elements (forwarded).
            unsafe {
                comm.p2p(
                    P2pDir::Send,
                    p.dsend + at,
                    count,
                    case.dtype,
                    q as u32,
                    &rc.stream,
                )?;
                comm.p2p(
                    P2pDir::Recv,
                    p.drecv + at,
                    count,
                    case.dtype,
                    q as u32,
                    &rc.stream,
                )?;
            }
        }
        return Ok(());
    }
    if case.kind != CollKind::SendRecv {
        // SAFETY: forwarded from the caller.
        return unsafe { comm.collective(p.args.clone(), &rc.stream) };
    }
    let (n, r) = (comm.nranks(), comm.rank());
    let count = case.count as u64;
    // SAFETY: both buffers hold `count` elements (forwarded from the caller).
    unsafe {
        comm.p2p(
            P2pDir::Send,
            p.dsend,
            count,
            case.dtype,
            ((r + 1) % n) as u32,
            &rc.stream,
        )?;
        comm.p2p(
            P2pDir::Recv,
            p.drecv,
            count,
            case.dtype,
            ((r + n - 1) % n) as u32,
            &rc.stream,
        )
    }
}

/// Whether `case` is issued as grouped sends and receives to every rank (`--p2p-alltoall`).
fn as_sends(case: &Case, p2p_alltoall: bool) -> bool {
    p2p_alltoall && case.kind == CollKind::AllToAll && !case.in_place
}

/// Issues the case on every rank of `ctxs`: in one group in initall mode (this thread drives
/// every rank) and for the send/recv pair, as applications do; a lone collective eagerly.
fn issue_all<B: CheckDevice>(
    o: &Opts,
    ctxs: &[RankCtx<B>],
    preps: &[Prep],
    case: &Case,
) -> Result<()> {
    let grouped =
        o.mode == "initall" || case.kind == CollKind::SendRecv || as_sends(case, o.p2p_alltoall);
    if grouped {
        group_start()?;
    }
    let mut res = Ok(());
    for (rc, p) in ctxs.iter().zip(preps) {
        // SAFETY: the buffers are freed only after the streams have been synchronised.
        res = res.and(unsafe { issue(rc, p, case, o.p2p_alltoall) });
    }
    if grouped {
        res = res.and(group_end());
    }
    res
}

/// Runs the case: eagerly, or captured into one graph per stream and replayed (`--graph`).
fn run_op<B: CheckDevice>(
    b: &B,
    o: &Opts,
    ctxs: &[RankCtx<B>],
    preps: &[Prep],
    case: &Case,
) -> Result<()> {
    if o.graph == 0 {
        issue_all(o, ctxs, preps, case)?;
        for rc in ctxs {
            b.stream_synchronize(&rc.stream)?;
        }
        return Ok(());
    }
    // Global capture mode, as PyTorch uses by default: the capturing thread (and every other
    // thread of the process) may not make unsafe calls such as cuMemAlloc or synchronous copies
    // while it captures. In `threads` mode the other ranks' threads keep preparing their cases
    // meanwhile, which global mode would forbid, so there each thread captures thread-locally.
    let thread_local = o.mode == "threads";
    // Every stream starts capturing before the group and stops after group_end.
    let mut res = Ok(());
    let mut begun = 0;
    for rc in ctxs {
        if let Err(e) = b.begin_capture(rc.dev, &rc.stream, thread_local) {
            res = Err(e);
            break;
        }
        begun += 1;
    }
    if res.is_ok() {
        res = issue_all(o, ctxs, preps, case);
    }
    // One graph per stream whose capture ended (every begun capture is ended, even after a
    // failure); instantiated only once no stream captures any more.
    let mut graphs: Vec<Option<Graph>> = Vec::new();
    for rc in &ctxs[..begun] {
        match b.end_capture(rc.dev, &rc.stream) {
            Ok(g) => graphs.push(Some(g)),
            Err(e) => {
                res = res.and(Err(e));
                graphs.push(None);
            }
        }
    }
    // A rank with nothing to do (count 0) captures an empty graph, which is not replayed. A
    // rank that should have captured work but did not (it ran eagerly, or not at all) is caught
    // by the check: its outputs are poisoned before the checked replay.
    let res = res.and_then(|()| {
        if graphs.len() != ctxs.len() || graphs.iter().any(Option::is_none) {
            return Err(Error::Internal("capture produced no graph".into()));
        }
        for (rc, g) in ctxs.iter().zip(graphs.iter_mut()) {
            b.instantiate(rc.dev, g.as_mut().expect("checked above"))?;
        }
        let launch_all = || -> Result<()> {
            for (rc, g) in ctxs.iter().zip(&graphs) {
                b.launch_graph(rc.dev, g.as_ref().expect("checked above"), &rc.stream)?;
            }
            Ok(())
        };
        for _ in 1..o.graph {
            launch_all()?;
        }
        for rc in ctxs {
            b.stream_synchronize(&rc.stream)?;
        }
        tick();
        // In-place reductions compound over replays: the checked replay starts afresh.
        for p in preps {
            fill(b, p, case)?;
        }
        launch_all()?;
        for rc in ctxs {
            b.stream_synchronize(&rc.stream)?;
        }
        Ok(())
    });
    for (rc, g) in ctxs.iter().zip(graphs) {
        if let Some(g) = g {
            // SAFETY: launched no more (one still running is freed when it completes).
            unsafe { b.destroy_graph(rc.dev, g) };
        }
    }
    res
}

static PROGRESS: AtomicU64 = AtomicU64::new(0);
static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
static PASSED: AtomicUsize = AtomicUsize::new(0);
static FAILED: AtomicUsize = AtomicUsize::new(0);

static CURRENT: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

/// Notes the step about to run (the watchdog names it on a hang; the log lists every one).
fn step(what: &str) {
    eprintln!("START {what}");
    *CURRENT.lock().unwrap_or_else(|p| p.into_inner()) = what.to_string();
}

fn tick() {
    let now = START.get_or_init(Instant::now).elapsed().as_millis() as u64;
    PROGRESS.store(now, Ordering::Relaxed);
}

/// Exits with 3 when nothing progressed for 30 s (a hang would otherwise eat the whole run);
/// the cases finished so far still count.
fn watchdog(what: String) {
    tick();
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_secs(1));
            let now = START.get_or_init(Instant::now).elapsed().as_millis() as u64;
            if now.saturating_sub(PROGRESS.load(Ordering::Relaxed)) > 30_000 {
                let cur = CURRENT.lock().unwrap_or_else(|p| p.into_inner()).clone();
                println!("HANG {what}: no progress for 30 s; last step: {cur}");
                println!(
                    "RESULT pass={} fail={} (hang)",
                    PASSED.load(Ordering::Relaxed),
                    FAILED.load(Ordering::Relaxed) + 1
                );
                std::process::exit(3);
            }
        }
    });
}

struct Tally {
    pass: usize,
    fail: usize,
}

impl Tally {
    fn add(&mut self, what: &str, r: Result<usize>) {
        tick();
        match r {
            Ok(0) => {
                self.pass += 1;
                PASSED.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Ok(w) => println!("FAIL {what}: {w} wrong elements"),
            Err(e) => println!("FAIL {what}: error {e}"),
        }
        self.fail += 1;
        FAILED.fetch_add(1, Ordering::Relaxed);
    }
}

/// Runs every case on the ranks this thread drives (all of them in initall mode, one otherwise).
fn run_cases<B: CheckDevice>(b: &B, o: &Opts, ctxs: &[RankCtx<B>], label: &str) -> Tally {
    let mut t = Tally { pass: 0, fail: 0 };
    for (idx, case) in cases(o).iter().enumerate() {
        let who = if ctxs.len() == 1 {
            format!("rank {}", ctxs[0].comm.rank())
        } else {
            "all ranks".to_string()
        };
        step(&format!("{label} {who} #{idx} {case:?}"));
        let mut preps: Vec<Prep> = Vec::new();
        let mut err = None;
        for rc in ctxs {
            match prepare(b, o, rc, idx, case) {
                Ok(p) => {
                    let r = fill(b, &p, case);
                    preps.push(p);
                    if let Err(e) = r {
                        err = Some(e);
                        break;
                    }
                }
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = err {
            preps.iter().for_each(|p| release(b, p));
            for rc in ctxs {
                let what = format!("{label} rank {} {case:?} (preparing)", rc.comm.rank());
                t.add(&what, Err(e.clone()));
            }
            continue;
        }
        let res = run_op(b, o, ctxs, &preps, case);
        // Buffers may be freed only once nothing can still be using them.
        let idle = res.is_ok()
            || ctxs
                .iter()
                .all(|rc| b.stream_synchronize(&rc.stream).is_ok());
        for p in &preps {
            let r = res.clone().and_then(|()| check_prep(b, p, case));
            t.add(&format!("{label} rank {} {case:?}", p.rank), r);
            if idle {
                release(b, p);
            }
        }
    }
    t
}

/// `--dead-peer`: the last rank leaves without a goodbye; the others' AllReduce must end and
/// the communicator must name the death.
fn dead_peer<B: CheckDevice>(b: &B, comm: &Communicator<B>, dev: i32, count: u64) -> Result<Tally> {
    if comm.rank() + 1 == comm.nranks() {
        println!("RESULT pass=0 fail=0");
        // Sockets close with the process, but no goodbye is sent and nothing is destroyed.
        std::thread::sleep(Duration::from_millis(200));
        std::process::exit(0);
    }
    let bytes = count as usize * 4;
    let send = b.alloc_plain(dev, bytes)?;
    let recv = b.alloc_plain(dev, bytes)?;
    let stream = b.new_stream(dev)?;
    step(&format!(
        "rank {} AllReduce of {count} f32 with a dead peer",
        comm.rank()
    ));
    let args = CollArgs {
        kind: CollKind::AllReduce,
        send,
        recv,
        count,
        dtype: DataType::Float32,
        op: RedOp::Sum,
        root: 0,
        layout: None,
    };
    let t0 = Instant::now();
    // SAFETY: both buffers hold `count` f32 elements until the stream is synchronised below.
    let issued = unsafe { comm.collective(args, &stream) };
    let synced = b.stream_synchronize(&stream);
    let took = t0.elapsed();
    let status = comm.status();
    let mut t = Tally { pass: 0, fail: 0 };
    let what = format!("dead peer: rank {} AllReduce of {count}", comm.rank());
    let verdict = match (&status, took < Duration::from_secs(15)) {
        (Err(Error::Remote(m)), true) => {
            println!(
                "INFO {what}: ended in {:.2} s (issue {issued:?}, sync {synced:?}); {m}",
                took.as_secs_f64()
            );
            Ok(0)
        }
        _ => Err(Error::Internal(format!(
            "took {took:?}, issue {issued:?}, sync {synced:?}, status {status:?}"
        ))),
    };
    t.add(&what, verdict);
    // SAFETY: the stream was synchronised; nothing uses the buffers.
    unsafe {
        let _ = b.free_plain(dev, send);
        let _ = b.free_plain(dev, recv);
    }
    comm.abort();
    Ok(t)
}

/// Ranks reversed: one color, key `nranks - 1 - rank`.
fn split_key(n: usize, rank: usize) -> i32 {
    (n - 1 - rank) as i32
}

fn split_one<B: CheckDevice>(comm: &Communicator<B>) -> Result<Communicator<B>> {
    let key = split_key(comm.nranks(), comm.rank());
    let c = comm
        .split(0, key, None)?
        .ok_or_else(|| Error::Internal("split with a color returned no communicator".into()))?;
    if c.rank() != key as usize || c.nranks() != comm.nranks() {
        return Err(Error::Internal(format!(
            "split: rank {} became rank {} of {}, expected {key} of {}",
            comm.rank(),
            c.rank(),
            c.nranks(),
            comm.nranks()
        )));
    }
    Ok(c)
}

fn destroy_all<B: CheckDevice>(comms: &[Communicator<B>]) -> Result<()> {
    let mut res = Ok(());
    for c in comms {
        res = res.and(c.destroy());
    }
    res
}

fn run_initall<B: CheckDevice>(b: &Arc<B>, o: &Opts, ndev: usize, label: &str) -> Result<Tally> {
    if o.window {
        // One thread cannot register every rank's window: each registration waits for all.
        return Err(Error::usage("--window needs --mode threads or procs"));
    }
    let devs: Vec<i32> = (0..o.ranks).map(|r| (r % ndev) as i32).collect();
    step("initall init");
    let world = Communicator::init_all(b.clone(), &devs)?;
    // Core's split is blocking: it all-gathers colors and keys over the bootstrap network
    // before creating the new communicator, and group_start does not defer it. One thread
    // splitting every rank in turn (even inside a group) would wait forever in the first rank's
    // all-gather, so each rank splits on its own thread, as a one-thread-per-GPU application
    // does.
    let comms = if o.split {
        step("initall split");
        let split: Vec<Result<Communicator<B>>> = std::thread::scope(|s| {
            let hs: Vec<_> = world
                .iter()
                .map(|c| {
                    let b = b.clone();
                    s.spawn(move || {
                        b.set_device(c.device())?;
                        split_one(c)
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().expect("split thread"))
                .collect()
        });
        split.into_iter().collect::<Result<Vec<_>>>()?
    } else {
        world.clone()
    };
    let mut ctxs = Vec::new();
    for (r, c) in comms.iter().enumerate() {
        let arena = if o.offsets {
            Some(make_arena(b.as_ref(), o, devs[r], c)?)
        } else {
            None
        };
        ctxs.push(RankCtx {
            comm: c.clone(),
            stream: b.new_stream(devs[r])?,
            dev: devs[r],
            arena,
        });
    }
    let t = run_cases(b.as_ref(), o, &ctxs, label);
    step("initall destroy");
    for rc in &mut ctxs {
        free_arena(b.as_ref(), rc);
    }
    drop(ctxs);
    if o.split {
        destroy_all(&comms)?;
    }
    destroy_all(&world)?;
    Ok(t)
}

fn run_rank<B: CheckDevice>(
    b: &Arc<B>,
    o: &Opts,
    ndev: usize,
    id: UniqueId,
    rank: usize,
    label: &str,
) -> Result<Tally> {
    let dev = (rank % ndev) as i32;
    b.set_device(dev)?;
    let n = o.ranks;
    step(&format!("rank {rank} init"));
    let world = Communicator::init_rank(b.clone(), n, id, rank, dev, CommConfig::default())?;
    if let Some(count) = o.dead_peer {
        return dead_peer(b.as_ref(), &world, dev, count);
    }
    let comm = if o.split {
        step(&format!("rank {rank} split"));
        split_one(&world)?
    } else {
        world.clone()
    };
    let arena = if o.offsets {
        Some(make_arena(b.as_ref(), o, dev, &comm)?)
    } else {
        None
    };
    let mut rc = RankCtx {
        comm: comm.clone(),
        stream: b.new_stream(dev)?,
        dev,
        arena,
    };
    let t = run_cases(b.as_ref(), o, std::slice::from_ref(&rc), label);
    step(&format!("rank {rank} destroy"));
    free_arena(b.as_ref(), &mut rc);
    drop(rc);
    if o.split {
        comm.destroy()?;
    }
    world.destroy()?;
    Ok(t)
}

fn main() {
    let o = opts();
    if o.list {
        let all = cases(&o);
        for c in &all {
            println!("{c:?}");
        }
        println!("{} cases per rank", all.len());
        return;
    }
    let backend = o.backend.clone();
    match backend.as_str() {
        "cuda" => check::<CudaBackend>(o),
        "hip" => check::<HipBackend>(o),
        other => panic!("unknown backend {other} (cuda or hip)"),
    }
}

/// Runs the selected check on backend `B` and exits with its verdict.
fn check<B: CheckDevice>(o: Opts) -> ! {
    let b = match B::open() {
        Ok(b) => Arc::new(b),
        Err(e) => {
            println!("SKIP: {e}");
            std::process::exit(2);
        }
    };
    if o.graph > 0
        && let Err(why) = b.graphs_supported()
    {
        println!("FAIL --graph on the {} backend: {why}", B::NAME);
        println!("RESULT pass=0 fail=1");
        std::process::exit(1);
    }
    let ndev = b.device_count().expect("device count");
    // CUDA's label stays as run.sh's logs have always shown it.
    let backend = if B::NAME == "cuda" {
        String::new()
    } else {
        format!("backend={} ", B::NAME)
    };
    let mut label = format!(
        "{backend}mode={} ranks={} algo={}",
        o.mode,
        o.ranks,
        std::env::var("NCCL_ALGO").unwrap_or_else(|_| "auto".into())
    );
    for (on, what) in [
        (o.graph > 0, format!("graph={}", o.graph)),
        (o.split, "split".into()),
        (o.offsets, "offsets".into()),
        (o.vmm, "vmm".into()),
        (o.window, "window".into()),
        (
            o.hide_rank.is_some(),
            format!("hide-rank={:?}", o.hide_rank),
        ),
    ] {
        if on {
            label += " ";
            label += &what;
        }
    }
    // The parent of `procs` only waits for its workers, which have their own watchdogs.
    if o.mode != "procs" || o.worker.is_some() {
        watchdog(label.clone());
    }
    let t = if let Some(rank) = o.worker {
        let hex = std::env::var("OXCCL_GPU_CHECK_ID").expect("worker needs OXCCL_GPU_CHECK_ID");
        let bytes: Vec<u8> = (0..hex.len() / 2)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex"))
            .collect();
        let id = UniqueId::from_bytes(&bytes).expect("unique id");
        run_rank(&b, &o, ndev, id, rank, &label)
    } else {
        match o.mode.as_str() {
            "initall" => run_initall(&b, &o, ndev, &label),
            "threads" => {
                let id = UniqueId::generate(&BootstrapOptions::from_env()).expect("unique id");
                let results: Vec<Result<Tally>> = std::thread::scope(|s| {
                    let hs: Vec<_> = (0..o.ranks)
                        .map(|r| {
                            let (b, o, label) = (&b, &o, &label);
                            s.spawn(move || run_rank(b, o, ndev, id, r, label))
                        })
                        .collect();
                    hs.into_iter()
                        .map(|h| h.join().expect("rank thread"))
                        .collect()
                });
                let mut t = Tally { pass: 0, fail: 0 };
                for r in results {
                    match r {
                        Ok(x) => {
                            t.pass += x.pass;
                            t.fail += x.fail;
                        }
                        Err(e) => {
                            println!("FAIL rank: {e}");
                            t.fail += 1;
                        }
                    }
                }
                Ok(t)
            }
            "procs" => {
                let id = UniqueId::generate(&BootstrapOptions::from_env()).expect("unique id");
                let hex: String = id.as_bytes().iter().map(|x| format!("{x:02x}")).collect();
                let exe = std::env::current_exe().expect("own path");
                let args: Vec<String> = std::env::args().skip(1).collect();
                let children: Vec<_> = (0..o.ranks)
                    .map(|r| {
                        let mut cmd = std::process::Command::new(&exe);
                        cmd.args(&args)
                            .args(["--worker", &r.to_string()])
                            .env("OXCCL_GPU_CHECK_ID", &hex)
                            .stdout(std::process::Stdio::piped());
                        oxccl_tests::apply_test_host(&mut cmd, r, o.ranks);
                        cmd.spawn().expect("spawn worker")
                    })
                    .collect();
                let mut t = Tally { pass: 0, fail: 0 };
                for (r, c) in children.into_iter().enumerate() {
                    let out = c.wait_with_output().expect("worker");
                    let text = String::from_utf8_lossy(&out.stdout);
                    for line in text.lines() {
                        if let Some(rest) = line.strip_prefix("RESULT pass=") {
                            let mut it = rest.split(" fail=");
                            t.pass += it.next().and_then(|x| x.parse().ok()).unwrap_or(0);
                            t.fail += it
                                .next()
                                .and_then(|x| x.split(' ').next())
                                .and_then(|x| x.parse().ok())
                                .unwrap_or(1);
                        } else {
                            println!("[proc {r}] {line}");
                        }
                    }
                    if !out.status.success() && !text.contains("RESULT") {
                        println!("FAIL proc {r}: exited with {}", out.status);
                        t.fail += 1;
                    }
                }
                Ok(t)
            }
            m => panic!("unknown mode {m}"),
        }
    };
    match t {
        Ok(t) => {
            if o.worker.is_none() {
                println!("RESULT {label} pass={} fail={}", t.pass, t.fail);
            } else {
                println!("RESULT pass={} fail={}", t.pass, t.fail);
            }
            std::process::exit(if t.fail == 0 { 0 } else { 1 });
        }
        Err(e) => {
            // Cases checked before the failure still count.
            let (p, f) = (
                PASSED.load(Ordering::Relaxed),
                FAILED.load(Ordering::Relaxed) + 1,
            );
            println!("FAIL {label}: {e}");
            if o.worker.is_none() {
                println!("RESULT {label} pass={p} fail={f}");
            } else {
                println!("RESULT pass={p} fail={f}");
            }
            std::process::exit(1);
        }
    }
}
