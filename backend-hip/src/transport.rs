//! Per-communicator connections (P2P FIFOs through peer-mapped device memory) and the launch of
//! plan executors: the HIP twin of `backend-cuda/src/transport.rs`, with the same layout, the
//! same bootstrap record and the same launch ABI (`kernels/common/oxccl/work.h`).
//!
//! Every rank allocates, on its own device, one receive FIFO per (channel, peer) for the
//! channels of its [`FifoGeometry`]: slots plus a head and a tail counter, each on its own
//! 64-byte line. The allocation is published through the bootstrap; peers of the same
//! process use its address directly (VMM access was granted to every peer-capable device, and
//! peer access is enabled for `hipMalloc` memory), peers in other processes of the same host
//! import its exported handle (a POSIX file descriptor, or a `hipIpcMemHandle_t`). There is no
//! SHM or network fallback: a pair of devices without peer access, or ranks on different hosts,
//! fail at init.
//!
//! None of this has run on an AMD GPU.

use crate::kernels::{
    self, ArgsLayout, FifoGeometry, HIP_INLINE_ARGS_BYTES, LaunchArgs, kernel_params, publish,
};
use crate::runtime::hip_call;
use crate::{HipBackend, HipStream, sys, with_device};
use oxccl_core::abort::{AbortFlag, AbortWatcher};
use oxccl_core::backend::{Backend, ConnectContext, DevicePtr, ShareableHandle};
use oxccl_core::error::{Error, Result};
use oxccl_core::plan::{BufId, WorkDesc};
use std::ffi::c_void;
use std::sync::Mutex;

/// Thread-block size of the executor kernels: four 64-lane wavefronts on CDNA (eight 32-lane
/// ones on RDNA), below the kernels' `__launch_bounds__`.
pub const BLOCK_THREADS: u32 = 256;
/// Launch-argument arenas per transport, reused round-robin once their launch has completed.
const ARENAS: usize = 16;
const _: () = assert!(BLOCK_THREADS.is_multiple_of(64));
const _: () = assert!(BLOCK_THREADS <= kernels::MAX_THREADS_PER_BLOCK);

/// One launch-argument arena: pinned host staging and its device copy.
struct Arena {
    host: *mut u8,
    dev: DevicePtr,
    cap: usize,
    /// `hipEvent_t` recorded after the arena's latest launch.
    event: usize,
}

/// What launches of one transport share; guarded by the transport's mutex.
struct LaunchState {
    epoch: u64,
    scratch: (DevicePtr, usize),
    loopback: (DevicePtr, usize),
    flags: (DevicePtr, usize),
    arenas: Vec<Arena>,
    next: usize,
    /// Index of the arena of the latest launch (its event marks this communicator's tail).
    last: Option<usize>,
    /// Replaced device buffers (`hipMalloc`), freed with the transport: `hipFree` waits for the
    /// whole device, where another rank's kernel may be waiting for the very launch being
    /// prepared (ranks sharing a GPU), as the CUDA transport's `retired`.
    retired: Vec<DevicePtr>,
    /// Replaced pinned staging (`hipHostMalloc`), freed with the transport for the same reason.
    retired_host: Vec<*mut u8>,
}

/// One communicator's connections on the HIP backend.
pub struct HipTransport {
    be: HipBackend,
    device: i32,
    rank: u32,
    nranks: u32,
    fifo: DevicePtr,
    imported: Vec<DevicePtr>,
    /// How the FIFOs are cut (the same on every rank).
    geometry: FifoGeometry,
    /// `send_conns` then `recv_conns`, `geometry.channels * nranks` each (hipMalloc).
    conns: DevicePtr,
    /// Sender-local counters of every send connection (hipMalloc).
    send_state: DevicePtr,
    abort_host: *mut u32,
    abort_dev: DevicePtr,
    watcher: Option<AbortWatcher>,
    state: Mutex<LaunchState>,
}

impl std::fmt::Debug for HipTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HipTransport")
            .field("device", &self.device)
            .field("rank", &self.rank)
            .field("nranks", &self.nranks)
            .finish_non_exhaustive()
    }
}

// SAFETY: the raw pointers are pinned host memory and device addresses owned by the transport,
// written only under its mutex (arenas) or with single volatile stores (abort flag).
unsafe impl Send for HipTransport {}
// SAFETY: as above.
unsafe impl Sync for HipTransport {}

