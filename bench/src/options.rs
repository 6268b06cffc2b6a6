//! Command line of `oxccl-bench`, and the argument list a `--launch procs` worker gets.

use super::ops::{ALL_OPS, op_name};
use oxccl_core::datatype::DataType;
use oxccl_core::plan::CollKind;

/// Where buffers live.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mem {
    /// Host memory: the library's host backend (`OXCCL_BACKEND=host`).
    Host,
    /// GPU memory, one GPU per rank.
    Cuda,
}

/// How ranks are driven.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Launch {
    /// One thread per rank in this process, `ncclCommInitRank` each.
    Threads,
    /// One thread drives every GPU: `ncclCommInitAll`, each iteration's calls in one group.
    InitAll,
    /// One process per rank (this program re-executed with `--worker RANK`).
    Procs,
}

/// How the benchmark's buffers are allocated and registered.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Reg {
    /// `cudaMalloc` (host: aligned host memory), not registered.
    None,
    /// As `None`, then `ncclCommRegister`.
    Register,
    /// `ncclMemAlloc`, then `ncclCommWindowRegister(.., NCCL_WIN_COLL_SYMMETRIC)`.
    Window,
}

impl Mem {
    /// The option's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Mem::Host => "host",
            Mem::Cuda => "cuda",
        }
    }
}

impl Launch {
    /// The option's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Launch::Threads => "threads",
            Launch::InitAll => "initall",
            Launch::Procs => "procs",
        }
    }
}

impl Reg {
    /// The option's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Reg::None => "none",
            Reg::Register => "register",
            Reg::Window => "window",
        }
    }
}

/// Everything the command line says, with defaults resolved.
#[derive(Clone, Debug)]
pub struct Options {
    /// The library measured first ("ours").
    pub lib: String,
    /// A second library measured in the same run ("theirs").
    pub compare: Option<String>,
    /// Ranks actually run (resolved: one per GPU by default in cuda mode).
    pub ranks: usize,
    /// Operations, in order.
    pub ops: Vec<CollKind>,
    /// Smallest message (bytes).
    pub min_bytes: usize,
    /// Largest message (bytes).
    pub max_bytes: usize,
    /// Size multiplier between steps.
    pub factor: usize,
    /// Untimed iterations per size.
    pub warmup: usize,
    /// Timed iterations per size.
    pub iters: usize,
    /// Element type.
    pub dtype: DataType,
    /// Where to write every row as JSON.
    pub json: Option<String>,
    /// Buffer placement.
    pub mem: Mem,
    /// Rank driving.
    pub launch: Launch,
    /// sendbuff == recvbuff (nccl-tests' in-place offsets) where the operation allows it.
    pub inplace: bool,
    /// Capture the timed iterations of each size into a CUDA graph.
    pub graph: bool,
    /// Buffer allocation and registration.
    pub reg: Reg,
    /// Element-wise check of every size.
    pub check: bool,
    /// Hidden: this process is rank `worker` of a `--launch procs` run.
    pub worker: Option<usize>,
}

/// Element types by option spelling (the first of each type is the canonical one).
const DTYPES: [(&str, DataType); 14] = [
    ("float", DataType::Float32),
    ("float32", DataType::Float32),
    ("double", DataType::Float64),
    ("float64", DataType::Float64),
    ("half", DataType::Float16),
    ("float16", DataType::Float16),
    ("bf16", DataType::Bfloat16),
    ("bfloat16", DataType::Bfloat16),
    ("int8", DataType::Int8),
    ("uint8", DataType::Uint8),
    ("int32", DataType::Int32),
    ("uint32", DataType::Uint32),
    ("int64", DataType::Int64),
    ("uint64", DataType::Uint64),
];

/// The canonical option spelling of `t`.
pub fn dtype_arg(t: DataType) -> &'static str {
    DTYPES
        .iter()
        .find(|(_, d)| *d == t)
        .map_or("float", |(n, _)| n)
}

