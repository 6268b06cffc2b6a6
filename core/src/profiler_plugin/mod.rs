//! NCCL profiler plugins (`NCCL_PROFILER_PLUGIN`, ABI v5 of NCCL 2.28): a library that receives
//! the start and stop of events (a group call, a collective or send/receive call, the
//! operation as launched) and writes traces or statistics.
//!
//! Found as NCCL finds it: unset means `libnccl-profiler.so`, `none` no plugin; a value is
//! `dlopen`ed as given and, when that fails and it is a bare name, as
//! `libnccl-profiler-<value>.so`; without a profiler library the network plugin's library is
//! searched for `ncclProfiler_v5`. Each communicator gets a context (`init`, `finalize`).
//!
//! Events oxccl raises for collectives, on every backend: a GroupApi event around each call
//! (its own, as NCCL's for a call outside a group), the CollApi event of the call under it, and
//! the Coll event of the operation as launched under that, stopped once the launch returned (on
//! the host backend: once the operation completed); its algorithm and protocol are the tuner's
//! plan choice (a one-shot kernel that replaces it is not named). Send and receive events, and
//! proxy, kernel and network events, are not raised yet. `NCCL_PROFILE_EVENT_MASK` gives the starting activation mask, which
//! the plugin's `init` may change (the mask is one per process, as NCCL's); an event is raised when its type, or a type below it, is
//! in the mask (so a plugin that asks for Coll events gets the API events that are their
//! parents, as from NCCL).

pub mod abi;

use crate::config::{get, vars};
use crate::error::Error;
use abi::event;
use libloading::os::unix::Library;
use std::ffi::{CStr, CString, c_int, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// A loaded profiler plugin.
pub struct ProfilerPlugin {
    name: String,
    vtable: &'static abi::ProfilerV5,
    _lib: Library,
}

// SAFETY: the vtable points into the library, which stays mapped while `_lib` lives; NCCL
// calls profiler plugins from any thread as well.
unsafe impl Send for ProfilerPlugin {}
// SAFETY: as for Send; nothing in it changes after loading.
unsafe impl Sync for ProfilerPlugin {}

impl ProfilerPlugin {
    /// Loads the plugin `profiler` names (`NCCL_PROFILER_PLUGIN`), else the profiler symbol of
    /// the network plugin `net` names; `None` when there is none.
    pub fn load(profiler: Option<&str>, net: Option<&str>) -> Option<ProfilerPlugin> {
        let profiler = profiler.map(str::trim);
        let candidates = crate::plugin_lib::candidates("profiler", profiler, Some(net))?;
        for names in candidates {
            let Some((lib, path)) = crate::plugin_lib::open_first(&names) else {
                continue;
            };
            // SAFETY: only the symbol's address is taken.
            let sym = unsafe { lib.get::<*mut c_void>(abi::SYMBOL_V5) }
                .ok()
                .map(|s| s.into_raw())
                .filter(|p| !p.is_null());
            let Some(p) = sym else {
                continue;
            };
            // SAFETY: the library exports the symbol as `ncclProfiler_v5_t` (the ABI's
            // contract); it stays mapped for the process (never closed).
            let vtable: &'static abi::ProfilerV5 = unsafe { &*(p as *const abi::ProfilerV5) };
            // SAFETY: the plugin's name is NULL or a C string in its library, which stays loaded.
            let name = unsafe { crate::plugin_lib::name_or_path(vtable.name, &path) };
            tracing::info!(target: "oxccl::init", "PROFILER/Plugin: Using {name} (v5) from {path}");
            return Some(ProfilerPlugin {
                name,
                vtable,
                _lib: lib,
            });
        }
        if profiler.is_some() {
            tracing::warn!(
                target: "oxccl::init",
                "NCCL_PROFILER_PLUGIN={}: no profiler plugin (ncclProfiler_v5) could be loaded",
                profiler.unwrap_or_default()
            );
        }
        None
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// The process's profiler plugin, loaded on first use.
fn process_plugin() -> Option<&'static ProfilerPlugin> {
    static PLUGIN: OnceLock<Option<ProfilerPlugin>> = OnceLock::new();
    PLUGIN
        .get_or_init(|| {
            ProfilerPlugin::load(
                get(&vars::NCCL_PROFILER_PLUGIN).as_deref(),
                get(&vars::NCCL_NET_PLUGIN).as_deref(),
            )
        })
        .as_ref()
}

/// The activation mask, process-wide as NCCL's: every `init` gets its address, and a plugin
/// may change it at any time through it (NVIDIA's example keeps the pointer for that).
static EVENT_MASK: AtomicI32 = AtomicI32::new(0);

/// Set once some communicator of the process has a profiler context: until then a call checks
/// this flag only (no lock), so operations without a plugin pay nothing more.
static ANY_CONTEXT: AtomicBool = AtomicBool::new(false);

/// Whether some communicator of this process may raise profiler events.
pub fn any_context() -> bool {
    ANY_CONTEXT.load(Ordering::Relaxed)
}

/// One communicator's profiler context; dropping it calls the plugin's `finalize`.
pub struct ProfilerContext {
    plugin: &'static ProfilerPlugin,
    ctx: usize,
    rank: c_int,
}

impl std::fmt::Debug for ProfilerContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ProfilerContext({})", self.plugin.name)
    }
}

/// An event handle (the plugin's pointer; 0 when the event was not raised).
pub type Handle = usize;

