//! NCCL profiler plugins (`NCCL_PROFILER_PLUGIN`, ABI v5 to v1 as NCCL 2.28.9 loads them): a
//! library that receives the start and stop of events (a group call, a collective or
//! send/receive call, a kernel launch, the operations of a launch, their kernels' channels, the
//! NET proxy's operations and steps and the network plugin's own events) and writes traces or
//! statistics.
//!
//! Found as NCCL finds it: unset means `libnccl-profiler.so`, `none` no plugin; a value is
//! `dlopen`ed as given and, when that fails and it is a bare name, as
//! `libnccl-profiler-<value>.so`; without a profiler library the network plugin's library is
//! searched. The newest of `ncclProfiler_v5` … `ncclProfiler_v1` is used, and events are laid
//! out in its version's descriptor as NCCL's adapters do ([`event`]). Each communicator gets a
//! context (`init`, `finalize`).
//!
//! Which events an operation raises, and their parents, is decided where operations launch
//! (`comm/ops/profile.rs`); the NET proxy raises its events through a [`Raiser`] with plain
//! handles ([`Raiser::start_raw`], [`Raiser::record`], [`Raiser::stop`]). The activation mask
//! starts as `NCCL_PROFILE_EVENT_MASK` and the plugin's `init` may change it at any time (one
//! per process, as NCCL's); an event is raised when its type, or a type below it, is in the
//! mask ([`abi::event::raised_by`], NCCL's rules).

pub mod abi;
pub mod abi_legacy;
pub mod channels;
pub mod completion;
pub mod event;
mod group_api;
pub mod names;
mod vtable;

pub use channels::ChannelTimes;
pub use event::{CollTask, Event, Handle, P2pTask};
pub use group_api::end_group;

use crate::config::{get, vars};
use crate::error::Error;
use libloading::os::unix::Library;
use std::ffi::{CStr, CString, c_int};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use vtable::{InitArgs, VTable};

/// A loaded profiler plugin.
pub struct ProfilerPlugin {
    name: String,
    vtable: VTable,
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
            let Some(vtable) = VTable::find(&lib) else {
                continue;
            };
            // SAFETY: the plugin's name is NULL or a C string in its library, which stays loaded.
            let name = unsafe { crate::plugin_lib::name_or_path(vtable.name(), &path) };
            tracing::info!(target: "oxccl::init", "PROFILER/Plugin: Using {name} (v{}) from {path}", vtable.version());
            return Some(ProfilerPlugin {
                name,
                vtable,
                _lib: lib,
            });
        }
        if profiler.is_some() {
            tracing::warn!(
                target: "oxccl::init",
                "NCCL_PROFILER_PLUGIN={}: no profiler plugin (ncclProfiler_v5 … v1) could be loaded",
                profiler.unwrap_or_default()
            );
        }
        None
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The ABI version the plugin is called with.
    pub fn version(&self) -> u32 {
        self.vtable.version()
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

/// Whether the mask asks for events of `kind`: it, or a type below it.
fn wanted(kind: u64) -> bool {
    // The plugin may store through the pointer from another thread; read it atomically.
    let mask = EVENT_MASK.load(Ordering::Relaxed) as u32 as u64;
    mask & abi::event::raised_by(kind) != 0
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
    let mut ctx = std::ptr::null_mut();
    let args = InitArgs {
        comm_id,
        name,
        nnodes: nnodes as c_int,
        nranks: nranks as c_int,
        rank: rank as c_int,
    };
    let rc = plugin.vtable.init(&mut ctx, EVENT_MASK.as_ptr(), &args)?;
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
        wanted(kind)
    }

    /// Starts `event` under `parent` (0: a root); it stops when the result is dropped.
    pub fn start(&self, event: &Event, parent: Handle) -> Started {
        self.raiser().start(event, parent)
    }
}

impl ProfilerContext {
    /// What raising events needs, kept by a launch for the KernelCh events it raises once its
    /// channels are done.
    pub fn raiser(&self) -> Raiser {
        Raiser {
            plugin: self.plugin,
            ctx: self.ctx,
            rank: self.rank,
        }
    }
}

/// A communicator's context as a launch or the proxy keeps it (valid while the communicator
/// is).
#[derive(Clone, Copy)]
pub struct Raiser {
    plugin: &'static ProfilerPlugin,
    ctx: usize,
    rank: c_int,
}

