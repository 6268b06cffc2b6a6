//! Virtual memory management (`hipMem*` -> `cuMem*`) and its shareable handles (POSIX file
//! descriptors). HIP's structures are converted field by field: HIP and CUDA share the numbers
//! of every value used here, but the CUDA side is Rust enums that must hold defined values.

use crate::boundary::{put, with_context};
use crate::status::{Failure, HipResult, cu};
use crate::types::{
    HipError, HipMemAccessDesc, HipMemAllocationProp, HipMemHandle, HipMemLocation,
};
use cudarc::driver::sys;
use std::ffi::c_void;

/// CUDA's location for HIP's (only devices exist in HIP 5/6's enum).
pub fn location(hip: &HipMemLocation) -> HipResult<sys::CUmemLocation> {
    let kind = match hip.kind {
        1 => sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        k => return Err(Failure::invalid(format!("hipMemLocationType {k}"))),
    };
    Ok(sys::CUmemLocation {
        type_: kind,
        id: hip.id,
    })
}

/// CUDA's handle type for HIP's `hipMemAllocationHandleType` (none or a POSIX descriptor).
pub fn handle_type(hip: u32) -> HipResult<sys::CUmemAllocationHandleType> {
    match hip {
        0 => Ok(sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE),
        1 => Ok(sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
        t => Err(Failure::new(
            HipError::NOT_SUPPORTED,
            format!("hipMemAllocationHandleType {t} (only POSIX descriptors on Linux)"),
        )),
    }
}

/// CUDA's allocation property for HIP's (5.3+ layout).
pub fn allocation_prop(hip: &HipMemAllocationProp) -> HipResult<sys::CUmemAllocationProp> {
    let kind = match hip.kind {
        1 => sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        k => return Err(Failure::invalid(format!("hipMemAllocationType {k}"))),
    };
    Ok(sys::CUmemAllocationProp {
        type_: kind,
        requestedHandleTypes: handle_type(hip.requested_handle_type)?,
        location: location(&hip.location)?,
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
            compressionType: hip.compression_type,
            gpuDirectRDMACapable: hip.gpu_direct_rdma_capable,
            usage: hip.usage,
            reserved: [0; 4],
        },
    })
}

/// CUDA's access descriptor for HIP's.
pub fn access(hip: &HipMemAccessDesc) -> HipResult<sys::CUmemAccessDesc> {
    use sys::CUmemAccess_flags as F;
    let flags = match hip.flags {
        0 => F::CU_MEM_ACCESS_FLAGS_PROT_NONE,
        1 => F::CU_MEM_ACCESS_FLAGS_PROT_READ,
        3 => F::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        f => return Err(Failure::invalid(format!("hipMemAccessFlags {f}"))),
    };
    Ok(sys::CUmemAccessDesc {
        location: location(&hip.location)?,
        flags,
    })
}

/// Reads a caller's `hipMemAllocationProp`.
///
/// # Safety
/// `prop` is null or points to a HIP 5.3+ `hipMemAllocationProp`.
unsafe fn read_prop(prop: *const HipMemAllocationProp) -> HipResult<sys::CUmemAllocationProp> {
    if prop.is_null() {
        return Err(Failure::invalid("a null hipMemAllocationProp"));
    }
    // SAFETY: non-null and readable by the caller's contract.
    allocation_prop(unsafe { &*prop })
}

/// `hipMemCreate` -> `cuMemCreate`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemCreate(
    handle: *mut HipMemHandle,
    size: usize,
    prop: *const HipMemAllocationProp,
    flags: u64,
) -> HipError {
    with_context("hipMemCreate", || {
        // SAFETY: HIP's contract for `prop`.
        let p = unsafe { read_prop(prop) }?;
        let mut h = 0;
        // SAFETY: `h` is a valid out-pointer; `p` is a complete CUDA property.
        cu("cuMemCreate", unsafe {
            sys::cuMemCreate(&mut h, size, &p, flags)
        })?;
        // SAFETY: HIP's contract: `handle` is null or writable.
        unsafe { put(handle, h as usize as HipMemHandle) }
    })
}

