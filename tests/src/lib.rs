//! Shared by the integration tests, the worker processes and the benchmark: deterministic
//! inputs, an independent reference for every operation, and an element-by-element check.
//!
//! Inputs are chosen per type and operator so that every partial result is exactly
//! representable; the reference is computed in f64/i128 straight from the inputs, so results
//! are compared bit for bit (Avg on floating types allows the one rounding of its division).

pub mod check_device;
pub mod cudart;
pub mod harness;
pub mod misuse;
pub mod misuse_memcheck;
pub mod nccl_lib;
pub mod safe;
pub mod suite;

use oxccl_core::datatype::{DataType, RedOp, Scalar, ScalarSource};
use oxccl_core::plan::{AllToAllvLayout, CollKind};
use oxccl_core::reduce::{load_f64, store_f64};

/// Byte written into outputs before every run, so untouched elements are detected.
pub const POISON: u8 = 0xA5;

/// The reduction under test, without handles (PreMulSum carries its scalar value).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TestOp {
    /// Sum.
    Sum,
    /// Product.
    Prod,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
    /// Average.
    Avg,
    /// PreMulSum with the scalar 2.
    PreMulSum,
}

impl TestOp {
    /// Every operator.
    pub const ALL: [TestOp; 6] = [
        TestOp::Sum,
        TestOp::Prod,
        TestOp::Max,
        TestOp::Min,
        TestOp::Avg,
        TestOp::PreMulSum,
    ];

    /// The PreMulSum scalar used by the tests, as one element of `dtype`.
    pub fn scalar(dtype: DataType) -> Scalar {
        let mut b = [0u8; 8];
        store_f64(dtype, &mut b, 0, 2.0);
        Scalar::from_bytes(&b[..dtype.size()])
    }

    /// The core operator (PreMulSum with an immediate scalar).
    pub fn red_op(self, dtype: DataType) -> RedOp {
        match self {
            TestOp::Sum => RedOp::Sum,
            TestOp::Prod => RedOp::Prod,
            TestOp::Max => RedOp::Max,
            TestOp::Min => RedOp::Min,
            TestOp::Avg => RedOp::Avg,
            TestOp::PreMulSum => RedOp::PreMulSum(ScalarSource::Immediate(TestOp::scalar(dtype))),
        }
    }
}

fn is_fp8(t: DataType) -> bool {
    matches!(t, DataType::Float8E4M3 | DataType::Float8E5M2)
}

fn is_unsigned(t: DataType) -> bool {
    matches!(t, DataType::Uint8 | DataType::Uint32 | DataType::Uint64)
}

/// Largest integer magnitude the type holds exactly with room for small sums.
fn exact_range(t: DataType) -> u64 {
    match t {
        DataType::Float8E4M3 => 16,
        DataType::Float8E5M2 => 8,
        DataType::Bfloat16 => 256,
        DataType::Float16 => 2048,
        DataType::Int8 | DataType::Uint8 => 128,
        _ => 1 << 24,
    }
}

/// The `NCCL_HOSTID` a test launcher gives worker `rank` of `nranks` under `OXCCL_TEST_HOSTS`
/// ([`host_id_for`]), so that processes of one machine reach each other only over the network,
/// as NVIDIA's NCCL does under the same variable. `None` without the variable.
pub fn test_host_id(rank: usize, nranks: usize) -> Option<String> {
    let spec = oxccl_core::config::get(&oxccl_core::config::vars::OXCCL_TEST_HOSTS)?;
    host_id_for(&spec, rank, nranks)
}

/// The host id of worker `rank` of `nranks` under the host spec `K` (the ranks cut into K
/// contiguous "hosts"; K = nranks: every rank its own host) or `Kr` (round robin: rank r on
/// host r % K, so hosts' ranks are not numbered together). `None` for a malformed spec.
pub fn host_id_for(spec: &str, rank: usize, nranks: usize) -> Option<String> {
    let spec = spec.trim();
    let (k, round_robin) = match spec.strip_suffix('r') {
        Some(k) => (k, true),
        None => (spec, false),
    };
    let hosts = k.parse::<usize>().ok()?.clamp(1, nranks.max(1));
    let host = if round_robin {
        rank % hosts
    } else {
        rank * hosts / nranks.max(1)
    };
    Some(format!("oxccl-test-host{host}"))
}

