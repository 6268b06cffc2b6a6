//! Checks every collective on the CUDA backend with device buffers (`cuMemAlloc`), on real GPUs.
//!
//! ```text
//! gpu-check --mode initall|threads|procs --ranks N [--counts 0,1,7] [--types all|f32,bf16]
//!           [--big-types f32] [--big-count 1048579]
//! ```
//! Every rank `r` runs on device `r % devices`. `initall` drives every rank from one thread
//! (`ncclCommInitAll` + group calls), `threads` runs one thread per rank, `procs` one process per
//! rank (this program re-executed with `--worker`). Prints one `FAIL` line per wrong case and
//! `RESULT pass=P fail=F`; exits 1 on a failure, 2 when no GPU is present, 3 on a hang.

use oxccl_core::backend::{Backend, DevicePtr};
use oxccl_core::bootstrap::{BootstrapOptions, UniqueId};
use oxccl_core::comm::CollArgs;
use oxccl_core::comm::group::{group_end, group_start};
use oxccl_core::config::CommConfig;
use oxccl_core::datatype::{DataType, RedOp};
use oxccl_core::plan::{CollKind, P2pDir};
use oxccl_core::{Communicator, Result};
use oxccl_cuda::{CudaBackend, CudaStream};
use oxccl_tests::suite::full_matrix;
use oxccl_tests::{Case, POISON, alltoallv_layout, count_wrong, fill_input};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

struct Opts {
    mode: String,
    ranks: usize,
    counts: Vec<usize>,
    types: Vec<DataType>,
    big_types: Vec<DataType>,
    big_count: usize,
    worker: Option<usize>,
}

fn parse_types(s: &str) -> Vec<DataType> {
    if s == "all" {
        return DataType::ALL.to_vec();
    }
    s.split(',')
        .filter(|x| !x.is_empty())
        .map(|x| {
            *DataType::ALL
                .iter()
                .find(|t| t.name() == x || short(**t) == x)
                .unwrap_or_else(|| panic!("unknown type {x}"))
        })
        .collect()
}

fn short(t: DataType) -> &'static str {
    match t {
        DataType::Int8 => "i8",
        DataType::Uint8 => "u8",
        DataType::Int32 => "i32",
        DataType::Uint32 => "u32",
        DataType::Int64 => "i64",
        DataType::Uint64 => "u64",
        DataType::Float16 => "f16",
        DataType::Float32 => "f32",
        DataType::Float64 => "f64",
        DataType::Bfloat16 => "bf16",
        DataType::Float8E4M3 => "f8e4m3",
        DataType::Float8E5M2 => "f8e5m2",
    }
}

fn opts() -> Opts {
    let mut o = Opts {
        mode: "initall".into(),
        ranks: 2,
        counts: vec![0, 1, 7],
        types: DataType::ALL.to_vec(),
        big_types: vec![DataType::Float32],
        big_count: 1_048_579,
        worker: None,
    };
    let a: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < a.len() {
        let v = a.get(i + 1).cloned().unwrap_or_default();
        match a[i].as_str() {
            "--mode" => o.mode = v,
            "--ranks" => o.ranks = v.parse().expect("--ranks N"),
            "--counts" => {
                o.counts = v
                    .split(',')
                    .filter(|x| !x.is_empty())
                    .map(|x| x.parse().expect("count"))
                    .collect()
            }
            "--types" => o.types = parse_types(&v),
            "--big-types" => o.big_types = parse_types(&v),
            "--big-count" => o.big_count = v.parse().expect("--big-count N"),
            "--worker" => o.worker = Some(v.parse().expect("--worker RANK")),
            other => panic!("unknown argument {other}"),
        }
        i += 2;
    }
    o
}

fn cases(o: &Opts) -> Vec<Case> {
    let mut v = full_matrix(o.ranks, &o.counts, &o.types);
    if o.big_count > 0 && !o.big_types.is_empty() {
        v.extend(full_matrix(o.ranks, &[o.big_count], &o.big_types));
    }
    v
}

