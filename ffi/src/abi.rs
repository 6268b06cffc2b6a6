//! C types and constants of the ABI, laid out as in `include/nccl.h` / `include/rccl/rccl.h`.
//!
//! Enums that cross the boundary as C `int`s are `#[repr(transparent)]` newtypes, never Rust
//! enums: a caller may pass any integer, and user-made reduction operators live above
//! `ncclNumOps`. The layout test (`decl::tests`) compiles the header against these definitions.

#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::{c_char, c_int, c_uint, c_void};

/// `ncclResult_t`.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ncclResult_t(pub c_int);

impl ncclResult_t {
    /// `ncclSuccess`.
    pub const SUCCESS: ncclResult_t = ncclResult_t(0);
    /// `ncclUnhandledCudaError`.
    pub const UNHANDLED_CUDA_ERROR: ncclResult_t = ncclResult_t(1);
    /// `ncclSystemError`.
    pub const SYSTEM_ERROR: ncclResult_t = ncclResult_t(2);
    /// `ncclInternalError`.
    pub const INTERNAL_ERROR: ncclResult_t = ncclResult_t(3);
    /// `ncclInvalidArgument`.
    pub const INVALID_ARGUMENT: ncclResult_t = ncclResult_t(4);
    /// `ncclInvalidUsage`.
    pub const INVALID_USAGE: ncclResult_t = ncclResult_t(5);
    /// `ncclRemoteError`.
    pub const REMOTE_ERROR: ncclResult_t = ncclResult_t(6);
    /// `ncclInProgress`.
    pub const IN_PROGRESS: ncclResult_t = ncclResult_t(7);
    /// `ncclTimeout` (RCCL 2.30 / NCCL 2.30 headers only; a 2.28 client never sees 8).
    #[cfg(feature = "rccl")]
    pub const TIMEOUT: ncclResult_t = ncclResult_t(8);
    /// `ncclNumResults` of this flavour's header.
    #[cfg(not(feature = "rccl"))]
    pub const NUM_RESULTS: ncclResult_t = ncclResult_t(8);
    /// `ncclNumResults` of this flavour's header.
    #[cfg(feature = "rccl")]
    pub const NUM_RESULTS: ncclResult_t = ncclResult_t(9);
}

/// `ncclDataType_t` as the caller passed it (checked with `DataType::try_from`).
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ncclDataType_t(pub c_int);

/// `ncclRedOp_t` as the caller passed it (checked with `Communicator::resolve_op`).
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ncclRedOp_t(pub c_int);

/// `ncclScalarResidence_t`.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ncclScalarResidence_t(pub c_int);

/// `ncclCommMemStat_t` (NCCL 2.29).
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ncclCommMemStat_t(pub c_int);

/// Opaque target of `ncclComm_t`; the pointer really addresses a `handles::CommHandle`.
#[repr(C)]
pub struct ncclComm {
    _private: [u8; 0],
}

/// `ncclComm_t`.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ncclComm_t(pub *mut ncclComm);

impl ncclComm_t {
    /// `NCCL_COMM_NULL`.
    pub const NULL: ncclComm_t = ncclComm_t(std::ptr::null_mut());
}

pub use oxccl::device_api::layout::{
    NCCL_GIN_MAX_CONTEXTS, idiv_rcp32, ncclDevComm_t, ncclDevCommWindowEntry,
    ncclDevCommWindowTable, ncclGinBarrierHandle_t, ncclLLA2AHandle_t, ncclLsaBarrierHandle_t,
    ncclMultimemHandle_t, ncclWindow_vidmem,
};

/// `ncclWindow_t`.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ncclWindow_t(pub *mut ncclWindow_vidmem);

/// The stream argument: `cudaStream_t` (NCCL build) or `hipStream_t` (RCCL build), an opaque
/// pointer the backend maps to one of its streams.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stream(pub *mut c_void);

