//! The profiler-plugin ABI of NCCL 2.28 (`ncclProfiler_v5`): the exported struct of function
//! pointers, the event descriptor, and NCCL's event-type bits (the older versions are in
//! `abi_legacy`).

use crate::plugin_abi::{Logger, NcclResult};
use std::ffi::{c_char, c_int, c_void};

/// The symbol NCCL 2.28.9 looks for first.
pub const SYMBOL_V5: &[u8] = b"ncclProfiler_v5\0";

/// The event states oxccl records (`ncclProfilerEventState_v5_t` values).
pub mod state {
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
    /// A proxy operation (not raised by oxccl).
    pub const PROXY_OP: u64 = 1 << 3;
    /// A proxy step (not raised by oxccl).
    pub const PROXY_STEP: u64 = 1 << 4;
    /// The proxy thread's activity (not raised by oxccl).
    pub const PROXY_CTRL: u64 = 1 << 5;
    /// One channel of a collective's or send's or receive's kernel.
    pub const KERNEL_CH: u64 = 1 << 6;
    /// An event a network plugin defines (not raised by oxccl).
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

/// `ncclProfilerEventStateArgs_v5_t` (v4 alike), as oxccl fills it: a KernelCh event's stop.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct StateArgs {
    /// When the channel stopped, in ns (`kernelCh.pTimer`).
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
    /// For [`event::KERNEL_CH`].
    pub kernel_ch: KernelCh,
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
    /// Records a state of an event (oxccl records GroupApi events' two states and KernelCh
    /// events' stop, as NCCL).
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
}
