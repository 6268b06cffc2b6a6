//! Every plan run on the simulator for many shapes, checked against references computed
//! straight from the inputs.
//!
//! Inputs are `rank * 1_000_003 + index`, so data landing in the wrong place shows up; everything
//! else in a rank's arena starts as poison and must end exactly as expected: outputs hold the
//! reference, every other byte (inputs of out-of-place runs, gaps, non-root outputs) is unchanged.
//! Zero-copy plans (the tuner's plan wrapped by `zero_copy::wrap`) run through the same cases,
//! on both of their branches.

use super::{Placement, RankMem, run};
use crate::datatype::{DataType, RedOp, ReduceOp, Reduction, Scalar, ScalarSource};
use crate::plan::{
    Algorithm, AllToAllvLayout, BufId, ChannelWork, CollKind, CollRequest, HostLayout, P2pDir,
    P2pGroup, P2pLl, P2pOp, P2pShape, Path, Protocol, Region, Split, Step, Tuner, WorkDesc,
    algorithms_for, build_coll, build_p2p, coll_tag, local_copies_apart, split_directions,
    tuner::Topology, zero_copy,
};
use std::collections::HashMap;
use std::sync::Arc;

const RANKS: [u32; 7] = [1, 2, 3, 4, 5, 8, 16];
const GAP: u64 = 3;

fn poison(i: u64) -> u64 {
    0xDEAD_BEEF_0000_0000 | i
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Red {
    Sum,
    Prod,
    Max,
    Min,
    Avg,
    /// Every rank with its own scalar ([`scalar`]).
    PreMulSum,
    /// Every rank with the same scalar, 2.
    PreMulSumSame,
}

/// Whether a case runs the tuner's plan alone or wrapped into a zero-copy plan.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Zc {
    /// The tuner's plan alone.
    Off,
    /// Wrapped, every rank exposes its buffers: the zero-copy branch must run.
    Exposed,
    /// Wrapped, this rank does not expose its buffers: every rank must fall back.
    Hidden(u32),
}

#[derive(Debug, Clone)]
struct Case {
    kind: CollKind,
    algo: Algorithm,
    n: u32,
    count: u64,
    root: u32,
    inplace: bool,
    nch: u32,
    chunk: u64,
    dtype: DataType,
    red: Red,
    /// Float64 inputs that are not exactly representable sums (order of additions matters).
    inexact: bool,
    /// Zero-copy wrapping.
    zc: Zc,
    /// Which host each rank is on.
    hosts: Hosts,
}

/// The host layout of a case.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Hosts {
    /// Every rank on one host (no layout).
    One,
    /// Rank r on host r % k: rings and trees reorder the ranks.
    RoundRobin(u32),
    /// k hosts of contiguous ranks: rings keep the rank order, trees chain inside hosts.
    Blocks(u32),
}

impl Hosts {
    fn layout(self, n: u32) -> Option<Arc<HostLayout>> {
        let keys: Vec<u32> = match self {
            Hosts::One => return None,
            Hosts::RoundRobin(k) => (0..n).map(|r| r % k).collect(),
            Hosts::Blocks(k) => (0..n).map(|r| r * k / n).collect(),
        };
        HostLayout::from_keys(&keys)
    }
}

impl Case {
    fn new(kind: CollKind, algo: Algorithm) -> Case {
        Case {
            kind,
            algo,
            n: 1,
            count: 0,
            root: 0,
            inplace: false,
            nch: 1,
            chunk: 64,
            dtype: DataType::Int64,
            red: Red::Sum,
            inexact: false,
            zc: Zc::Off,
            hosts: Hosts::One,
        }
    }
}

fn scalar(r: u32) -> f64 {
    [0.5, 1.0, 2.0, 4.0][r as usize % 4]
}

/// Rank `r`'s PreMulSum scalar in case `c`.
fn scalar_of(c: &Case, r: u32) -> f64 {
    if c.red == Red::PreMulSumSame {
        2.0
    } else {
        scalar(r)
    }
}

fn reduction(c: &Case, r: u32) -> Reduction {
    match c.red {
        Red::Sum => Reduction::lower(RedOp::Sum, c.n as usize),
        Red::Prod => Reduction::lower(RedOp::Prod, c.n as usize),
        Red::Max => Reduction::lower(RedOp::Max, c.n as usize),
        Red::Min => Reduction::lower(RedOp::Min, c.n as usize),
        Red::Avg => Reduction::lower(RedOp::Avg, c.n as usize),
        Red::PreMulSum | Red::PreMulSumSame => Reduction::lower(
            RedOp::PreMulSum(ScalarSource::Immediate(Scalar::from_bytes(
                &from_float(c.dtype, scalar_of(c, r)).to_le_bytes(),
            ))),
            c.n as usize,
        ),
    }
}

/// The bits of `v` as an element of a floating type (the low bytes of the result).
fn from_float(dtype: DataType, v: f64) -> u64 {
    match dtype {
        DataType::Float64 => v.to_bits(),
        DataType::Float32 => u64::from((v as f32).to_bits()),
        DataType::Bfloat16 => u64::from(half::bf16::from_f64(v).to_bits()),
        other => panic!("{other:?} is not a floating type the tests use"),
    }
}

/// The value of an element of a floating type from its bits.
fn to_float(dtype: DataType, bits: u64) -> f64 {
    match dtype {
        DataType::Float64 => f64::from_bits(bits),
        DataType::Float32 => f64::from(f32::from_bits(bits as u32)),
        DataType::Bfloat16 => half::bf16::from_bits(bits as u16).to_f64(),
        other => panic!("{other:?} is not a floating type the tests use"),
    }
}

fn reduces(kind: CollKind) -> bool {
    matches!(
        kind,
        CollKind::AllReduce | CollKind::Reduce | CollKind::ReduceScatter
    )
}

/// Rank `r`'s input element `i` (only the low `dtype.size()` bytes are stored). Copies move
/// arbitrary bits; narrow floating types that are reduced get small integers, so that every
/// partial result is exact and the order of combination does not matter.
fn input_val(c: &Case, r: u32, i: u64) -> u64 {
    let base = u64::from(r) * 1_000_003 + i;
    match c.dtype {
        DataType::Float64 if c.inexact => ((i + 1) as f64 * 0.1 + f64::from(r) / 3.0).to_bits(),
        DataType::Float64 => ((base % 1021) as f64).to_bits(),
        DataType::Float32 if reduces(c.kind) => from_float(c.dtype, (base % 1021) as f64),
        DataType::Bfloat16 if reduces(c.kind) => from_float(c.dtype, (base % 3) as f64),
        _ => base,
    }
}

fn ref_combine(c: &Case, a: u64, b: u64) -> u64 {
    let op = match c.red {
        Red::Prod => ReduceOp::Prod,
        Red::Max => ReduceOp::Max,
        Red::Min => ReduceOp::Min,
        Red::Sum | Red::Avg | Red::PreMulSum | Red::PreMulSumSame => ReduceOp::Sum,
    };
    match c.dtype {
        DataType::Int64 => {
            let (a, b) = (a as i64, b as i64);
            (match op {
                ReduceOp::Sum => a.wrapping_add(b),
                ReduceOp::Prod => a.wrapping_mul(b),
                ReduceOp::Max => a.max(b),
                ReduceOp::Min => a.min(b),
            }) as u64
        }
        DataType::Uint64 => match op {
            ReduceOp::Sum => a.wrapping_add(b),
            ReduceOp::Prod => a.wrapping_mul(b),
            ReduceOp::Max => a.max(b),
            ReduceOp::Min => a.min(b),
        },
        DataType::Float64 => {
            let (a, b) = (f64::from_bits(a), f64::from_bits(b));
            (match op {
                ReduceOp::Sum => a + b,
                ReduceOp::Prod => a * b,
                ReduceOp::Max => a.max(b),
                ReduceOp::Min => a.min(b),
            })
            .to_bits()
        }
        DataType::Int8 => {
            let (a, b) = (a as i8, b as i8);
            (match op {
                ReduceOp::Sum => a.wrapping_add(b),
                ReduceOp::Prod => a.wrapping_mul(b),
                ReduceOp::Max => a.max(b),
                ReduceOp::Min => a.min(b),
            }) as u8 as u64
        }
        // Exact in f64, then rounded once: the correctly rounded result of the narrow type.
        DataType::Float32 | DataType::Bfloat16 => {
            let (a, b) = (to_float(c.dtype, a), to_float(c.dtype, b));
            from_float(
                c.dtype,
                match op {
                    ReduceOp::Sum => a + b,
                    ReduceOp::Prod => a * b,
                    ReduceOp::Max => a.max(b),
                    ReduceOp::Min => a.min(b),
                },
            )
        }
        other => panic!("no reference for {other:?}"),
    }
}