/// `hipMemRelease` -> `cuMemRelease`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemRelease(handle: HipMemHandle) -> HipError {
    with_context("hipMemRelease", || {
        // SAFETY: HIP's contract: the handle came from hipMemCreate or an import.
        cu("cuMemRelease", unsafe { sys::cuMemRelease(handle as u64) })
    })
}

/// `hipMemAddressReserve` -> `cuMemAddressReserve`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemAddressReserve(
    ptr: *mut *mut c_void,
    size: usize,
    alignment: usize,
    addr: *mut c_void,
    flags: u64,
) -> HipError {
    with_context("hipMemAddressReserve", || {
        let mut p = 0;
        // SAFETY: `p` is a valid out-pointer; CUDA checks the sizes and the hint.
        cu("cuMemAddressReserve", unsafe {
            sys::cuMemAddressReserve(&mut p, size, alignment, addr as u64, flags)
        })?;
        // SAFETY: HIP's contract: `ptr` is null or writable.
        unsafe { put(ptr, p as *mut c_void) }
    })
}

/// `hipMemAddressFree` -> `cuMemAddressFree`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemAddressFree(ptr: *mut c_void, size: usize) -> HipError {
    with_context("hipMemAddressFree", || {
        // SAFETY: HIP's contract: a whole, unmapped reservation.
        cu("cuMemAddressFree", unsafe {
            sys::cuMemAddressFree(ptr as u64, size)
        })
    })
}

/// `hipMemMap` -> `cuMemMap`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemMap(
    ptr: *mut c_void,
    size: usize,
    offset: usize,
    handle: HipMemHandle,
    flags: u64,
) -> HipError {
    with_context("hipMemMap", || {
        // SAFETY: HIP's contract: a reserved range and a live allocation handle.
        cu("cuMemMap", unsafe {
            sys::cuMemMap(ptr as u64, size, offset, handle as u64, flags)
        })
    })
}

/// `hipMemUnmap` -> `cuMemUnmap`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemUnmap(ptr: *mut c_void, size: usize) -> HipError {
    with_context("hipMemUnmap", || {
        // SAFETY: HIP's contract: a mapped range nothing uses any more.
        cu("cuMemUnmap", unsafe { sys::cuMemUnmap(ptr as u64, size) })
    })
}

/// `hipMemSetAccess` -> `cuMemSetAccess` (each descriptor converted).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemSetAccess(
    ptr: *mut c_void,
    size: usize,
    desc: *const HipMemAccessDesc,
    count: usize,
) -> HipError {
    with_context("hipMemSetAccess", || {
        if desc.is_null() || count == 0 {
            return Err(Failure::invalid("no hipMemAccessDesc"));
        }
        // SAFETY: HIP's contract: `desc` points to `count` descriptors.
        let hip = unsafe { std::slice::from_raw_parts(desc, count) };
        let cuda = hip.iter().map(access).collect::<HipResult<Vec<_>>>()?;
        // SAFETY: `cuda` holds `count` descriptors; HIP's contract covers the range.
        cu("cuMemSetAccess", unsafe {
            sys::cuMemSetAccess(ptr as u64, size, cuda.as_ptr(), cuda.len())
        })
    })
}

