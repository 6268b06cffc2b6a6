//! Device-initiated networking (GIN) of a communicator's device API, through the host proxy
//! (NCCL 2.28.9's proxy GIN type): the contexts whose rings kernels post descriptors to, the
//! engines that carry them over the network (`oxccl_net::gin`), the windows those engines read
//! and write by handle, and the signal and counter ids device communicators take.
//!
//! Started once per communicator, by the first device communicator that needs it (every rank
//! at once: device communicators are created collectively), and stopped with the
//! communicator. On the host backend "device" memory is host memory, so a context is plain
//! memory the engine and the ranks' code share; on GPUs a context's rings are mapped host
//! memory and the words kernels poll are device memory the engine writes from a stream of its
//! own (`oxccl_device_transport::gin_context`), on which it also copies windows
//! (`gin_windows`).

use crate::dispatch::{AnyBackend, AnyComm, CommOps, RuntimeBackend};
use oxccl_core::backend::DevicePtr;
use oxccl_core::config::{self, vars};
use oxccl_core::{Error, Result};
use oxccl_net::connect::choose_net;
use oxccl_net::gin::context_layout::{ContextLayout, GPU_CTX_BYTES};
use oxccl_net::gin::engine::ContextMem;
use oxccl_net::gin::runner::{GinRunner, GinTransport, Idle};
use oxccl_net::gin::{GinMemory, WindowRanges};
use oxccl_net::plugin::gin::GinPlugin;
use oxccl_net::{Net, PTR_CUDA, PTR_HOST};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

pub use oxccl_net::gin::context_layout::GIN_TYPE_PROXY;

/// First-fit ranges of ids below a limit (NCCL's signal and counter pools: every device
/// communicator takes one range of each, and ranks take them in the same order).
#[derive(Debug)]
pub struct IdPool {
    limit: u32,
    /// Taken ranges: start to length.
    taken: BTreeMap<u32, u32>,
    what: &'static str,
}

impl IdPool {
    /// No ids taken among `limit`.
    pub fn new(limit: u32, what: &'static str) -> IdPool {
        IdPool {
            limit,
            taken: BTreeMap::new(),
            what,
        }
    }

    /// The start of the first free run of `n` ids (0 takes nothing and returns 0).
    pub fn take(&mut self, n: u32) -> Result<u32> {
        if n == 0 {
            return Ok(0);
        }
        let mut at = 0u32;
        for (&start, &len) in &self.taken {
            if start - at >= n {
                break;
            }
            at = start + len;
        }
        if self.limit - at.min(self.limit) < n {
            return Err(Error::usage(format!(
                "ncclDevCommCreate: {n} GIN {} do not fit among the {} left free of {} (device communicators not destroyed hold the rest; NCCL_GIN_{}_POOL_SIZE sets the total)",
                self.what,
                self.limit - self.taken.values().sum::<u32>(),
                self.limit,
                self.what.trim_end_matches('s').to_uppercase(),
            )));
        }
        self.taken.insert(at, n);
        Ok(at)
    }

    /// Gives back the `n` ids from `start` that [`IdPool::take`] gave.
    pub fn give(&mut self, start: u32, n: u32) {
        if n > 0 && self.taken.get(&start) == Some(&n) {
            self.taken.remove(&start);
        }
    }
}

/// The signal and counter ids of one device communicator (`ginSignalBase` and so on).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GinIds {
    /// First signal.
    pub signal0: u32,
    /// Signals.
    pub signals: u32,
    /// First counter.
    pub counter0: u32,
    /// Counters.
    pub counters: u32,
}

/// One context's memory in host memory: the parts the engine moves, then the producer
/// indices, then NVIDIA's 48-byte struct (what `ginHandles[i]` points at).
struct HostContext {
    words: Box<[AtomicU64]>,
    layout: ContextLayout,
}

