//! The C layouts of NCCL's GIN plugin ABI (`ncclGin_v11_t` of NCCL 2.28, `ncclGin_v12_t` and
//! `ncclGin_v13_t` of later releases), exported by a network plugin library beside its
//! `ncclNetPlugin_vN`.
//!
//! Every struct is `#[repr(C)]` with its members in the ABI's order; function members are
//! `Option`s of function pointers, so a NULL member reads as `None` (NVIDIA allows most members
//! to be NULL when `devices` reports none). The device handle a context returns is the net
//! ABI's [`DeviceHandle`], unchanged since v7.

use super::abi::{DeviceHandle, Logger, NcclResult, PropsV11, PropsV12};
use std::ffi::c_int;
use std::ffi::c_void;

/// `NCCL_NET_DEVICE_GIN_PROXY`: the host proxy reads the device's descriptors and calls the
/// plugin's puts (the only GIN type oxccl drives).
pub const DEVICE_GIN_PROXY: c_int = 2;
/// `NCCL_NET_DEVICE_GIN_GDAKI`: the GPU drives the NIC itself (not supported by oxccl).
pub const DEVICE_GIN_GDAKI: c_int = 3;
/// `NCCL_NET_MR_FLAG_FORCE_SO`: strong ordering for a registration (NCCL asks it for the
/// signals, so a signal never overtakes the put before it).
pub const MR_FLAG_FORCE_SO: u64 = 1;
/// `NCCL_NET_SIGNAL_OP_INC`: add 1 to the signal.
pub const SIGNAL_OP_INC: u32 = 1;
/// `NCCL_NET_SIGNAL_OP_ADD`: add the given value to the signal.
pub const SIGNAL_OP_ADD: u32 = 2;
/// Bytes of the handle `listen` fills and every rank receives (`NCCL_NET_HANDLE_MAXSIZE`).
pub const HANDLE_BYTES: usize = 128;

/// The symbols NCCL looks for, newest first (2.28.9 knows only v11).
pub const GIN_SYMBOLS: [(&str, u32); 3] = [
    ("ncclGinPlugin_v13", 13),
    ("ncclGinPlugin_v12", 12),
    ("ncclGinPlugin_v11", 11),
];

type P = *mut c_void;
type PP = *mut *mut c_void;
type DevH = *mut *mut DeviceHandle;

/// `iputSignal` of v11.
pub type IputSignalV11 =
    unsafe extern "C" fn(P, u64, P, usize, u64, P, u32, u64, P, u64, u32, PP) -> NcclResult;
/// `iputSignal` of v12.
pub type IputSignalV12 =
    unsafe extern "C" fn(P, u64, P, usize, u64, P, u32, u64, P, u64, u32, c_int, PP) -> NcclResult;
/// `iputSignal` of v13.
pub type IputSignalV13 =
    unsafe extern "C" fn(P, c_int, u64, P, usize, u64, P, u32, u64, P, u64, u32, PP) -> NcclResult;

/// `ncclGinConfig_v13_t`: what a v13 `createContext` is asked for.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct GinConfigV13 {
    /// `nSignals`.
    pub n_signals: c_int,
    /// `nCounters`.
    pub n_counters: c_int,
    /// `nContexts`: contexts in the block (oxccl asks for one per collective comm).
    pub n_contexts: c_int,
    /// `queueDepth`.
    pub queue_depth: c_int,
    /// `trafficClass`.
    pub traffic_class: c_int,
}

/// `ncclGin_v11_t` (NCCL 2.28).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct GinV11 {
    pub name: *const std::ffi::c_char,
    pub init: Option<unsafe extern "C" fn(PP, u64, Logger) -> NcclResult>,
    pub devices: Option<unsafe extern "C" fn(*mut c_int) -> NcclResult>,
    pub get_properties: Option<unsafe extern "C" fn(c_int, *mut PropsV11) -> NcclResult>,
    pub listen: Option<unsafe extern "C" fn(P, c_int, P, PP) -> NcclResult>,
    pub connect: Option<unsafe extern "C" fn(P, PP, c_int, c_int, P, PP) -> NcclResult>,
    pub create_context: Option<unsafe extern "C" fn(P, c_int, c_int, PP, DevH) -> NcclResult>,
    pub reg_mr_sym: Option<unsafe extern "C" fn(P, P, usize, c_int, u64, PP, PP) -> NcclResult>,
    pub reg_mr_sym_dma_buf:
        Option<unsafe extern "C" fn(P, P, usize, c_int, u64, c_int, u64, PP, PP) -> NcclResult>,
    pub dereg_mr_sym: Option<unsafe extern "C" fn(P, P) -> NcclResult>,
    pub destroy_context: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub close_coll: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub close_listen: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub iput: Option<unsafe extern "C" fn(P, u64, P, usize, u64, P, u32, PP) -> NcclResult>,
    pub iput_signal: Option<IputSignalV11>,
    pub test: Option<unsafe extern "C" fn(P, P, *mut c_int) -> NcclResult>,
    pub gin_progress: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub query_last_error: Option<unsafe extern "C" fn(P, *mut bool) -> NcclResult>,
    pub finalize: Option<unsafe extern "C" fn(P) -> NcclResult>,
}

