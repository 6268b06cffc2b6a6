//! The profiler-plugin ABI of NCCL 2.28 (`ncclProfiler_v5`): the exported struct of function
//! pointers, the event descriptor, and NCCL's event-type bits (the older versions are in
//! `abi_legacy`).

use crate::plugin_abi::{Logger, NcclResult};
use std::ffi::{c_char, c_int, c_void};

/// The symbol NCCL 2.28.9 looks for first.
pub const SYMBOL_V5: &[u8] = b"ncclProfiler_v5\0";

/// The event states oxccl records (`ncclProfilerEventState_v5_t` values; v1-v4 plugins get
/// those their NCCL 2.28.9 adapter passes on, `VTable::record`).
pub mod state {
    /// A proxy operation has started moving data (`ncclProfilerProxyOpInProgress_v4`).
    pub const PROXY_OP_IN_PROGRESS: i32 = 19;
    /// A send step waits for the GPU to fill its buffer (`ncclProfilerProxyStepSendGPUWait`).
    pub const PROXY_STEP_SEND_GPU_WAIT: i32 = 8;
    /// A send step waits for the peer to have room (`ncclProfilerProxyStepSendPeerWait_v4`).
    pub const PROXY_STEP_SEND_PEER_WAIT: i32 = 20;
    /// A send step was posted to the network and waits for it to complete
    /// (`ncclProfilerProxyStepSendWait`).
    pub const PROXY_STEP_SEND_WAIT: i32 = 9;
    /// A receive step was posted and waits for data (`ncclProfilerProxyStepRecvWait`).
    pub const PROXY_STEP_RECV_WAIT: i32 = 10;
    /// A receive step's data arrived and waits for its flush (`ncclProfilerProxyStepRecvFlushWait`).
    pub const PROXY_STEP_RECV_FLUSH_WAIT: i32 = 11;
    /// A receive step waits for the GPU to consume it (`ncclProfilerProxyStepRecvGPUWait`).
    pub const PROXY_STEP_RECV_GPU_WAIT: i32 = 12;
    /// The proxy thread's activity states (`ncclProfilerProxyCtrlIdle` …
    /// `ncclProfilerProxyCtrlAppendEnd`): oxccl raises no ProxyCtrl events, but the adapters
    /// pass these on with their argument, so `record` does as well.
    pub const PROXY_CTRL_STATES: std::ops::RangeInclusive<i32> = 13..=18;
    /// A network plugin's event has news, its data in the state's arguments
    /// (`ncclProfilerNetPluginUpdate`).
    pub const NET_PLUGIN_UPDATE: i32 = 21;
    /// A GroupApi event's group start is over, recorded as the event starts
    /// (`ncclProfilerGroupStartApiStop`).
    pub const GROUP_START_API_STOP: i32 = 23;
    /// Its group's end has been called (`ncclProfilerGroupEndApiStart`).
    pub const GROUP_END_API_START: i32 = 24;
    /// A kernel channel's stop, with its timer in the state's arguments
    /// (`ncclProfilerKernelChStop`).
    pub const KERNEL_CH_STOP: i32 = 22;
}

/// NCCL's event-type bits (`ncclProfileGroup` …); the activation mask is a set of them.
pub mod event {
    /// The operations of one launch (a kernel plan).
    pub const GROUP: u64 = 1 << 0;
    /// A collective as launched.
    pub const COLL: u64 = 1 << 1;
    /// A send or receive as launched.
    pub const P2P: u64 = 1 << 2;
    /// A proxy operation: one channel's send or receive of a task over the network (raised by
    /// the NET proxy, under the task's event).
    pub const PROXY_OP: u64 = 1 << 3;
    /// One step of a proxy operation (raised by the NET proxy, under the operation's event).
    pub const PROXY_STEP: u64 = 1 << 4;
    /// The proxy thread's activity (not raised by oxccl).
    pub const PROXY_CTRL: u64 = 1 << 5;
    /// One channel of a collective's or send's or receive's kernel.
    pub const KERNEL_CH: u64 = 1 << 6;
    /// An event a network plugin defines (raised by the NET proxy when the network plugin
    /// asks for one, under the step's event).
    pub const NET_PLUGIN: u64 = 1 << 7;
    /// The `ncclGroupStart` … `ncclGroupEnd` call span (or one call outside a group).
    pub const GROUP_API: u64 = 1 << 8;
    /// A collective call.
    pub const COLL_API: u64 = 1 << 9;
    /// A send or receive call.
    pub const P2P_API: u64 = 1 << 10;
    /// The launch of a kernel.
    pub const KERNEL_LAUNCH: u64 = 1 << 11;

