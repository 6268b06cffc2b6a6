//! The C layouts of NCCL's net-plugin ABI, versions 6 to 12 (`reference/net.md` §2).
//!
//! Every struct is `#[repr(C)]` with its members in the ABI's order; the tests below check sizes
//! and offsets against the tables of the reference. Function members are `Option`s of function
//! pointers, so a NULL member reads as `None`.

use std::ffi::{c_char, c_int, c_void};

// Shared by every plugin kind, so core has them (the tuner, profiler and environment plugins).
pub use oxccl_core::plugin_abi::{Logger, NcclResult, SUCCESS, level};
/// `ncclSystemError`.
pub const SYSTEM_ERROR: NcclResult = 2;
/// `ncclInternalError`.
pub const INTERNAL_ERROR: NcclResult = 3;
/// `ncclInvalidArgument`.
pub const INVALID_ARGUMENT: NcclResult = 4;
/// `ncclInvalidUsage`.
pub const INVALID_USAGE: NcclResult = 5;
/// `ncclRemoteError`.
pub const REMOTE_ERROR: NcclResult = 6;

/// `NCCL_NET_MAX_REQUESTS` for v7 and later: requests in flight per comm.
pub const MAX_REQUESTS: usize = 32;
/// `NCCL_NET_MAX_REQUESTS` of v6.
pub const MAX_REQUESTS_V6: usize = 8;
/// `NCCL_NET_MAX_DEVS_PER_NIC` of v9 to v11.
pub const MAX_DEVS_PER_NIC: usize = 4;
/// `NCCL_NET_MAX_DEVS_PER_NIC` of v12.
pub const MAX_DEVS_PER_NIC_V12: usize = 8;
/// `NCCL_MAX_NET_SIZE_BYTES`: the largest `maxP2pBytes` a plugin may report.
pub const MAX_NET_SIZE_BYTES: u64 = 1 << 40;
/// `MAX_NET_SIZE`: the message limit the v6-v8 adapters impose.
pub const MAX_NET_SIZE: u64 = 1 << 30;
/// `MAX_COLLNET_SIZE`: `maxCollBytes` the v6-v8 adapters report.
pub const MAX_COLLNET_SIZE: u64 = 1 << 29;
/// `NCCL_NET_OPTIONAL_RECV_COMPLETION`: the request-slot hint of v9+ receives.
pub const OPTIONAL_RECV_COMPLETION: usize = 0x1;
/// `NCCL_NET_DEVICE_HOST`: the host proxy drives the transfers.
pub const DEVICE_HOST: c_int = 0;
/// `NCCL_NET_DEVICE_UNPACK`: the GPU unpacks received data (not supported by oxccl).
pub const DEVICE_UNPACK: c_int = 1;
/// `TRAFFIC_CLASS_UNDEF`.
pub const TRAFFIC_CLASS_UNDEF: c_int = -1;

/// The profiler callback of v10+: `(eHandle, type, pHandle, pluginId, extData)`.
pub type ProfilerCallback =
    unsafe extern "C" fn(*mut *mut c_void, c_int, *mut c_void, i64, *mut c_void) -> NcclResult;

/// `ncclNetCommConfig_t` (v10+).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CommConfig {
    /// `trafficClass`; [`TRAFFIC_CLASS_UNDEF`] by default.
    pub traffic_class: c_int,
}

/// `ncclNetDeviceHandle_t` (v7+); oxccl passes a pointer to NULL (no device offload).
#[repr(C)]
#[derive(Debug)]
pub struct DeviceHandle {
    /// `netDeviceType`.
    pub net_device_type: c_int,
    /// `netDeviceVersion`.
    pub net_device_version: c_int,
    /// `handle`.
    pub handle: *mut c_void,
    /// `size`.
    pub size: usize,
    /// `needsProxyProgress`.
    pub needs_proxy_progress: c_int,
}

