//! The structures of NCCL 2.28's device API that device code reads, laid out byte for byte as
//! NVIDIA's `nccl_device.h` 2.28.9 defines them (x86-64; `ffi/tests/device_abi_layout.rs`
//! checks every size and offset against NVIDIA's header). Names are NCCL's.

#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::{c_char, c_int, c_void};

/// Contexts of device-initiated networking (GIN) a window has a handle for.
pub const NCCL_GIN_MAX_CONTEXTS: usize = 4;

/// What `ncclWindow_t` points at, in device memory: device code compiled against NCCL's device
/// headers reads these fields (NCCL 2.28's layout).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ncclWindow_vidmem {
    /// The library's host object of the window.
    pub winHost: *mut c_void,
    /// LSA rank 0's copy of the window; rank i's is `stride4G` x 4 GiB x i further.
    pub lsaFlatBase: *mut c_char,
    /// This rank's index in its LSA team.
    pub lsaRank: c_int,
    /// This rank.
    pub worldRank: c_int,
    /// Distance between two LSA ranks' copies, in units of 4 GiB.
    pub stride4G: u32,
    /// Offset in the multicast range, in units of 4 KiB (multimem is not provided: 0).
    pub mcOffset4K: u32,
    /// Offset in the GIN registration, in units of 4 KiB (0: each window is registered alone).
    pub ginOffset4K: u32,
    /// The window's GIN handle per context (oxccl's is the same in every context).
    pub ginWins: [*mut c_void; NCCL_GIN_MAX_CONTEXTS],
}

impl Default for ncclWindow_vidmem {
    fn default() -> Self {
        ncclWindow_vidmem {
            winHost: std::ptr::null_mut(),
            lsaFlatBase: std::ptr::null_mut(),
            lsaRank: 0,
            worldRank: 0,
            stride4G: 0,
            mcOffset4K: 0,
            ginOffset4K: 0,
            ginWins: [std::ptr::null_mut(); NCCL_GIN_MAX_CONTEXTS],
        }
    }
}

/// `ncclMultimemHandle_t`: the start of a multicast range (multimem is not provided: null).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ncclMultimemHandle_t {
    /// Multicast address of the team's range.
    pub mcBasePtr: *mut c_void,
}

/// `ncclLsaBarrierHandle_t`: barriers over an LSA team in a resource buffer.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ncclLsaBarrierHandle_t {
    /// The resource buffer holding the barriers' state.
    pub bufHandle: u32,
    /// Barriers in it.
    pub nBarriers: c_int,
}

/// `ncclGinBarrierHandle_t`: barriers over the network (GIN).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ncclGinBarrierHandle_t {
    /// First GIN signal of the barriers.
    pub signal0: u32,
    /// The resource buffer holding their state.
    pub bufHandle: u32,
}

/// `ncclLLA2AHandle_t`: LL all-to-all slots in a resource buffer.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ncclLLA2AHandle_t {
    /// The resource buffer holding the slots.
    pub bufHandle: u32,
    /// Slots per block.
    pub nSlots: u32,
}

/// One list of windows device code searches (`ncclFindWindow`): 32 entries and the next list.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ncclDevCommWindowTable {
    /// Windows by user address (an entry with a zero field is free).
    pub entries: [ncclDevCommWindowEntry; 32],
    /// The next table, or null.
    pub next: *mut ncclDevCommWindowTable,
}

/// One entry of [`ncclDevCommWindowTable`].
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ncclDevCommWindowEntry {
    /// The user's buffer.
    pub base: usize,
    /// Its size.
    pub size: usize,
    /// Its window (`ncclWindow_t`, a device address).
    pub window: usize,
}

/// `ncclDevComm_t`: a device communicator, filled by `ncclDevCommCreate` and passed by value to
/// kernels compiled against NCCL's device headers (NCCL 2.28's layout).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ncclDevComm_t {
    /// This rank.
    pub rank: c_int,
    /// Ranks.
    pub nRanks: c_int,
    /// `nRanks`' reciprocal for fast division ([`idiv_rcp32`]).
    pub nRanks_rcp32: u32,
    /// This rank's index in its LSA team.
    pub lsaRank: c_int,
    /// Ranks of the LSA team.
    pub lsaSize: c_int,
    /// `lsaSize`'s reciprocal.
    pub lsaSize_rcp32: u32,
    /// The communicator's registered windows, for `ncclFindWindow`.
    pub windowTable: *mut ncclDevCommWindowTable,
    /// The window of the resource buffers (null when none was required).
    pub resourceWindow: *mut ncclWindow_vidmem,
    /// A copy of `*resourceWindow`, read without a load from memory.
    pub resourceWindow_inlined: ncclWindow_vidmem,
    /// The LSA team's multicast range (null: multimem is not provided).
    pub lsaMultimem: ncclMultimemHandle_t,
    /// The device communicator's own LSA barriers.
    pub lsaBarrier: ncclLsaBarrierHandle_t,
    /// Its barriers across the rail team over GIN.
    pub railGinBarrier: ncclGinBarrierHandle_t,
    /// GIN contexts (0: the device communicator has no GIN).
    pub ginContextCount: u8,
    /// Each GIN context's type.
    pub ginTypes: [u8; 4],
    /// Each GIN context's device handle.
    pub ginHandles: [*mut c_void; 4],
    /// First GIN signal.
    pub ginSignalBase: u32,
    /// GIN signals.
    pub ginSignalCount: c_int,
    /// First GIN counter.
    pub ginCounterBase: u32,
    /// GIN counters.
    pub ginCounterCount: c_int,
    /// Shadows of the GIN signals.
    pub ginSignalShadows: *mut u64,
}

/// NCCL's reciprocal of `x` for its fast 32-bit division (`idivRcp32`).
pub fn idiv_rcp32(x: u32) -> u32 {
    // Unsigned C arithmetic wraps: 1 gives 0, the value NCCL stores.
    (u32::MAX / x.max(1)).wrapping_add(u32::from(x.is_power_of_two()))
}
