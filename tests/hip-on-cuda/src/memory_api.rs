//! Plain device memory, pinned host memory, copies, fills and pointer queries.

use crate::boundary::{put, with_context};
use crate::status::{Failure, HipResult, cu};
use crate::types::{
    HOST_MALLOC_AMD_HINTS, HOST_MALLOC_MAPPED, HOST_MALLOC_PORTABLE, HOST_MALLOC_WRITE_COMBINED,
    HipError, HipPointerAttribute, HipStream, MEMCPY_DEFAULT, memory_type,
};
use cudarc::driver::sys;
use std::ffi::c_void;

/// `hipMalloc` -> `cuMemAlloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMalloc(ptr: *mut *mut c_void, size: usize) -> HipError {
    with_context("hipMalloc", || {
        let mut p = 0;
        // HIP returns null for 0 bytes; CUDA refuses them.
        if size > 0 {
            // SAFETY: a context is current; `p` is a valid out-pointer.
            cu("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut p, size) })?;
        }
        // SAFETY: HIP's contract: `ptr` is null or writable.
        unsafe { put(ptr, p as *mut c_void) }
    })
}

/// `hipFree` -> `cuMemFree` (null is a no-op, as in HIP).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipFree(ptr: *mut c_void) -> HipError {
    with_context("hipFree", || {
        if ptr.is_null() {
            return Ok(());
        }
        // SAFETY: HIP's contract: `ptr` came from hipMalloc and nothing uses it any more.
        cu("cuMemFree", unsafe { sys::cuMemFree_v2(ptr as u64) })
    })
}

/// CUDA's `cuMemHostAlloc` flags for HIP's `hipHostMalloc` flags. HIP's default (0) is mapped
/// and portable memory; AMD's coherence and NUMA hints have no CUDA meaning and are dropped.
pub fn host_alloc_flags(hip: u32) -> HipResult<u32> {
    let known = HOST_MALLOC_PORTABLE
        | HOST_MALLOC_MAPPED
        | HOST_MALLOC_WRITE_COMBINED
        | HOST_MALLOC_AMD_HINTS;
    if hip & !known != 0 {
        return Err(Failure::invalid(format!(
            "hipHostMalloc flags {hip:#x} are not HIP's"
        )));
    }
    let hip = hip & !HOST_MALLOC_AMD_HINTS;
    if hip == 0 {
        return Ok(sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP);
    }
    let mut cuda = 0;
    for (h, c) in [
        (HOST_MALLOC_PORTABLE, sys::CU_MEMHOSTALLOC_PORTABLE),
        (HOST_MALLOC_MAPPED, sys::CU_MEMHOSTALLOC_DEVICEMAP),
        (
            HOST_MALLOC_WRITE_COMBINED,
            sys::CU_MEMHOSTALLOC_WRITECOMBINED,
        ),
    ] {
        if hip & h != 0 {
            cuda |= c;
        }
    }
    Ok(cuda)
}

/// `hipHostMalloc` -> `cuMemHostAlloc` (flags mapped by [`host_alloc_flags`]).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipHostMalloc(ptr: *mut *mut c_void, size: usize, flags: u32) -> HipError {
    with_context("hipHostMalloc", || {
        let cuda = host_alloc_flags(flags)?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: a context is current; `p` is a valid out-pointer; the flags are CUDA's.
        cu("cuMemHostAlloc", unsafe {
            sys::cuMemHostAlloc(&mut p, size.max(1), cuda)
        })?;
        // SAFETY: HIP's contract: `ptr` is null or writable.
        unsafe { put(ptr, p) }
    })
}

/// `hipHostFree` -> `cuMemFreeHost` (null is a no-op).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipHostFree(ptr: *mut c_void) -> HipError {
    with_context("hipHostFree", || {
        if ptr.is_null() {
            return Ok(());
        }
        // SAFETY: HIP's contract: `ptr` came from hipHostMalloc and nothing uses it any more.
        cu("cuMemFreeHost", unsafe { sys::cuMemFreeHost(ptr) })
    })
}

