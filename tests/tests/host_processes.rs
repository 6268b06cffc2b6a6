//! Ranks as separate processes on the host backend: the full matrix, and a rank killed in the
//! middle of a collective (survivors get a remote error naming it and abort cleanly).

use oxccl_core::bootstrap::{BootstrapOptions, UniqueId};
use oxccl_tests::harness::id_to_hex;
use oxccl_tests::host_id_for;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn spawn_ranks(scenario: &str, n: usize, env: &[(&str, &str)]) -> Vec<Child> {
    let id = UniqueId::generate(&BootstrapOptions::from_env()).expect("unique id");
    (0..n)
        .map(|rank| {
            let mut c = Command::new(env!("CARGO_BIN_EXE_host-worker"));
            c.args([scenario, &id_to_hex(&id), &n.to_string(), &rank.to_string()])
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit());
            for (k, v) in env {
                c.env(k, v);
                if *k == "OXCCL_TEST_HOSTS" {
                    c.env("NCCL_HOSTID", host_id_for(v, rank, n).expect("host spec"));
                }
            }
            c.spawn().expect("spawn worker")
        })
        .collect()
}

fn matrix(n: usize, counts: &str) {
    matrix_with(n, &[("OXCCL_TEST_COUNTS", counts)]);
}

fn matrix_with(n: usize, env: &[(&str, &str)]) {
    let children = spawn_ranks("matrix", n, env);
    let mut failures = Vec::new();
    for (rank, c) in children.into_iter().enumerate() {
        let out = c.wait_with_output().expect("worker output");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        if !out.status.success() {
            failures.push(format!("rank {rank} exited with {}:\n{text}", out.status));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn matrix_in_processes_2_3_4_ranks() {
    for n in [2, 3, 4] {
        matrix(n, "0,1,7,1000");
    }
}

#[test]
fn matrix_in_processes_8_16_ranks() {
    for n in [8, 16] {
        matrix(n, "0,1,7");
    }
}

/// Ranks on several "hosts" (one `NCCL_HOSTID` each): rings visit them host by host and trees
/// chain each host's ranks below one that joins the tree across hosts. Round robin (rank r on
/// host r % 2) makes the ring order differ from the rank order.
#[test]
fn matrix_across_hosts_rings_and_trees() {
    for (hosts, n) in [("2r", 4), ("3r", 5), ("2", 5)] {
        for algo in ["ring", "tree", "direct"] {
            matrix_with(
                n,
                &[
                    ("OXCCL_TEST_HOSTS", hosts),
                    ("OXCCL_TEST_COUNTS", "1,7,1000"),
                    ("NCCL_ALGO", algo),
                    ("OXCCL_NCHANNELS", "2"),
                    ("OXCCL_CHUNK_BYTES", "256"),
                ],
            );
        }
    }
}

/// Every algorithm and protocol the tuner can pick, forced in turn (NCCL_ALGO / NCCL_PROTO),
/// with several channels and small chunks so pipelines have many steps.
#[test]
fn every_algorithm_and_protocol_forced() {
    for (algo, proto) in [
        ("ring", "Simple"),
        ("ring", "LL"),
        ("tree", "LL128"),
        ("tree", "Simple"),
        ("direct", "LL"),
    ] {
        for n in [3, 4] {
            matrix_with(
                n,
                &[
                    ("OXCCL_TEST_COUNTS", "1,7,1000"),
                    ("NCCL_ALGO", algo),
                    ("NCCL_PROTO", proto),
                    ("OXCCL_NCHANNELS", "2"),
                    ("OXCCL_CHUNK_BYTES", "256"),
                ],
            );
        }
    }
}

/// `NCCL_DEBUG=INFO` with `NCCL_DEBUG_FILE` (`%p` expanded) logs init milestones to a file.
#[test]
fn debug_log_goes_to_nccl_debug_file() {
    let dir = std::env::temp_dir().join(format!("oxccl-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pattern = dir.join("rank.%p.log");
    let pattern = pattern.to_str().unwrap();
    matrix_with(
        2,
        &[
            ("OXCCL_TEST_COUNTS", "1"),
            ("NCCL_DEBUG", "INFO"),
            ("NCCL_DEBUG_FILE", pattern),
        ],
    );
    let logs: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    assert_eq!(logs.len(), 2, "one log per process");
    for l in &logs {
        assert!(
            l.contains("oxccl") && l.contains("ready"),
            "log content: {l}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn killed_rank_gives_remote_error_to_survivors() {
    let n = 3;
    let mut children = spawn_ranks("loop", n, &[]);
    let mut readers: Vec<_> = children
        .iter_mut()
        .map(|c| BufReader::new(c.stdout.take().expect("stdout")))
        .collect();
    for (rank, r) in readers.iter_mut().enumerate() {
        let mut line = String::new();
        r.read_line(&mut line).expect("read");
        assert!(
            line.contains("running"),
            "rank {rank} did not start: {line}"
        );
    }
    let killed_at = Instant::now();
    children[1].kill().expect("kill rank 1");
    children[1].wait().expect("reap rank 1");
    for rank in [0, 2] {
        let status = children[rank].wait().expect("wait survivor");
        let mut rest = String::new();
        for line in (&mut readers[rank]).lines() {
            rest.push_str(&line.expect("line"));
            rest.push('\n');
        }
        assert_eq!(status.code(), Some(4), "rank {rank}: {rest}");
        assert!(rest.contains("Remote"), "rank {rank} error kind: {rest}");
        assert!(
            rest.contains("rank 1"),
            "rank {rank} error must name the dead rank: {rest}"
        );
    }
    assert!(
        killed_at.elapsed() < Duration::from_secs(30),
        "survivors took {:?}",
        killed_at.elapsed()
    );
}
