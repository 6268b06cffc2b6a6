//! HIP's C types and constants, as backend-hip declares them (`backend-hip/src/sys.rs`, from
//! ROCm 5.2's headers), with `hipMemAllocationProp` in the layout HIP uses from 5.3 on (the
//! runtime version announced here, [`HIP_VERSION`], makes backend-hip write that layout).

use std::ffi::{c_char, c_void};

/// The HIP version this runtime announces: 6.2 (`major * 10^7 + minor * 10^5 + patch`). From 6.0
/// on backend-hip reads ROCm 6's `hipMemoryType` numbering, which matches CUDA's.
pub const HIP_VERSION: i32 = 60_200_000;
const _: () = assert!(
    HIP_VERSION >= 60_000_000,
    "backend-hip reads ROCm 6 layouts from 6.0 on"
);

/// `hipError_t`: a C enum, passed as a 32-bit integer.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HipError(pub u32);

impl HipError {
    /// `hipSuccess`.
    pub const SUCCESS: HipError = HipError(0);
    /// `hipErrorInvalidValue`.
    pub const INVALID_VALUE: HipError = HipError(1);
    /// `hipErrorOutOfMemory`.
    pub const OUT_OF_MEMORY: HipError = HipError(2);
    /// `hipErrorInvalidMemcpyDirection`.
    pub const INVALID_MEMCPY_DIRECTION: HipError = HipError(21);
    /// `hipErrorInsufficientDriver`.
    pub const INSUFFICIENT_DRIVER: HipError = HipError(35);
    /// `hipErrorNoDevice`.
    pub const NO_DEVICE: HipError = HipError(100);
    /// `hipErrorInvalidDevice`.
    pub const INVALID_DEVICE: HipError = HipError(101);
    /// `hipErrorInvalidKernelFile`.
    pub const INVALID_KERNEL_FILE: HipError = HipError(218);
    /// `hipErrorNotFound`.
    pub const NOT_FOUND: HipError = HipError(500);
    /// `hipErrorNotReady`: a query's "not yet", which backend-hip tells apart from failures.
    pub const NOT_READY: HipError = HipError(600);
    /// `hipErrorPeerAccessAlreadyEnabled`, which backend-hip ignores.
    pub const PEER_ACCESS_ALREADY_ENABLED: HipError = HipError(704);
    /// `hipErrorLaunchFailure`.
    pub const LAUNCH_FAILURE: HipError = HipError(719);
    /// `hipErrorNotSupported`.
    pub const NOT_SUPPORTED: HipError = HipError(801);
    /// `hipErrorUnknown`.
    pub const UNKNOWN: HipError = HipError(999);
}

/// `hipStream_t` (CUDA's `CUstream`; null is the default stream).
pub type HipStream = *mut c_void;
/// `hipEvent_t` (CUDA's `CUevent`).
pub type HipEvent = *mut c_void;
/// `hipModule_t` (CUDA's `CUmodule`).
pub type HipModule = *mut c_void;
/// `hipFunction_t` (CUDA's `CUfunction`).
pub type HipFunction = *mut c_void;
/// `hipMemGenericAllocationHandle_t`: a pointer-sized handle holding CUDA's 64-bit one.
pub type HipMemHandle = *mut c_void;

/// `hipStreamNonBlocking` (CUDA's `CU_STREAM_NON_BLOCKING`).
pub const STREAM_NON_BLOCKING: u32 = 1;

/// `hipEventBlockingSync`, `hipEventDisableTiming`, `hipEventInterprocess`: CUDA's values.
pub const EVENT_CUDA_FLAGS: u32 = 1 | 2 | 4;
/// `hipEventReleaseToDevice` and `hipEventReleaseToSystem`: AMD cache hints CUDA has no use for.
pub const EVENT_AMD_HINTS: u32 = 0x4000_0000 | 0x8000_0000;

/// `hipHostMallocPortable`.
pub const HOST_MALLOC_PORTABLE: u32 = 1;
/// `hipHostMallocMapped`.
pub const HOST_MALLOC_MAPPED: u32 = 2;
/// `hipHostMallocWriteCombined`.
pub const HOST_MALLOC_WRITE_COMBINED: u32 = 4;
/// `hipHostMallocNumaUser`, `hipHostMallocCoherent`, `hipHostMallocNonCoherent`: placement and
/// coherence choices of AMD's driver; CUDA's pinned memory is always coherent.
pub const HOST_MALLOC_AMD_HINTS: u32 = 0x2000_0000 | 0x4000_0000 | 0x8000_0000;

/// `hipMemcpyDefault`, the largest `hipMemcpyKind`.
pub const MEMCPY_DEFAULT: u32 = 4;

