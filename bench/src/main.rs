//! nccl-tests-style benchmark of any NCCL-ABI library (ours or NVIDIA's), loaded at run time:
//! see the `oxccl_bench` library and `oxccl-bench --help`.

fn main() {
    oxccl_bench::main();
}
