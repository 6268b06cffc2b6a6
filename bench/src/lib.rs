//! `oxccl-bench`: an nccl-tests-style benchmark of any NCCL-ABI library (ours or NVIDIA's),
//! loaded at run time; `--compare LIB` measures a second one in the same invocation.
//!
//! Per operation and size it prints time (us), algbw and busbw (GB/s, nccl-tests' formulas)
//! and #wrong from an element-by-element check against an independent reference. Ranks are
//! threads (`--launch threads`), one thread driving every GPU (`initall`) or processes
//! (`procs`); memory is host memory on the host backend or GPU memory (`--mem`). See
//! [`options::USAGE`]; `bench/tools/plot.py` plots the `--json` file.

mod api_cost;
pub mod check;
pub mod mem;
pub mod ops;
pub mod options;
mod plan_cost;
pub mod procs;
pub mod progress;
pub mod report;
pub mod sweep;
mod tune;

use mem::reg_support;
use options::{Launch, Mem, Options, USAGE};
use oxccl_tests::cudart::Cudart;
use oxccl_tests::nccl_lib::NcclLib;
use progress::Progress;
use report::{LibRun, Outcome};
use std::io::Write;

fn die(msg: &str) -> ! {
    eprintln!("oxccl-bench: {msg}");
    std::process::exit(1)
}

/// Measures one library.
fn run_one(lib: &NcclLib, path: &str, label: &str, o: &Options, rt: Option<&Cudart>) -> Outcome {
    if let Err(m) = reg_support(lib, o.reg) {
        eprintln!("oxccl-bench: {label} ({path}): {m}: skipping it");
        return Outcome::Skipped(m);
    }
    let progress = Progress::new(label, o.ops.len() * o.sizes().len());
    let r = match (o.launch, rt) {
        (Launch::Procs, _) => procs::run_procs(lib, path, o, &progress),
        (Launch::InitAll, Some(rt)) => sweep::run_initall(lib, rt, o, &progress),
        (Launch::InitAll, None) => Err("--launch initall needs --mem cuda".into()),
        (Launch::Threads, rt) => sweep::run_threads(lib, rt, o, label, &progress),
    };
    progress.finish();
    match r {
        Ok(s) => Outcome::Done(s),
        Err(e) => {
            eprintln!("oxccl-bench: {label} ({path}): {e}");
            Outcome::Failed(e)
        }
    }
}

/// The program: parses the command line, runs every library, prints the tables, writes the
/// JSON file; exits 1 when an element was wrong or a library failed.
pub fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("tune") {
        std::process::exit(tune::main(&args[1..]));
    }
    if args.first().map(String::as_str) == Some("api-cost") {
        std::process::exit(api_cost::main(&args[1..]));
    }
    if args.first().map(String::as_str) == Some("plan-cost") {
        std::process::exit(plan_cost::main(&args[1..]));
    }
    if args.first().map(String::as_str) == Some("net-latency") {
        let rounds = match args.get(1).map(|r| r.parse::<usize>()) {
            None => 20_000,
            Some(Ok(r)) if r >= 10 => r,
            Some(_) => die("net-latency ROUNDS: an integer of at least 10"),
        };
        for line in oxccl_net::latency_probe::report(rounds) {
            println!("{line}");
        }
        return;
    }
    let gpus = || Cudart::load().map_or(0, |rt| rt.device_count());
    let o = match options::parse(&args, gpus) {
        Ok(o) => o,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            std::process::exit(0)
        }
        Err(e) => {
            eprintln!("oxccl-bench: {e}\n{USAGE}");
            std::process::exit(2)
        }
    };
    if let Some(rank) = o.worker {
        std::process::exit(procs::worker_main(&o, rank));
    }
    if o.mem == Mem::Host && std::env::var_os("OXCCL_BACKEND").is_none() {
        // SAFETY: no other thread exists yet, and no library is loaded.
        unsafe { std::env::set_var("OXCCL_BACKEND", "host") };
    }
    let rt = match o.mem {
        Mem::Cuda => Some(Cudart::load().unwrap_or_else(|e| die(&e))),
        Mem::Host => None,
    };
    if o.graph && !rt.as_ref().is_some_and(|rt| rt.has_graphs()) {
        die("--graph: this CUDA runtime lacks the graph API");
    }
    let mut paths = vec![("ours", o.lib.clone())];
    if let Some(c) = &o.compare {
        paths.push(("theirs", c.clone()));
    }
    // Libraries stay loaded until the process exits (their threads may outlive communicators).
    let libs: Vec<Result<NcclLib, String>> = paths.iter().map(|(_, p)| NcclLib::load(p)).collect();
    if let Err(e) = &libs[0] {
        die(e);
    }
    let versions: Vec<(&str, &str, i32)> = paths
        .iter()
        .zip(&libs)
        .map(|((l, p), lib)| (*l, p.as_str(), lib.as_ref().map_or(0, |l| l.version())))
        .collect();
    print!("{}", report::header(&o, &versions));
    let _ = std::io::stdout().flush();
    let mut runs = Vec::new();
    for ((label, path), lib) in paths.iter().zip(&libs) {
        let (outcome, p2p_ops, version) = match lib {
            Ok(lib) => (
                run_one(lib, path, label, &o, rt.as_ref()),
                o.ops
                    .iter()
                    .copied()
                    .filter(|k| ops::via_p2p(lib, *k))
                    .collect(),
                lib.version(),
            ),
            Err(e) => (Outcome::Failed(e.clone()), Vec::new(), 0),
        };
        runs.push(LibRun {
            label,
            path: path.clone(),
            version,
            p2p_ops,
            outcome,
        });
    }
    let (text, wrong) = report::tables(&o, &runs);
    print!("{text}");
    println!("{}", report::result_line(&runs));
    let _ = std::io::stdout().flush();
    if let Some(path) = &o.json
        && let Err(e) = std::fs::write(path, report::json(&o, &runs))
    {
        die(&format!("cannot write {path}: {e}"));
    }
    let failed = runs.iter().any(|r| matches!(r.outcome, Outcome::Failed(_)));
    std::process::exit(i32::from(wrong > 0 || failed));
}