impl HipBackend {
    /// `hipMalloc` on the current device.
    fn dev_alloc(&self, bytes: usize) -> Result<DevicePtr> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: `p` is a valid out-pointer.
        unsafe { hip_call!(self.hip, hipMalloc(&mut p, bytes.max(16))) }?;
        Ok(p as DevicePtr)
    }

    /// Frees [`HipBackend::dev_alloc`] memory (0 is ignored).
    fn dev_free(&self, p: DevicePtr) {
        if p != 0 {
            // SAFETY: `p` came from hipMalloc and the caller ensured no work uses it.
            let _ = unsafe { hip_call!(self.hip, hipFree(p as *mut c_void)) };
        }
    }

    /// Synchronous host-to-device copy on the null stream.
    fn copy_h2d(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        // SAFETY: the caller passes device memory of at least `src.len()` bytes; the copy is
        // complete (the stream synchronised) before `src` can be dropped.
        unsafe {
            hip_call!(
                self.hip,
                hipMemcpyAsync(
                    dst as *mut c_void,
                    src.as_ptr().cast(),
                    src.len(),
                    sys::hipMemcpyKind::hipMemcpyHostToDevice,
                    std::ptr::null_mut()
                )
            )?;
            hip_call!(self.hip, hipStreamSynchronize(std::ptr::null_mut()))
        }
    }

    /// A timing-less event (raw handle), destroyed by [`HipBackend::event_destroy_raw`].
    fn event_create_raw(&self) -> Result<usize> {
        let mut e: sys::hipEvent_t = std::ptr::null_mut();
        // SAFETY: `e` is a valid out-pointer; the flag is a defined value.
        unsafe {
            hip_call!(
                self.hip,
                hipEventCreateWithFlags(&mut e, sys::hipEventDisableTiming)
            )
        }?;
        Ok(e as usize)
    }

    fn event_sync_raw(&self, e: usize) -> Result<()> {
        // SAFETY: `e` is a live event of a transport (an unrecorded event is complete).
        unsafe { hip_call!(self.hip, hipEventSynchronize(e as sys::hipEvent_t)) }
    }

    fn event_destroy_raw(&self, e: usize) {
        // SAFETY: `e` came from hipEventCreateWithFlags and is destroyed once.
        let _ = unsafe { hip_call!(self.hip, hipEventDestroy(e as sys::hipEvent_t)) };
    }

    /// Lets the current device `device` write memory of `peer` allocated with `hipMalloc`
    /// (VMM memory got its access at allocation); fails when the pair has no peer access.
    fn ensure_peer_access(&self, device: i32, peer: i32) -> Result<()> {
        if device == peer {
            return Ok(());
        }
        let mut can = 0;
        // SAFETY: `can` is a valid out-pointer; HIP validates both ordinals.
        unsafe { hip_call!(self.hip, hipDeviceCanAccessPeer(&mut can, device, peer)) }?;
        if can == 0 {
            return Err(Error::usage(format!(
                "GPU {device} cannot access GPU {peer} peer to peer; the HIP backend has no SHM fallback yet"
            )));
        }
        // SAFETY: `peer` is a valid ordinal (checked above); the flags must be 0.
        match unsafe { hip_call!(self.hip, hipDeviceEnablePeerAccess(peer, 0)) } {
            Ok(()) => {}
            Err(Error::Backend { code, .. })
                if code == i64::from(sys::hipError_t::hipErrorPeerAccessAlreadyEnabled.0) => {}
            Err(e) => {
                tracing::debug!(target: "oxccl::hip", "hipDeviceEnablePeerAccess({peer}): {e}");
            }
        }
        Ok(())
    }
}

impl HipTransport {
    /// Connects this rank to every peer (`Backend::connect`).
    pub(crate) fn connect(be: &HipBackend, ctx: &ConnectContext<'_>) -> Result<HipTransport> {
        with_device(be, ctx.device, || HipTransport::connect_current(be, ctx))
    }

