//! Launches on a device transport: the executor's block size, argument blocks (inline, in
//! reused arenas, or in memory of their own inside a graph capture), the shared scratch and
//! loopback buffers, the order of a communicator's eager launches across streams, and the
//! one-shot kernels.

use super::DeviceTransport;
use crate::api::{CaptureStatus, DeviceApi, Executor, Handle};
use oxccl_core::abort::AbortFlag;
use oxccl_core::backend::DevicePtr;
use oxccl_core::backend::ProxyParents;
use oxccl_core::config::{self, vars};
use oxccl_core::error::{Error, Result};
use oxccl_core::plan::one_shot::OneShot;
use oxccl_core::plan::{BufId, WorkDesc};
use oxccl_kernel_abi::{
    self as abi, ArgsLayout, LaunchArgs, OneShotParams, PARAMS_HEADER_BYTES, indirect_params,
    inline_params, one_shot_grid,
};
use oxccl_net::proxy_events::ProxyEventSink;
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// Fewest threads a launch gets when its steps are small (see [`launch_threads`]).
const MIN_SMALL_THREADS: u32 = 128;

/// Steps of at most this many bytes make a launch small.
const SMALL_STEP_BYTES: u64 = 4096;

/// The block size for `work`, at most `max`: one thread per 8 bytes of its largest step (an LL
/// packet's payload), at least `MIN_SMALL_THREADS`.
///
/// A small step costs its instructions, issued by every warp of the block: on an H200 a graph
/// launch of four 8-byte steps took 3.04 us with 128 threads and 3.81 with 512, and a two-rank
/// LL exchange of 8 bytes 5.53 against 6.22 us (`kernels/tests/gpu_exec_test.cu`). Large steps
/// need every thread for bandwidth.
pub fn launch_threads(work: &WorkDesc, max: u32) -> u32 {
    let esize = work.dtype.size() as u64;
    let largest = work
        .channels
        .iter()
        .flat_map(|c| &c.steps)
        .map(|st| st.count * esize)
        .max()
        .unwrap_or(0);
    if largest > SMALL_STEP_BYTES {
        return max;
    }
    let threads = largest.div_ceil(8).next_multiple_of(32) as u32;
    threads.clamp(MIN_SMALL_THREADS.min(max), max)
}

/// The block size a valid `OXCCL_BLOCK_THREADS` (a multiple of 32 up to
/// [`abi::MAX_THREADS_PER_BLOCK`]) fixes for every launch; `None` without it ([`launch_threads`]
/// then sizes each launch).
pub(super) fn fixed_block_threads() -> Option<u32> {
    config::get(&vars::OXCCL_BLOCK_THREADS)
}

/// Launch-argument arenas per transport, reused round-robin once their launch has completed.
const ARENAS: usize = 16;

/// One launch-argument arena: pinned host staging and its device copy.
struct Arena {
    host: *mut u8,
    dev: DevicePtr,
    cap: usize,
    /// Recorded after the arena's launch.
    event: Handle,
    /// Recorded after the arena's upload, on the setup stream.
    uploaded: Handle,
}

/// Plans lowered for the kernels that a transport keeps (see [`LaunchState::keep_lowered`]).
const LOWERED_PLANS: usize = 128;

/// A plan lowered for one transport's kernels: what every launch of it reuses.
pub(super) struct Lowered {
    /// The plan; held, so no other plan can take its address (the key) while it is kept.
    work: Arc<WorkDesc>,
    enc: abi::EncodedWork,
    layout: ArgsLayout,
    nbuffers: usize,
    exec: Executor,
    threads: u32,
    /// The inline parameters of its latest eager launch, to refresh for the next one.
    params: Option<Vec<u8>>,
}

impl Lowered {
    fn key(work: &Arc<WorkDesc>) -> usize {
        Arc::as_ptr(work) as usize
    }
}