/// `hipHostGetDevicePointer` -> `cuMemHostGetDevicePointer`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipHostGetDevicePointer(
    dev: *mut *mut c_void,
    host: *mut c_void,
    _flags: u32,
) -> HipError {
    with_context("hipHostGetDevicePointer", || {
        let mut d = 0;
        // SAFETY: `d` is a valid out-pointer; CUDA checks that `host` is mapped pinned memory.
        cu("cuMemHostGetDevicePointer", unsafe {
            sys::cuMemHostGetDevicePointer_v2(&mut d, host, 0)
        })?;
        // SAFETY: HIP's contract: `dev` is null or writable.
        unsafe { put(dev, d as *mut c_void) }
    })
}

/// `hipHostRegister` -> `cuMemHostRegister`: HIP's `hipHostRegisterPortable` (1) and
/// `hipHostRegisterMapped` (2) are CUDA's `CU_MEMHOSTREGISTER_PORTABLE` and `_DEVICEMAP`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipHostRegister(ptr: *mut c_void, size: usize, flags: u32) -> HipError {
    with_context("hipHostRegister", || {
        let known = sys::CU_MEMHOSTREGISTER_PORTABLE | sys::CU_MEMHOSTREGISTER_DEVICEMAP;
        if flags & !known != 0 {
            return Err(Failure::invalid(format!(
                "hipHostRegister flags {flags:#x}"
            )));
        }
        // SAFETY: HIP's contract: `ptr..ptr+size` is mapped host memory that stays mapped
        // until hipHostUnregister.
        cu("cuMemHostRegister", unsafe {
            sys::cuMemHostRegister_v2(ptr, size, flags)
        })
    })
}

/// `hipHostUnregister` -> `cuMemHostUnregister`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipHostUnregister(ptr: *mut c_void) -> HipError {
    with_context("hipHostUnregister", || {
        // SAFETY: HIP's contract: `ptr` was registered and nothing uses it any more.
        cu("cuMemHostUnregister", unsafe {
            sys::cuMemHostUnregister(ptr)
        })
    })
}

/// `hipMemcpyAsync` -> `cuMemcpyAsync`: with unified addressing CUDA finds the direction from
/// the addresses, so every `hipMemcpyKind` is the same call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyAsync(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
    kind: u32,
    stream: HipStream,
) -> HipError {
    with_context("hipMemcpyAsync", || {
        if kind > MEMCPY_DEFAULT {
            return Err(Failure::new(
                HipError::INVALID_MEMCPY_DIRECTION,
                format!("hipMemcpyKind {kind} is not HIP's"),
            ));
        }
        if size == 0 {
            return Ok(());
        }
        // SAFETY: HIP's contract: both ranges hold `size` bytes until the copy has run, and
        // the stream is null or live.
        cu("cuMemcpyAsync", unsafe {
            sys::cuMemcpyAsync(dst as u64, src as u64, size, stream.cast())
        })
    })
}

/// `hipMemsetAsync` -> `cuMemsetD8Async` (HIP takes the byte as an `int`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemsetAsync(
    dst: *mut c_void,
    value: i32,
    size: usize,
    stream: HipStream,
) -> HipError {
    with_context("hipMemsetAsync", || {
        if size == 0 {
            return Ok(());
        }
        // SAFETY: HIP's contract: `dst` holds `size` bytes of device memory until the fill has
        // run, and the stream is null or live.
        cu("cuMemsetD8Async", unsafe {
            sys::cuMemsetD8Async(dst as u64, value as u8, size, stream.cast())
        })
    })
}

/// ROCm 6's `hipMemoryType` for CUDA's `CUmemorytype` (0: memory CUDA does not know).
pub fn memory_type_of(cuda: u32, managed: bool) -> u32 {
    if managed {
        return memory_type::MANAGED;
    }
    match cuda {
        1 => memory_type::HOST,
        2 => memory_type::DEVICE,
        3 => memory_type::ARRAY,
        4 => memory_type::UNIFIED,
        _ => memory_type::UNREGISTERED,
    }
}

