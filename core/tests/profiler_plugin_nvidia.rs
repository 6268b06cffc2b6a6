//! NVIDIA's example profiler (NCCL v2.28.9's `ext-profiler/example`, built unchanged with its
//! Makefile), named by `OXCCL_NV_PROFILER_EXAMPLE`: two host ranks run an AllReduce, and each
//! rank's dump (written at the communicator's finalize) holds it. Without the variable it says
//! it skipped: CI has no copy of NVIDIA's repository.

mod support;

#[test]
fn nvidia_example_profiler_dumps_every_ranks_all_reduce() {
    let Some(lib) = std::env::var_os("OXCCL_NV_PROFILER_EXAMPLE") else {
        eprintln!("SKIPPED: OXCCL_NV_PROFILER_EXAMPLE names no build of NVIDIA's example profiler");
        return;
    };
    let dir = std::env::temp_dir().join(format!("oxccl-nv-profiler-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // SAFETY: this binary's only test: no other thread reads the environment.
    unsafe {
        std::env::set_var("NCCL_PROFILER_PLUGIN", &lib);
        std::env::set_var("NCCL_PROFILE_DUMP_FILE", dir.join("dump"));
        // The example's collective and p2p events are 755 MB and 24 MB each (room for every
        // proxy step); its default pools of 256 need more memory than a CI-sized machine lets
        // one allocation have.
        std::env::set_var("NCCL_PROFILE_COLL_POOL_SIZE", "4");
        // The example asks for the events this names (none without it): Coll.
        std::env::set_var("NCCL_PROFILE_EVENT_MASK", "2");
        std::env::set_var("NCCL_PROFILE_P2P_POOL_SIZE", "4");
    }
    support::all_reduce_on_two_ranks();
    let mut dumps: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(dumps.len(), 2, "one dump per rank");
    dumps.sort();
    for d in &dumps {
        assert!(d.contains("AllReduce"), "{d}");
    }
}