/// `x0 ⊕ x1 ⊕ ... ⊕ x(n-1)` in rank order, pre-scaled and post-divided as the reduction says.
fn ref_reduce(c: &Case, x: impl Fn(u32) -> u64) -> u64 {
    let pre = |r: u32| match c.red {
        Red::PreMulSum | Red::PreMulSumSame => {
            from_float(c.dtype, to_float(c.dtype, x(r)) * scalar_of(c, r))
        }
        _ => x(r),
    };
    let mut acc = pre(0);
    for r in 1..c.n {
        acc = ref_combine(c, acc, pre(r));
    }
    match c.red {
        Red::Avg if c.dtype.is_float() => {
            from_float(c.dtype, to_float(c.dtype, acc) / f64::from(c.n))
        }
        Red::Avg => panic!("integer Avg is not tested"),
        _ => acc,
    }
}

/// Elements rank `s` sends to rank `d` in the AlltoAllv tests (zeros included).
fn vcount(c: &Case, s: u32, d: u32) -> u64 {
    c.count * u64::from((s + 2 * d) % 3) / 2
}

fn vlayout(c: &Case, r: u32) -> AllToAllvLayout {
    let n = c.n as usize;
    let mut l = AllToAllvLayout {
        send_counts: vec![0; n],
        send_displs: vec![0; n],
        recv_counts: vec![0; n],
        recv_displs: vec![0; n],
    };
    // Blocks in the send buffer in reverse peer order, with gaps, so displacements matter.
    let mut at = 0;
    for d in (0..c.n).rev() {
        l.send_counts[d as usize] = vcount(c, r, d);
        l.send_displs[d as usize] = at;
        at += vcount(c, r, d) + 1;
    }
    let mut at = 0;
    for s in 0..c.n {
        l.recv_counts[s as usize] = vcount(c, s, r);
        l.recv_displs[s as usize] = at;
        at += vcount(c, s, r) + 2;
    }
    l
}

/// (input elements, output elements) on rank `r`.
fn lens(c: &Case, r: u32) -> (u64, u64) {
    let (n, k) = (u64::from(c.n), c.count);
    match c.kind {
        CollKind::AllReduce | CollKind::Broadcast | CollKind::Reduce => (k, k),
        CollKind::AllGather | CollKind::Gather => (k, n * k),
        CollKind::ReduceScatter | CollKind::Scatter => (n * k, k),
        CollKind::AllToAll => (n * k, n * k),
        CollKind::AllToAllv => {
            let l = vlayout(c, r);
            let end = |cs: &[u64], ds: &[u64]| {
                cs.iter().zip(ds).map(|(c, d)| c + d + 1).max().unwrap_or(0)
            };
            (
                end(&l.send_counts, &l.send_displs),
                end(&l.recv_counts, &l.recv_displs),
            )
        }
        CollKind::SendRecv => unreachable!(),
    }
}

/// (input offset, output offset, arena elements): NCCL's in-place conventions, or disjoint.
fn place(c: &Case, r: u32) -> (u64, u64, u64) {
    let (il, ol) = lens(c, r);
    let k = c.count;
    if c.inplace {
        let at = |x: u32| u64::from(x) * k;
        match c.kind {
            CollKind::AllReduce | CollKind::Broadcast | CollKind::Reduce | CollKind::AllToAll => {
                return (0, 0, il.max(ol));
            }
            CollKind::AllGather => return (at(r), 0, ol),
            CollKind::ReduceScatter => return (0, at(r), il),
            CollKind::Gather if r == c.root => return (at(c.root), 0, ol),
            CollKind::Scatter if r == c.root => return (0, at(c.root), il),
            _ => {}
        }
    }
    if r.is_multiple_of(2) {
        (GAP, 2 * GAP + il, 3 * GAP + il + ol)
    } else {
        (2 * GAP + ol, GAP, 3 * GAP + il + ol)
    }
}

/// The expected output of rank `r`, element by element; `None` where the output is not
/// meaningful (it must then stay as it was).
fn expected(c: &Case, r: u32) -> Option<Vec<Option<u64>>> {
    let (n, k) = (c.n, c.count);
    let (_, ol) = lens(c, r);
    let x = |p: u32, i: u64| input_val(c, p, i);
    let v: Vec<Option<u64>> = match c.kind {
        CollKind::AllReduce => (0..k).map(|i| Some(ref_reduce(c, |p| x(p, i)))).collect(),
        CollKind::Broadcast => (0..k).map(|i| Some(x(c.root, i))).collect(),
        CollKind::Reduce if r == c.root => {
            (0..k).map(|i| Some(ref_reduce(c, |p| x(p, i)))).collect()
        }
        CollKind::Reduce => return None,
        CollKind::AllGather => (0..ol).map(|j| Some(x((j / k) as u32, j % k))).collect(),
        CollKind::ReduceScatter => (0..k)
            .map(|i| Some(ref_reduce(c, |p| x(p, u64::from(r) * k + i))))
            .collect(),
        CollKind::AllToAll => (0..ol)
            .map(|j| Some(x((j / k) as u32, u64::from(r) * k + j % k)))
            .collect(),
        CollKind::AllToAllv => {
            let mine = vlayout(c, r);
            let mut v = vec![None; ol as usize];
            for p in 0..n {
                let theirs = vlayout(c, p);
                for i in 0..mine.recv_counts[p as usize] {
                    v[(mine.recv_displs[p as usize] + i) as usize] =
                        Some(x(p, theirs.send_displs[r as usize] + i));
                }
            }
            v
        }
        CollKind::Gather if r == c.root => {
            (0..ol).map(|j| Some(x((j / k) as u32, j % k))).collect()
        }
        CollKind::Gather => return None,
        CollKind::Scatter => (0..k)
            .map(|i| Some(x(c.root, u64::from(r) * k + i)))
            .collect(),
        CollKind::SendRecv => unreachable!(),
    };
    Some(v)
}

fn put(arena: &mut [u8], es: usize, idx: u64, v: u64) {
    let at = idx as usize * es;
    arena[at..at + es].copy_from_slice(&v.to_le_bytes()[..es]);
}

fn get(arena: &[u8], es: usize, idx: u64) -> u64 {
    let at = idx as usize * es;
    let mut b = [0u8; 8];
    b[..es].copy_from_slice(&arena[at..at + es]);
    u64::from_le_bytes(b)
}

fn request(c: &Case, r: u32) -> CollRequest {
    CollRequest {
        kind: c.kind,
        rank: r,
        nranks: c.n,
        count: c.count,
        root: c.root,
        layout: (c.kind == CollKind::AllToAllv).then(|| vlayout(c, r)),
        dtype: c.dtype,
        reduction: reduction(c, r),
        seq: 77 + u64::from(c.nch),
        algo: c.algo,
        proto: Protocol::Simple,
        nchannels: c.nch,
        chunk_elems: c.chunk,
        hosts: c.hosts.layout(c.n),
    }
}

/// The plans of every rank: the tuner's, or wrapped into a zero-copy plan as the case says,
/// with each rank's `exposed` flag set as the communicator would.
fn plans(c: &Case) -> Result<Vec<WorkDesc>, String> {
    (0..c.n)
        .map(|r| {
            let req = request(c, r);
            let mut d = build_coll(&req).map_err(|e| format!("build_coll: {e}"))?;
            // AlltoAll keeps its own block's copy apart, as the communicator does from some
            // size on; odd channel counts try it here.
            if c.zc != Zc::Off && c.kind == CollKind::AllToAll && c.nch % 2 == 1 {
                local_copies_apart(&mut d);
            }
            Ok(match c.zc {
                Zc::Off => d,
                Zc::Exposed | Zc::Hidden(_) => WorkDesc {
                    exposed: c.zc != Zc::Hidden(r),
                    ..zero_copy::wrap(&req, d)
                },
            })
        })
        .collect()
}

