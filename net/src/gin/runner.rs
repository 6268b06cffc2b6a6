//! The thread that drives a communicator's GIN engines, of either kind ([`GinTransport`]):
//! over a network, it connects one link each way with every other rank over the bootstrap
//! ([`crate::connect::connect_gin`]); over a GIN plugin, one collective comm per context
//! ([`GinPlugin::connect`]). Then it moves every context's descriptors until the communicator
//! goes; an error records itself on the communicator and aborts it, which ends every wait.

use super::GinMemory;
use super::engine::{ContextMem, GinEngine, PeerLink};
use super::plugin_engine::PluginGinEngine;
use crate::Net;
use crate::plugin::gin::{GinColl, GinPlugin};
use oxccl_core::abort::AbortFlag;
use oxccl_core::bootstrap::Bootstrap;
use oxccl_core::error::Result;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// An idle pass spins this long, then yields; with [`Idle::Park`], after [`YIELD`] it parks
/// for [`PARK`] at a time.
const SPIN: Duration = Duration::from_micros(50);
const YIELD: Duration = Duration::from_millis(5);
const PARK: Duration = Duration::from_micros(500);

/// What the engines' thread does once nothing has moved for a while.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idle {
    /// Keeps yielding its core, as NVIDIA's GIN progress thread does: a kernel's descriptor
    /// is taken at once however long the GPU was idle (GPU backends).
    Yield,
    /// Parks, waking every 0.5 ms: for ranks that share a few cores (the host backend).
    Park,
}

/// What a communicator's GIN engines carry descriptors over.
pub enum GinTransport {
    /// Messages on connections of a network (oxccl's own protocol), whose engines copy
    /// payloads in and out of the windows through `windows`.
    Net {
        /// The network.
        net: Arc<dyn Net>,
        /// Its device.
        device: usize,
        /// The windows, as the engines copy them.
        windows: Arc<dyn GinMemory>,
        /// How long connecting may take.
        timeout: Duration,
    },
    /// The network plugin's GIN side: every descriptor is a put of the plugin's.
    Plugin {
        /// The plugin, initialized for this communicator.
        plugin: Arc<GinPlugin>,
        /// Its device.
        device: usize,
        /// `NCCL_PTR_HOST` or `NCCL_PTR_CUDA`: what the windows are to the plugin.
        ptr_type: u32,
    },
}

/// One context's engine, of either kind.
enum Engine {
    Net(GinEngine),
    Plugin(PluginGinEngine),
}

impl Engine {
    fn progress(&mut self) -> Result<bool> {
        match self {
            Engine::Net(e) => e.progress(),
            Engine::Plugin(e) => e.progress(),
        }
    }

    fn sending(&self) -> bool {
        match self {
            Engine::Net(e) => e.sending(),
            Engine::Plugin(e) => e.sending(),
        }
    }
}

/// A communicator's GIN engines on their thread; stopped and joined when dropped.
pub struct GinRunner {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Over a plugin: each context's collective comm (windows are registered on each), and the
    /// windows' pointer type.
    colls: Vec<Arc<GinColl>>,
    ptr_type: u32,
}

