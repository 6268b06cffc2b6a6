//! nccl-tests-style benchmark of any NCCL-ABI library (ours or NVIDIA's), loaded at run time.
//!
//! Prints, per operation and size: time (us), algbw and busbw (GB/s, nccl-tests' formulas) and
//! #wrong from an element-by-element check against an independent reference. `--compare LIB`
//! runs a second library in the same invocation and prints ours/theirs.
//!
//! Ranks are threads of this process, one communicator each. Memory: `host` (our library's
//! host backend, `OXCCL_BACKEND=host`).

use oxccl_core::datatype::DataType;
use oxccl_core::plan::CollKind;
use oxccl_tests::cudart::{Cudart, Stream};
use oxccl_tests::nccl_lib::{NcclLib, RawComm, RawUniqueId};
use oxccl_tests::{Case, POISON, TestOp, count_wrong, fill_input};
use std::ffi::c_void;
use std::sync::{Arc, Barrier};
use std::time::Instant;

struct Options {
    lib: String,
    compare: Option<String>,
    ranks: usize,
    ops: Vec<CollKind>,
    min_bytes: usize,
    max_bytes: usize,
    factor: usize,
    warmup: usize,
    iters: usize,
    dtype: DataType,
    json: Option<String>,
    mem: Mem,
}

/// Where buffers live and how ranks are driven.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mem {
    /// Host memory, one thread per rank (the library's host backend).
    Host,
    /// GPU memory, one process driving every GPU through ncclCommInitAll and groups.
    Cuda,
}

fn usage() -> ! {
    eprintln!(
        "usage: oxccl-bench [--lib PATH] [--compare PATH] [-n RANKS] [--op all|allreduce,...] \
         [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-w WARMUP] [-i ITERS] [-d float|half|bf16|int32|...] [--json FILE] \
         [--mem host|cuda]"
    );
    std::process::exit(2)
}

fn parse_size(s: &str) -> usize {
    let (num, mul) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().unwrap_or_else(|_| usage()) * mul
}

fn op_name(k: CollKind) -> &'static str {
    match k {
        CollKind::AllReduce => "allreduce",
        CollKind::Broadcast => "broadcast",
        CollKind::Reduce => "reduce",
        CollKind::AllGather => "allgather",
        CollKind::ReduceScatter => "reducescatter",
        CollKind::AllToAll => "alltoall",
        CollKind::Gather => "gather",
        CollKind::Scatter => "scatter",
        CollKind::SendRecv => "sendrecv",
        CollKind::AllToAllv => "alltoallv",
    }
}

const ALL_OPS: [CollKind; 9] = [
    CollKind::AllReduce,
    CollKind::AllGather,
    CollKind::ReduceScatter,
    CollKind::Broadcast,
    CollKind::Reduce,
    CollKind::AllToAll,
    CollKind::Gather,
    CollKind::Scatter,
    CollKind::SendRecv,
];

fn parse_args() -> Options {
    let mut o = Options {
        lib: std::env::var("OXCCL_LIB").unwrap_or_else(|_| "dist/lib/libnccl.so.2".into()),
        compare: None,
        ranks: 8,
        ops: vec![CollKind::AllReduce],
        min_bytes: 8,
        max_bytes: 64 << 20,
        factor: 4,
        warmup: 3,
        iters: 10,
        dtype: DataType::Float32,
        json: None,
        mem: Mem::Host,
    };
    let mut mem_given = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--lib" => o.lib = val(),
            "--compare" => o.compare = Some(val()),
            "-n" | "--ranks" => o.ranks = val().parse().unwrap_or_else(|_| usage()),
            "--op" => {
                let v = val();
                o.ops = if v == "all" {
                    ALL_OPS.to_vec()
                } else {
                    v.split(',')
                        .map(|n| {
                            *ALL_OPS
                                .iter()
                                .find(|k| op_name(**k) == n)
                                .unwrap_or_else(|| usage())
                        })
                        .collect()
                };
            }
            "-b" => o.min_bytes = parse_size(&val()),
            "-e" => o.max_bytes = parse_size(&val()),
            "-f" => o.factor = val().parse().unwrap_or_else(|_| usage()),
            "-w" => o.warmup = val().parse().unwrap_or_else(|_| usage()),
            "-i" => o.iters = val().parse().unwrap_or_else(|_| usage()),
            "-d" => {
                o.dtype = match val().as_str() {
                    "float" | "float32" => DataType::Float32,
                    "double" | "float64" => DataType::Float64,
                    "half" | "float16" => DataType::Float16,
                    "bf16" | "bfloat16" => DataType::Bfloat16,
                    "int8" => DataType::Int8,
                    "uint8" => DataType::Uint8,
                    "int32" => DataType::Int32,
                    "int64" => DataType::Int64,
                    _ => usage(),
                }
            }
            "--json" => o.json = Some(val()),
            "--mem" => {
                mem_given = true;
                o.mem = match val().as_str() {
                    "host" => Mem::Host,
                    "cuda" => Mem::Cuda,
                    _ => usage(),
                }
            }
            _ => usage(),
        }
    }
    if !mem_given && std::env::var("OXCCL_BACKEND").as_deref() != Ok("host") {
        // GPUs when there are any: then ranks default to one per GPU.
        if let Ok(rt) = Cudart::load()
            && rt.device_count() > 0
        {
            o.mem = Mem::Cuda;
            o.ranks = rt.device_count();
        }
    }
    if o.ranks == 0 || o.factor < 2 || o.min_bytes == 0 {
        usage();
    }
    o
}

