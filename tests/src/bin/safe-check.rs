//! The safe `oxccl` API on real devices: its correctness matrix, and its overhead over the raw
//! core path.
//!
//! ```text
//! safe-check [--backend auto|cuda|host] [--ranks N] [--counts 0,1,7,1048579] [--bench] [--iters N]
//!            [--cycles N]
//! ```
//! One thread per rank, rank `r` on device `r % devices` (default: one rank per device, at least
//! 2 on the host). Without `--bench`: every operation x type x operator, in and out of place, at
//! `--counts`, through the typed methods, then 200 rounds of AllReduces of 100 KB on buffers
//! uploaded just before them (in place and out of place), then the misuse scenarios of
//! `oxccl_tests::misuse` (nested and forgotten groups, buffer views), then (CUDA) a graph
//! captured in global mode while the watchdog follows eager operations; prints one `FAIL` line
//! per wrong case, round or scenario and `RESULT pass=P fail=F` lines, exits 1 on a failure and
//! 2 when the backend is missing.
//!
//! `--bench`: 8-byte AllReduce (two f32), eager, timed per operation over `--iters` calls
//! followed by one synchronize, in place and out of place, through the safe API and through
//! core's `Communicator::collective` on the same backend (separate communicators, same
//! devices); the median of 5 rounds, and the difference, in microseconds; safe and raw are
//! measured in alternation 3 times and the median printed. On CUDA also in
//! place inside a CUDA graph: 100 operations captured (the safe path on a stream wrapped with
//! `Stream::from_raw`), the graph replayed; microseconds per captured operation.

use oxccl::{Collectives, Communicator, ReduceOp, Runtime, UniqueId};
use oxccl_core::backend::{Backend, DevicePtr};
use oxccl_core::comm::CollArgs;
use oxccl_core::datatype::{DataType, RedOp};
use oxccl_core::plan::CollKind;
use oxccl_tests::cudart::{self, CAPTURE_MODE_GLOBAL, CAPTURE_MODE_THREAD_LOCAL, Cudart};
use oxccl_tests::harness::{open_fds, proc_status};
use oxccl_tests::safe::run_safe_case;
use oxccl_tests::suite::full_matrix;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

struct Opts {
    backend: String,
    ranks: Option<usize>,
    counts: Vec<usize>,
    bench: bool,
    iters: usize,
    cycles: Option<usize>,
}

fn opts() -> Opts {
    let mut o = Opts {
        backend: "auto".into(),
        ranks: None,
        counts: vec![0, 1, 7, 1_048_579],
        bench: false,
        iters: 2000,
        cycles: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || {
            args.next()
                .unwrap_or_else(|| usage(&format!("{a} needs a value")))
        };
        match a.as_str() {
            "--backend" => o.backend = val(),
            "--ranks" => o.ranks = Some(val().parse().unwrap_or_else(|_| usage("bad --ranks"))),
            "--counts" => {
                o.counts = val()
                    .split(',')
                    .map(|c| c.parse().unwrap_or_else(|_| usage("bad --counts")))
                    .collect()
            }
            "--iters" => o.iters = val().parse().unwrap_or_else(|_| usage("bad --iters")),
            "--bench" => o.bench = true,
            "--cycles" => o.cycles = Some(val().parse().unwrap_or_else(|_| usage("bad --cycles"))),
            _ => usage(&format!("unknown argument {a}")),
        }
    }
    o
}

fn usage(why: &str) -> ! {
    eprintln!(
        "{why}\nusage: safe-check [--backend auto|cuda|host] [--ranks N] [--counts 0,1,7] [--bench] [--iters N] [--cycles N]"
    );
    std::process::exit(64);
}

fn runtime(name: &str) -> oxccl::Result<Runtime> {
    match name {
        "host" => Ok(Runtime::host()),
        "cuda" => Runtime::cuda(),
        _ => Runtime::auto(),
    }
}