/// The context of a communicator (`comm_id`, the same on every rank) when a profiler plugin is
/// loaded and its `init` succeeds (a failing one is a warning).
pub fn for_communicator(
    comm_id: u64,
    name: Option<&str>,
    nnodes: usize,
    nranks: u32,
    rank: u32,
) -> Option<ProfilerContext> {
    let plugin = process_plugin()?;
    let init = plugin.vtable.init?;
    static START_MASK: std::sync::Once = std::sync::Once::new();
    START_MASK.call_once(|| {
        EVENT_MASK.store(
            get(&vars::NCCL_PROFILE_EVENT_MASK) as i32,
            Ordering::Relaxed,
        );
    });
    let name = CString::new(name.unwrap_or_default()).unwrap_or_default();
    // The plugin keeps the name's pointer (NCCL's stays valid for the communicator's life).
    let name: &'static CStr = Box::leak(name.into_boxed_c_str());
    let mut ctx: *mut c_void = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; the plugin stores its context in `ctx`.
    let rc = unsafe {
        init(
            &mut ctx,
            comm_id,
            EVENT_MASK.as_ptr(),
            name.as_ptr(),
            nnodes as c_int,
            nranks as c_int,
            rank as c_int,
            crate::net::plugin::logger(),
        )
    };
    if rc != 0 {
        let e = Error::InvalidUsage(format!(
            "profiler plugin {}: init returned {rc}",
            plugin.name
        ));
        tracing::warn!(target: "oxccl::init", "rank {rank}: {e}; no profiling");
        return None;
    }
    ANY_CONTEXT.store(true, Ordering::Relaxed);
    Some(ProfilerContext {
        plugin,
        ctx: ctx as usize,
        rank: rank as c_int,
    })
}

impl ProfilerContext {
    /// Whether events of `kind` are raised: it, or a type below it, is in the mask.
    pub fn wants(&self, kind: u64) -> bool {
        let below = match kind {
            event::GROUP_API => event::EMITTED | event::NOT_EMITTED,
            event::COLL_API => event::COLL_API | event::COLL | event::NOT_EMITTED,
            event::P2P_API => event::P2P_API | event::P2P | event::NOT_EMITTED,
            k => k,
        };
        // The plugin may store through the pointer from another thread; read it atomically.
        let mask = EVENT_MASK.load(Ordering::Relaxed) as u32 as u64;
        mask & below != 0
    }

    /// Starts an event of `descr.kind` under `parent` (0: a root); 0 when it is not raised.
    pub fn start(&self, mut descr: abi::EventDescr, parent: Handle) -> Handle {
        if !self.wants(descr.kind) {
            return 0;
        }
        let Some(start) = self.plugin.vtable.start_event else {
            return 0;
        };
        descr.parent_obj = parent as *mut c_void;
        descr.rank = self.rank;
        let mut handle: *mut c_void = std::ptr::null_mut();
        // SAFETY: the context came from this plugin's init; the descriptor and the strings it
        // points at live across the call.
        let rc = unsafe { start(self.ctx as *mut c_void, &mut handle, &mut descr) };
        if rc != 0 { 0 } else { handle as usize }
    }

    /// Stops an event `start` returned (0: nothing).
    pub fn stop(&self, handle: Handle) {
        if handle == 0 {
            return;
        }
        if let Some(stop) = self.plugin.vtable.stop_event {
            // SAFETY: a handle this plugin's startEvent returned, stopped once.
            unsafe { stop(handle as *mut c_void) };
        }
    }
}

impl Drop for ProfilerContext {
    fn drop(&mut self) {
        if let Some(finalize) = self.plugin.vtable.finalize {
            // SAFETY: the context came from this plugin's init and is finalized once, here.
            let rc = unsafe { finalize(self.ctx as *mut c_void) };
            if rc != 0 {
                tracing::warn!(target: "oxccl::init", "profiler plugin {}: finalize returned {rc}", self.plugin.name);
            }
        }
    }
}

/// A C string constant.
macro_rules! cstr {
    ($s:literal) => {
        // SAFETY: the literal ends in NUL and has none before it.
        unsafe { CStr::from_bytes_with_nul_unchecked(concat!($s, "\0").as_bytes()) }
    };
}

/// NCCL's name of a collective, as profilers show it.
pub fn func_name(kind: crate::plan::CollKind) -> &'static CStr {
    use crate::plan::CollKind::*;
    match kind {
        AllReduce => cstr!("AllReduce"),
        Broadcast => cstr!("Broadcast"),
        Reduce => cstr!("Reduce"),
        AllGather => cstr!("AllGather"),
        ReduceScatter => cstr!("ReduceScatter"),
        AllToAll => cstr!("AlltoAll"),
        AllToAllv => cstr!("AlltoAllv"),
        Gather => cstr!("Gather"),
        Scatter => cstr!("Scatter"),
        SendRecv => cstr!("SendRecv"),
    }
}

/// NCCL's name of a data type (`ncclFloat32`, …).
pub fn type_name(t: crate::datatype::DataType) -> &'static CStr {
    use crate::datatype::DataType::*;
    match t {
        Int8 => cstr!("ncclInt8"),
        Uint8 => cstr!("ncclUint8"),
        Int32 => cstr!("ncclInt32"),
        Uint32 => cstr!("ncclUint32"),
        Int64 => cstr!("ncclInt64"),
        Uint64 => cstr!("ncclUint64"),
        Float16 => cstr!("ncclFloat16"),
        Float32 => cstr!("ncclFloat32"),
        Float64 => cstr!("ncclFloat64"),
        Bfloat16 => cstr!("ncclBfloat16"),
        Float8E4M3 => cstr!("ncclFloat8e4m3"),
        Float8E5M2 => cstr!("ncclFloat8e5m2"),
    }
}
