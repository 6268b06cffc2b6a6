//! Streams, events and capture status. A query's "not yet" is `hipErrorNotReady`, which CUDA's
//! `CUDA_ERROR_NOT_READY` maps to (the same number).

use crate::boundary::{put, with_context};
use crate::status::{Failure, cu};
use crate::types::{
    EVENT_AMD_HINTS, EVENT_CUDA_FLAGS, HipError, HipEvent, HipStream, STREAM_NON_BLOCKING,
};
use cudarc::driver::sys;
use std::ffi::c_void;

/// `hipStreamCreateWithFlags` -> `cuStreamCreate` (`hipStreamNonBlocking` is CUDA's value).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamCreateWithFlags(stream: *mut HipStream, flags: u32) -> HipError {
    with_context("hipStreamCreateWithFlags", || {
        if flags & !STREAM_NON_BLOCKING != 0 {
            return Err(Failure::invalid(format!("stream flags {flags:#x}")));
        }
        let mut s: sys::CUstream = std::ptr::null_mut();
        // SAFETY: a context is current; `s` is a valid out-pointer.
        cu("cuStreamCreate", unsafe {
            sys::cuStreamCreate(&mut s, flags)
        })?;
        // SAFETY: HIP's contract: `stream` is null or writable.
        unsafe { put(stream, s.cast()) }
    })
}

/// `hipStreamDestroy` -> `cuStreamDestroy`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamDestroy(stream: HipStream) -> HipError {
    with_context("hipStreamDestroy", || {
        // SAFETY: HIP's contract: a live stream of this runtime, not used afterwards.
        cu("cuStreamDestroy", unsafe {
            sys::cuStreamDestroy_v2(stream.cast())
        })
    })
}

/// `hipStreamSynchronize` -> `cuStreamSynchronize` (null: the current device's null stream).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamSynchronize(stream: HipStream) -> HipError {
    with_context("hipStreamSynchronize", || {
        // SAFETY: HIP's contract: null or a live stream.
        cu("cuStreamSynchronize", unsafe {
            sys::cuStreamSynchronize(stream.cast())
        })
    })
}

/// `hipStreamQuery` -> `cuStreamQuery`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamQuery(stream: HipStream) -> HipError {
    with_context("hipStreamQuery", || {
        // SAFETY: HIP's contract: null or a live stream.
        cu("cuStreamQuery", unsafe {
            sys::cuStreamQuery(stream.cast())
        })
    })
}

/// `hipStreamIsCapturing` -> `cuStreamIsCapturing` (HIP's status values are CUDA's).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamIsCapturing(stream: HipStream, status: *mut u32) -> HipError {
    with_context("hipStreamIsCapturing", || {
        let mut s = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: `s` is a valid out-pointer; HIP's contract: null or a live stream.
        cu("cuStreamIsCapturing", unsafe {
            sys::cuStreamIsCapturing(stream.cast(), &mut s)
        })?;
        // SAFETY: HIP's contract: `status` is null or writable.
        unsafe { put(status, s as u32) }
    })
}

/// `hipStreamWaitEvent` -> `cuStreamWaitEvent`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamWaitEvent(
    stream: HipStream,
    event: HipEvent,
    _flags: u32,
) -> HipError {
    with_context("hipStreamWaitEvent", || {
        // SAFETY: HIP's contract: live handles (or the null stream); CUDA's flags must be 0.
        cu("cuStreamWaitEvent", unsafe {
            sys::cuStreamWaitEvent(stream.cast(), event.cast(), 0)
        })
    })
}

/// `hipStreamWriteValue32` -> `cuStreamWriteValue32_v2` (flags 0 on both: the write follows
/// the stream's earlier work).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamWriteValue32(
    stream: HipStream,
    ptr: *mut c_void,
    value: u32,
    flags: u32,
) -> HipError {
    with_context("hipStreamWriteValue32", || {
        if flags != 0 {
            return Err(Failure::invalid(format!("stream write flags {flags:#x}")));
        }
        // SAFETY: HIP's contract: `ptr` is a device word that stays until the write has run,
        // and the stream is null or live.
        cu("cuStreamWriteValue32_v2", unsafe {
            sys::cuStreamWriteValue32_v2(stream.cast(), ptr as u64, value, 0)
        })
    })
}

/// `hipStreamWriteValue64` -> `cuStreamWriteValue64_v2`, as the 32-bit one.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamWriteValue64(
    stream: HipStream,
    ptr: *mut c_void,
    value: u64,
    flags: u32,
) -> HipError {
    with_context("hipStreamWriteValue64", || {
        if flags != 0 {
            return Err(Failure::invalid(format!("stream write flags {flags:#x}")));
        }
        // SAFETY: as for the 32-bit write.
        cu("cuStreamWriteValue64_v2", unsafe {
            sys::cuStreamWriteValue64_v2(stream.cast(), ptr as u64, value, 0)
        })
    })
}

/// `hipEventCreateWithFlags` -> `cuEventCreate` (blocking-sync, disable-timing and
/// interprocess are CUDA's values; AMD's cache-release hints are dropped).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventCreateWithFlags(event: *mut HipEvent, flags: u32) -> HipError {
    with_context("hipEventCreateWithFlags", || {
        if flags & !(EVENT_CUDA_FLAGS | EVENT_AMD_HINTS) != 0 {
            return Err(Failure::invalid(format!("event flags {flags:#x}")));
        }
        let mut e: sys::CUevent = std::ptr::null_mut();
        // SAFETY: a context is current; `e` is a valid out-pointer; the flags are CUDA's.
        cu("cuEventCreate", unsafe {
            sys::cuEventCreate(&mut e, flags & EVENT_CUDA_FLAGS)
        })?;
        // SAFETY: HIP's contract: `event` is null or writable.
        unsafe { put(event, e.cast()) }
    })
}

/// `hipEventRecord` -> `cuEventRecord`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventRecord(event: HipEvent, stream: HipStream) -> HipError {
    with_context("hipEventRecord", || {
        // SAFETY: HIP's contract: a live event and null or a live stream.
        cu("cuEventRecord", unsafe {
            sys::cuEventRecord(event.cast(), stream.cast())
        })
    })
}

/// `hipEventSynchronize` -> `cuEventSynchronize`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventSynchronize(event: HipEvent) -> HipError {
    with_context("hipEventSynchronize", || {
        // SAFETY: HIP's contract: a live event.
        cu("cuEventSynchronize", unsafe {
            sys::cuEventSynchronize(event.cast())
        })
    })
}

/// `hipEventQuery` -> `cuEventQuery`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventQuery(event: HipEvent) -> HipError {
    with_context("hipEventQuery", || {
        // SAFETY: HIP's contract: a live event.
        cu("cuEventQuery", unsafe { sys::cuEventQuery(event.cast()) })
    })
}

/// `hipEventDestroy` -> `cuEventDestroy`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventDestroy(event: HipEvent) -> HipError {
    with_context("hipEventDestroy", || {
        // SAFETY: HIP's contract: a live event, not used afterwards.
        cu("cuEventDestroy", unsafe {
            sys::cuEventDestroy_v2(event.cast())
        })
    })
}