/// One communicator per rank, one thread each, all running `f`.
fn on_ranks<R: Send>(
    rt: &Runtime,
    n: usize,
    f: impl Fn(&Communicator) -> R + Sync,
) -> oxccl::Result<Vec<R>> {
    let ndev = rt.device_count()?;
    let id = UniqueId::new()?;
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let f = &f;
                s.spawn(move || -> oxccl::Result<R> {
                    let comm = Communicator::init(&id, r, n, &rt.device(r % ndev)?)?;
                    let out = f(&comm);
                    comm.finalize()?;
                    Ok(out)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("rank thread panicked"))
            .collect()
    })
}

/// Rounds of [`fresh_uploads`] each rank runs after the matrix.
const FRESH_ROUNDS: usize = 200;

/// Elements of [`fresh_uploads`]' buffers (100 KB of u32: the size of the matrix's largest
/// cases at 3 ranks, where the copy race below was seen).
const FRESH_LEN: usize = 25_000;

/// AllReduces on buffers uploaded just before them, `rounds` times, in place (the input is
/// the upload) and out of place (the output is); the wrong rounds.
///
/// A host-to-device copy that returned before its DMA landed let a collective on a
/// non-blocking stream (which does not wait for the legacy stream's copy) read the buffer's
/// old contents, or have the tail of the upload overwrite its result: this looks for that
/// more often than the matrix does.
fn fresh_uploads(comm: &Communicator, rounds: usize) -> oxccl::Result<Vec<String>> {
    let dev = comm.device();
    let n = comm.size() as u32;
    let send = dev.buffer_from(&vec![1u32; FRESH_LEN])?;
    let mut wrong = Vec::new();
    let mut check = |what: &str, round: usize, got: Vec<u32>, want: u32| {
        if let Some(first) = got.iter().position(|&v| v != want) {
            let bad = got.iter().filter(|&&v| v != want).count();
            wrong.push(format!(
                "rank {}: fresh upload, {what}, round {round}: {bad} wrong elements from {first} \
                 ({:#x}, want {want:#x})",
                comm.rank(),
                got[first]
            ));
        }
    };
    for round in 0..rounds {
        let v = round as u32 + 2;
        let mut buf = dev.buffer_from(&vec![v; FRESH_LEN])?;
        comm.all_reduce_in_place(&mut buf, ReduceOp::Sum)?;
        check("in place", round, buf.to_vec()?, v.wrapping_mul(n));
        let mut out = dev.buffer_from(&vec![u32::MAX; FRESH_LEN])?;
        comm.all_reduce(&send, &mut out, ReduceOp::Sum)?;
        check("out of place", round, out.to_vec()?, n);
    }
    Ok(wrong)
}

fn matrix(rt: &Runtime, n: usize, counts: &[usize]) -> usize {
    let cases = full_matrix(n, counts, &DataType::ALL);
    let start = Instant::now();
    let results = on_ranks(rt, n, |comm| {
        let mut lines: Vec<Option<String>> = cases
            .iter()
            .map(|c| match run_safe_case(comm, c) {
                Ok(0) => None,
                Ok(w) => Some(format!("rank {}: {c:?}: {w} wrong elements", comm.rank())),
                Err(e) => Some(format!("rank {}: {c:?}: error {e}", comm.rank())),
            })
            .collect();
        match fresh_uploads(comm, FRESH_ROUNDS) {
            Ok(w) => lines.extend(w.into_iter().map(Some)),
            Err(e) => lines.push(Some(format!(
                "rank {}: fresh uploads: error {e}",
                comm.rank()
            ))),
        }
        lines
    })
    .unwrap_or_else(|e| {
        println!("FAIL: {e}");
        std::process::exit(1)
    });
    let mut fail = 0;
    for line in results.iter().flatten().flatten() {
        println!("FAIL {line}");
        fail += 1;
    }
    let total = (cases.len() + FRESH_ROUNDS) * n;
    println!(
        "safe API matrix on {} with {n} ranks: {} cases and {FRESH_ROUNDS} fresh-upload rounds \
         per rank in {:.1} s",
        rt.name(),
        cases.len(),
        start.elapsed().as_secs_f64()
    );
    println!("RESULT pass={} fail={fail}", total - fail);
    fail
}

