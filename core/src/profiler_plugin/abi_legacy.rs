//! The profiler-plugin ABIs before v5 that NCCL 2.28.9 still loads (`ncclProfiler_v4` …
//! `ncclProfiler_v1`): their descriptors of the events oxccl raises (Group, Coll, P2p, and in
//! v3-v4 KernelCh) and their exported structs. Their type field is one byte, so API and kernel-launch events, whose
//! bits are above it, have no encoding and are never passed to them.

use crate::plugin_abi::{Logger, NcclResult};
use std::ffi::{c_char, c_int, c_void};

/// The symbols NCCL 2.28.9 tries after `ncclProfiler_v5`, newest first.
pub const SYMBOLS: [(u32, &[u8]); 4] = [
    (4, b"ncclProfiler_v4\0"),
    (3, b"ncclProfiler_v3\0"),
    (2, b"ncclProfiler_v2\0"),
    (1, b"ncclProfiler_v1\0"),
];

/// `coll` of the v4 descriptor.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollV4 {
    /// The communicator's collective sequence number.
    pub seq_number: u64,
    /// "AllReduce", ….
    pub func: *const c_char,
    /// Input.
    pub send_buff: *const c_void,
    /// Output.
    pub recv_buff: *mut c_void,
    /// Elements.
    pub count: usize,
    /// Root rank.
    pub root: c_int,
    /// "ncclFloat32", ….
    pub datatype: *const c_char,
    /// Channels.
    pub n_channels: u8,
    /// Warps per block.
    pub n_warps: u8,
    /// The algorithm's name.
    pub algo: *const c_char,
    /// The protocol's name.
    pub proto: *const c_char,
}

/// `p2p` of the v4 descriptor.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pV4 {
    /// "Send" or "Recv".
    pub func: *const c_char,
    /// The buffer.
    pub buff: *mut c_void,
    /// "ncclFloat32", ….
    pub datatype: *const c_char,
    /// Elements.
    pub count: usize,
    /// The other rank.
    pub peer: c_int,
    /// Channels.
    pub n_channels: u8,
}

/// `coll` of the v3 descriptor.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollV3 {
    /// The communicator's name (NULL: NCCL passes none since v4).
    pub name: *const c_char,
    /// The communicator's hash (0: NCCL passes none since v4).
    pub comm_hash: u64,
    /// The communicator's collective sequence number.
    pub seq_number: u64,
    /// "AllReduce", ….
    pub func: *const c_char,
    /// Input.
    pub send_buff: *const c_void,
    /// Output.
    pub recv_buff: *mut c_void,
    /// Elements.
    pub count: usize,
    /// Root rank.
    pub root: c_int,
    /// "ncclFloat32", ….
    pub datatype: *const c_char,
    /// Channels.
    pub n_max_channels: u8,
    /// Warps per block.
    pub n_warps: u8,
    /// The algorithm's name.
    pub algo: *const c_char,
    /// The protocol's name.
    pub proto: *const c_char,
}

/// `coll` of the v2 descriptor: v3's with the traffic in bytes (0, as NCCL passes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollV2 {
    /// The communicator's name (NULL).
    pub name: *const c_char,
    /// The communicator's hash (0).
    pub comm_hash: u64,
    /// The communicator's collective sequence number.
    pub seq_number: u64,
    /// "AllReduce", ….
    pub func: *const c_char,
    /// Input.
    pub send_buff: *const c_void,
    /// Output.
    pub recv_buff: *mut c_void,
    /// Elements.
    pub count: usize,
    /// Root rank.
    pub root: c_int,
    /// "ncclFloat32", ….
    pub datatype: *const c_char,
    /// Bytes moved (0).
    pub traffic_bytes: usize,
    /// Channels.
    pub n_max_channels: u8,
    /// Warps per block.
    pub n_warps: u8,
    /// The algorithm's name.
    pub algo: *const c_char,
    /// The protocol's name.
    pub proto: *const c_char,
}

/// `p2p` of the v2 and v3 descriptors.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pV2 {
    /// The communicator's name (NULL).
    pub name: *const c_char,
    /// The communicator's hash (0).
    pub comm_hash: u64,
    /// "Send" or "Recv".
    pub func: *const c_char,
    /// The buffer.
    pub buff: *mut c_void,
    /// "ncclFloat32", ….
    pub datatype: *const c_char,
    /// Elements.
    pub count: usize,
    /// The other rank.
    pub peer: c_int,
}

