//! NVIDIA's Inspector profiler (NCCL v2.30.7's `plugins/profiler/inspector`, built unchanged
//! with its Makefile; `scripts/nv-inspector.sh` builds it), named by
//! `OXCCL_NV_PROFILER_INSPECTOR`: two host ranks run an AllReduce, and the Inspector's
//! performance JSON has each rank's AllReduce with its execution time, which it computes from
//! the KernelCh events' timers. Without the variable it says it skipped: CI has no copy of
//! NVIDIA's repository.
//!
//! The Inspector asks CUDA which device and UUID a communicator has, so the CUDA stand-ins of
//! `tests/c/cuda_stub/` are loaded first, where its references to CUDA's runtime and driver
//! then resolve (no GPU on the host backend's machines).

mod support;

use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
use std::time::Duration;

#[test]
fn nvidia_inspector_writes_every_ranks_all_reduce() {
    let Some(lib) = std::env::var_os("OXCCL_NV_PROFILER_INSPECTOR") else {
        eprintln!("SKIPPED: OXCCL_NV_PROFILER_INSPECTOR names no build of NVIDIA's Inspector");
        return;
    };
    for stub in ["libcudart.so.12", "libcudart.so.13", "libcuda.so"] {
        let path = format!("{}/cuda_stub/{stub}", env!("OXCCL_TEST_PLUGIN_DIR"));
        // SAFETY: our stand-ins run no code when loaded; they stay loaded for the process, so
        // the plugin's CUDA references resolve to them by soname.
        let stub = unsafe { Library::open(Some(&path), RTLD_NOW | RTLD_GLOBAL) }.unwrap();
        std::mem::forget(stub);
    }
    let dir = std::env::temp_dir().join(format!("oxccl-nv-inspector-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // SAFETY: this binary's only test: no other thread reads the environment.
    unsafe {
        std::env::set_var("NCCL_PROFILER_PLUGIN", &lib);
        std::env::set_var("NCCL_INSPECTOR_ENABLE", "1");
        std::env::set_var("NCCL_INSPECTOR_DUMP_DIR", &dir);
        // Its dump thread writes what completed every 500 us (its README's example); a
        // communicator destroyed before the thread ran leaves nothing.
        std::env::set_var("NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS", "500");
        // 4000 bytes: below its default floor of 8 KiB.
        std::env::set_var("NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES", "0");
    }
    oxccl_core::testing::on_host_ranks(
        2,
        |_| {},
        |rank, comm, stream| {
            support::all_reduce(rank, comm, stream);
            std::thread::sleep(Duration::from_millis(200));
        },
    );
    let text: String = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    // One JSON object a line (compact), per rank and dump.
    for rank in 0..2 {
        let record = text
            .lines()
            .find(|r| r.contains(&format!("\"rank\":{rank},")))
            .unwrap_or_else(|| panic!("no record of rank {rank}: {text}"));
        for want in [
            "\"n_ranks\":2,",
            "\"coll\":\"AllReduce\"",
            "\"coll_sn\":0,",
            "\"coll_msg_size_bytes\":4000,",
            // Times from the KernelCh events' timers (its other source is its own CPU clock).
            "\"coll_timing_source\":\"kernel_gpu\"",
        ] {
            assert!(record.contains(want), "{want} not in {record}");
        }
        let time = record
            .split("\"coll_exec_time_us\":")
            .nth(1)
            .and_then(|t| t.split(',').next())
            .and_then(|t| t.parse::<u64>().ok());
        assert!(time.is_some_and(|t| t < 10_000_000), "{record}");
    }
}