/// Median of microseconds per operation over 5 rounds of `iters` calls of `op` followed by
/// `sync`, measured on every rank (rounds start together).
fn time_rounds(iters: usize, barrier: &Barrier, mut op: impl FnMut(), sync: impl Fn()) -> f64 {
    // Warm-up: first launches load modules and grow arenas.
    for _ in 0..50 {
        op();
    }
    sync();
    let mut rounds: Vec<f64> = (0..5)
        .map(|_| {
            barrier.wait();
            let t = Instant::now();
            for _ in 0..iters {
                op();
            }
            sync();
            t.elapsed().as_secs_f64() * 1e6 / iters as f64
        })
        .collect();
    rounds.sort_by(|a, b| a.total_cmp(b));
    rounds[2]
}

/// Times 8-byte AllReduce through the safe API: (in place, out of place) microseconds per op.
fn bench_safe(rt: &Runtime, n: usize, iters: usize) -> Vec<(f64, f64)> {
    let barrier = Barrier::new(n);
    on_ranks(rt, n, |comm| {
        let dev = comm.device();
        let mut buf = dev.buffer_from(&[1.0f32, 2.0]).expect("alloc");
        let send = dev.buffer_from(&[1.0f32, 2.0]).expect("alloc");
        let mut recv = dev.alloc::<f32>(2).expect("alloc");
        let sync = || comm.synchronize().expect("synchronize");
        let inp = time_rounds(
            iters,
            &barrier,
            || {
                comm.all_reduce_in_place(&mut buf, ReduceOp::Sum)
                    .expect("all_reduce")
            },
            sync,
        );
        let oop = time_rounds(
            iters,
            &barrier,
            || {
                comm.all_reduce(&send, &mut recv, ReduceOp::Sum)
                    .expect("all_reduce")
            },
            sync,
        );
        (inp, oop)
    })
    .expect("safe bench")
}

/// Times the same through core's `Communicator::collective` on backend `B`.
fn bench_raw<B: Backend>(
    backend: Arc<B>,
    n: usize,
    iters: usize,
    make_stream: impl Fn(&B, i32) -> B::Stream + Sync,
) -> Vec<(f64, f64)> {
    let ndev = backend.device_count().expect("device count");
    let id = oxccl_core::bootstrap::UniqueId::generate(
        &oxccl_core::bootstrap::BootstrapOptions::from_env(),
    )
    .expect("unique id");
    let barrier = Barrier::new(n);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let (backend, barrier, make_stream) = (backend.clone(), &barrier, &make_stream);
                s.spawn(move || {
                    let dev = (r % ndev) as i32;
                    let comm = oxccl_core::Communicator::init_rank(
                        backend.clone(),
                        n,
                        id,
                        r,
                        dev,
                        oxccl_core::config::CommConfig::from_env(),
                    )
                    .expect("core init");
                    let stream = make_stream(&backend, dev);
                    let bufs: Vec<DevicePtr> = (0..3)
                        .map(|_| backend.mem_alloc(dev, 8).expect("alloc"))
                        .collect();
                    let args = |send, recv| CollArgs {
                        kind: CollKind::AllReduce,
                        send,
                        recv,
                        count: 2,
                        dtype: DataType::Float32,
                        op: RedOp::Sum,
                        root: 0,
                        layout: None,
                    };
                    let sync = || backend.stream_synchronize(&stream).expect("sync");
                    let run = |a: CollArgs| {
                        // SAFETY: the buffers are 8-byte allocations of this device that live
                        // until after the final synchronize below.
                        unsafe { comm.collective(a, &stream) }.expect("collective")
                    };
                    let inp = time_rounds(iters, barrier, || run(args(bufs[0], bufs[0])), sync);
                    let oop = time_rounds(iters, barrier, || run(args(bufs[1], bufs[2])), sync);
                    sync();
                    for p in bufs {
                        // SAFETY: the stream was synchronized; nothing uses the buffers.
                        unsafe { backend.mem_free(p) }.expect("free");
                    }
                    (inp, oop)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("rank")).collect()
    })
}

/// Operations captured per graph: many per launch, so the graph launch itself is amortised.
const GRAPH_OPS: usize = 100;