/// A case's device buffers on one rank and what to compare afterwards.
struct Prep {
    dev: i32,
    dsend: DevicePtr,
    drecv: DevicePtr,
    args: CollArgs,
    out_is_send: bool,
    out_off: usize,
    send_len: usize,
    recv_len: usize,
    want: Option<Vec<u8>>,
}

fn prepare(b: &CudaBackend, dev: i32, n: usize, rank: usize, case: &Case) -> Result<Prep> {
    let t = case.dtype;
    let es = t.size();
    let (send_elems, recv_elems) = case.sizes(n, rank);
    let mut send = vec![POISON; send_elems * es];
    fill_input(t, case.op, rank, 0, &mut send);
    let mut recv = vec![POISON; recv_elems * es];
    let op = match case.op {
        Some(o) => o.red_op(t),
        None => RedOp::Sum,
    };
    // Offsets (bytes) of the pointers inside (send, recv): (in send?, offset).
    let (s_at, r_at, out_is_send) = if case.in_place {
        match case.kind {
            CollKind::AllReduce | CollKind::Broadcast | CollKind::Reduce => {
                recv.copy_from_slice(&send);
                ((false, 0), (false, 0), false)
            }
            CollKind::AllGather | CollKind::Gather => {
                let off = case.in_place_offset(rank) * es;
                if case.kind == CollKind::AllGather || rank == case.root {
                    recv[off..off + send.len()].copy_from_slice(&send);
                    ((false, off), (false, 0), false)
                } else {
                    ((true, 0), (false, 0), false)
                }
            }
            CollKind::ReduceScatter => ((true, 0), (true, rank * case.count * es), true),
            CollKind::Scatter if rank == case.root => {
                ((true, 0), (true, case.root * case.count * es), true)
            }
            _ => ((true, 0), (false, 0), false),
        }
    } else {
        ((true, 0), (false, 0), false)
    };
    let dsend = b.plain_alloc(dev, send.len())?;
    let drecv = b.plain_alloc(dev, recv.len())?;
    // SAFETY: both allocations hold the host vectors' sizes.
    unsafe {
        b.copy_to_device(dev, dsend, &send)?;
        b.copy_to_device(dev, drecv, &recv)?;
    }
    let at = |(in_send, off): (bool, usize)| (if in_send { dsend } else { drecv }) + off as u64;
    let args = CollArgs {
        kind: case.kind,
        send: at(s_at),
        recv: at(r_at),
        count: case.count as u64,
        dtype: t,
        op,
        root: case.root as u32,
        layout: (case.kind == CollKind::AllToAllv).then(|| alltoallv_layout(case.count, n, rank)),
    };
    Ok(Prep {
        dev,
        dsend,
        drecv,
        out_off: if out_is_send { r_at.1 } else { 0 },
        args,
        out_is_send,
        send_len: send.len(),
        recv_len: recv.len(),
        want: case.expected(n, rank),
    })
}

/// Compares and frees; returns the number of wrong elements.
fn finish(b: &CudaBackend, p: Prep, case: &Case) -> Result<usize> {
    let mut wrong = 0;
    if let Some(want) = &p.want {
        let (src, len) = if p.out_is_send {
            (p.dsend, p.send_len)
        } else {
            (p.drecv, p.recv_len)
        };
        let mut host = vec![0u8; len];
        // SAFETY: the allocation holds `len` bytes.
        unsafe { b.copy_from_device(p.dev, &mut host, src)? };
        let got = &host[p.out_off..p.out_off + want.len()];
        wrong = count_wrong(case.dtype, case.op, got, want);
    }
    // SAFETY: the operation has completed (its stream was synchronised).
    unsafe {
        b.plain_free(p.dev, p.dsend)?;
        b.plain_free(p.dev, p.drecv)?;
    }
    Ok(wrong)
}

