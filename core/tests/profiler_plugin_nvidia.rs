//! NVIDIA's example profiler (NCCL v2.28.9's `ext-profiler/example`, built unchanged with its
//! Makefile), named by `OXCCL_NV_PROFILER_EXAMPLE`: two host ranks run an AllReduce, then a
//! grouped send and receive each, and each rank's dump (written at the communicator's
//! finalize) holds its operations and their kernel launches. Without the variable it says it
//! skipped: CI has no copy of NVIDIA's repository.

mod support;

#[test]
fn nvidia_example_profiler_dumps_every_ranks_operations() {
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
        // The example asks for the events this names (none without it), read with atoi:
        // Coll, P2p and KernelLaunch (0x806).
        std::env::set_var("NCCL_PROFILE_EVENT_MASK", "2054");
        std::env::set_var("NCCL_PROFILE_P2P_POOL_SIZE", "4");
    }
    support::all_reduce_on_two_ranks();
    support::profiler::grouped_ring(2);
    let dumps: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(dumps.len(), 4, "one dump per rank of each communicator");
    let (colls, p2ps): (Vec<_>, Vec<_>) =
        dumps.iter().partition(|d| d.contains("\"cat\": \"COLL\""));
    assert_eq!((colls.len(), p2ps.len()), (2, 2), "{dumps:?}");
    for d in &colls {
        assert!(
            d.contains("\"name\": \"AllReduce\", \"cat\": \"COLL\""),
            "{d}"
        );
        assert!(d.contains("\"cat\": \"KERNEL_LAUNCH\""), "{d}");
    }
    for d in &p2ps {
        for func in ["Send", "Recv"] {
            assert!(
                d.contains(&format!("\"name\": \"{func}\", \"cat\": \"P2P_API\"")),
                "{d}"
            );
            assert!(
                d.contains(&format!("\"name\": \"{func}\", \"cat\": \"P2P\"")),
                "{d}"
            );
        }
        assert!(d.contains("\"cat\": \"KERNEL_LAUNCH\""), "{d}");
    }
}