/// Sets `NCCL_HOSTID` on `cmd` for worker `rank` of `nranks` as [`test_host_id`] says.
pub fn apply_test_host(cmd: &mut std::process::Command, rank: usize, nranks: usize) {
    if let Some(id) = test_host_id(rank, nranks) {
        cmd.env("NCCL_HOSTID", id);
    }
}

/// Input element `i` of `rank` for an operation reducing with `op` (None: data movement only).
pub fn input_value(dtype: DataType, op: Option<TestOp>, rank: usize, i: usize) -> f64 {
    let (r, i) = (rank as u64, i as u64);
    match op {
        None => {
            let m = exact_range(dtype);
            let h = (r * 1_000_003 + i * 7919 + (i >> 7) * 31) % m;
            h as f64
        }
        Some(TestOp::Sum | TestOp::Avg | TestOp::PreMulSum) => {
            if is_fp8(dtype) {
                f64::from(u8::from((r + i) % 4 == 0))
            } else if is_unsigned(dtype) {
                ((r * 7 + i * 3) % 5) as f64
            } else {
                ((r * 7 + i * 3) % 5) as f64 - 2.0
            }
        }
        Some(TestOp::Prod) => {
            if (r + i) % 8 == 0 {
                2.0
            } else if (r + 2 * i) % 5 == 0 {
                if is_unsigned(dtype) { 3.0 } else { -1.0 }
            } else {
                1.0
            }
        }
        Some(TestOp::Max | TestOp::Min) => {
            let v = ((r * 13 + i * 7) % 11) as f64;
            if is_unsigned(dtype) { v } else { v - 5.0 }
        }
    }
}

/// Fills `buf` (whole elements of `dtype`) with `rank`'s input, starting at element `first`.
pub fn fill_input(dtype: DataType, op: Option<TestOp>, rank: usize, first: usize, buf: &mut [u8]) {
    for k in 0..buf.len() / dtype.size() {
        store_f64(dtype, buf, k, input_value(dtype, op, rank, first + k));
    }
}

fn wrap(dtype: DataType, v: i128) -> f64 {
    let bits = dtype.size() as u32 * 8;
    let m = v.rem_euclid(1i128 << bits);
    let signed = !is_unsigned(dtype);
    let w = if signed && m >= 1i128 << (bits - 1) {
        m - (1i128 << bits)
    } else {
        m
    };
    w as f64
}

/// The reduction of every rank's element `i`, computed independently of oxccl's arithmetic.
pub fn reduce_ref(dtype: DataType, op: TestOp, nranks: usize, i: usize) -> f64 {
    let vals: Vec<f64> = (0..nranks)
        .map(|r| input_value(dtype, Some(op), r, i))
        .collect();
    if dtype.is_float() {
        return match op {
            TestOp::Sum => vals.iter().sum(),
            TestOp::Avg => vals.iter().sum::<f64>() / nranks as f64,
            TestOp::PreMulSum => vals.iter().map(|v| v * 2.0).sum(),
            TestOp::Prod => vals.iter().product(),
            TestOp::Max => vals.iter().cloned().fold(f64::MIN, f64::max),
            TestOp::Min => vals.iter().cloned().fold(f64::MAX, f64::min),
        };
    }
    let ints: Vec<i128> = vals.iter().map(|&v| v as i128).collect();
    match op {
        TestOp::Sum => wrap(dtype, ints.iter().sum()),
        TestOp::PreMulSum => wrap(dtype, ints.iter().map(|v| wrap(dtype, v * 2) as i128).sum()),
        TestOp::Avg => {
            let s = wrap(dtype, ints.iter().sum()) as i128;
            (s / nranks as i128) as f64
        }
        TestOp::Prod => {
            let mut acc: i128 = 1;
            for v in &ints {
                acc = wrap(dtype, acc * v) as i128;
            }
            acc as f64
        }
        TestOp::Max => *ints.iter().max().expect("nranks >= 1") as f64,
        TestOp::Min => *ints.iter().min().expect("nranks >= 1") as f64,
    }
}