/// The proxy's threads keep copies: a plugin is called from any thread (as NCCL's proxy
/// thread does), and the context is a plain address.
const _: fn() = || {
    fn shareable<T: Clone + Copy + Send + Sync>() {}
    shareable::<Raiser>();
};

impl Raiser {
    /// Starts `event` under `parent` (0: a root) when the mask asks for it
    /// ([`ProfilerContext::wants`]); it stops when the result is dropped.
    pub fn start(&self, event: &Event, parent: Handle) -> Started {
        let handle = self.start_raw(event, parent);
        Started {
            plugin: (handle != 0).then_some(self.plugin),
            handle,
            end_state: None,
        }
    }

    /// Starts `event` under `parent` (0: a root) when the mask asks for it, for an event that
    /// stops elsewhere ([`Raiser::stop`]; the proxy keeps plain handles); 0 when it was not
    /// raised (not asked for, dropped for the plugin's version, or no handle returned).
    pub fn start_raw(&self, event: &Event, parent: Handle) -> Handle {
        if !wanted(event.kind()) {
            return 0;
        }
        self.plugin.vtable.start(self.ctx, event, parent, self.rank)
    }

    /// Records `state` ([`abi::state`]) of an event [`Raiser::start_raw`] returned (0: nothing),
    /// with `arg` in the first 8 bytes of the state's arguments (a proxy step's `transSize`, a
    /// NetPlugin event's `data`, a KernelCh event's `pTimer`); v1-v4 plugins get it as NCCL's
    /// adapters pass it on.
    pub fn record(&self, handle: Handle, state: c_int, arg: Option<u64>) {
        self.plugin.vtable.record(handle, state, arg);
    }

    /// Stops an event [`Raiser::start_raw`] returned (0: nothing).
    pub fn stop(&self, handle: Handle) {
        self.plugin.vtable.stop(handle);
    }

    /// Whether events of `kind` are raised: it, or a type below it, is in the mask.
    pub fn wants(&self, kind: u64) -> bool {
        wanted(kind)
    }

    /// Runs `finish` on the completion thread once `query` says the launch completed
    /// ([`completion`]; before this context is finalized at the latest).
    pub fn when_done(&self, query: completion::Query, finish: completion::Finish) {
        completion::when_done(self.ctx, query, finish);
    }

    /// Raises, under the task event `task`, a KernelCh event per (channel, start, stop) of
    /// `spans`, as NCCL's proxy does once a channel is done: started with its start time,
    /// its stop time recorded (`ncclProfilerKernelChStop`), stopped.
    pub fn kernel_channels(&self, task: Handle, spans: &[(u32, u64, u64)]) {
        let vtable = &self.plugin.vtable;
        for &(channel, start_ns, stop_ns) in spans {
            let event = Event::KernelCh { channel, start_ns };
            let h = vtable.start(self.ctx, &event, task, self.rank);
            vtable.record(h, abi::state::KERNEL_CH_STOP, Some(stop_ns));
            vtable.stop(h);
        }
    }
}

/// An event started on a plugin, stopped when this is dropped (nothing when it was not raised).
#[must_use = "the event stops when this is dropped"]
pub struct Started {
    plugin: Option<&'static ProfilerPlugin>,
    handle: Handle,
    /// A state recorded just before the event stops.
    end_state: Option<c_int>,
}

impl Started {
    /// No event.
    pub const NONE: Started = Started {
        plugin: None,
        handle: 0,
        end_state: None,
    };

    /// The plugin's handle, for the parent field of events under it (0: not raised).
    pub fn handle(&self) -> Handle {
        self.handle
    }

    /// Records `state` now, and `at_end` just before the event stops (GroupApi events' two).
    pub fn with_states(mut self, now: c_int, at_end: c_int) -> Started {
        if let Some(p) = self.plugin {
            p.vtable.record(self.handle, now, None);
            self.end_state = Some(at_end);
        }
        self
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        if let Some(p) = self.plugin {
            if let Some(s) = self.end_state {
                p.vtable.record(self.handle, s, None);
            }
            p.vtable.stop(self.handle);
        }
    }
}

impl Drop for ProfilerContext {
    fn drop(&mut self) {
        // Events still waiting for their launch go out before the context ends.
        completion::flush(self.ctx);
        let rc = self.plugin.vtable.finalize(self.ctx).unwrap_or(0);
        if rc != 0 {
            tracing::warn!(target: "oxccl::init", "profiler plugin {}: finalize returned {rc}", self.plugin.name);
        }
    }
}