/// `hipPointerGetAttributes` -> `cuPointerGetAttributes`, which answers memory CUDA does not know
/// with zeroes: that is ROCm 6's "unregistered" (host memory), as backend-hip expects. The
/// addresses are asked one by one afterwards, where CUDA may refuse the one that does not apply
/// (a device pointer of pageable memory, a host pointer of device memory): they stay null then.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipPointerGetAttributes(
    attr: *mut HipPointerAttribute,
    ptr: *const c_void,
) -> HipError {
    with_context("hipPointerGetAttributes", || {
        use sys::CUpointer_attribute as A;
        let mut which = [
            A::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            A::CU_POINTER_ATTRIBUTE_IS_MANAGED,
        ];
        // Each answer (a bool or a 32-bit integer) is written at the start of its zeroed slot,
        // so reading the slot as a little-endian u64 gives the value.
        let mut slots = [0u64; 3];
        let mut data: Vec<*mut c_void> = slots.iter_mut().map(|s| (s as *mut u64).cast()).collect();
        // SAFETY: `which` and `data` both hold 3 entries; each slot has room for its answer.
        cu("cuPointerGetAttributes", unsafe {
            sys::cuPointerGetAttributes(3, which.as_mut_ptr(), data.as_mut_ptr(), ptr as u64)
        })?;
        let managed = slots[2] as u8 != 0;
        let kind = memory_type_of(slots[0] as u32, managed);
        let address = |what: A| {
            let mut v = 0u64;
            // SAFETY: both address attributes write one pointer-sized value into `v`; a refusal
            // leaves it 0.
            let _ = unsafe {
                sys::cuPointerGetAttribute((&mut v as *mut u64).cast(), what, ptr as u64)
            };
            v as *mut c_void
        };
        let known = kind != memory_type::UNREGISTERED;
        let a = HipPointerAttribute {
            memory_type: kind,
            device: if known { slots[1] as u32 as i32 } else { -1 },
            device_pointer: if known {
                address(A::CU_POINTER_ATTRIBUTE_DEVICE_POINTER)
            } else {
                std::ptr::null_mut()
            },
            host_pointer: if known {
                address(A::CU_POINTER_ATTRIBUTE_HOST_POINTER)
            } else {
                ptr.cast_mut()
            },
            is_managed: i32::from(managed),
            allocation_flags: 0,
        };
        // SAFETY: HIP's contract: `attr` is null or writable.
        unsafe { put(attr, a) }
    })
}

/// `hipMemGetAddressRange` -> `cuMemGetAddressRange`: the allocation containing `ptr`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemGetAddressRange(
    base: *mut *mut c_void,
    size: *mut usize,
    ptr: *mut c_void,
) -> HipError {
    with_context("hipMemGetAddressRange", || {
        let (mut b, mut s) = (0u64, 0usize);
        // SAFETY: both out-pointers are valid; CUDA checks `ptr`.
        cu("cuMemGetAddressRange", unsafe {
            sys::cuMemGetAddressRange_v2(&mut b, &mut s, ptr as u64)
        })?;
        // SAFETY: HIP's contract: both are null or writable (null ones are refused).
        unsafe {
            put(base, b as *mut c_void)?;
            put(size, s)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_alloc_flags_follow_hip() {
        let both = sys::CU_MEMHOSTALLOC_PORTABLE | sys::CU_MEMHOSTALLOC_DEVICEMAP;
        assert_eq!(host_alloc_flags(0).unwrap(), both);
        assert_eq!(host_alloc_flags(1 | 2).unwrap(), both);
        assert_eq!(host_alloc_flags(2).unwrap(), sys::CU_MEMHOSTALLOC_DEVICEMAP);
        assert_eq!(
            host_alloc_flags(2 | 0x4000_0000).unwrap(),
            sys::CU_MEMHOSTALLOC_DEVICEMAP
        );
        assert_eq!(
            host_alloc_flags(0x10).unwrap_err().code,
            HipError::INVALID_VALUE
        );
    }

    #[test]
    fn memory_types_use_rocm6_numbers() {
        assert_eq!(memory_type_of(0, false), memory_type::UNREGISTERED);
        assert_eq!(memory_type_of(1, false), memory_type::HOST);
        assert_eq!(memory_type_of(2, false), memory_type::DEVICE);
        assert_eq!(memory_type_of(2, true), memory_type::MANAGED);
        assert_eq!(memory_type_of(4, false), memory_type::UNIFIED);
    }
}