/// What launches of one transport share; guarded by the transport's mutex. Starts empty: every
/// buffer is allocated by the first launch that needs it.
#[derive(Default)]
pub(super) struct LaunchState {
    epoch: u64,
    scratch: (DevicePtr, usize),
    loopback: (DevicePtr, usize),
    flags: (DevicePtr, usize),
    arenas: Vec<Arena>,
    next: usize,
    /// Recorded after every eager launch: this communicator's tail (0 until the first).
    tail: Handle,
    /// The stream of the latest launch.
    last_stream: Option<Handle>,
    /// Shared buffers and arenas replaced by larger ones, freed with the transport.
    retired: Vec<DevicePtr>,
    /// Pinned staging of arenas replaced by larger ones, freed with the transport.
    retired_host: Vec<*mut u8>,
    /// Argument blocks and loopback flags of launches captured into graphs, freed with the
    /// transport (a graph may be replayed as long as its communicator lives).
    captured: Vec<DevicePtr>,
    /// Lowered plans that the communicator keeps for reuse, by the plan's address.
    lowered: FxHashMap<usize, Lowered>,
}

impl<A: DeviceApi> DeviceTransport<A> {
    /// Queues `work` on `stream` (`Backend::launch`).
    ///
    /// While `stream` is capturing a graph the launch becomes graph nodes that replay
    /// correctly: its argument block travels in the captured parameters or in device memory of
    /// its own (never reused), its loopback flags are reset by a memset node at every replay,
    /// and it does not join the eager launches' cross-stream ordering (a captured stream may
    /// not wait on outside events).
    ///
    /// # Safety
    /// `buffers` are valid for the plan's regions until the kernel has run; `stream` is live.
    pub unsafe fn launch(
        &self,
        stream: Handle,
        work: &Arc<WorkDesc>,
        buffers: &[DevicePtr],
        abort: &AbortFlag,
        proxy: Option<&ProxyParents>,
    ) -> Result<()> {
        abort.check()?;
        if let Some(e) = self.api.kernels_missing() {
            return Err(e);
        }
        let nch = work.channels.len();
        if nch == 0 || work.step_count() == 0 {
            return Ok(());
        }
        if let Some(net) = &self.net {
            net.wake();
        }

        let s = stream;
        let capturing = self.capture_status(s)?;
        // Allocations and host waits below are "unsafe during capture" in global mode, also
        // for an eager launch while another thread captures; they touch only our own memory,
        // events and setup stream, never a captured stream.
        let _relaxed = self.api.relaxed_capture()?;
        let _g = self.api.bind(self.device)?;

        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let st = &mut *st;
        let mut low = match st.lowered.remove(&Lowered::key(work)) {
            Some(low) if low.nbuffers == buffers.len() => low,
            _ => self.lower(work, buffers.len())?,
        };
        let r = self.launch_lowered(st, s, capturing, &mut low, buffers, proxy);
        // Held by the caller and by `low`: a third holder is the communicator's plan cache,
        // which will launch the plan again.
        let reused = Arc::strong_count(work) > 2;
        st.keep_lowered(low, reused);
        r
    }

    /// `work` lowered for this transport's kernels with `nbuffers` buffers.
    fn lower(&self, work: &Arc<WorkDesc>, nbuffers: usize) -> Result<Lowered> {
        let enc = abi::encode(work, self.rank)?;
        self.geometry.check_plan(&enc)?;
        let layout = ArgsLayout::new(
            work.channels.len(),
            enc.steps.len(),
            nbuffers,
            enc.loopback_offsets.len(),
        );
        // The vendor picks the entry point: inline in the smallest parameters that hold the
        // block, else by address.
        let exec = self.api.executor(self.device, work.dtype, layout.total)?;
        let threads = self
            .fixed_threads
            .unwrap_or_else(|| launch_threads(work, A::BLOCK_THREADS));
        Ok(Lowered {
            work: work.clone(),
            enc,
            layout,
            nbuffers,
            exec,
            threads,
            params: None,
        })
    }