/// `hipMemGetAllocationGranularity` -> `cuMemGetAllocationGranularity`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemGetAllocationGranularity(
    granularity: *mut usize,
    prop: *const HipMemAllocationProp,
    option: u32,
) -> HipError {
    with_context("hipMemGetAllocationGranularity", || {
        use sys::CUmemAllocationGranularity_flags as G;
        // SAFETY: HIP's contract for `prop`.
        let p = unsafe { read_prop(prop) }?;
        let option = match option {
            0 => G::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
            1 => G::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED,
            o => return Err(Failure::invalid(format!("granularity option {o}"))),
        };
        let mut g = 0;
        // SAFETY: `g` is a valid out-pointer; `p` is a complete CUDA property.
        cu("cuMemGetAllocationGranularity", unsafe {
            sys::cuMemGetAllocationGranularity(&mut g, &p, option)
        })?;
        // SAFETY: HIP's contract: `granularity` is null or writable.
        unsafe { put(granularity, g) }
    })
}

/// `hipMemExportToShareableHandle` -> `cuMemExportToShareableHandle` (a POSIX descriptor is
/// written as an `int` to `shareable`, as in both runtimes).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemExportToShareableHandle(
    shareable: *mut c_void,
    handle: HipMemHandle,
    kind: u32,
    flags: u64,
) -> HipError {
    with_context("hipMemExportToShareableHandle", || {
        let kind = handle_type(kind)?;
        if shareable.is_null() {
            return Err(Failure::invalid("a null shareable handle"));
        }
        // SAFETY: HIP's contract: `shareable` has room for the handle type's value (an int for
        // a descriptor) and `handle` is a live allocation created exportable.
        cu("cuMemExportToShareableHandle", unsafe {
            sys::cuMemExportToShareableHandle(shareable, handle as u64, kind, flags)
        })
    })
}

/// `hipMemImportFromShareableHandle` -> `cuMemImportFromShareableHandle` (a POSIX descriptor is
/// passed as its value cast to a pointer, as in both runtimes; it stays the caller's).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemImportFromShareableHandle(
    handle: *mut HipMemHandle,
    os_handle: *mut c_void,
    kind: u32,
) -> HipError {
    with_context("hipMemImportFromShareableHandle", || {
        let kind = handle_type(kind)?;
        let mut h = 0;
        // SAFETY: `h` is a valid out-pointer; the OS handle is the caller's descriptor.
        cu("cuMemImportFromShareableHandle", unsafe {
            sys::cuMemImportFromShareableHandle(&mut h, os_handle, kind)
        })?;
        // SAFETY: HIP's contract: `handle` is null or writable.
        unsafe { put(handle, h as usize as HipMemHandle) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What backend-hip writes (runtime.rs `AllocProp::new` for HIP 5.3+): a pinned allocation on
    /// device 3, exportable as a POSIX descriptor.
    #[test]
    fn backend_hips_property_becomes_cudas() {
        let hip = HipMemAllocationProp {
            kind: 1,
            requested_handle_type: 1,
            location: HipMemLocation { kind: 1, id: 3 },
            win32_handle_meta_data: std::ptr::null_mut(),
            compression_type: 0,
            gpu_direct_rdma_capable: 0,
            usage: 0,
        };
        let c = allocation_prop(&hip).unwrap();
        assert_eq!(
            c.type_,
            sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED
        );
        assert_eq!(
            c.requestedHandleTypes,
            sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
        );
        assert_eq!(
            c.location.type_,
            sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE
        );
        assert_eq!(c.location.id, 3);
    }

    #[test]
    fn undefined_values_are_refused_not_transmuted() {
        let bad = HipMemAccessDesc {
            location: HipMemLocation { kind: 1, id: 0 },
            flags: 2,
        };
        assert_eq!(access(&bad).unwrap_err().code, HipError::INVALID_VALUE);
        let nowhere = HipMemLocation { kind: 7, id: 0 };
        assert_eq!(
            location(&nowhere).unwrap_err().code,
            HipError::INVALID_VALUE
        );
        assert_eq!(handle_type(2).unwrap_err().code, HipError::NOT_SUPPORTED);
        let rw = HipMemAccessDesc {
            location: HipMemLocation { kind: 1, id: 1 },
            flags: 3,
        };
        assert_eq!(
            access(&rw).unwrap().flags,
            sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE
        );
    }
}