impl HostContext {
    fn new(nranks: usize, queue_size: u32, ncounters: usize, nsignals: usize) -> HostContext {
        let layout = ContextLayout::new(nranks, queue_size, ncounters, nsignals);
        let pis = (4 * nranks).next_multiple_of(8);
        let words = (layout.total + pis + GPU_CTX_BYTES) / 8;
        let c = HostContext {
            words: (0..words).map(|_| AtomicU64::new(0)).collect(),
            layout,
        };
        let base = c.base() as u64;
        let image = layout.gpu_ctx(base, base + layout.total as u64, None);
        let ctx = (layout.total + pis) / 8;
        for (w, bytes) in c.words[ctx..].iter().zip(image.chunks_exact(8)) {
            w.store(
                u64::from_le_bytes(bytes.try_into().expect("8 bytes")),
                std::sync::atomic::Ordering::Relaxed,
            );
        }
        c
    }

    fn base(&self) -> *mut u8 {
        self.words.as_ptr().cast_mut().cast()
    }

    /// What `ncclDevComm::ginHandles[i]` holds.
    fn device_handle(&self) -> u64 {
        (self.base() as u64) + (self.words.len() * 8 - GPU_CTX_BYTES) as u64
    }

    fn engine_memory(&self) -> ContextMem {
        // SAFETY: `words` holds `layout.total` bytes (and more), 8-aligned, and is dropped only
        // after the runner whose engines use it (`GinState`'s field order).
        unsafe { self.layout.context_mem(self.base()) }
    }
}

/// One context's memory, wherever its backend keeps it.
trait GinContext: Send {
    /// What `ncclDevComm::ginHandles[i]` holds.
    fn device_handle(&self) -> u64;
    /// The engine's view of it.
    fn engine_memory(&self) -> ContextMem;
}

impl GinContext for HostContext {
    fn device_handle(&self) -> u64 {
        HostContext::device_handle(self)
    }
    fn engine_memory(&self) -> ContextMem {
        HostContext::engine_memory(self)
    }
}

#[cfg(any(feature = "cuda", feature = "hip"))]
impl<A: oxccl_device_transport::DeviceApi> GinContext
    for oxccl_device_transport::gin_context::GinContextMemory<A>
{
    fn device_handle(&self) -> u64 {
        oxccl_device_transport::gin_context::GinContextMemory::device_handle(self)
    }
    fn engine_memory(&self) -> ContextMem {
        oxccl_device_transport::gin_context::GinContextMemory::engine_memory(self)
    }
}

/// The windows of the host backend: by GIN handle, through the backend's copies.
struct BackendWindows {
    backend: Arc<AnyBackend>,
    device: i32,
    ranges: Arc<WindowRanges>,
}

impl GinMemory for BackendWindows {
    fn read(&self, handle: u64, offset: u64, dst: &mut [u8]) -> Result<()> {
        let src = self.ranges.at(handle, offset, dst.len(), "reads")?;
        // SAFETY: `src` and the `dst.len()` bytes after it lie in a registered window, which
        // stays allocated while registered (the registration's contract).
        unsafe { self.backend.copy_from_device(self.device, dst, src) }
    }

    fn write(&self, handle: u64, offset: u64, src: &[u8]) -> Result<()> {
        let dst = self.ranges.at(handle, offset, src.len(), "writes")?;
        // SAFETY: as for `read`; the copy has landed when this returns, before the engine
        // applies the put's signal.
        unsafe { self.backend.copy_to_device(self.device, dst, src) }
    }
}

/// A communicator's GIN: its contexts, their engines' thread, its windows and id pools.
pub struct GinState {
    /// First: its engines stop before the memory they move goes.
    runner: GinRunner,
    contexts: Vec<Box<dyn GinContext>>,
    windows: Arc<WindowRanges>,
    signals: IdPool,
    counters: IdPool,
}

