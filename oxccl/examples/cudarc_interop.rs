//! AllReduce on memory and streams of cudarc (candle's CUDA backend is built on it): the
//! program allocates with cudarc and hands its `CudaSlice`s to oxccl without copying.
//! Needs an NVIDIA GPU.
//!
//! ```text
//! cargo run --release -p oxccl --features cudarc --example cudarc_interop
//! ```

use cudarc::driver::CudaContext;
use oxccl::{Communicator, ReduceOp, Runtime, UniqueId};

fn main() -> oxccl::Result<()> {
    let rt = Runtime::cuda()?;
    let n = rt.device_count()?;
    let id = UniqueId::new()?;
    std::thread::scope(|s| {
        let ranks: Vec<_> = (0..n)
            .map(|rank| {
                let rt = rt.clone();
                s.spawn(move || -> oxccl::Result<()> {
                    let comm = Communicator::init(&id, rank, n, &rt.device(rank)?)?;
                    let ctx =
                        CudaContext::new(rank).map_err(|e| oxccl::Error::Device(e.to_string()))?;
                    let stream = ctx
                        .new_stream()
                        .map_err(|e| oxccl::Error::Device(e.to_string()))?;
                    let host = vec![rank as f32 + 1.0; 1024];
                    let mut grads = stream
                        .clone_htod(&host)
                        .map_err(|e| oxccl::Error::Device(e.to_string()))?;
                    comm.on_cudarc(&stream)?
                        .all_reduce_in_place(&mut grads, ReduceOp::Sum)?;
                    let back = stream
                        .clone_dtoh(&grads)
                        .map_err(|e| oxccl::Error::Device(e.to_string()))?;
                    println!(
                        "rank {rank}: {} (want {})",
                        back[0],
                        (n * (n + 1) / 2) as f32
                    );
                    Ok(())
                })
            })
            .collect();
        ranks
            .into_iter()
            .try_for_each(|r| r.join().expect("rank thread panicked"))
    })
}
