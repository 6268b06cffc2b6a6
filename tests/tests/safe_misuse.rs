//! Misuse of the safe API that compiles, on the host backend (the scenarios of
//! `oxccl_tests::misuse`), in process and under valgrind.

use oxccl_tests::misuse;

#[test]
fn a_forgotten_group_never_runs_and_later_calls_say_why() {
    misuse::a_forgotten_group_never_runs_and_later_calls_say_why();
}

#[test]
fn a_second_start_on_the_thread_is_refused_and_the_first_group_still_runs() {
    misuse::a_second_start_on_the_thread_is_refused_and_the_first_group_still_runs();
}

#[test]
fn nested_groups_launch_at_the_outer_end_in_any_state() {
    misuse::nested_groups_launch_at_the_outer_end_in_any_state();
}

#[test]
fn a_group_dropped_by_an_early_return_runs_its_operations() {
    misuse::a_group_dropped_by_an_early_return_runs_its_operations();
}

#[test]
fn buckets_of_one_flat_buffer_reduce_in_one_group() {
    misuse::buckets_of_one_flat_buffer_reduce_in_one_group();
}

#[test]
fn views_work_in_every_kind_of_operation() {
    misuse::views_work_in_every_kind_of_operation();
}

#[test]
fn ranks_that_disagree_on_counts_get_a_sentence_naming_both() {
    misuse::ranks_that_disagree_on_counts_get_a_sentence_naming_both();
}

#[test]
fn one_rank_is_one_rank() {
    misuse::one_rank_is_one_rank();
}

/// The scenarios under valgrind's memcheck: an invalid access (a group launching on a freed
/// buffer) fails the run even where the scenario's own checks would pass. Without valgrind the
/// test says so and passes, unless `OXCCL_REQUIRE_VALGRIND=1` (CI sets it).
#[test]
fn scenarios_under_valgrind() {
    let Some(valgrind) = oxccl_tests::misuse_memcheck::valgrind() else {
        assert!(
            std::env::var_os("OXCCL_REQUIRE_VALGRIND").is_none(),
            "OXCCL_REQUIRE_VALGRIND is set but valgrind is not installed"
        );
        eprintln!("SKIPPED: valgrind is not installed; the memory-checker run did not happen");
        return;
    };
    let bin = env!("CARGO_BIN_EXE_safe-misuse");
    let canary = oxccl_tests::misuse_memcheck::run(&valgrind, bin, &["canary"]);
    assert!(
        !canary.success,
        "valgrind did not flag the canary's read of freed memory:\n{}",
        canary.log
    );
    let all = oxccl_tests::misuse_memcheck::run(&valgrind, bin, &[]);
    assert!(all.success, "under valgrind:\n{}", all.log);
}