/// `cudaStream_t`.
#[cfg(not(feature = "rccl"))]
pub type cudaStream_t = Stream;
/// `hipStream_t`.
#[cfg(feature = "rccl")]
pub type hipStream_t = Stream;

/// `NCCL_UNIQUE_ID_BYTES`.
pub const NCCL_UNIQUE_ID_BYTES: usize = 128;

/// `ncclUniqueId`: 128 bytes, alignment 1, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ncclUniqueId {
    /// Opaque bytes (core's `UniqueId`).
    pub internal: [c_char; NCCL_UNIQUE_ID_BYTES],
}

/// `ncclConfig_t` of this flavour's header (`ncclConfig_v22800`: 80 bytes for NCCL 2.28, 96 for
/// RCCL 2.30.4, which appends three fields).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ncclConfig_t {
    /// `sizeof(ncclConfig_t)` of the caller's header.
    pub size: usize,
    /// `0xcafebeef`.
    pub magic: c_uint,
    /// `NCCL_VERSION_CODE` of the caller's header.
    pub version: c_uint,
    /// 2.14.
    pub blocking: c_int,
    /// 2.17.
    pub cgaClusterSize: c_int,
    /// 2.17.
    pub minCTAs: c_int,
    /// 2.17.
    pub maxCTAs: c_int,
    /// 2.17.
    pub netName: *const c_char,
    /// 2.18.
    pub splitShare: c_int,
    /// 2.26 (reset below 2.25, as NCCL does).
    pub trafficClass: c_int,
    /// 2.27.
    pub commName: *const c_char,
    /// 2.27.
    pub collnetEnable: c_int,
    /// 2.27.
    pub CTAPolicy: c_int,
    /// 2.27.
    pub shrinkShare: c_int,
    /// 2.27.
    pub nvlsCTAs: c_int,
    /// 2.28.
    pub nChannelsPerNetPeer: c_int,
    /// 2.28.
    pub nvlinkCentricSched: c_int,
    /// 2.29 (RCCL header only).
    #[cfg(feature = "rccl")]
    pub graphUsageMode: c_int,
    /// 2.29 (RCCL header only).
    #[cfg(feature = "rccl")]
    pub numRmaCtx: c_int,
    /// 2.30 (RCCL header only).
    #[cfg(feature = "rccl")]
    pub maxP2pPeers: c_int,
}

/// `NCCL_CONFIG_UNDEF_INT`.
pub const NCCL_CONFIG_UNDEF_INT: c_int = c_int::MIN;
/// `ncclConfig_t.magic` (`NCCL_API_MAGIC`).
pub const NCCL_CONFIG_MAGIC: c_uint = 0xcafe_beef;
/// `NCCL_SPLIT_NOCOLOR`.
pub const NCCL_SPLIT_NOCOLOR: c_int = -1;
/// `NCCL_SHRINK_DEFAULT`.
pub const NCCL_SHRINK_DEFAULT: c_int = 0;
/// `NCCL_SHRINK_ABORT`.
pub const NCCL_SHRINK_ABORT: c_int = 1;
/// `NCCL_REVOKE_DEFAULT`.
pub const NCCL_REVOKE_DEFAULT: c_int = 0;
/// `NCCL_SUSPEND_MEM`.
pub const NCCL_SUSPEND_MEM: c_int = 1;
pub use oxccl::device_api::shared::NCCL_WIN_COLL_SYMMETRIC;
/// `NCCL_WIN_STRICT_ORDERING` (2.29).
pub const NCCL_WIN_STRICT_ORDERING: c_int = 2;

/// `ncclSimInfo_t` (`ncclSimInfo_v22200`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ncclSimInfo_t {
    /// `sizeof(ncclSimInfo_t)` of the caller's header.
    pub size: usize,
    /// `0x74685283`.
    pub magic: c_uint,
    /// `NCCL_VERSION_CODE` of the caller's header.
    pub version: c_uint,
    /// Estimated time of the group in microseconds (output).
    pub estimatedTime: f32,
}

/// `ncclSimInfo_t.magic`.
pub const NCCL_SIM_INFO_MAGIC: c_uint = 0x7468_5283;

