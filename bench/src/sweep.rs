//! The sweep over sizes for a set of ranks this thread drives (one rank, or every GPU with
//! `--launch initall`), and the thread-per-rank and initall drivers.
//!
//! Per size, as nccl-tests: inputs, warmup, timed iterations (or one launch of a CUDA graph
//! holding them), stream sync, average. The check reads what the timed iterations wrote (out
//! of place, and in place where repeating the operation is idempotent); in-place reductions
//! are re-run once on fresh inputs first, as nccl-tests does.

use super::check::{self, At, Expect};
use super::mem::{Buffers, Device};
use super::ops::{
    self, Buf, RankCall, allows_in_place, count_for, layout, message_bytes, reducing,
};
use super::options::{Launch, Options, Reg};
use super::progress::Progress;
use oxccl_core::plan::CollKind;
use oxccl_tests::cudart::{
    CAPTURE_MODE_GLOBAL, CAPTURE_MODE_THREAD_LOCAL, Cudart, GraphExec, Stream,
};
use oxccl_tests::nccl_lib::{NcclLib, RawComm, RawUniqueId};
use oxccl_tests::{POISON, TestOp};
use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// One size of one operation.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Point {
    /// Message size as nccl-tests reports it.
    pub bytes: usize,
    /// The API's count.
    pub count: usize,
    /// Average time per iteration (slowest rank), microseconds.
    pub time_us: f64,
    /// Wrong elements over all ranks (None: not checked).
    pub wrong: Option<usize>,
}

/// Per operation, one point per size.
pub type Sweep = Vec<(CollKind, Vec<Point>)>;

/// Folds another rank's sweep into `acc`: slowest time, summed wrong elements.
pub fn merge(acc: &mut Sweep, other: &Sweep) {
    for ((_, a), (_, b)) in acc.iter_mut().zip(other) {
        for (p, q) in a.iter_mut().zip(b) {
            p.time_us = p.time_us.max(q.time_us);
            p.wrong = p.wrong.zip(q.wrong).map(|(x, y)| x + y);
        }
    }
}

/// One rank this thread drives.
struct Rank {
    rank: usize,
    gpu: usize,
    comm: RawComm,
    stream: Stream,
    bufs: Buffers,
    /// One element for the barrier between processes.
    scratch: *mut u8,
}

/// How communicators are created.
#[derive(Clone, Copy)]
pub enum Init {
    /// `ncclCommInitAll` over GPUs `0..n`.
    All,
    /// `ncclCommInitRank` of one rank.
    Rank(RawUniqueId),
}

/// The ranks one thread drives, with their buffers, ready to sweep.
pub struct Runner<'a> {
    lib: &'a NcclLib,
    dev: Device<'a>,
    o: &'a Options,
    n: usize,
    ranks: Vec<Rank>,
    barrier: Option<&'a Barrier>,
    helper_threads: usize,
}

/// Buffers allocated before any communicator exists (a failure leaves no rank waiting).
pub struct Allocated {
    bufs: Vec<(usize, usize, Buffers)>,
}

impl Allocated {
    /// Allocates buffers for `(rank, gpu)` pairs, sized for the whole sweep.
    pub fn new(
        lib: &NcclLib,
        dev: Device<'_>,
        o: &Options,
        local: &[(usize, usize)],
    ) -> Result<Allocated, String> {
        let es = o.dtype.size();
        let (send, recv) = ops::buffer_bytes(&o.ops, &o.sizes(), es, o.ranks, o.inplace);
        let mut bufs = Vec::new();
        for &(rank, gpu) in local {
            let on_gpu = match dev {
                Device::Cuda(_) => format!(" (GPU {gpu})"),
                Device::Host => String::new(),
            };
            let b = dev
                .set(gpu)
                .and_then(|()| Buffers::alloc(lib, dev, o.reg, send, recv))
                .map_err(|e| format!("rank {rank}{on_gpu}: buffers of {send} + {recv} B: {e}"));
            match b {
                Ok(b) => bufs.push((rank, gpu, b)),
                Err(e) => {
                    Allocated { bufs }.free(lib, dev);
                    return Err(e);
                }
            }
        }
        Ok(Allocated { bufs })
    }

