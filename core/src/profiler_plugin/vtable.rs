//! Calls into a profiler plugin (`ncclProfiler_v5`): every call to the plugin's functions is
//! here.

use super::abi::{self, ProfilerV5};
use super::event::{Event, Handle};
use crate::net::plugin::abi::NcclResult;
use libloading::os::unix::Library;
use std::ffi::{CStr, c_char, c_int, c_void};

/// The exported struct of a plugin.
#[derive(Clone, Copy)]
pub(super) enum VTable {
    /// `ncclProfiler_v5`.
    V5(&'static ProfilerV5),
}

/// What `init` needs besides the context and the mask.
pub(super) struct InitArgs<'a> {
    /// The communicator's id.
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
    /// The plugin `lib` exports, if any.
    pub fn find(lib: &Library) -> Option<VTable> {
        // SAFETY: only the symbol's address is taken.
        let p = unsafe { lib.get::<*mut c_void>(abi::SYMBOL_V5) }
            .ok()
            .map(|s| s.into_raw())
            .filter(|p| !p.is_null())?;
        // SAFETY: the library exports the symbol as `ncclProfiler_v5_t` (the ABI's contract);
        // it stays mapped for the process (never closed).
        Some(VTable::V5(unsafe { &*(p as *const ProfilerV5) }))
    }

    /// The ABI version.
    pub fn version(&self) -> u32 {
        5
    }

    /// The plugin's name field (NULL or a C string in its library).
    pub fn name(&self) -> *const c_char {
        let VTable::V5(t) = self;
        t.name
    }

    /// Calls `init`, which stores the plugin's context in `ctx` and may write the mask through
    /// `mask` at any time later; `None` when the plugin has no `init`.
    pub fn init(
        &self,
        ctx: &mut *mut c_void,
        mask: *mut c_int,
        args: &InitArgs<'_>,
    ) -> Option<NcclResult> {
        let VTable::V5(t) = self;
        let init = t.init?;
        // SAFETY: `ctx` and `mask` are valid for the call and `mask` for the process (a static);
        // the name lives as long as the communicator.
        let rc = unsafe {
            init(
                ctx,
                args.comm_id,
                mask,
                args.name.as_ptr(),
                args.nnodes,
                args.nranks,
                args.rank,
                crate::net::plugin::logger(),
            )
        };
        Some(rc)
    }

    /// Starts `event` under `parent`; 0 when the plugin fails or returns no handle.
    pub fn start(&self, ctx: usize, event: &Event, parent: Handle, rank: c_int) -> Handle {
        let VTable::V5(t) = self;
        let Some(start) = t.start_event else {
            return 0;
        };
        let mut descr = event.v5(parent, rank);
        let mut handle: *mut c_void = std::ptr::null_mut();
        // SAFETY: the context came from this plugin's init; the descriptor and the static
        // strings it points at outlive the call.
        let rc = unsafe { start(ctx as *mut c_void, &mut handle, &mut descr) };
        if rc != 0 { 0 } else { handle as usize }
    }

    /// Stops an event `start` returned (0: nothing).
    pub fn stop(&self, handle: Handle) {
        let VTable::V5(t) = self;
        if handle != 0
            && let Some(stop) = t.stop_event
        {
            // SAFETY: a handle this plugin's startEvent returned, stopped once.
            unsafe { stop(handle as *mut c_void) };
        }
    }

    /// Calls `finalize` on a context `init` made; `None` when the plugin has none.
    pub fn finalize(&self, ctx: usize) -> Option<NcclResult> {
        let VTable::V5(t) = self;
        let finalize = t.finalize?;
        // SAFETY: the context came from this plugin's init and is finalized once.
        Some(unsafe { finalize(ctx as *mut c_void) })
    }
}