/// Grouped ring shift: every rank sends `count` bytes to the next and receives from the previous.
fn sendrecv_prepare(
    b: &CudaBackend,
    dev: i32,
    rank: usize,
    count: usize,
) -> Result<(DevicePtr, DevicePtr)> {
    let mut send = vec![0u8; count];
    fill_input(DataType::Uint8, None, rank, 0, &mut send);
    let s = b.plain_alloc(dev, count)?;
    let r = b.plain_alloc(dev, count)?;
    // SAFETY: sized above.
    unsafe {
        b.copy_to_device(dev, s, &send)?;
        b.copy_to_device(dev, r, &vec![POISON; count])?;
    }
    Ok((s, r))
}

fn sendrecv_issue(
    comm: &Communicator<CudaBackend>,
    stream: &CudaStream,
    bufs: (DevicePtr, DevicePtr),
    count: usize,
) -> Result<()> {
    let (n, r) = (comm.nranks(), comm.rank());
    // SAFETY: the buffers hold `count` bytes and live until the stream is synchronised.
    unsafe {
        comm.p2p(
            P2pDir::Send,
            bufs.0,
            count as u64,
            DataType::Uint8,
            ((r + 1) % n) as u32,
            stream,
        )?;
        comm.p2p(
            P2pDir::Recv,
            bufs.1,
            count as u64,
            DataType::Uint8,
            ((r + n - 1) % n) as u32,
            stream,
        )?;
    }
    Ok(())
}

fn sendrecv_finish(
    b: &CudaBackend,
    dev: i32,
    n: usize,
    rank: usize,
    bufs: (DevicePtr, DevicePtr),
    count: usize,
) -> Result<usize> {
    let mut want = vec![0u8; count];
    fill_input(DataType::Uint8, None, (rank + n - 1) % n, 0, &mut want);
    let mut got = vec![0u8; count];
    // SAFETY: sized at prepare; the operation completed.
    unsafe {
        b.copy_from_device(dev, &mut got, bufs.1)?;
        b.plain_free(dev, bufs.0)?;
        b.plain_free(dev, bufs.1)?;
    }
    Ok(got.iter().zip(&want).filter(|(a, b)| a != b).count())
}

static PROGRESS: AtomicU64 = AtomicU64::new(0);
static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

static CURRENT: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

/// Notes the step about to run (the watchdog names it on a hang; the log lists every one).
fn step(what: &str) {
    eprintln!("START {what}");
    *CURRENT.lock().unwrap_or_else(|p| p.into_inner()) = what.to_string();
}

fn tick() {
    let now = START.get_or_init(Instant::now).elapsed().as_millis() as u64;
    PROGRESS.store(now, Ordering::Relaxed);
}

/// Exits with 3 when no case finished for 30 s (a hang would otherwise eat the whole run).
fn watchdog(what: String) {
    tick();
    std::thread::spawn(move || {
        loop {
            std::thread::sleep(Duration::from_secs(1));
            let now = START.get_or_init(Instant::now).elapsed().as_millis() as u64;
            if now.saturating_sub(PROGRESS.load(Ordering::Relaxed)) > 30_000 {
                let cur = CURRENT.lock().unwrap_or_else(|p| p.into_inner()).clone();
                println!("HANG {what}: no progress for 30 s; last step: {cur}");
                println!("RESULT pass=0 fail=1 (hang)");
                std::process::exit(3);
            }
        }
    });
}

struct Tally {
    pass: usize,
    fail: usize,
}

impl Tally {
    fn add(&mut self, what: &str, r: Result<usize>) {
        tick();
        match r {
            Ok(0) => self.pass += 1,
            Ok(w) => {
                self.fail += 1;
                println!("FAIL {what}: {w} wrong elements");
            }
            Err(e) => {
                self.fail += 1;
                println!("FAIL {what}: error {e}");
            }
        }
    }
}

// 1 MiB+ sends deadlock for now: build_p2p queues all of a channel's sends before its receives,
// and a send larger than the FIFO (256 KiB) waits for a receive queued behind it.
const P2P_COUNTS: [usize; 4] = [1, 7, 4099, 200_000];

