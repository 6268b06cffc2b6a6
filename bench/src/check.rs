//! Inputs and the element-wise check, in chunks (a few MiB of host memory each) spread over
//! threads, so multi-GiB messages neither need a host copy of the buffer nor take hours.
//!
//! The reference is `oxccl_tests`' independent one (`input_value`, `reduce_ref`), element by
//! element; `tests` below checks it equals `Case::expected` on small cases.

use super::mem::Device;
use oxccl_core::datatype::DataType;
use oxccl_core::plan::CollKind;
use oxccl_core::reduce::store_f64;
use oxccl_tests::{TestOp, count_wrong, fill_input, input_value, reduce_ref};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Elements per chunk.
const CHUNK: usize = 1 << 20;

/// What one rank's output must hold.
#[derive(Clone, Copy, Debug)]
pub struct Expect {
    /// The operation.
    pub kind: CollKind,
    /// Element type.
    pub dtype: DataType,
    /// Reduction (reducing operations).
    pub op: Option<TestOp>,
    /// Ranks.
    pub n: usize,
    /// This rank.
    pub rank: usize,
    /// The API's count.
    pub count: usize,
    /// Root of rooted operations.
    pub root: usize,
}

impl Expect {
    /// False where the output is unspecified (reduce and gather on a non-root rank).
    pub fn specified(&self) -> bool {
        !matches!(self.kind, CollKind::Reduce | CollKind::Gather) || self.rank == self.root
    }

    /// Output element `j` (the out-of-place receive buffer's numbering).
    pub fn value(&self, j: usize) -> f64 {
        let (t, op, n, c, rank) = (self.dtype, self.op, self.n, self.count, self.rank);
        let data = |r: usize, i: usize| input_value(t, op, r, i);
        let red = |i: usize| reduce_ref(t, op.unwrap_or(TestOp::Sum), n, i);
        match self.kind {
            CollKind::AllReduce | CollKind::Reduce => red(j),
            CollKind::ReduceScatter => red(rank * c + j),
            CollKind::Broadcast => data(self.root, j),
            CollKind::AllGather | CollKind::Gather => data(j / c, j % c),
            CollKind::AllToAll => data(j / c, rank * c + j % c),
            CollKind::Scatter => data(self.root, rank * c + j),
            CollKind::SendRecv => data((rank + n - 1) % n, j),
            CollKind::AllToAllv => f64::NAN,
        }
    }

    /// Output elements `first..first + out.len()/es` into `out`.
    pub fn fill(&self, first: usize, out: &mut [u8]) {
        for k in 0..out.len() / self.dtype.size() {
            store_f64(self.dtype, out, k, self.value(first + k));
        }
    }
}

/// Runs `f(first, len)` over `0..total` in chunks on up to `threads` threads; sums the results.
fn par_chunks(
    total: usize,
    threads: usize,
    f: &(dyn Fn(usize, usize) -> Result<usize, String> + Sync),
) -> Result<usize, String> {
    let chunks = total.div_ceil(CHUNK);
    let threads = threads.clamp(1, chunks.max(1));
    if threads == 1 {
        let mut sum = 0;
        for i in 0..chunks {
            let first = i * CHUNK;
            sum += f(first, CHUNK.min(total - first))?;
        }
        return Ok(sum);
    }
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| -> Result<usize, String> {
                    let mut sum = 0;
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= chunks {
                            return Ok(sum);
                        }
                        let first = i * CHUNK;
                        sum += f(first, CHUNK.min(total - first))?;
                    }
                })
            })
            .collect();
        workers.into_iter().try_fold(0, |acc, w| {
            Ok(acc + w.join().map_err(|_| "check thread panicked")??)
        })
    })
}

/// Where a region of one rank's memory lies.
#[derive(Clone, Copy)]
pub struct At<'a> {
    /// Host memory or the CUDA runtime.
    pub dev: Device<'a>,
    /// The rank's GPU (made current on each helper thread).
    pub gpu: usize,
    /// Address of the region's first element.
    pub addr: usize,
    /// Helper threads to use.
    pub threads: usize,
}

/// Writes `rank`'s input (elements `0..elems`, reducing with `op` or data movement) at `at`.
///
/// # Safety
/// `at.addr` is valid for `elems` elements of `dtype` and no queued work uses it.
pub unsafe fn fill(
    at: At<'_>,
    dtype: DataType,
    op: Option<TestOp>,
    rank: usize,
    elems: usize,
) -> Result<(), String> {
    let es = dtype.size();
    par_chunks(elems, at.threads, &|first, len| {
        at.dev.set(at.gpu)?;
        let mut buf = vec![0u8; len * es];
        fill_input(dtype, op, rank, first, &mut buf);
        // SAFETY: `first + len <= elems`; forwarded from the caller.
        unsafe { at.dev.upload((at.addr + first * es) as *mut u8, &buf)? };
        Ok(0)
    })?;
    at.dev.set(at.gpu)?;
    at.dev.device_sync()
}

impl Expect {
    /// True when every rank's output is the same (the reference is computed once for all).
    fn same_on_every_rank(&self) -> bool {
        matches!(
            self.kind,
            CollKind::AllReduce | CollKind::Broadcast | CollKind::AllGather
        )
    }
}

/// Counts the elements of the `elems`-element output at `at` that differ from `want`.
///
/// # Safety
/// `at.addr` is valid for `elems` elements and no queued work writes it.
pub unsafe fn verify(at: At<'_>, want: &Expect, elems: usize) -> Result<usize, String> {
    // SAFETY: forwarded from the caller.
    unsafe { verify_all(&[(at, *want, elems)]) }
}