/// One collective as a test case on one rank.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    /// The operation.
    pub kind: CollKind,
    /// Element type.
    pub dtype: DataType,
    /// Reduction (reducing operations only).
    pub op: Option<TestOp>,
    /// The API's count argument.
    pub count: usize,
    /// Root rank.
    pub root: usize,
    /// Input and output alias as NCCL's in-place convention for the operation says.
    pub in_place: bool,
}

/// Per-peer counts of the AlltoAllv cases: rank `from` sends `c(from, to)` elements to `to`.
pub fn alltoallv_count(base: usize, from: usize, to: usize) -> usize {
    if base == 0 {
        0
    } else {
        base + (from * 3 + to * 5) % 4
    }
}

/// The AlltoAllv layout of `rank` for a per-pair base count (displacements are packed with a gap).
pub fn alltoallv_layout(base: usize, nranks: usize, rank: usize) -> AllToAllvLayout {
    let mut l = AllToAllvLayout::default();
    let (mut s, mut r) = (0u64, 0u64);
    for p in 0..nranks {
        let sc = alltoallv_count(base, rank, p) as u64;
        let rc = alltoallv_count(base, p, rank) as u64;
        l.send_counts.push(sc);
        l.send_displs.push(s);
        l.recv_counts.push(rc);
        l.recv_displs.push(r);
        s += sc + 1;
        r += rc + 1;
    }
    l
}

impl Case {
    /// Elements of the send and receive buffers of `rank`.
    pub fn sizes(&self, nranks: usize, rank: usize) -> (usize, usize) {
        let (c, n) = (self.count, nranks);
        match self.kind {
            CollKind::AllReduce | CollKind::Broadcast | CollKind::Reduce => (c, c),
            CollKind::AllGather => (c, c * n),
            CollKind::ReduceScatter => (c * n, c),
            CollKind::AllToAll => (c * n, c * n),
            CollKind::Gather => (c, c * n),
            CollKind::Scatter => (c * n, c),
            CollKind::AllToAllv => {
                let l = alltoallv_layout(c, n, rank);
                let end = |cs: &[u64], ds: &[u64]| {
                    cs.iter()
                        .zip(ds)
                        .map(|(c, d)| (c + d) as usize)
                        .max()
                        .unwrap_or(0)
                };
                (
                    end(&l.send_counts, &l.send_displs),
                    end(&l.recv_counts, &l.recv_displs),
                )
            }
            CollKind::SendRecv => (c, c),
        }
    }

    /// Element offset of the input inside the output for in-place runs (None: same start).
    pub fn in_place_offset(&self, rank: usize) -> usize {
        match self.kind {
            CollKind::AllGather => rank * self.count,
            CollKind::Gather => self.root * self.count,
            _ => 0,
        }
    }

    /// The expected output of `rank` (None where the output is unspecified, e.g. Reduce on a
    /// non-root); elements outside any received block stay poison.
    pub fn expected(&self, nranks: usize, rank: usize) -> Option<Vec<u8>> {
        let t = self.dtype;
        let (_, out_elems) = self.sizes(nranks, rank);
        let mut out = vec![POISON; out_elems * t.size()];
        let c = self.count;
        let data = |r: usize, i: usize| input_value(t, self.op, r, i);
        let put = |out: &mut [u8], k: usize, v: f64| store_f64(t, out, k, v);
        match self.kind {
            CollKind::AllReduce => {
                for i in 0..c {
                    put(&mut out, i, reduce_ref(t, self.op?, nranks, i));
                }
            }
            CollKind::Reduce => {
                if rank != self.root {
                    return None;
                }
                for i in 0..c {
                    put(&mut out, i, reduce_ref(t, self.op?, nranks, i));
                }
            }
            CollKind::Broadcast => (0..c).for_each(|i| put(&mut out, i, data(self.root, i))),
            CollKind::AllGather => {
                for r in 0..nranks {
                    (0..c).for_each(|i| put(&mut out, r * c + i, data(r, i)));
                }
            }
            CollKind::ReduceScatter => {
                for i in 0..c {
                    put(&mut out, i, reduce_ref(t, self.op?, nranks, rank * c + i));
                }
            }
            CollKind::AllToAll => {
                for p in 0..nranks {
                    (0..c).for_each(|i| put(&mut out, p * c + i, data(p, rank * c + i)));
                }
            }
            CollKind::Gather => {
                if rank != self.root {
                    return None;
                }
                for r in 0..nranks {
                    (0..c).for_each(|i| put(&mut out, r * c + i, data(r, i)));
                }
            }
            CollKind::Scatter => {
                (0..c).for_each(|i| put(&mut out, i, data(self.root, rank * c + i)))
            }
            CollKind::AllToAllv => {
                let mine = alltoallv_layout(c, nranks, rank);
                for p in 0..nranks {
                    let theirs = alltoallv_layout(c, nranks, p);
                    let n = mine.recv_counts[p] as usize;
                    let src = theirs.send_displs[rank] as usize;
                    let dst = mine.recv_displs[p] as usize;
                    (0..n).for_each(|i| put(&mut out, dst + i, data(p, src + i)));
                }
            }
            CollKind::SendRecv => return None,
        }
        Some(out)
    }
}