/// `hipMemoryType` in ROCm 6's numbering (what [`HIP_VERSION`] tells backend-hip to expect).
pub mod memory_type {
    /// Pageable host memory the runtime does not know.
    pub const UNREGISTERED: u32 = 0;
    /// Pinned or registered host memory.
    pub const HOST: u32 = 1;
    /// Device memory.
    pub const DEVICE: u32 = 2;
    /// Managed memory.
    pub const MANAGED: u32 = 3;
    /// A HIP array.
    pub const ARRAY: u32 = 10;
    /// Unified memory.
    pub const UNIFIED: u32 = 11;
}

/// `HIP_LAUNCH_PARAM_BUFFER_POINTER`, a key of `hipModuleLaunchKernel`'s `extra` array.
pub const LAUNCH_PARAM_BUFFER_POINTER: usize = 1;
/// `HIP_LAUNCH_PARAM_BUFFER_SIZE`.
pub const LAUNCH_PARAM_BUFFER_SIZE: usize = 2;
/// `HIP_LAUNCH_PARAM_END`: 3 in HIP, where CUDA's `CU_LAUNCH_PARAM_END` is 0.
pub const LAUNCH_PARAM_END: usize = 3;

/// `hipPointerAttribute_t` (ROCm 6 renamed `memoryType` to `type`; the layout is the same).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct HipPointerAttribute {
    /// A [`memory_type`] value.
    pub memory_type: u32,
    /// Device ordinal of device memory.
    pub device: i32,
    /// The address as the device sees it.
    pub device_pointer: *mut c_void,
    /// The address as the host sees it (host memory).
    pub host_pointer: *mut c_void,
    /// Non-zero for managed memory.
    pub is_managed: i32,
    /// `hipHostMalloc` flags of host memory.
    pub allocation_flags: u32,
}

/// `hipMemLocation`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct HipMemLocation {
    /// `hipMemLocationType`: 1 is a device.
    pub kind: u32,
    /// Device ordinal.
    pub id: i32,
}

/// `hipMemAccessDesc`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct HipMemAccessDesc {
    /// Who gets access.
    pub location: HipMemLocation,
    /// `hipMemAccessFlags`: 0 none, 1 read, 3 read and write.
    pub flags: u32,
}

/// `hipMemAllocationProp` as HIP lays it out from 5.3 on (CUDA's `CUmemAllocationProp`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct HipMemAllocationProp {
    /// `hipMemAllocationType`: 1 is pinned.
    pub kind: u32,
    /// `hipMemAllocationHandleType`: 0 none, 1 POSIX file descriptor.
    pub requested_handle_type: u32,
    /// Where the memory lives.
    pub location: HipMemLocation,
    /// Windows only.
    pub win32_handle_meta_data: *mut c_void,
    /// `allocFlags.compressionType`.
    pub compression_type: u8,
    /// `allocFlags.gpuDirectRDMACapable`.
    pub gpu_direct_rdma_capable: u8,
    /// `allocFlags.usage`.
    pub usage: u16,
}

/// `hipIpcMemHandle_t`: 64 opaque bytes (CUDA's `CUipcMemHandle` has the same size).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct HipIpcMemHandle {
    /// The handle's bytes.
    pub reserved: [c_char; 64],
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    /// The layouts backend-hip writes and reads (runtime.rs `PropV53`, sys.rs for the rest).
    #[test]
    fn layouts_match_backend_hip() {
        assert_eq!(size_of::<HipMemAllocationProp>(), 32);
        assert_eq!(align_of::<HipMemAllocationProp>(), 8);
        assert_eq!(offset_of!(HipMemAllocationProp, requested_handle_type), 4);
        assert_eq!(offset_of!(HipMemAllocationProp, location), 8);
        assert_eq!(offset_of!(HipMemAllocationProp, win32_handle_meta_data), 16);
        assert_eq!(offset_of!(HipMemAllocationProp, compression_type), 24);
        assert_eq!(offset_of!(HipMemAllocationProp, usage), 26);
        assert_eq!(size_of::<HipPointerAttribute>(), 32);
        assert_eq!(offset_of!(HipPointerAttribute, device_pointer), 8);
        assert_eq!(offset_of!(HipPointerAttribute, is_managed), 24);
        assert_eq!(size_of::<HipMemAccessDesc>(), 12);
        assert_eq!(size_of::<HipIpcMemHandle>(), 64);
        assert_eq!(
            size_of::<HipIpcMemHandle>(),
            size_of::<cudarc::driver::sys::CUipcMemHandle>()
        );
        assert_eq!(
            size_of::<HipMemAllocationProp>(),
            size_of::<cudarc::driver::sys::CUmemAllocationProp>()
        );
    }
}