/// `ncclNetVDeviceProps_t` of v9 to v11.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct VDeviceProps {
    /// Physical devices fused.
    pub ndevs: c_int,
    /// Their indices.
    pub devs: [c_int; MAX_DEVS_PER_NIC],
}

/// `ncclNetVDeviceProps_v12_t`: room for twice the fused devices of v9 to v11.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct VDevicePropsV12 {
    /// Physical devices fused.
    pub ndevs: c_int,
    /// Their indices.
    pub devs: [c_int; MAX_DEVS_PER_NIC_V12],
}

/// `ncclNetProperties_v6_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PropsV6 {
    pub name: *mut c_char,
    pub pci_path: *mut c_char,
    pub guid: u64,
    pub ptr_support: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub max_comms: c_int,
    pub max_recvs: c_int,
}

/// `ncclNetProperties_v7_t`: v6 plus the device-offload fields.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PropsV7 {
    pub name: *mut c_char,
    pub pci_path: *mut c_char,
    pub guid: u64,
    pub ptr_support: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub max_comms: c_int,
    pub max_recvs: c_int,
    pub net_device_type: c_int,
    pub net_device_version: c_int,
}

/// `ncclNetProperties_v8_t`: v7 plus `regIsGlobal`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PropsV8 {
    pub name: *mut c_char,
    pub pci_path: *mut c_char,
    pub guid: u64,
    pub ptr_support: c_int,
    pub reg_is_global: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub max_comms: c_int,
    pub max_recvs: c_int,
    pub net_device_type: c_int,
    pub net_device_version: c_int,
}

/// `ncclNetProperties_v9_t` (v10 uses the same layout).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PropsV9 {
    pub name: *mut c_char,
    pub pci_path: *mut c_char,
    pub guid: u64,
    pub ptr_support: c_int,
    pub reg_is_global: c_int,
    pub force_flush: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub max_comms: c_int,
    pub max_recvs: c_int,
    pub net_device_type: c_int,
    pub net_device_version: c_int,
    pub v_props: VDeviceProps,
    pub max_p2p_bytes: usize,
    pub max_coll_bytes: usize,
}

/// `ncclNetProperties_v11_t`: v9 plus `maxMultiRequestSize`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PropsV11 {
    pub name: *mut c_char,
    pub pci_path: *mut c_char,
    pub guid: u64,
    pub ptr_support: c_int,
    pub reg_is_global: c_int,
    pub force_flush: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub max_comms: c_int,
    pub max_recvs: c_int,
    pub net_device_type: c_int,
    pub net_device_version: c_int,
    pub v_props: VDeviceProps,
    pub max_p2p_bytes: usize,
    pub max_coll_bytes: usize,
    pub max_multi_request_size: c_int,
}

/// `ncclNetProperties_v12_t`: v11 with the larger vProps of v12 (which moves every later field),
/// plus the NIC's rail and plane.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PropsV12 {
    pub name: *mut c_char,
    pub pci_path: *mut c_char,
    pub guid: u64,
    pub ptr_support: c_int,
    pub reg_is_global: c_int,
    pub force_flush: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub max_comms: c_int,
    pub max_recvs: c_int,
    pub net_device_type: c_int,
    pub net_device_version: c_int,
    pub v_props: VDevicePropsV12,
    pub max_p2p_bytes: usize,
    pub max_coll_bytes: usize,
    pub max_multi_request_size: c_int,
    /// `railId`: NICs of one rail, [`NET_ID_UNSET`] when the plugin does not say.
    pub rail_id: i16,
    /// `planeId`: NICs of different planes are never mixed, [`NET_ID_UNSET`] when unsaid.
    pub plane_id: i16,
}

/// `railId` / `planeId` of a plugin that does not set them.
pub const NET_ID_UNSET: i16 = -1;

