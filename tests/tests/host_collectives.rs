//! Every operation on the host backend, ranks as threads of one process: every type, operator,
//! in and out of place, counts 0, 1, 7 and 1000003, checked element by element.

use oxccl_core::bootstrap::{BootstrapOptions, UniqueId};
use oxccl_core::config::CommConfig;
use oxccl_core::datatype::DataType;
use oxccl_core::plan::CollKind;
use oxccl_core::{Communicator, HostBackend};
use oxccl_tests::suite::{MOVING, REDUCING, full_matrix, run_cases};
use oxccl_tests::{Case, TestOp};
use std::sync::Arc;

/// Runs `cases` on `nranks` thread-ranks; panics listing every failure.
fn run_threads(nranks: usize, cases: impl Fn(usize) -> Vec<Case> + Sync) {
    let backend = Arc::new(HostBackend::new());
    let id = UniqueId::generate(&BootstrapOptions::from_env()).expect("unique id");
    let failed: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..nranks)
            .map(|rank| {
                let backend = backend.clone();
                let cases = &cases;
                s.spawn(move || {
                    let comm = Communicator::init_rank(
                        backend.clone(),
                        nranks,
                        id,
                        rank,
                        0,
                        CommConfig::default(),
                    )
                    .expect("init");
                    let stream = backend.stream_create().expect("stream");
                    let failed = run_cases(&comm, &stream, &cases(rank));
                    comm.destroy().expect("destroy");
                    failed
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("rank thread"))
            .collect()
    });
    assert!(
        failed.is_empty(),
        "{} failures:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

/// The large-count cases: every operation once in float32, every operator of AllReduce.
fn large_cases(nranks: usize, count: usize) -> Vec<Case> {
    let mut v = Vec::new();
    for in_place in [false, true] {
        for kind in REDUCING {
            v.push(Case {
                kind,
                dtype: DataType::Float32,
                op: Some(TestOp::Sum),
                count,
                root: nranks - 1,
                in_place,
            });
        }
        for kind in MOVING {
            if in_place && kind == CollKind::AllToAllv {
                continue;
            }
            v.push(Case {
                kind,
                dtype: DataType::Float32,
                op: None,
                count,
                root: nranks / 2,
                in_place,
            });
        }
    }
    for op in TestOp::ALL {
        for dtype in [DataType::Bfloat16, DataType::Int64, DataType::Float8E4M3] {
            v.push(Case {
                kind: CollKind::AllReduce,
                dtype,
                op: Some(op),
                count,
                root: 0,
                in_place: false,
            });
        }
    }
    v
}

macro_rules! matrix_test {
    ($name:ident, $n:expr) => {
        #[test]
        fn $name() {
            run_threads($n, |_| full_matrix($n, &[0, 1, 7], &DataType::ALL));
        }
    };
}

matrix_test!(matrix_1_rank, 1);
matrix_test!(matrix_2_ranks, 2);
matrix_test!(matrix_3_ranks, 3);
matrix_test!(matrix_4_ranks, 4);
matrix_test!(matrix_8_ranks, 8);
matrix_test!(matrix_16_ranks, 16);

#[test]
fn mid_counts_every_type_4_ranks() {
    run_threads(4, |_| full_matrix(4, &[1000], &DataType::ALL));
}

#[test]
fn count_1000003_on_1_2_3_4_ranks() {
    for n in [1, 2, 3, 4] {
        run_threads(n, |_| large_cases(n, 1_000_003));
    }
}

#[test]
fn count_1000003_on_8_and_16_ranks() {
    for n in [8, 16] {
        run_threads(n, |_| {
            large_cases(n, 1_000_003)
                .into_iter()
                .filter(|c| {
                    c.kind == CollKind::AllReduce && c.dtype == DataType::Float32
                        || c.op.is_none() && !c.in_place
                })
                .collect()
        });
    }
}

/// The full type x operator x operation matrix at 1000003 elements, on 2 and 3 ranks.
#[test]
fn count_1000003_every_type_and_op_on_2_and_3_ranks() {
    for n in [2, 3] {
        run_threads(n, |_| full_matrix(n, &[1_000_003], &DataType::ALL));
    }
}

/// Zero-copy AlltoAll on host ranks with every rank in place, none, and some: each pair of
/// ranks swaps its blocks element by element, reading both before writing either, so a rank in
/// place must lose nothing whatever its peers do.
#[test]
fn all_to_all_zero_copy_in_place_on_some_ranks() {
    // The tuner reads OXCCL_ZERO_COPY once per communicator from the environment: run this test
    // again in a process of its own with it set.
    if std::env::var_os("OXCCL_ZERO_COPY").is_none() {
        let status = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args(["all_to_all_zero_copy_in_place_on_some_ranks", "--exact"])
            .env("OXCCL_ZERO_COPY", "1")
            .status()
            .expect("run the test binary");
        assert!(status.success(), "{status}");
        return;
    }
    for n in [2, 3] {
        run_threads(n, |rank| {
            [(false, false), (true, true), (true, false), (false, true)]
                .into_iter()
                .map(|(first, rest)| Case {
                    kind: CollKind::AllToAll,
                    dtype: DataType::Float32,
                    op: None,
                    count: 2_000_003,
                    root: 0,
                    in_place: if rank == 0 { first } else { rest },
                })
                .collect()
        });
    }
}
