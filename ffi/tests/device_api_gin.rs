//! Device-initiated networking (GIN) through the exported C functions on the host backend,
//! where "device" memory is host memory: this test plays the kernels, posting descriptors the
//! way NVIDIA's 2.28.9 inline device code does (its own encoder, written from the proxy
//! descriptor's published layout, not oxccl's decoder), and checks what lands on the peers.
//! The scenario is `gin_device::three_ranks_put_signal_and_count`; here over oxccl's own
//! messages (no network plugin).

mod gin_device;

use std::time::Duration;

#[test]
fn puts_signals_and_counters_cross_three_ranks_through_the_proxy() {
    // SAFETY: the first thing this test binary does, before any thread reads the environment.
    unsafe {
        std::env::set_var("OXCCL_BACKEND", "host");
        std::env::set_var("NCCL_GIN_NCONTEXTS", "2");
        std::env::set_var("NCCL_GIN_PROXY_QUEUE_SIZE", "4");
    }
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(120));
        eprintln!("HANG: the GIN test did not finish within 120 s");
        std::process::exit(99);
    });
    gin_device::three_ranks_put_signal_and_count();
}
