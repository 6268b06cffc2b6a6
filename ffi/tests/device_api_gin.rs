//! Device-initiated networking (GIN) through the exported C functions on the host backend,
//! where "device" memory is host memory: this test plays the kernels, posting descriptors the
//! way NVIDIA's 2.28.9 inline device code does (its own encoder, written from the proxy
//! descriptor's published layout, not oxccl's decoder), and checks what lands on the peers.
//! The scenario is `gin_device::three_ranks_put_signal_and_count`; here over oxccl's own
//! messages (no network plugin).

mod gin_device;

#[test]
fn puts_signals_and_counters_cross_three_ranks_through_the_proxy() {
    gin_device::host_gin_process(None);
    gin_device::three_ranks_put_signal_and_count();
}