    fn connect_current(be: &HipBackend, ctx: &ConnectContext<'_>) -> Result<HipTransport> {
        let bs = ctx.bootstrap;
        let (rank, nranks, device) = (bs.rank(), bs.nranks(), ctx.device);
        let geometry = be.geometry();
        let fifo = be.mem_alloc(device, geometry.fifo_bytes(nranks) as usize)?;
        // From here on Drop frees what the transport holds.
        let mut t = HipTransport {
            be: be.clone(),
            device,
            rank,
            nranks,
            fifo,
            imported: Vec::new(),
            geometry,
            conns: 0,
            send_state: 0,
            abort_host: std::ptr::null_mut(),
            abort_dev: 0,
            watcher: None,
            state: Mutex::new(LaunchState {
                epoch: 0,
                scratch: (0, 0),
                loopback: (0, 0),
                flags: (0, 0),
                arenas: Vec::new(),
                next: 0,
                last: None,
                retired: Vec::new(),
                retired_host: Vec::new(),
            }),
        };
        // Zero the counters (slots need no initialisation).
        be.copy_h2d(fifo, &vec![0u8; geometry.counter_bytes(nranks)])?;

        let handle = if nranks > 1 {
            // SAFETY: `fifo` is our live allocation.
            match unsafe { be.export_handle(fifo) } {
                Ok(h) => h.0,
                Err(e) => {
                    tracing::info!(target: "oxccl::hip", "rank {rank}: FIFO not exportable: {e}");
                    Vec::new()
                }
            }
        } else {
            Vec::new()
        };
        // The multiprocessor count is not among the runtime calls this backend loads: ranks
        // sharing a device get no block cap here (see `shared_device_max_blocks`).
        let all = bs.all_gather(&publish(
            std::process::id(),
            device,
            0,
            fifo,
            &geometry,
            &handle,
        ))?;
        let me = &bs.peers()[rank as usize];
        let mut peer_fifo = vec![0u64; nranks as usize];
        for p in 0..nranks as usize {
            if p == rank as usize {
                peer_fifo[p] = fifo;
                continue;
            }
            let rec = geometry.peer_record(p, &all[p])?;
            let info = &bs.peers()[p];
            if !info.same_host(me) {
                return Err(Error::usage(format!(
                    "{} is on another host: the HIP backend has no network transport yet",
                    info.describe()
                )));
            }
            if info.pid == std::process::id() && info.shares_proc_with_caller() {
                be.ensure_peer_access(device, rec.device)?;
                peer_fifo[p] = rec.fifo;
            } else {
                if rec.handle.is_empty() {
                    return Err(Error::usage(format!(
                        "{} could not export its FIFO memory for other processes",
                        info.describe()
                    )));
                }
                let h = ShareableHandle(rec.handle.to_vec());
                // SAFETY: the handle is a peer's export of its FIFO allocation of this size.
                let va = unsafe { be.import_handle(&h, geometry.fifo_bytes(nranks) as usize) }?;
                t.imported.push(va);
                peer_fifo[p] = va;
            }
        }

        // Sender-local counters: the LL positions (copies of the Simple counters,
        // OXCCL_LOCAL_COUNTERS on CUDA, are not used on HIP yet).
        let n = geometry.send_state_bytes(nranks);
        t.send_state = be.dev_alloc(n)?;
        be.copy_h2d(t.send_state, &vec![0u8; n])?;
        let table = geometry.conn_table(rank, nranks, fifo, &peer_fifo, t.send_state, false);
        t.conns = be.dev_alloc(table.len())?;
        be.copy_h2d(t.conns, &table)?;

        // Abort flag in mapped pinned memory, mirrored from the communicator's flag.
        let (host, dev) = be.host_alloc(64)?;
        t.abort_host = host.cast();
        t.abort_dev = dev;
        // SAFETY: `abort_host` points to at least 4 writable bytes of pinned memory.
        unsafe { std::ptr::write_volatile(t.abort_host, 0) };
        let flag = t.abort_host as usize;
        t.watcher = Some(ctx.abort.watch(format!("oxccl-abort-r{rank}"), move || {
            // SAFETY: `flag` is the transport's pinned abort word, freed only after the watcher
            // has been dropped (and so joined).
            unsafe { std::ptr::write_volatile(flag as *mut u32, 1) };
        })?);
        Ok(t)
    }

    /// Queues `work` on `stream` (`Backend::launch`).
    ///
    /// # Safety
    /// `buffers` are valid for the plan's regions until the kernel has run; `stream` is live.
    pub(crate) unsafe fn launch(
        &self,
        stream: &HipStream,
        work: &WorkDesc,
        buffers: &[DevicePtr],
        abort: &AbortFlag,
    ) -> Result<()> {
        abort.check()?;
        if !self.be.has_kernels() {
            return Err(crate::code_object::CodeObject::missing());
        }
        let nch = work.channels.len();
        if nch == 0 || work.step_count() == 0 {
            return Ok(());
        }
        // A captured launch would replay argument copies from staging that later launches
        // rewrite (the CUDA backend's capture path has no HIP twin yet): refuse, never record a
        // graph that computes garbage.
        if self.be.is_capturing(stream)? {
            return Err(Error::usage(
                "the HIP backend cannot record operations into a HIP graph yet: the stream is capturing (run the operation outside capture)",
            ));
        }

        // SAFETY: forwarded from the caller.
        with_device(&self.be, self.device, || unsafe {
            self.launch_current(stream, work, buffers)
        })
    }