/// Microseconds per operation of a graph that `enqueue` fills with [`GRAPH_OPS`] operations on
/// `stream` (thread-local capture: other ranks capture at the same time), replayed
/// `iters / GRAPH_OPS` times per round; median of 5 rounds started together.
fn time_graph(
    cu: &Cudart,
    stream: cudart::Stream,
    iters: usize,
    barrier: &Barrier,
    mut enqueue: impl FnMut(),
) -> Result<f64, String> {
    // SAFETY: `stream` is a live stream of this thread's current device, not the default one.
    unsafe { cu.begin_capture(stream, CAPTURE_MODE_THREAD_LOCAL) }?;
    for _ in 0..GRAPH_OPS {
        enqueue();
    }
    // SAFETY: capture was begun above.
    let graph = unsafe { cu.end_capture(stream) }?;
    // SAFETY: a graph just captured; it is not needed once instantiated.
    let exec = unsafe { cu.instantiate(graph) };
    // SAFETY: as above.
    unsafe { cu.graph_destroy(graph) };
    let exec = exec?;
    let launches = iters.div_ceil(GRAPH_OPS).max(1);
    let run = || -> Result<(), String> {
        for _ in 0..launches {
            // SAFETY: `exec` was captured from `stream`, which is live.
            unsafe { cu.graph_launch(exec, stream) }?;
        }
        // SAFETY: as above.
        unsafe { cu.sync(stream) }
    };
    let mut res = run();
    let mut rounds = Vec::new();
    for _ in 0..5 {
        barrier.wait();
        let t = Instant::now();
        res = res.and_then(|()| run());
        rounds.push(t.elapsed().as_secs_f64() * 1e6 / (launches * GRAPH_OPS) as f64);
    }
    // SAFETY: the stream was synchronized; no launch of `exec` is running.
    unsafe { cu.graph_exec_destroy(exec) };
    res?;
    rounds.sort_by(|a, b| a.total_cmp(b));
    Ok(rounds[2])
}

/// A CUDA runtime stream on `dev` for graph capture (the safe API captures through streams
/// other libraries made: [`oxccl::Stream::from_raw`]).
fn capture_stream(dev: usize) -> Result<(Cudart, cudart::Stream), String> {
    let cu = Cudart::load()?;
    cu.set_device(dev)?;
    let s = cu.stream()?;
    Ok((cu, s))
}

/// 8-byte in-place AllReduce captured in a CUDA graph through the safe API, per rank.
fn bench_graph_safe(rt: &Runtime, n: usize, iters: usize) -> Vec<Result<f64, String>> {
    let barrier = Barrier::new(n);
    on_ranks(rt, n, |comm| {
        let (cu, raw) = capture_stream(comm.device().ordinal())?;
        // SAFETY: `raw` is a live stream of this device until `stream_destroy` below, after
        // the stream and the buffer (its last user) are dropped.
        let stream = unsafe { oxccl::Stream::from_raw(comm.device(), raw as usize) }
            .map_err(|e| e.to_string())?;
        let mut buf = comm
            .device()
            .buffer_from(&[1.0f32, 2.0])
            .map_err(|e| e.to_string())?;
        // Outside the capture first: the buffer's last stream becomes the capture stream, so
        // the captured operations need no cross-stream wait.
        let all_reduce = |buf: &mut oxccl::DeviceBuffer<f32>| {
            comm.on(&stream)
                .all_reduce_in_place(buf, ReduceOp::Sum)
                .expect("all_reduce")
        };
        all_reduce(&mut buf);
        stream.synchronize().map_err(|e| e.to_string())?;
        let t = time_graph(&cu, raw, iters, &barrier, || all_reduce(&mut buf));
        drop(buf);
        drop(stream);
        // SAFETY: synchronized and no longer referenced.
        unsafe { cu.stream_destroy(raw) };
        t
    })
    .expect("safe graph bench")
}