macro_rules! zeroed_default {
    ($($t:ty),*) => {$(
        impl Default for $t {
            fn default() -> Self {
                // SAFETY: every field is an integer, a float, a raw pointer or an array of
                // integers, for which all-zero bytes are a valid value.
                unsafe { std::mem::zeroed() }
            }
        }
    )*};
}
zeroed_default!(PropsV6, PropsV7, PropsV8, PropsV9, PropsV11, PropsV12);

type P = *mut c_void;
type PP = *mut *mut c_void;
type DevH = *mut *mut DeviceHandle;

/// `ncclNet_v6_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetV6 {
    pub name: *const c_char,
    pub init: Option<unsafe extern "C" fn(Logger) -> NcclResult>,
    pub devices: Option<unsafe extern "C" fn(*mut c_int) -> NcclResult>,
    pub get_properties: Option<unsafe extern "C" fn(c_int, *mut PropsV6) -> NcclResult>,
    pub listen: Option<unsafe extern "C" fn(c_int, P, PP) -> NcclResult>,
    pub connect: Option<unsafe extern "C" fn(c_int, P, PP) -> NcclResult>,
    pub accept: Option<unsafe extern "C" fn(P, PP) -> NcclResult>,
    pub reg_mr: Option<unsafe extern "C" fn(P, P, c_int, c_int, PP) -> NcclResult>,
    pub reg_mr_dma_buf:
        Option<unsafe extern "C" fn(P, P, usize, c_int, u64, c_int, PP) -> NcclResult>,
    pub dereg_mr: Option<unsafe extern "C" fn(P, P) -> NcclResult>,
    pub isend: Option<unsafe extern "C" fn(P, P, c_int, c_int, P, PP) -> NcclResult>,
    pub irecv:
        Option<unsafe extern "C" fn(P, c_int, PP, *mut c_int, *mut c_int, PP, PP) -> NcclResult>,
    pub iflush: Option<unsafe extern "C" fn(P, c_int, PP, *mut c_int, PP, PP) -> NcclResult>,
    pub test: Option<unsafe extern "C" fn(P, *mut c_int, *mut c_int) -> NcclResult>,
    pub close_send: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub close_recv: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub close_listen: Option<unsafe extern "C" fn(P) -> NcclResult>,
}

/// `ncclNet_v7_t`: device handles on connect/accept, `getDeviceMr`, `irecvConsumed`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetV7 {
    pub name: *const c_char,
    pub init: Option<unsafe extern "C" fn(Logger) -> NcclResult>,
    pub devices: Option<unsafe extern "C" fn(*mut c_int) -> NcclResult>,
    pub get_properties: Option<unsafe extern "C" fn(c_int, *mut PropsV7) -> NcclResult>,
    pub listen: Option<unsafe extern "C" fn(c_int, P, PP) -> NcclResult>,
    pub connect: Option<unsafe extern "C" fn(c_int, P, PP, DevH) -> NcclResult>,
    pub accept: Option<unsafe extern "C" fn(P, PP, DevH) -> NcclResult>,
    pub reg_mr: Option<unsafe extern "C" fn(P, P, c_int, c_int, PP) -> NcclResult>,
    pub reg_mr_dma_buf:
        Option<unsafe extern "C" fn(P, P, usize, c_int, u64, c_int, PP) -> NcclResult>,
    pub dereg_mr: Option<unsafe extern "C" fn(P, P) -> NcclResult>,
    pub isend: Option<unsafe extern "C" fn(P, P, c_int, c_int, P, PP) -> NcclResult>,
    pub irecv:
        Option<unsafe extern "C" fn(P, c_int, PP, *mut c_int, *mut c_int, PP, PP) -> NcclResult>,
    pub iflush: Option<unsafe extern "C" fn(P, c_int, PP, *mut c_int, PP, PP) -> NcclResult>,
    pub test: Option<unsafe extern "C" fn(P, *mut c_int, *mut c_int) -> NcclResult>,
    pub close_send: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub close_recv: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub close_listen: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub get_device_mr: Option<unsafe extern "C" fn(P, P, PP) -> NcclResult>,
    pub irecv_consumed: Option<unsafe extern "C" fn(P, c_int, P) -> NcclResult>,
}