    /// Frees everything (nothing was registered or queued yet).
    pub fn free(self, lib: &NcclLib, dev: Device<'_>) {
        for (_, gpu, b) in self.bufs {
            let _ = dev.set(gpu);
            // SAFETY: never registered, never used by queued work.
            unsafe { b.free(lib, dev) };
        }
    }
}

impl<'a> Runner<'a> {
    /// Creates the communicators and streams and registers the buffers.
    pub fn start(
        lib: &'a NcclLib,
        dev: Device<'a>,
        o: &'a Options,
        alloc: Allocated,
        init: Init,
        barrier: Option<&'a Barrier>,
    ) -> Result<Runner<'a>, String> {
        let n = o.ranks;
        let mut comms = vec![std::ptr::null_mut(); alloc.bufs.len()];
        let gpus: Vec<usize> = alloc.bufs.iter().map(|(_, gpu, _)| *gpu).collect();
        let before = dev.mem_used(&gpus);
        let t0 = std::time::Instant::now();
        let r = match init {
            Init::All => {
                // SAFETY: `comms` has room for `n` handles; NULL devlist means GPUs 0..n.
                lib.check("ncclCommInitAll", unsafe {
                    (lib.comm_init_all)(comms.as_mut_ptr(), n as i32, std::ptr::null())
                })
            }
            Init::Rank(id) => {
                let (rank, gpu, _) = &alloc.bufs[0];
                dev.set(*gpu).and_then(|()| {
                    // SAFETY: `comms[0]` is a valid out-pointer; the id is passed by value.
                    lib.check("ncclCommInitRank", unsafe {
                        (lib.comm_init_rank)(&mut comms[0], n as i32, id, *rank as i32)
                    })
                })
            }
        };
        if let Err(e) = r {
            alloc.free(lib, dev);
            return Err(e);
        }
        // Init cost as users see it: wall time of the init call(s) and the device memory they
        // took (measured per process; other processes' allocations on a GPU blur it).
        let init_ms = t0.elapsed().as_secs_f64() * 1e3;
        let after = dev.mem_used(&gpus);
        let taken: Vec<String> = gpus
            .iter()
            .zip(before.iter().zip(after.iter()))
            .map(|(g, (b, a))| match (b, a) {
                (Some(b), Some(a)) => format!("GPU {g} +{} MiB", a.saturating_sub(*b) >> 20),
                _ => format!("GPU {g} ?"),
            })
            .collect();
        let memory = if after.iter().all(Option::is_none) {
            String::new()
        } else {
            format!("; device memory taken: {}", taken.join(", "))
        };
        eprintln!(
            "oxccl-bench: {}: init {init_ms:.1} ms{memory}",
            match init {
                Init::All => "ncclCommInitAll",
                Init::Rank(_) => "ncclCommInitRank",
            },
        );
        let local = alloc.bufs.len();
        let mut me = Runner {
            lib,
            dev,
            o,
            n,
            ranks: Vec::new(),
            barrier,
            helper_threads: helper_threads(o, local),
        };
        let mut err = None;
        for ((rank, gpu, bufs), comm) in alloc.bufs.into_iter().zip(comms) {
            let stream = match dev.set(gpu).and_then(|()| dev.stream()) {
                Ok(s) => s,
                Err(e) => {
                    err.get_or_insert(e);
                    std::ptr::null_mut()
                }
            };
            let scratch = match dev.alloc(64) {
                Ok(p) => p,
                Err(e) => {
                    err.get_or_insert(e);
                    std::ptr::null_mut()
                }
            };
            me.ranks.push(Rank {
                rank,
                gpu,
                comm,
                stream,
                bufs,
                scratch,
            });
        }
        if let Some(e) = err {
            let _ = me.finish();
            return Err(e);
        }
        if let Err(e) = me.register() {
            let _ = me.finish();
            return Err(e);
        }
        Ok(me)
    }

    fn register(&mut self) -> Result<(), String> {
        if self.o.reg == Reg::None {
            return Ok(());
        }
        // Window registration is collective: one thread's communicators register in a group.
        let group = self.o.reg == Reg::Window && self.ranks.len() > 1;
        let lib = self.lib;
        if group {
            // SAFETY: no pointers.
            lib.check("ncclGroupStart", unsafe { (lib.group_start)() })?;
        }
        let mut res = Ok(());
        for r in &mut self.ranks {
            if res.is_ok() {
                res = self
                    .dev
                    .set(r.gpu)
                    // SAFETY: `r.comm` is this rank's live communicator.
                    .and_then(|()| unsafe { r.bufs.register(lib, r.comm, self.o.reg) });
            }
        }
        if group {
            // SAFETY: no pointers.
            res = res.and(lib.check("ncclGroupEnd", unsafe { (lib.group_end)() }));
        }
        res
    }

    /// Deregisters, destroys the communicators and streams, frees the buffers.
    pub fn finish(self) -> Result<(), String> {
        let mut res = self.sync();
        for mut r in self.ranks {
            let _ = self.dev.set(r.gpu);
            if !r.comm.is_null() {
                // SAFETY: `r.comm` is live; the buffers were registered with it.
                res = res.and(unsafe { r.bufs.deregister(self.lib, r.comm) });
                // SAFETY: the communicator is not used afterwards; its work was synchronised.
                res = res.and(self.lib.check("ncclCommDestroy", unsafe {
                    (self.lib.comm_destroy)(r.comm)
                }));
            }
            // SAFETY: deregistered; the stream was synchronised and is not used afterwards.
            unsafe {
                r.bufs.free(self.lib, self.dev);
                if !r.scratch.is_null() {
                    self.dev.free(r.scratch, 64);
                }
                if !r.stream.is_null() {
                    self.dev.stream_destroy(r.stream);
                }
            }
        }
        res
    }

    fn cuda(&self) -> Result<&'a Cudart, String> {
        match self.dev {
            Device::Cuda(rt) => Ok(rt),
            Device::Host => Err("CUDA graphs need --mem cuda".into()),
        }
    }

    fn sync(&self) -> Result<(), String> {
        for r in &self.ranks {
            if !r.stream.is_null() {
                self.dev.set(r.gpu)?;
                // SAFETY: the stream was created on this rank's GPU, made current above.
                unsafe { self.dev.sync(r.stream)? };
            }
        }
        Ok(())
    }

    fn addr(&self, r: &Rank, b: Buf, elem: usize) -> usize {
        let base = match b {
            Buf::Send => r.bufs.send,
            Buf::Recv => r.bufs.recv,
        };
        base as usize + elem * self.o.dtype.size()
    }

    fn at(&self, r: &Rank, b: Buf, elem: usize) -> At<'a> {
        At {
            dev: self.dev,
            gpu: r.gpu,
            addr: self.addr(r, b, elem),
            threads: self.helper_threads,
        }
    }

    /// One iteration: every local rank's call, in one group when there are several.
    fn launch(&self, k: CollKind, count: usize, in_place: bool) -> Result<(), String> {
        let lib = self.lib;
        let group = self.ranks.len() > 1;
        if group {
            // SAFETY: no pointers.
            lib.check("ncclGroupStart", unsafe { (lib.group_start)() })?;
        }
        let mut res = Ok(());
        for r in &self.ranks {
            let l = layout(k, count, self.n, r.rank, in_place);
            let ctx = RankCall {
                comm: r.comm,
                rank: r.rank,
                n: self.n,
                dt: self.o.dtype as i32,
                es: self.o.dtype.size(),
                stream: r.stream,
            };
            let (s, d) = (
                self.addr(r, l.send.0, l.send.1),
                self.addr(r, l.recv.0, l.recv.1),
            );
            // SAFETY: the buffers were sized by `buffer_bytes` for every layout of the sweep.
            res = unsafe { ops::call(lib, k, ctx, s as *const u8, d as *mut u8, count) };
            if res.is_err() {
                break;
            }
        }
        if group {
            // SAFETY: no pointers.
            res = res.and(lib.check("ncclGroupEnd", unsafe { (lib.group_end)() }));
        }
        res
    }

    /// Poisons what the call writes and writes the inputs (`send_too`: also inputs in the
    /// send buffer, which no operation modifies).
    fn prepare(
        &self,
        k: CollKind,
        count: usize,
        in_place: bool,
        send_too: bool,
    ) -> Result<(), String> {
        let op = reducing(k).then_some(TestOp::Sum);
        let es = self.o.dtype.size();
        for r in &self.ranks {
            let l = layout(k, count, self.n, r.rank, in_place);
            self.dev.set(r.gpu)?;
            // SAFETY: synchronised; the extent lies inside the receive buffer.
            unsafe { self.dev.memset(r.bufs.recv, POISON, l.recv_extent * es)? };
            let (b, first, elems) = l.input;
            if send_too || b == Buf::Recv {
                // SAFETY: synchronised; the input lies inside its buffer.
                unsafe { check::fill(self.at(r, b, first), self.o.dtype, op, r.rank, elems)? };
            }
        }
        Ok(())
    }

    fn verify(&self, k: CollKind, count: usize, in_place: bool) -> Result<usize, String> {
        let mut items = Vec::new();
        for r in &self.ranks {
            let l = layout(k, count, self.n, r.rank, in_place);
            let want = Expect {
                kind: k,
                dtype: self.o.dtype,
                op: reducing(k).then_some(TestOp::Sum),
                n: self.n,
                rank: r.rank,
                count,
                root: ops::ROOT,
            };
            items.push((self.at(r, Buf::Recv, l.output.0), want, l.output.1));
        }
        // SAFETY: synchronised; every output lies inside its receive buffer.
        unsafe { check::verify_all(&items) }
    }

    /// Captures `iters` iterations into one graph per local stream.
    fn capture(&self, k: CollKind, count: usize, in_place: bool) -> Result<Vec<GraphExec>, String> {
        let rt = self.cuda()?;
        let mode = if self.o.launch == Launch::Threads {
            // Other ranks' threads capture at the same time.
            CAPTURE_MODE_THREAD_LOCAL
        } else {
            CAPTURE_MODE_GLOBAL
        };
        let mut res = Ok(());
        let mut begun = 0;
        for r in &self.ranks {
            // SAFETY: a live non-default stream of this GPU.
            res = self
                .dev
                .set(r.gpu)
                .and_then(|()| unsafe { rt.begin_capture(r.stream, mode) });
            if res.is_err() {
                break;
            }
            begun += 1;
        }
        if res.is_ok() {
            res = (0..self.o.iters).try_for_each(|_| self.launch(k, count, in_place));
        }
        let mut graphs = Vec::new();
        for r in &self.ranks[..begun] {
            let _ = self.dev.set(r.gpu);
            // SAFETY: capture was begun on this stream above.
            match unsafe { rt.end_capture(r.stream) } {
                Ok(g) => graphs.push(g),
                Err(e) => res = res.and(Err(e)),
            }
        }
        let mut execs = Vec::new();
        if res.is_ok() {
            for (r, &g) in self.ranks.iter().zip(&graphs) {
                let exec = self.dev.set(r.gpu).and_then(|()| {
                    // SAFETY: a graph just captured.
                    unsafe { rt.instantiate(g) }
                });
                match exec {
                    Ok(e) => execs.push(e),
                    Err(e) => {
                        res = Err(e);
                        break;
                    }
                }
            }
        }
        for g in graphs {
            // SAFETY: instantiated graphs do not need their graph any more.
            unsafe { rt.graph_destroy(g) };
        }
        if let Err(e) = res {
            self.destroy_graphs(execs);
            return Err(format!("graph capture: {e}"));
        }
        Ok(execs)
    }

    fn launch_graphs(&self, execs: &[GraphExec]) -> Result<(), String> {
        let rt = self.cuda()?;
        for (r, &e) in self.ranks.iter().zip(execs) {
            self.dev.set(r.gpu)?;
            // SAFETY: `e` was instantiated from a capture of `r.stream`.
            unsafe { rt.graph_launch(e, r.stream)? };
        }
        Ok(())
    }

    fn destroy_graphs(&self, execs: Vec<GraphExec>) {
        if let Ok(rt) = self.cuda() {
            for e in execs {
                // SAFETY: every launch was synchronised (or none ran).
                unsafe { rt.graph_exec_destroy(e) };
            }
        }
    }

    /// Lines the ranks up before the timed loop (as nccl-tests' barrier): threads meet at a
    /// barrier; processes complete a one-element allreduce.
    fn wait_others(&self) -> Result<(), String> {
        if let Some(b) = self.barrier {
            b.wait();
            return Ok(());
        }
        if self.o.launch != Launch::Procs {
            return Ok(());
        }
        let lib = self.lib;
        for r in &self.ranks {
            let p = r.scratch as *mut std::ffi::c_void;
            // SAFETY: `scratch` holds 64 bytes, one float is reduced in place.
            let rc = unsafe { (lib.all_reduce)(p, p, 1, 7, 0, r.comm, r.stream) };
            lib.check("barrier allreduce", rc)?;
        }
        self.sync()
    }

    /// Measures one size of one operation.
    pub fn measure(&self, k: CollKind, bytes: usize) -> Result<Point, String> {
        let o = self.o;
        let es = o.dtype.size();
        let count = count_for(k, bytes, es, self.n);
        let ip = o.inplace && allows_in_place(k);
        self.prepare(k, count, ip, true)?;
        for _ in 0..o.warmup {
            self.launch(k, count, ip)?;
        }
        self.sync()?;
        let graphs = if o.graph {
            let g = self.capture(k, count, ip)?;
            let warm = self.launch_graphs(&g).and_then(|()| self.sync());
            if let Err(e) = warm {
                self.destroy_graphs(g);
                return Err(e);
            }
            Some(g)
        } else {
            None
        };
        if o.check {
            // The check then sees what the timed iterations wrote.
            self.prepare(k, count, ip, false)?;
        }
        self.wait_others()?;
        let t = Instant::now();
        let timed = match &graphs {
            Some(g) => self.launch_graphs(g),
            None => (0..o.iters).try_for_each(|_| self.launch(k, count, ip)),
        }
        .and_then(|()| self.sync());
        let time_us = t.elapsed().as_secs_f64() * 1e6 / o.iters as f64;
        if let Some(g) = graphs {
            self.destroy_graphs(g);
        }
        timed?;
        let wrong = if o.check {
            if ip && reducing(k) {
                // Repeated in-place reductions compound: check one run on fresh inputs.
                self.prepare(k, count, ip, false)?;
                self.launch(k, count, ip)?;
                self.sync()?;
            }
            Some(self.verify(k, count, ip)?)
        } else {
            None
        };
        Ok(Point {
            bytes: message_bytes(k, count, es, self.n),
            count,
            time_us,
            wrong,
        })
    }

    /// Every operation at every size; `on_point` sees each point as it is measured.
    pub fn sweep(&self, on_point: &mut dyn FnMut(CollKind, &Point)) -> Result<Sweep, String> {
        let sizes = self.o.sizes();
        let mut out = Vec::new();
        for &k in &self.o.ops {
            let mut points = Vec::new();
            for &bytes in &sizes {
                let p = self
                    .measure(k, bytes)
                    .map_err(|e| format!("{} at {bytes} B: {e}", ops::op_name(k)))?;
                on_point(k, &p);
                points.push(p);
            }
            out.push((k, points));
        }
        Ok(out)
    }
}