/// `coll` of the v1 descriptor: names are NCCL's enum values.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollV1 {
    /// The communicator's name (NULL).
    pub name: *const c_char,
    /// The communicator's hash (0).
    pub comm_hash: u64,
    /// The communicator's collective sequence number.
    pub seq_number: u64,
    /// `ncclFunc_t`.
    pub func: u8,
    /// Input.
    pub send_buff: *const c_void,
    /// Output.
    pub recv_buff: *mut c_void,
    /// Elements.
    pub count: usize,
    /// Root rank.
    pub root: c_int,
    /// `ncclDataType_t`.
    pub datatype: u8,
    /// The reduction operator (0, as NCCL passes since v2).
    pub op: u32,
    /// Bytes moved (0).
    pub traffic_bytes: usize,
    /// Channels.
    pub n_max_channels: u8,
    /// Warps per block.
    pub n_warps: u8,
    /// `NCCL_ALGO_*`.
    pub algo: u8,
    /// `NCCL_PROTO_*`.
    pub proto: u8,
    /// CollNet (never).
    pub is_collnet: c_int,
    /// NVLS (never).
    pub is_nvls: c_int,
}

/// `p2p` of the v1 descriptor.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pV1 {
    /// The communicator's name (NULL).
    pub name: *const c_char,
    /// The communicator's hash (0).
    pub comm_hash: u64,
    /// `ncclFunc_t`: Send or Recv.
    pub func: u8,
    /// The buffer.
    pub buff: *mut c_void,
    /// `ncclDataType_t`.
    pub datatype: u8,
    /// Elements.
    pub count: usize,
    /// The other rank.
    pub peer: c_int,
}

/// `kernelCh` of the v3 descriptor: the channel only (v4's also has its start time,
/// [`abi::KernelCh`](super::abi::KernelCh)).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelChV3 {
    /// The channel.
    pub channel_id: u8,
}

/// A descriptor of ABI v1-v4: a one-byte type, the parent, the rank, and `Body`, whose
/// largest member (`coll`) gives NCCL's size.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Descr<Body: Copy> {
    /// One of the event bits below 256.
    pub kind: u8,
    /// The parent event's handle (for Coll and P2p: the Group event).
    pub parent_obj: *mut c_void,
    /// The rank that raises it.
    pub rank: c_int,
    /// What the type carries.
    pub body: Body,
}

/// The union of the v4 descriptor.
#[repr(C)]
#[derive(Clone, Copy)]
pub union BodyV4 {
    /// All zeros: how a descriptor starts (a Group event carries nothing).
    pub zeroed: [u64; 10],
    /// For Coll events.
    pub coll: CollV4,
    /// For P2p events.
    pub p2p: P2pV4,
    /// For KernelCh events.
    pub kernel_ch: super::abi::KernelCh,
}

/// The union of the v3 descriptor.
#[repr(C)]
#[derive(Clone, Copy)]
pub union BodyV3 {
    /// All zeros: how a descriptor starts (a Group event carries nothing).
    pub zeroed: [u64; 12],
    /// For Coll events.
    pub coll: CollV3,
    /// For P2p events.
    pub p2p: P2pV2,
    /// For KernelCh events.
    pub kernel_ch: KernelChV3,
}

/// The union of the v2 descriptor.
#[repr(C)]
#[derive(Clone, Copy)]
pub union BodyV2 {
    /// All zeros: how a descriptor starts (a Group event carries nothing).
    pub zeroed: [u64; 13],
    /// For Coll events.
    pub coll: CollV2,
    /// For P2p events.
    pub p2p: P2pV2,
}

/// The union of the v1 descriptor.
#[repr(C)]
#[derive(Clone, Copy)]
pub union BodyV1 {
    /// All zeros: how a descriptor starts (a Group event carries nothing).
    pub zeroed: [u64; 12],
    /// For Coll events.
    pub coll: CollV1,
    /// For P2p events.
    pub p2p: P2pV1,
}

/// `ncclProfilerEventDescr_v4_t`.
pub type DescrV4 = Descr<BodyV4>;
/// `ncclProfilerEventDescr_v3_t`.
pub type DescrV3 = Descr<BodyV3>;
/// `ncclProfilerEventDescr_v2_t`.
pub type DescrV2 = Descr<BodyV2>;
/// `ncclProfilerEventDescr_v1_t`.
pub type DescrV1 = Descr<BodyV1>;

/// `startEvent` of v1-v4; the descriptor is the version's.
pub type StartEvent = unsafe extern "C" fn(
    ctx: *mut c_void,
    handle: *mut *mut c_void,
    descr: *mut c_void,
) -> NcclResult;
/// `stopEvent`.
pub type StopEvent = unsafe extern "C" fn(handle: *mut c_void) -> NcclResult;
/// `recordEventState`; the arguments are the version's.
pub type RecordEventState =
    unsafe extern "C" fn(handle: *mut c_void, state: c_int, args: *mut c_void) -> NcclResult;
/// `finalize`.
pub type Finalize = unsafe extern "C" fn(ctx: *mut c_void) -> NcclResult;