/// `ncclNet_v8_t`: v7 with a `size_t` registration size.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetV8 {
    pub name: *const c_char,
    pub init: Option<unsafe extern "C" fn(Logger) -> NcclResult>,
    pub devices: Option<unsafe extern "C" fn(*mut c_int) -> NcclResult>,
    pub get_properties: Option<unsafe extern "C" fn(c_int, *mut PropsV8) -> NcclResult>,
    pub listen: Option<unsafe extern "C" fn(c_int, P, PP) -> NcclResult>,
    pub connect: Option<unsafe extern "C" fn(c_int, P, PP, DevH) -> NcclResult>,
    pub accept: Option<unsafe extern "C" fn(P, PP, DevH) -> NcclResult>,
    pub reg_mr: Option<unsafe extern "C" fn(P, P, usize, c_int, PP) -> NcclResult>,
    pub reg_mr_dma_buf:
        Option<unsafe extern "C" fn(P, P, usize, c_int, u64, c_int, PP) -> NcclResult>,
    pub dereg_mr: Option<unsafe extern "C" fn(P, P) -> NcclResult>,
    pub isend: Option<unsafe extern "C" fn(P, P, c_int, c_int, P, PP) -> NcclResult>,
    pub irecv:
        Option<unsafe extern "C" fn(P, c_int, PP, *mut c_int, *mut c_int, PP, PP) -> NcclResult>,
    pub iflush: Option<unsafe extern "C" fn(P, c_int, PP, *mut c_int, PP, PP) -> NcclResult>,
    pub test: Option<unsafe extern "C" fn(P, *mut c_int, *mut c_int) -> NcclResult>,
    pub close_send: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub close_recv: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub close_listen: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub get_device_mr: Option<unsafe extern "C" fn(P, P, PP) -> NcclResult>,
    pub irecv_consumed: Option<unsafe extern "C" fn(P, c_int, P) -> NcclResult>,
}

/// `ncclNet_v9_t`: `size_t` message sizes, `makeVDevice`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetV9 {
    pub name: *const c_char,
    pub init: Option<unsafe extern "C" fn(Logger) -> NcclResult>,
    pub devices: Option<unsafe extern "C" fn(*mut c_int) -> NcclResult>,
    pub get_properties: Option<unsafe extern "C" fn(c_int, *mut PropsV9) -> NcclResult>,
    pub listen: Option<unsafe extern "C" fn(c_int, P, PP) -> NcclResult>,
    pub connect: Option<unsafe extern "C" fn(c_int, P, PP, DevH) -> NcclResult>,
    pub accept: Option<unsafe extern "C" fn(P, PP, DevH) -> NcclResult>,
    pub reg_mr: Option<unsafe extern "C" fn(P, P, usize, c_int, PP) -> NcclResult>,
    pub reg_mr_dma_buf:
        Option<unsafe extern "C" fn(P, P, usize, c_int, u64, c_int, PP) -> NcclResult>,
    pub dereg_mr: Option<unsafe extern "C" fn(P, P) -> NcclResult>,
    pub isend: Option<unsafe extern "C" fn(P, P, usize, c_int, P, PP) -> NcclResult>,
    pub irecv:
        Option<unsafe extern "C" fn(P, c_int, PP, *mut usize, *mut c_int, PP, PP) -> NcclResult>,
    pub iflush: Option<unsafe extern "C" fn(P, c_int, PP, *mut c_int, PP, PP) -> NcclResult>,
    pub test: Option<unsafe extern "C" fn(P, *mut c_int, *mut c_int) -> NcclResult>,
    pub close_send: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub close_recv: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub close_listen: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub get_device_mr: Option<unsafe extern "C" fn(P, P, PP) -> NcclResult>,
    pub irecv_consumed: Option<unsafe extern "C" fn(P, c_int, P) -> NcclResult>,
    pub make_v_device: Option<unsafe extern "C" fn(*mut c_int, *mut VDeviceProps) -> NcclResult>,
}

