//! The profiler-plugin ABI of NCCL 2.28 (`ncclProfiler_v5`): the exported struct of function
//! pointers, the event descriptor, and NCCL's event-type bits.

use crate::net::plugin::abi::{Logger, NcclResult};
use std::ffi::{c_char, c_int, c_void};

/// The symbol NCCL 2.28.9 looks for first.
pub const SYMBOL_V5: &[u8] = b"ncclProfiler_v5\0";

/// NCCL's event-type bits (`ncclProfileGroup` …); the activation mask is a set of them.
pub mod event {
    /// A group of operations launched together.
    pub const GROUP: u64 = 1 << 0;
    /// A collective as launched.
    pub const COLL: u64 = 1 << 1;
    /// A send or receive as launched.
    pub const P2P: u64 = 1 << 2;
    /// The `ncclGroupStart` … `ncclGroupEnd` call span (or one call outside a group).
    pub const GROUP_API: u64 = 1 << 8;
    /// A collective call.
    pub const COLL_API: u64 = 1 << 9;
    /// A send or receive call.
    pub const P2P_API: u64 = 1 << 10;
    /// The events oxccl emits.
    pub const EMITTED: u64 = GROUP_API | COLL_API | P2P_API | COLL | P2P;
    /// Proxy, kernel and network events, which oxccl does not emit yet.
    pub const NOT_EMITTED: u64 = (1 << 3) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 11);
}

/// `groupApi` of the descriptor.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct GroupApi {
    /// Inside a CUDA graph capture.
    pub graph_captured: c_int,
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
    /// The group event (v4 compatibility): NULL, oxccl emits no group events.
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
    /// The group event (v4 compatibility): NULL.
    pub parent_group: *mut c_void,
}

/// The type-specific part of the descriptor.
#[repr(C)]
#[derive(Clone, Copy)]
pub union Body {
    /// For [`event::GROUP_API`].
    pub group_api: GroupApi,
    /// For [`event::COLL_API`].
    pub coll_api: CollApi,
    /// For [`event::P2P_API`].
    pub p2p_api: P2pApi,
    /// For [`event::COLL`].
    pub coll: Coll,
    /// For [`event::P2P`].
    pub p2p: P2p,
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
    /// Records a state of an event (not used by oxccl yet).
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
    }
}
