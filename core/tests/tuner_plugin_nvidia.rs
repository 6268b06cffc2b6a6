//! NVIDIA's example tuner plugin (NCCL's `plugins/tuner/example` at v2.30.7, built unchanged
//! with its Makefile; oxccl loads its `ncclTunerPlugin_v6`), named by `OXCCL_NV_TUNER_EXAMPLE`,
//! steering two host ranks through its CSV file. Without the variable it says it skipped: CI
//! has no copy of NVIDIA's repository. The example of NCCL 2.27.5 to 2.29.x (`ext-tuner/example`
//! at v2.28.9) does not do: it indexes the cost table as row pointers, while NCCL's core, and
//! oxccl, pass the address of a contiguous table, so it reads two costs as an address and
//! crashes when a line of its file matches, under NCCL as under oxccl (NVIDIA fixed it in 2.30).

use oxccl_core::datatype::DataType;
use oxccl_core::plan::{Algorithm, CollKind, Protocol};

#[test]
fn nvidia_example_tuner_steers_host_ranks() {
    let Some(lib) = std::env::var_os("OXCCL_NV_TUNER_EXAMPLE") else {
        eprintln!("SKIPPED: OXCCL_NV_TUNER_EXAMPLE names no build of NVIDIA's example tuner");
        return;
    };
    let conf = std::env::temp_dir().join(format!("oxccl-nv-tuner-{}.conf", std::process::id()));
    // AllReduce up to 64 KiB on tree / Simple, above on ring / Simple with 3 channels; its other
    // fields (nodes, ranks, pipelined ops, registered buffers) match anything.
    std::fs::write(
        &conf,
        "allreduce,0,65536,tree,simple,-1,-1,-1,-1,-1\n\
         allreduce,65537,4294967295,ring,simple,3,-1,-1,-1,-1\n",
    )
    .unwrap();
    // SAFETY: this binary's only test: no other thread reads the environment.
    unsafe {
        std::env::set_var("NCCL_TUNER_PLUGIN", &lib);
        std::env::set_var("NCCL_TUNER_CONFIG_FILE", &conf);
    }
    oxccl_core::testing::on_host_ranks(
        2,
        |_| {},
        |_, comm, _| {
            let small = comm
                .tuning(CollKind::AllReduce, 4096, DataType::Float32)
                .unwrap();
            assert_eq!(
                (small.algo, small.proto),
                (Algorithm::Tree, Protocol::Simple)
            );
            let large = comm
                .tuning(CollKind::AllReduce, 1 << 20, DataType::Float32)
                .unwrap();
            assert_eq!(
                (large.algo, large.proto, large.nchannels),
                (Algorithm::Ring, Protocol::Simple, 3)
            );
        },
    );
    let _ = std::fs::remove_file(&conf);
}
