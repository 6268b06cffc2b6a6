//! Data-parallel training of a tiny linear model: each rank (a thread here) computes gradients
//! on its own shard of the data, the gradients are averaged across ranks with one grouped
//! AllReduce per step, and every rank applies the same update, so the replicas stay identical.
//!
//! ```text
//! cargo run --release -p oxccl --example data_parallel
//! ```

use oxccl::{Collectives, Communicator, Group, ReduceOp, Runtime, UniqueId};

/// Features of the model (`y = w . x + b`).
const FEATURES: usize = 8;
/// Samples per rank.
const SHARD: usize = 64;
/// Training steps.
const STEPS: usize = 200;

/// The function the model should learn.
fn truth(x: &[f32]) -> f32 {
    x.iter()
        .enumerate()
        .map(|(i, v)| (i as f32 - 3.5) * v)
        .sum::<f32>()
        + 0.5
}

/// Sample `i` of rank `rank`'s shard (deterministic, different per rank).
fn sample(rank: usize, i: usize) -> Vec<f32> {
    (0..FEATURES)
        .map(|f| (((rank * 7919 + i * 104_729 + f * 1_299_709) % 2000) as f32 / 1000.0) - 1.0)
        .collect()
}

/// Gradients of the squared error of `(w, b)` on this rank's shard, and the loss.
fn gradients(rank: usize, w: &[f32], b: f32) -> (Vec<f32>, f32, f32) {
    let (mut gw, mut gb, mut loss) = (vec![0.0; FEATURES], 0.0, 0.0);
    for i in 0..SHARD {
        let x = sample(rank, i);
        let err = x.iter().zip(w).map(|(a, c)| a * c).sum::<f32>() + b - truth(&x);
        for (g, v) in gw.iter_mut().zip(&x) {
            *g += 2.0 * err * v / SHARD as f32;
        }
        gb += 2.0 * err / SHARD as f32;
        loss += err * err / SHARD as f32;
    }
    (gw, gb, loss)
}

fn train(comm: &Communicator) -> oxccl::Result<(Vec<f32>, f32)> {
    let device = comm.device();
    let (mut w, mut b) = (vec![0.0f32; FEATURES], 0.0f32);
    let mut grad_w = device.alloc::<f32>(FEATURES)?;
    let mut grad_b = device.alloc::<f32>(1)?;
    let mut loss = device.alloc::<f32>(1)?;
    for step in 0..STEPS {
        let (gw, gb, l) = gradients(comm.rank(), &w, b);
        grad_w.copy_from_host(&gw)?;
        grad_b.copy_from_host(&[gb])?;
        loss.copy_from_host(&[l])?;
        // One launch for the three averages; the buffers stay borrowed until it ended.
        let group = Group::start()?;
        group
            .on(comm)
            .all_reduce_in_place(&mut grad_w, ReduceOp::Avg)?;
        group
            .on(comm)
            .all_reduce_in_place(&mut grad_b, ReduceOp::Avg)?;
        group
            .on(comm)
            .all_reduce_in_place(&mut loss, ReduceOp::Avg)?;
        group.end()?;
        // Reading the results waits for the operations (stream-ordered buffers).
        let gw = grad_w.to_vec()?;
        let gb = grad_b.to_vec()?[0];
        for (p, g) in w.iter_mut().zip(&gw) {
            *p -= 0.1 * g;
        }
        b -= 0.1 * gb;
        if comm.rank() == 0 && step % 50 == 0 {
            println!("step {step:>3}: mean loss {:.6}", loss.to_vec()?[0]);
        }
    }
    Ok((w, b))
}

fn main() -> oxccl::Result<()> {
    let rt = Runtime::auto()?;
    let nranks = if rt.name() == "host" {
        4
    } else {
        rt.device_count()?
    };
    let id = UniqueId::new()?;
    let models = std::thread::scope(|s| {
        let ranks: Vec<_> = (0..nranks)
            .map(|rank| {
                let rt = rt.clone();
                s.spawn(move || {
                    let comm = Communicator::init(&id, rank, nranks, &rt.device(rank)?)?;
                    train(&comm)
                })
            })
            .collect();
        ranks
            .into_iter()
            .map(|r| r.join().expect("rank thread panicked"))
            .collect::<oxccl::Result<Vec<_>>>()
    })?;
    let same = models.windows(2).all(|m| m[0] == m[1]);
    let (w, b) = &models[0];
    println!("{nranks} replicas identical: {same}; learned b = {b:.3} (truth 0.5), w = {w:.2?}");
    Ok(())
}
