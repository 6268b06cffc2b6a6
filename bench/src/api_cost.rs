//! `oxccl-bench api-cost [--lib PATH] [RANKS]`: the host time of the two queries programs make
//! around every operation, `ncclCommCount` and `ncclCommUserRank` (nccl-tests asks both before
//! each Scatter and Gather, and its count-0 points time nothing else). RANKS threads (default
//! 4) each ask about their own communicator at once, on GPUs 0.. when the machine has enough,
//! else on our host backend.

use crate::sweep::unique_id;
use oxccl_tests::cudart::Cudart;
use oxccl_tests::nccl_lib::{NcclLib, RawComm};
use std::ffi::c_int;
use std::sync::Barrier;
use std::time::Instant;

/// Query pairs each thread times.
const PAIRS: usize = 1_000_000;

/// Runs the subcommand; the process's exit status.
pub fn main(args: &[String]) -> i32 {
    let mut lib_path = None;
    let mut ranks = 4usize;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match (a.as_str(), a.parse::<usize>()) {
            ("--lib", _) => lib_path = it.next().cloned(),
            (_, Ok(n)) if (1..=64).contains(&n) => ranks = n,
            _ => {
                eprintln!("oxccl-bench api-cost [--lib PATH] [RANKS 1-64]");
                return 2;
            }
        }
    }
    let rt = Cudart::load().ok().filter(|rt| rt.device_count() >= ranks);
    if rt.is_none() && std::env::var_os("OXCCL_BACKEND").is_none() {
        // SAFETY: no other thread exists yet, and no library is loaded.
        unsafe { std::env::set_var("OXCCL_BACKEND", "host") };
    }
    let path = lib_path.unwrap_or_else(crate::options::default_lib);
    let lib = match NcclLib::load(&path) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("oxccl-bench api-cost: {e}");
            return 1;
        }
    };
    let id = match unique_id(&lib) {
        Ok(id) => id,
        Err(e) => {
            eprintln!("oxccl-bench api-cost: {e}");
            return 1;
        }
    };
    let start = Barrier::new(ranks);
    let results: Vec<Result<f64, String>> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..ranks)
            .map(|rank| {
                let (lib, rt, start) = (&lib, rt.as_ref(), &start);
                s.spawn(move || -> Result<f64, String> {
                    if let Some(rt) = rt {
                        rt.set_device(rank)?;
                    }
                    let mut comm: RawComm = std::ptr::null_mut();
                    // SAFETY: valid out-pointer; every rank passes the same id.
                    let init = lib.check("ncclCommInitRank", unsafe {
                        (lib.comm_init_rank)(&mut comm, ranks as c_int, id, rank as c_int)
                    });
                    // A rank whose init failed still meets the others at both barriers.
                    start.wait();
                    let timed = init.map(|()| {
                        let (mut n, mut me) = (0, 0);
                        let t = Instant::now();
                        for _ in 0..PAIRS {
                            // SAFETY: a live communicator and valid out-pointers.
                            unsafe {
                                (lib.comm_count)(comm, &mut n);
                                (lib.comm_user_rank)(comm, &mut me);
                            }
                        }
                        let per_call = t.elapsed().as_secs_f64() * 1e9 / (2 * PAIRS) as f64;
                        (per_call, n, me)
                    });
                    start.wait();
                    let (per_call, n, me) = timed?;
                    // SAFETY: the communicator this thread made, no longer used.
                    unsafe { (lib.comm_destroy)(comm) };
                    if n as usize != ranks || me as usize != rank {
                        return Err(format!("rank {rank}: the queries answered {n} and {me}"));
                    }
                    Ok(per_call)
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().unwrap_or_else(|_| Err("a rank panicked".into())))
            .collect()
    });
    let where_ = if rt.is_some() {
        "GPUs"
    } else {
        "the host backend"
    };
    println!("# {path}, {ranks} ranks on {where_}: ns per ncclCommCount/ncclCommUserRank call");
    let mut status = 0;
    for (rank, r) in results.iter().enumerate() {
        match r {
            Ok(ns) => println!("rank {rank}: {ns:.1}"),
            Err(e) => {
                println!("rank {rank}: {e}");
                status = 1;
            }
        }
    }
    status
}
