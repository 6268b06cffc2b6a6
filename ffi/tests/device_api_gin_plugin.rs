//! GIN through the exported C functions on the host backend, carried by a GIN plugin: the
//! network plugin `NCCL_NET_PLUGIN` names (oxccl's C test plugin, `OXTEST_GIN`) also exports
//! `ncclGinPlugin_v11` of the proxy type, an in-process plugin that copies between the ranks'
//! memory, so oxccl hands it every descriptor (`iput` / `iputSignal`). The scenario is the one
//! of `device_api_gin.rs`; the plugin's own counters show that it carried every put.

mod gin_device;

use gin_device::{RANKS, plugin_counter, three_ranks_put_signal_and_count};

#[test]
fn a_gin_plugin_of_the_net_plugin_carries_every_put() {
    let lib = format!(
        "{}/libnccl-net-oxtest-gin.so",
        oxccl_net::TEST_NET_PLUGIN_DIR
    );
    gin_device::host_gin_process(Some(&lib));
    three_ranks_put_signal_and_count();
    // Each rank: a put and a signal add to each peer.
    let puts = (2 * RANKS * (RANKS - 1)) as i32;
    assert_eq!(plugin_counter(&lib, "oxtest_gin_put_count"), puts);
    assert_eq!(plugin_counter(&lib, "oxtest_gin_signal_count"), puts);
    // Per rank and context: signals (strongly ordered), inline values, two windows and two
    // device communicators' resource buffers, all host memory.
    assert_eq!(
        plugin_counter(&lib, "oxtest_gin_reg_strong_count"),
        (RANKS * 2) as i32
    );
    assert_eq!(
        plugin_counter(&lib, "oxtest_gin_reg_host_count"),
        (RANKS * 2 * 6) as i32
    );
    assert_eq!(plugin_counter(&lib, "oxtest_gin_reg_cuda_count"), 0);
    assert_eq!(
        plugin_counter(&lib, "oxtest_gin_open_colls"),
        0,
        "closed with the communicators"
    );
    assert_eq!(
        plugin_counter(&lib, "oxtest_gin_finalize_count"),
        plugin_counter(&lib, "oxtest_gin_init_count")
    );
}
