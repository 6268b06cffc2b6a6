//! MSCCL algorithm files in the C layer: [`run`] loads and runs one for embedders, and
//! `mscclLoadAlgo` / `mscclRunAlgo` / `mscclUnloadAlgo` (RCCL flavour) go through the handle
//! table here. Parsing and lowering to plans live in core (`oxccl_core::plan::msccl`).

use oxccl_core::backend::{Backend, DevicePtr};
use oxccl_core::datatype::{DataType, RedOp, Reduction};
use oxccl_core::plan::WorkDesc;
use oxccl_core::{Communicator, Error, Result};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

#[cfg(feature = "rccl")]
pub(crate) mod capi;
pub use oxccl_core::plan::msccl::{Buf, ChunkRef, Gpu, MStep, MscclAlgo, Sizes, StepType, Tb};

/// Builds a plan that runs `algo` on rank `rank` of `nranks`.
pub type PlanBuilder = Box<dyn FnOnce(u64) -> Result<WorkDesc> + Send>;

/// Runs `algo` as one collective on `comm`: `count` as [`MscclAlgo::sizes`] explains, `op` where
/// steps reduce (Sum, Prod, Max, Min, PreMulSum; Avg is refused). A count of 0 does nothing.
///
/// # Safety
/// `send` and `recv` are backend memory valid for the sizes [`MscclAlgo::sizes`] gives (in
/// elements of `dtype`) until the operation has run, as for [`Communicator::run_plan`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn run<B: Backend>(
    comm: &Communicator<B>,
    algo: &Arc<MscclAlgo>,
    send: DevicePtr,
    recv: DevicePtr,
    count: u64,
    dtype: DataType,
    op: RedOp,
    stream: &B::Stream,
) -> Result<()> {
    let at = (comm.rank() as u32, comm.nranks());
    match plan(algo, at, send, recv, count, dtype, op)? {
        // SAFETY: forwarded from the caller.
        Some(build) => unsafe { comm.run_plan(build, send, recv, stream) },
        None => Ok(()),
    }
}

/// Checks `algo`'s arguments for rank `rank` of `nranks` and returns the builder of its plan;
/// `None` when there is nothing to do (a count of 0).
pub fn plan(
    algo: &Arc<MscclAlgo>,
    (rank, nranks): (u32, usize),
    send: DevicePtr,
    recv: DevicePtr,
    count: u64,
    dtype: DataType,
    op: RedOp,
) -> Result<Option<PlanBuilder>> {
    let sizes = algo.sizes(count, nranks)?;
    let reduction = if algo.reduces() {
        if op == RedOp::Avg {
            return Err(Error::arg(format!(
                "MSCCL algorithm {}: ncclAvg is not supported (where the division belongs is not \
                 expressed in MSCCL files); use ncclSum and divide",
                algo.source
            )));
        }
        Reduction::lower(op, nranks)
    } else {
        Reduction::none()
    };
    if count == 0 {
        return Ok(None);
    }
    let esize = dtype.size() as u64;
    let (s_end, r_end) = (
        send.saturating_add(sizes.input * esize),
        recv.saturating_add(sizes.output * esize),
    );
    let aliased = send < r_end && recv < s_end;
    if aliased && !algo.inplace {
        return Err(Error::arg(format!(
            "MSCCL algorithm {} is not marked inplace=\"1\" but the send and receive buffers overlap",
            algo.source
        )));
    }
    if !aliased && !algo.outofplace {
        return Err(Error::arg(format!(
            "MSCCL algorithm {} is marked outofplace=\"0\": pass overlapping (in-place) buffers",
            algo.source
        )));
    }
    let algo = algo.clone();
    Ok(Some(Box::new(move |seq| {
        algo.lower(rank, sizes.chunk, dtype, reduction, seq)
    })))
}

/// Algorithms loaded by [`load_handle`], by handle (`mscclAlgoHandle_t`).
static HANDLES: Mutex<BTreeMap<i32, Arc<MscclAlgo>>> = Mutex::new(BTreeMap::new());

/// Loads the algorithm file at `path` and returns a new handle for it (the lowest free one).
pub fn load_handle(path: &str) -> Result<i32> {
    let algo = Arc::new(MscclAlgo::load(path)?);
    let mut h = HANDLES.lock().unwrap_or_else(|p| p.into_inner());
    let id = (0..=i32::MAX)
        .find(|i| !h.contains_key(i))
        .ok_or_else(|| Error::Internal("no free MSCCL algorithm handle".into()))?;
    h.insert(id, algo);
    Ok(id)
}

/// The algorithm behind `handle`.
pub fn handle_algo(handle: i32) -> Result<Arc<MscclAlgo>> {
    HANDLES
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&handle)
        .cloned()
        .ok_or_else(|| unknown(handle))
}

/// Forgets `handle` (runs in flight keep their own reference).
pub fn unload_handle(handle: i32) -> Result<()> {
    HANDLES
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&handle)
        .map(drop)
        .ok_or_else(|| unknown(handle))
}

fn unknown(handle: i32) -> Error {
    Error::arg(format!(
        "MSCCL algorithm handle {handle} was not returned by mscclLoadAlgo (or was unloaded)"
    ))
}
