//! The profiler-plugin ABIs before v5 that NCCL 2.28.9 still loads (`ncclProfiler_v4` …
//! `ncclProfiler_v1`): their descriptors of the events oxccl raises (Group, Coll, P2p, ProxyOp,
//! ProxyStep, in v3-v4 KernelCh and NetPlugin), their state arguments, which states NCCL's
//! adapters pass on ([`state_args_v4`], [`state_args_v1`]), and their exported structs. Their
//! type field is one byte, so API and kernel-launch events, whose bits are above it, have no
//! encoding and are never passed to them.

use super::abi::{self, NetPlugin, ProxyOp, ProxyStep, StateArgs, state};
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
/// [`abi::KernelCh`]).
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
    /// For ProxyOp events.
    pub proxy_op: ProxyOp,
    /// For ProxyStep events.
    pub proxy_step: ProxyStep,
    /// For KernelCh events.
    pub kernel_ch: abi::KernelCh,
    /// For NetPlugin events.
    pub net_plugin: NetPlugin,
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
    /// For ProxyOp events.
    pub proxy_op: ProxyOp,
    /// For ProxyStep events.
    pub proxy_step: ProxyStep,
    /// For KernelCh events.
    pub kernel_ch: KernelChV3,
    /// For NetPlugin events.
    pub net_plugin: NetPlugin,
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
    /// For ProxyOp events.
    pub proxy_op: ProxyOp,
    /// For ProxyStep events.
    pub proxy_step: ProxyStep,
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
    /// For ProxyOp events.
    pub proxy_op: ProxyOp,
    /// For ProxyStep events.
    pub proxy_step: ProxyStep,
}

/// `ncclProfilerEventDescr_v4_t`.
pub type DescrV4 = Descr<BodyV4>;
/// `ncclProfilerEventDescr_v3_t`.
pub type DescrV3 = Descr<BodyV3>;
/// `ncclProfilerEventDescr_v2_t`.
pub type DescrV2 = Descr<BodyV2>;
/// `ncclProfilerEventDescr_v1_t`.
pub type DescrV1 = Descr<BodyV1>;

/// `proxyOp` of the v1-v3 state arguments: what a proxy operation's states carried before v4
/// (NCCL 2.28.9 records no such states and passes step states with these zeroed).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProxyOpArgsV1 {
    /// Bytes so far.
    pub trans_size: usize,
    /// Steps so far.
    pub steps: c_int,
}

/// `ncclProfilerEventStateArgs_v1_t` … `_v3_t` (alike).
#[repr(C)]
#[derive(Clone, Copy)]
pub union StateArgsV1 {
    /// For proxy operation states.
    pub proxy_op: ProxyOpArgsV1,
    /// Proxy operations appended (`proxyCtrl.appendedProxyOps`).
    pub appended_proxy_ops: c_int,
}

/// Whether NCCL's adapters (every version) take `state` for a proxy step's.
fn is_proxy_step_state(state: c_int) -> bool {
    matches!(
        state,
        state::PROXY_STEP_SEND_GPU_WAIT
            | state::PROXY_STEP_SEND_PEER_WAIT
            | state::PROXY_STEP_SEND_WAIT
            | state::PROXY_STEP_RECV_WAIT
            | state::PROXY_STEP_RECV_FLUSH_WAIT
            | state::PROXY_STEP_RECV_GPU_WAIT
    )
}

/// The arguments NCCL 2.28.9's v4 adapter passes with `state` recorded with `arg` (v5's
/// first 8 bytes); `None` where it drops the state. It passes the proxy's states (a step's
/// bytes, a network plugin's data, the ProxyCtrl count) and a KernelCh stop's timer, the
/// operation's in-progress state with nothing copied (zeros here), and drops GroupApi states
/// and the pre-v4 operation states.
pub fn state_args_v4(state: c_int, arg: Option<u64>) -> Option<StateArgs> {
    let raw = arg.unwrap_or(0);
    let copied = match state {
        state::PROXY_OP_IN_PROGRESS => 0,
        state::NET_PLUGIN_UPDATE | state::KERNEL_CH_STOP => raw,
        s if is_proxy_step_state(s) => raw,
        // The adapter copies the int only.
        s if state::PROXY_CTRL_STATES.contains(&s) => u64::from(raw as u32),
        _ => return None,
    };
    Some(StateArgs { raw: copied })
}

