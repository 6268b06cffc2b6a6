//! reliability suite T7 through the exported C functions, on the host backend: a process that exits
//! without destroying its communicators (idle, or with a thread blocked in a collective) ends at
//! once, and a process that forks after init has a child that does not hang.
//!
//! Each case runs in a child process of this test binary (`--exact <case>`), so that it is alone
//! in its process: exit ends the whole process, and fork copies only the calling thread, so no
//! other test may hold a lock at that moment.

use oxccl_ffi::abi::ncclResult_t as R;
use oxccl_ffi::abi::{Stream, ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclUniqueId};
use oxccl_ffi::api::*;
use std::ffi::{CStr, c_int};
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD: &str = "OXCCL_T7_CHILD";
const FLOAT32: ncclDataType_t = ncclDataType_t(7);
const SUM: ncclRedOp_t = ncclRedOp_t(0);
const NO_STREAM: Stream = Stream(std::ptr::null_mut());

fn is_child() -> bool {
    std::env::var_os(CHILD).is_some()
}

fn last_error() -> String {
    // SAFETY: ncclGetLastError returns a NUL-terminated string that outlives this copy.
    unsafe { CStr::from_ptr(ncclGetLastError(ncclComm_t::NULL)) }
        .to_string_lossy()
        .into_owned()
}

fn unique_id() -> ncclUniqueId {
    let mut id = ncclUniqueId { internal: [0; 128] };
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { ncclGetUniqueId(&mut id) }, R::SUCCESS);
    id
}

fn init(nranks: c_int, id: ncclUniqueId, rank: c_int) -> ncclComm_t {
    let mut c = ncclComm_t::NULL;
    // SAFETY: a valid out-pointer.
    let r = unsafe { ncclCommInitRank(&mut c, nranks, id, rank) };
    assert_eq!(r, R::SUCCESS, "init {rank}/{nranks}: {}", last_error());
    c
}

/// A sum AllReduce of `rank`-dependent inputs; the number of wrong elements, or the error.
fn all_reduce(c: ncclComm_t, nranks: usize, rank: usize) -> Result<usize, (R, String)> {
    let count = 1000;
    let send: Vec<f32> = (0..count).map(|i| (rank * 100_000 + i) as f32).collect();
    let mut recv = vec![f32::NAN; count];
    // SAFETY: buffers of `count` floats; the host backend completes before returning.
    let r = unsafe {
        ncclAllReduce(
            send.as_ptr().cast(),
            recv.as_mut_ptr().cast(),
            count,
            FLOAT32,
            SUM,
            c,
            NO_STREAM,
        )
    };
    if r != R::SUCCESS {
        return Err((r, last_error()));
    }
    Ok(recv
        .iter()
        .enumerate()
        .filter(|&(i, &x)| x != (0..nranks).map(|q| (q * 100_000 + i) as f32).sum::<f32>())
        .count())
}

/// Runs `case` of this binary in a child with the host backend; returns its stdout lines with
/// the time each arrived, its exit status, its stderr, and the time from the line `mark` to exit.
struct Run {
    lines: Vec<String>,
    status: std::process::ExitStatus,
    stderr: String,
    after_mark: Option<Duration>,
}

fn run_child(case: &str, mark: &str, limit: Duration) -> Run {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", case, "--nocapture", "--test-threads=1", "-q"])
        .env(CHILD, "1")
        .env("OXCCL_BACKEND", "host")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the test binary");
    let out = BufReader::new(child.stdout.take().unwrap());
    let mut err = child.stderr.take().unwrap();
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in out.lines().map_while(|l| l.ok()) {
            let _ = tx.send((l, Instant::now()));
        }
    });
    let start = Instant::now();
    let mut lines = Vec::new();
    let mut marked: Option<Instant> = None;
    let status = loop {
        while let Ok((l, at)) = rx.try_recv() {
            if l.contains(mark) && marked.is_none() {
                marked = Some(at);
            }
            lines.push(l);
        }
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let s = child.wait().unwrap();
            panic!("{case}: still running after {limit:?} (killed, {s}); output so far: {lines:?}");
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let ended = Instant::now();
    // Lines still in flight after exit.
    std::thread::sleep(Duration::from_millis(50));
    for (l, at) in rx.try_iter() {
        if l.contains(mark) && marked.is_none() {
            marked = Some(at);
        }
        lines.push(l);
    }
    Run {
        lines,
        status,
        stderr: err_reader.join().unwrap(),
        after_mark: marked.map(|m| ended.saturating_duration_since(m)),
    }
}