/// The help text.
pub const USAGE: &str = "\
usage: oxccl-bench [options]
  --lib PATH            NCCL-ABI library to measure (default $OXCCL_LIB or dist/lib/libnccl.so.2)
  --compare PATH        a second library, run after the first; prints ours/theirs per size
  -n, --ranks N         ranks (host: default 8; cuda: default and maximum one per GPU)
  --op LIST             all, or a comma list of allreduce,allgather,reducescatter,broadcast,
                        reduce,alltoall,gather,scatter,sendrecv (default allreduce)
  -b SIZE, -e SIZE      smallest and largest message in bytes (K/M/G suffixes; default 8, 64M)
  -f FACTOR             size multiplier per step (default 4)
  -w N, -i N            warmup and timed iterations per size (default 3, 10)
  -d TYPE               float|double|half|bf16|int8|uint8|int32|uint32|int64|uint64 (default float)
  -c 0|1                element-wise check of every size (default 1)
  --mem host|cuda       host memory on the host backend, or GPU memory (default: cuda when a
                        GPU is visible and OXCCL_BACKEND is not host)
  --launch MODE         threads: one thread per rank (host default);
                        initall: one thread drives every GPU through ncclCommInitAll and
                        groups (cuda default); procs: one process per rank
  --inplace             sendbuff == recvbuff (nccl-tests' offsets) where the operation allows it
                        (alltoall and sendrecv stay out of place)
  --graph               capture each size's timed iterations in a CUDA graph and time its launch
  --reg none|register|window
                        cudaMalloc; cudaMalloc + ncclCommRegister; ncclMemAlloc +
                        ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC) (default none)
  --json FILE           write every row of every library as JSON (bench/tools/plot.py plots it)
  -h, --help            this text
Sizes follow nccl-tests: the size is the total message (allgather/alltoall/gather: all ranks'
blocks); busbw uses nccl-tests' factors. Times are the slowest rank's average per iteration.
Environment variables named NCCL_* or OXCCL_* are passed to the libraries and printed.

usage: oxccl-bench net-latency [ROUNDS]
  The host's share of a NET operation's latency on this machine, no GPU and no library: small
  messages through two of oxccl's proxies and its socket network over loopback, the socket
  network alone, and plain loopback TCP; ROUNDS per probe (default 20000).

usage: oxccl-bench api-cost [--lib PATH] [RANKS]
  The host time of ncclCommCount and ncclCommUserRank, per call, with RANKS threads (default 4)
  each asking about its own communicator at once: on GPUs 0.. when there are RANKS, else on the
  host backend. nccl-tests asks both before each Scatter and Gather.

usage: oxccl-bench plan-cost [RANKS]
  The host's share of a GPU launch that needs no GPU, on this CPU: the plan the tuner picks on
  NVLink (rank 0 of RANKS, default 2), its lowering to kernel steps and the argument block, for
  SendRecv, AllReduce and AlltoAll at 8 B-16 MiB. Eager launches pay it on every call.

usage: oxccl-bench tune --column host|pcie|nvlink|net [--apply FILE] [--out DIR] -- [options]
       oxccl-bench tune --column ... --from DIR [--apply FILE]
  Measures the tuner's alternatives with the options above (protocols, algorithms, one-shot
  kernels, zero copy, each forced by its variable in a run of its own) and derives the settings
  of one topology column of the tuner's table (core/src/plan/heuristics.txt; --apply writes
  them there). Raw rows and tune.md go to DIR (default tune-out); --from derives from the rows
  of an earlier run in DIR instead of measuring.";

/// The `tune` subcommand's part of [`USAGE`], printed with its errors.
pub const TUNE_USAGE: &str =
    "usage: oxccl-bench tune --column host|pcie|nvlink|net [--apply FILE] [--out DIR] -- [options]";

/// Parses a byte count with an optional K/M/G/T suffix (binary units), without overflow.
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let t = t.strip_suffix(['B', 'b']).unwrap_or(t);
    let (num, shift) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 30),
        Some('T' | 't') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let v: usize = num.parse().map_err(|_| format!("bad size {s:?}"))?;
    v.checked_mul(1usize << shift)
        .ok_or_else(|| format!("size {s:?} overflows"))
}

/// The sizes of the sweep: min, min*f, ... up to max (never overflows).
pub fn sweep_sizes(min: usize, max: usize, factor: usize) -> Vec<usize> {
    let mut sizes = Vec::new();
    let mut b = min;
    while b <= max {
        sizes.push(b);
        match b.checked_mul(factor) {
            Some(next) if next > b => b = next,
            _ => break,
        }
    }
    sizes
}

/// The command line before defaults that depend on the machine are resolved.
struct Raw {
    o: Options,
    ranks: Option<usize>,
    mem: Option<Mem>,
    launch: Option<Launch>,
}

