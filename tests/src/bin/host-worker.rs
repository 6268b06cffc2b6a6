//! One rank of a multi-process host-backend test: joins a communicator through a unique id
//! given in hex, runs a scenario, prints the outcome, exits 0 on success.
//!
//! Usage: `host-worker <scenario> <unique-id-hex> <nranks> <rank>`

use oxccl_core::comm::CollArgs;
use oxccl_core::config::CommConfig;
use oxccl_core::datatype::{DataType, RedOp};
use oxccl_core::plan::CollKind;
use oxccl_core::{Communicator, HostBackend};
use oxccl_tests::harness::id_from_hex;
use oxccl_tests::suite::{full_matrix, run_cases};
use std::sync::Arc;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (scenario, id, nranks, rank) = (
        args[1].as_str(),
        id_from_hex(&args[2]),
        args[3].parse::<usize>().expect("nranks"),
        args[4].parse::<usize>().expect("rank"),
    );
    let backend = Arc::new(HostBackend::new());
    let comm =
        match Communicator::init_rank(backend.clone(), nranks, id, rank, 0, CommConfig::from_env())
        {
            Ok(c) => c,
            Err(e) => {
                println!("rank {rank}: init failed: {e}");
                std::process::exit(3);
            }
        };
    // SAFETY: 0 is the default stream.
    let stream =
        unsafe { oxccl_core::backend::Backend::stream_from_raw(&*backend, 0) }.expect("stream");
    match scenario {
        "matrix" => {
            let counts: Vec<usize> = std::env::var("OXCCL_TEST_COUNTS")
                .unwrap_or_else(|_| "0,1,7".into())
                .split(',')
                .map(|c| c.parse().expect("count"))
                .collect();
            let failed = run_cases(
                &comm,
                &stream,
                &full_matrix(nranks, &counts, &DataType::ALL),
            );
            for f in &failed {
                println!("{f}");
            }
            println!("rank {rank}: {} failed", failed.len());
            // Say goodbye to the peers: a rank vanishing without it counts as a crash.
            comm.destroy().expect("destroy");
            drop(comm);
            std::process::exit(i32::from(!failed.is_empty()));
        }
        "loop" => {
            // AllReduce forever until an error; the test kills one rank meanwhile.
            let mut buf = vec![0f32; 1 << 16];
            let start = Instant::now();
            let mut iters = 0u64;
            loop {
                let p = buf.as_mut_ptr() as u64;
                let args = CollArgs {
                    kind: CollKind::AllReduce,
                    send: p,
                    recv: p,
                    count: buf.len() as u64,
                    dtype: DataType::Float32,
                    op: RedOp::Sum,
                    root: 0,
                    layout: None,
                };
                // SAFETY: `buf` outlives the synchronous call.
                if let Err(e) = unsafe { comm.collective(args, &stream) } {
                    println!(
                        "rank {rank}: error after {iters} iterations, {:.2}s: {:?}: {e}",
                        start.elapsed().as_secs_f64(),
                        e.kind()
                    );
                    comm.abort();
                    std::process::exit(4);
                }
                iters += 1;
                if iters == 3 {
                    println!("rank {rank}: running");
                }
            }
        }
        other => panic!("unknown scenario {other}"),
    }
}