/// Runs one case; returns the final arenas when everything matched.
fn run_case(c: &Case, seed: u64) -> Result<Vec<Vec<u8>>, String> {
    run_plans(c, &plans(c)?, seed)
}

/// Runs one case with the given plans (possibly broken on purpose); returns the final arenas
/// when everything matched, including the branch a zero-copy plan had to take.
fn run_plans(c: &Case, descs: &[WorkDesc], seed: u64) -> Result<Vec<Vec<u8>>, String> {
    let es = c.dtype.size();
    let mut mems = Vec::new();
    let mut wants = Vec::new();
    for r in 0..c.n {
        let (il, ol) = lens(c, r);
        let (io, oo, total) = place(c, r);
        let mut arena = vec![0u8; total as usize * es];
        for i in 0..total {
            put(&mut arena, es, i, poison(i));
        }
        for i in 0..il {
            put(&mut arena, es, io + i, input_val(c, r, i));
        }
        let mut want = arena.clone();
        if let Some(v) = expected(c, r) {
            for (i, e) in v.into_iter().enumerate() {
                if let Some(e) = e {
                    put(&mut want, es, oo + i as u64, e);
                }
            }
        }
        wants.push(want);
        let mut bufs = HashMap::new();
        bufs.insert(
            BufId::INPUT,
            Placement {
                byte_off: io as usize * es,
                elems: il,
            },
        );
        bufs.insert(
            BufId::OUTPUT,
            Placement {
                byte_off: oo as usize * es,
                elems: ol,
            },
        );
        mems.push(RankMem { arena, bufs });
    }
    let stats = run(descs, &mut mems, seed)?;
    // Channels that choose a branch (a zero-copy AlltoAll's own-block copies take none).
    let lanes: usize = descs
        .iter()
        .flat_map(|d| &d.channels)
        .filter(|ch| ch.steps.iter().any(|s| s.learn))
        .count();
    let branches = (stats.zero_copy_lanes, stats.fallback_lanes, stats.direct);
    let branch_ok = match c.zc {
        Zc::Off => branches == (0, 0, 0),
        // Some rank owns a non-empty piece, so something is read or written directly.
        Zc::Exposed => branches.0 == lanes && branches.1 == 0 && branches.2 > 0,
        Zc::Hidden(_) => branches == (0, lanes, 0),
    };
    if !branch_ok {
        return Err(format!(
            "{lanes} lanes: {} took the zero-copy branch, {} the fallback; {} direct accesses",
            branches.0, branches.1, branches.2
        ));
    }
    let mut errors = Vec::new();
    for r in 0..c.n {
        let (io, oo, total) = place(c, r);
        let (got, want) = (&mems[r as usize].arena, &wants[r as usize]);
        for i in 0..total {
            let (g, w) = (get(got, es, i), get(want, es, i));
            if g != w {
                errors.push(format!(
                    "rank {r} element {i} (input+{} / output+{}): got {g:#x} want {w:#x}",
                    i as i64 - io as i64,
                    i as i64 - oo as i64
                ));
            }
        }
    }
    if errors.is_empty() {
        Ok(mems.into_iter().map(|m| m.arena).collect())
    } else {
        let n = errors.len();
        errors.truncate(6);
        Err(format!("{n} wrong elements:\n  {}", errors.join("\n  ")))
    }
}

fn check_all(cases: impl IntoIterator<Item = Case>) {
    let mut failures = Vec::new();
    let mut ran = 0;
    for (i, c) in cases.into_iter().enumerate() {
        ran += 1;
        if let Err(e) = run_case(&c, 0x9E37_79B9_7F4A_7C15 ^ i as u64) {
            failures.push(format!("{c:?}\n  {e}"));
        }
    }
    assert!(ran > 0);
    if !failures.is_empty() {
        let n = failures.len();
        failures.truncate(4);
        panic!("{n} of {ran} cases failed:\n{}", failures.join("\n"));
    }
}

/// The standard sweep: ranks × counts × chunks × channels × in-place, with the root rotating.
/// Large rank counts skip the smallest chunk at the largest count to keep debug runs short.
fn sweep(kind: CollKind, algo: Algorithm) -> Vec<Case> {
    let mut v = Vec::new();
    let mut i = 0u32;
    for n in RANKS {
        for count in [0, 1, 7, 1000] {
            for chunk in [7, 64] {
                if n >= 8 && count == 1000 && chunk == 7 {
                    continue;
                }
                for nch in [1, 2, 3] {
                    for inplace in [false, true] {
                        i += 1;
                        v.push(Case {
                            n,
                            count,
                            chunk,
                            nch,
                            inplace,
                            root: i % n,
                            ..Case::new(kind, algo)
                        });
                    }
                }
            }
        }
    }
    v
}

/// 1000003 elements (prime: nothing divides evenly) on up to 4 ranks.
fn big(kind: CollKind, algo: Algorithm) -> Vec<Case> {
    let mut v = Vec::new();
    for n in [1, 2, 3, 4] {
        for (nch, inplace, chunk) in [(1, false, 65_536), (3, true, 40_000), (2, false, 4_099)] {
            v.push(Case {
                n,
                count: 1_000_003,
                chunk,
                nch,
                inplace,
                root: n - 1,
                ..Case::new(kind, algo)
            });
        }
    }
    v
}

macro_rules! sweep_tests {
    ($($name:ident: $kind:ident $algo:ident;)*) => {$(
        #[test]
        fn $name() {
            check_all(sweep(CollKind::$kind, Algorithm::$algo));
        }
    )*};
}

sweep_tests! {
    all_reduce_ring: AllReduce Ring;
    all_reduce_tree: AllReduce Tree;
    all_reduce_direct: AllReduce Direct;
    broadcast_ring: Broadcast Ring;
    broadcast_direct: Broadcast Direct;
    reduce_ring: Reduce Ring;
    reduce_direct: Reduce Direct;
    all_gather_ring: AllGather Ring;
    all_gather_direct: AllGather Direct;
    reduce_scatter_ring: ReduceScatter Ring;
    reduce_scatter_direct: ReduceScatter Direct;
    all_to_all_direct: AllToAll Direct;
    gather_direct: Gather Direct;
    scatter_direct: Scatter Direct;
}

/// Rings and trees ordered by host: every operation of a ring or tree plan, on ranks spread
/// over hosts round-robin (the ring then differs from the rank order) and in blocks.
#[test]
fn host_ordered_rings_and_trees() {
    use CollKind::*;
    let plans = [
        (AllReduce, Algorithm::Ring),
        (AllReduce, Algorithm::Tree),
        (AllReduce, Algorithm::Direct),
        (Broadcast, Algorithm::Ring),
        (Reduce, Algorithm::Ring),
        (AllGather, Algorithm::Ring),
        (ReduceScatter, Algorithm::Ring),
        (AllToAll, Algorithm::Direct),
    ];
    for (kind, algo) in plans {
        for hosts in [Hosts::RoundRobin(2), Hosts::RoundRobin(3), Hosts::Blocks(2)] {
            check_all(
                sweep(kind, algo)
                    .into_iter()
                    .filter(|c| c.n >= 2)
                    .map(|c| Case { hosts, ..c }),
            );
        }
    }
}

#[test]
fn all_to_allv_direct() {
    // In-place AlltoAllv has no convention; only disjoint buffers.
    check_all(
        sweep(CollKind::AllToAllv, Algorithm::Direct)
            .into_iter()
            .filter(|c| !c.inplace),
    );
}

#[test]
fn big_all_reduce() {
    check_all(big(CollKind::AllReduce, Algorithm::Ring));
    check_all(
        big(CollKind::AllReduce, Algorithm::Tree)
            .into_iter()
            .filter(|c| c.chunk > 10_000),
    );
}

#[test]
fn big_all_gather_and_reduce_scatter() {
    check_all(big(CollKind::AllGather, Algorithm::Ring));
    check_all(big(CollKind::ReduceScatter, Algorithm::Ring));
}

#[test]
fn big_broadcast_and_reduce() {
    check_all(big(CollKind::Broadcast, Algorithm::Ring));
    check_all(big(CollKind::Reduce, Algorithm::Ring));
}

const REDUCING: [(CollKind, Algorithm); 7] = [
    (CollKind::AllReduce, Algorithm::Ring),
    (CollKind::AllReduce, Algorithm::Tree),
    (CollKind::AllReduce, Algorithm::Direct),
    (CollKind::Reduce, Algorithm::Ring),
    (CollKind::Reduce, Algorithm::Direct),
    (CollKind::ReduceScatter, Algorithm::Ring),
    (CollKind::ReduceScatter, Algorithm::Direct),
];