fn parse_raw(args: &[String]) -> Result<Raw, String> {
    let mut r = Raw {
        o: Options {
            lib: default_lib(),
            compare: None,
            ranks: 0,
            ops: vec![CollKind::AllReduce],
            min_bytes: 8,
            max_bytes: 64 << 20,
            factor: 4,
            warmup: 3,
            iters: 10,
            dtype: DataType::Float32,
            json: None,
            mem: Mem::Host,
            launch: Launch::Threads,
            inplace: false,
            graph: false,
            reg: Reg::None,
            check: true,
            worker: None,
        },
        ranks: None,
        mem: None,
        launch: None,
    };
    let o = &mut r.o;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{a} needs a value"))
        };
        let num = |v: String| -> Result<usize, String> {
            v.parse().map_err(|_| format!("{a}: bad number {v:?}"))
        };
        match a.as_str() {
            "-h" | "--help" => return Err(String::new()),
            "--lib" => o.lib = val()?,
            "--compare" => o.compare = Some(val()?),
            "-n" | "--ranks" => r.ranks = Some(num(val()?)?),
            "--op" => {
                let v = val()?;
                o.ops = if v == "all" {
                    ALL_OPS.to_vec()
                } else {
                    v.split(',')
                        .map(|n| {
                            ALL_OPS
                                .iter()
                                .copied()
                                .find(|k| op_name(*k) == n)
                                .ok_or_else(|| format!("unknown operation {n:?}"))
                        })
                        .collect::<Result<_, _>>()?
                };
            }
            "-b" => o.min_bytes = parse_size(&val()?)?,
            "-e" => o.max_bytes = parse_size(&val()?)?,
            "-f" => o.factor = num(val()?)?,
            "-w" => o.warmup = num(val()?)?,
            "-i" => o.iters = num(val()?)?,
            "-c" => o.check = num(val()?)? != 0,
            "-d" => {
                let v = val()?;
                o.dtype = DTYPES
                    .iter()
                    .find(|(n, _)| *n == v)
                    .map(|(_, t)| *t)
                    .ok_or_else(|| format!("unknown type {v:?}"))?;
            }
            "--json" => o.json = Some(val()?),
            "--mem" => {
                r.mem = Some(match val()?.as_str() {
                    "host" => Mem::Host,
                    "cuda" => Mem::Cuda,
                    v => return Err(format!("--mem {v:?}: host or cuda")),
                })
            }
            "--launch" => {
                r.launch = Some(match val()?.as_str() {
                    "threads" => Launch::Threads,
                    "initall" => Launch::InitAll,
                    "procs" => Launch::Procs,
                    v => return Err(format!("--launch {v:?}: threads, initall or procs")),
                })
            }
            "--inplace" => o.inplace = true,
            "--graph" => o.graph = true,
            "--reg" => {
                o.reg = match val()?.as_str() {
                    "none" => Reg::None,
                    "register" => Reg::Register,
                    "window" => Reg::Window,
                    v => return Err(format!("--reg {v:?}: none, register or window")),
                }
            }
            "--worker" => o.worker = Some(num(val()?)?),
            _ => return Err(format!("unknown argument {a:?}")),
        }
    }
    Ok(r)
}

/// The library measured when `--lib` is not given: `$OXCCL_LIB`, else the installed one.
pub fn default_lib() -> String {
    std::env::var("OXCCL_LIB").unwrap_or_else(|_| "dist/lib/libnccl.so.2".into())
}

/// Parses `args` (without the program name); `gpus` counts the visible GPUs when asked (only
/// when the memory kind is not given and for cuda runs). `Err("")` asks for the help text.
pub fn parse(args: &[String], gpus: impl FnOnce() -> usize) -> Result<Options, String> {
    let Raw {
        mut o,
        ranks,
        mem,
        launch,
    } = parse_raw(args)?;
    if o.factor < 2 {
        return Err("-f must be at least 2".into());
    }
    if o.min_bytes == 0 || o.max_bytes < o.min_bytes {
        return Err("need 0 < -b <= -e".into());
    }
    if o.iters == 0 {
        return Err("-i must be at least 1".into());
    }
    if o.worker.is_some() {
        // A worker gets everything resolved by its parent.
        o.mem = mem.ok_or("--worker needs --mem")?;
        o.launch = Launch::Procs;
        o.ranks = ranks.ok_or("--worker needs -n")?;
        return Ok(o);
    }
    let mut gpus = Some(gpus);
    let mut count = None;
    let mut gpu_count = || *count.get_or_insert_with(|| gpus.take().map_or(0, |f| f()));
    o.mem = match mem {
        Some(m) => m,
        None if std::env::var("OXCCL_BACKEND").as_deref() != Ok("host") && gpu_count() > 0 => {
            Mem::Cuda
        }
        None => Mem::Host,
    };
    o.launch = launch.unwrap_or(match o.mem {
        Mem::Host => Launch::Threads,
        Mem::Cuda => Launch::InitAll,
    });
    match o.mem {
        Mem::Host => {
            if o.launch == Launch::InitAll {
                return Err(
                    "--launch initall needs --mem cuda (host ranks: threads or procs)".into(),
                );
            }
            if o.graph {
                return Err("--graph needs --mem cuda".into());
            }
            o.ranks = ranks.unwrap_or(8);
        }
        Mem::Cuda => {
            let g = gpu_count();
            if g == 0 {
                return Err("--mem cuda: no GPU visible (or no CUDA runtime)".into());
            }
            o.ranks = match ranks {
                // Processes may share a GPU (under MPS, each its own host: OXCCL_TEST_HOSTS);
                // rank r runs on GPU r % GPUs.
                Some(n) if n > g && o.launch == Launch::Procs => {
                    eprintln!("oxccl-bench: {n} ranks on {g} GPUs: rank r runs on GPU r % {g}");
                    n
                }
                Some(n) if n > g => {
                    eprintln!("oxccl-bench: {n} ranks asked for, {g} GPUs visible: running {g}");
                    g
                }
                Some(n) => n,
                None => g,
            };
        }
    }
    if o.ranks == 0 {
        return Err("need at least one rank".into());
    }
    Ok(o)
}

