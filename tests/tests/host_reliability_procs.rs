//! reliability suite T12 with ranks as processes on the host backend: a rank stopped with SIGSTOP is
//! named by the others' watchdog reports, nothing is aborted, and after SIGCONT every result is
//! correct.

use oxccl_core::bootstrap::{BootstrapOptions, UniqueId};
use oxccl_tests::harness::id_to_hex;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(ok.success(), "kill {sig} failed");
}

#[test]
fn sigstopped_rank_is_named_and_results_stay_correct() {
    let n = 3;
    let stopped = 2;
    let dir = std::env::temp_dir().join(format!("oxccl-t12-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let stop_file = dir.join("stop");
    let id = UniqueId::generate(&BootstrapOptions::from_env()).expect("unique id");
    let (tx, rx) = mpsc::channel::<(usize, String, Instant)>();
    let mut children: Vec<Child> = (0..n)
        .map(|rank| {
            Command::new(env!("CARGO_BIN_EXE_rel-worker"))
                .args(["steady", &id_to_hex(&id), &n.to_string(), &rank.to_string()])
                .env("OXCCL_WATCHDOG_SECONDS", "1")
                .env("OXCCL_TEST_STOP_FILE", &stop_file)
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn worker")
        })
        .collect();
    for (rank, c) in children.iter_mut().enumerate() {
        let out = BufReader::new(c.stdout.take().expect("stdout"));
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in out.lines().map_while(|l| l.ok()) {
                let _ = tx.send((rank, line, Instant::now()));
            }
        });
    }
    drop(tx);
    let mut lines: Vec<(usize, String, Instant)> = Vec::new();
    let next = |lines: &mut Vec<(usize, String, Instant)>, what: &str| {
        let (rank, line, at) = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("no output while waiting for {what}; so far: {lines:?}"));
        lines.push((rank, line.clone(), at));
        (rank, line, at)
    };
    let mut running = 0;
    while running < n {
        if next(&mut lines, "running").1.contains("running") {
            running += 1;
        }
    }
    signal(&children[stopped], "-STOP");
    let stopped_at = Instant::now();
    // Continue the rank once both others named it, so the test never races the watchdog.
    let mut named = Vec::new();
    while named.len() < n - 1 {
        let (rank, line, at) = next(&mut lines, "reports");
        if line.contains("report:") {
            assert!(
                line.contains(&format!("rank {stopped} unreachable since")),
                "{line}"
            );
            assert!(line.contains("AllReduce #"), "{line}");
            if !named.iter().any(|(r, _)| *r == rank) {
                eprintln!("{line}");
                named.push((rank, at.duration_since(stopped_at)));
            }
        }
    }
    signal(&children[stopped], "-CONT");
    std::fs::write(&stop_file, b"").unwrap();
    for (rank, c) in children.iter_mut().enumerate() {
        let status = c.wait().expect("wait");
        assert!(
            status.success(),
            "rank {rank} exited with {status}: {lines:?}"
        );
    }
    lines.extend(rx.try_iter());
    for rank in 0..n {
        assert!(
            lines
                .iter()
                .any(|(r, l, _)| *r == rank && l.contains(" 0 wrong")),
            "rank {rank} results: {lines:?}"
        );
    }
    for (rank, took) in &named {
        eprintln!("rank {rank} named the stopped rank {took:?} after SIGSTOP");
        // 1 s limit + up to 3 s waiting for answers + look periods; generous under load.
        assert!(*took < Duration::from_secs(20), "{took:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