/// A smaller sweep for the other operators and types.
fn small_sweep(kind: CollKind, algo: Algorithm, dtype: DataType, red: Red) -> Vec<Case> {
    let mut v = Vec::new();
    let mut i = 0;
    for n in RANKS {
        for count in [1, 7, 300] {
            for (nch, inplace) in [(1, false), (2, true), (3, false)] {
                i += 1;
                v.push(Case {
                    n,
                    count,
                    chunk: 16,
                    nch,
                    inplace,
                    root: i % n,
                    dtype,
                    red,
                    ..Case::new(kind, algo)
                });
            }
        }
    }
    v
}

#[test]
fn other_operators_and_types() {
    for (kind, algo) in REDUCING {
        for (dtype, red) in [
            (DataType::Int64, Red::Prod),
            (DataType::Int64, Red::Max),
            (DataType::Int64, Red::Min),
            (DataType::Uint64, Red::Sum),
            (DataType::Float64, Red::Sum),
        ] {
            check_all(small_sweep(kind, algo, dtype, red));
        }
    }
}

#[test]
fn avg_and_premulsum_scale_exactly_once() {
    for (kind, algo) in REDUCING {
        for red in [Red::Avg, Red::PreMulSum] {
            check_all(small_sweep(kind, algo, DataType::Float64, red));
        }
    }
}

#[test]
fn copies_with_narrow_types() {
    // Other grains (16-byte units of 1, 2, 4-byte elements) for the operations that only copy.
    let kinds = [
        (CollKind::Broadcast, Algorithm::Ring),
        (CollKind::Broadcast, Algorithm::Direct),
        (CollKind::AllGather, Algorithm::Ring),
        (CollKind::AllGather, Algorithm::Direct),
        (CollKind::AllToAll, Algorithm::Direct),
        (CollKind::AllToAllv, Algorithm::Direct),
        (CollKind::Gather, Algorithm::Direct),
        (CollKind::Scatter, Algorithm::Direct),
    ];
    for (kind, algo) in kinds {
        for dtype in [DataType::Uint8, DataType::Float16, DataType::Float32] {
            check_all(
                small_sweep(kind, algo, dtype, Red::Sum)
                    .into_iter()
                    .filter(|c| !(c.kind == CollKind::AllToAllv && c.inplace)),
            );
        }
    }
}

/// Direct AllReduce adds in rank order everywhere, so even inexact sums agree bitwise with a
/// rank-order reference; ring and tree compute each element once, so all ranks agree bitwise.
#[test]
fn floating_point_results_identical_on_all_ranks() {
    for algo in [Algorithm::Direct, Algorithm::Ring, Algorithm::Tree] {
        for n in [2, 3, 5, 8] {
            for inplace in [false, true] {
                let c = Case {
                    n,
                    count: 257,
                    chunk: 16,
                    nch: 2,
                    inplace,
                    dtype: DataType::Float64,
                    inexact: true,
                    ..Case::new(CollKind::AllReduce, algo)
                };
                if algo == Algorithm::Direct {
                    run_case(&c, 5).unwrap_or_else(|e| panic!("{c:?}: {e}"));
                    continue;
                }
                // Compare ranks with each other instead of with the rank-order reference.
                let descs: Vec<WorkDesc> = (0..n)
                    .map(|r| build_coll(&request(&c, r)).unwrap())
                    .collect();
                let mut mems: Vec<RankMem> = (0..n)
                    .map(|r| {
                        let mut arena = vec![0u8; 257 * 8 * 2];
                        for i in 0..257 {
                            put(&mut arena, 8, i, input_val(&c, r, i));
                        }
                        let out = if inplace { 0 } else { 257 * 8 };
                        let bufs = HashMap::from([
                            (
                                BufId::INPUT,
                                Placement {
                                    byte_off: 0,
                                    elems: 257,
                                },
                            ),
                            (
                                BufId::OUTPUT,
                                Placement {
                                    byte_off: out,
                                    elems: 257,
                                },
                            ),
                        ]);
                        RankMem { arena, bufs }
                    })
                    .collect();
                run(&descs, &mut mems, 9).unwrap();
                let out = if inplace { 0 } else { 257 * 8 };
                for r in 1..n as usize {
                    assert_eq!(
                        mems[r].arena[out..out + 257 * 8],
                        mems[0].arena[out..out + 257 * 8],
                        "{algo:?} n={n} rank {r}"
                    );
                }
                let close = (0..257).all(|i| {
                    let got = f64::from_bits(get(&mems[0].arena[out..], 8, i));
                    let want = f64::from_bits(ref_reduce(&c, |p| input_val(&c, p, i)));
                    (got - want).abs() <= 1e-9 * want.abs()
                });
                assert!(close, "{algo:?} n={n}");
            }
        }
    }
}

#[test]
fn every_default_tuner_choice_runs() {
    let t = Tuner::default();
    for kind in [
        CollKind::AllReduce,
        CollKind::Broadcast,
        CollKind::Reduce,
        CollKind::AllGather,
        CollKind::ReduceScatter,
        CollKind::AllToAll,
        CollKind::Gather,
        CollKind::Scatter,
    ] {
        for n in [2, 3, 8] {
            for count in [5, 9000, 150_000] {
                let ch = t.choose(kind, count * 8, DataType::Int64, n, Topology::Host);
                let c = Case {
                    n,
                    count,
                    chunk: ch.chunk_elems,
                    nch: ch.nchannels,
                    root: 1,
                    ..Case::new(kind, ch.algo)
                };
                run_case(&c, 3).unwrap_or_else(|e| panic!("{c:?}: {e}"));
            }
        }
    }
}

#[test]
fn plans_for_count_zero_are_empty() {
    for (kind, algo) in REDUCING {
        let c = Case {
            n: 4,
            nch: 3,
            ..Case::new(kind, algo)
        };
        let d = build_coll(&request(&c, 2)).unwrap();
        assert_eq!(d.step_count(), 0);
    }
}

#[test]
fn bad_requests_are_refused() {
    let c = Case {
        n: 4,
        count: 10,
        ..Case::new(CollKind::AllGather, Algorithm::Ring)
    };
    let ok = request(&c, 1);
    assert!(build_coll(&ok).is_ok());
    let bad = [
        CollRequest {
            rank: 4,
            ..ok.clone()
        },
        CollRequest {
            nranks: 0,
            rank: 0,
            ..ok.clone()
        },
        CollRequest {
            nchannels: 0,
            ..ok.clone()
        },
        CollRequest {
            nchannels: 1000,
            ..ok.clone()
        },
        CollRequest {
            chunk_elems: 0,
            ..ok.clone()
        },
        CollRequest {
            hosts: HostLayout::from_keys(&[0, 1, 1]),
            ..ok.clone()
        },
        CollRequest {
            algo: Algorithm::Tree,
            ..ok.clone()
        },
        CollRequest {
            kind: CollKind::SendRecv,
            ..ok.clone()
        },
        CollRequest {
            kind: CollKind::Broadcast,
            root: 4,
            ..ok.clone()
        },
        CollRequest {
            kind: CollKind::AllToAllv,
            algo: Algorithm::Direct,
            ..ok.clone()
        },
        CollRequest {
            count: u64::MAX,
            ..ok.clone()
        },
    ];
    for b in bad {
        assert!(build_coll(&b).is_err(), "{b:?}");
    }
    let mut v = CollRequest {
        kind: CollKind::AllToAllv,
        algo: Algorithm::Direct,
        layout: Some(vlayout(
            &Case {
                n: 4,
                count: 9,
                ..c.clone()
            },
            1,
        )),
        ..ok.clone()
    };
    assert!(build_coll(&v).is_ok());
    v.layout.as_mut().unwrap().recv_counts[1] += 1;
    assert!(build_coll(&v).is_err(), "self counts differ");
    v.layout.as_mut().unwrap().recv_counts.pop();
    assert!(build_coll(&v).is_err(), "short layout");
}

// ---------------------------------------------------------------------------------------------
// Send/receive groups.

/// One message of a group: `count` elements from `from` to `to`.
#[derive(Debug, Clone, Copy)]
struct Msg {
    from: u32,
    to: u32,
    count: u64,
}