/// T7: exit(0) with live communicators (one rank, and two thread-ranks both idle) ends the
/// process at once with status 0.
#[test]
fn exit_without_destroy_ends_promptly() {
    if is_child() {
        return;
    }
    let r = run_child("child_exit_idle", "exiting", Duration::from_secs(60));
    let took = r.after_mark.expect("the child never reached exit");
    eprintln!(
        "exit with 3 live communicators (1 + 2 ranks): process gone {took:?} after exit(0), {}",
        r.status
    );
    assert!(
        r.status.success(),
        "{}: {:?}\n{}",
        r.status,
        r.lines,
        r.stderr
    );
    assert!(r.lines.iter().any(|l| l == "0 wrong"), "{:?}", r.lines);
    assert!(took < Duration::from_secs(2), "exit took {took:?}");
}

#[test]
fn child_exit_idle() {
    if !is_child() {
        return;
    }
    let solo = init(1, unique_id(), 0);
    let id = unique_id();
    let pair: Vec<ncclComm_t> = std::thread::scope(|s| {
        let h: Vec<_> = (0..2)
            .map(|rank| s.spawn(move || init(2, id, rank).0 as usize))
            .collect();
        h.into_iter()
            .map(|h| ncclComm_t(h.join().unwrap() as *mut _))
            .collect()
    });
    let mut wrong = all_reduce(solo, 1, 0).unwrap();
    let w: usize = std::thread::scope(|s| {
        let h: Vec<_> = pair
            .iter()
            .enumerate()
            .map(|(rank, &c)| {
                let c = c.0 as usize;
                s.spawn(move || all_reduce(ncclComm_t(c as *mut _), 2, rank).unwrap())
            })
            .collect();
        h.into_iter().map(|h| h.join().unwrap()).sum()
    });
    wrong += w;
    println!("{wrong} wrong");
    println!("exiting");
    std::process::exit(0);
}

/// T7: exit(0) while another thread is blocked in an AllReduce that its peer never joins ends
/// the process at once.
#[test]
fn exit_with_a_thread_blocked_in_a_collective_ends_promptly() {
    if is_child() {
        return;
    }
    let r = run_child("child_exit_blocked", "exiting", Duration::from_secs(60));
    let took = r.after_mark.expect("the child never reached exit");
    eprintln!(
        "exit with a thread blocked in AllReduce: process gone {took:?} after exit(0), {}",
        r.status
    );
    assert!(
        r.status.success(),
        "{}: {:?}\n{}",
        r.status,
        r.lines,
        r.stderr
    );
    assert!(took < Duration::from_secs(2), "exit took {took:?}");
}

