//! One rank of a multi-process reliability test on the host backend (reliability suite T12): joins a
//! communicator through a unique id given in hex, runs AllReduces whose results it checks, and
//! prints the watchdog's hang report as soon as one is made, each line on stdout.
//!
//! Usage: `rel-worker steady <unique-id-hex> <nranks> <rank>`. Rank 0 keeps the loop going until
//! the file named by `OXCCL_TEST_STOP_FILE` exists, or for `OXCCL_TEST_SECONDS` (default 60).

use oxccl_core::backend::Backend;
use oxccl_core::comm::CollArgs;
use oxccl_core::config::CommConfig;
use oxccl_core::datatype::{DataType, RedOp};
use oxccl_core::plan::CollKind;
use oxccl_core::{Communicator, HostBackend};
use oxccl_tests::harness::id_from_hex;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (scenario, id, nranks, rank) = (
        args[1].as_str(),
        id_from_hex(&args[2]),
        args[3].parse::<usize>().expect("nranks"),
        args[4].parse::<usize>().expect("rank"),
    );
    assert_eq!(scenario, "steady", "unknown scenario {scenario}");
    let seconds: f64 = std::env::var("OXCCL_TEST_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60.0);
    let stop_file = std::env::var_os("OXCCL_TEST_STOP_FILE").map(std::path::PathBuf::from);
    let backend = Arc::new(HostBackend::new());
    let comm =
        match Communicator::init_rank(backend.clone(), nranks, id, rank, 0, CommConfig::from_env())
        {
            Ok(c) => c,
            Err(e) => {
                say(&format!("rank {rank}: init failed: {e}"));
                std::process::exit(3);
            }
        };
    // Prints each new report at once, so the test can time detection.
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (comm, stop) = (comm.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut last = None;
            while !stop.load(Ordering::Acquire) {
                let r = comm.hang_report();
                if r.is_some() && r != last {
                    say(&format!(
                        "rank {rank}: report: {}",
                        r.as_deref().unwrap_or("")
                    ));
                    last = r;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    // SAFETY: 0 is the default stream.
    let stream = unsafe { backend.stream_from_raw(0) }.expect("stream");
    let start = Instant::now();
    let len = 1 + 1024;
    let (mut iters, mut wrong) = (0u64, 0usize);
    loop {
        // Element 0 is rank 0's "keep going" vote, so every rank stops after the same call.
        let scale = (iters % 7 + 1) as f32;
        let mut buf = vec![scale * (rank + 1) as f32; len];
        let go_on = start.elapsed().as_secs_f64() < seconds
            && !stop_file.as_ref().is_some_and(|f| f.exists());
        buf[0] = if rank == 0 && go_on { 1.0 } else { 0.0 };
        let p = buf.as_mut_ptr() as u64;
        let args = CollArgs {
            kind: CollKind::AllReduce,
            send: p,
            recv: p,
            count: len as u64,
            dtype: DataType::Float32,
            op: RedOp::Sum,
            root: 0,
            layout: None,
        };
        // SAFETY: `buf` outlives the synchronous host call.
        if let Err(e) = unsafe { comm.collective(args, &stream) } {
            say(&format!("rank {rank}: error after {iters} iterations: {e}"));
            std::process::exit(4);
        }
        let want = scale * (nranks * (nranks + 1) / 2) as f32;
        wrong += buf[1..].iter().filter(|&&x| x != want).count();
        iters += 1;
        if iters == 3 {
            say(&format!("rank {rank}: running"));
        }
        if buf[0] == 0.0 {
            break;
        }
    }
    stop.store(true, Ordering::Release);
    let _ = watcher.join();
    say(&format!(
        "rank {rank}: ok {iters} iterations, {wrong} wrong"
    ));
    comm.destroy().expect("destroy");
    drop(comm);
    std::process::exit(i32::from(wrong != 0));
}