    /// Bits below the task events: asking for one also raises the task events above it.
    const BELOW_TASKS: u64 = PROXY_OP | PROXY_STEP | KERNEL_CH | NET_PLUGIN;

    /// The mask bits that raise an event of `kind`, as NCCL 2.28 decides: the type itself or a
    /// type below it (a plugin asking for proxy steps gets the operations they belong to).
    pub const fn raised_by(kind: u64) -> u64 {
        match kind {
            GROUP_API => !PROXY_CTRL & 0xfff,
            COLL_API => COLL_API | COLL | BELOW_TASKS,
            P2P_API => P2P_API | P2P | BELOW_TASKS,
            GROUP => GROUP | COLL | P2P | BELOW_TASKS,
            COLL => COLL | BELOW_TASKS,
            P2P => P2P | BELOW_TASKS,
            PROXY_OP => PROXY_OP | PROXY_STEP | NET_PLUGIN,
            PROXY_STEP => PROXY_STEP | NET_PLUGIN,
            k => k,
        }
    }
}

/// `groupApi` of the descriptor.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct GroupApi {
    /// Inside a CUDA graph capture.
    pub graph_captured: bool,
    /// Nesting depth of the group.
    pub group_depth: c_int,
}

/// `collApi` of the descriptor.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CollApi {
    /// "AllReduce", ….
    pub func: *const c_char,
    /// Elements.
    pub count: usize,
    /// "ncclFloat32", ….
    pub datatype: *const c_char,
    /// Root rank (-1 without).
    pub root: c_int,
    /// The caller's stream.
    pub stream: *mut c_void,
    /// Inside a CUDA graph capture.
    pub graph_captured: bool,
}

/// `p2pApi` of the descriptor.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2pApi {
    /// "Send" or "Recv".
    pub func: *const c_char,
    /// Elements.
    pub count: usize,
    /// "ncclFloat32", ….
    pub datatype: *const c_char,
    /// The caller's stream.
    pub stream: *mut c_void,
    /// Inside a CUDA graph capture.
    pub graph_captured: bool,
}

/// `kernelLaunch` of the descriptor.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelLaunch {
    /// The stream the kernel is launched on.
    pub stream: *mut c_void,
}

/// `coll` of the descriptor: a collective as launched.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Coll {
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
    /// "Ring", "Tree", "Direct", "OneShot".
    pub algo: *const c_char,
    /// "LL", "LL128", "Simple".
    pub proto: *const c_char,
    /// The Group event of the launch (what v1-v4 plugins get as parent).
    pub parent_group: *mut c_void,
}

/// `p2p` of the descriptor: a send or receive as launched.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct P2p {
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
    /// The Group event of the launch (what v1-v4 plugins get as parent).
    pub parent_group: *mut c_void,
}

/// `kernelCh` of the descriptor (v4 alike): one channel of a task's kernel.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelCh {
    /// The channel.
    pub channel_id: u8,
    /// When the channel started, in ns (NCCL: the GPU's global timer).
    pub p_timer: u64,
}

/// `proxyOp` of the descriptor (every version alike): one channel's send or receive of a task
/// over the network.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProxyOp {
    /// The raising process (a plugin tells by it whether the parent event is its own).
    pub pid: libc::pid_t,
    /// The channel.
    pub channel_id: u8,
    /// The remote rank.
    pub peer: c_int,
    /// Network transfers (NCCL: steps over slice steps, rounded up).
    pub n_steps: c_int,
    /// Bytes per transfer.
    pub chunk_size: c_int,
    /// 1 for a send, 0 for a receive.
    pub is_send: c_int,
}

/// `proxyStep` of the descriptor (every version alike).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProxyStep {
    /// The transfer's number within its operation.
    pub step: c_int,
}

/// `netPlugin` of the descriptor (v3-v5 alike): an event the network plugin defines.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetPlugin {
    /// The network plugin's type and version (`NCCL_PROFILER_NET_TYPE_*` | version).
    pub id: i64,
    /// The network plugin's own data, passed through.
    pub data: *mut c_void,
}

/// `ncclProfilerEventStateArgs_v5_t` (v4 alike): one 8-byte value whose meaning depends on the
/// state (each member is a one-field struct in C).
#[repr(C)]
#[derive(Clone, Copy)]
pub union StateArgs {
    /// All bits, as oxccl writes them.
    pub raw: u64,
    /// A proxy step's bytes so far (`proxyStep.transSize`).
    pub trans_size: usize,
    /// Proxy operations appended (`proxyCtrl.appendedProxyOps`).
    pub appended_proxy_ops: c_int,
    /// A network plugin event's data (`netPlugin.data`).
    pub net_plugin_data: *mut c_void,
    /// When a kernel channel stopped, in ns (`kernelCh.pTimer`).
    pub p_timer: u64,
}