/// Helper threads for a check or fill: the machine's cores shared by the ranks running at once.
fn helper_threads(o: &Options, local: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(4, |c| c.get());
    let concurrent = if local > 1 { 1 } else { o.ranks };
    (cores / concurrent.max(1)).clamp(1, 32)
}

/// `ncclGetUniqueId`.
pub fn unique_id(lib: &NcclLib) -> Result<RawUniqueId, String> {
    let mut id = RawUniqueId([0; 128]);
    // SAFETY: `id` is a valid out-pointer.
    lib.check("ncclGetUniqueId", unsafe { (lib.get_unique_id)(&mut id) })?;
    Ok(id)
}

/// One process drives every GPU: `ncclCommInitAll`, every iteration's calls in one group.
pub fn run_initall(
    lib: &NcclLib,
    rt: &Cudart,
    o: &Options,
    progress: &Progress,
) -> Result<Sweep, String> {
    let dev = Device::Cuda(rt);
    let local: Vec<(usize, usize)> = (0..o.ranks).map(|r| (r, r)).collect();
    let alloc = Allocated::new(lib, dev, o, &local)?;
    let runner = Runner::start(lib, dev, o, alloc, Init::All, None)?;
    let sweep = runner.sweep(&mut |k, p| progress.point(k, p.bytes));
    let fin = runner.finish();
    let sweep = sweep?;
    fin?;
    Ok(sweep)
}