    /// Queues `low`'s plan on `s` with `buffers` (see [`DeviceTransport::launch`]).
    fn launch_lowered(
        &self,
        st: &mut LaunchState,
        s: Handle,
        capturing: bool,
        low: &mut Lowered,
        buffers: &[DevicePtr],
        proxy: Option<&ProxyParents>,
    ) -> Result<()> {
        let work = &*low.work;
        let (enc, layout, exec) = (&low.enc, &low.layout, low.exec);
        let nch = work.channels.len();
        let red = abi::reduction_args(&work.reduction);
        let esize = work.dtype.size();
        let scratch_need = (work.scratch_elems as usize).saturating_mul(esize);
        let flags_need = enc.loopback_offsets.len() * 8;
        st.grow(
            &self.api,
            self.setup,
            scratch_need,
            enc.loopback_bytes as usize,
            flags_need,
        )?;

        let mut table: Vec<u64> = buffers.to_vec();
        if let Some(slot) = table.get_mut(BufId::SCRATCH.0 as usize) {
            *slot = st.scratch.0;
        }
        let mut args = LaunchArgs {
            send_conns: self.conns,
            recv_conns: self.conns + self.geometry.recv_table_offset(self.nranks),
            loopback: st.loopback.0,
            loopback_flags: st.flags.0,
            pre_scale_ptr: red.pre_scale_ptr,
            abort_flag: self.abort_dev,
            pre_scale_bytes: red.pre_scale_bytes,
            nchannels: nch as u32,
            nranks: self.nranks,
            rank: self.rank,
            post_div: red.post_div,
            dtype: work.dtype as u8,
            redop: red.redop,
            flags: abi::launch_flags(work, &red),
            ..LaunchArgs::default()
        };
        let threads = low.threads;

        // The proxy's profiler events count each task's slots per connection; a graph's
        // replays would move slots no launch counts, so a captured launch that crosses the
        // network turns them off.
        if let Some((parents, net)) = proxy.zip(self.net.as_ref()) {
            let tasks = super::proxy_tasks::net_tasks(
                work,
                |b| parents.task_of(b),
                self.rank,
                super::proxy_tasks::SlotData {
                    simple: self.geometry.slot_bytes,
                    ll: self.geometry.ll_slot_bytes / 2,
                },
                |p| net.reaches(p),
            );
            if !capturing {
                let sink: Arc<dyn ProxyEventSink> = Arc::new(parents.raiser);
                net.proxy_events().post(&sink, &tasks);
            } else if !tasks.is_empty() {
                net.proxy_events().disable();
            }
        }
        if capturing {
            // Captured parameters are copied into the graph. A block too large for them gets
            // device memory of its own (never reused), and loopback flags of their own that a
            // memset node clears before every replay (so epoch 1 is always new).
            if flags_need > 0 {
                let f = self.api.dev_alloc(flags_need)?;
                st.captured.push(f);
                args.loopback_flags = f;
                // SAFETY: `f` holds `flags_need` bytes; captured as a node before the kernel.
                unsafe { self.api.memset_zero_async(f, flags_need, s) }?;
            }
            args.epoch = 1;
            let mut params = match exec.inline_cap {
                Some(cap) => inline_params(cap, layout, &args, enc, &table),
                None => {
                    let image = layout.image(&args, enc, &table);
                    let dev = self.api.dev_alloc(image.len())?;
                    st.captured.push(dev);
                    self.upload_now(dev, &image)?;
                    indirect_params(exec.address_cap, dev)
                }
            };
            // SAFETY: as for the eager launch below; nothing the parameters reach is reused.
            return unsafe {
                self.api
                    .launch(exec.func, nch as u32, threads, &mut params, s)
            };
        }

        // Only blocks passed by address need an arena (and a wait for its previous launch).
        let idx = match exec.inline_cap {
            Some(_) => None,
            None => Some(st.take_arena(&self.api, layout.total)?),
        };
        st.epoch += 1;
        args.epoch = st.epoch;
        let mut params = match (idx, exec.inline_cap) {
            (Some(idx), _) => {
                let image = layout.image(&args, enc, &table);
                let arena = &st.arenas[idx];
                // SAFETY: the arena's host half holds `cap >= total` bytes, and its previous
                // launch has completed (`take_arena`).
                unsafe { std::ptr::copy_nonoverlapping(image.as_ptr(), arena.host, image.len()) };
                // On the setup stream, the upload runs while the launch stream's previous
                // kernel does; on the launch stream it would sit between the two kernels, a
                // copy's latency the GPU idles for (eager launches of large plans).
                // SAFETY: pinned staging to the arena's device copy; the launch waits for it.
                unsafe {
                    self.api
                        .copy_h2d_async(arena.dev, arena.host, image.len(), self.setup)
                }?;
                self.api.event_record(arena.uploaded, self.setup)?;
                self.api.stream_wait_event(s, arena.uploaded)?;
                indirect_params(exec.address_cap, arena.dev)
            }
            // The parameters of this plan's previous launch differ only in the launch
            // arguments and the buffer table (the driver copied them at that launch).
            (None, cap) => match low.params.take() {
                Some(mut p) => {
                    layout.refresh(
                        &mut p[PARAMS_HEADER_BYTES..PARAMS_HEADER_BYTES + layout.total],
                        &args,
                        &table,
                    );
                    p
                }
                None => inline_params(cap.unwrap_or(exec.address_cap), layout, &args, enc, &table),
            },
        };
        let arena_event = idx.map(|i| st.arenas[i].event);
        let api = &self.api;
        let r = st.in_order(api, s, || {
            // SAFETY: the kernel takes one `OxcclKernelParams`; everything it reaches stays
            // valid until it has run (caller for user buffers, this transport for the rest).
            unsafe { api.launch(exec.func, nch as u32, threads, &mut params, s) }?;
            if let Some(ev) = arena_event {
                // Records the arena's event after the kernel on the same stream.
                api.event_record(ev, s)?;
            }
            Ok(())
        });
        if idx.is_none() {
            low.params = Some(params);
        }
        r
    }