impl GinState {
    /// Starts GIN on `comm` (collective: every rank at once), with the windows registered so far
    /// (`windows_now`: handle, base, bytes).
    pub fn start(
        comm: &AnyComm,
        backend: &Arc<AnyBackend>,
        windows_now: impl IntoIterator<Item = (u64, DevicePtr, u64)>,
    ) -> Result<GinState> {
        // `create_dev_comm` starts GIN only where NCCL_GIN_ENABLE allows it.
        if let Some(t) = foreign_type_asked() {
            return Err(Error::Internal(format!(
                "ncclDevCommCreate: NCCL_GIN_TYPE={t} asks for a GIN type oxccl lacks: it has the proxy type ({GIN_TYPE_PROXY}) only"
            )));
        }
        let nsignals = config::get(&vars::NCCL_GIN_SIGNAL_POOL_SIZE);
        let ncounters = config::get(&vars::NCCL_GIN_COUNTER_POOL_SIZE);
        let queue = config::get(&vars::NCCL_GIN_PROXY_QUEUE_SIZE);
        let ncontexts = config::get(&vars::NCCL_GIN_NCONTEXTS) as usize;
        let shape = Shape {
            nranks: comm.nranks(),
            queue,
            ncounters: ncounters as usize,
            nsignals: nsignals as usize,
            ncontexts,
        };
        let device = comm.device();
        let ranges = Arc::new(WindowRanges::default());
        // In handle order, the order every rank took them in: a plugin registers them
        // collectively.
        let mut windows_now: Vec<_> = windows_now.into_iter().collect();
        windows_now.sort_by_key(|w| w.0);
        for &(h, base, bytes) in &windows_now {
            ranges.add(h, base, bytes);
        }
        let (bootstrap, abort) = comm.gin_endpoints()?;
        let net = choose_net(&bootstrap)?;
        let plugin = plugin_choice(&*net, &bootstrap)?;
        // A GIN plugin writes signals itself, in host memory it registers.
        let words_on_device = plugin.is_err() && !config::get(&vars::OXCCL_GIN_HOST_WORDS).0;
        let (contexts, memory): Parts = match comm {
            #[cfg(feature = "cuda")]
            AnyComm::Cuda(c) => gpu_parts(
                c.communicator().backend().api(),
                device,
                &shape,
                &ranges,
                &abort,
                words_on_device,
            )?,
            #[cfg(feature = "hip")]
            AnyComm::Hip(c) => gpu_parts(
                c.communicator().backend().api(),
                device,
                &shape,
                &ranges,
                &abort,
                words_on_device,
            )?,
            AnyComm::Host(_) => (
                (0..ncontexts)
                    .map(|_| {
                        let c =
                            HostContext::new(shape.nranks, queue, shape.ncounters, shape.nsignals);
                        Box::new(c) as Box<dyn GinContext>
                    })
                    .collect(),
                Arc::new(BackendWindows {
                    backend: backend.clone(),
                    device,
                    ranges: ranges.clone(),
                }),
            ),
        };
        let net_device = config::get(&vars::OXCCL_NET_DEVICE).unwrap_or(0);
        let ptr_type = if matches!(comm, AnyComm::Host(_)) {
            PTR_HOST
        } else {
            PTR_CUDA
        };
        let (transport, how) = match plugin {
            Ok(plugin) => {
                let how = format!(
                    "GIN plugin {} (v{}) of network plugin {}",
                    plugin.name(),
                    plugin.version(),
                    plugin.lib().path()
                );
                let plugin = Arc::new(plugin);
                let t = GinTransport::Plugin {
                    plugin,
                    device: net_device,
                    ptr_type,
                };
                (t, how)
            }
            Err(why) => {
                let t = GinTransport::Net {
                    net: net.clone(),
                    device: net_device,
                    windows: memory,
                    timeout: config::get(&vars::OXCCL_INIT_TIMEOUT),
                };
                (
                    t,
                    format!("oxccl's messages over network {} ({why})", net.name()),
                )
            }
        };
        // Host-backend ranks share a few cores; a GPU's kernels expect NVIDIA's spinning proxy.
        let idle = if matches!(comm, AnyComm::Host(_)) {
            Idle::Park
        } else {
            Idle::Yield
        };
        let runner = GinRunner::start(
            &bootstrap,
            &abort,
            transport,
            contexts.iter().map(|c| c.engine_memory()).collect(),
            idle,
        )?;
        for &(h, base, bytes) in &windows_now {
            runner.add_window(h, base, bytes)?;
        }
        let words = match contexts.first().map(|c| c.engine_memory().device_cells) {
            Some(Some(_)) => "device",
            _ => "mapped host",
        };
        tracing::info!(target: "oxccl::init",
            "rank {}: GIN through the host proxy, over {how}: {ncontexts} contexts of {queue} slots per peer, {nsignals} signals, {ncounters} counters, polled words in {words} memory",
            comm.rank());
        Ok(GinState {
            runner,
            contexts,
            windows: ranges,
            signals: IdPool::new(nsignals, "signals"),
            counters: IdPool::new(ncounters, "counters"),
        })
    }