/// `ncclNet_v10_t`: profiler callback, per-connection config, profiler handles.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetV10 {
    pub name: *const c_char,
    pub init: Option<unsafe extern "C" fn(Logger, ProfilerCallback) -> NcclResult>,
    pub devices: Option<unsafe extern "C" fn(*mut c_int) -> NcclResult>,
    pub get_properties: Option<unsafe extern "C" fn(c_int, *mut PropsV9) -> NcclResult>,
    pub listen: Option<unsafe extern "C" fn(c_int, P, PP) -> NcclResult>,
    pub connect: Option<unsafe extern "C" fn(c_int, *mut CommConfig, P, PP, DevH) -> NcclResult>,
    pub accept: Option<unsafe extern "C" fn(P, PP, DevH) -> NcclResult>,
    pub reg_mr: Option<unsafe extern "C" fn(P, P, usize, c_int, PP) -> NcclResult>,
    pub reg_mr_dma_buf:
        Option<unsafe extern "C" fn(P, P, usize, c_int, u64, c_int, PP) -> NcclResult>,
    pub dereg_mr: Option<unsafe extern "C" fn(P, P) -> NcclResult>,
    pub isend: Option<unsafe extern "C" fn(P, P, usize, c_int, P, P, PP) -> NcclResult>,
    pub irecv: Option<
        unsafe extern "C" fn(P, c_int, PP, *mut usize, *mut c_int, PP, PP, PP) -> NcclResult,
    >,
    pub iflush: Option<unsafe extern "C" fn(P, c_int, PP, *mut c_int, PP, PP) -> NcclResult>,
    pub test: Option<unsafe extern "C" fn(P, *mut c_int, *mut c_int) -> NcclResult>,
    pub close_send: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub close_recv: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub close_listen: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub get_device_mr: Option<unsafe extern "C" fn(P, P, PP) -> NcclResult>,
    pub irecv_consumed: Option<unsafe extern "C" fn(P, c_int, P) -> NcclResult>,
    pub make_v_device: Option<unsafe extern "C" fn(*mut c_int, *mut VDeviceProps) -> NcclResult>,
}

/// `ncclNetAttr_t` (v11): hints for `setNetAttr` (oxccl does not send any).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NetAttr {
    pub send: [i32; 4],
    pub recv: [i32; 4],
    pub op: u32,
    pub algo: u32,
    pub proto: u32,
}

/// `ncclNet_v11_t`: a context per communicator (`init` / `finalize`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetV11 {
    pub name: *const c_char,
    pub init: Option<
        unsafe extern "C" fn(PP, u64, *mut CommConfig, Logger, ProfilerCallback) -> NcclResult,
    >,
    pub devices: Option<unsafe extern "C" fn(*mut c_int) -> NcclResult>,
    pub get_properties: Option<unsafe extern "C" fn(c_int, *mut PropsV11) -> NcclResult>,
    pub listen: Option<unsafe extern "C" fn(P, c_int, P, PP) -> NcclResult>,
    pub connect: Option<unsafe extern "C" fn(P, c_int, P, PP, DevH) -> NcclResult>,
    pub accept: Option<unsafe extern "C" fn(P, PP, DevH) -> NcclResult>,
    pub reg_mr: Option<unsafe extern "C" fn(P, P, usize, c_int, PP) -> NcclResult>,
    pub reg_mr_dma_buf:
        Option<unsafe extern "C" fn(P, P, usize, c_int, u64, c_int, PP) -> NcclResult>,
    pub dereg_mr: Option<unsafe extern "C" fn(P, P) -> NcclResult>,
    pub isend: Option<unsafe extern "C" fn(P, P, usize, c_int, P, P, PP) -> NcclResult>,
    pub irecv: Option<
        unsafe extern "C" fn(P, c_int, PP, *mut usize, *mut c_int, PP, PP, PP) -> NcclResult,
    >,
    pub iflush: Option<unsafe extern "C" fn(P, c_int, PP, *mut c_int, PP, PP) -> NcclResult>,
    pub test: Option<unsafe extern "C" fn(P, *mut c_int, *mut c_int) -> NcclResult>,
    pub close_send: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub close_recv: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub close_listen: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub get_device_mr: Option<unsafe extern "C" fn(P, P, PP) -> NcclResult>,
    pub irecv_consumed: Option<unsafe extern "C" fn(P, c_int, P) -> NcclResult>,
    pub make_v_device: Option<unsafe extern "C" fn(*mut c_int, *mut VDeviceProps) -> NcclResult>,
    pub finalize: Option<unsafe extern "C" fn(P) -> NcclResult>,
    pub set_net_attr: Option<unsafe extern "C" fn(P, *mut NetAttr) -> NcclResult>,
}