    /// Queues a one-shot collective on `stream` (`Backend::launch_one_shot`): one kernel, its
    /// parameters by value, nothing allocated or uploaded, so a captured launch replays as is
    /// (the kernel keeps its epochs in device memory).
    ///
    /// # Safety
    /// `op`'s buffers are valid for the operation until the kernel has run; `stream` is live;
    /// [`DeviceTransport::one_shot_bytes`] admits `op`.
    pub unsafe fn launch_one_shot(
        &self,
        stream: Handle,
        op: &OneShot,
        abort: &AbortFlag,
    ) -> Result<()> {
        abort.check()?;
        let s = stream;
        let capturing = self.capture_status(s)?;
        let _g = self.api.bind(self.device)?;
        let func = self.api.one_shot(self.device, op.dtype)?;
        let epochs = self.send_state + self.geometry.epochs_offset(self.nranks);
        let params =
            OneShotParams::new(op, self.rank, &self.one_shot_inbox, epochs, self.abort_dev)
                .to_bytes()
                .to_vec();
        let (blocks, threads) = one_shot_grid(op, self.nranks);
        let api = &self.api;
        let launch = move || {
            let mut params = params;
            // SAFETY: the kernel takes one `OxcclOneShotParams`; the caller keeps the user
            // buffers valid, this transport its inboxes and epochs.
            unsafe { api.launch(func, blocks, threads, &mut params, s) }
        };
        if capturing {
            return launch();
        }
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.in_order(api, s, launch)
    }

    /// True while `s` is capturing a graph (an invalidated capture is an error: NCCL fails too).
    fn capture_status(&self, s: Handle) -> Result<bool> {
        match self.api.capture_status(s)? {
            CaptureStatus::None => Ok(false),
            CaptureStatus::Active => Ok(true),
            CaptureStatus::Invalidated => Err(Error::usage(
                "the stream's graph capture was invalidated before this operation",
            )),
        }
    }

    /// Copies `bytes` to `dev` through the transport's private stream and waits for it.
    fn upload_now(&self, dev: DevicePtr, bytes: &[u8]) -> Result<()> {
        // SAFETY: `dev` holds at least `bytes.len()` bytes; the copy completes before we return.
        unsafe {
            self.api
                .copy_h2d_async(dev, bytes.as_ptr(), bytes.len(), self.setup)
        }?;
        self.api.stream_sync(self.setup)
    }
}

impl LaunchState {
    /// Waits for this transport's last eager launch, then frees the arenas (every launch that
    /// read them is complete); the transport's device is bound.
    pub(super) fn finish_launches<A: DeviceApi>(&mut self, api: &A) {
        if self.tail != 0 {
            let _ = api.event_sync(self.tail);
            // SAFETY: ours and complete.
            unsafe { api.event_destroy(self.tail) };
            self.tail = 0;
        }
        for a in self.arenas.drain(..) {
            // SAFETY: the arena's launches are complete (the tail waited for them), and with
            // them the uploads they waited for.
            unsafe {
                api.host_free(a.host);
                api.dev_free(a.dev);
                api.event_destroy(a.event);
                api.event_destroy(a.uploaded);
            }
        }
    }

    /// Frees the shared buffers and those retired or captured.
    ///
    /// # Safety
    /// After [`LaunchState::finish_launches`], with nothing left that may use the memory (no
    /// kernel, proxy or graph of the communicator); the transport's device is bound.
    pub(super) unsafe fn free_buffers<A: DeviceApi>(&mut self, api: &A) {
        // SAFETY: the caller's contract.
        unsafe {
            api.dev_free(self.scratch.0);
            api.dev_free(self.loopback.0);
            api.dev_free(self.flags.0);
            for p in self.retired_host.drain(..) {
                api.host_free(p);
            }
            for p in self.retired.drain(..).chain(self.captured.drain(..)) {
                api.dev_free(p);
            }
        }
    }

