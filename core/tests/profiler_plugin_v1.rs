//! A profiler plugin exporting only `ncclProfiler_v1` (our test profiler built for it): it
//! receives Group, Coll and P2p events in v1's layout. One test: the plugin loads once per
//! process.

mod support;

#[test]
fn v1_plugin_gets_task_events_in_its_layout() {
    support::profiler::legacy_events_reach(1);
    support::profiler::kernel_channel_events(1);
}