fn msg_val(m: usize, from: u32, j: u64) -> u64 {
    u64::from(from) * 1_000_003 + m as u64 * 100_019 + j
}

/// Runs the group with every rank's sends and receives in alternating channels, in split ones
/// (unordered, and ordered with tokens), and the ranks mixing the three (each rank chooses for
/// itself).
fn run_p2p(n: u32, msgs: &[Msg], nch: u32, chunk: u64, dtype: DataType, seed: u64) {
    let ways: [fn(u32) -> Split; 4] = [
        |_| Split::No,
        |_| Split::Unordered,
        |_| Split::Ordered,
        |r| [Split::No, Split::Unordered, Split::Ordered][r as usize % 3],
    ];
    for split in ways {
        run_p2p_split(n, msgs, nch, chunk, dtype, seed, split);
    }
}

fn run_p2p_split(
    n: u32,
    msgs: &[Msg],
    nch: u32,
    chunk: u64,
    dtype: DataType,
    seed: u64,
    split: fn(u32) -> Split,
) {
    let es = dtype.size();
    // Per rank: (op, message index).
    let mut ops: Vec<Vec<(P2pOp, usize)>> = vec![Vec::new(); n as usize];
    let mut sent: HashMap<(u32, u32), u64> = HashMap::new();
    let mut got: HashMap<(u32, u32), u64> = HashMap::new();
    for (m, msg) in msgs.iter().enumerate() {
        let s = sent.entry((msg.from, msg.to)).or_default();
        ops[msg.from as usize].push((
            P2pOp {
                dir: P2pDir::Send,
                peer: msg.to,
                count: msg.count,
                peer_seq: *s,
            },
            m,
        ));
        *s += 1;
        let g = got.entry((msg.from, msg.to)).or_default();
        ops[msg.to as usize].push((
            P2pOp {
                dir: P2pDir::Recv,
                peer: msg.from,
                count: msg.count,
                peer_seq: *g,
            },
            m,
        ));
        *g += 1;
    }
    // The order of operations inside a group must not matter.
    for (r, o) in ops.iter_mut().enumerate() {
        match r % 3 {
            0 => {}
            1 => o.reverse(),
            _ => {
                let half = o.len() / 2;
                o.rotate_left(half);
            }
        }
    }
    let mut descs = Vec::new();
    let mut mems = Vec::new();
    let mut wants = Vec::new();
    for r in 0..n {
        let list: Vec<P2pOp> = ops[r as usize].iter().map(|x| x.0).collect();
        // Small messages as LL, in chunks an LL FIFO holds, on the same terms at both ends
        // (the simulation runs both protocols through one FIFO per pair, a stricter order).
        let ll = P2pLl {
            max_bytes: 96,
            chunk_bytes: 32,
            bytes_per_channel: 4 << 10,
        };
        let shape = P2pShape {
            nchannels: nch,
            chunk_elems: chunk,
            bytes_per_channel: 64 << 10,
            ll,
            narrow_channels: 2,
            wide_min_bytes: 500,
        };
        let d = build_p2p(P2pGroup {
            rank: r,
            nranks: n,
            ops: &list,
            dtype,
            shape,
            split: split(r),
        });
        for st in d.channels.iter().flat_map(|c| &c.steps) {
            if st.ll {
                assert!(st.count * dtype.size() as u64 <= ll.chunk_bytes, "{st:?}");
                let peer = st.send.or(st.recv).expect("an LL step moves data");
                assert_ne!(peer, r);
                assert!(
                    list.iter()
                        .any(|o| o.peer == peer && o.count * dtype.size() as u64 <= ll.max_bytes)
                );
            }
        }
        // One rank distance per channel: a channel sends to one peer and receives from one;
        // split, it only sends or only receives (or copies to self).
        for ch in &d.channels {
            if split(r) != Split::No {
                let peer_sends = ch.steps.iter().any(|s| s.send.is_some_and(|p| p != r));
                let peer_recvs = ch.steps.iter().any(|s| s.recv.is_some_and(|p| p != r));
                assert!(!(peer_sends && peer_recvs), "rank {r}: {ch:?}");
            }
            // Order tokens go to this rank itself, beside a FIFO channel's messages.
            let others = |p: &u32| *p != r || ch.fifo.is_none();
            let to: std::collections::BTreeSet<u32> = ch
                .steps
                .iter()
                .filter_map(|s| s.send)
                .filter(others)
                .collect();
            let from: std::collections::BTreeSet<u32> = ch
                .steps
                .iter()
                .filter_map(|s| s.recv)
                .filter(others)
                .collect();
            assert!(
                to.len() <= 1 && from.len() <= 1,
                "rank {r}: several peers in {ch:?}"
            );
        }
        descs.push(d);
        let total: u64 = list.iter().map(|o| o.count + GAP).sum::<u64>() + GAP;
        let mut arena = vec![0u8; total as usize * es];
        for i in 0..total {
            put(&mut arena, es, i, poison(i));
        }
        let mut want = arena.clone();
        let mut bufs = HashMap::new();
        let mut at = GAP;
        for (i, &(op, m)) in ops[r as usize].iter().enumerate() {
            bufs.insert(
                BufId(BufId::FIRST_P2P.0 + i as u16),
                Placement {
                    byte_off: at as usize * es,
                    elems: op.count,
                },
            );
            for j in 0..op.count {
                let v = msg_val(m, msgs[m].from, j);
                match op.dir {
                    P2pDir::Send => {
                        put(&mut arena, es, at + j, v);
                        put(&mut want, es, at + j, v);
                    }
                    P2pDir::Recv => put(&mut want, es, at + j, v),
                }
            }
            at += op.count + GAP;
        }
        mems.push(RankMem { arena, bufs });
        wants.push(want);
    }
    let splits: Vec<Split> = (0..n).map(split).collect();
    let ctx = format!("n={n} nch={nch} chunk={chunk} {dtype:?} split={splits:?} msgs={msgs:?}");
    run(&descs, &mut mems, seed).unwrap_or_else(|e| panic!("{ctx}: {e}"));
    for r in 0..n as usize {
        assert!(mems[r].arena == wants[r], "{ctx}: rank {r} buffers differ");
    }
}

#[test]
fn p2p_patterns() {
    let mut seed = 1;
    for n in RANKS {
        for count in [0, 1, 7, 1000] {
            for (nch, chunk) in [(1, 7), (2, 64), (3, 7), (3, 100_000)] {
                seed += 1;
                // Ring shift.
                let ring: Vec<Msg> = (0..n)
                    .map(|r| Msg {
                        from: r,
                        to: (r + 1) % n,
                        count,
                    })
                    .collect();
                run_p2p(n, &ring, nch, chunk, DataType::Int64, seed);
                // Every pair, self included, twice, with varying sizes.
                if n <= 5 || count <= 7 {
                    let mut all = Vec::new();
                    for rep in 0..2 {
                        for from in 0..n {
                            for to in 0..n {
                                let count = count * u64::from((from + to + rep) % 3) / 2;
                                all.push(Msg { from, to, count });
                            }
                        }
                    }
                    run_p2p(n, &all, nch, chunk, DataType::Int64, seed);
                }
            }
        }
    }
}

#[test]
fn p2p_self_and_narrow_types() {
    for dtype in [
        DataType::Uint8,
        DataType::Float16,
        DataType::Float32,
        DataType::Float64,
    ] {
        let msgs = [
            Msg {
                from: 0,
                to: 0,
                count: 33,
            },
            Msg {
                from: 0,
                to: 0,
                count: 5,
            },
            Msg {
                from: 1,
                to: 0,
                count: 100,
            },
            Msg {
                from: 0,
                to: 1,
                count: 17,
            },
        ];
        run_p2p(2, &msgs, 2, 8, dtype, 4);
        // A rank alone with itself.
        run_p2p(1, &msgs[..2], 3, 1, dtype, 5);
    }
}

// ---------------------------------------------------------------------------------------------
// The simulator must catch broken plans.

fn desc(channels: Vec<Vec<Step>>) -> WorkDesc {
    WorkDesc {
        kind: CollKind::AllReduce,
        algo: Algorithm::Ring,
        proto: Protocol::Simple,
        dtype: DataType::Int64,
        reduction: Reduction::none(),
        scratch_elems: 0,
        exposed: false,
        channels: channels.into_iter().map(ChannelWork::new).collect(),
    }
}

