//! Two ranks in two threads on the host backend, built against `oxccl` without its GPU
//! features: what a laptop, CI or a docs build of a dependent compiles.

use oxccl::{Collectives, Communicator, ReduceOp, Runtime, UniqueId};

fn main() -> oxccl::Result<()> {
    let rt = Runtime::host();
    let id = UniqueId::new()?;
    let sums = std::thread::scope(|s| {
        let ranks: Vec<_> = (0..2)
            .map(|rank| {
                let rt = rt.clone();
                s.spawn(move || -> oxccl::Result<Vec<i32>> {
                    let comm = Communicator::init(&id, rank, 2, &rt.device(rank)?)?;
                    let mut buf = comm.device().buffer_from(&[rank as i32 + 1; 4])?;
                    comm.all_reduce_in_place(&mut buf, ReduceOp::Sum)?;
                    buf.to_vec()
                })
            })
            .collect();
        ranks
            .into_iter()
            .map(|r| r.join().expect("rank thread"))
            .collect::<oxccl::Result<Vec<_>>>()
    })?;
    assert!(sums.iter().all(|v| v == &[3; 4]), "{sums:?}");
    println!("host-only: 2 ranks, AllReduce correct");
    Ok(())
}