/// nccl-tests' bus bandwidth factor.
fn bus_factor(k: CollKind, n: usize) -> f64 {
    let n = n as f64;
    match k {
        CollKind::AllReduce => 2.0 * (n - 1.0) / n,
        CollKind::AllGather
        | CollKind::ReduceScatter
        | CollKind::AllToAll
        | CollKind::Gather
        | CollKind::Scatter => (n - 1.0) / n,
        _ => 1.0,
    }
}

/// Elements per rank (the API's count) for a message of `bytes` as nccl-tests sizes it.
fn count_for(k: CollKind, bytes: usize, es: usize, n: usize) -> usize {
    match k {
        CollKind::AllGather
        | CollKind::ReduceScatter
        | CollKind::AllToAll
        | CollKind::Gather
        | CollKind::Scatter => bytes / es / n,
        _ => bytes / es,
    }
}

/// Per operation, one point per size.
type Sweep = Vec<(CollKind, Vec<Point>)>;

/// One rank's communicator and the call parameters that do not change per size.
#[derive(Clone, Copy)]
struct RankCtx {
    comm: RawComm,
    rank: usize,
    n: usize,
    dt: i32,
    stream: Stream,
}

/// The message size nccl-tests reports for `count` (total bytes for the gathering operations).
fn message_bytes(k: CollKind, count: usize, es: usize, n: usize) -> usize {
    match k {
        CollKind::AllGather
        | CollKind::ReduceScatter
        | CollKind::AllToAll
        | CollKind::Gather
        | CollKind::Scatter => count * es * n,
        _ => count * es,
    }
}

#[derive(Clone, Copy, Default)]
struct Point {
    bytes: usize,
    time_us: f64,
    wrong: usize,
}

/// Runs one operation on one rank; `send`/`recv` are sized for `count`.
///
/// # Safety
/// The buffers are valid for the sizes the operation implies.
unsafe fn call(
    lib: &NcclLib,
    k: CollKind,
    ctx: RankCtx,
    send: *mut u8,
    recv: *mut u8,
    count: usize,
) -> i32 {
    let RankCtx {
        comm,
        rank,
        n,
        dt,
        stream,
    } = ctx;
    let (s, r) = (send as *const c_void, recv as *mut c_void);
    // SAFETY: forwarded from the caller.
    unsafe {
        match k {
            CollKind::AllReduce => (lib.all_reduce)(s, r, count, dt, 0, comm, stream),
            CollKind::Broadcast => (lib.broadcast)(s, r, count, dt, 0, comm, stream),
            CollKind::Reduce => (lib.reduce)(s, r, count, dt, 0, 0, comm, stream),
            CollKind::AllGather => (lib.all_gather)(s, r, count, dt, comm, stream),
            CollKind::ReduceScatter => (lib.reduce_scatter)(s, r, count, dt, 0, comm, stream),
            CollKind::AllToAll => lib
                .all_to_all
                .map_or(5, |f| f(s, r, count, dt, comm, stream)),
            CollKind::Gather => lib
                .gather
                .map_or(5, |f| f(s, r, count, dt, 0, comm, stream)),
            CollKind::Scatter => lib
                .scatter
                .map_or(5, |f| f(s, r, count, dt, 0, comm, stream)),
            CollKind::SendRecv => {
                let (next, prev) = ((rank + 1) % n, (rank + n - 1) % n);
                (lib.group_start)();
                let a = (lib.send)(s, count, dt, next as i32, comm, stream);
                let b = (lib.recv)(r, count, dt, prev as i32, comm, stream);
                let c = (lib.group_end)();
                if a != 0 {
                    a
                } else if b != 0 {
                    b
                } else {
                    c
                }
            }
            CollKind::AllToAllv => 5,
        }
    }
}