/// `ncclGinType_t` (NCCL 2.29): the GIN type a communicator offers.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ncclGinType_t(pub c_int);

impl ncclGinType_t {
    /// `NCCL_GIN_TYPE_NONE`.
    pub const NONE: ncclGinType_t = ncclGinType_t(0);
    /// `NCCL_GIN_TYPE_PROXY`: oxccl's only type.
    pub const PROXY: ncclGinType_t = ncclGinType_t(2);
    /// `NCCL_GIN_TYPE_GDAKI`.
    pub const GDAKI: ncclGinType_t = ncclGinType_t(3);
}

/// `ncclCommProperties_t` as NCCL 2.29.7 and later lay it out; 2.29.2-2.29.3 headers end after
/// `ginType`, and the caller's `size` says which it has.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ncclCommProperties_t {
    /// `sizeof(ncclCommProperties_t)` of the caller's header.
    pub size: usize,
    /// `NCCL_API_MAGIC`.
    pub magic: c_uint,
    /// `NCCL_VERSION_CODE` of the caller's header.
    pub version: c_uint,
    /// This rank.
    pub rank: c_int,
    /// Ranks of the communicator.
    pub nRanks: c_int,
    /// Its CUDA device ordinal.
    pub cudaDev: c_int,
    /// Its NVML device index (-1: oxccl does not use NVML).
    pub nvmlDev: c_int,
    /// Whether the device API (`ncclDevCommCreate`, windows) works on it.
    pub deviceApiSupport: bool,
    /// Whether multimem (NVLink multicast) is available.
    pub multimemSupport: bool,
    /// The GIN type device communicators get.
    pub ginType: ncclGinType_t,
    /// LSA teams (hosts) of the communicator (2.29.7).
    pub nLsaTeams: c_int,
    /// Whether host-initiated one-sided operations are available (2.29.7).
    pub hostRmaSupport: bool,
    /// The GIN type across rails (2.29.7).
    pub railedGinType: ncclGinType_t,
}

/// Bytes of `ncclCommProperties_t` in NCCL 2.29.2-2.29.3 headers (up to `ginType`).
pub const COMM_PROPERTIES_2_29_2_BYTES: usize = 40;

/// `ncclTeam_t`: returned by value in registers.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ncclTeam_t {
    /// Ranks in the team.
    pub nRanks: c_int,
    /// This rank's index in the team.
    pub rank: c_int,
    /// World-rank distance between consecutive team members.
    pub stride: c_int,
}

/// `ncclDevCommRequirements_t`, NCCL 2.28's layout (2.29 prefixed a size, magic and version).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ncclDevCommRequirements_t {
    /// Resource buffers the caller's kernels need.
    pub resourceRequirementsList: *mut ncclDevResourceRequirements_t,
    /// Teams the caller's kernels need (multicast).
    pub teamRequirementsList: *mut ncclTeamRequirements_t,
    /// Multicast over the LSA team.
    pub lsaMultimem: bool,
    /// World barriers (LSA and rail GIN).
    pub barrierCount: c_int,
    /// LSA barriers.
    pub lsaBarrierCount: c_int,
    /// Rail barriers over GIN.
    pub railGinBarrierCount: c_int,
    /// LL all-to-all blocks.
    pub lsaLLA2ABlockCount: c_int,
    /// LL all-to-all slots.
    pub lsaLLA2ASlotCount: c_int,
    /// GIN even on one host.
    pub ginForceEnable: bool,
    /// GIN contexts wanted (a hint).
    pub ginContextCount: c_int,
    /// GIN signals.
    pub ginSignalCount: c_int,
    /// GIN counters.
    pub ginCounterCount: c_int,
}