    /// Makes the shared buffers large enough. A replaced buffer is retired, not freed: captured
    /// graphs may still reference it, and in-flight launches still use it.
    fn grow<A: DeviceApi>(
        &mut self,
        api: &A,
        setup: Handle,
        scratch: usize,
        loopback: usize,
        flags: usize,
    ) -> Result<()> {
        if scratch > self.scratch.1 {
            let n = scratch.next_power_of_two();
            let p = api.dev_alloc(n)?;
            self.retired
                .push(std::mem::replace(&mut self.scratch, (p, n)).0);
        }
        if loopback > self.loopback.1 {
            let n = loopback.next_power_of_two();
            let p = api.dev_alloc(n)?;
            self.retired
                .push(std::mem::replace(&mut self.loopback, (p, n)).0);
        }
        if flags > self.flags.1 {
            let n = flags.next_power_of_two().max(256);
            let p = api.dev_alloc(n)?;
            // Zero before first use; no launch can reference the new memory yet.
            // SAFETY: `p` holds `n` bytes; `setup` is the transport's live stream.
            unsafe { api.memset_zero_async(p, n, setup) }?;
            api.stream_sync(setup)?;
            self.retired
                .push(std::mem::replace(&mut self.flags, (p, n)).0);
        }
        Ok(())
    }

    /// Keeps `low` for the next launch of its plan when the plan will be `reused`; when full,
    /// first forgets the plans that nobody else holds any more.
    fn keep_lowered(&mut self, low: Lowered, reused: bool) {
        if !reused {
            return;
        }
        if self.lowered.len() >= LOWERED_PLANS {
            self.lowered.retain(|_, l| Arc::strong_count(&l.work) > 1);
            if self.lowered.len() >= LOWERED_PLANS {
                self.lowered.clear();
            }
        }
        self.lowered.insert(Lowered::key(&low.work), low);
    }

    /// Queues an eager launch on `s` after every earlier launch of this communicator, whatever
    /// stream they used, and makes it the new tail.
    fn in_order<A: DeviceApi>(
        &mut self,
        api: &A,
        s: Handle,
        launch: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        // Launches on the stream of the previous one are ordered already.
        let last_event = self
            .last_stream
            .filter(|&last| last != s)
            .map(|_| self.tail);
        let tail = self.tail_event(api)?;
        if let Some(ev) = last_event {
            api.stream_wait_event(s, ev)?;
        }
        launch()?;
        api.event_record(tail, s)?;
        self.last_stream = Some(s);
        Ok(())
    }

    /// The tail event, created on first use on the bound device.
    fn tail_event<A: DeviceApi>(&mut self, api: &A) -> Result<Handle> {
        if self.tail == 0 {
            self.tail = api.event_create()?;
        }
        Ok(self.tail)
    }

    /// The next launch-argument arena, at least `need` bytes, once its previous launch is done.
    fn take_arena<A: DeviceApi>(&mut self, api: &A, need: usize) -> Result<usize> {
        if self.arenas.len() < ARENAS {
            let ev = api.event_create()?;
            let uploaded = match api.event_create() {
                Ok(u) => u,
                Err(e) => {
                    // SAFETY: created above, unused.
                    unsafe { api.event_destroy(ev) };
                    return Err(e);
                }
            };
            self.arenas.push(Arena {
                host: std::ptr::null_mut(),
                dev: 0,
                cap: 0,
                event: ev,
                uploaded,
            });
            self.next = self.arenas.len() - 1;
        }
        let idx = self.next;
        self.next = (self.next + 1) % ARENAS;
        let arena = &mut self.arenas[idx];
        // The arena's previous launch must have read its arguments before they are rewritten.
        api.event_sync(arena.event)?;
        if arena.cap < need {
            // Retired, not freed: freeing device or pinned memory waits for the whole device,
            // where another rank's kernel may be waiting for the very launch being prepared
            // (ranks sharing a GPU, launched one after another by one thread).
            if !arena.host.is_null() {
                self.retired_host.push(arena.host);
            }
            if arena.dev != 0 {
                self.retired.push(arena.dev);
            }
            arena.host = std::ptr::null_mut();
            arena.dev = 0;
            arena.cap = 0;
            let cap = arena_capacity(need);
            arena.host = api.host_alloc(cap)?.0;
            arena.dev = match api.dev_alloc(cap) {
                Ok(d) => d,
                Err(e) => {
                    // SAFETY: allocated just above, never used.
                    unsafe { api.host_free(arena.host) };
                    arena.host = std::ptr::null_mut();
                    return Err(e);
                }
            };
            arena.cap = cap;
        }
        Ok(idx)
    }
}