fn run_initall(b: &Arc<CudaBackend>, o: &Opts, ndev: usize) -> Result<Tally> {
    let devs: Vec<i32> = (0..o.ranks).map(|r| (r % ndev) as i32).collect();
    step("initall init");
    let comms = Communicator::init_all(b.clone(), &devs)?;
    let streams: Vec<CudaStream> = devs
        .iter()
        .map(|&d| b.stream_create(d))
        .collect::<Result<_>>()?;
    let mut t = Tally { pass: 0, fail: 0 };
    let n = o.ranks;
    for case in cases(o) {
        step(&format!("initall {case:?}"));
        let preps: Result<Vec<Prep>> = (0..n).map(|r| prepare(b, devs[r], n, r, &case)).collect();
        let preps = preps?;
        group_start()?;
        let mut err = None;
        for r in 0..n {
            // SAFETY: the buffers live until the streams are synchronised below.
            if let Err(e) = unsafe { comms[r].collective(preps[r].args.clone(), &streams[r]) } {
                err = Some(e);
            }
        }
        let ge = group_end();
        for (r, p) in preps.into_iter().enumerate() {
            let res = err
                .clone()
                .map_or(Ok(()), Err)
                .and(ge.clone())
                .and_then(|_| b.stream_synchronize(&streams[r]))
                .and_then(|_| finish(b, p, &case));
            t.add(&format!("initall rank {r} {case:?}"), res);
        }
    }
    for &count in &P2P_COUNTS {
        step(&format!("initall sendrecv {count}"));
        let bufs: Vec<_> = (0..n)
            .map(|r| sendrecv_prepare(b, devs[r], r, count))
            .collect::<Result<_>>()?;
        group_start()?;
        let mut res = Ok(());
        for r in 0..n {
            res = res.and(sendrecv_issue(&comms[r], &streams[r], bufs[r], count));
        }
        res = res.and(group_end());
        for r in 0..n {
            let x = res
                .clone()
                .and_then(|_| b.stream_synchronize(&streams[r]))
                .and_then(|_| sendrecv_finish(b, devs[r], n, r, bufs[r], count));
            t.add(&format!("initall rank {r} sendrecv {count}"), x);
        }
    }
    step("initall destroy");
    for c in comms {
        c.destroy()?;
    }
    Ok(t)
}

fn run_rank(
    b: &Arc<CudaBackend>,
    o: &Opts,
    ndev: usize,
    id: UniqueId,
    rank: usize,
) -> Result<Tally> {
    let dev = (rank % ndev) as i32;
    b.set_device(dev)?;
    let n = o.ranks;
    step(&format!("rank {rank} init"));
    let comm = Communicator::init_rank(b.clone(), n, id, rank, dev, CommConfig::default())?;
    let stream = b.stream_create(dev)?;
    let mut t = Tally { pass: 0, fail: 0 };
    for case in cases(o) {
        step(&format!("rank {rank} {case:?}"));
        let res = prepare(b, dev, n, rank, &case).and_then(|p| {
            // SAFETY: the buffers live until the stream is synchronised.
            let r = unsafe { comm.collective(p.args.clone(), &stream) };
            let r = r.and_then(|_| b.stream_synchronize(&stream));
            let w = finish(b, p, &case);
            r.and(w)
        });
        t.add(&format!("{} rank {rank} {case:?}", o.mode), res);
    }
    for &count in &P2P_COUNTS {
        step(&format!("rank {rank} sendrecv {count}"));
        let res = sendrecv_prepare(b, dev, rank, count).and_then(|bufs| {
            let r = group_start()
                .and_then(|_| sendrecv_issue(&comm, &stream, bufs, count))
                .and(group_end())
                .and_then(|_| b.stream_synchronize(&stream));
            let w = sendrecv_finish(b, dev, n, rank, bufs, count);
            r.and(w)
        });
        t.add(&format!("{} rank {rank} sendrecv {count}", o.mode), res);
    }
    step(&format!("rank {rank} destroy"));
    comm.destroy()?;
    Ok(t)
}