/// Counts elements of `got` that differ from `want` (Avg on floats allows one rounding step).
pub fn count_wrong(dtype: DataType, op: Option<TestOp>, got: &[u8], want: &[u8]) -> usize {
    let es = dtype.size();
    let lenient = op == Some(TestOp::Avg) && dtype.is_float();
    let eps = match dtype {
        DataType::Float8E5M2 => 0.25,
        DataType::Float8E4M3 => 0.125,
        DataType::Bfloat16 => 1.0 / 128.0,
        DataType::Float16 => 1.0 / 1024.0,
        DataType::Float32 => 1.0 / 8_388_608.0,
        _ => 1e-15,
    };
    (0..got.len() / es)
        .filter(|&k| {
            let (g, w) = (&got[k * es..(k + 1) * es], &want[k * es..(k + 1) * es]);
            if g == w {
                return false;
            }
            if !lenient || w.iter().all(|&b| b == POISON) {
                return true;
            }
            let (gv, wv) = (load_f64(dtype, got, k), load_f64(dtype, want, k));
            // A NaN is never close.
            let close = (gv - wv).abs() <= eps * wv.abs().max(1e-30) * 1.01;
            !close
        })
        .count()
}

/// [`reduce_ref`] without its per-call allocation (for references over hundreds of millions of
/// elements); returns bit-identical results (tested against `reduce_ref`).
pub fn reduce_ref_fast(dtype: DataType, op: TestOp, nranks: usize, i: usize) -> f64 {
    const MAX: usize = 64;
    if nranks == 0 || nranks > MAX {
        return reduce_ref(dtype, op, nranks, i);
    }
    let mut buf = [0f64; MAX];
    for (r, v) in buf[..nranks].iter_mut().enumerate() {
        *v = input_value(dtype, Some(op), r, i);
    }
    let vals = &buf[..nranks];
    if dtype.is_float() {
        return match op {
            TestOp::Sum => vals.iter().sum(),
            TestOp::Avg => vals.iter().sum::<f64>() / nranks as f64,
            TestOp::PreMulSum => vals.iter().map(|v| v * 2.0).sum(),
            TestOp::Prod => vals.iter().product(),
            TestOp::Max => vals.iter().cloned().fold(f64::MIN, f64::max),
            TestOp::Min => vals.iter().cloned().fold(f64::MAX, f64::min),
        };
    }
    let ints = vals.iter().map(|&v| v as i128);
    match op {
        TestOp::Sum => wrap(dtype, ints.sum()),
        TestOp::PreMulSum => wrap(dtype, ints.map(|v| wrap(dtype, v * 2) as i128).sum()),
        TestOp::Avg => {
            let s = wrap(dtype, ints.sum()) as i128;
            (s / nranks as i128) as f64
        }
        TestOp::Prod => {
            let mut acc: i128 = 1;
            for v in ints {
                acc = wrap(dtype, acc * v) as i128;
            }
            acc as f64
        }
        TestOp::Max => ints.max().expect("nranks >= 1") as f64,
        TestOp::Min => ints.min().expect("nranks >= 1") as f64,
    }
}