/// The same through core's `Communicator::collective` on the CUDA backend.
fn bench_graph_raw(n: usize, iters: usize) -> Vec<Result<f64, String>> {
    let backend = Arc::new(oxccl_cuda::CudaBackend::load().expect("CUDA"));
    let ndev = backend.device_count().expect("device count");
    let id = oxccl_core::bootstrap::UniqueId::generate(
        &oxccl_core::bootstrap::BootstrapOptions::from_env(),
    )
    .expect("unique id");
    let barrier = Barrier::new(n);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let (backend, barrier) = (backend.clone(), &barrier);
                s.spawn(move || -> Result<f64, String> {
                    let dev = r % ndev;
                    let comm = oxccl_core::Communicator::init_rank(
                        backend.clone(),
                        n,
                        id,
                        r,
                        dev as i32,
                        oxccl_core::config::CommConfig::from_env(),
                    )
                    .map_err(|e| e.to_string())?;
                    let (cu, raw) = capture_stream(dev)?;
                    // SAFETY: `raw` is live until `stream_destroy` below.
                    let stream = unsafe { backend.stream_from_raw(raw as usize) }
                        .map_err(|e| e.to_string())?;
                    let buf = backend
                        .mem_alloc(dev as i32, 8)
                        .map_err(|e| e.to_string())?;
                    let all_reduce = || {
                        let a = CollArgs {
                            kind: CollKind::AllReduce,
                            send: buf,
                            recv: buf,
                            count: 2,
                            dtype: DataType::Float32,
                            op: RedOp::Sum,
                            root: 0,
                            layout: None,
                        };
                        // SAFETY: an 8-byte allocation of this device, freed only after the
                        // stream was synchronized below.
                        unsafe { comm.collective(a, &stream) }.expect("collective")
                    };
                    all_reduce();
                    // SAFETY: `raw` is live.
                    unsafe { cu.sync(raw) }?;
                    let t = time_graph(&cu, raw, iters, barrier, all_reduce);
                    // SAFETY: `time_graph` synchronized the stream; nothing uses the buffer.
                    unsafe { backend.mem_free(buf) }.map_err(|e| e.to_string())?;
                    // SAFETY: synchronized and no longer referenced.
                    unsafe { cu.stream_destroy(raw) };
                    t
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("rank")).collect()
    })
}

/// Times of the safe and the raw path measured in alternation this many times; the median is
/// printed, so drift of the machine between runs cancels out of the difference.
const BENCH_REPEATS: usize = 3;

/// Per rank, the median over the repeats of each column.
fn medians<const K: usize>(runs: &[Vec<[f64; K]>]) -> Vec<[f64; K]> {
    let ranks = runs.first().map_or(0, Vec::len);
    (0..ranks)
        .map(|r| {
            std::array::from_fn(|k| {
                let mut v: Vec<f64> = runs.iter().map(|run| run[r][k]).collect();
                v.sort_by(|a, b| a.total_cmp(b));
                v[v.len() / 2]
            })
        })
        .collect()
}

fn bench(rt: &Runtime, n: usize, iters: usize) {
    let mut runs = Vec::new();
    for _ in 0..BENCH_REPEATS {
        let safe = bench_safe(rt, n, iters);
        let raw = match rt.name() {
            "cuda" => {
                let b = Arc::new(oxccl_cuda::CudaBackend::load().expect("CUDA"));
                bench_raw(b, n, iters, |b, d| b.stream_create(d).expect("stream"))
            }
            _ => {
                let b = Arc::new(oxccl_core::HostBackend::new());
                bench_raw(b, n, iters, |b, _| b.stream_create().expect("stream"))
            }
        };
        runs.push(
            safe.iter()
                .zip(&raw)
                .map(|(&(si, so), &(ri, ro))| [si, ri, so, ro])
                .collect::<Vec<_>>(),
        );
    }
    println!(
        "8 B AllReduce, eager, {} on {n} ranks, {iters} calls then one synchronize, median of 5 rounds, median of {BENCH_REPEATS} alternating runs (us per op):",
        rt.name()
    );
    println!(
        "rank  safe-inplace  raw-inplace  overhead  safe-outofplace  raw-outofplace  overhead"
    );
    for (r, [si, ri, so, ro]) in medians(&runs).into_iter().enumerate() {
        println!(
            "{r:>4}  {si:>12.3}  {ri:>11.3}  {:>8.3}  {so:>15.3}  {ro:>14.3}  {:>8.3}",
            si - ri,
            so - ro
        );
    }
    if rt.name() != "cuda" {
        return;
    }
    let mut runs = Vec::new();
    for _ in 0..BENCH_REPEATS {
        let safe = bench_graph_safe(rt, n, iters);
        let raw = bench_graph_raw(n, iters);
        let mut run = Vec::new();
        for (r, (s, w)) in safe.into_iter().zip(raw).enumerate() {
            match (s, w) {
                (Ok(s), Ok(w)) => run.push([s, w]),
                (s, w) => {
                    println!("rank {r} graph FAIL safe: {s:?} raw: {w:?}");
                    return;
                }
            }
        }
        runs.push(run);
    }
    println!(
        "8 B AllReduce in place, CUDA graph of {GRAPH_OPS} captured operations replayed, cuda on {n} ranks, median of 5 rounds, median of {BENCH_REPEATS} alternating runs (us per op):"
    );
    println!("rank  safe-graph  raw-graph  overhead");
    for (r, [s, w]) in medians(&runs).into_iter().enumerate() {
        println!("{r:>4}  {s:>10.3}  {w:>9.3}  {:>8.3}", s - w);
    }
}

