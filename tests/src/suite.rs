//! Runs [`Case`]s on one rank of a host-backend communicator and checks them.

use crate::{Case, POISON, TestOp, alltoallv_layout, count_wrong, fill_input};
use oxccl_core::comm::CollArgs;
use oxccl_core::datatype::{DataType, RedOp};
use oxccl_core::host::HostStream;
use oxccl_core::plan::CollKind;
use oxccl_core::{Communicator, HostBackend};

/// Operations that reduce.
pub const REDUCING: [CollKind; 3] = [
    CollKind::AllReduce,
    CollKind::Reduce,
    CollKind::ReduceScatter,
];

/// Operations that only move data.
pub const MOVING: [CollKind; 6] = [
    CollKind::Broadcast,
    CollKind::AllGather,
    CollKind::AllToAll,
    CollKind::AllToAllv,
    CollKind::Gather,
    CollKind::Scatter,
];

/// Every case of the full matrix at `counts`: every operation, type, operator, in and out of
/// place, roots 0 and last.
pub fn full_matrix(nranks: usize, counts: &[usize], types: &[DataType]) -> Vec<Case> {
    let mut v = Vec::new();
    let roots: Vec<usize> = if nranks > 1 {
        vec![0, nranks - 1]
    } else {
        vec![0]
    };
    for &count in counts {
        for &dtype in types {
            for in_place in [false, true] {
                for kind in REDUCING {
                    for op in TestOp::ALL {
                        let root = roots[(count + op as usize) % roots.len()];
                        v.push(Case {
                            kind,
                            dtype,
                            op: Some(op),
                            count,
                            root,
                            in_place,
                        });
                    }
                }
                for kind in MOVING {
                    // The safe API has no in-place AlltoAll; run_case has (host tests ask for it).
                    if in_place && matches!(kind, CollKind::AllToAll | CollKind::AllToAllv) {
                        continue;
                    }
                    for &root in &roots {
                        if root != 0
                            && !matches!(
                                kind,
                                CollKind::Broadcast | CollKind::Gather | CollKind::Scatter
                            )
                        {
                            continue;
                        }
                        v.push(Case {
                            kind,
                            dtype,
                            op: None,
                            count,
                            root,
                            in_place,
                        });
                    }
                }
            }
        }
    }
    v
}

/// Runs one case on this rank; returns the number of wrong elements (0 on success).
pub fn run_case(
    comm: &Communicator<HostBackend>,
    stream: &HostStream,
    case: &Case,
) -> oxccl_core::Result<usize> {
    let (n, rank) = (comm.nranks(), comm.rank());
    let t = case.dtype;
    let es = t.size();
    let (send_elems, recv_elems) = case.sizes(n, rank);
    let mut send = vec![POISON; send_elems * es];
    fill_input(t, case.op, rank, 0, &mut send);
    let mut recv = vec![POISON; recv_elems * es];
    let op = match case.op {
        Some(o) => o.red_op(t),
        None => RedOp::Sum,
    };
    let layout = (case.kind == CollKind::AllToAllv).then(|| alltoallv_layout(case.count, n, rank));
    // In place: the input lives inside the output (or the output inside the input).
    let (send_ptr, recv_ptr, out_is_send) = if case.in_place {
        match case.kind {
            CollKind::AllReduce | CollKind::Broadcast | CollKind::Reduce | CollKind::AllToAll => {
                recv.copy_from_slice(&send);
                let p = recv.as_mut_ptr() as u64;
                (p, p, false)
            }
            CollKind::AllGather | CollKind::Gather => {
                let off = case.in_place_offset(rank) * es;
                let is_root_or_ag = case.kind == CollKind::AllGather || rank == case.root;
                if is_root_or_ag {
                    recv[off..off + send.len()].copy_from_slice(&send);
                    let p = recv.as_mut_ptr() as u64;
                    (p + off as u64, p, false)
                } else {
                    (send.as_ptr() as u64, recv.as_mut_ptr() as u64, false)
                }
            }
            CollKind::ReduceScatter => {
                let p = send.as_mut_ptr() as u64;
                (p, p + (rank * case.count * es) as u64, true)
            }
            CollKind::Scatter if rank == case.root => {
                let p = send.as_mut_ptr() as u64;
                (p, p + (case.root * case.count * es) as u64, true)
            }
            _ => (send.as_ptr() as u64, recv.as_mut_ptr() as u64, false),
        }
    } else {
        (send.as_ptr() as u64, recv.as_mut_ptr() as u64, false)
    };
    let args = CollArgs {
        kind: case.kind,
        send: send_ptr,
        recv: recv_ptr,
        count: case.count as u64,
        dtype: t,
        op,
        root: case.root as u32,
        layout,
    };
    // SAFETY: both buffers outlive the call, which completes before returning on the host
    // backend, and are sized by `Case::sizes` for this operation.
    unsafe { comm.collective(args, stream)? };
    let Some(want) = case.expected(n, rank) else {
        return Ok(0);
    };
    let got: &[u8] = if out_is_send {
        let off = (recv_ptr - send_ptr) as usize;
        &send[off..off + want.len()]
    } else {
        &recv
    };
    Ok(count_wrong(t, case.op, got, &want))
}

/// Runs every case; returns descriptions of the failed ones.
pub fn run_cases(
    comm: &Communicator<HostBackend>,
    stream: &HostStream,
    cases: &[Case],
) -> Vec<String> {
    let mut failed = Vec::new();
    for case in cases {
        match run_case(comm, stream, case) {
            Ok(0) => {}
            Ok(w) => failed.push(format!(
                "rank {}: {case:?}: {w} wrong elements",
                comm.rank()
            )),
            Err(e) => failed.push(format!("rank {}: {case:?}: error {e}", comm.rank())),
        }
    }
    failed
}
