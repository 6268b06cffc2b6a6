//! Initialisation, versions, device selection and peer access.

use crate::boundary::{export, put, with_context, with_driver};
use crate::context;
use crate::status::{Failure, cu};
use crate::types::{HIP_VERSION, HipError};
use cudarc::driver::sys;
use std::ffi::c_char;

/// `hipInit`: loads and initialises the CUDA driver ("no device" without libcuda).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipInit(_flags: u32) -> HipError {
    with_driver("hipInit", || Ok(()))
}

/// `hipRuntimeGetVersion`: [`HIP_VERSION`], the HIP release whose behaviour this runtime follows.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipRuntimeGetVersion(version: *mut i32) -> HipError {
    // SAFETY: HIP's contract: `version` is null or writable.
    export("hipRuntimeGetVersion", || unsafe {
        put(version, HIP_VERSION)
    })
}

/// `hipDriverGetVersion`: the CUDA driver's version (e.g. 13000), which backend-hip only logs.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipDriverGetVersion(version: *mut i32) -> HipError {
    with_driver("hipDriverGetVersion", || {
        let mut v = 0;
        // SAFETY: `v` is a valid out-pointer.
        cu("cuDriverGetVersion", unsafe {
            sys::cuDriverGetVersion(&mut v)
        })?;
        // SAFETY: HIP's contract: `version` is null or writable.
        unsafe { put(version, v) }
    })
}

/// `hipGetDeviceCount`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGetDeviceCount(count: *mut i32) -> HipError {
    with_driver("hipGetDeviceCount", || {
        let n = context::count()?;
        // SAFETY: HIP's contract: `count` is null or writable.
        unsafe { put(count, n as i32) }?;
        if n == 0 {
            return Err(Failure::new(
                HipError::NO_DEVICE,
                "the CUDA driver reports no device",
            ));
        }
        Ok(())
    })
}

/// `hipSetDevice`: the device's primary context becomes current on this thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipSetDevice(device: i32) -> HipError {
    with_driver("hipSetDevice", || context::set_current(device))
}

/// `hipGetDevice`: this thread's current device (0 before any `hipSetDevice`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGetDevice(device: *mut i32) -> HipError {
    with_driver("hipGetDevice", || {
        let d = context::current()?;
        // SAFETY: HIP's contract: `device` is null or writable.
        unsafe { put(device, d) }
    })
}

/// `hipDeviceCanAccessPeer`: whether `device` can access memory of `peer`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipDeviceCanAccessPeer(can: *mut i32, device: i32, peer: i32) -> HipError {
    with_driver("hipDeviceCanAccessPeer", || {
        let (d, p) = (context::device(device)?, context::device(peer)?);
        let mut v = 0;
        if device != peer {
            // SAFETY: both are valid devices; `v` is a valid out-pointer.
            cu("cuDeviceCanAccessPeer", unsafe {
                sys::cuDeviceCanAccessPeer(&mut v, d, p)
            })?;
        }
        // SAFETY: HIP's contract: `can` is null or writable.
        unsafe { put(can, v) }
    })
}

/// `hipDeviceEnablePeerAccess`: the current device may access memory of `peer` from now on.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipDeviceEnablePeerAccess(peer: i32, _flags: u32) -> HipError {
    with_context("hipDeviceEnablePeerAccess", || {
        let ctx = context::primary(peer)?;
        // SAFETY: `ctx` is a retained primary context; CUDA's flags must be 0.
        cu("cuCtxEnablePeerAccess", unsafe {
            sys::cuCtxEnablePeerAccess(ctx, 0)
        })
    })
}

/// `hipDeviceGetPCIBusId` -> `cuDeviceGetPCIBusId` (`DDDD:BB:DD.F`, NUL-terminated in `len`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipDeviceGetPCIBusId(
    bus_id: *mut c_char,
    len: i32,
    device: i32,
) -> HipError {
    with_driver("hipDeviceGetPCIBusId", || {
        let d = context::device(device)?;
        // SAFETY: `d` is a valid device; HIP's contract: `bus_id` is writable for `len` bytes.
        cu("cuDeviceGetPCIBusId", unsafe {
            sys::cuDeviceGetPCIBusId(bus_id, len, d)
        })
    })
}

/// `hipDeviceAttributeMultiprocessorCount` (the value in ROCm's `hipDeviceAttribute_t`).
pub const ATTR_MULTIPROCESSOR_COUNT: u32 = 63;

/// `hipDeviceGetAttribute` -> `cuDeviceGetAttribute`, for the attributes backend-hip asks for
/// (the multiprocessor count); any other is `hipErrorInvalidValue`: HIP numbers its attributes
/// its own way, and a wrong mapping would answer silently wrong.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipDeviceGetAttribute(
    value: *mut i32,
    attr: u32,
    device: i32,
) -> HipError {
    with_driver("hipDeviceGetAttribute", || {
        let d = context::device(device)?;
        let cuda = match attr {
            ATTR_MULTIPROCESSOR_COUNT => {
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
            }
            other => {
                return Err(Failure::invalid(format!(
                    "hipDeviceAttribute_t {other} is not mapped by this test runtime"
                )));
            }
        };
        let mut v = 0;
        // SAFETY: `d` is a valid device; `v` is a valid out-pointer.
        cu("cuDeviceGetAttribute", unsafe {
            sys::cuDeviceGetAttribute(&mut v, cuda, d)
        })?;
        // SAFETY: HIP's contract: `value` is null or writable.
        unsafe { put(value, v) }
    })
}