/// [`verify`] for several ranks' outputs (one thread driving several GPUs); where every rank
/// must hold the same output, each chunk of the reference is computed once.
///
/// # Safety
/// As for [`verify`], for every item.
pub unsafe fn verify_all(items: &[(At<'_>, Expect, usize)]) -> Result<usize, String> {
    let items: Vec<&(At<'_>, Expect, usize)> =
        items.iter().filter(|(_, w, _)| w.specified()).collect();
    let Some(&&(at0, want0, elems0)) = items.first() else {
        return Ok(0);
    };
    let shared = want0.same_on_every_rank()
        && items
            .iter()
            .all(|(_, w, e)| w.kind == want0.kind && w.count == want0.count && *e == elems0);
    let groups: Vec<Vec<&(At<'_>, Expect, usize)>> = if shared {
        vec![items]
    } else {
        items.into_iter().map(|i| vec![i]).collect()
    };
    let mut wrong = 0;
    for g in groups {
        let (_, want, elems) = *g[0];
        let es = want.dtype.size();
        wrong += par_chunks(elems, at0.threads, &|first, len| {
            let mut w = vec![0u8; len * es];
            want.fill(first, &mut w);
            let mut got = vec![0u8; len * es];
            let mut sum = 0;
            for (at, _, _) in &g {
                at.dev.set(at.gpu)?;
                // SAFETY: `first + len <= elems`; forwarded from the caller.
                unsafe {
                    at.dev
                        .download(&mut got, (at.addr + first * es) as *const u8)?
                };
                sum += count_wrong(want.dtype, want.op, &got, &w);
            }
            Ok(sum)
        })?;
    }
    Ok(wrong)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::ALL_OPS;
    use oxccl_tests::{Case, POISON};

    #[test]
    fn chunked_reference_equals_case_expected() {
        for k in ALL_OPS {
            for dtype in [DataType::Float32, DataType::Bfloat16, DataType::Int8] {
                for (n, count) in [(1, 5), (3, 7), (4, 0), (5, 33)] {
                    let op = super::super::ops::reducing(k).then_some(TestOp::Sum);
                    for rank in 0..n {
                        let e = Expect {
                            kind: k,
                            dtype,
                            op,
                            n,
                            rank,
                            count,
                            root: 0,
                        };
                        let (_, re) = super::super::ops::elems(k, count, n);
                        let mut got = vec![POISON; re * dtype.size()];
                        e.fill(0, &mut got);
                        let want = if k == CollKind::SendRecv {
                            let mut v = vec![0u8; re * dtype.size()];
                            fill_input(dtype, None, (rank + n - 1) % n, 0, &mut v);
                            Some(v)
                        } else {
                            Case {
                                kind: k,
                                dtype,
                                op,
                                count,
                                root: 0,
                                in_place: false,
                            }
                            .expected(n, rank)
                        };
                        assert_eq!(want.is_some(), e.specified(), "{k:?} rank {rank}");
                        if let Some(w) = want {
                            assert_eq!(got, w, "{k:?} {dtype:?} n {n} rank {rank}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn chunks_cover_everything_once() {
        let total = 3 * CHUNK + 17;
        let seen = std::sync::Mutex::new(Vec::new());
        let sum = par_chunks(total, 4, &|first, len| {
            seen.lock().unwrap().push((first, len));
            Ok(len)
        })
        .unwrap();
        assert_eq!(sum, total);
        let mut v = seen.into_inner().unwrap();
        v.sort();
        assert_eq!(v.len(), 4);
        assert_eq!(v.iter().map(|c| c.1).sum::<usize>(), total);
    }

    #[test]
    fn shared_reference_checks_every_rank() {
        let want = |rank| Expect {
            kind: CollKind::AllReduce,
            dtype: DataType::Float32,
            op: Some(TestOp::Sum),
            n: 2,
            rank,
            count: 5,
            root: 0,
        };
        let mut bufs = [vec![0u8; 20], vec![0u8; 20]];
        for (r, b) in bufs.iter_mut().enumerate() {
            want(r).fill(0, b);
        }
        bufs[1][4] ^= 0x40;
        let at = |b: &mut Vec<u8>| At {
            dev: Device::Host,
            gpu: 0,
            addr: b.as_mut_ptr() as usize,
            threads: 1,
        };
        let [b0, b1] = &mut bufs;
        let items = [(at(b0), want(0), 5), (at(b1), want(1), 5)];
        // SAFETY: both buffers hold 5 elements.
        assert_eq!(unsafe { verify_all(&items) }.unwrap(), 1);
    }

    #[test]
    fn host_fill_and_verify_round_trip() {
        let e = Expect {
            kind: CollKind::AllGather,
            dtype: DataType::Float32,
            op: None,
            n: 2,
            rank: 1,
            count: 3,
            root: 0,
        };
        let mut buf = vec![0u8; 6 * 4];
        let at = At {
            dev: Device::Host,
            gpu: 0,
            addr: buf.as_mut_ptr() as usize,
            threads: 2,
        };
        // SAFETY: `buf` holds 6 elements.
        unsafe {
            fill(at, DataType::Float32, None, 0, 3).unwrap();
            fill(
                At {
                    addr: at.addr + 12,
                    ..at
                },
                DataType::Float32,
                None,
                1,
                3,
            )
            .unwrap();
            assert_eq!(verify(at, &e, 6).unwrap(), 0);
        }
        buf[0] ^= 1;
        // SAFETY: as above.
        assert_eq!(unsafe { verify(at, &e, 6) }.unwrap(), 1);
    }
}