/// `ncclGin_v12_t`: v11 with connections per peer (`connect` takes their number and a queue
/// depth, the puts a connection id) and contexts in blocks (`createContext` takes their number).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct GinV12 {
    pub name: *const std::ffi::c_char,
    pub init: Option<unsafe extern "C" fn(PP, u64, Logger) -> NcclResult>,
    pub devices: Option<unsafe extern "C" fn(*mut c_int) -> NcclResult>,
    pub get_properties: Option<unsafe extern "C" fn(c_int, *mut PropsV11) -> NcclResult>,
    pub listen: Option<unsafe extern "C" fn(P, c_int, P, PP) -> NcclResult>,
    pub connect:
        Option<unsafe extern "C" fn(P, PP, c_int, c_int, c_int, c_int, P, PP) -> NcclResult>,
    pub create_context:
        Option<unsafe extern "C" fn(P, c_int, c_int, c_int, PP, DevH) -> NcclResult>,
    pub reg_mr_sym: Option<unsafe extern "C" fn(P, P, usize, c_int, u64, PP, PP) -> NcclResult>,
    pub reg_mr_sym_dma_buf:
        Option<unsafe extern "C" fn(P, P, usize, c_int, u64, c_int, u64, PP, PP) -> NcclResult>,
    pub dereg_mr_sym: Option<unsafe extern "C" fn(P, P) -> NcclResult>,
    pub destroy_context: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub close_coll: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub close_listen: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub iput: Option<unsafe extern "C" fn(P, u64, P, usize, u64, P, u32, c_int, PP) -> NcclResult>,
    pub iput_signal: Option<IputSignalV12>,
    pub test: Option<unsafe extern "C" fn(P, P, *mut c_int) -> NcclResult>,
    pub gin_progress: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub query_last_error: Option<unsafe extern "C" fn(P, *mut bool) -> NcclResult>,
    pub finalize: Option<unsafe extern "C" fn(P) -> NcclResult>,
}

/// `ncclGin_v13_t`: v12's properties struct, `createContext` with a config, puts (and the new
/// `iget` and `iflush`) on the context `createContext` made rather than on the collective comm.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct GinV13 {
    pub name: *const std::ffi::c_char,
    pub init: Option<unsafe extern "C" fn(PP, u64, Logger) -> NcclResult>,
    pub devices: Option<unsafe extern "C" fn(*mut c_int) -> NcclResult>,
    pub get_properties: Option<unsafe extern "C" fn(c_int, *mut PropsV12) -> NcclResult>,
    pub listen: Option<unsafe extern "C" fn(P, c_int, P, PP) -> NcclResult>,
    pub connect: Option<unsafe extern "C" fn(P, PP, c_int, c_int, P, PP) -> NcclResult>,
    pub create_context: Option<unsafe extern "C" fn(P, *mut GinConfigV13, PP, DevH) -> NcclResult>,
    pub reg_mr_sym: Option<unsafe extern "C" fn(P, P, usize, c_int, u64, PP, PP) -> NcclResult>,
    pub reg_mr_sym_dma_buf:
        Option<unsafe extern "C" fn(P, P, usize, c_int, u64, c_int, u64, PP, PP) -> NcclResult>,
    pub dereg_mr_sym: Option<unsafe extern "C" fn(P, P) -> NcclResult>,
    pub destroy_context: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub close_coll: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub close_listen: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub iput: Option<unsafe extern "C" fn(P, c_int, u64, P, usize, u64, P, u32, PP) -> NcclResult>,
    pub iput_signal: Option<IputSignalV13>,
    pub iget: Option<unsafe extern "C" fn(P, c_int, u64, P, usize, u64, P, u32, PP) -> NcclResult>,
    pub iflush: Option<unsafe extern "C" fn(P, c_int, P, u32, PP) -> NcclResult>,
    pub test: Option<unsafe extern "C" fn(P, P, *mut c_int) -> NcclResult>,
    pub gin_progress: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub query_last_error: Option<unsafe extern "C" fn(P, *mut bool) -> NcclResult>,
    pub finalize: Option<unsafe extern "C" fn(P) -> NcclResult>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn gin_structs_match_the_reference_layouts() {
        // v11 and v12: a name and 18 functions; v13 adds iget and iflush.
        assert_eq!(size_of::<GinV11>(), 19 * 8);
        assert_eq!(size_of::<GinV12>(), 19 * 8);
        assert_eq!(size_of::<GinV13>(), 21 * 8);
        assert_eq!(offset_of!(GinV11, create_context), 6 * 8);
        assert_eq!(offset_of!(GinV11, iput), 13 * 8);
        assert_eq!(offset_of!(GinV11, test), 15 * 8);
        assert_eq!(offset_of!(GinV11, finalize), 18 * 8);
        assert_eq!(offset_of!(GinV12, iput_signal), 14 * 8);
        assert_eq!(offset_of!(GinV12, query_last_error), 17 * 8);
        assert_eq!(offset_of!(GinV13, iget), 15 * 8);
        assert_eq!(offset_of!(GinV13, iflush), 16 * 8);
        assert_eq!(offset_of!(GinV13, test), 17 * 8);
        assert_eq!(offset_of!(GinV13, finalize), 20 * 8);
        assert_eq!(size_of::<GinConfigV13>(), 20);
        assert_eq!(offset_of!(GinConfigV13, traffic_class), 16);
    }

    #[test]
    fn gin_symbols_are_searched_newest_first() {
        for (name, version) in GIN_SYMBOLS {
            assert_eq!(name, format!("ncclGinPlugin_v{version}"));
        }
        assert!(GIN_SYMBOLS.windows(2).all(|w| w[0].1 == w[1].1 + 1));
        assert_eq!(GIN_SYMBOLS[GIN_SYMBOLS.len() - 1].1, 11);
    }
}