    /// Takes a device communicator's ids.
    pub fn take_ids(&mut self, signals: u32, counters: u32) -> Result<GinIds> {
        let signal0 = self.signals.take(signals)?;
        match self.counters.take(counters) {
            Ok(counter0) => Ok(GinIds {
                signal0,
                signals,
                counter0,
                counters,
            }),
            Err(e) => {
                self.signals.give(signal0, signals);
                Err(e)
            }
        }
    }

    /// Gives back a device communicator's ids.
    pub fn give_ids(&mut self, ids: GinIds) {
        self.signals.give(ids.signal0, ids.signals);
        self.counters.give(ids.counter0, ids.counters);
    }

    /// Each context's device handle (`ginHandles`), in order.
    pub fn handles(&self) -> Vec<u64> {
        self.contexts.iter().map(|c| c.device_handle()).collect()
    }

    /// Window `handle` is this rank's `bytes` bytes at `base` (collective: a GIN plugin
    /// registers it on every rank in the same order); it stays allocated until
    /// [`GinState::remove_window`].
    pub fn add_window(&self, handle: u64, base: DevicePtr, bytes: u64) -> Result<()> {
        self.runner.add_window(handle, base, bytes)?;
        self.windows.add(handle, base, bytes);
        Ok(())
    }

    /// Window `handle` is gone.
    pub fn remove_window(&self, handle: u64) -> Result<()> {
        self.windows.remove(handle);
        self.runner.remove_window(handle)
    }
}

/// The GIN plugin of `net`'s library when every rank can use it (collective), else why not:
/// no plugin network, no GIN symbol, `OXCCL_GIN_PLUGIN=0`, a failed `init`, no device, a type
/// other than the proxy, or another rank's reason.
fn plugin_choice(
    net: &dyn Net,
    bootstrap: &oxccl_core::bootstrap::Bootstrap,
) -> Result<std::result::Result<GinPlugin, String>> {
    let mine = match net.plugin_lib() {
        None => Err(format!("{} is not a network plugin", net.name())),
        Some(lib) if lib.gin_version().is_none() => Err(format!(
            "{} exports no ncclGinPlugin_v11 .. v13",
            lib.path()
        )),
        Some(_) if !config::get(&vars::OXCCL_GIN_PLUGIN).0 => Err("OXCCL_GIN_PLUGIN=0".to_string()),
        Some(lib) => GinPlugin::new(lib, bootstrap.session_key().nonce).map_err(|e| e.to_string()),
    };
    // Every rank must drive GIN alike: one rank's plugin failing sends all to the messages.
    let all = bootstrap.all_gather(&[u8::from(mine.is_ok())])?;
    if let Some(r) = all.iter().position(|v| v.first() != Some(&1)) {
        let why = match mine {
            Err(why) => why,
            Ok(_) => format!("rank {r} cannot use the GIN plugin"),
        };
        return Ok(Err(why));
    }
    Ok(mine)
}

/// Whether GIN may start (`NCCL_GIN_ENABLE`, as in NCCL).
pub fn enabled() -> bool {
    config::get(&vars::NCCL_GIN_ENABLE)
}

/// The type `NCCL_GIN_TYPE` asks for when it is one oxccl lacks.
fn foreign_type_asked() -> Option<i64> {
    config::get(&vars::NCCL_GIN_TYPE).filter(|&t| t != -1 && t != i64::from(GIN_TYPE_PROXY))
}

/// The GIN type device communicators get (`ncclCommQueryProperties`): the proxy type, or 0
/// when the environment rules it out.
pub fn offered_type() -> u8 {
    if enabled() && foreign_type_asked().is_none() {
        GIN_TYPE_PROXY
    } else {
        0
    }
}

/// A communicator's contexts, and its windows as its engines copy them.
type Parts = (Vec<Box<dyn GinContext>>, Arc<dyn GinMemory>);