fn main() {
    let o = opts();
    let b = match CudaBackend::load() {
        Ok(b) if b.device_count().unwrap_or(0) > 0 => Arc::new(b),
        Ok(_) => {
            println!("SKIP: no CUDA device");
            std::process::exit(2);
        }
        Err(e) => {
            println!("SKIP: {e}");
            std::process::exit(2);
        }
    };
    let ndev = b.device_count().expect("device count");
    let label = format!(
        "mode={} ranks={} algo={}",
        o.mode,
        o.ranks,
        std::env::var("NCCL_ALGO").unwrap_or_else(|_| "auto".into())
    );
    // The parent of `procs` only waits for its workers, which have their own watchdogs.
    if o.mode != "procs" || o.worker.is_some() {
        watchdog(label.clone());
    }
    let t = if let Some(rank) = o.worker {
        let hex = std::env::var("OXCCL_GPU_CHECK_ID").expect("worker needs OXCCL_GPU_CHECK_ID");
        let bytes: Vec<u8> = (0..hex.len() / 2)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex"))
            .collect();
        let id = UniqueId::from_bytes(&bytes).expect("unique id");
        run_rank(&b, &o, ndev, id, rank)
    } else {
        match o.mode.as_str() {
            "initall" => run_initall(&b, &o, ndev),
            "threads" => {
                let id = UniqueId::generate(&BootstrapOptions::from_env()).expect("unique id");
                let results: Vec<Result<Tally>> = std::thread::scope(|s| {
                    let hs: Vec<_> = (0..o.ranks)
                        .map(|r| {
                            let (b, o) = (&b, &o);
                            s.spawn(move || run_rank(b, o, ndev, id, r))
                        })
                        .collect();
                    hs.into_iter()
                        .map(|h| h.join().expect("rank thread"))
                        .collect()
                });
                let mut t = Tally { pass: 0, fail: 0 };
                for r in results {
                    match r {
                        Ok(x) => {
                            t.pass += x.pass;
                            t.fail += x.fail;
                        }
                        Err(e) => {
                            println!("FAIL rank: {e}");
                            t.fail += 1;
                        }
                    }
                }
                Ok(t)
            }
            "procs" => {
                let id = UniqueId::generate(&BootstrapOptions::from_env()).expect("unique id");
                let hex: String = id.as_bytes().iter().map(|x| format!("{x:02x}")).collect();
                let exe = std::env::current_exe().expect("own path");
                let args: Vec<String> = std::env::args().skip(1).collect();
                let children: Vec<_> = (0..o.ranks)
                    .map(|r| {
                        std::process::Command::new(&exe)
                            .args(&args)
                            .args(["--worker", &r.to_string()])
                            .env("OXCCL_GPU_CHECK_ID", &hex)
                            .stdout(std::process::Stdio::piped())
                            .spawn()
                            .expect("spawn worker")
                    })
                    .collect();
                let mut t = Tally { pass: 0, fail: 0 };
                for (r, c) in children.into_iter().enumerate() {
                    let out = c.wait_with_output().expect("worker");
                    let text = String::from_utf8_lossy(&out.stdout);
                    for line in text.lines() {
                        if let Some(rest) = line.strip_prefix("RESULT pass=") {
                            let mut it = rest.split(" fail=");
                            t.pass += it.next().and_then(|x| x.parse().ok()).unwrap_or(0);
                            t.fail += it
                                .next()
                                .and_then(|x| x.split(' ').next())
                                .and_then(|x| x.parse().ok())
                                .unwrap_or(1);
                        } else {
                            println!("[proc {r}] {line}");
                        }
                    }
                    if !out.status.success() && !text.contains("RESULT") {
                        println!("FAIL proc {r}: exited with {}", out.status);
                        t.fail += 1;
                    }
                }
                Ok(t)
            }
            m => panic!("unknown mode {m}"),
        }
    };
    match t {
        Ok(t) => {
            if o.worker.is_none() {
                println!("RESULT {label} pass={} fail={}", t.pass, t.fail);
            } else {
                println!("RESULT pass={} fail={}", t.pass, t.fail);
            }
            std::process::exit(if t.fail == 0 { 0 } else { 1 });
        }
        Err(e) => {
            println!("FAIL {label}: {e}");
            println!("RESULT {label} pass=0 fail=1");
            std::process::exit(1);
        }
    }
}