/// `ncclNet_v12_t`, read through v11's layout: v12 keeps v11's 22 members and signatures, and
/// differs only in what two pointer arguments point to: `getProperties` fills a [`PropsV12`]
/// and `makeVDevice` reads a [`VDevicePropsV12`]. Pointer arguments are ABI-compatible whatever
/// their pointee, so the v11 struct calls v12 plugins correctly as long as the caller passes
/// the v12 structs: the adapter gives `getProperties` a `PropsV12`, and never calls
/// `makeVDevice`.
pub type NetV12 = NetV11;

/// The exported symbols, newest first: NCCL 2.30 takes the first one found (2.28 starts at
/// v11).
pub const SYMBOLS: [(&str, u32); 7] = [
    ("ncclNetPlugin_v12", 12),
    ("ncclNetPlugin_v11", 11),
    ("ncclNetPlugin_v10", 10),
    ("ncclNetPlugin_v9", 9),
    ("ncclNetPlugin_v8", 8),
    ("ncclNetPlugin_v7", 7),
    ("ncclNetPlugin_v6", 6),
];

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn properties_match_the_reference_offsets() {
        // (speed, port, latency, maxComms, maxRecvs) per version, and sizeof.
        assert_eq!(size_of::<PropsV6>(), 48);
        assert_eq!(
            [
                offset_of!(PropsV7, ptr_support),
                offset_of!(PropsV7, speed),
                offset_of!(PropsV7, port),
                offset_of!(PropsV7, latency),
                offset_of!(PropsV7, max_comms),
                offset_of!(PropsV7, max_recvs),
                offset_of!(PropsV7, net_device_type),
                offset_of!(PropsV7, net_device_version),
                size_of::<PropsV7>()
            ],
            [24, 28, 32, 36, 40, 44, 48, 52, 56]
        );
        assert_eq!(
            [
                offset_of!(PropsV8, reg_is_global),
                offset_of!(PropsV8, speed),
                offset_of!(PropsV8, port),
                offset_of!(PropsV8, latency),
                offset_of!(PropsV8, max_comms),
                offset_of!(PropsV8, max_recvs),
                offset_of!(PropsV8, net_device_type),
                offset_of!(PropsV8, net_device_version),
                size_of::<PropsV8>()
            ],
            [28, 32, 36, 40, 44, 48, 52, 56, 64]
        );
        let v9 = [
            offset_of!(PropsV9, guid),
            offset_of!(PropsV9, ptr_support),
            offset_of!(PropsV9, reg_is_global),
            offset_of!(PropsV9, force_flush),
            offset_of!(PropsV9, speed),
            offset_of!(PropsV9, port),
            offset_of!(PropsV9, latency),
            offset_of!(PropsV9, max_comms),
            offset_of!(PropsV9, max_recvs),
            offset_of!(PropsV9, net_device_type),
            offset_of!(PropsV9, net_device_version),
            offset_of!(PropsV9, v_props),
            offset_of!(PropsV9, max_p2p_bytes),
            offset_of!(PropsV9, max_coll_bytes),
            size_of::<PropsV9>(),
        ];
        assert_eq!(
            v9,
            [16, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60, 64, 88, 96, 104]
        );
        assert_eq!(size_of::<VDeviceProps>(), 20);
        assert_eq!(offset_of!(PropsV11, v_props), 64);
        assert_eq!(offset_of!(PropsV11, max_p2p_bytes), 88);
        assert_eq!(offset_of!(PropsV11, max_coll_bytes), 96);
        assert_eq!(offset_of!(PropsV11, max_multi_request_size), 104);
        assert_eq!(size_of::<PropsV11>(), 112);
    }

    #[test]
    fn v12_properties_match_the_reference_offsets() {
        // Everything before vProps is v11's.
        let head = [
            offset_of!(PropsV12, guid),
            offset_of!(PropsV12, ptr_support),
            offset_of!(PropsV12, reg_is_global),
            offset_of!(PropsV12, force_flush),
            offset_of!(PropsV12, speed),
            offset_of!(PropsV12, port),
            offset_of!(PropsV12, latency),
            offset_of!(PropsV12, max_comms),
            offset_of!(PropsV12, max_recvs),
            offset_of!(PropsV12, net_device_type),
            offset_of!(PropsV12, net_device_version),
        ];
        assert_eq!(head, [16, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60]);
        assert_eq!(size_of::<VDevicePropsV12>(), 36);
        let tail = [
            offset_of!(PropsV12, v_props),
            offset_of!(PropsV12, max_p2p_bytes),
            offset_of!(PropsV12, max_coll_bytes),
            offset_of!(PropsV12, max_multi_request_size),
            offset_of!(PropsV12, rail_id),
            offset_of!(PropsV12, plane_id),
            size_of::<PropsV12>(),
        ];
        assert_eq!(tail, [64, 104, 112, 120, 124, 126, 128]);
    }

    #[test]
    fn symbols_are_searched_newest_first_from_v12() {
        assert_eq!(SYMBOLS[0], ("ncclNetPlugin_v12", 12));
        for (name, version) in SYMBOLS {
            assert_eq!(name, format!("ncclNetPlugin_v{version}"));
        }
        assert!(SYMBOLS.windows(2).all(|w| w[0].1 == w[1].1 + 1));
        assert_eq!(SYMBOLS[SYMBOLS.len() - 1].1, 6);
    }

    #[test]
    fn net_structs_match_the_reference_sizes() {
        assert_eq!(size_of::<NetV6>(), 136);
        assert_eq!(size_of::<NetV7>(), 152);
        assert_eq!(size_of::<NetV8>(), 152);
        assert_eq!(size_of::<NetV9>(), 160);
        assert_eq!(size_of::<NetV10>(), 160);
        assert_eq!(size_of::<NetV11>(), 176);
        assert_eq!(size_of::<NetV12>(), 176);
        // Member order: spot checks of the members whose position moved between versions.
        assert_eq!(offset_of!(NetV6, close_listen), 16 * 8);
        assert_eq!(offset_of!(NetV7, irecv_consumed), 18 * 8);
        assert_eq!(offset_of!(NetV9, make_v_device), 19 * 8);
        assert_eq!(offset_of!(NetV11, finalize), 20 * 8);
        assert_eq!(offset_of!(NetV11, set_net_attr), 21 * 8);
    }

    #[test]
    fn small_structs_match_the_reference() {
        assert_eq!(size_of::<DeviceHandle>(), 32);
        assert_eq!(offset_of!(DeviceHandle, handle), 8);
        assert_eq!(offset_of!(DeviceHandle, size), 16);
        assert_eq!(offset_of!(DeviceHandle, needs_proxy_progress), 24);
        assert_eq!(size_of::<NetAttr>(), 44);
        assert_eq!(size_of::<CommConfig>(), 4);
    }
}