/// The type-specific part of the descriptor.
#[repr(C)]
#[derive(Clone, Copy)]
pub union Body {
    /// All zeros: how a descriptor starts (a Group event carries nothing).
    pub zeroed: [u64; 11],
    /// For [`event::GROUP_API`].
    pub group_api: GroupApi,
    /// For [`event::COLL_API`].
    pub coll_api: CollApi,
    /// For [`event::P2P_API`].
    pub p2p_api: P2pApi,
    /// For [`event::KERNEL_LAUNCH`].
    pub kernel_launch: KernelLaunch,
    /// For [`event::COLL`].
    pub coll: Coll,
    /// For [`event::P2P`].
    pub p2p: P2p,
    /// For [`event::PROXY_OP`].
    pub proxy_op: ProxyOp,
    /// For [`event::PROXY_STEP`].
    pub proxy_step: ProxyStep,
    /// For [`event::KERNEL_CH`].
    pub kernel_ch: KernelCh,
    /// For [`event::NET_PLUGIN`].
    pub net_plugin: NetPlugin,
}

/// `ncclProfilerEventDescr_v5_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EventDescr {
    /// One of the [`event`] bits.
    pub kind: u64,
    /// The parent event's handle (NULL for a root).
    pub parent_obj: *mut c_void,
    /// The rank that raises it.
    pub rank: c_int,
    /// What the type carries.
    pub body: Body,
}