fn mem(elems: u64) -> RankMem {
    RankMem {
        arena: vec![0; elems as usize * 8 * 2],
        bufs: HashMap::from([
            (BufId::INPUT, Placement { byte_off: 0, elems }),
            (
                BufId::OUTPUT,
                Placement {
                    byte_off: elems as usize * 8,
                    elems,
                },
            ),
        ]),
    }
}

fn sim_error(descs: Vec<WorkDesc>) -> String {
    let mut mems: Vec<RankMem> = descs.iter().map(|_| mem(16)).collect();
    run(&descs, &mut mems, 1).expect_err("the simulator accepted a broken plan")
}

#[test]
fn simulator_detects_broken_plans() {
    let t = coll_tag(1, 0);
    let send = |to| Step::new(4, t).src(Region::input(0)).send(to);
    let recv = |from, n| Step::new(n, t).recv(from).dst(Region::output(0));
    // Both wait for the other.
    let e = sim_error(vec![
        desc(vec![vec![recv(1, 4)]]),
        desc(vec![vec![recv(0, 4)]]),
    ]);
    assert!(
        e.contains("deadlock") && e.contains("rank 1 channel 0 step 0"),
        "{e}"
    );
    // Counts of a matched pair differ.
    let e = sim_error(vec![
        desc(vec![vec![send(1)]]),
        desc(vec![vec![recv(0, 5)]]),
    ]);
    assert!(e.contains("matching send carried 4"), "{e}");
    // A message nobody receives.
    let e = sim_error(vec![desc(vec![vec![send(1)]]), desc(vec![vec![]])]);
    assert!(e.contains("never received"), "{e}");
    // Partially overlapping src and dst.
    let bad = Step::new(4, t).src(Region::input(0)).dst(Region::input(2));
    assert!(sim_error(vec![desc(vec![vec![bad]])]).contains("overlap partially"));
    // Two channels writing the same memory.
    let w = Step::new(4, t).src(Region::input(0)).dst(Region::output(0));
    assert!(sim_error(vec![desc(vec![vec![w], vec![w]])]).contains("also uses"));
    // Out of bounds and empty steps.
    let oob = Step::new(4, t)
        .src(Region::input(14))
        .dst(Region::output(0));
    assert!(sim_error(vec![desc(vec![vec![oob]])]).contains("outside"));
    let empty = Step::new(0, t).src(Region::input(0)).dst(Region::output(0));
    assert!(sim_error(vec![desc(vec![vec![empty]])]).contains("moves nothing"));
    // Same tag on two channels: on a device each channel has its own FIFO, so the receiver's
    // channel 1 could take what the sender's channel 0 sent. The scheduler interleaves channels,
    // so some seed makes that happen, and the simulator must report it.
    let two = |off| Step::new(4, t).src(Region::input(off)).send(1);
    let take = |off| Step::new(4, t).recv(0).dst(Region::output(off));
    let mut caught = false;
    for seed in 0..64 {
        let descs = vec![
            desc(vec![vec![two(0)], vec![two(4)]]),
            desc(vec![vec![take(0)], vec![take(4)]]),
        ];
        let mut mems = vec![mem(16), mem(16)];
        for i in 0..16 {
            put(&mut mems[0].arena, 8, i, i);
        }
        if let Err(e) = run(&descs, &mut mems, seed) {
            assert!(e.contains("device FIFOs are per channel"), "{e}");
            caught = true;
        }
    }
    assert!(caught, "the scheduler never reordered two channels");
}

#[test]
fn huge_chunks_do_not_overflow() {
    for (kind, algo) in REDUCING {
        let c = Case {
            n: 16,
            count: 100,
            chunk: u64::MAX,
            nch: 2,
            ..Case::new(kind, algo)
        };
        run_case(&c, 11).unwrap_or_else(|e| panic!("{c:?}: {e}"));
    }
    // An empty group has no channels at all (empty channels are dropped).
    for split in [Split::No, Split::Unordered, Split::Ordered] {
        let shape = P2pShape {
            nchannels: 0,
            chunk_elems: u64::MAX,
            bytes_per_channel: 64 << 10,
            ll: P2pLl::default(),
            narrow_channels: 2,
            wide_min_bytes: u64::MAX,
        };
        let d = build_p2p(P2pGroup {
            rank: 0,
            nranks: 1,
            ops: &[],
            dtype: DataType::Int64,
            shape,
            split,
        });
        assert_eq!((d.channels.len(), d.step_count()), (0, 0));
    }
}

// ---------------------------------------------------------------------------------------------
// Zero-copy plans: the tuner's plan wrapped by `zero_copy::wrap`, on both branches.

const ZC_RANKS: [u32; 5] = [2, 3, 4, 8, 16];
const ZC_COUNTS: [u64; 4] = [1, 7, 1000, 4099];

/// Types and operators for the reducing kinds (integer Avg and inexact products are not
/// tested: their results depend on the order of combination, which differs between plans).
/// PreMulSum runs with the same scalar on every rank: a zero-copy reduction pre-scales the
/// inputs it reads from peers with its own scalar (see `zero_copy_premulsum_per_rank_scalars`).
const ZC_REDUCTIONS: [(DataType, Red); 20] = [
    (DataType::Int64, Red::Sum),
    (DataType::Int64, Red::Prod),
    (DataType::Int64, Red::Max),
    (DataType::Int64, Red::Min),
    (DataType::Uint64, Red::Sum),
    (DataType::Float64, Red::Sum),
    (DataType::Float64, Red::Avg),
    (DataType::Float64, Red::PreMulSumSame),
    (DataType::Float32, Red::Sum),
    (DataType::Float32, Red::Max),
    (DataType::Float32, Red::Avg),
    (DataType::Float32, Red::PreMulSumSame),
    (DataType::Int8, Red::Sum),
    (DataType::Int8, Red::Prod),
    (DataType::Int8, Red::Max),
    (DataType::Int8, Red::Min),
    (DataType::Bfloat16, Red::Sum),
    (DataType::Bfloat16, Red::Min),
    (DataType::Bfloat16, Red::Avg),
    (DataType::Bfloat16, Red::PreMulSumSame),
];

/// Types for the kinds that only copy (every element size, so every grain and table length).
const ZC_COPIES: [(DataType, Red); 5] = [
    (DataType::Int64, Red::Sum),
    (DataType::Float64, Red::Sum),
    (DataType::Float32, Red::Sum),
    (DataType::Bfloat16, Red::Sum),
    (DataType::Int8, Red::Sum),
];

/// Every rank count and count, in place and out of place, with all ranks exposed and with one
/// rank hidden; the channels, chunk, root and hidden rank rotate. The fallback plan is built
/// with every algorithm the kind has among Ring and Direct, each for every case (`all_algos`),
/// or in turn (to keep the sweeps over types and operators short).
fn zc_sweep(kind: CollKind, dtype: DataType, red: Red, all_algos: bool) -> Vec<Case> {
    let mut v = Vec::new();
    let mut i = 0u32;
    let algos: Vec<Algorithm> = algorithms_for(kind)
        .iter()
        .copied()
        .filter(|a| matches!(a, Algorithm::Ring | Algorithm::Direct))
        .collect();
    let rounds = if all_algos { algos.len() } else { 1 };
    for round in 0..rounds {
        for n in ZC_RANKS {
            for count in ZC_COUNTS {
                for inplace in [false, true] {
                    for hidden in [false, true] {
                        i += 1;
                        let algo = algos[(round + i as usize / 2) % algos.len()];
                        v.push(Case {
                            n,
                            count,
                            inplace,
                            nch: 1 + i % 3,
                            chunk: [16, 64, 1000][(i / 3 % 3) as usize],
                            root: i * 7 % n,
                            dtype,
                            red,
                            zc: if hidden {
                                Zc::Hidden(i / 2 % n)
                            } else {
                                Zc::Exposed
                            },
                            ..Case::new(kind, algo)
                        });
                    }
                }
            }
        }
    }
    v
}

fn check_zero_copy(kind: CollKind) {
    let types: &[(DataType, Red)] = if reduces(kind) {
        &ZC_REDUCTIONS
    } else {
        &ZC_COPIES
    };
    check_all(
        types
            .iter()
            .enumerate()
            .flat_map(|(j, &(dtype, red))| zc_sweep(kind, dtype, red, j == 0)),
    );
}

