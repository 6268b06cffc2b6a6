//! A local plan that folds a second buffer into the output, `out[i] = out[i] ⊕ acc[i]`: the bias
//! of RCCL's `ncclAllReduceWithBias`, run on the AllReduce's stream right after it.
//!
//! A step has one local operand, so `acc` first travels through this rank's loopback (a send
//! to itself, as direct plans move a rank's own contribution) and is then received and combined
//! with the output in place. Every backend runs it like any plan, inside groups and graphs too.

#![forbid(unsafe_code)]

use super::{Algorithm, ChannelWork, CollKind, Protocol, Region, Step, WorkDesc, chunks};
use crate::datatype::{DataType, ReduceOp, Reduction};
use crate::plan::tags::coll_tag;

/// Bytes combined per step (the loopback holds one step's data).
const STEP_BYTES: u64 = 1 << 20;

/// The plan of rank `rank` (of any communicator) combining `count` elements of `dtype` with `op`
/// from the plan's send buffer (`acc`) into its receive buffer, under collective number `seq`.
/// Avg and PreMulSum combine as Sum: the bias is added once, unscaled.
pub fn combine_into_output(
    rank: u32,
    count: u64,
    dtype: DataType,
    op: ReduceOp,
    seq: u64,
) -> WorkDesc {
    let tag = coll_tag(seq, 0);
    let chunk = (STEP_BYTES / dtype.size() as u64).max(1);
    let mut steps = Vec::new();
    for (at, n) in chunks(count, chunk) {
        steps.push(Step::new(n, tag).own(Region::input(at)).send(rank));
        steps.push(
            Step::new(n, tag)
                .recv(rank)
                .src(Region::output(at))
                .last()
                .dst(Region::output(at)),
        );
    }
    WorkDesc {
        kind: CollKind::AllReduce,
        algo: Algorithm::Direct,
        proto: Protocol::Simple,
        dtype,
        reduction: Reduction {
            op,
            pre_scale: None,
            post_div: None,
        },
        scratch_elems: 0,
        exposed: false,
        channels: vec![ChannelWork::new(steps)],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::BufId;
    use crate::plan::sim::{Placement, RankMem, run};
    use std::collections::HashMap;

    /// Rank r's memory: `acc` then `out`, `count` i32 elements each.
    fn mem(count: u64, r: u32) -> RankMem {
        let mut arena = Vec::new();
        for i in 0..count {
            arena.extend_from_slice(&(i as i32 % 1000 - 500 + r as i32).to_le_bytes());
        }
        for i in 0..count {
            arena.extend_from_slice(&((i as i32 * 7) % 301 - 150).to_le_bytes());
        }
        let place = |k: u64| Placement {
            byte_off: (k * count * 4) as usize,
            elems: count,
        };
        RankMem {
            arena,
            bufs: HashMap::from([(BufId::INPUT, place(0)), (BufId::OUTPUT, place(1))]),
        }
    }

    #[test]
    fn bias_combines_every_element_once_on_every_rank() {
        let at = |m: &RankMem, k: u64, i: u64, count: u64| {
            let o = ((k * count + i) * 4) as usize;
            i32::from_le_bytes(m.arena[o..o + 4].try_into().unwrap())
        };
        for op in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min] {
            for count in [0u64, 1, 7, (1 << 18) + 3] {
                let n = 3;
                let descs: Vec<WorkDesc> = (0..n)
                    .map(|r| combine_into_output(r, count, DataType::Int32, op, 9))
                    .collect();
                let before: Vec<RankMem> = (0..n).map(|r| mem(count, r)).collect();
                let mut after = before.clone();
                run(&descs, &mut after, 5).unwrap();
                for r in 0..n as usize {
                    for i in 0..count {
                        let (acc, out) = (at(&before[r], 0, i, count), at(&before[r], 1, i, count));
                        let want = match op {
                            ReduceOp::Sum => out.wrapping_add(acc),
                            ReduceOp::Prod => out.wrapping_mul(acc),
                            ReduceOp::Max => out.max(acc),
                            ReduceOp::Min => out.min(acc),
                        };
                        assert_eq!(
                            at(&after[r], 1, i, count),
                            want,
                            "{op:?} {count} r{r} [{i}]"
                        );
                        assert_eq!(at(&after[r], 0, i, count), acc, "acc untouched");
                    }
                }
            }
        }
    }
}
