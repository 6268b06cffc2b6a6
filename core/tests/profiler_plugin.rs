//! The profiler plugin (`NCCL_PROFILER_PLUGIN`, ABI v5) on host ranks, with our test profiler
//! (`tests/c/profiler_plugin/`), which logs every call. One test: the plugin loads once per
//! process and reads its settings from the environment.

mod support;

use support::all_reduce_on_two_ranks;
use support::profiler::{Log, bits, grouped_ring, ptr, ring_count, use_plugin};

#[test]
fn events_reach_the_profiler_with_their_parents() {
    use_plugin("libnccl-profiler-oxtest.so");
    collective_events();
    p2p_events();
    mask_filters_events();
    kernel_channels();
}

/// KernelCh events (asked for alone): one per channel under each task event, with their times,
/// and the events above them that NCCL raises for them; no kernel-launch events.
fn kernel_channels() {
    support::profiler::kernel_channel_events(5);
    let log = Log::of(bits::KERNEL_CH, || {
        all_reduce_on_two_ranks();
    });
    assert_eq!(
        log.kinds(),
        ["Coll", "CollApi", "Group", "GroupApi", "KernelCh"],
        "{}",
        log.text
    );
    // With every other event too: the task event still starts before the kernel launch.
    let log = Log::of(bits::ALL | bits::KERNEL_CH, || {
        all_reduce_on_two_ranks();
    });
    log.all_stopped();
    for rank in 0..2 {
        let (group, coll) = (log.one("Group", rank), log.one("Coll", rank));
        let launch = log.one("KernelLaunch", rank);
        assert!(
            group.line < coll.line && coll.line < launch.line,
            "{}",
            log.text
        );
        assert!(log.stop_line(coll) < log.stop_line(group));
        let nch: u32 = coll.get("nch").parse().unwrap();
        assert_eq!(
            log.kernel_channels_of(coll, 5),
            (0..nch).collect::<Vec<_>>()
        );
    }
    // Ask for everything but them: none.
    let log = Log::of(bits::ALL, || {
        all_reduce_on_two_ranks();
    });
    assert!(log.none_of("KernelCh"), "{}", log.text);
}

/// An AllReduce outside a group: GroupApi (its own), CollApi under it, a Group event, Coll under
/// the CollApi event naming the Group event, KernelLaunch under the GroupApi event.
fn collective_events() {
    let mut bufs = Vec::new();
    let log = Log::of(bits::ALL, || bufs = all_reduce_on_two_ranks());
    assert_eq!(
        log.kinds(),
        ["Coll", "CollApi", "Group", "GroupApi", "KernelLaunch"],
        "{}",
        log.text
    );
    log.all_stopped();
    assert_eq!(log.text.matches("init rank=").count(), 2, "{}", log.text);
    for (rank, b) in bufs.iter().enumerate() {
        let group_api = log.one("GroupApi", rank);
        assert_eq!(group_api.get("parent"), "0");
        // The call's own group, as NCCL counts it.
        assert_eq!(group_api.get("depth"), "1");
        // NCCL's two GroupApi states: the group start over, then its end called.
        assert_eq!(log.states_of(group_api), [23, 24]);
        assert_eq!(group_api.get("captured"), "0");
        let api = log.one("CollApi", rank);
        assert_eq!(api.get("parent"), group_api.id);
        assert_eq!(api.get("func"), "AllReduce");
        assert_eq!(api.get("count"), "1000");
        assert_eq!(api.get("dtype"), "ncclFloat32");
        assert_eq!(api.get("root"), "0");
        assert_eq!(api.get("captured"), "0");
        assert_ne!(api.get("stream"), "(nil)");
        let group = log.one("Group", rank);
        assert_eq!(group.get("parent"), "0");
        let coll = log.one("Coll", rank);
        assert_eq!(coll.get("parent"), api.id);
        assert_eq!(coll.get("group"), group.id);
        assert_eq!(coll.get("func"), "AllReduce");
        assert_eq!(coll.get("count"), "1000");
        assert_eq!(coll.get("dtype"), "ncclFloat32");
        assert_eq!(coll.get("seq"), "0");
        assert_eq!(coll.get("send"), ptr(b.send));
        assert_eq!(coll.get("recv"), ptr(b.recv));
        assert_eq!(coll.get("root"), "0");
        assert_eq!(coll.get("nwarps"), "16");
        assert_ne!(coll.get("nch"), "0");
        assert!(["RING", "TREE", "Direct"].contains(&coll.get("algo")));
        assert!(["LL", "LL128", "SIMPLE"].contains(&coll.get("proto")));
        let launch = log.one("KernelLaunch", rank);
        assert_eq!(launch.get("parent"), group_api.id);
        assert_eq!(launch.get("stream"), api.get("stream"));
        // The API event stops when the call returns; the launch's events once it completed.
        assert!(log.stop_line(api) < group.line);
        assert!(group.line < coll.line && coll.line < launch.line);
        assert!(log.stop_line(launch) < log.stop_line(coll));
        assert!(log.stop_line(coll) < log.stop_line(group));
        assert!(log.stop_line(group) < log.stop_line(group_api));
    }
}