macro_rules! zero_copy_tests {
    ($($name:ident: $kind:ident;)*) => {
        $(
            #[test]
            fn $name() {
                check_zero_copy(CollKind::$kind);
            }
        )*
        /// The kinds the tests above cover.
        const ZC_TESTED: &[CollKind] = &[$(CollKind::$kind),*];
    };
}

zero_copy_tests! {
    zero_copy_all_reduce: AllReduce;
    zero_copy_reduce_scatter: ReduceScatter;
    zero_copy_reduce: Reduce;
    zero_copy_all_gather: AllGather;
    zero_copy_broadcast: Broadcast;
    zero_copy_gather: Gather;
    zero_copy_scatter: Scatter;
    zero_copy_all_to_all: AllToAll;
}

#[test]
fn zero_copy_tests_cover_every_supported_kind() {
    for kind in crate::plan::tuner::KINDS {
        assert_eq!(
            zero_copy::supports(kind),
            ZC_TESTED.contains(&kind),
            "{kind:?}"
        );
    }
}

/// A hand-written two-rank zero-copy AllReduce of 4 Int64 elements checks the simulator's
/// model itself: table exchange, branch choice from both exposed flags, direct reads, tokens.
fn tiny_zero_copy(rank: u32, exposed: bool) -> WorkDesc {
    let t = coll_tag(5, 0);
    let peer = 1 - rank;
    let mut publish = Step::new(3, t).send(peer).ll();
    publish.publish = true;
    let mut learn = Step::new(3, t).recv(peer).ll();
    learn.learn = true;
    let mut token = Step::new(1, t).send(peer).ll().on(Path::ZeroCopy);
    token.publish = true;
    token.fence = true;
    let mut d = desc(vec![vec![
        publish,
        learn,
        Step::new(4, t)
            .read_peer(peer, Region::input(0))
            .own(Region::input(0))
            .dst(Region::output(0))
            .on(Path::ZeroCopy),
        token,
        Step::new(1, t).recv(peer).ll().on(Path::ZeroCopy),
        Step::new(4, t)
            .src(Region::input(0))
            .send(peer)
            .on(Path::Fallback),
        Step::new(4, t)
            .recv(peer)
            .own(Region::input(0))
            .dst(Region::output(0))
            .on(Path::Fallback),
    ]]);
    d.exposed = exposed;
    d
}

fn tiny_mems() -> Vec<RankMem> {
    (0..2u64)
        .map(|r| {
            let mut m = mem(16);
            for i in 0..16 {
                put(&mut m.arena, 8, i, 100 * r + i);
            }
            m
        })
        .collect()
}

#[test]
fn simulator_runs_zero_copy_branches() {
    for (e0, e1) in [(true, true), (true, false), (false, true), (false, false)] {
        for seed in 0..16 {
            let descs = vec![tiny_zero_copy(0, e0), tiny_zero_copy(1, e1)];
            let mut mems = tiny_mems();
            let st = run(&descs, &mut mems, seed).unwrap_or_else(|e| panic!("{e0} {e1}: {e}"));
            let zc = e0 && e1;
            // Both ranks take the branch only both exposed flags allow: the flag travels.
            assert_eq!(
                (st.zero_copy_lanes, st.fallback_lanes),
                if zc { (2, 0) } else { (0, 2) }
            );
            // Tables and tokens, or tables and data, are messages; the zero-copy read is not.
            assert_eq!((st.direct, st.messages), if zc { (2, 4) } else { (0, 4) });
            assert_eq!(st.skipped, if zc { 4 } else { 6 });
            for m in &mems {
                for i in 0..4 {
                    assert_eq!(get(&m.arena, 8, 16 + i), i + (100 + i));
                }
            }
        }
    }
}

/// The case the broken zero-copy plans below start from.
fn zc_base(zc: Zc) -> Case {
    Case {
        n: 4,
        count: 1000,
        nch: 2,
        dtype: DataType::Float64,
        red: Red::PreMulSumSame,
        zc,
        ..Case::new(CollKind::AllReduce, Algorithm::Direct)
    }
}

/// Runs `descs` on `c` under several seeds; returns the errors (the plan must never pass).
fn zc_errors(c: &Case, descs: &[WorkDesc]) -> Vec<String> {
    (0..32)
        .map(|seed| {
            run_plans(c, descs, seed)
                .err()
                .unwrap_or_else(|| panic!("a broken plan passed with seed {seed}"))
        })
        .collect()
}

/// Applies `f` to every step of every rank's plan.
fn edit(descs: &mut [WorkDesc], f: impl Fn(u32, &mut Step)) {
    for (r, d) in descs.iter_mut().enumerate() {
        for s in d.channels.iter_mut().flat_map(|c| c.steps.iter_mut()) {
            f(r as u32, s);
        }
    }
}

#[test]
fn simulator_detects_broken_zero_copy_plans() {
    let c = zc_base(Zc::Exposed);
    let good = plans(&c).unwrap();
    run_plans(&c, &good, 1).expect("the unbroken plan runs");

    // The peer's input without its pre-scale: wrong results.
    let mut d = good.clone();
    edit(&mut d, |_, s| s.pre_recv = false);
    assert!(
        zc_errors(&c, &d)
            .iter()
            .all(|e| e.contains("wrong elements"))
    );

    // No token exchange at the end: a rank's channel returns while peers still write its
    // output; the interleaving exposes it under some seed, and no seed may pass.
    let mut d = good.clone();
    for ch in d.iter_mut().flat_map(|d| d.channels.iter_mut()) {
        ch.steps
            .retain(|s| !(s.path == Path::ZeroCopy && s.src.is_none() && s.peer_src.is_none()));
    }
    let errs: Vec<String> = (0..64)
        .filter_map(|seed| run_plans(&c, &d, seed).err())
        .collect();
    assert!(
        errs.iter().any(|e| e.contains("missing synchronisation")),
        "{errs:?}"
    );

    // A zero-copy step before the table exchange.
    let mut d = good.clone();
    let steps = &mut d[1].channels[0].steps;
    let first = steps.iter().position(|s| s.path == Path::ZeroCopy).unwrap();
    let s = steps.remove(first);
    steps.insert(0, s);
    assert!(
        zc_errors(&c, &d)
            .iter()
            .all(|e| e.contains("rank 1 channel 0 step 0") && e.contains("before learning"))
    );

    // Rank 2 does not learn rank 0's table (and rank 0 does not send it): it cannot choose.
    let mut d = good.clone();
    d[2].channels[0]
        .steps
        .retain(|s| !(s.learn && s.recv == Some(0)));
    d[0].channels[0]
        .steps
        .retain(|s| !(s.publish && s.path == Path::Always && s.send == Some(2)));
    assert!(zc_errors(&c, &d).iter().all(|e| e.contains("ranks [0]")));

    // Rank 0 runs its zero-copy steps although rank 1 did not expose its buffers.
    let c = zc_base(Zc::Hidden(1));
    let mut d = plans(&c).unwrap();
    run_plans(&c, &d, 1).expect("the unbroken plan falls back");
    edit(&mut d, |r, s| {
        if r == 0 && s.path == Path::ZeroCopy && (s.peer_src.is_some() || s.peer_dst.is_some()) {
            s.path = Path::Always;
        }
    });
    assert!(
        zc_errors(&c, &d)
            .iter()
            .all(|e| e.contains("rank 1 did not expose"))
    );

    // Channel 1 of rank 0 writes into the part of rank 1's output that channel 0 owns.
    let c = Case {
        kind: CollKind::AllGather,
        ..zc_base(Zc::Exposed)
    };
    let mut d = plans(&c).unwrap();
    run_plans(&c, &d, 1).expect("the unbroken plan runs");
    let s = d[0].channels[1]
        .steps
        .iter_mut()
        .find(|s| s.send == Some(1) && s.peer_dst.is_some())
        .unwrap();
    s.peer_dst = Some(Region::output(0));
    let e = run_plans(&c, &d, 1).unwrap_err();
    assert!(
        e.contains("rank 1: channel") && e.contains("also uses"),
        "{e}"
    );

    // Tables are not data, and data is not a table.
    let two = |rank| {
        let mut d = tiny_zero_copy(rank, true);
        d.channels[0].steps[1].learn = false;
        d.channels[0].steps[1].dst = Some(Region::output(8));
        d
    };
    let mut mems = tiny_mems();
    let e = run(&[two(0), two(1)], &mut mems, 1).unwrap_err();
    assert!(e.contains("buffer table as data"), "{e}");
    let bare = |rank| {
        let mut d = tiny_zero_copy(rank, true);
        d.channels[0].steps[0].publish = false;
        d.channels[0].steps[0].src = Some(Region::input(8));
        d
    };
    let mut mems = tiny_mems();
    let e = run(&[bare(0), bare(1)], &mut mems, 1).unwrap_err();
    assert!(
        e.contains("rank 1 sent data") || e.contains("rank 0 sent data"),
        "{e}"
    );
}