/// `ncclProfiler_v5_t`.
#[repr(C)]
pub struct ProfilerV5 {
    /// The plugin's name.
    pub name: *const c_char,
    /// Per-communicator init; the plugin may set the activation mask.
    pub init: Option<
        unsafe extern "C" fn(
            ctx: *mut *mut c_void,
            comm_id: u64,
            mask: *mut c_int,
            comm_name: *const c_char,
            nnodes: c_int,
            nranks: c_int,
            rank: c_int,
            log: Logger,
        ) -> NcclResult,
    >,
    /// Starts an event; the plugin returns its handle.
    pub start_event: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            handle: *mut *mut c_void,
            descr: *mut EventDescr,
        ) -> NcclResult,
    >,
    /// Stops an event.
    pub stop_event: Option<unsafe extern "C" fn(handle: *mut c_void) -> NcclResult>,
    /// Records a state of an event (oxccl records GroupApi events' two states, KernelCh
    /// events' stop, and the proxy's operation, step and network-plugin states, as NCCL).
    pub record_event_state: Option<
        unsafe extern "C" fn(handle: *mut c_void, state: c_int, args: *mut c_void) -> NcclResult,
    >,
    /// Per-communicator teardown (the example profiler writes its dump here).
    pub finalize: Option<unsafe extern "C" fn(ctx: *mut c_void) -> NcclResult>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NCCL 2.28.9's layouts (x86-64).
    #[test]
    fn layouts_match_nccl() {
        assert_eq!(size_of::<Coll>(), 88);
        assert_eq!(size_of::<CollApi>(), 48);
        assert_eq!(size_of::<P2p>(), 48);
        assert_eq!(size_of::<EventDescr>(), 112);
        assert_eq!(std::mem::offset_of!(EventDescr, body), 24);
        assert_eq!(std::mem::offset_of!(Coll, datatype), 48);
        assert_eq!(std::mem::offset_of!(Coll, n_channels), 56);
        assert_eq!(std::mem::offset_of!(Coll, algo), 64);
        assert_eq!(size_of::<ProfilerV5>(), 48);
        assert_eq!(size_of::<P2pApi>(), 40);
        assert_eq!(std::mem::offset_of!(P2pApi, graph_captured), 32);
        assert_eq!(std::mem::offset_of!(GroupApi, group_depth), 4);
        assert_eq!(std::mem::offset_of!(P2p, parent_group), 40);
        assert_eq!(size_of::<KernelCh>(), 16);
        assert_eq!(std::mem::offset_of!(KernelCh, p_timer), 8);
        assert_eq!(size_of::<StateArgs>(), 8);
        // proxyOp, proxyStep and netPlugin, from the header compiled with offsetof.
        let body = std::mem::offset_of!(EventDescr, body);
        assert_eq!(size_of::<ProxyOp>(), 24);
        assert_eq!(body + std::mem::offset_of!(ProxyOp, pid), 24);
        assert_eq!(body + std::mem::offset_of!(ProxyOp, channel_id), 28);
        assert_eq!(body + std::mem::offset_of!(ProxyOp, peer), 32);
        assert_eq!(body + std::mem::offset_of!(ProxyOp, n_steps), 36);
        assert_eq!(body + std::mem::offset_of!(ProxyOp, chunk_size), 40);
        assert_eq!(body + std::mem::offset_of!(ProxyOp, is_send), 44);
        assert_eq!(size_of::<ProxyStep>(), 4);
        assert_eq!(body + std::mem::offset_of!(ProxyStep, step), 24);
        assert_eq!(size_of::<NetPlugin>(), 16);
        assert_eq!(body + std::mem::offset_of!(NetPlugin, id), 24);
        assert_eq!(body + std::mem::offset_of!(NetPlugin, data), 32);
        assert_eq!(size_of::<libc::pid_t>(), 4);
    }

    /// `ncclProfilerEventState_v5_t`'s values in NCCL 2.28.9's `nccl_profiler.h`.
    #[test]
    fn states_are_nccls() {
        use state::*;
        assert_eq!(PROXY_STEP_SEND_GPU_WAIT, 8);
        assert_eq!(PROXY_STEP_SEND_WAIT, 9);
        assert_eq!(PROXY_STEP_RECV_WAIT, 10);
        assert_eq!(PROXY_STEP_RECV_FLUSH_WAIT, 11);
        assert_eq!(PROXY_STEP_RECV_GPU_WAIT, 12);
        assert_eq!(PROXY_CTRL_STATES, 13..=18);
        assert_eq!(PROXY_OP_IN_PROGRESS, 19);
        assert_eq!(PROXY_STEP_SEND_PEER_WAIT, 20);
        assert_eq!(NET_PLUGIN_UPDATE, 21);
        assert_eq!(KERNEL_CH_STOP, 22);
        assert_eq!((GROUP_START_API_STOP, GROUP_END_API_START), (23, 24));
    }

    /// NCCL 2.28.9's activation rules (`src/plugin/profiler.cc`).
    #[test]
    fn events_are_raised_by_their_type_or_one_below() {
        use event::*;
        assert_eq!(raised_by(GROUP_API) & PROXY_CTRL, 0);
        assert_ne!(raised_by(GROUP_API) & KERNEL_LAUNCH, 0);
        assert_eq!(raised_by(COLL_API) & (P2P | P2P_API | KERNEL_LAUNCH), 0);
        assert_ne!(raised_by(COLL_API) & PROXY_STEP, 0);
        assert_eq!(raised_by(P2P) & (COLL | GROUP | P2P_API), 0);
        assert_ne!(raised_by(GROUP) & (COLL | P2P), 0);
        assert_eq!(raised_by(KERNEL_LAUNCH), KERNEL_LAUNCH);
    }

    /// The proxy's events (`ncclProfilerStartProxyOpEvent`, `…StartSendProxyStepEvent`,
    /// `ncclProfilerCallback`): each is raised for itself or an event below it, and asking for
    /// any of them raises the task, Group and API events above (NCCL starts a proxy event
    /// under its task's).
    #[test]
    fn proxy_events_are_raised_by_their_type_or_one_below() {
        use event::*;
        assert_eq!(raised_by(PROXY_OP), PROXY_OP | PROXY_STEP | NET_PLUGIN);
        assert_eq!(raised_by(PROXY_STEP), PROXY_STEP | NET_PLUGIN);
        assert_eq!(raised_by(NET_PLUGIN), NET_PLUGIN);
        for proxy in [PROXY_OP, PROXY_STEP, NET_PLUGIN] {
            for above in [GROUP_API, COLL_API, P2P_API, GROUP, COLL, P2P] {
                assert_ne!(raised_by(above) & proxy, 0, "{above:#x} by {proxy:#x}");
            }
            assert_eq!(raised_by(KERNEL_CH) & proxy, 0);
            assert_eq!(raised_by(KERNEL_LAUNCH) & proxy, 0);
            assert_eq!(raised_by(PROXY_CTRL) & proxy, 0);
        }
        // Nothing above a step is raised by the op bit alone, and KernelCh raises no proxy event.
        assert_eq!(raised_by(PROXY_STEP) & PROXY_OP, 0);
        assert_eq!(raised_by(PROXY_OP) & KERNEL_CH, 0);
    }
}