/// `(open fds, threads, RSS KiB, GPU memory in use MiB)` of this process / its first GPU.
type Usage = (usize, usize, usize, Option<usize>);

/// T5 on devices: after a warm-up, `cycles` rounds of init, a checked 1024-element AllReduce and finalize on
/// `n` thread-ranks; fds, threads, RSS and the GPU's memory in use before and after. Fails on a
/// wrong element, on fds or threads above the first round's, or on GPU memory grown by more
/// than 64 MiB.
fn cycles(rt: &Runtime, n: usize, cycles: usize) -> usize {
    let cu = if rt.name() == "cuda" {
        Cudart::load().ok()
    } else {
        None
    };
    let usage = || -> Usage {
        let gpu = cu
            .as_ref()
            .and_then(|c| c.set_device(0).ok().and_then(|()| c.mem_used()));
        (
            open_fds(),
            proc_status("Threads:"),
            proc_status("VmRSS:"),
            gpu.map(|b| b >> 20),
        )
    };
    let want = (n * (n + 1) / 2) as f32;
    let round = || -> usize {
        on_ranks(rt, n, |comm| -> oxccl::Result<usize> {
            let mut buf = comm
                .device()
                .buffer_from(&vec![(comm.rank() + 1) as f32; 1024])?;
            comm.all_reduce_in_place(&mut buf, ReduceOp::Sum)?;
            Ok(buf.to_vec()?.iter().filter(|&&x| x != want).count())
        })
        .map_or(1, |per_rank| {
            per_rank
                .into_iter()
                .map(|r| {
                    r.unwrap_or_else(|e| {
                        println!("FAIL {e}");
                        1
                    })
                })
                .sum()
        })
    };
    let show = |what: &str, u: Usage| {
        let gpu = u.3.map_or("-".to_string(), |m| format!("{m} MiB"));
        println!(
            "{what:>12}: fds {}, threads {}, RSS {} KiB, GPU memory in use {gpu}",
            u.0, u.1, u.2
        );
    };
    // Warm-up: the roots of used unique ids linger (answering late ranks), at most 16 per
    // process, so the steady state starts after 17 rounds.
    const WARM_UP: usize = 20;
    let mut wrong: usize = (0..WARM_UP).map(|_| round()).sum();
    let base = usage();
    show(&format!("after {WARM_UP}"), base);
    let start = Instant::now();
    for c in 1..=cycles {
        wrong += round();
        if c % (cycles / 5).max(1) == 0 {
            show(&format!("after {}", c + WARM_UP), usage());
        }
    }
    let per_cycle = start.elapsed().as_secs_f64() * 1e3 / cycles.max(1) as f64;
    // Threads of torn-down communicators may take a moment to finish.
    let settle = Instant::now();
    let mut end = usage();
    while (end.0 > base.0 || end.1 > base.1) && settle.elapsed().as_secs() < 5 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        end = usage();
    }
    show("settled", end);
    let gpu_growth = match (base.3, end.3) {
        (Some(a), Some(b)) => b.saturating_sub(a),
        _ => 0,
    };
    let mut fail = usize::from(wrong > 0);
    for (what, grew) in [
        ("open fds", end.0 > base.0),
        ("threads", end.1 > base.1),
        ("GPU memory (> 64 MiB)", gpu_growth > 64),
    ] {
        if grew {
            println!("FAIL {what} grew over {cycles} cycles");
            fail += 1;
        }
    }
    println!(
        "{cycles} cycles of init / AllReduce / finalize on {n} ranks ({}): {per_cycle:.1} ms per cycle, {wrong} wrong elements",
        rt.name()
    );
    let rounds = cycles + WARM_UP;
    println!("RESULT pass={} fail={fail}", rounds - fail.min(rounds));
    fail
}

