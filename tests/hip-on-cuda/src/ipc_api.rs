//! Legacy IPC handles of `hipMalloc` memory (`hipIpc*` -> `cuIpc*`; both handles are 64 bytes).

use crate::boundary::{put, with_context};
use crate::status::cu;
use crate::types::{HipError, HipIpcMemHandle};
use cudarc::driver::sys;
use std::ffi::c_void;

/// `hipIpcGetMemHandle` -> `cuIpcGetMemHandle`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipIpcGetMemHandle(
    handle: *mut HipIpcMemHandle,
    ptr: *mut c_void,
) -> HipError {
    with_context("hipIpcGetMemHandle", || {
        let mut h = sys::CUipcMemHandle { reserved: [0; 64] };
        // SAFETY: `h` is a valid out-pointer; CUDA checks that `ptr` is a cuMemAlloc base.
        cu("cuIpcGetMemHandle", unsafe {
            sys::cuIpcGetMemHandle(&mut h, ptr as u64)
        })?;
        // SAFETY: HIP's contract: `handle` is null or writable.
        unsafe {
            put(
                handle,
                HipIpcMemHandle {
                    reserved: h.reserved,
                },
            )
        }
    })
}

/// `hipIpcOpenMemHandle` -> `cuIpcOpenMemHandle`, always with lazy peer access (CUDA's only
/// flag; HIP's runtime enables peer access too).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipIpcOpenMemHandle(
    ptr: *mut *mut c_void,
    handle: HipIpcMemHandle,
    _flags: u32,
) -> HipError {
    with_context("hipIpcOpenMemHandle", || {
        let h = sys::CUipcMemHandle {
            reserved: handle.reserved,
        };
        let mut p = 0;
        let lazy = sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32;
        // SAFETY: `p` is a valid out-pointer; CUDA validates the handle.
        cu("cuIpcOpenMemHandle", unsafe {
            sys::cuIpcOpenMemHandle_v2(&mut p, h, lazy)
        })?;
        // SAFETY: HIP's contract: `ptr` is null or writable.
        unsafe { put(ptr, p as *mut c_void) }
    })
}

/// `hipIpcCloseMemHandle` -> `cuIpcCloseMemHandle`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipIpcCloseMemHandle(ptr: *mut c_void) -> HipError {
    with_context("hipIpcCloseMemHandle", || {
        // SAFETY: HIP's contract: `ptr` came from hipIpcOpenMemHandle and nothing uses it.
        cu("cuIpcCloseMemHandle", unsafe {
            sys::cuIpcCloseMemHandle(ptr as u64)
        })
    })
}
