//! Which backend a process uses: `OXCCL_BACKEND`, else CUDA, then HIP, then the host.

use super::{AnyBackend, Backed};
use oxccl_core::config::{self, vars};
use oxccl_core::{Error, HostBackend, Result};
use std::sync::{Arc, OnceLock};

/// Picks a backend from `OXCCL_BACKEND` (`host`, `cuda`, `hip`, `auto` or unset).
///
/// Unset or `auto`: the first of CUDA and HIP whose runtime loads and has a device, else the
/// host. A named device backend that cannot be used is an error, never a silent fallback; a
/// value that names no backend is warned about and means `auto`.
pub fn choose() -> Result<Arc<AnyBackend>> {
    let wanted = config::get(&vars::OXCCL_BACKEND)
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    match wanted.as_str() {
        "host" => Ok(host()),
        #[cfg(feature = "cuda")]
        "cuda" => cuda(),
        #[cfg(feature = "hip")]
        "hip" => hip(),
        "" | "auto" => Ok(auto()),
        // Each build matches its own device backends above; only missing ones reach here.
        #[allow(unreachable_patterns)]
        "cuda" | "hip" => Err(Error::usage(format!(
            "OXCCL_BACKEND={wanted}: this build of oxccl has no {wanted} backend; use OXCCL_BACKEND=host"
        ))),
        other => {
            config::bad_value(
                vars::OXCCL_BACKEND.name,
                other,
                "one of host, cuda, hip, auto",
                "auto",
            );
            Ok(auto())
        }
    }
}

/// The first of CUDA and HIP whose runtime loads and has a device, else the host.
fn auto() -> Arc<AnyBackend> {
    #[cfg(feature = "cuda")]
    match cuda() {
        Ok(b) => return b,
        Err(e) => tracing::info!(target: "oxccl::init", "not using CUDA: {e}"),
    }
    #[cfg(feature = "hip")]
    match hip() {
        Ok(b) => return b,
        Err(e) => tracing::info!(target: "oxccl::init", "not using HIP: {e}"),
    }
    tracing::info!(target: "oxccl::init", "using the host backend");
    host()
}

/// The host backend, one per process: every `Runtime::host()` is the same runtime.
pub(crate) fn host() -> Arc<AnyBackend> {
    static HOST: OnceLock<Arc<AnyBackend>> = OnceLock::new();
    HOST.get_or_init(|| Arc::new(AnyBackend::from(Backed(Arc::new(HostBackend::new())))))
        .clone()
}

/// The CUDA backend when its driver loads and has a device; loaded once per process.
#[cfg(feature = "cuda")]
pub(crate) fn cuda() -> Result<Arc<AnyBackend>> {
    static CUDA: OnceLock<Result<Arc<AnyBackend>>> = OnceLock::new();
    CUDA.get_or_init(|| {
        let b = oxccl_cuda::CudaBackend::load()?;
        let n = oxccl_core::backend::Backend::device_count(&b)?;
        if n == 0 {
            return Err(Error::usage("no CUDA device"));
        }
        tracing::info!(target: "oxccl::init", "using the CUDA backend ({n} devices)");
        Ok(Arc::new(AnyBackend::from(Backed(Arc::new(b)))))
    })
    .clone()
}

/// The HIP backend when its runtime loads and has a device; loaded once per process.
#[cfg(feature = "hip")]
pub(crate) fn hip() -> Result<Arc<AnyBackend>> {
    static HIP: OnceLock<Result<Arc<AnyBackend>>> = OnceLock::new();
    HIP.get_or_init(|| {
        let b = oxccl_hip::HipBackend::load()?;
        tracing::info!(target: "oxccl::init", "using the HIP backend ({:?})", b.runtime());
        Ok(Arc::new(AnyBackend::from(Backed(Arc::new(b)))))
    })
    .clone()
}

/// The process-wide backend, chosen on first use (what the C ABI and `Runtime::auto` share).
pub fn backend() -> Result<&'static Arc<AnyBackend>> {
    static BACKEND: OnceLock<Result<Arc<AnyBackend>>> = OnceLock::new();
    BACKEND.get_or_init(choose).as_ref().map_err(Clone::clone)
}