/// Per-rank PreMulSum scalars on the fallback branch (the zero-copy branch: see below).
#[test]
fn zero_copy_premulsum_per_rank_scalars_fallback() {
    for kind in [
        CollKind::AllReduce,
        CollKind::ReduceScatter,
        CollKind::Reduce,
    ] {
        check_all(
            zc_sweep(kind, DataType::Float64, Red::PreMulSum, true)
                .into_iter()
                .filter(|c| c.zc != Zc::Exposed),
        );
    }
}

/// NCCL lets every rank give its own PreMulSum scalar, applied to its own input. The zero-copy
/// branch scales the inputs a rank reads from its peers (`pre_recv`) with the reading rank's
/// scalar, so with per-rank scalars it would compute `sum_p s_r * x_p` for the piece rank `r`
/// owns: the communicator never offers PreMulSum to `zero_copy` (`zero_copy::handles`), and this
/// shows why that matters: the zero-copy branch gets such a case wrong.
#[test]
fn zero_copy_premulsum_per_rank_scalars() {
    let req = |red: Reduction| CollRequest {
        kind: CollKind::AllReduce,
        rank: 0,
        nranks: 2,
        count: 8,
        root: 0,
        layout: None,
        dtype: DataType::Float64,
        reduction: red,
        seq: 0,
        algo: Algorithm::Direct,
        proto: Protocol::Simple,
        nchannels: 1,
        chunk_elems: 8,
        hosts: None,
    };
    assert!(zero_copy::handles(&req(Reduction::none())));
    let premul = Reduction::lower(
        RedOp::PreMulSum(ScalarSource::Immediate(Scalar::from_bytes(
            &0.5f64.to_le_bytes(),
        ))),
        2,
    );
    assert!(!zero_copy::handles(&req(premul)));
    for kind in [
        CollKind::AllReduce,
        CollKind::ReduceScatter,
        CollKind::Reduce,
    ] {
        let failures = zc_sweep(kind, DataType::Float64, Red::PreMulSum, true)
            .into_iter()
            .filter(|c| c.zc == Zc::Exposed)
            .filter(|c| run_case(c, 1).is_err())
            .count();
        assert!(
            failures > 0,
            "{kind:?}: per-rank scalars should break the zero-copy branch"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Scatter, Gather and AlltoAll with this rank's own block copied in channels of its own.

#[test]
fn own_block_copies_apart() {
    let mut seed = 1300;
    for kind in [CollKind::Scatter, CollKind::Gather, CollKind::AllToAll] {
        for n in RANKS {
            for count in [0, 1, 7, 1000] {
                for (nch, chunk) in [(1, 7), (2, 64), (3, 100_000)] {
                    for inplace in [false, true] {
                        for root in [0, n - 1] {
                            let c = Case {
                                n,
                                count,
                                nch,
                                chunk,
                                inplace,
                                root,
                                ..Case::new(kind, Algorithm::Direct)
                            };
                            let base = plans(&c).unwrap_or_else(|e| panic!("{c:?}: {e}"));
                            // Every rank, and every other rank (each rank chooses alone).
                            for every in [1, 2] {
                                seed += 1;
                                let mut descs = base.clone();
                                for (r, d) in descs.iter_mut().enumerate().step_by(every) {
                                    let before = d.channels.len();
                                    let copies = kind == CollKind::AllToAll || r as u32 == root;
                                    let moved = local_copies_apart(d);
                                    assert_eq!(moved, copies && count > 0, "{c:?} rank {r}");
                                    for ch in &d.channels[before..] {
                                        assert!(
                                            ch.steps
                                                .iter()
                                                .all(|s| s.send.is_none() && s.recv.is_none()),
                                            "{c:?}: {ch:?}"
                                        );
                                    }
                                    // AlltoAll may split directions on top (in place: ordered).
                                    if kind == CollKind::AllToAll && every == 1 {
                                        let order = inplace.then_some(r as u32);
                                        assert!(split_directions(d, order), "{c:?}");
                                    }
                                }
                                run_plans(&c, &descs, seed)
                                    .unwrap_or_else(|e| panic!("{c:?}: {e}"));
                            }
                        }
                    }
                }
            }
        }
    }
    // A plan whose channels already name their FIFO indices is left as it is.
    let c = Case {
        n: 3,
        count: 100,
        ..Case::new(CollKind::AllToAll, Algorithm::Direct)
    };
    let mut d = plans(&c).expect("alltoall plan").remove(1);
    assert!(split_directions(&mut d, None));
    let before = d.clone();
    assert!(!local_copies_apart(&mut d));
    assert_eq!(d, before);
}

// ---------------------------------------------------------------------------------------------
// AlltoAll with each channel's sends and receives in channels of their own.

#[test]
fn all_to_all_split_directions() {
    let mut seed = 300;
    for n in RANKS {
        for count in [0, 1, 7, 1000] {
            for (nch, chunk) in [(1, 7), (2, 64), (3, 100_000)] {
                let c = Case {
                    n,
                    count,
                    nch,
                    chunk,
                    ..Case::new(CollKind::AllToAll, Algorithm::Direct)
                };
                let base = plans(&c).unwrap_or_else(|e| panic!("{c:?}: {e}"));
                // Every rank split, and every other rank (each rank chooses for itself).
                for every in [1, 2] {
                    seed += 1;
                    let mut descs = base.clone();
                    for d in descs.iter_mut().step_by(every) {
                        assert!(split_directions(d, None), "{c:?}");
                        for ch in &d.channels {
                            let sends = ch.steps.iter().any(|s| s.send.is_some());
                            let recvs = ch.steps.iter().any(|s| s.recv.is_some());
                            assert!(!(sends && recvs), "{c:?}: {ch:?}");
                        }
                    }
                    run_plans(&c, &descs, seed).unwrap_or_else(|e| panic!("{c:?}: {e}"));
                }
            }
        }
    }
    // A plan whose steps receive and send at once keeps its channels.
    let c = Case {
        n: 4,
        count: 100,
        ..Case::new(CollKind::AllReduce, Algorithm::Ring)
    };
    let mut d = plans(&c).expect("ring plan").remove(1);
    let before = d.clone();
    assert!(!split_directions(&mut d, None));
    assert_eq!(d, before);
}

/// In place, the split AlltoAll keeps each receive behind the sends before it (order tokens),
/// on every rank or every other; without the tokens some interleaving overwrites a block before
/// it is sent, which the simulation sees.
#[test]
fn in_place_all_to_all_split_keeps_receives_behind_sends() {
    let mut seed = 900;
    let mut unordered_failed = false;
    for n in [2, 3, 4, 8] {
        for count in [1, 7, 1000] {
            for (nch, chunk) in [(1, 7), (2, 64), (3, 100_000)] {
                let c = Case {
                    n,
                    count,
                    nch,
                    chunk,
                    inplace: true,
                    ..Case::new(CollKind::AllToAll, Algorithm::Direct)
                };
                let base = plans(&c).unwrap_or_else(|e| panic!("{c:?}: {e}"));
                for every in [1, 2] {
                    seed += 1;
                    let mut descs = base.clone();
                    for (r, d) in descs.iter_mut().enumerate().step_by(every) {
                        assert!(split_directions(d, Some(r as u32)), "{c:?}");
                    }
                    run_plans(&c, &descs, seed).unwrap_or_else(|e| panic!("{c:?}: {e}"));
                }
                let mut unordered = base.clone();
                for d in &mut unordered {
                    split_directions(d, None);
                }
                unordered_failed |= (0..8).any(|k| run_plans(&c, &unordered, seed + k).is_err());
            }
        }
    }
    assert!(
        unordered_failed,
        "the simulation never caught an unordered in-place split"
    );
}
