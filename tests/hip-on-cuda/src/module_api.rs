//! Code objects and launches (`hipModule*` -> `cuModule*`, `cuLaunchKernel`). The code object
//! is a CUDA fatbin or cubin: backend-hip's kernels built by nvcc with HIP's launch ABI
//! (`OXCCL_HIP_LAUNCH_ABI`), whose 32-byte parameter is what backend-hip passes.

use crate::boundary::{put, with_context};
use crate::status::{Failure, HipResult, cu};
use crate::types::{
    HipError, HipFunction, HipModule, HipStream, LAUNCH_PARAM_BUFFER_POINTER,
    LAUNCH_PARAM_BUFFER_SIZE, LAUNCH_PARAM_END,
};
use cudarc::driver::sys;
use std::ffi::{c_char, c_void};

/// `hipModuleLoadData` -> `cuModuleLoadData` (into the current device's context).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipModuleLoadData(
    module: *mut HipModule,
    image: *const c_void,
) -> HipError {
    with_context("hipModuleLoadData", || {
        if image.is_null() {
            return Err(Failure::invalid("a null code object"));
        }
        let mut m: sys::CUmodule = std::ptr::null_mut();
        // SAFETY: `m` is a valid out-pointer; HIP's contract: `image` is a whole code object,
        // which CUDA parses (and rejects when it is not a fatbin, cubin or PTX).
        cu("cuModuleLoadData", unsafe {
            sys::cuModuleLoadData(&mut m, image)
        })?;
        // SAFETY: HIP's contract: `module` is null or writable.
        unsafe { put(module, m.cast()) }
    })
}

/// `hipModuleUnload` -> `cuModuleUnload`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipModuleUnload(module: HipModule) -> HipError {
    with_context("hipModuleUnload", || {
        // SAFETY: HIP's contract: a loaded module whose kernels have finished.
        cu("cuModuleUnload", unsafe {
            sys::cuModuleUnload(module.cast())
        })
    })
}

/// `hipModuleGetFunction` -> `cuModuleGetFunction` (a missing name is `hipErrorNotFound`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipModuleGetFunction(
    function: *mut HipFunction,
    module: HipModule,
    name: *const c_char,
) -> HipError {
    with_context("hipModuleGetFunction", || {
        if name.is_null() {
            return Err(Failure::invalid("a null kernel name"));
        }
        let mut f: sys::CUfunction = std::ptr::null_mut();
        // SAFETY: `f` is a valid out-pointer; HIP's contract: a loaded module and a
        // NUL-terminated name.
        cu("cuModuleGetFunction", unsafe {
            sys::cuModuleGetFunction(&mut f, module.cast(), name)
        })?;
        // SAFETY: HIP's contract: `function` is null or writable.
        unsafe { put(function, f.cast()) }
    })
}

/// CUDA's `extra` array for HIP's: the same keys, but HIP ends the list with 3 where CUDA ends
/// it with 0. `None` for no list.
///
/// # Safety
/// `extra` is null or a HIP launch-parameter list: key/value pairs ended by
/// `HIP_LAUNCH_PARAM_END`.
pub unsafe fn cuda_extra(extra: *mut *mut c_void) -> HipResult<Option<Vec<*mut c_void>>> {
    if extra.is_null() {
        return Ok(None);
    }
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        // SAFETY: the list is readable up to and including its end marker (caller).
        let key = unsafe { *extra.add(i) } as usize;
        match key {
            LAUNCH_PARAM_END => break,
            LAUNCH_PARAM_BUFFER_POINTER | LAUNCH_PARAM_BUFFER_SIZE => {
                // SAFETY: every key but the end marker is followed by its value (caller).
                let value = unsafe { *extra.add(i + 1) };
                out.extend([key as *mut c_void, value]);
                i += 2;
            }
            k => return Err(Failure::invalid(format!("launch parameter key {k:#x}"))),
        }
    }
    out.push(sys::CU_LAUNCH_PARAM_END_AS_INT as usize as *mut c_void);
    Ok(Some(out))
}

/// `hipModuleLaunchKernel` -> `cuLaunchKernel` (the `extra` list translated by [`cuda_extra`]).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipModuleLaunchKernel(
    f: HipFunction,
    grid_x: u32,
    grid_y: u32,
    grid_z: u32,
    block_x: u32,
    block_y: u32,
    block_z: u32,
    shared_bytes: u32,
    stream: HipStream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> HipError {
    with_context("hipModuleLaunchKernel", || {
        // SAFETY: HIP's contract for `extra`.
        let mut extra = unsafe { cuda_extra(extra) }?;
        let extra_ptr = extra
            .as_mut()
            .map_or(std::ptr::null_mut(), |v| v.as_mut_ptr());
        // SAFETY: HIP's contract: `f` is a function of a loaded module of the stream's device,
        // and `params` points to one argument per kernel parameter of the kernel's sizes.
        cu("cuLaunchKernel", unsafe {
            sys::cuLaunchKernel(
                f.cast(),
                grid_x,
                grid_y,
                grid_z,
                block_x,
                block_y,
                block_z,
                shared_bytes,
                stream.cast(),
                params,
                extra_ptr,
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_extra_list_gets_cudas_end_marker() {
        let mut size = 32usize;
        let mut buf = [0u8; 32];
        let mut hip: [*mut c_void; 5] = [
            LAUNCH_PARAM_BUFFER_POINTER as *mut c_void,
            buf.as_mut_ptr().cast(),
            LAUNCH_PARAM_BUFFER_SIZE as *mut c_void,
            (&mut size as *mut usize).cast(),
            LAUNCH_PARAM_END as *mut c_void,
        ];
        // SAFETY: a well-formed list.
        let cuda = unsafe { cuda_extra(hip.as_mut_ptr()) }.unwrap().unwrap();
        assert_eq!(cuda.len(), 5);
        assert_eq!(cuda[0] as usize, 1);
        assert_eq!(cuda[1], hip[1]);
        assert_eq!(cuda[2] as usize, 2);
        assert_eq!(cuda[4] as usize, 0, "CU_LAUNCH_PARAM_END");
        // SAFETY: null is allowed.
        let none = unsafe { cuda_extra(std::ptr::null_mut()) };
        assert!(none.unwrap().is_none());
        let mut bad: [*mut c_void; 2] = [9 as *mut c_void, std::ptr::null_mut()];
        // SAFETY: a list whose first key is unknown is rejected before anything else is read.
        let err = unsafe { cuda_extra(bad.as_mut_ptr()) }.unwrap_err();
        assert_eq!(err.code, HipError::INVALID_VALUE);
    }
}
