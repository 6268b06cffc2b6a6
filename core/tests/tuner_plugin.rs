//! The tuner-plugin loader and the steering against the test tuner plugin
//! (`tests/c/tuner_plugin/`), one library per ABI version. One test: the plugin reads its
//! forced choice from the environment, which nothing else in this process may read meanwhile.

mod support;

use oxccl_core::CollArgs;
use oxccl_core::datatype::{DataType, RedOp};
use oxccl_core::plan::{Algorithm, CollKind, Protocol};
use oxccl_core::tuner_plugin::{Steer, TunerPlugin, file_names};

fn plugin_path(name: &str) -> String {
    format!("{}/{name}", env!("OXCCL_TEST_PLUGIN_DIR"))
}

/// Loads `name` for the life of the test process (contexts borrow the plugin for 'static).
fn load(name: &str) -> &'static TunerPlugin {
    let p = TunerPlugin::load(Some(&plugin_path(name)), Some("none")).expect("test tuner loads");
    Box::leak(Box::new(p))
}

const ALL: [(Algorithm, Protocol); 6] = support::tuner::RING_AND_TREE;

fn names_follow_nccl() {
    assert_eq!(
        file_names("tuner", "example"),
        ["example", "libnccl-tuner-example.so"]
    );
    assert_eq!(file_names("tuner", "/x/libfoo.so"), ["/x/libfoo.so"]);
    assert_eq!(file_names("tuner", "libfoo.so"), ["libfoo.so"]);
    assert!(TunerPlugin::load(Some("none"), None).is_none());
    assert!(TunerPlugin::load(Some("/nonexistent/libx.so"), Some("none")).is_none());
}

#[test]
fn every_version_steers_and_logs() {
    names_follow_nccl();
    let log = std::env::temp_dir().join(format!("oxtest-tuner-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&log);
    // SAFETY: this binary's only test: no other thread reads the environment.
    unsafe {
        std::env::set_var("OXTEST_TUNER_LOG", &log);
    }
    for (lib, version) in [
        ("libnccl-tuner-oxtest6.so", 6),
        ("libnccl-tuner-oxtest.so", 5),
        ("libnccl-tuner-oxtest4.so", 4),
        ("libnccl-tuner-oxtest3.so", 3),
        ("libnccl-tuner-oxtest2.so", 2),
    ] {
        let p = load(lib);
        assert_eq!(p.version(), version, "{lib}");
        assert_eq!(p.name(), format!("oxtest-v{version}"));
        let chosen = (Algorithm::Ring, Protocol::Ll);
        // Nothing forced: oxccl's choice stands.
        // SAFETY: as above.
        unsafe { std::env::remove_var("OXTEST_TUNER_FORCE") };
        let ctx = p.context(7, 4, 2, (2, 2)).unwrap();
        assert_eq!(
            ctx.steer(CollKind::AllReduce, 8, 4, chosen, 16, &ALL),
            Steer::default(),
            "v{version}"
        );
        drop(ctx);
        // Ring / Simple on 4 channels.
        // SAFETY: as above.
        unsafe { std::env::set_var("OXTEST_TUNER_FORCE", "1,2,4") };
        let ctx = p.context(7, 4, 2, (2, 2)).unwrap();
        let s = ctx.steer(CollKind::AllReduce, 1 << 20, 4, chosen, 16, &ALL);
        assert_eq!(
            s.algo_proto,
            Some((Algorithm::Ring, Protocol::Simple)),
            "v{version}"
        );
        assert_eq!(s.nchannels, Some(4));
        // From oxccl's direct algorithm too.
        let s = ctx.steer(
            CollKind::AllReduce,
            8,
            4,
            (Algorithm::Direct, Protocol::Ll),
            16,
            &ALL,
        );
        assert_eq!(s.algo_proto, Some((Algorithm::Ring, Protocol::Simple)));
        // A pair the operation does not run is not taken; the channels still are.
        let s = ctx.steer(
            CollKind::Broadcast,
            8,
            4,
            (Algorithm::Ring, Protocol::Ll),
            16,
            &ALL[..1],
        );
        assert_eq!(s.algo_proto, None);
        assert_eq!(s.nchannels, Some(4));
        // Operations NCCL 2.28 does not ask a tuner about.
        assert!(!ctx.steer(CollKind::AllToAll, 8, 4, chosen, 16, &ALL).any());
        drop(ctx);
    }
    communicators_follow_the_plugin();
    // SAFETY: as above.
    unsafe {
        std::env::remove_var("OXTEST_TUNER_FORCE");
        std::env::remove_var("OXTEST_TUNER_LOG");
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    assert_eq!(text.matches("init nranks=4 nnodes=2").count(), 10, "{text}");
    // 10 contexts of the steering checks, 2 of the communicators.
    assert_eq!(text.matches("finalize").count(), 12, "{text}");
    assert_eq!(text.matches("init nranks=2 nnodes=1").count(), 2, "{text}");
    // v5 and v6 get the NVLink domains: 2 of 2 ranks each.
    assert_eq!(
        text.matches("nvl nranks=4 nnodes=2 coll=2 bytes=2 nch=2")
            .count(),
        4,
        "{text}"
    );
    assert!(
        text.contains("coll nranks=4 nnodes=2 coll=4 bytes=1048576 nch=16"),
        "{text}"
    );
    assert!(
        text.contains("coll nranks=4 nnodes=2 coll=0 bytes=8 nch=16"),
        "{text}"
    );
    assert!(!text.contains("coll=8"), "{text}");
}

/// Two host ranks in threads with `NCCL_TUNER_PLUGIN` naming the v5 test tuner, which forces
/// ring / Simple on 3 channels: every communicator takes its choice, and AllReduce stays right.
fn communicators_follow_the_plugin() {
    // SAFETY: this binary's only test: no other thread reads the environment.
    unsafe {
        std::env::set_var("NCCL_TUNER_PLUGIN", plugin_path("libnccl-tuner-oxtest.so"));
        std::env::set_var("OXTEST_TUNER_FORCE", "1,2,3");
    }
    oxccl_core::testing::on_host_ranks(
        2,
        |_| {},
        |rank, comm, stream| {
            let choice = comm
                .tuning(CollKind::AllReduce, 1 << 20, DataType::Float32)
                .unwrap();
            assert_eq!(
                (choice.algo, choice.proto, choice.nchannels),
                (Algorithm::Ring, Protocol::Simple, 3),
                "{choice:?}"
            );
            let count = (1 << 18) + 3;
            let send: Vec<f32> = (0..count).map(|i| (i % 97) as f32 + rank as f32).collect();
            let mut recv = vec![f32::NAN; count];
            let args = CollArgs {
                kind: CollKind::AllReduce,
                send: send.as_ptr() as u64,
                recv: recv.as_mut_ptr() as u64,
                count: count as u64,
                dtype: DataType::Float32,
                op: RedOp::Sum,
                root: 0,
                layout: None,
            };
            // SAFETY: both buffers hold `count` floats and outlive the call, which is
            // synchronous on the host backend.
            unsafe { comm.collective(args, stream) }.unwrap();
            let wrong = (0..count)
                .filter(|&i| recv[i] != 2.0 * (i % 97) as f32 + 1.0)
                .count();
            assert_eq!(wrong, 0);
        },
    );
}
