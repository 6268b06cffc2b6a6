//! Gradient buckets over one flat buffer, as PyTorch's DDP and FSDP keep them: every parameter's
//! gradient lives in one contiguous `DeviceBuffer`, cut into buckets; each bucket is averaged
//! across ranks with its own AllReduce as soon as it is "ready" (here: in reverse order, as
//! backward produces them), all recorded in one group, then checked element by element.
//!
//! ```text
//! cargo run --release -p oxccl --example bucketed_gradients
//! ```

use oxccl::{Collectives, Communicator, Group, ReduceOp, Runtime, UniqueId};

/// Parameter tensors of the model, in elements.
const PARAMS: [usize; 6] = [4096, 64, 65536, 257, 1_000_003, 7];
/// Elements per bucket (DDP's default is 25 MB; smaller here so several buckets form).
const BUCKET: usize = 262_144;

/// Rank `rank`'s gradient element `i` (any value the reference can recompute).
fn grad(rank: usize, i: usize) -> f32 {
    ((i * 31 + rank * 17) % 1000) as f32 / 8.0
}

fn run(comm: &Communicator) -> oxccl::Result<usize> {
    let total: usize = PARAMS.iter().sum();
    let host: Vec<f32> = (0..total).map(|i| grad(comm.rank(), i)).collect();
    let mut flat = comm.device().buffer_from(&host)?;
    let mut buckets = flat.chunks_mut(BUCKET)?;
    buckets.reverse();
    let group = Group::start()?;
    for bucket in buckets {
        group.on(comm).all_reduce_in_place(bucket, ReduceOp::Avg)?;
    }
    group.end()?;
    let got = flat.to_vec()?;
    let n = comm.size();
    let wrong = got
        .iter()
        .enumerate()
        .filter(|&(i, &v)| {
            let want = (0..n).map(|r| grad(r, i)).sum::<f32>() / n as f32;
            (v - want).abs() > 1e-3 * want.abs().max(1.0)
        })
        .count();
    Ok(wrong)
}

fn main() -> oxccl::Result<()> {
    let rt = Runtime::auto()?;
    let nranks = 4.min(rt.device_count()?);
    let id = UniqueId::new()?;
    let wrong: Vec<usize> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..nranks)
            .map(|rank| {
                let rt = rt.clone();
                s.spawn(move || -> oxccl::Result<usize> {
                    let comm = Communicator::init(&id, rank, nranks, &rt.device(rank)?)?;
                    run(&comm)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("rank thread"))
            .collect::<oxccl::Result<_>>()
    })?;
    let total: usize = PARAMS.iter().sum();
    println!(
        "{} ranks on {}: {} buckets over {total} gradients, {} wrong",
        nranks,
        rt.name(),
        total.div_ceil(BUCKET),
        wrong.iter().sum::<usize>()
    );
    if wrong.iter().any(|&w| w > 0) {
        std::process::exit(1);
    }
    Ok(())
}
