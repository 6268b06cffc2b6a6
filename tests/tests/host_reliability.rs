//! The watchdog's hang reports and check mode on the host backend, ranks as threads of one
//! process (reliability suite T12 and T13; the SIGSTOP case is in `host_reliability_procs.rs`).

use oxccl_core::comm::oplog::{Settings, hang_report_of};
use oxccl_core::datatype::DataType;
use oxccl_core::host::HostStream;
use oxccl_core::plan::CollKind;
use oxccl_core::{Communicator, ErrorKind, HostBackend};
use oxccl_tests::harness::coll_in_place;
use std::sync::Barrier;
use std::time::{Duration, Instant};

fn settings(watchdog: Option<f64>, abort_on_hang: bool, check: bool) -> Settings {
    Settings {
        watchdog: watchdog.map(Duration::from_secs_f64),
        abort_on_hang,
        check,
    }
}

/// Runs `f(rank, comm, stream)` on `n` thread-ranks with `s` applied after init; returns the
/// results by rank.
fn with_ranks<T: Send>(
    n: usize,
    s: Settings,
    f: impl Fn(usize, &Communicator<HostBackend>, &HostStream) -> T + Sync,
) -> Vec<T> {
    oxccl_tests::harness::on_host_ranks(n, |comm| comm.set_reliability(s.clone()), f)
}

/// T13 (default mode) and T12: a rank that skips the last collective is named, with where it
/// is, by every rank waiting in it, within the configured time; nothing is aborted unless asked.
#[test]
fn watchdog_names_the_rank_that_skipped_a_collective() {
    let n = 4;
    let skipper = 2;
    let done = Barrier::new(n);
    let out = with_ranks(n, settings(Some(1.0), true, false), |rank, comm, stream| {
        let mut buf = vec![1f32; 1024];
        for _ in 0..2 {
            coll_in_place(
                comm,
                stream,
                CollKind::AllReduce,
                &mut buf,
                1024,
                DataType::Float32,
                0,
            )
            .expect("matching allreduce");
        }
        let mut result = None;
        if rank != skipper {
            let t = Instant::now();
            let r = coll_in_place(
                comm,
                stream,
                CollKind::AllReduce,
                &mut buf,
                1024,
                DataType::Float32,
                0,
            );
            let report = comm.hang_report();
            let by_id = hang_report_of(&comm.unique_id(), rank as u32);
            result = Some((r, t.elapsed(), report, by_id));
        }
        // The skipper stays alive (and answers) until the others have their reports.
        done.wait();
        result
    });
    for (rank, r) in out.into_iter().enumerate() {
        let Some((r, took, report, by_id)) = r else {
            continue;
        };
        let e = r.expect_err("the hung collective is aborted (OXCCL_WATCHDOG_ABORT=1)");
        assert_eq!(e.kind(), ErrorKind::Timeout, "rank {rank}: {e}");
        let report = report.expect("a report");
        assert_eq!(Some(&report), by_id.as_ref());
        assert!(
            report.contains(&format!(
                "rank {rank}: AllReduce #2 (count 1024 f32 sum) waiting"
            )),
            "{report}"
        );
        // Every rank aborts after its own report, so a rank slower to report may find one that
        // aborted first: that one is named as gone, never as unreachable.
        let entered: Vec<&str> = report
            .split("; ")
            .find_map(|part| part.strip_suffix(" entered it"))
            .and_then(|part| part.rsplit(": ").next())
            .map(|list| {
                list.trim_start_matches("ranks ")
                    .trim_start_matches("rank ")
            })
            .map(|list| list.split(", ").collect())
            .unwrap_or_default();
        assert!(entered.contains(&rank.to_string().as_str()), "{report}");
        assert!(!report.contains("unreachable"), "{report}");
        assert!(
            report.contains("rank 2 is at #1 (AllReduce, done)"),
            "{report}"
        );
        assert!(e.to_string().contains(&report), "{e}");
        // 1 s limit, 0.2 s look period, one exchange: well under 10 s even under load.
        assert!(took < Duration::from_secs(10), "rank {rank} took {took:?}");
        eprintln!("rank {rank}: reported after {took:?}: {report}");
    }
}

