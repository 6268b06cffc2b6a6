//! A profiler plugin exporting only `ncclProfiler_v2` (our test profiler built for it): it
//! receives Group, Coll and P2p events in v2's layout. One test: the plugin loads once per
//! process.

mod support;

#[test]
fn v2_plugin_gets_task_events_in_its_layout() {
    support::profiler::legacy_events_reach(2);
    support::profiler::kernel_channel_events(2);
}
