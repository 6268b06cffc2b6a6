//! One process per rank, started by torchrun or by this example itself: every process calls
//! `Communicator::from_env`, which reads `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR` and
//! `MASTER_PORT` (and meets the others on `MASTER_PORT + 1`).
//!
//! ```text
//! # as its own launcher (WORLD_SIZE processes, default 3):
//! cargo run --release -p oxccl --example torchrun
//! # under torchrun:
//! torchrun --nproc-per-node 2 --no-python target/release/examples/torchrun
//! ```

use oxccl::{Collectives, Communicator, ReduceOp};
use std::process::Command;

fn main() -> oxccl::Result<()> {
    if std::env::var_os("RANK").is_none() {
        launch();
        return Ok(());
    }
    let comm = Communicator::from_env()?;
    let (rank, n) = (comm.rank(), comm.size());
    let device = comm.device();
    // Each rank contributes its rank; the root gathers everyone's contribution, then every
    // rank learns the maximum.
    let mine = device.buffer_from(&[rank as i64 * 10])?;
    let mut gathered = device.alloc::<i64>(n)?;
    comm.gather(&mine, (rank == 0).then(|| gathered.as_mut_slice()), 0)?;
    let mut max = device.buffer_from(&[rank as i64])?;
    comm.all_reduce_in_place(&mut max, ReduceOp::Max)?;
    if rank == 0 {
        println!("rank 0 gathered {:?}", gathered.to_vec()?);
    }
    println!(
        "rank {rank} of {n} on {} device {}: max rank {}",
        comm.runtime().name(),
        device.ordinal(),
        max.to_vec()?[0]
    );
    comm.finalize()
}

/// Starts `WORLD_SIZE` (default 3) copies of this program with torchrun's variables set.
fn launch() {
    let n: usize = std::env::var("WORLD_SIZE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    // A free port for the rendezvous (from_env uses MASTER_PORT + 1).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port() - 1)
        .expect("a free local port");
    let exe = std::env::current_exe().expect("own path");
    let children: Vec<_> = (0..n)
        .map(|r| {
            Command::new(&exe)
                .env("RANK", r.to_string())
                .env("LOCAL_RANK", r.to_string())
                .env("WORLD_SIZE", n.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .spawn()
                .expect("start a rank")
        })
        .collect();
    // Wait for every child, even after one failed.
    let ok: Vec<bool> = children
        .into_iter()
        .map(|mut c| c.wait().map(|s| s.success()).unwrap_or(false))
        .collect();
    if !ok.iter().all(|&b| b) {
        eprintln!("a rank failed");
        std::process::exit(1);
    }
}
