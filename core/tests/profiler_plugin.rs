//! The profiler plugin (`NCCL_PROFILER_PLUGIN`, ABI v5) on two host ranks, with our test
//! profiler (`tests/c/profiler_plugin/`), which logs every call. One test: the plugin loads once
//! per process and reads its settings from the environment.

mod support;

use support::all_reduce_on_two_ranks;

#[test]
fn events_reach_the_profiler_with_their_parents() {
    let log = std::env::temp_dir().join(format!("oxtest-profiler-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    let lib = format!(
        "{}/libnccl-profiler-oxtest.so",
        env!("OXCCL_TEST_NET_PLUGIN_DIR")
    );
    // SAFETY: this binary's only test: no other thread reads the environment.
    unsafe {
        std::env::set_var("NCCL_PROFILER_PLUGIN", &lib);
        std::env::set_var("OXTEST_PROFILER_LOG", &log);
    }
    all_reduce_on_two_ranks();
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.matches("init rank=").count(), 2, "{text}");
    assert_eq!(text.matches("finalize rank=").count(), 2, "{text}");
    // Every rank: GroupApi, CollApi under it, Coll under the CollApi, each stopped.
    for rank in 0..2 {
        let id_of = |kind: &str| -> (String, String) {
            let line = text
                .lines()
                .find(|l| {
                    l.contains(&format!("type={kind} ")) && l.contains(&format!("rank={rank} "))
                })
                .unwrap_or_else(|| panic!("no {kind} event of rank {rank}: {text}"));
            let mut words = line.split_whitespace();
            let id = words.nth(1).unwrap().to_string();
            let parent = line
                .split("parent=")
                .nth(1)
                .unwrap()
                .split(' ')
                .next()
                .unwrap()
                .to_string();
            (id, parent)
        };
        let (group, root) = id_of("GroupApi");
        let (api, api_parent) = id_of("CollApi");
        let (coll, coll_parent) = id_of("Coll");
        assert_eq!(root, "0");
        assert_eq!(api_parent, group);
        assert_eq!(coll_parent, api);
        for id in [&group, &api, &coll] {
            assert!(
                text.lines().any(|l| l == format!("stop {id}")),
                "{id} not stopped: {text}"
            );
        }
    }
    assert!(text.contains("type=Coll parent="), "{text}");
    assert!(
        text.contains("func=AllReduce count=1000 dtype=ncclFloat32 seq=0"),
        "{text}"
    );
    // A plugin that asks for no events gets none.
    let _ = std::fs::remove_file(&log);
    // SAFETY: as above.
    unsafe { std::env::set_var("OXTEST_PROFILER_MASK", "0") };
    all_reduce_on_two_ranks();
    let text = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    assert!(!text.contains("start "), "{text}");
    assert_eq!(text.matches("finalize rank=").count(), 2, "{text}");
}