fn main() {
    let o = opts();
    let rt = match runtime(&o.backend) {
        Ok(rt) => rt,
        Err(e) => {
            println!("SKIP: {e}");
            std::process::exit(2);
        }
    };
    let ndev = rt.device_count().unwrap_or(1);
    let n = o
        .ranks
        .unwrap_or(if rt.name() == "host" { 2 } else { ndev });
    if o.bench {
        bench(&rt, n, o.iters);
        return;
    }
    if let Some(c) = o.cycles {
        if cycles(&rt, n, c) > 0 {
            std::process::exit(1);
        }
        return;
    }
    let mut failed = matrix(&rt, n, &o.counts) + misuse(&rt);
    if rt.name() == "cuda" {
        failed += capture_beside_watchdog(&rt, n);
        failed += destroy_beside_capture(&rt, n);
    }
    if failed > 0 {
        std::process::exit(1);
    }
}

/// Longer than the watchdog's polling period, so that it looks at its pending operations at
/// least once while the graphs below capture.
const CAPTURE_HOLD: Duration = Duration::from_millis(700);

/// Every rank queues an eager AllReduce (which the watchdog follows until it sees its event
/// complete), then captures a graph in global mode, as PyTorch does by default, for longer than
/// the watchdog's period. In global mode a thread that is not relaxed may not query events while
/// any thread captures: a watchdog that did would invalidate these captures (and every user's
/// graph captured beside our eager work). Returns the failures.
fn capture_beside_watchdog(rt: &Runtime, n: usize) -> usize {
    let barrier = Barrier::new(n);
    let results = on_ranks(rt, n, |comm| -> Result<(), String> {
        let (cu, raw) = capture_stream(comm.device().ordinal())?;
        let mut buf = comm
            .device()
            .buffer_from(&[1.0f32; 4096])
            .map_err(|e| e.to_string())?;
        comm.all_reduce_in_place(&mut buf, ReduceOp::Sum)
            .map_err(|e| e.to_string())?;
        barrier.wait();
        // SAFETY: `raw` is a live non-default stream of this thread's device.
        let captured = unsafe { cu.begin_capture(raw, CAPTURE_MODE_GLOBAL) }.and_then(|()| {
            std::thread::sleep(CAPTURE_HOLD);
            // SAFETY: capture was begun above.
            unsafe { cu.end_capture(raw) }
        });
        barrier.wait();
        if let Ok(g) = &captured {
            // SAFETY: an empty graph, never instantiated.
            unsafe { cu.graph_destroy(*g) };
        }
        let synced = comm.synchronize().map_err(|e| e.to_string());
        let want = n as f32;
        let got = buf.to_vec().map_err(|e| e.to_string())?;
        // SAFETY: nothing was queued on `raw` outside the capture.
        unsafe { cu.stream_destroy(raw) };
        captured.map_err(|e| format!("the capture was broken: {e}"))?;
        synced?;
        match got.iter().position(|&v| v != want) {
            Some(i) => Err(format!(
                "element {i} is {} after the eager AllReduce, not {want}",
                got[i]
            )),
            None => Ok(()),
        }
    });
    report_ranks("capture beside the watchdog", results)
}

