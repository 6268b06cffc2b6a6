//! nccl-tests-style benchmark of any NCCL-ABI library (ours or NVIDIA's), loaded at run time:
//! see `oxccl_tests::bench` and `oxccl-bench --help`.

fn main() {
    oxccl_tests::bench::main();
}
