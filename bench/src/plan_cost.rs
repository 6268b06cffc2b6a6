//! `oxccl-bench plan-cost`: the host's share of a GPU launch that does not depend on the GPU:
//! the plan the tuner picks (built as a communicator builds it), its lowering to the kernels'
//! steps, and the argument block, per operation and size, on this machine's CPU. Eager launches
//! pay it on the first call with a plan; a later call that reuses the plan (the communicator's
//! plan cache) pays only for refreshing its block's launch arguments and buffer table; CUDA
//! graphs pay it once.

use oxccl_core::datatype::{DataType, Reduction};
use oxccl_core::plan::tuner::{Topology, Tuner};
use oxccl_core::plan::{self, CollKind, CollRequest, P2pDir, P2pOp, WorkDesc};
use oxccl_kernel_abi::{ArgsLayout, FifoGeometry, LaunchArgs, encode};
use std::time::Instant;

/// The GPU backends' FIFOs with their default geometry on NVLink, as the tuner sees them.
const TOPOLOGY: Topology = Topology::SingleNodeGpu { nvlink: true };

/// Rank 0's plan of `kind` (send/receive: one send to and one receive from rank 1) moving
/// `bytes` over `nranks` ranks, chosen and cut as a communicator on NVLink does.
fn plan(kind: CollKind, bytes: u64, nranks: u32) -> WorkDesc {
    let tuner = Tuner::default();
    let geometry = FifoGeometry::default();
    let max_channels = geometry.channels as u32;
    let dtype = DataType::Uint8;
    if kind == CollKind::SendRecv {
        let mut c = tuner.choose(kind, 1 << 30, dtype, nranks, TOPOLOGY);
        c.nchannels = c.nchannels.min(max_channels);
        c.chunk_elems = c
            .chunk_elems
            .min(geometry.message_bytes(plan::Protocol::Simple));
        let ops = [P2pDir::Send, P2pDir::Recv].map(|dir| P2pOp {
            dir,
            peer: 1,
            count: bytes,
            peer_seq: 0,
        });
        let ll_chunk = geometry.message_bytes(plan::Protocol::Ll);
        let shape = tuner.p2p_shape(nranks, TOPOLOGY, &c, Some(ll_chunk));
        return plan::build_p2p(plan::P2pGroup {
            rank: 0,
            nranks,
            ops: &ops,
            dtype,
            shape,
            split: plan::Split::No,
        });
    }
    let count = match kind {
        CollKind::AllToAll | CollKind::AllGather | CollKind::ReduceScatter => {
            bytes / u64::from(nranks)
        }
        _ => bytes,
    };
    let c = tuner.choose(kind, bytes, dtype, nranks, TOPOLOGY);
    let req = CollRequest {
        kind,
        rank: 0,
        nranks,
        count: count.max(1),
        root: 0,
        layout: None,
        dtype,
        reduction: Reduction::none(),
        seq: 0,
        algo: c.algo,
        proto: c.proto,
        nchannels: c.nchannels.min(max_channels),
        chunk_elems: c.chunk_elems.min(geometry.message_bytes(c.proto)),
        hosts: None,
    };
    plan::build_coll(&req).expect("a plan the tuner chose")
}

/// Mean microseconds of `f` over enough calls to take about 20 ms.
fn time_us(mut f: impl FnMut()) -> f64 {
    let t = Instant::now();
    let mut n = 0u32;
    while n < 20 || t.elapsed().as_millis() < 20 {
        f();
        n += 1;
    }
    t.elapsed().as_secs_f64() * 1e6 / f64::from(n)
}

/// Runs `oxccl-bench plan-cost [RANKS]`; prints one table row per operation and size.
pub fn main(args: &[String]) -> i32 {
    let nranks = match args.first().map(|r| r.parse::<u32>()) {
        None => 2,
        Some(Ok(r)) if (2..=64).contains(&r) => r,
        Some(_) => {
            eprintln!("oxccl-bench plan-cost [RANKS]: RANKS from 2 to 64");
            return 2;
        }
    };
    println!("# host cost of a launch's plan on NVLink, {nranks} ranks, rank 0 (us)");
    println!(
        "| op | bytes | channels | steps | block bytes | plan | encode | block | total | reused |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for kind in [CollKind::SendRecv, CollKind::AllReduce, CollKind::AllToAll] {
        for bytes in [
            8u64,
            8 << 10,
            64 << 10,
            256 << 10,
            1 << 20,
            4 << 20,
            16 << 20,
        ] {
            let work = plan(kind, bytes, nranks);
            let enc = encode(&work, 0).expect("a plan the kernels run");
            let layout = ArgsLayout::new(
                work.channels.len(),
                enc.steps.len(),
                3 + 2,
                enc.loopback_offsets.len(),
            );
            let table = [0u64; 5];
            let args = LaunchArgs::default();
            let b = time_us(|| drop(std::hint::black_box(plan(kind, bytes, nranks))));
            let e = time_us(|| drop(std::hint::black_box(encode(&work, 0))));
            let i = time_us(|| drop(std::hint::black_box(layout.image(&args, &enc, &table))));
            let mut block = layout.image(&args, &enc, &table);
            let r = time_us(|| layout.refresh(std::hint::black_box(&mut block), &args, &table));
            println!(
                "| {kind:?} | {bytes} | {} | {} | {} | {b:.2} | {e:.2} | {i:.2} | {:.2} | {r:.2} |",
                work.channels.len(),
                enc.steps.len(),
                layout.total,
                b + e + i
            );
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row's plan is the communicator's (channels from the tuner's table) and lowers.
    #[test]
    fn every_row_plans_and_lowers() {
        for kind in [CollKind::SendRecv, CollKind::AllReduce, CollKind::AllToAll] {
            for bytes in [8u64, 256 << 10, 16 << 20] {
                let work = plan(kind, bytes, 2);
                assert!(!work.channels.is_empty(), "{kind:?} {bytes}");
                encode(&work, 0).unwrap_or_else(|e| panic!("{kind:?} {bytes}: {e}"));
            }
        }
        // A send/receive message spreads a channel per 4 KiB of LL on NVLink: 64 KiB on 16
        // FIFO channels, each with its send and its receive.
        let work = plan(CollKind::SendRecv, 64 << 10, 2);
        let busy = work.channels.iter().filter(|c| !c.steps.is_empty()).count();
        assert_eq!((busy, work.step_count()), (16, 32));
    }
}
