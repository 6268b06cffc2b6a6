//! GIN through the exported C functions on the host backend when the network plugin's GIN
//! plugin is not of the proxy type (oxccl's C test plugin built to report GDAKI): oxccl
//! initializes it, sees the type, and carries GIN over its own messages instead. The scenario
//! is the one of `device_api_gin.rs`; the plugin never receives a put.

mod gin_device;

use gin_device::{RANKS, plugin_counter, three_ranks_put_signal_and_count};

#[test]
fn a_gin_plugin_of_another_type_leaves_gin_to_oxccl_s_messages() {
    let lib = format!(
        "{}/libnccl-net-oxtest-gin-gdaki.so",
        oxccl_net::TEST_NET_PLUGIN_DIR
    );
    gin_device::host_gin_process(Some(&lib));
    three_ranks_put_signal_and_count();
    assert_eq!(
        plugin_counter(&lib, "oxtest_gin_init_count"),
        RANKS as i32,
        "asked once per rank"
    );
    assert_eq!(
        plugin_counter(&lib, "oxtest_gin_put_count"),
        0,
        "and never used"
    );
    assert_eq!(plugin_counter(&lib, "oxtest_gin_open_colls"), 0);
}