/// Without OXCCL_WATCHDOG_ABORT the report is made and the operation keeps waiting: it
/// completes once the late rank arrives.
#[test]
fn watchdog_reports_without_aborting_and_the_late_rank_completes_it() {
    let n = 3;
    let out = with_ranks(
        n,
        settings(Some(0.5), false, false),
        |rank, comm, stream| {
            let mut buf = vec![(rank + 1) as f32; 64];
            if rank == 1 {
                // Late by more than the limit plus an exchange.
                let t = Instant::now();
                while t.elapsed() < Duration::from_secs(15) {
                    std::thread::sleep(Duration::from_millis(50));
                    if hang_report_of(&comm.unique_id(), 0).is_some()
                        && hang_report_of(&comm.unique_id(), 2).is_some()
                    {
                        break;
                    }
                }
            }
            coll_in_place(
                comm,
                stream,
                CollKind::AllReduce,
                &mut buf,
                64,
                DataType::Float32,
                0,
            )
            .expect("allreduce completes");
            assert!(buf.iter().all(|&x| x == 6.0), "{:?}", &buf[..4]);
            comm.status().expect("no asynchronous error");
            comm.hang_report()
        },
    );
    for rank in [0, 2] {
        let r = out[rank].as_ref().expect("report");
        assert!(r.contains("AllReduce #0 (count 64 f32 sum) waiting"), "{r}");
        assert!(r.contains("rank 1 issued no operation yet"), "{r}");
    }
    assert!(out[1].is_none(), "{:?}", out[1]);
}

/// T13 in check mode: a count, type or root differing on one rank fails the call on every rank
/// with ncclInvalidUsage naming the ranks and values; matching calls afterwards still work.
#[test]
fn check_mode_names_mismatched_count_type_and_root() {
    let n = 3;
    // Per case: operation, each rank's count, type and root, and the sentence expected.
    type Case = (CollKind, [u64; 3], [DataType; 3], [u32; 3], &'static str);
    let cases: [Case; 3] = [
        (
            CollKind::AllReduce,
            [1024, 512, 1024],
            [DataType::Float32; 3],
            [0; 3],
            "ranks 0, 2 called AllReduce #0 (count 1024 f32 sum); rank 1 called AllReduce #0 (count 512 f32 sum)",
        ),
        (
            CollKind::AllReduce,
            [64; 3],
            [DataType::Float32, DataType::Float32, DataType::Int32],
            [0; 3],
            "ranks 0, 1 called AllReduce #1 (count 64 f32 sum); rank 2 called AllReduce #1 (count 64 i32 sum)",
        ),
        (
            CollKind::Broadcast,
            [64; 3],
            [DataType::Float32; 3],
            [0, 1, 0],
            "ranks 0, 2 called Broadcast #2 (count 64 f32, root 0); rank 1 called Broadcast #2 (count 64 f32, root 1)",
        ),
    ];
    let out = with_ranks(n, settings(None, false, true), |rank, comm, stream| {
        let mut errs = Vec::new();
        for (kind, counts, types, roots, _) in &cases {
            let mut buf = vec![1f32; 1024];
            let t = Instant::now();
            let r = coll_in_place(
                comm,
                stream,
                *kind,
                &mut buf,
                counts[rank],
                types[rank],
                roots[rank],
            );
            errs.push((r, t.elapsed()));
        }
        let mut buf = vec![(rank + 1) as f32; 16];
        coll_in_place(
            comm,
            stream,
            CollKind::AllReduce,
            &mut buf,
            16,
            DataType::Float32,
            0,
        )
        .expect("a matching call after the mismatches");
        assert!(buf.iter().all(|&x| x == 6.0));
        errs
    });
    for (rank, errs) in out.into_iter().enumerate() {
        for ((r, took), (_, _, _, _, want)) in errs.into_iter().zip(&cases) {
            let e = r.expect_err("mismatch must fail");
            assert_eq!(e.kind(), ErrorKind::InvalidUsage, "rank {rank}: {e}");
            assert!(e.to_string().contains(want), "rank {rank}: {e}");
            assert!(took < Duration::from_secs(10), "{took:?}");
        }
    }
}
