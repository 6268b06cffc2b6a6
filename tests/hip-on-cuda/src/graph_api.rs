//! Graph capture and graphs: HIP's capture modes, statuses and graph calls are CUDA's, value for
//! value (`hipStreamCaptureModeGlobal` 0, `ThreadLocal` 1, `Relaxed` 2), so each forwards as is.

use crate::boundary::{put, with_context, with_driver};
use crate::status::{Failure, cu};
use crate::types::{HipError, HipStream};
use cudarc::driver::sys;
use std::ffi::c_void;

/// A HIP capture mode as CUDA's (the same numbers); anything else is `hipErrorInvalidValue`.
fn mode(m: u32) -> Result<sys::CUstreamCaptureMode, Failure> {
    Ok(match m {
        0 => sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
        1 => sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
        2 => sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        other => return Err(Failure::invalid(format!("hipStreamCaptureMode {other}"))),
    })
}

/// `hipThreadExchangeStreamCaptureMode` -> `cuThreadExchangeStreamCaptureMode`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipThreadExchangeStreamCaptureMode(m: *mut u32) -> HipError {
    with_driver("hipThreadExchangeStreamCaptureMode", || {
        if m.is_null() {
            return Err(Failure::invalid("a null capture mode"));
        }
        // SAFETY: non-null, and HIP's contract makes it readable.
        let mut cuda = mode(unsafe { m.read() })?;
        // SAFETY: `cuda` is a valid mode, written back with the previous one.
        cu("cuThreadExchangeStreamCaptureMode", unsafe {
            sys::cuThreadExchangeStreamCaptureMode(&mut cuda)
        })?;
        // SAFETY: as above.
        unsafe { put(m, cuda as u32) }
    })
}

/// `hipStreamBeginCapture` -> `cuStreamBeginCapture`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamBeginCapture(stream: HipStream, m: u32) -> HipError {
    with_context("hipStreamBeginCapture", || {
        let m = mode(m)?;
        // SAFETY: HIP's contract: a live stream.
        cu("cuStreamBeginCapture", unsafe {
            sys::cuStreamBeginCapture_v2(stream.cast(), m)
        })
    })
}

/// `hipStreamEndCapture` -> `cuStreamEndCapture`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamEndCapture(
    stream: HipStream,
    graph: *mut *mut c_void,
) -> HipError {
    with_context("hipStreamEndCapture", || {
        let mut g: sys::CUgraph = std::ptr::null_mut();
        // SAFETY: HIP's contract: a capturing stream; `g` is a valid out-pointer.
        cu("cuStreamEndCapture", unsafe {
            sys::cuStreamEndCapture(stream.cast(), &mut g)
        })?;
        // SAFETY: HIP's contract: `graph` is null or writable.
        unsafe { put(graph, g.cast()) }
    })
}

/// `hipGraphInstantiate` -> `cuGraphInstantiateWithFlags` (no error node or log: CUDA 12 dropped
/// them from instantiation).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphInstantiate(
    exec: *mut *mut c_void,
    graph: *mut c_void,
    _error_node: *mut *mut c_void,
    _log: *mut std::ffi::c_char,
    _log_bytes: usize,
) -> HipError {
    with_context("hipGraphInstantiate", || {
        let mut e: sys::CUgraphExec = std::ptr::null_mut();
        // SAFETY: HIP's contract: a live graph; `e` is a valid out-pointer.
        cu("cuGraphInstantiateWithFlags", unsafe {
            sys::cuGraphInstantiateWithFlags(&mut e, graph.cast(), 0)
        })?;
        // SAFETY: HIP's contract: `exec` is null or writable.
        unsafe { put(exec, e.cast()) }
    })
}

/// `hipGraphLaunch` -> `cuGraphLaunch`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphLaunch(exec: *mut c_void, stream: HipStream) -> HipError {
    with_context("hipGraphLaunch", || {
        // SAFETY: HIP's contract: a live executable graph and stream.
        cu("cuGraphLaunch", unsafe {
            sys::cuGraphLaunch(exec.cast(), stream.cast())
        })
    })
}

/// `hipGraphDestroy` -> `cuGraphDestroy`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphDestroy(graph: *mut c_void) -> HipError {
    with_context("hipGraphDestroy", || {
        // SAFETY: HIP's contract: a live graph, not used afterwards.
        cu("cuGraphDestroy", unsafe {
            sys::cuGraphDestroy(graph.cast())
        })
    })
}

/// `hipGraphExecDestroy` -> `cuGraphExecDestroy`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphExecDestroy(exec: *mut c_void) -> HipError {
    with_context("hipGraphExecDestroy", || {
        // SAFETY: HIP's contract: a live executable graph, not used afterwards.
        cu("cuGraphExecDestroy", unsafe {
            sys::cuGraphExecDestroy(exec.cast())
        })
    })
}

/// `hipGraphGetNodes` -> `cuGraphGetNodes` (null `nodes`: only the count is written).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGraphGetNodes(
    graph: *mut c_void,
    nodes: *mut *mut c_void,
    count: *mut usize,
) -> HipError {
    with_context("hipGraphGetNodes", || {
        if count.is_null() {
            return Err(Failure::invalid("a null node count"));
        }
        // SAFETY: HIP's contract: a live graph; `nodes` is null or holds `*count` entries, and
        // `count` is readable and writable (checked non-null above).
        cu("cuGraphGetNodes", unsafe {
            sys::cuGraphGetNodes(graph.cast(), nodes.cast(), count)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_modes_are_cudas_and_others_are_refused() {
        assert_eq!(
            mode(0).unwrap(),
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL
        );
        assert_eq!(
            mode(1).unwrap(),
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        );
        assert_eq!(
            mode(2).unwrap(),
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED
        );
        assert_eq!(mode(3).unwrap_err().code, HipError::INVALID_VALUE);
    }
}
