//! AllReduce across threads of one process: one rank per device (GPUs where present; four
//! ranks on the host backend elsewhere), each summing its vector into everyone's.
//!
//! ```text
//! cargo run --release -p oxccl --example all_reduce_threads
//! OXCCL_BACKEND=host cargo run --release -p oxccl --example all_reduce_threads
//! ```

use oxccl::{Collectives, Communicator, ReduceOp, Runtime, UniqueId};

fn main() -> oxccl::Result<()> {
    let rt = Runtime::auto()?;
    let nranks = if rt.name() == "host" {
        4
    } else {
        rt.device_count()?
    };
    let id = UniqueId::new()?;
    let len = 1 << 20;
    let results = std::thread::scope(|s| {
        let ranks: Vec<_> = (0..nranks)
            .map(|rank| {
                let rt = rt.clone();
                s.spawn(move || -> oxccl::Result<f32> {
                    let device = rt.device(rank)?;
                    let comm = Communicator::init(&id, rank, nranks, &device)?;
                    let mut buf = device.buffer_from(&vec![rank as f32 + 1.0; len])?;
                    comm.all_reduce_in_place(&mut buf, ReduceOp::Sum)?;
                    let v = buf.to_vec()?;
                    comm.finalize()?;
                    Ok(v[len - 1])
                })
            })
            .collect();
        ranks
            .into_iter()
            .map(|r| r.join().expect("rank thread panicked"))
            .collect::<oxccl::Result<Vec<f32>>>()
    })?;
    let want = (nranks * (nranks + 1) / 2) as f32;
    println!(
        "{} backend, {nranks} ranks, {len} f32 each: every rank got {want}: {}",
        rt.name(),
        results.iter().all(|&x| x == want)
    );
    Ok(())
}