    /// [`HipTransport::launch`] with the transport's device current.
    ///
    /// # Safety
    /// As [`HipTransport::launch`].
    unsafe fn launch_current(
        &self,
        stream: &HipStream,
        work: &WorkDesc,
        buffers: &[DevicePtr],
    ) -> Result<()> {
        let be = &self.be;
        let hip = &*be.hip;
        let nch = work.channels.len();
        let func = be.function(self.device, work.dtype)?;
        let enc = kernels::encode(work, self.rank)?;
        self.geometry.check_plan(&enc)?;
        let red = kernels::reduction_args(&work.reduction);
        let esize = work.dtype.size();
        let s = stream.raw();

        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let st = &mut *st;
        let last_event = st.last.map(|i| st.arenas[i].event);
        // Grow shared buffers after every earlier launch of this communicator has finished.
        let scratch_need = (work.scratch_elems as usize).saturating_mul(esize);
        let lb_need = enc.loopback_bytes as usize;
        let fl_need = enc.loopback_offsets.len() * 8;
        if scratch_need > st.scratch.1 || lb_need > st.loopback.1 || fl_need > st.flags.1 {
            if let Some(ev) = last_event {
                be.event_sync_raw(ev)?;
            }
            if scratch_need > st.scratch.1 {
                let n = scratch_need.next_power_of_two();
                let p = be.dev_alloc(n)?;
                st.retired
                    .push(std::mem::replace(&mut st.scratch, (p, n)).0);
            }
            if lb_need > st.loopback.1 {
                let n = lb_need.next_power_of_two();
                let p = be.dev_alloc(n)?;
                st.retired
                    .push(std::mem::replace(&mut st.loopback, (p, n)).0);
            }
            if fl_need > st.flags.1 {
                let n = fl_need.next_power_of_two().max(256);
                let p = be.dev_alloc(n)?;
                st.retired.push(std::mem::replace(&mut st.flags, (p, n)).0);
                // SAFETY: `p` holds `n` bytes; ordered before the kernel on the same stream.
                unsafe { hip_call!(hip, hipMemsetAsync(p as *mut c_void, 0, n, s)) }?;
            }
        }

        let lay = ArgsLayout::new(
            nch,
            enc.steps.len(),
            buffers.len(),
            enc.loopback_offsets.len(),
        );
        if st.arenas.len() < ARENAS {
            let event = be.event_create_raw()?;
            st.arenas.push(Arena {
                host: std::ptr::null_mut(),
                dev: 0,
                cap: 0,
                event,
            });
            st.next = st.arenas.len() - 1;
        }
        let idx = st.next;
        st.next = (st.next + 1) % ARENAS;
        let arena = &mut st.arenas[idx];
        // The arena's previous launch must have read its arguments before they are rewritten.
        be.event_sync_raw(arena.event)?;
        if arena.cap < lay.total {
            // Retired, not freed (see `LaunchState::retired`).
            if !arena.host.is_null() {
                st.retired_host.push(arena.host);
            }
            if arena.dev != 0 {
                st.retired.push(arena.dev);
            }
            arena.host = std::ptr::null_mut();
            arena.dev = 0;
            arena.cap = 0;
            let cap = lay.total.next_power_of_two().max(4096);
            arena.host = be.host_alloc(cap)?.0;
            arena.dev = match be.dev_alloc(cap) {
                Ok(d) => d,
                Err(e) => {
                    // SAFETY: allocated just above, never used.
                    let _ = unsafe { be.host_free(arena.host) };
                    arena.host = std::ptr::null_mut();
                    return Err(e);
                }
            };
            arena.cap = cap;
        }
        let dev = arena.dev;
        st.epoch += 1;
        let mut table: Vec<u64> = buffers.to_vec();
        if let Some(slot) = table.get_mut(BufId::SCRATCH.0 as usize) {
            *slot = st.scratch.0;
        }
        let args = LaunchArgs {
            send_conns: self.conns,
            recv_conns: self.conns + self.geometry.recv_table_offset(self.nranks),
            loopback: st.loopback.0,
            loopback_flags: st.flags.0,
            pre_scale_ptr: red.pre_scale_ptr,
            abort_flag: self.abort_dev,
            pre_scale_bytes: red.pre_scale_bytes,
            epoch: st.epoch,
            nchannels: nch as u32,
            nranks: self.nranks,
            rank: self.rank,
            post_div: red.post_div,
            dtype: work.dtype as u8,
            redop: red.redop,
            flags: kernels::launch_flags(work, &red),
            ..LaunchArgs::default()
        };
        let bytes = lay.image(&args, &enc, &table);
        let arena = &st.arenas[idx];
        // SAFETY: `arena.host` holds `cap >= total` bytes, and its previous launch has completed.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), arena.host, lay.total) };
        // SAFETY: pinned staging to the arena's device copy, ordered on the launch stream.
        unsafe {
            hip_call!(
                hip,
                hipMemcpyAsync(
                    dev as *mut c_void,
                    arena.host.cast(),
                    lay.total,
                    sys::hipMemcpyKind::hipMemcpyHostToDevice,
                    s
                )
            )
        }?;
        if let Some(ev) = last_event {
            // Operations of one communicator run in issue order, whatever streams they use.
            // SAFETY: `ev` is a live event of this transport; the stream is live.
            unsafe { hip_call!(hip, hipStreamWaitEvent(s, ev as sys::hipEvent_t, 0)) }?;
        }
        // HIP passes the block by address only (work.h: OXCCL_INLINE_ARGS_BYTES).
        let mut block = kernel_params(HIP_INLINE_ARGS_BYTES, None, dev);
        let mut params = [block.as_mut_ptr().cast::<c_void>()];
        // SAFETY: `func` takes one `OxcclKernelParams`; everything it reaches stays valid until
        // the kernel has run (caller for user buffers, this transport for the rest).
        unsafe {
            hip_call!(
                hip,
                hipModuleLaunchKernel(
                    func,
                    nch as u32,
                    1,
                    1,
                    BLOCK_THREADS,
                    1,
                    1,
                    0,
                    s,
                    params.as_mut_ptr(),
                    std::ptr::null_mut()
                )
            )
        }?;
        // SAFETY: records the arena's event after the kernel on the same stream.
        unsafe {
            hip_call!(
                hip,
                hipEventRecord(st.arenas[idx].event as sys::hipEvent_t, s)
            )
        }?;
        st.last = Some(idx);
        Ok(())
    }
}