fn expected_sendrecv(dtype: DataType, n: usize, rank: usize, count: usize) -> Vec<u8> {
    let mut v = vec![0u8; count * dtype.size()];
    fill_input(dtype, None, (rank + n - 1) % n, 0, &mut v);
    v
}

fn run_lib(path: &str, o: &Options) -> Result<Sweep, String> {
    let lib = Arc::new(NcclLib::load(path)?);
    let n = o.ranks;
    let mut id = RawUniqueId([0; 128]);
    // SAFETY: `id` is a valid out-pointer.
    lib.check("ncclGetUniqueId", unsafe { (lib.get_unique_id)(&mut id) })?;
    let es = o.dtype.size();
    let dt = o.dtype as i32;
    let sizes = sweep_sizes(o);
    let barrier = Arc::new(Barrier::new(n));
    let results: Vec<Result<Sweep, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|rank| {
                let (lib, barrier, sizes) = (lib.clone(), barrier.clone(), &sizes);
                s.spawn(move || -> Result<Sweep, String> {
                    let mut comm: RawComm = std::ptr::null_mut();
                    // SAFETY: `comm` is a valid out-pointer; the id is shared by value.
                    lib.check("ncclCommInitRank", unsafe {
                        (lib.comm_init_rank)(&mut comm, n as i32, id, rank as i32)
                    })?;
                    let ctx = RankCtx {
                        comm,
                        rank,
                        n,
                        dt,
                        stream: std::ptr::null_mut(),
                    };
                    let max_elems = o.max_bytes / es + n;
                    let mut send = vec![0u8; max_elems * es];
                    let mut recv = vec![0u8; max_elems * es];
                    let mut out = Vec::new();
                    for &k in &o.ops {
                        let mut points = Vec::new();
                        for &bytes in sizes {
                            let case = bench_case(k, o, bytes, n);
                            let count = case.count;
                            let (se, re) = case.sizes(n, rank);
                            fill_input(o.dtype, case.op, rank, 0, &mut send[..se * es]);
                            recv[..re * es].fill(POISON);
                            barrier.wait();
                            // SAFETY: both buffers hold at least the sizes `case.sizes` reports.
                            let r = unsafe {
                                call(&lib, k, ctx, send.as_mut_ptr(), recv.as_mut_ptr(), count)
                            };
                            lib.check(op_name(k), r)?;
                            let want = expected(&case, n, rank);
                            let wrong = want
                                .map_or(0, |w| count_wrong(o.dtype, case.op, &recv[..w.len()], &w));
                            for _ in 0..o.warmup {
                                // SAFETY: as above.
                                lib.check(op_name(k), unsafe {
                                    call(&lib, k, ctx, send.as_mut_ptr(), recv.as_mut_ptr(), count)
                                })?;
                            }
                            barrier.wait();
                            let t = Instant::now();
                            for _ in 0..o.iters {
                                // SAFETY: as above.
                                lib.check(op_name(k), unsafe {
                                    call(&lib, k, ctx, send.as_mut_ptr(), recv.as_mut_ptr(), count)
                                })?;
                            }
                            let time_us = t.elapsed().as_secs_f64() * 1e6 / o.iters.max(1) as f64;
                            points.push(Point {
                                bytes: message_bytes(k, count, es, n),
                                time_us,
                                wrong,
                            });
                        }
                        out.push((k, points));
                    }
                    // SAFETY: `comm` came from a successful init and is not used afterwards.
                    lib.check("ncclCommDestroy", unsafe { (lib.comm_destroy)(comm) })?;
                    Ok(out)
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
    // Per size: the slowest rank's time, and every rank's wrong elements.
    let mut merged: Option<Sweep> = None;
    for r in results {
        let r = r?;
        match &mut merged {
            None => merged = Some(r),
            Some(m) => {
                for ((_, acc), (_, pts)) in m.iter_mut().zip(r) {
                    for (a, p) in acc.iter_mut().zip(pts) {
                        a.time_us = a.time_us.max(p.time_us);
                        a.wrong += p.wrong;
                    }
                }
            }
        }
    }
    Ok(merged.unwrap_or_default())
}

/// The sizes of the sweep.
fn sweep_sizes(o: &Options) -> Vec<usize> {
    let mut sizes = Vec::new();
    let mut b = o.min_bytes;
    while b <= o.max_bytes {
        sizes.push(b);
        b *= o.factor;
    }
    sizes
}

/// The expected output of `rank` for `case` (SendRecv: the previous rank's input).
fn expected(case: &Case, n: usize, rank: usize) -> Option<Vec<u8>> {
    if case.kind == CollKind::SendRecv {
        Some(expected_sendrecv(case.dtype, n, rank, case.count))
    } else {
        case.expected(n, rank)
    }
}

fn bench_case(k: CollKind, o: &Options, bytes: usize, n: usize) -> Case {
    let es = o.dtype.size();
    Case {
        kind: k,
        dtype: o.dtype,
        op: matches!(
            k,
            CollKind::AllReduce | CollKind::Reduce | CollKind::ReduceScatter
        )
        .then_some(TestOp::Sum),
        count: count_for(k, bytes, es, n),
        root: 0,
        in_place: false,
    }
}

/// One process drives every GPU: ncclCommInitAll, every call of an iteration in one group.
fn run_lib_cuda(path: &str, o: &Options) -> Result<Sweep, String> {
    let lib = NcclLib::load(path)?;
    let rt = Cudart::load()?;
    let n = o.ranks.min(rt.device_count());
    if n == 0 {
        return Err("no GPU visible".into());
    }
    let es = o.dtype.size();
    let dt = o.dtype as i32;
    let mut comms = vec![std::ptr::null_mut(); n];
    // SAFETY: `comms` has room for `n` handles; NULL devlist means devices 0..n.
    lib.check("ncclCommInitAll", unsafe {
        (lib.comm_init_all)(comms.as_mut_ptr(), n as i32, std::ptr::null())
    })?;
    let max_bytes = o.max_bytes + n * es;
    let mut ranks = Vec::new();
    for (d, &comm) in comms.iter().enumerate() {
        rt.set_device(d)?;
        let ctx = RankCtx {
            comm,
            rank: d,
            n,
            dt,
            stream: rt.stream()?,
        };
        ranks.push((ctx, rt.alloc(max_bytes)?, rt.alloc(max_bytes)?));
    }
    let run_all = |count: usize, k: CollKind| -> Result<(), String> {
        // SAFETY: group calls take no pointers.
        lib.check("ncclGroupStart", unsafe { (lib.group_start)() })?;
        for &(ctx, send, recv) in &ranks {
            // SAFETY: both device buffers hold `max_bytes`, enough for every case of the sweep.
            let r = unsafe { call(&lib, k, ctx, send, recv, count) };
            lib.check(op_name(k), r)?;
        }
        // SAFETY: as above.
        lib.check("ncclGroupEnd", unsafe { (lib.group_end)() })
    };
    let sync_all = || -> Result<(), String> {
        for (d, (ctx, _, _)) in ranks.iter().enumerate() {
            rt.set_device(d)?;
            // SAFETY: the stream was created on device `d` above.
            unsafe { rt.sync(ctx.stream)? };
        }
        Ok(())
    };
    let mut out = Vec::new();
    for &k in &o.ops {
        let mut points = Vec::new();
        for &bytes in &sweep_sizes(o) {
            let case = bench_case(k, o, bytes, n);
            let mut host = vec![0u8; max_bytes];
            for (r, &(_, send, recv)) in ranks.iter().enumerate() {
                let (se, re) = case.sizes(n, r);
                fill_input(o.dtype, case.op, r, 0, &mut host[..se * es]);
                // SAFETY: device buffers hold `max_bytes` >= these sizes.
                unsafe { rt.copy(send, host.as_ptr(), se * es)? };
                host[..re * es].fill(POISON);
                // SAFETY: as above.
                unsafe { rt.copy(recv, host.as_ptr(), re * es)? };
            }
            run_all(case.count, k)?;
            sync_all()?;
            let mut wrong = 0;
            for (r, &(_, _, recv)) in ranks.iter().enumerate() {
                if let Some(want) = expected(&case, n, r) {
                    // SAFETY: the device buffer holds at least `want.len()` bytes.
                    unsafe { rt.copy(host.as_mut_ptr(), recv, want.len())? };
                    wrong += count_wrong(o.dtype, case.op, &host[..want.len()], &want);
                }
            }
            for _ in 0..o.warmup {
                run_all(case.count, k)?;
            }
            sync_all()?;
            let t = Instant::now();
            for _ in 0..o.iters {
                run_all(case.count, k)?;
            }
            sync_all()?;
            let time_us = t.elapsed().as_secs_f64() * 1e6 / o.iters.max(1) as f64;
            points.push(Point {
                bytes: message_bytes(k, case.count, es, n),
                time_us,
                wrong,
            });
        }
        out.push((k, points));
    }
    for (d, (ctx, send, recv)) in ranks.into_iter().enumerate() {
        rt.set_device(d)?;
        // SAFETY: the buffers are no longer used; every stream was synchronised.
        unsafe {
            rt.free(send);
            rt.free(recv);
        }
        // SAFETY: the communicator came from ncclCommInitAll and is not used afterwards.
        lib.check("ncclCommDestroy", unsafe { (lib.comm_destroy)(ctx.comm) })?;
    }
    Ok(out)
}

fn gbps(bytes: usize, us: f64) -> f64 {
    if us > 0.0 {
        bytes as f64 / us / 1e3
    } else {
        0.0
    }
}

fn main() {
    let o = parse_args();
    let run = |p: &str| match o.mem {
        Mem::Host => run_lib(p, &o),
        Mem::Cuda => run_lib_cuda(p, &o),
    };
    let ours = run(&o.lib).unwrap_or_else(|e| {
        eprintln!("oxccl-bench: {e}");
        std::process::exit(1)
    });
    let theirs = o.compare.as_ref().map(|p| {
        run(p).unwrap_or_else(|e| {
            eprintln!("oxccl-bench: {p}: {e}");
            std::process::exit(1)
        })
    });
    let version = NcclLib::load(&o.lib).map(|l| l.version()).unwrap_or(0);
    println!(
        "# oxccl-bench: {} ranks (threads), {}, library {} (version code {version})",
        o.ranks,
        o.dtype.name(),
        o.lib
    );
    if let Some(p) = &o.compare {
        println!("# compared with {p}");
    }
    let mut json = Vec::new();
    let mut total_wrong = 0;
    for (i, (k, pts)) in ours.iter().enumerate() {
        println!("#\n# {}", op_name(*k));
        match &theirs {
            None => println!(
                "# {:>12} {:>12} {:>10} {:>10} {:>8}",
                "size(B)", "time(us)", "algbw", "busbw", "#wrong"
            ),
            Some(_) => println!(
                "# {:>12} {:>12} {:>10} {:>10} {:>8} | {:>12} {:>10} {:>8} | {:>8}",
                "size(B)",
                "time(us)",
                "algbw",
                "busbw",
                "#wrong",
                "their(us)",
                "their bus",
                "#wrong",
                "ours/them"
            ),
        }
        for (j, p) in pts.iter().enumerate() {
            let alg = gbps(p.bytes, p.time_us);
            let bus = alg * bus_factor(*k, o.ranks);
            total_wrong += p.wrong;
            match &theirs {
                None => println!(
                    "  {:>12} {:>12.2} {:>10.3} {:>10.3} {:>8}",
                    p.bytes, p.time_us, alg, bus, p.wrong
                ),
                Some(t) => {
                    let q = t[i].1[j];
                    total_wrong += q.wrong;
                    let qbus = gbps(q.bytes, q.time_us) * bus_factor(*k, o.ranks);
                    println!(
                        "  {:>12} {:>12.2} {:>10.3} {:>10.3} {:>8} | {:>12.2} {:>10.3} {:>8} | {:>8.2}",
                        p.bytes,
                        p.time_us,
                        alg,
                        bus,
                        p.wrong,
                        q.time_us,
                        qbus,
                        q.wrong,
                        p.time_us / q.time_us
                    );
                }
            }
            json.push(format!(
                "{{\"op\":\"{}\",\"bytes\":{},\"time_us\":{:.3},\"algbw\":{:.4},\"busbw\":{:.4},\"wrong\":{}}}",
                op_name(*k), p.bytes, p.time_us, alg, bus, p.wrong
            ));
        }
    }
    println!("# total #wrong: {total_wrong}");
    if let Some(path) = &o.json {
        let _ = std::fs::write(path, format!("[{}]\n", json.join(",\n")));
    }
    std::process::exit(i32::from(total_wrong > 0));
}