impl Options {
    /// The sizes of the sweep.
    pub fn sizes(&self) -> Vec<usize> {
        sweep_sizes(self.min_bytes, self.max_bytes, self.factor)
    }

    /// The command line of worker `rank` running library `lib` (see [`parse`]).
    pub fn worker_args(&self, lib: &str, rank: usize) -> Vec<String> {
        let ops: Vec<&str> = self.ops.iter().map(|k| op_name(*k)).collect();
        let mut v: Vec<String> = [
            "--worker",
            &rank.to_string(),
            "--lib",
            lib,
            "-n",
            &self.ranks.to_string(),
            "--mem",
            self.mem.name(),
            "--op",
            &ops.join(","),
            "-b",
            &self.min_bytes.to_string(),
            "-e",
            &self.max_bytes.to_string(),
            "-f",
            &self.factor.to_string(),
            "-w",
            &self.warmup.to_string(),
            "-i",
            &self.iters.to_string(),
            "-d",
            dtype_arg(self.dtype),
            "--reg",
            self.reg.name(),
            "-c",
            if self.check { "1" } else { "0" },
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if self.inplace {
            v.push("--inplace".into());
        }
        if self.graph {
            v.push("--graph".into());
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn sizes_parse_and_never_overflow() {
        assert_eq!(parse_size("8").unwrap(), 8);
        assert_eq!(parse_size("1M").unwrap(), 1 << 20);
        assert_eq!(parse_size("8G").unwrap(), 8 << 30);
        assert_eq!(parse_size("8GB").unwrap(), 8 << 30);
        assert!(parse_size("99999999999999T").is_err());
        assert!(parse_size("x").is_err());
        let s = sweep_sizes(8, 8 << 30, 2);
        assert_eq!(s.len(), 31);
        assert_eq!(*s.last().unwrap(), 8 << 30);
        let big = sweep_sizes(usize::MAX / 3, usize::MAX, 4);
        assert_eq!(big, vec![usize::MAX / 3]);
    }

    #[test]
    fn cuda_ranks_are_the_gpus_run() {
        let o = parse(&args("--mem cuda"), || 4).unwrap();
        assert_eq!((o.ranks, o.launch), (4, Launch::InitAll));
        let o = parse(&args("--mem cuda -n 8"), || 2).unwrap();
        assert_eq!(o.ranks, 2);
        let o = parse(&args("--mem cuda -n 1 --launch procs"), || 2).unwrap();
        assert_eq!((o.ranks, o.launch), (1, Launch::Procs));
        assert!(parse(&args("--mem cuda"), || 0).is_err());
        let o = parse(&args("--mem host"), || panic!("no GPU query in host mode")).unwrap();
        assert_eq!((o.ranks, o.launch), (8, Launch::Threads));
        assert!(parse(&args("--mem host --graph"), || 0).is_err());
        assert!(parse(&args("--mem host --launch initall"), || 0).is_err());
    }

    #[test]
    fn worker_args_round_trip() {
        let o = parse(
            &args("--mem host -n 3 --op allgather,sendrecv -b 16 -e 4K -f 2 -w 0 -i 2 -d bf16 --inplace --reg window -c 0 --launch procs"),
            || 0,
        )
        .unwrap();
        let w = parse(&o.worker_args("lib.so", 2), || panic!()).unwrap();
        assert_eq!(w.worker, Some(2));
        assert_eq!(w.lib, "lib.so");
        assert_eq!(
            (w.ranks, w.mem, w.launch, w.reg, w.inplace, w.graph, w.check),
            (3, Mem::Host, Launch::Procs, Reg::Window, true, false, false)
        );
        assert_eq!(w.ops, o.ops);
        assert_eq!(w.sizes(), o.sizes());
        assert_eq!((w.warmup, w.iters, w.dtype), (0, 2, DataType::Bfloat16));
    }
}