/// Bytes of an arena that must hold `need`: the next power of two, at least 4 KiB, so a
/// communicator replaces an arena only a few times.
fn arena_capacity(need: usize) -> usize {
    need.next_power_of_two().max(4096)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_api::FakeApi;

    /// The registry's range for `OXCCL_BLOCK_THREADS` is the kernels' (a bad value is warned
    /// about and the launches are sized as without it).
    #[test]
    fn block_threads_range_is_the_kernels() {
        let read = |t: u32| {
            let v = t.to_string();
            vars::OXCCL_BLOCK_THREADS.read(Some(std::ffi::OsStr::new(&v)))
        };
        assert_eq!(read(32), Some(Some(32)));
        let max = abi::MAX_THREADS_PER_BLOCK;
        assert_eq!(read(max), Some(Some(max)));
        assert_eq!(read(max + 32), None);
        assert_eq!(read(48), None);
    }
    use oxccl_core::datatype::{DataType, Reduction};
    use oxccl_core::plan::{Algorithm, ChannelWork, CollKind, Protocol, Step};

    fn work(dtype: DataType, counts: &[&[u64]]) -> WorkDesc {
        WorkDesc {
            kind: CollKind::AllReduce,
            algo: Algorithm::Direct,
            proto: Protocol::Ll,
            dtype,
            reduction: Reduction::none(),
            scratch_elems: 0,
            exposed: false,
            channels: counts
                .iter()
                .map(|c| ChannelWork::new(c.iter().map(|&n| Step::new(n, 0)).collect()))
                .collect(),
        }
    }

    #[test]
    fn small_launches_get_one_thread_per_packet_of_their_largest_step() {
        let f32 = DataType::Float32;
        // 8 B: the floor. 2 KiB: 256 packets. 4 KiB: 512. The largest step of any channel counts.
        assert_eq!(launch_threads(&work(f32, &[&[2, 2]]), 512), 128);
        assert_eq!(launch_threads(&work(f32, &[&[2], &[512]]), 512), 256);
        assert_eq!(launch_threads(&work(f32, &[&[1024]]), 512), 512);
        assert_eq!(launch_threads(&work(DataType::Int8, &[&[1000]]), 512), 128);
        // Larger steps, or an empty plan's 0 bytes: never above the maximum, never below 32.
        assert_eq!(launch_threads(&work(f32, &[&[1025]]), 512), 512);
        assert_eq!(launch_threads(&work(f32, &[&[1 << 20]]), 256), 256);
        assert_eq!(launch_threads(&work(f32, &[&[2]]), 64), 64);
        assert_eq!(launch_threads(&work(f32, &[]), 512), 128);
    }

    #[test]
    fn arenas_grow_to_powers_of_two_of_at_least_a_page() {
        assert_eq!(arena_capacity(1), 4096);
        assert_eq!(arena_capacity(4096), 4096);
        assert_eq!(arena_capacity(4097), 8192);
        assert_eq!(arena_capacity(100_000), 131_072);
    }

    fn state() -> LaunchState {
        LaunchState::default()
    }

    /// Shared buffers grow to powers of two and the replaced ones are retired, never freed
    /// (captured graphs and in-flight launches may still use them); flags are zeroed on the
    /// transport's own stream before anyone can see them.
    #[test]
    fn growth_retires_what_it_replaces() {
        let api = FakeApi::default();
        let mut st = state();
        st.grow(&api, 7, 100, 0, 8).unwrap();
        assert_eq!(st.scratch.1, 128);
        assert_eq!(st.flags.1, 256);
        assert_eq!(
            st.retired,
            [0, 0],
            "nothing to retire the first time but nulls"
        );
        let calls = api.calls();
        assert!(
            calls
                .iter()
                .any(|c| c.starts_with("memset") && c.ends_with("on 7"))
        );
        assert!(calls.contains(&"stream_sync 7".to_string()));
        let old = st.scratch.0;
        st.grow(&api, 7, 100, 0, 8).unwrap();
        assert!(api.calls().is_empty(), "large enough: nothing allocated");
        st.grow(&api, 7, 129, 0, 8).unwrap();
        assert_eq!(st.scratch.1, 256);
        assert_eq!(st.retired.last(), Some(&old));
        assert!(!api.calls().iter().any(|c| c.contains("free")));
    }

    /// Arenas are reused round-robin after their previous launch is waited for, and an arena
    /// that must grow retires both halves instead of freeing them.
    #[test]
    fn arenas_wait_for_their_previous_launch_and_retire_when_they_grow() {
        let api = FakeApi::default();
        let mut st = state();
        for i in 0..ARENAS {
            assert_eq!(st.take_arena(&api, 100).unwrap(), i);
        }
        assert_eq!(st.arenas.len(), ARENAS);
        api.calls();
        let (host, dev, ev) = (st.arenas[0].host, st.arenas[0].dev, st.arenas[0].event);
        assert_eq!(st.take_arena(&api, 100).unwrap(), 0, "round-robin");
        assert_eq!(api.calls(), [format!("event_sync {ev:#x}")]);
        assert_eq!(st.take_arena(&api, 5000).unwrap(), 1);
        assert_eq!(st.take_arena(&api, 5000).unwrap(), 2);
        assert_eq!(st.take_arena(&api, 5000).unwrap(), 3);
        assert_eq!(st.arenas[1].cap, 8192);
        assert!(st.retired_host.len() == 3 && st.retired.len() == 3);
        assert!(!api.calls().iter().any(|c| c.contains("free")));
        assert_eq!((st.arenas[0].host, st.arenas[0].dev), (host, dev));
    }

    fn lowered(work: &Arc<WorkDesc>) -> Lowered {
        Lowered {
            work: work.clone(),
            enc: abi::encode(work, 0).unwrap(),
            layout: ArgsLayout::new(1, 1, 3, 0),
            nbuffers: 3,
            exec: Executor {
                func: 1,
                inline_cap: Some(1008),
                address_cap: 1008,
            },
            threads: 128,
            params: None,
        }
    }

    /// Only plans the communicator keeps are kept lowered; when full, those it dropped go
    /// first.
    #[test]
    fn lowered_plans_are_kept_while_the_communicator_keeps_them() {
        let mut st = state();
        let once = Arc::new(work(DataType::Float32, &[&[4]]));
        st.keep_lowered(lowered(&once), false);
        assert!(st.lowered.is_empty());
        let kept: Vec<Arc<WorkDesc>> = (0..LOWERED_PLANS)
            .map(|_| Arc::new(work(DataType::Float32, &[&[4]])))
            .collect();
        for w in &kept {
            st.keep_lowered(lowered(w), true);
        }
        assert_eq!(st.lowered.len(), LOWERED_PLANS);
        // The communicator drops half of them; the next plan kept makes the map forget those.
        let still = kept[..LOWERED_PLANS / 2].to_vec();
        let dropped_keys: Vec<usize> = kept[LOWERED_PLANS / 2..].iter().map(Lowered::key).collect();
        drop(kept);
        let next = Arc::new(work(DataType::Float32, &[&[8]]));
        st.keep_lowered(lowered(&next), true);
        assert_eq!(st.lowered.len(), LOWERED_PLANS / 2 + 1);
        assert!(
            still
                .iter()
                .all(|w| st.lowered.contains_key(&Lowered::key(w)))
        );
        assert!(dropped_keys.iter().all(|k| !st.lowered.contains_key(k)));
    }

    /// The next launch of a plan the communicator keeps refreshes the parameters of the one
    /// before: they are what lowering it afresh gives (but for the epoch, a launch counter);
    /// a plan nobody keeps is lowered every time and not held.
    #[test]
    fn a_kept_plan_launches_with_refreshed_parameters() {
        use oxccl_kernel_abi::FifoGeometry;
        let api = FakeApi::default();
        api.inline_blocks(4000);
        let geometry = FifoGeometry::default();
        let t = DeviceTransport::unconnected(api.clone(), geometry, 0, 0, 1, 0, None);
        let abort = AbortFlag::new();
        let plan = Arc::new(work(DataType::Float32, &[&[4, 4], &[8]]));
        let kept = plan.clone();
        let launch = |w: &Arc<WorkDesc>, buffers: &[DevicePtr]| {
            // SAFETY: `FakeApi` touches no memory.
            unsafe { t.launch(5, w, buffers, &abort, None) }.unwrap();
        };
        launch(&plan, &[0x100, 0x200, 0]);
        launch(&plan, &[0x300, 0x400, 0]);
        let fresh = Arc::new((*plan).clone());
        launch(&fresh, &[0x300, 0x400, 0]);
        let [first, refreshed, mut lowered] = api.launched_params().try_into().unwrap();
        let epoch = PARAMS_HEADER_BYTES + std::mem::offset_of!(LaunchArgs, epoch);
        assert_eq!(refreshed[epoch..epoch + 8], 2u64.to_le_bytes());
        lowered[epoch..epoch + 8].copy_from_slice(&2u64.to_le_bytes());
        assert_eq!(refreshed, lowered);
        assert_ne!(first, refreshed, "the buffer table changed");
        let st = t.state.lock().unwrap();
        assert!(st.lowered.contains_key(&Lowered::key(&kept)));
        assert!(!st.lowered.contains_key(&Lowered::key(&fresh)));
    }

    /// A block passed by address is uploaded on the setup stream, and the launch stream waits
    /// for that upload only: the copy does not sit between two kernels of the launch stream.
    #[test]
    fn blocks_by_address_are_uploaded_beside_the_launch_stream() {
        use oxccl_kernel_abi::FifoGeometry;
        let api = FakeApi::default();
        // Real staging (the fake runtime's host memory is only a number), dropped after `t`.
        let mut staging: Vec<Box<[u8]>> = (0..ARENAS).map(|_| vec![0u8; 1 << 16].into()).collect();
        let mut t =
            DeviceTransport::unconnected(api.clone(), FifoGeometry::default(), 0, 0, 1, 0, None);
        t.setup = 9;
        {
            let mut st = t.state.lock().unwrap();
            for b in &mut staging {
                let (event, uploaded) = (api.event_create().unwrap(), api.event_create().unwrap());
                st.arenas.push(Arena {
                    host: b.as_mut_ptr(),
                    dev: 0x7000,
                    cap: b.len(),
                    event,
                    uploaded,
                });
            }
        }
        let plan = Arc::new(work(DataType::Float32, &[&[4, 4], &[8]]));
        // SAFETY: `FakeApi` touches no device memory; the arenas' staging is real.
        unsafe { t.launch(5, &plan, &[0x100, 0x200, 0], &AbortFlag::new(), None) }.unwrap();
        let (arena, uploaded, tail) = {
            let st = t.state.lock().unwrap();
            (st.arenas[0].event, st.arenas[0].uploaded, st.tail)
        };
        let c = api.calls();
        let at = c
            .iter()
            .position(|c| c.starts_with("copy_h2d_async"))
            .unwrap();
        assert!(c[at].ends_with(" on 9"), "{c:?}");
        assert_eq!(
            c[at + 1..],
            [
                format!("event_record {uploaded:#x} on 9"),
                format!("wait 5 on {uploaded:#x}"),
                "event_create".to_string(),
                "launch 2x128 on 5".to_string(),
                format!("event_record {arena:#x} on 5"),
                format!("event_record {tail:#x} on 5"),
            ]
        );
    }

    /// Eager launches of one communicator run in issue order: a launch on another stream than
    /// the previous one waits for the tail event; one on the same stream does not.
    #[test]
    fn launches_wait_for_the_tail_only_across_streams() {
        let api = FakeApi::default();
        let mut st = state();
        st.in_order(&api, 5, || Ok(())).unwrap();
        let tail = st.tail;
        let c = api.calls();
        assert!(!c.iter().any(|c| c.starts_with("wait")), "{c:?}");
        assert_eq!(c.last().unwrap(), &format!("event_record {tail:#x} on 5"));
        st.in_order(&api, 5, || Ok(())).unwrap();
        assert!(!api.calls().iter().any(|c| c.starts_with("wait")));
        st.in_order(&api, 6, || Ok(())).unwrap();
        let c = api.calls();
        assert_eq!(c[0], format!("wait 6 on {tail:#x}"));
        assert_eq!(c[1], format!("event_record {tail:#x} on 6"));
        assert_eq!(st.last_stream, Some(6));
    }
}
