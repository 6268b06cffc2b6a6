//! The NET proxy's events (ProxyOp, ProxyStep, NetPlugin) raised through a communicator's
//! [`Raiser`] as our test profiler (`tests/c/profiler_plugin/`) receives them in each ABI
//! version NCCL 2.28.9 loads: field by field, with their parents, states and state arguments
//! as NCCL's adapters pass them on; and the task events NCCL raises when a plugin asks for
//! proxy events only. A plugin loads once per process, so each version runs in a child process
//! of this binary.

mod support;

use oxccl_core::datatype::DataType;
use oxccl_core::plan::P2pDir;
use oxccl_core::profiler_plugin::abi::{event as bit, state};
use oxccl_core::profiler_plugin::{self, Event, Handle, P2pTask, Raiser};
use std::process::Command;
use support::all_reduce_on_two_ranks;
use support::profiler::{Log, Start, grouped_ring, use_plugin};

/// Set in a child: the ABI version it checks.
const CHILD: &str = "OXTEST_PROXY_VERSION";
const TEST: &str = "proxy_events_reach_every_profiler_abi_version";

#[test]
fn proxy_events_reach_every_profiler_abi_version() {
    if let Ok(version) = std::env::var(CHILD) {
        check_version(version.parse().unwrap());
        return;
    }
    for version in (1..=5).rev() {
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
            .env(CHILD, version.to_string())
            .output()
            .expect("run this test binary");
        assert!(
            out.status.success(),
            "v{version}: {}\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn check_version(version: u32) {
    let lib = match version {
        5 => "libnccl-profiler-oxtest.so".to_string(),
        v => format!("libnccl-profiler-oxtest{v}.so"),
    };
    use_plugin(&lib);
    task_events_for_proxy_bits(version);
    let all = bit::PROXY_OP | bit::PROXY_STEP | bit::NET_PLUGIN;
    for mask in [all, bit::NET_PLUGIN] {
        let (log, h) = raise(mask);
        assert!(h.wanted == [true, true, true], "{mask:#x}");
        every_field(&log, &h, version);
    }
    // Asking for steps: operations and steps, no network-plugin events.
    let (log, h) = raise(bit::PROXY_STEP);
    assert_eq!(h.wanted, [true, true, false]);
    assert_eq!(h.net, 0);
    assert_eq!(
        log.kinds(),
        ["Group", "P2p", "ProxyOp", "ProxyStep"],
        "{}",
        log.text
    );
    assert_eq!(log.of_rank("ProxyStep", 1).len(), 2, "{}", log.text);
    log.all_stopped();
    // Asking for operations: those only.
    let (log, h) = raise(bit::PROXY_OP);
    assert_eq!(h.wanted, [true, false, false]);
    assert_eq!((h.send_step, h.recv_step, h.net), (0, 0, 0));
    assert_eq!(log.kinds(), ["Group", "P2p", "ProxyOp"], "{}", log.text);
    assert_eq!(log.of_rank("ProxyOp", 1).len(), 2, "{}", log.text);
    log.all_stopped();
    // Asking for none of them (the task event still, for itself).
    let (log, h) = raise(bit::P2P);
    assert_eq!(h.wanted, [false, false, false]);
    assert_eq!((h.send_op, h.send_step, h.net), (0, 0, 0));
    assert_eq!(log.kinds(), ["Group", "P2p"], "{}", log.text);
    log.all_stopped();
}

/// NCCL raises a task's events, and the Group and API events above them, when a plugin asks
/// for a proxy event only (the proxy's events hang under them); no kernel events.
fn task_events_for_proxy_bits(version: u32) {
    for mask in [bit::PROXY_OP, bit::PROXY_STEP, bit::NET_PLUGIN] {
        let mask = mask as u32;
        let log = Log::of(mask, || {
            all_reduce_on_two_ranks();
        });
        let want: &[&str] = if version == 5 {
            &["Coll", "CollApi", "Group", "GroupApi"]
        } else {
            &["Coll", "Group"]
        };
        let kinds = log.kinds();
        for k in want {
            assert!(kinds.contains(k), "v{version} {mask:#x}: {}", log.text);
        }
        assert_eq!(log.of_rank("Coll", 0).len(), 1, "{}", log.text);
        assert_eq!(log.of_rank("Coll", 1).len(), 1, "{}", log.text);
        assert!(log.none_of("KernelCh") && log.none_of("KernelLaunch"));
        log.all_stopped();
        if version == 5 {
            // NCCL passes GroupApi states without arguments (NULL), unlike the proxy's.
            for rank in 0..2 {
                assert_eq!(states(&log, log.one("GroupApi", rank)), ["23", "24"]);
            }
        }
        let log = Log::of(mask, || {
            grouped_ring(3);
        });
        for rank in 0..3 {
            assert_eq!(log.of_rank("P2p", rank).len(), 2, "{mask:#x}: {}", log.text);
        }
        if version == 5 {
            assert!(!log.of_rank("P2pApi", 0).is_empty(), "{}", log.text);
        }
        log.all_stopped();
    }
}

/// What [`raise`] got back.
#[derive(Debug, Default)]
struct Handles {
    /// What `wants` said of ProxyOp, ProxyStep and NetPlugin.
    wanted: [bool; 3],
    send_op: Handle,
    send_step: Handle,
    net: Handle,
    recv_op: Handle,
    recv_step: Handle,
}

/// A 64 KiB send's step (bytes so far at each state).
const SEND_STATES: [(i32, u64); 3] = [
    (state::PROXY_STEP_SEND_GPU_WAIT, 0),
    (state::PROXY_STEP_SEND_PEER_WAIT, 65536),
    (state::PROXY_STEP_SEND_WAIT, 65536),
];
/// A receive's step.
const RECV_STATES: [(i32, u64); 3] = [
    (state::PROXY_STEP_RECV_WAIT, 0),
    (state::PROXY_STEP_RECV_FLUSH_WAIT, 32768),
    (state::PROXY_STEP_RECV_GPU_WAIT, 32768),
];
/// The network plugin's type and version (`NCCL_PROFILER_NET_TYPE_IB` | 1) and its data.
const NET_ID: i64 = 0x1_0001;
const NET_DATA: usize = 0x7f00_dead_0000;
const NET_UPDATE: u64 = 0x7f00_beef_0000;

/// Raises, with the plugin asking for `mask`, as the NET proxy does on rank 1 of a
/// communicator of two: under a P2p task event (under its Group event), a send's ProxyOp event
/// in progress with one step through the send states, a NetPlugin event under that step
/// updated once, then a receive's ProxyOp event with one step through the receive states;
/// every event stopped where it was started.
fn raise(mask: u64) -> (Log, Handles) {
    let mut h = Handles::default();
    let log = Log::of(mask as u32, || {
        let ctx = profiler_plugin::for_communicator(0x5eed, Some("proxy"), 1, 2, 1)
            .expect("the test profiler's context");
        let r: Raiser = ctx.raiser();
        h.wanted = [bit::PROXY_OP, bit::PROXY_STEP, bit::NET_PLUGIN].map(|k| r.wants(k));
        let group = ctx.start(&Event::Group, 0);
        let task = ctx.start(
            &Event::P2p(P2pTask {
                dir: P2pDir::Send,
                buff: 0x1000,
                count: 16384,
                dtype: DataType::Float32,
                peer: 0,
                n_channels: 2,
                group: group.handle(),
            }),
            0,
        );
        let op = Event::ProxyOp {
            channel: 3,
            peer: 0,
            n_steps: 4,
            chunk_size: 65536,
            is_send: true,
        };
        h.send_op = r.start_raw(&op, task.handle());
        r.record(h.send_op, state::PROXY_OP_IN_PROGRESS, None);
        h.send_step = r.start_raw(&Event::ProxyStep { step: 1 }, h.send_op);
        for (s, bytes) in SEND_STATES {
            r.record(h.send_step, s, Some(bytes));
        }
        let net = Event::NetPlugin {
            id: NET_ID,
            data: NET_DATA,
        };
        h.net = r.start_raw(&net, h.send_step);
        r.record(h.net, state::NET_PLUGIN_UPDATE, Some(NET_UPDATE));
        r.stop(h.net);
        r.stop(h.send_step);
        r.stop(h.send_op);
        let op = Event::ProxyOp {
            channel: 5,
            peer: 0,
            n_steps: 2,
            chunk_size: 32768,
            is_send: false,
        };
        h.recv_op = r.start_raw(&op, task.handle());
        h.recv_step = r.start_raw(&Event::ProxyStep { step: 2 }, h.recv_op);
        for (s, bytes) in RECV_STATES {
            r.record(h.recv_step, s, Some(bytes));
        }
        r.stop(h.recv_step);
        r.stop(h.recv_op);
        // Events not raised: nothing reaches the plugin.
        r.record(0, state::PROXY_STEP_SEND_WAIT, Some(1));
        r.stop(0);
        drop(task);
        drop(group);
    });
    (log, h)
}

/// The states recorded on `e`, each with what the plugin saw of its arguments (nothing: none
/// were passed; v4-v5: "arg=<u64>"; v1-v3: "trans=<bytes> steps=<n>"), checked to come while
/// it was open.
fn states(log: &Log, e: &Start) -> Vec<String> {
    log.states_of(e);
    log.text
        .lines()
        .filter_map(|l| l.strip_prefix("state "))
        .filter_map(|l| {
            let (id, rest) = l.split_once(' ')?;
            (id == e.id).then(|| rest.to_string())
        })
        .collect()
}

/// What a plugin of `version` sees of states recorded with a value: v4-v5 the value, v1-v3
/// zeroed v1-v3 arguments (the adapters copy no bytes into them).
fn args(version: u32, s: i32, value: u64) -> String {
    if version >= 4 {
        format!("{s} arg={value}")
    } else {
        format!("{s} trans=0 steps=0")
    }
}

/// Checks every proxy event [`raise`] raised with all of them asked for, field by field.
fn every_field(log: &Log, h: &Handles, version: u32) {
    log.all_stopped();
    let pid = std::process::id().to_string();
    let task = log.one("P2p", 1);
    let group = log.one("Group", 1);
    assert_eq!(
        task.get("parent"),
        if version == 5 { "0" } else { &group.id }
    );
    let ops = log.of_rank("ProxyOp", 1);
    assert_eq!(ops.len(), 2, "{}", log.text);
    let (send, recv) = (
        log.find("ProxyOp", 1, "send", "1"),
        log.find("ProxyOp", 1, "send", "0"),
    );
    assert!(h.send_op != 0 && h.recv_op != 0 && h.send_step != 0 && h.recv_step != 0);
    for (op, ch, steps, chunk) in [(send, "3", "4", "65536"), (recv, "5", "2", "32768")] {
        // Under the task's event, in every version (the adapters keep a proxy event's parent).
        assert_eq!(op.get("parent"), task.id, "v{version} {op:?}");
        assert_eq!(op.get("pid"), pid);
        assert_eq!(op.get("ch"), ch);
        assert_eq!(op.get("peer"), "0");
        assert_eq!(op.get("steps"), steps);
        assert_eq!(op.get("chunk"), chunk);
        assert!(log.stop_line(op) < log.stop_line(task));
    }
    // The in-progress state is new in v4: v1-v3 do not get it.
    let in_progress = if version >= 4 {
        vec![format!("{} arg=0", state::PROXY_OP_IN_PROGRESS)]
    } else {
        vec![]
    };
    assert_eq!(states(log, send), in_progress, "v{version}: {}", log.text);
    assert!(states(log, recv).is_empty());

    let send_step = log.find("ProxyStep", 1, "parent", &send.id);
    assert_eq!(send_step.get("step"), "1");
    assert!(log.stop_line(send_step) < log.stop_line(send));
    // The send's peer wait is new in v4 too.
    let want: Vec<String> = SEND_STATES
        .iter()
        .filter(|&&(s, _)| version >= 4 || s != state::PROXY_STEP_SEND_PEER_WAIT)
        .map(|&(s, v)| args(version, s, v))
        .collect();
    assert_eq!(states(log, send_step), want, "v{version}: {}", log.text);
    let recv_step = log.find("ProxyStep", 1, "parent", &recv.id);
    assert_eq!(recv_step.get("step"), "2");
    assert!(log.stop_line(recv_step) < log.stop_line(recv));
    let want: Vec<String> = RECV_STATES
        .iter()
        .map(|&(s, v)| args(version, s, v))
        .collect();
    assert_eq!(states(log, recv_step), want, "v{version}: {}", log.text);

    if version <= 2 {
        // NCCL's v1 and v2 adapters drop NetPlugin events.
        assert!(log.none_of("NetPlugin"), "v{version}: {}", log.text);
        assert_eq!(h.net, 0);
        assert_eq!(log.kinds(), ["Group", "P2p", "ProxyOp", "ProxyStep"]);
        return;
    }
    assert_eq!(
        log.kinds(),
        ["Group", "NetPlugin", "P2p", "ProxyOp", "ProxyStep"]
    );
    let net = log.one("NetPlugin", 1);
    assert_eq!(net.get("parent"), send_step.id, "v{version}");
    assert_eq!(net.get("id"), NET_ID.to_string());
    assert_eq!(net.get("data"), format!("{NET_DATA:#x}"));
    assert!(log.stop_line(net) < log.stop_line(send_step));
    // v3's adapter drops its update; v4-v5 get the data.
    let want = if version >= 4 {
        vec![format!("{} arg={NET_UPDATE}", state::NET_PLUGIN_UPDATE)]
    } else {
        vec![]
    };
    assert_eq!(states(log, net), want, "v{version}: {}", log.text);
}