impl Case {
    /// Writes output elements `first..first + out.len() / size` of what [`Case::expected`]
    /// returns into `out`, without building the whole output (for outputs of gigabytes, checked
    /// chunk by chunk). Returns false, writing nothing, where `expected` returns None.
    pub fn expected_into(&self, nranks: usize, rank: usize, first: usize, out: &mut [u8]) -> bool {
        let t = self.dtype;
        let es = t.size();
        let len = out.len() / es;
        let c = self.count;
        let op = self.op;
        let data = |r: usize, i: usize| input_value(t, op, r, i);
        let mut fill = |f: &dyn Fn(usize) -> f64| {
            for j in 0..len {
                store_f64(t, out, j, f(first + j));
            }
        };
        match self.kind {
            CollKind::AllReduce => {
                let Some(op) = op else { return false };
                fill(&|k| reduce_ref_fast(t, op, nranks, k));
            }
            CollKind::Reduce => {
                let Some(op) = op else { return false };
                if rank != self.root {
                    return false;
                }
                fill(&|k| reduce_ref_fast(t, op, nranks, k));
            }
            CollKind::Broadcast => fill(&|k| data(self.root, k)),
            CollKind::AllGather => fill(&|k| data(k / c, k % c)),
            CollKind::ReduceScatter => {
                let Some(op) = op else { return false };
                fill(&|k| reduce_ref_fast(t, op, nranks, rank * c + k));
            }
            CollKind::AllToAll => fill(&|k| data(k / c, rank * c + k % c)),
            CollKind::Gather => {
                if rank != self.root {
                    return false;
                }
                fill(&|k| data(k / c, k % c));
            }
            CollKind::Scatter => fill(&|k| data(self.root, rank * c + k)),
            CollKind::AllToAllv => {
                out[..len * es].fill(POISON);
                let mine = alltoallv_layout(c, nranks, rank);
                for p in 0..nranks {
                    let theirs = alltoallv_layout(c, nranks, p);
                    let n = mine.recv_counts[p] as usize;
                    let src = theirs.send_displs[rank] as usize;
                    let dst = mine.recv_displs[p] as usize;
                    let (lo, hi) = (dst.max(first), (dst + n).min(first + len));
                    for k in lo..hi {
                        store_f64(t, out, k - first, data(p, src + k - dst));
                    }
                }
            }
            CollKind::SendRecv => return false,
        }
        true
    }
}

#[cfg(test)]
mod fast_reference_tests {
    use super::*;

    #[test]
    fn reduce_ref_fast_is_bit_identical() {
        for &t in &DataType::ALL {
            for op in TestOp::ALL {
                for n in 1..=9 {
                    for i in 0..600 {
                        let (a, b) = (reduce_ref(t, op, n, i), reduce_ref_fast(t, op, n, i));
                        assert_eq!(a.to_bits(), b.to_bits(), "{t:?} {op:?} n={n} i={i}");
                    }
                }
            }
        }
    }

    #[test]
    fn expected_into_matches_expected_at_any_split() {
        for n in 1..=4 {
            for case in crate::suite::full_matrix(n, &[0, 1, 7, 33], &DataType::ALL) {
                for rank in 0..n {
                    let es = case.dtype.size();
                    let want = case.expected(n, rank);
                    let total = case.sizes(n, rank).1;
                    for cut in [0, 1, total / 3, total] {
                        let cut = cut.min(total);
                        let mut got = vec![0u8; total * es];
                        let (a, b) = got.split_at_mut(cut * es);
                        let da = case.expected_into(n, rank, 0, a);
                        let db = case.expected_into(n, rank, cut, b);
                        assert_eq!(da, want.is_some(), "{case:?} rank {rank}");
                        assert_eq!(db, want.is_some(), "{case:?} rank {rank}");
                        if let Some(w) = &want {
                            assert_eq!(&got, w, "{case:?} rank {rank} cut {cut}");
                        }
                    }
                }
            }
        }
    }
}