/// `ncclDevResourceRequirements_t`: one resource buffer (and GIN signals/counters) wanted.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ncclDevResourceRequirements_t {
    /// The next requirement, or null.
    pub next: *mut ncclDevResourceRequirements_t,
    /// Bytes.
    pub bufferSize: usize,
    /// Alignment.
    pub bufferAlign: usize,
    /// Receives the buffer's handle at `ncclDevCommCreate` (may be null).
    pub outBufferHandle: *mut u32,
    /// GIN signals.
    pub ginSignalCount: c_int,
    /// GIN counters.
    pub ginCounterCount: c_int,
    /// Receives the first GIN signal (may be null).
    pub outGinSignalStart: *mut u32,
    /// Receives the first GIN counter (may be null).
    pub outGinCounterStart: *mut u32,
}

/// `ncclTeamRequirements_t`: a team wanted with multicast.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ncclTeamRequirements_t {
    /// The next requirement, or null.
    pub next: *mut ncclTeamRequirements_t,
    /// The team.
    pub team: ncclTeam_t,
    /// Multicast wanted.
    pub multimem: bool,
    /// Receives the multicast handle (may be null).
    pub outMultimemHandle: *mut ncclMultimemHandle_t,
}

/// `ncclWaitSignalDesc_t` (RCCL 2.30 / NCCL 2.29).
#[cfg(feature = "rccl")]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ncclWaitSignalDesc_t {
    /// Number of signals to wait for.
    pub opCnt: c_int,
    /// Signalling peer.
    pub peer: c_int,
    /// Signal slot.
    pub sigIdx: c_int,
    /// Context.
    pub ctx: c_int,
}

/// `mscclAlgoHandle_t`.
#[cfg(feature = "rccl")]
pub type mscclAlgoHandle_t = c_int;

/// `NCCL_VERSION(X, Y, Z)`: the 2.8-and-older encoding differs from later ones.
pub const fn nccl_version(x: u32, y: u32, z: u32) -> u32 {
    if x <= 2 && y <= 8 {
        x * 1000 + y * 100 + z
    } else {
        x * 10000 + y * 100 + z
    }
}

/// The API level this build matches: NCCL 2.28.9, or RCCL 2.30.4.
#[cfg(not(feature = "rccl"))]
pub const API_LEVEL: (u32, u32, u32) = (2, 28, 9);
/// The API level this build matches: NCCL 2.28.9, or RCCL 2.30.4.
#[cfg(feature = "rccl")]
pub const API_LEVEL: (u32, u32, u32) = (2, 30, 4);

/// `NCCL_VERSION_CODE` of this build's header (22809 or 23004).
pub const VERSION_CODE: u32 = nccl_version(API_LEVEL.0, API_LEVEL.1, API_LEVEL.2);

/// Name of the API this build speaks, for messages.
#[cfg(not(feature = "rccl"))]
pub const API_NAME: &str = "NCCL";
/// Name of the API this build speaks, for messages.
#[cfg(feature = "rccl")]
pub const API_NAME: &str = "RCCL";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_codes() {
        assert_eq!(nccl_version(2, 28, 9), 22809);
        assert_eq!(nccl_version(2, 8, 4), 2804);
        assert_eq!(nccl_version(2, 9, 6), 20906);
        assert_eq!(nccl_version(2, 30, 4), 23004);
        #[cfg(not(feature = "rccl"))]
        assert_eq!(VERSION_CODE, 22809);
        #[cfg(feature = "rccl")]
        assert_eq!(VERSION_CODE, 23004);
    }

    #[test]
    fn sizes() {
        assert_eq!(size_of::<ncclUniqueId>(), 128);
        assert_eq!(align_of::<ncclUniqueId>(), 1);
        #[cfg(not(feature = "rccl"))]
        assert_eq!(size_of::<ncclConfig_t>(), 80);
        #[cfg(feature = "rccl")]
        assert_eq!(size_of::<ncclConfig_t>(), 96);
        assert_eq!(size_of::<ncclSimInfo_t>(), 24);
        assert_eq!(size_of::<ncclTeam_t>(), 12);
        assert_eq!(size_of::<ncclComm_t>(), size_of::<*mut c_void>());
    }
}