impl GinRunner {
    /// Connects this rank's engines (one per entry of `contexts`) over `transport` and starts
    /// driving them. Every rank of the communicator calls this together.
    pub fn start(
        bootstrap: &Bootstrap,
        abort: &AbortFlag,
        transport: GinTransport,
        contexts: Vec<ContextMem>,
        idle: Idle,
    ) -> Result<GinRunner> {
        let (rank, nranks) = (bootstrap.rank() as usize, bootstrap.nranks() as usize);
        let mut engines = Vec::with_capacity(contexts.len());
        let mut colls = Vec::new();
        let mut ptr_type = 0;
        match transport {
            GinTransport::Net {
                net,
                device,
                windows,
                timeout,
            } => {
                let peers: Vec<u32> = (0..nranks as u32).filter(|&p| p as usize != rank).collect();
                for mem in contexts {
                    let links = crate::connect::connect_gin(
                        bootstrap, abort, &net, &peers, device, timeout,
                    )?;
                    let mut by_rank: Vec<Option<PeerLink>> = (0..nranks).map(|_| None).collect();
                    for (&p, (send, recv)) in peers.iter().zip(links) {
                        by_rank[p as usize] = Some(PeerLink { send, recv });
                    }
                    let e = GinEngine::new(net.clone(), rank, by_rank, mem, windows.clone())?;
                    engines.push(Engine::Net(e));
                }
            }
            GinTransport::Plugin {
                plugin,
                device,
                ptr_type: ty,
            } => {
                ptr_type = ty;
                for mem in contexts {
                    let coll = Arc::new(plugin.connect(
                        bootstrap,
                        device,
                        mem.queue_size,
                        mem.nsignals,
                        mem.ncounters,
                    )?);
                    let e = PluginGinEngine::new(coll.clone(), rank, nranks, mem)?;
                    engines.push(Engine::Plugin(e));
                    colls.push(coll);
                }
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (flag, abort) = (stop.clone(), abort.clone());
        let thread = std::thread::Builder::new()
            .name(format!("oxccl-gin-r{rank}"))
            .spawn(move || drive(engines, &abort, &flag, idle))
            .map_err(|e| oxccl_core::error::Error::Internal(format!("no GIN thread: {e}")))?;
        Ok(GinRunner {
            stop,
            thread: Some(thread),
            colls,
            ptr_type,
        })
    }

    /// Window `handle` (`bytes` at `base`) is new: over a plugin, every context registers it
    /// (collective: every rank adds windows in the same order). The window stays allocated
    /// until [`GinRunner::remove_window`].
    pub fn add_window(&self, handle: u64, base: u64, bytes: u64) -> Result<()> {
        for c in &self.colls {
            // SAFETY: the window stays allocated until `remove_window`, this method's contract
            // (the registration's, as for every GIN window).
            unsafe { c.add_window(handle, base, bytes, self.ptr_type) }?;
        }
        Ok(())
    }

    /// Window `handle` is gone (every put naming it completed): over a plugin, every context
    /// deregisters it.
    pub fn remove_window(&self, handle: u64) -> Result<()> {
        let mut result = Ok(());
        for c in &self.colls {
            result = result.and(c.remove_window(handle));
        }
        result
    }
}

/// How long a stopping runner keeps sending what it had taken in.
const DRAIN: Duration = Duration::from_secs(2);

fn drive(mut engines: Vec<Engine>, abort: &AbortFlag, stop: &AtomicBool, idle: Idle) {
    run(&mut engines, abort, stop, idle);
    // A descriptor the device counts as done locally may still be on its way out (the network
    // took it, but a socket helper has yet to write it): closing now would lose it.
    let start = Instant::now();
    while !abort.is_aborted() && start.elapsed() < DRAIN && engines.iter().any(Engine::sending) {
        for e in &mut engines {
            if e.progress().is_err() {
                return;
            }
        }
        std::thread::yield_now();
    }
}

fn run(engines: &mut [Engine], abort: &AbortFlag, stop: &AtomicBool, policy: Idle) {
    let mut last = Instant::now();
    while !abort.is_aborted() && !stop.load(Ordering::Acquire) {
        let mut moved = false;
        for e in engines.iter_mut() {
            match e.progress() {
                Ok(m) => moved |= m,
                Err(err) => {
                    abort.record(err);
                    abort.abort();
                    return;
                }
            }
        }
        if moved {
            last = Instant::now();
            continue;
        }
        let idle = last.elapsed();
        if idle < SPIN {
            std::hint::spin_loop();
        } else if idle < YIELD || policy == Idle::Yield {
            std::thread::yield_now();
        } else {
            std::thread::park_timeout(PARK);
        }
    }
}

impl Drop for GinRunner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::gfd::{self, Signal};
    use super::super::testkit::{HostWindows, context, post};
    use super::*;
    use crate::proxy::testkit::socket_net;
    use crate::socket::SocketConfig;
    use oxccl_core::testing::run_ranks;

    const PART: usize = 300 << 10;

    /// Three ranks connect their engines over the bootstrap, and each puts `PART` bytes of its
    /// window 1 into every other rank's window 2 at its own slice, with a signal increment:
    /// once a rank's signal counts both peers, both slices hold what they sent, and every
    /// rank's descriptors are done locally. Rank 0 then stops first while the others still
    /// run: its closes come between messages, so no other rank is aborted.
    #[test]
    fn three_ranks_put_into_each_other_through_their_runners() {
        let results = run_ranks(3, |b| -> std::result::Result<(), String> {
            let (rank, nranks) = (b.rank() as usize, b.nranks() as usize);
            let net = socket_net(b.rank(), SocketConfig::default());
            let windows = Arc::new(HostWindows::new(&[PART, nranks * PART], rank as u8));
            let (mem, _keep) = context(nranks, 4);
            let abort = AbortFlag::new();
            let transport = GinTransport::Net {
                net,
                device: 0,
                windows: windows.clone(),
                timeout: Duration::from_secs(10),
            };
            let runner = GinRunner::start(&b, &abort, transport, vec![mem], Idle::Park)
                .map_err(|e| e.to_string())?;
            for peer in (0..nranks).filter(|&p| p != rank) {
                let g = gfd::encode::put(
                    2,
                    (rank * PART) as u64,
                    1,
                    0,
                    PART as u64,
                    None,
                    Some(Signal::Inc(0)),
                );
                post(&mem, peer, 0, &g);
            }
            let t0 = Instant::now();
            let signal = mem.word64(mem.signals, 0);
            let done = |p: usize| mem.ci(p).load(Ordering::Acquire) == 1;
            while signal.load(Ordering::Acquire) < (nranks - 1) as u64
                || !(0..nranks).filter(|&p| p != rank).all(done)
            {
                if t0.elapsed() > Duration::from_secs(20) {
                    return Err(format!(
                        "rank {rank}: signal {}",
                        signal.load(Ordering::Acquire)
                    ));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            for peer in (0..nranks).filter(|&p| p != rank) {
                let sent = HostWindows::new(&[PART], peer as u8).get(1, 0, PART);
                if windows.get(2, (peer * PART) as u64, PART) != sent {
                    return Err(format!("rank {rank}: rank {peer}'s slice differs"));
                }
            }
            b.barrier().map_err(|e| e.to_string())?;
            if rank == 0 {
                drop(runner);
                b.barrier().map_err(|e| e.to_string())?;
            } else {
                b.barrier().map_err(|e| e.to_string())?;
                std::thread::sleep(Duration::from_millis(300));
                drop(runner);
            }
            if abort.is_aborted() {
                return Err(format!("rank {rank} was aborted: {:?}", abort.error()));
            }
            Ok(())
        });
        for r in results {
            r.unwrap();
        }
    }
}