/// A grouped ring on three ranks: one GroupApi event per rank's group, a P2pApi event per call
/// under it, one Group event for the launch of both, a P2p event under each P2pApi event.
fn p2p_events() {
    let mut bufs = Vec::new();
    let log = Log::of(bits::ALL, || bufs = grouped_ring(3));
    assert_eq!(
        log.kinds(),
        ["Group", "GroupApi", "KernelLaunch", "P2p", "P2pApi"],
        "{}",
        log.text
    );
    log.all_stopped();
    for (rank, b) in bufs.iter().enumerate() {
        let (next, prev) = ((rank + 1) % 3, (rank + 2) % 3);
        let group_api = log.one("GroupApi", rank);
        assert_eq!(group_api.get("parent"), "0");
        assert_eq!(group_api.get("depth"), "2");
        // Two states for the whole group, not per call.
        assert_eq!(log.states_of(group_api), [23, 24]);
        let group = log.one("Group", rank);
        assert_eq!(group.get("parent"), "0");
        assert_eq!(log.of_rank("P2pApi", rank).len(), 2);
        assert_eq!(log.of_rank("P2p", rank).len(), 2);
        let stream = log.find("P2pApi", rank, "func", "Send").get("stream");
        for (func, buf, count, peer) in [
            ("Send", b.send, ring_count(rank), next),
            ("Recv", b.recv, ring_count(prev), prev),
        ] {
            let api = log.find("P2pApi", rank, "func", func);
            assert_eq!(api.get("parent"), group_api.id, "{api:?}");
            assert_eq!(api.get("count"), count.to_string());
            assert_eq!(api.get("dtype"), "ncclInt32");
            assert_eq!(api.get("stream"), stream);
            assert_eq!(api.get("captured"), "0");
            let task = log.find("P2p", rank, "func", func);
            assert_eq!(task.get("parent"), api.id, "{task:?}");
            assert_eq!(task.get("group"), group.id);
            assert_eq!(task.get("buff"), ptr(buf));
            assert_eq!(task.get("count"), count.to_string());
            assert_eq!(task.get("dtype"), "ncclInt32");
            assert_eq!(task.get("peer"), peer.to_string());
            assert_ne!(task.get("nch"), "0");
            // The calls return before the group launches.
            assert!(log.stop_line(api) < group.line);
            assert!(log.stop_line(task) < log.stop_line(group));
        }
        let launch = log.one("KernelLaunch", rank);
        assert_eq!(launch.get("parent"), group_api.id);
        assert_eq!(launch.get("stream"), stream);
        assert!(log.stop_line(group) < log.stop_line(group_api));
    }
}

/// `NCCL_PROFILE_EVENT_MASK` as the plugin sets it: an event is raised when its type or one
/// below it is asked for (NCCL's rules), and nothing without a type.
fn mask_filters_events() {
    // Collectives only: the group and its launch still, as NCCL raises them for any task.
    let log = Log::of(bits::COLL, || {
        grouped_ring(3);
    });
    assert_eq!(log.kinds(), ["Group", "GroupApi"], "{}", log.text);
    log.all_stopped();
    let log = Log::of(bits::COLL, || {
        all_reduce_on_two_ranks();
    });
    assert_eq!(
        log.kinds(),
        ["Coll", "CollApi", "Group", "GroupApi"],
        "{}",
        log.text
    );
    // Sends and receives only.
    let log = Log::of(bits::P2P, || {
        all_reduce_on_two_ranks();
    });
    assert_eq!(log.kinds(), ["Group", "GroupApi"], "{}", log.text);
    let log = Log::of(bits::P2P_API, || {
        grouped_ring(3);
    });
    assert_eq!(log.kinds(), ["GroupApi", "P2pApi"], "{}", log.text);
    assert!(log.none_of("P2p"));
    let log = Log::of(bits::KERNEL_LAUNCH, || {
        grouped_ring(2);
    });
    assert_eq!(log.kinds(), ["GroupApi", "KernelLaunch"], "{}", log.text);
    log.all_stopped();
    // A plugin that asks for no events gets none.
    let log = Log::of(0, || {
        all_reduce_on_two_ranks();
        grouped_ring(2);
    });
    assert!(log.starts.is_empty(), "{}", log.text);
    assert_eq!(log.text.matches("finalize").count(), 4, "{}", log.text);
}