/// What every context of a communicator is made with.
struct Shape {
    nranks: usize,
    queue: u32,
    ncounters: usize,
    nsignals: usize,
    ncontexts: usize,
}

/// Says once per process when CUDA's hardware queues are few enough for a GIN window copy to
/// share one with a kernel that waits for it (the copy would stall: `gin_windows`).
#[cfg(any(feature = "cuda", feature = "hip"))]
fn warn_about_hardware_queues() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    oxccl_device_transport::hardware_queues::warn_if_few_hardware_queues(&ONCE, |queues| {
        format!(
            "GIN on a GPU with CUDA_DEVICE_MAX_CONNECTIONS={queues}: this process's streams share {queues} hardware queues, and a GIN window copy sharing one with a kernel that waits for it stalls (oxccl then fails it after 60 s)"
        )
    });
}

/// A GPU's contexts (mapped host memory and device memory of `device`) and windows; the words
/// kernels poll in device memory when `words_on_device` and the runtime can write them.
#[cfg(any(feature = "cuda", feature = "hip"))]
fn gpu_parts<A: oxccl_device_transport::DeviceApi>(
    api: &A,
    device: i32,
    shape: &Shape,
    ranges: &Arc<WindowRanges>,
    abort: &oxccl_core::abort::AbortFlag,
    words_on_device: bool,
) -> Result<Parts> {
    use oxccl_device_transport::gin_context::GinContextMemory;
    use oxccl_device_transport::gin_windows::GinWindows;
    let on_device = words_on_device && api.has_word_writes(device);
    let mut contexts: Vec<Box<dyn GinContext>> = Vec::with_capacity(shape.ncontexts);
    for _ in 0..shape.ncontexts {
        contexts.push(Box::new(GinContextMemory::new(
            api,
            device,
            shape.nranks,
            shape.queue,
            shape.ncounters,
            shape.nsignals,
            on_device,
        )?));
    }
    warn_about_hardware_queues();
    let windows = GinWindows::new(api.clone(), device, ranges.clone(), abort.clone())?;
    let windows = if on_device {
        windows.signals_on_stream()
    } else {
        windows
    };
    Ok((contexts, Arc::new(windows)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_ranges_are_taken_first_fit_and_given_back() {
        let mut p = IdPool::new(10, "signals");
        assert_eq!(p.take(0).unwrap(), 0);
        assert_eq!(p.take(4).unwrap(), 0);
        assert_eq!(p.take(3).unwrap(), 4);
        p.give(0, 0);
        p.give(0, 3);
        assert_eq!(
            p.take(1).unwrap(),
            7,
            "a count that does not match frees nothing"
        );
        p.give(7, 1);
        p.give(0, 4);
        assert_eq!(p.take(2).unwrap(), 0, "the freed hole first");
        assert_eq!(p.take(3).unwrap(), 7);
        let e = p.take(3).unwrap_err().to_string();
        assert!(
            e.contains("3 GIN signals") && e.contains("NCCL_GIN_SIGNAL_POOL_SIZE"),
            "{e}"
        );
        assert_eq!(p.take(2).unwrap(), 2, "what still fits");
    }

    /// The struct at the device handle points into the context's own memory, at the layout's
    /// offsets, with the producer indices between the two.
    #[test]
    fn a_host_context_s_struct_points_into_its_memory() {
        let c = HostContext::new(3, 8, 16, 32);
        let base = c.base() as u64;
        let h = c.device_handle();
        let end = base + (c.words.len() * 8) as u64;
        assert_eq!(h + GPU_CTX_BYTES as u64, end);
        // SAFETY: `h` is the address of the struct's 48 bytes inside `c.words`.
        let img = unsafe { std::slice::from_raw_parts(h as *const u8, GPU_CTX_BYTES) };
        let word = |at: usize| u64::from_le_bytes(img[at..at + 8].try_into().unwrap());
        assert_eq!(img[0..4], 3i32.to_le_bytes());
        assert_eq!(word(8), base);
        assert_eq!(word(16), base + c.layout.total as u64);
        assert!(
            word(16) + 12 <= h,
            "the producer indices lie before the struct"
        );
        assert_eq!(word(40), base + c.layout.signals as u64);
    }
}
