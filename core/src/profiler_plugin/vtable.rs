//! Calls into a profiler plugin of any ABI version NCCL 2.28.9 loads (v5 down to v1): every
//! call to the plugin's functions is here.

use super::abi::{self, ProfilerV5};
use super::abi_legacy::{self as legacy, ProfilerV1, ProfilerV4};
use super::event::{Event, Handle};
use crate::plugin_abi::NcclResult;
use libloading::os::unix::Library;
use std::ffi::{CStr, c_char, c_int, c_void};

/// The exported struct of a plugin, by version.
#[derive(Clone, Copy)]
pub(super) enum VTable {
    /// `ncclProfiler_v5`.
    V5(&'static ProfilerV5),
    /// `ncclProfiler_v4`.
    V4(&'static ProfilerV4),
    /// `ncclProfiler_v3`, `_v2` or `_v1` (the version), which differ in their descriptors only.
    V1To3(u32, &'static ProfilerV1),
}

/// What `init` needs besides the context and the mask.
pub(super) struct InitArgs<'a> {
    /// The communicator's id (v4: its hash).
    pub comm_id: u64,
    /// The communicator's name.
    pub name: &'a CStr,
    /// Hosts.
    pub nnodes: c_int,
    /// Ranks.
    pub nranks: c_int,
    /// This rank.
    pub rank: c_int,
}

impl VTable {
    /// The newest version `lib` exports, looked for in NCCL 2.28.9's order.
    pub fn find(lib: &Library) -> Option<VTable> {
        let symbol = |name: &[u8]| {
            // SAFETY: only the symbol's address is taken.
            unsafe { lib.get::<*mut c_void>(name) }
                .ok()
                .map(|s| s.into_raw())
                .filter(|p| !p.is_null())
        };
        if let Some(p) = symbol(abi::SYMBOL_V5) {
            // SAFETY: the library exports the symbol as `ncclProfiler_v5_t` (the ABI's
            // contract); it stays mapped for the process (never closed).
            return Some(VTable::V5(unsafe { &*(p as *const ProfilerV5) }));
        }
        for (version, name) in legacy::SYMBOLS {
            let Some(p) = symbol(name) else { continue };
            return Some(if version == 4 {
                // SAFETY: as for v5, with `ncclProfiler_v4_t`.
                VTable::V4(unsafe { &*(p as *const ProfilerV4) })
            } else {
                // SAFETY: as for v5, with `ncclProfiler_v<version>_t`, laid out alike.
                VTable::V1To3(version, unsafe { &*(p as *const ProfilerV1) })
            });
        }
        None
    }

    /// The ABI version.
    pub fn version(&self) -> u32 {
        match self {
            VTable::V5(_) => 5,
            VTable::V4(_) => 4,
            VTable::V1To3(v, _) => *v,
        }
    }

    /// The plugin's name field (NULL or a C string in its library).
    pub fn name(&self) -> *const c_char {
        match self {
            VTable::V5(t) => t.name,
            VTable::V4(t) => t.name,
            VTable::V1To3(_, t) => t.name,
        }
    }

    /// Calls `init`, which stores the plugin's context in `ctx` and may write the mask through
    /// `mask` at any time later; `None` when the plugin has no `init`.
    pub fn init(
        &self,
        ctx: &mut *mut c_void,
        mask: *mut c_int,
        args: &InitArgs<'_>,
    ) -> Option<NcclResult> {
        let log = crate::plugin_abi::logger();
        let name = args.name.as_ptr();
        let rc = match *self {
            VTable::V5(t) => {
                let init = t.init?;
                // SAFETY: `ctx` and `mask` are valid for the call and `mask` for the process (a
                // static); the name lives as long as the communicator.
                unsafe {
                    init(
                        ctx,
                        args.comm_id,
                        mask,
                        name,
                        args.nnodes,
                        args.nranks,
                        args.rank,
                        log,
                    )
                }
            }
            VTable::V4(t) => {
                let init = t.init?;
                // SAFETY: as for v5, in v4's order.
                unsafe {
                    init(
                        ctx,
                        mask,
                        name,
                        args.comm_id,
                        args.nnodes,
                        args.nranks,
                        args.rank,
                        log,
                    )
                }
            }
            VTable::V1To3(_, t) => {
                let init = t.init?;
                // SAFETY: as for v5; v1-v3 take the context and the mask only.
                unsafe { init(ctx, mask) }
            }
        };
        Some(rc)
    }

    /// Starts `event` under `parent` in the plugin's layout; 0 when the plugin has no type for
    /// it, fails, or returns no handle.
    pub fn start(&self, ctx: usize, event: &Event, parent: Handle, rank: c_int) -> Handle {
        let ctx = ctx as *mut c_void;
        match *self {
            VTable::V5(t) => raise(t.start_event, ctx, Some(event.v5(parent, rank))),
            VTable::V4(t) => raise(t.start_event, ctx, event.v4(parent, rank)),
            VTable::V1To3(3, t) => raise(t.start_event, ctx, event.v3(parent, rank)),
            VTable::V1To3(2, t) => raise(t.start_event, ctx, event.v2(parent, rank)),
            VTable::V1To3(_, t) => raise(t.start_event, ctx, event.v1(parent, rank)),
        }
    }

    /// Stops an event `start` returned (0: nothing).
    pub fn stop(&self, handle: Handle) {
        let stop = match self {
            VTable::V5(t) => t.stop_event,
            VTable::V4(t) => t.stop_event,
            VTable::V1To3(_, t) => t.stop_event,
        };
        if handle != 0
            && let Some(stop) = stop
        {
            // SAFETY: a handle this plugin's startEvent returned, stopped once.
            unsafe { stop(handle as *mut c_void) };
        }
    }

    /// Records `state` of an event `start` returned (0: nothing), `arg` in the first 8 bytes
    /// of the state's arguments, as NCCL 2.28.9 and its adapters pass states on: v5 gets every
    /// state, v4 and v1-v3 those their adapter passes ([`legacy::state_args_v4`],
    /// [`legacy::state_args_v1`]).
    pub fn record(&self, handle: Handle, state: c_int, arg: Option<u64>) {
        if handle == 0 {
            return;
        }
        let handle = handle as *mut c_void;
        match *self {
            VTable::V5(t) => {
                // NCCL passes GroupApi states without arguments and every other state with
                // them, zeroed where it has no value (plugins read a step's bytes unchecked).
                let group_api = matches!(
                    state,
                    abi::state::GROUP_START_API_STOP | abi::state::GROUP_END_API_START
                );
                let args = (arg.is_some() || !group_api).then(|| abi::StateArgs {
                    raw: arg.unwrap_or(0),
                });
                record_with(t.record_event_state, handle, state, args);
            }
            VTable::V4(t) => {
                if let Some(args) = legacy::state_args_v4(state, arg) {
                    record_with(t.record_event_state, handle, state, Some(args));
                }
            }
            VTable::V1To3(_, t) => {
                if let Some(args) = legacy::state_args_v1(state, arg) {
                    record_with(t.record_event_state, handle, state, Some(args));
                }
            }
        }
    }

    /// Calls `finalize` on a context `init` made; `None` when the plugin has none.
    pub fn finalize(&self, ctx: usize) -> Option<NcclResult> {
        let finalize = match self {
            VTable::V5(t) => t.finalize,
            VTable::V4(t) => t.finalize,
            VTable::V1To3(_, t) => t.finalize,
        }?;
        // SAFETY: the context came from this plugin's init and is finalized once.
        Some(unsafe { finalize(ctx as *mut c_void) })
    }
}

/// Calls a `recordEventState` whose arguments parameter is `*mut P` with `args` (`None`: NULL).
fn record_with<A, P>(
    record: Option<
        unsafe extern "C" fn(handle: *mut c_void, state: c_int, args: *mut P) -> NcclResult,
    >,
    handle: *mut c_void,
    state: c_int,
    mut args: Option<A>,
) {
    let Some(record) = record else { return };
    let args = args
        .as_mut()
        .map_or(std::ptr::null_mut(), |a| (a as *mut A).cast::<P>());
    // SAFETY: a live handle this plugin's startEvent returned; `args` is NULL or the state's
    // arguments in the layout of the plugin's version, alive for the call.
    unsafe { record(handle, state, args) };
}

/// Calls a `startEvent` whose descriptor parameter is `*mut P` with `descr`; 0 without one.
fn raise<D, P>(
    start: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            handle: *mut *mut c_void,
            descr: *mut P,
        ) -> NcclResult,
    >,
    ctx: *mut c_void,
    descr: Option<D>,
) -> Handle {
    let (Some(start), Some(mut descr)) = (start, descr) else {
        return 0;
    };
    let mut handle: *mut c_void = std::ptr::null_mut();
    // SAFETY: the context came from this plugin's init; `descr` is the layout of the plugin's
    // version, and it and the static strings it points at outlive the call.
    let rc = unsafe { start(ctx, &mut handle, (&raw mut descr).cast::<P>()) };
    if rc != 0 { 0 } else { handle as usize }
}