/// `ncclProfiler_v4_t`: v5's functions with the communicator's identity after the name.
#[repr(C)]
pub struct ProfilerV4 {
    /// The plugin's name.
    pub name: *const c_char,
    /// Per-communicator init; the plugin may set the activation mask.
    pub init: Option<
        unsafe extern "C" fn(
            ctx: *mut *mut c_void,
            mask: *mut c_int,
            comm_name: *const c_char,
            comm_hash: u64,
            nnodes: c_int,
            nranks: c_int,
            rank: c_int,
            log: Logger,
        ) -> NcclResult,
    >,
    /// Starts an event ([`DescrV4`]).
    pub start_event: Option<StartEvent>,
    /// Stops an event.
    pub stop_event: Option<StopEvent>,
    /// Records a state of an event.
    pub record_event_state: Option<RecordEventState>,
    /// Per-communicator teardown.
    pub finalize: Option<Finalize>,
}

/// `ncclProfiler_v1_t` … `ncclProfiler_v3_t`, alike but for the descriptor: `init` gets the
/// context and the mask only.
#[repr(C)]
pub struct ProfilerV1 {
    /// The plugin's name.
    pub name: *const c_char,
    /// Per-communicator init; the plugin may set the activation mask.
    pub init: Option<unsafe extern "C" fn(ctx: *mut *mut c_void, mask: *mut c_int) -> NcclResult>,
    /// Starts an event ([`DescrV1`], [`DescrV2`] or [`DescrV3`]).
    pub start_event: Option<StartEvent>,
    /// Stops an event.
    pub stop_event: Option<StopEvent>,
    /// Records a state of an event.
    pub record_event_state: Option<RecordEventState>,
    /// Per-communicator teardown.
    pub finalize: Option<Finalize>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    /// NCCL 2.28.9's layouts (x86-64), from its headers compiled with offsetof.
    #[test]
    fn layouts_match_nccl() {
        assert_eq!(size_of::<DescrV4>(), 104);
        assert_eq!(size_of::<DescrV3>(), 120);
        assert_eq!(size_of::<DescrV2>(), 128);
        assert_eq!(size_of::<DescrV1>(), 120);
        assert_eq!(offset_of!(DescrV4, body), 24);
        assert_eq!(24 + offset_of!(CollV4, datatype), 72);
        assert_eq!(24 + offset_of!(CollV4, n_channels), 80);
        assert_eq!(24 + offset_of!(CollV4, algo), 88);
        assert_eq!(24 + offset_of!(CollV4, proto), 96);
        assert_eq!(24 + offset_of!(P2pV4, peer), 56);
        assert_eq!(24 + offset_of!(P2pV4, n_channels), 60);
        assert_eq!(24 + offset_of!(CollV3, seq_number), 40);
        assert_eq!(24 + offset_of!(CollV3, n_max_channels), 96);
        assert_eq!(24 + offset_of!(CollV3, proto), 112);
        assert_eq!(24 + offset_of!(P2pV2, func), 40);
        assert_eq!(24 + offset_of!(P2pV2, peer), 72);
        assert_eq!(24 + offset_of!(CollV2, traffic_bytes), 96);
        assert_eq!(24 + offset_of!(CollV2, n_max_channels), 104);
        assert_eq!(24 + offset_of!(CollV2, proto), 120);
        assert_eq!(24 + offset_of!(CollV1, func), 48);
        assert_eq!(24 + offset_of!(CollV1, send_buff), 56);
        assert_eq!(24 + offset_of!(CollV1, root), 80);
        assert_eq!(24 + offset_of!(CollV1, datatype), 84);
        assert_eq!(24 + offset_of!(CollV1, op), 88);
        assert_eq!(24 + offset_of!(CollV1, traffic_bytes), 96);
        assert_eq!(24 + offset_of!(CollV1, n_max_channels), 104);
        assert_eq!(24 + offset_of!(CollV1, algo), 106);
        assert_eq!(24 + offset_of!(CollV1, is_collnet), 108);
        assert_eq!(24 + offset_of!(CollV1, is_nvls), 112);
        assert_eq!(24 + offset_of!(P2pV1, func), 40);
        assert_eq!(24 + offset_of!(P2pV1, buff), 48);
        assert_eq!(24 + offset_of!(P2pV1, datatype), 56);
        assert_eq!(24 + offset_of!(P2pV1, count), 64);
        assert_eq!(24 + offset_of!(P2pV1, peer), 72);
        assert_eq!(24 + offset_of!(super::super::abi::KernelCh, p_timer), 32);
        assert_eq!(size_of::<ProfilerV4>(), 48);
        assert_eq!(size_of::<ProfilerV1>(), 48);
    }
}