impl Drop for HipTransport {
    fn drop(&mut self) {
        // Joins the watcher before the abort word it writes is freed.
        drop(self.watcher.take());
        let be = self.be.clone();
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        let _ = with_device(&be, self.device, || {
            // Nothing may run on our memory any more: wait for the last launch.
            if let Some(i) = st.last {
                let _ = be.event_sync_raw(st.arenas[i].event);
            }
            for a in st.arenas.drain(..) {
                if !a.host.is_null() {
                    // SAFETY: from host_alloc; the arena's launches are complete.
                    let _ = unsafe { be.host_free(a.host) };
                }
                be.dev_free(a.dev);
                be.event_destroy_raw(a.event);
            }
            for p in st.retired_host.drain(..) {
                // SAFETY: from host_alloc; every launch that read it is complete.
                let _ = unsafe { be.host_free(p) };
            }
            for p in st.retired.drain(..) {
                be.dev_free(p);
            }
            be.dev_free(st.scratch.0);
            be.dev_free(st.loopback.0);
            be.dev_free(st.flags.0);
            be.dev_free(self.conns);
            be.dev_free(self.send_state);
            if !self.abort_host.is_null() {
                // SAFETY: from host_alloc; the watcher is joined and every kernel is complete.
                let _ = unsafe { be.host_free(self.abort_host.cast()) };
            }
            for &va in &self.imported {
                // SAFETY: imported mappings are used only by this transport's kernels, all
                // complete.
                let _ = unsafe { be.mem_free(va) };
            }
            // SAFETY: our FIFOs; peers' kernels that wrote to them belong to operations that
            // completed before the communicator was destroyed.
            let _ = unsafe { be.mem_free(self.fifo) };
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxccl_core::plan::Protocol;

    #[test]
    fn chunk_bound_leaves_one_slot() {
        assert_eq!(
            FifoGeometry::default().message_bytes(Protocol::Simple),
            7 * 256 * 1024
        );
        assert_eq!(BLOCK_THREADS % 64, 0);
    }
}