/// Prints a scenario's failures, one line per rank, and its RESULT line; returns the failures.
fn report_ranks(what: &str, results: oxccl::Result<Vec<Result<(), String>>>) -> usize {
    let fail = match results {
        Ok(rs) => rs
            .into_iter()
            .enumerate()
            .filter_map(|(r, res)| res.err().map(|e| println!("FAIL {what}, rank {r}: {e}")))
            .count(),
        Err(e) => {
            println!("FAIL {what}: {e}");
            1
        }
    };
    println!("{what}: RESULT pass={} fail={fail}", usize::from(fail == 0));
    fail
}

/// Every rank splits off a communicator, runs an AllReduce on it, then, while every rank holds
/// a graph capture open in global mode (PyTorch's default) on a stream of its own, destroys it,
/// drops the AllReduce's buffer and uploads a new one. These wait for streams, free, allocate
/// and copy: calls that global mode forbids while any thread captures unless the caller is
/// relaxed; done plainly, they would invalidate every one of these captures. Returns the
/// failures.
fn destroy_beside_capture(rt: &Runtime, n: usize) -> usize {
    let barrier = Barrier::new(n);
    let results = on_ranks(rt, n, |comm| -> Result<(), String> {
        let (cu, raw) = capture_stream(comm.device().ordinal())?;
        let child = comm
            .split(Some(0), comm.rank() as i32)
            .map_err(|e| e.to_string())?
            .ok_or("the split gave this rank no communicator")?;
        let mut buf = child
            .device()
            .buffer_from(&[1.0f32; 4096])
            .map_err(|e| e.to_string())?;
        child
            .all_reduce_in_place(&mut buf, ReduceOp::Sum)
            .map_err(|e| e.to_string())?;
        let got = buf.to_vec().map_err(|e| e.to_string())?;
        barrier.wait();
        // SAFETY: `raw` is a live non-default stream of this thread's device.
        let began = unsafe { cu.begin_capture(raw, CAPTURE_MODE_GLOBAL) };
        // Every rank is capturing before any destroys (a rank whose capture failed waits too).
        barrier.wait();
        let captured = began.and_then(|()| {
            drop(child);
            drop(buf);
            let fresh = comm
                .device()
                .buffer_from(&[2.0f32; 4096])
                .map_err(|e| format!("uploading a buffer: {e}"))?;
            std::thread::sleep(CAPTURE_HOLD / 4);
            drop(fresh);
            // SAFETY: capture was begun above.
            unsafe { cu.end_capture(raw) }
        });
        barrier.wait();
        if let Ok(g) = &captured {
            // SAFETY: an empty graph, never instantiated.
            unsafe { cu.graph_destroy(*g) };
        }
        // SAFETY: nothing was queued on `raw` outside the capture.
        unsafe { cu.stream_destroy(raw) };
        captured.map_err(|e| format!("the capture was broken: {e}"))?;
        let want = n as f32;
        match got.iter().position(|&v| v != want) {
            Some(i) => Err(format!("element {i} is {}, not {want}", got[i])),
            None => Ok(()),
        }
    });
    report_ranks("destroy beside a capture", results)
}

/// The safe API's misuse scenarios (`oxccl_tests::misuse`: groups nested, forgotten, dropped
/// early; bucket views of one flat buffer; views in every kind of operation) on `rt`; the
/// number that failed.
fn misuse(rt: &Runtime) -> usize {
    oxccl_tests::misuse::use_runtime(rt.clone());
    let host_only = ["ranks_that_disagree_on_counts_get_a_sentence_naming_both"];
    let mut fail = 0;
    let mut pass = 0;
    for (name, run) in oxccl_tests::misuse::SCENARIOS {
        if rt.name() != "host" && host_only.contains(name) {
            continue;
        }
        match std::panic::catch_unwind(run) {
            Ok(()) => pass += 1,
            Err(_) => {
                println!("FAIL misuse scenario {name}");
                fail += 1;
            }
        }
    }
    println!(
        "misuse scenarios on {}: RESULT pass={pass} fail={fail}",
        rt.name()
    );
    fail
}