/// One thread per rank (host backend, or one GPU each), `ncclCommInitRank` each.
///
/// Buffers are allocated before any communicator exists and every rank learns whether all
/// allocations succeeded, so an allocation failure is an error of the run. A failure after
/// that would leave the other ranks blocked in the library: it ends the process.
pub fn run_threads(
    lib: &NcclLib,
    rt: Option<&Cudart>,
    o: &Options,
    label: &str,
    progress: &Progress,
) -> Result<Sweep, String> {
    let n = o.ranks;
    let id = unique_id(lib)?;
    let dev = rt.map_or(Device::Host, Device::Cuda);
    let barrier = Barrier::new(n);
    let failed = AtomicBool::new(false);
    let results: Vec<Result<Sweep, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|rank| {
                let (barrier, failed) = (&barrier, &failed);
                s.spawn(move || -> Result<Sweep, String> {
                    let alloc = Allocated::new(lib, dev, o, &[(rank, rank)]);
                    if alloc.is_err() {
                        failed.store(true, Ordering::SeqCst);
                    }
                    barrier.wait();
                    let alloc = alloc?;
                    if failed.load(Ordering::SeqCst) {
                        alloc.free(lib, dev);
                        return Err(format!("rank {rank}: another rank could not allocate"));
                    }
                    let run = || -> Result<Sweep, String> {
                        let runner =
                            Runner::start(lib, dev, o, alloc, Init::Rank(id), Some(barrier))?;
                        let sweep = runner.sweep(&mut |k, p| {
                            if rank == 0 {
                                progress.point(k, p.bytes)
                            }
                        });
                        let fin = runner.finish();
                        let sweep = sweep?;
                        fin?;
                        Ok(sweep)
                    };
                    match run() {
                        Ok(sweep) => Ok(sweep),
                        Err(e) => {
                            progress.finish();
                            eprintln!("oxccl-bench: {label}: rank {rank}: {e}");
                            std::process::exit(1)
                        }
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("rank thread panicked".into()))
            })
            .collect()
    });
    let mut merged: Option<Sweep> = None;
    let mut errors = Vec::new();
    for r in results {
        match r {
            Ok(s) => match &mut merged {
                None => merged = Some(s),
                Some(m) => merge(m, &s),
            },
            Err(e) => errors.push(e),
        }
    }
    if let Some(first) = errors.first() {
        return Err(match errors.len() {
            1 => first.clone(),
            k => format!("{first} (and {} more ranks)", k - 1),
        });
    }
    Ok(merged.unwrap_or_default())
}