/// The arguments NCCL 2.28.9's v1-v3 adapters pass with `state` recorded with `arg`; `None`
/// where they drop the state. They pass the step states v1-v3 know (not the send's peer wait,
/// new in v4) with zeroed arguments (a step's bytes do not reach them) and ProxyCtrl states
/// with their count; they drop the operation's in-progress state, network-plugin updates,
/// KernelCh stops and GroupApi states.
pub fn state_args_v1(state: c_int, arg: Option<u64>) -> Option<StateArgsV1> {
    let mut args = StateArgsV1 {
        proxy_op: ProxyOpArgsV1 {
            trans_size: 0,
            steps: 0,
        },
    };
    match state {
        state::PROXY_STEP_SEND_PEER_WAIT => return None,
        s if is_proxy_step_state(s) => {}
        s if state::PROXY_CTRL_STATES.contains(&s) => {
            args.appended_proxy_ops = arg.unwrap_or(0) as c_int;
        }
        _ => return None,
    }
    Some(args)
}

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
        assert_eq!(24 + offset_of!(abi::KernelCh, p_timer), 32);
        assert_eq!(size_of::<ProfilerV4>(), 48);
        assert_eq!(size_of::<ProfilerV1>(), 48);
        // The v1-v3 state arguments.
        assert_eq!(size_of::<StateArgsV1>(), 16);
        assert_eq!(offset_of!(ProxyOpArgsV1, steps), 8);
        assert_eq!(size_of::<StateArgs>(), 8);
        // The proxy members sit at the union's start in every version (their offsets in the
        // descriptor are checked on descriptors in `event`'s tests).
        assert_eq!(offset_of!(DescrV3, body), 24);
        assert_eq!(offset_of!(DescrV2, body), 24);
        assert_eq!(offset_of!(DescrV1, body), 24);
    }

    /// Every state NCCL 2.28.9 defines, as the v4 adapter passes it on.
    #[test]
    fn v4_gets_the_proxy_states_with_their_value() {
        let raw = |s: c_int, arg: Option<u64>| {
            // SAFETY: `raw` covers the whole union, which `state_args_v4` writes through it.
            state_args_v4(s, arg).map(|a| unsafe { a.raw })
        };
        for s in [8, 9, 10, 11, 12, 20, 21, 22] {
            assert_eq!(
                raw(s, Some(0x1234_5678_9abc)),
                Some(0x1234_5678_9abc),
                "{s}"
            );
            assert_eq!(raw(s, None), Some(0), "{s}");
        }
        // The in-progress state gets arguments, but nothing copied into them.
        assert_eq!(raw(state::PROXY_OP_IN_PROGRESS, Some(7)), Some(0));
        // ProxyCtrl states: the int only.
        for s in 13..=18 {
            assert_eq!(raw(s, Some(0x1_0000_0005)), Some(5), "{s}");
        }
        // GroupApi states and the pre-v4 operation states are dropped.
        for s in [0, 1, 2, 3, 4, 5, 6, 7, 23, 24, 25, -1] {
            assert!(raw(s, Some(1)).is_none(), "{s}");
        }
    }

    /// Every state NCCL 2.28.9 defines, as the v1-v3 adapters pass it on.
    #[test]
    fn v1_to_v3_get_the_old_step_states_with_zeroed_arguments() {
        let args = |s: c_int, arg: Option<u64>| {
            // SAFETY: `proxy_op` covers the whole union, which `state_args_v1` initializes.
            state_args_v1(s, arg).map(|a| unsafe { (a.proxy_op.trans_size, a.proxy_op.steps) })
        };
        for s in [8, 9, 10, 11, 12] {
            assert_eq!(args(s, Some(4096)), Some((0, 0)), "{s}");
        }
        for s in 13..=18 {
            assert_eq!(args(s, Some(3)), Some((3, 0)), "{s}");
        }
        // The send's peer wait, the in-progress state, network-plugin updates, KernelCh stops
        // and GroupApi states are dropped, as the old operation states.
        for s in [0, 1, 2, 3, 4, 5, 6, 7, 19, 20, 21, 22, 23, 24] {
            assert!(args(s, Some(1)).is_none(), "{s}");
        }
    }
}