#[test]
fn child_exit_blocked() {
    if !is_child() {
        return;
    }
    let id = unique_id();
    let comms: Vec<usize> = std::thread::scope(|s| {
        let h: Vec<_> = (0..2)
            .map(|rank| s.spawn(move || init(2, id, rank).0 as usize))
            .collect();
        h.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let c0 = comms[0];
    std::thread::spawn(move || {
        // Rank 1 never calls it: this blocks until the process ends.
        let r = all_reduce(ncclComm_t(c0 as *mut _), 2, 0);
        println!("the blocked AllReduce returned: {r:?}");
    });
    std::thread::sleep(Duration::from_millis(200));
    println!("exiting");
    std::process::exit(0);
}

/// What the forked child reports, one line per step, parsed by the parent test.
fn say(s: &str) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{s}");
    let _ = o.flush();
}

/// T7: fork after init. The child (only the forking thread survives) must not hang: every call
/// into the library returns (checked by a 10 s alarm in the child), and the inherited one-rank
/// communicator and a new communicator made in the child compute right results. What each call
/// returned is printed (see docs/reliability.md T7).
#[test]
fn fork_after_init_child_does_not_hang() {
    if is_child() {
        return;
    }
    let r = run_child("child_fork", "parent done", Duration::from_secs(60));
    for l in &r.lines {
        eprintln!("  {l}");
    }
    assert!(
        r.status.success(),
        "{}: {:?}\n{}",
        r.status,
        r.lines,
        r.stderr
    );
    let has = |s: &str| r.lines.iter().any(|l| l.contains(s));
    assert!(
        has("child exit status 0"),
        "the forked child failed or hung: {:?}",
        r.lines
    );
    assert!(
        has("child: ncclCommCount on the inherited 1-rank comm: ncclResult_t(5)"),
        "{:?}",
        r.lines
    );
    assert!(
        has("child: inherited 1-rank AllReduce: Err(ncclResult_t(5))"),
        "{:?}",
        r.lines
    );
    assert!(
        has("child: inherited 2-rank comm, rank 0 alone: Err((ncclResult_t(5)"),
        "{:?}",
        r.lines
    );
    assert!(
        has("child: abort of that comm: ncclResult_t(0)"),
        "{:?}",
        r.lines
    );
    assert!(has("child: new 1-rank AllReduce: Ok(0)"), "{:?}", r.lines);
    assert!(
        has("child: new 2-rank AllReduce: [Ok(0), Ok(0)]"),
        "{:?}",
        r.lines
    );
    assert!(
        has("parent after fork: 2-rank AllReduce: [Ok(0), Ok(0)]"),
        "{:?}",
        r.lines
    );
}

#[test]
fn child_fork() {
    if !is_child() {
        return;
    }
    let solo = init(1, unique_id(), 0);
    let id = unique_id();
    let pair: Vec<usize> = std::thread::scope(|s| {
        let h: Vec<_> = (0..2)
            .map(|rank| s.spawn(move || init(2, id, rank).0 as usize))
            .collect();
        h.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let both = |pair: &[usize]| -> Vec<Result<usize, (R, String)>> {
        std::thread::scope(|s| {
            let h: Vec<_> = pair
                .iter()
                .enumerate()
                .map(|(rank, &c)| s.spawn(move || all_reduce(ncclComm_t(c as *mut _), 2, rank)))
                .collect();
            h.into_iter().map(|h| h.join().unwrap()).collect()
        })
    };
    say(&format!(
        "parent before fork: 2-rank AllReduce: {:?}",
        both(&pair)
    ));
    // SAFETY: fork in a process where this is the only thread that calls into the library
    // (the test harness runs this case alone); the child only uses what it needs.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // The child: one thread. End with status 3 if any call hangs.
        // SAFETY: alarm only arms a signal whose default action ends the process.
        unsafe { libc::alarm(10) };
        let mut v: c_int = -1;
        // SAFETY: a handle inherited from the parent and a valid out-pointer.
        let r = unsafe { ncclCommCount(solo, &mut v) };
        say(&format!(
            "child: ncclCommCount on the inherited 1-rank comm: {r:?}, count {v}"
        ));
        say(&format!(
            "child: inherited 1-rank AllReduce: {:?}",
            all_reduce(solo, 1, 0).map_err(|e| e.0)
        ));
        // The inherited 2-rank communicator: its rank-1 thread did not survive the fork, and its
        // connections are shared with the parent; this call must return (error or not), never
        // block. Only rank 0's side is called.
        let t = Instant::now();
        let (tx, rx) = std::sync::mpsc::channel();
        let c0 = pair[0];
        std::thread::spawn(move || {
            let _ = tx.send(all_reduce(ncclComm_t(c0 as *mut _), 2, 0));
        });
        match rx.recv_timeout(Duration::from_secs(3)) {
            Ok(r) => say(&format!(
                "child: inherited 2-rank comm, rank 0 alone: {r:?} after {:?}",
                t.elapsed()
            )),
            Err(_) => say(
                "child: inherited 2-rank comm, rank 0 alone: still waiting after 3 s (its peer is in the parent; abort releases it)",
            ),
        }
        // SAFETY: a handle inherited from the parent.
        let a = unsafe { ncclCommAbort(ncclComm_t(c0 as *mut _)) };
        say(&format!("child: abort of that comm: {a:?}"));
        let fresh = init(1, unique_id(), 0);
        say(&format!(
            "child: new 1-rank AllReduce: {:?}",
            all_reduce(fresh, 1, 0).map_err(|e| e.0)
        ));
        let id = unique_id();
        let newpair: Vec<usize> = std::thread::scope(|s| {
            let h: Vec<_> = (0..2)
                .map(|rank| s.spawn(move || init(2, id, rank).0 as usize))
                .collect();
            h.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let rs: Vec<_> = both(&newpair)
            .into_iter()
            .map(|r| r.map_err(|e| e.0))
            .collect();
        say(&format!("child: new 2-rank AllReduce: {rs:?}"));
        // SAFETY: handles of this process, not used afterwards.
        unsafe {
            say(&format!(
                "child: destroy inherited and new comms: {:?} {:?} {:?} {:?}",
                ncclCommDestroy(solo),
                ncclCommDestroy(fresh),
                ncclCommDestroy(ncclComm_t(newpair[0] as *mut _)),
                ncclCommDestroy(ncclComm_t(newpair[1] as *mut _)),
            ));
        }
        say("child: done");
        // SAFETY: ends the child without running the parent's test-harness teardown.
        unsafe { libc::_exit(0) };
    }
    // The parent: its communicators still work while and after the child runs.
    let mut status: c_int = 0;
    let t = Instant::now();
    // SAFETY: waits for our own child.
    let w = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(w, pid);
    let code = if libc::WIFEXITED(status) {
        format!("exit status {}", libc::WEXITSTATUS(status))
    } else {
        format!("killed by signal {}", libc::WTERMSIG(status))
    };
    say(&format!("child {code} after {:?}", t.elapsed()));
    say(&format!(
        "parent after fork: 2-rank AllReduce: {:?}",
        both(&pair)
    ));
    say(&format!(
        "parent after fork: 1-rank AllReduce: {:?}",
        all_reduce(solo, 1, 0)
    ));
    say("parent done");
}
