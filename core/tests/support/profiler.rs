//! What the profiler-plugin tests share: the operations they run on host ranks, and the log of
//! our test profiler (`tests/c/profiler_plugin/`) read back into events.

use super::{Buffers, all_reduce_on_two_ranks};
use oxccl_core::comm::group;
use oxccl_core::datatype::DataType;
use oxccl_core::plan::P2pDir;
use std::collections::BTreeMap;

/// Loads our test profiler of `lib` (`libnccl-profiler-oxtest*.so`) for this process, logging
/// to a file of this process's.
pub fn use_plugin(lib: &str) {
    let lib = format!("{}/{lib}", env!("OXCCL_TEST_PLUGIN_DIR"));
    // SAFETY: called first by each binary's only test: no other thread reads the environment.
    unsafe {
        std::env::set_var("NCCL_PROFILER_PLUGIN", lib);
        std::env::set_var("OXTEST_PROFILER_LOG", log_path());
    }
}

fn log_path() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("oxtest-profiler-{}.log", std::process::id()))
}

/// One started event of the log.
#[derive(Debug, Clone)]
pub struct Start {
    /// Its line number in the log.
    pub line: usize,
    /// The plugin's id.
    pub id: String,
    /// "GroupApi", "Coll", …
    pub kind: String,
    /// The fields after the type (`parent`, `rank`, …).
    pub fields: BTreeMap<String, String>,
}

impl Start {
    /// The field `name`; panics naming the event when it has none.
    pub fn get(&self, name: &str) -> &str {
        self.fields
            .get(name)
            .unwrap_or_else(|| panic!("no {name} in {self:?}"))
    }
}

/// The log of one run.
#[derive(Debug)]
pub struct Log {
    /// The log's text.
    pub text: String,
    /// Its started events, in order.
    pub starts: Vec<Start>,
    /// The line number of each stop, by id.
    pub stops: BTreeMap<String, Vec<usize>>,
    /// The (line, state) of each recorded state, by id.
    pub states: BTreeMap<String, Vec<(usize, i32)>>,
    /// The timer a KernelCh stop state carried, by id.
    pub stop_timers: BTreeMap<String, u64>,
}

impl Log {
    /// Runs `f` with the plugin asking for `mask` and reads back what it logged.
    pub fn of(mask: u32, f: impl FnOnce()) -> Log {
        let path = log_path();
        let _ = std::fs::remove_file(&path);
        // SAFETY: the tests call this from their only thread between runs of host ranks.
        unsafe { std::env::set_var("OXTEST_PROFILER_MASK", format!("{mask:#x}")) };
        f();
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let _ = std::fs::remove_file(&path);
        let mut starts = Vec::new();
        let mut stops: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        let mut states: BTreeMap<String, Vec<(usize, i32)>> = BTreeMap::new();
        let mut stop_timers = BTreeMap::new();
        for (line, l) in text.lines().enumerate() {
            let mut words = l.split_whitespace();
            match words.next() {
                Some("start") => {
                    let id = words.next().unwrap().to_string();
                    let mut fields: BTreeMap<String, String> = words
                        .map(|w| {
                            let (k, v) = w.split_once('=').unwrap();
                            (k.to_string(), v.to_string())
                        })
                        .collect();
                    let kind = fields.remove("type").unwrap();
                    starts.push(Start {
                        line,
                        id,
                        kind,
                        fields,
                    });
                }
                Some("stop") => stops
                    .entry(words.next().unwrap().to_string())
                    .or_default()
                    .push(line),
                Some("state") => {
                    let id = words.next().unwrap().to_string();
                    let state = words.next().unwrap().parse().unwrap();
                    if let Some(t) = words.next().and_then(|w| w.strip_prefix("timer=")) {
                        stop_timers.insert(id.clone(), t.parse().unwrap());
                    }
                    states.entry(id).or_default().push((line, state));
                }
                _ => {}
            }
        }
        Log {
            text,
            starts,
            stops,
            states,
            stop_timers,
        }
    }

    /// The events of `kind` that `rank` raised.
    pub fn of_rank(&self, kind: &str, rank: usize) -> Vec<&Start> {
        let rank = rank.to_string();
        self.starts
            .iter()
            .filter(|s| s.kind == kind && s.fields.get("rank") == Some(&rank))
            .collect()
    }

    /// The one event of `kind` that `rank` raised.
    pub fn one(&self, kind: &str, rank: usize) -> &Start {
        let v = self.of_rank(kind, rank);
        assert_eq!(v.len(), 1, "{kind} events of rank {rank}: {}", self.text);
        v[0]
    }

    /// The event of `kind` of `rank` whose field `name` is `value`.
    pub fn find(&self, kind: &str, rank: usize, name: &str, value: &str) -> &Start {
        let v: Vec<_> = self
            .of_rank(kind, rank)
            .into_iter()
            .filter(|s| s.fields.get(name).map(String::as_str) == Some(value))
            .collect();
        assert_eq!(
            v.len(),
            1,
            "{kind} {name}={value} of rank {rank}: {}",
            self.text
        );
        v[0]
    }

    /// Whether no event of `kind` was started.
    pub fn none_of(&self, kind: &str) -> bool {
        self.starts.iter().all(|s| s.kind != kind)
    }

    /// The line that stopped `e`, checking it stopped exactly once.
    pub fn stop_line(&self, e: &Start) -> usize {
        let lines = self.stops.get(&e.id).cloned().unwrap_or_default();
        assert_eq!(lines.len(), 1, "stops of {e:?}: {}", self.text);
        assert!(lines[0] > e.line, "{e:?} stopped before it started");
        lines[0]
    }

    /// The states recorded on `e`, in order, checking they came while it was open.
    pub fn states_of(&self, e: &Start) -> Vec<i32> {
        let stop = self.stop_line(e);
        let v = self.states.get(&e.id).cloned().unwrap_or_default();
        for &(line, _) in &v {
            assert!(
                e.line < line && line < stop,
                "state of {e:?} outside it: {}",
                self.text
            );
        }
        v.into_iter().map(|(_, s)| s).collect()
    }

    /// Checks that every started event was stopped exactly once, and nothing else was.
    pub fn all_stopped(&self) {
        for s in &self.starts {
            self.stop_line(s);
        }
        assert_eq!(self.stops.len(), self.starts.len(), "{}", self.text);
    }

    /// The kinds of the events started, sorted, without repeats.
    pub fn kinds(&self) -> Vec<&str> {
        let mut k: Vec<&str> = self.starts.iter().map(|s| s.kind.as_str()).collect();
        k.sort_unstable();
        k.dedup();
        k
    }
}

/// How the test profiler prints a pointer (`%p`).
pub fn ptr(p: u64) -> String {
    if p == 0 {
        "(nil)".into()
    } else {
        format!("{p:#x}")
    }
}

/// Elements rank `r` sends to the next rank of the ring.
pub fn ring_count(r: usize) -> usize {
    10 * (r + 1)
}

/// `n` host ranks in one group each: rank r sends [`ring_count`]`(r)` Int32 to rank r+1 and
/// receives from rank r-1, checked; the buffers of each rank.
pub fn grouped_ring(n: usize) -> Vec<Buffers> {
    oxccl_core::testing::on_host_ranks(
        n,
        |_| {},
        |rank, comm, stream| {
            let (next, prev) = ((rank + 1) % n, (rank + n - 1) % n);
            let send: Vec<i32> = (0..ring_count(rank) as i32)
                .map(|i| i + 1000 * rank as i32)
                .collect();
            let mut recv = vec![0i32; ring_count(prev)];
            group::group_start().unwrap();
            // SAFETY: both buffers hold their counts and outlive the group, which the host
            // backend completes before its end returns.
            unsafe {
                comm.p2p(
                    P2pDir::Send,
                    send.as_ptr() as u64,
                    send.len() as u64,
                    DataType::Int32,
                    next as u32,
                    stream,
                )
                .unwrap();
                comm.p2p(
                    P2pDir::Recv,
                    recv.as_mut_ptr() as u64,
                    recv.len() as u64,
                    DataType::Int32,
                    prev as u32,
                    stream,
                )
                .unwrap();
            }
            group::group_end().unwrap();
            let want: Vec<i32> = (0..ring_count(prev) as i32)
                .map(|i| i + 1000 * prev as i32)
                .collect();
            assert_eq!(recv, want, "rank {rank}");
            Buffers {
                send: send.as_ptr() as u64,
                recv: recv.as_ptr() as u64,
            }
        },
    )
}

/// NCCL's event bits the tests ask for.
pub mod bits {
    /// `ncclProfileGroup`.
    pub const GROUP: u32 = 1 << 0;
    /// `ncclProfileColl`.
    pub const COLL: u32 = 1 << 1;
    /// `ncclProfileP2p`.
    pub const P2P: u32 = 1 << 2;
    /// `ncclProfileKernelCh`.
    pub const KERNEL_CH: u32 = 1 << 6;
    /// `ncclProfileGroupApi`.
    pub const GROUP_API: u32 = 1 << 8;
    /// `ncclProfileCollApi`.
    pub const COLL_API: u32 = 1 << 9;
    /// `ncclProfileP2pApi`.
    pub const P2P_API: u32 = 1 << 10;
    /// `ncclProfileKernelLaunch`.
    pub const KERNEL_LAUNCH: u32 = 1 << 11;
    /// Every event oxccl raises.
    pub const ALL: u32 = GROUP | COLL | P2P | GROUP_API | COLL_API | P2P_API | KERNEL_LAUNCH;
}

/// Checks the KernelCh events a plugin of ABI `version` gets when it asks for them (and
/// nothing else) for an AllReduce on two ranks and a grouped ring on three: under each task
/// event, one per channel of the task (the collective's `nch`; for a send or receive the
/// channels carrying it, which its `nch` counts in v4-v5), ids distinct and below 64, each stopped before its task; from v4
/// on with start and stop times (the stop recorded as NCCL's `ncclProfilerKernelChStop`, 22),
/// in v3 without; v1 and v2 get none.
pub fn kernel_channel_events(version: u32) {
    let log = Log::of(bits::KERNEL_CH, || {
        all_reduce_on_two_ranks();
    });
    log.all_stopped();
    if version <= 2 {
        assert!(log.none_of("KernelCh"), "v{version}: {}", log.text);
        return;
    }
    for rank in 0..2 {
        let coll = log.one("Coll", rank);
        let nch: usize = coll.get("nch").parse().unwrap();
        let channels = log.kernel_channels_of(coll, version);
        assert_eq!(channels, (0..nch as u32).collect::<Vec<_>>(), "v{version}");
    }
    let log = Log::of(bits::KERNEL_CH, || {
        grouped_ring(3);
    });
    log.all_stopped();
    for rank in 0..3 {
        for p in log.of_rank("P2p", rank) {
            let channels = log.kernel_channels_of(p, version);
            assert!(!channels.is_empty(), "{p:?}");
            if version >= 4 {
                // Its channel count is the channels it has events for.
                assert_eq!(p.get("nch"), channels.len().to_string(), "{p:?}");
            }
        }
    }
}

impl Log {
    /// The channel ids of the KernelCh events under `task`, checked as
    /// [`kernel_channel_events`] says for ABI `version`.
    pub fn kernel_channels_of(&self, task: &Start, version: u32) -> Vec<u32> {
        let mut ids = Vec::new();
        for k in self.starts.iter().filter(|s| s.kind == "KernelCh") {
            if k.get("parent") != task.id {
                continue;
            }
            assert_eq!(k.get("rank"), task.get("rank"));
            assert!(task.line < k.line, "{k:?} before its task");
            assert!(
                self.stop_line(k) < self.stop_line(task),
                "{k:?} outlived its task"
            );
            let timer: i64 = k.get("timer").parse().unwrap();
            if version >= 4 {
                assert_eq!(self.states_of(k), [22], "{k:?}: {}", self.text);
                let stop = self.stop_timers[&k.id];
                assert!(timer > 0 && stop >= timer as u64, "{k:?} stopped at {stop}");
            } else {
                assert_eq!(timer, -1);
                assert!(self.states_of(k).is_empty(), "{k:?}");
            }
            ids.push(k.get("ch").parse::<u32>().unwrap());
        }
        ids.sort_unstable();
        let n = ids.len();
        ids.dedup();
        assert_eq!(
            ids.len(),
            n,
            "channel ids repeat under {task:?}: {}",
            self.text
        );
        assert!(ids.iter().all(|&c| c < 64), "{ids:?}");
        ids
    }
}

/// Checks what a plugin of ABI `version` (1-4) receives of an AllReduce on two ranks and of a
/// grouped ring of sends and receives on three: Group events, and under each its Coll or P2p
/// events in the version's layout; no API or kernel-launch events (their types do not fit).
pub fn legacy_events_reach(version: u32) {
    use_plugin(&format!("libnccl-profiler-oxtest{version}.so"));
    let mut bufs = Vec::new();
    let log = Log::of(bits::ALL, || bufs = all_reduce_on_two_ranks());
    check_legacy_init(&log, version, 2);
    assert_eq!(log.kinds(), ["Coll", "Group"], "v{version}: {}", log.text);
    log.all_stopped();
    for (rank, b) in bufs.iter().enumerate() {
        let group = log.one("Group", rank);
        assert_eq!(group.get("parent"), "0");
        let coll = log.one("Coll", rank);
        assert_eq!(coll.get("parent"), group.id, "v{version}");
        assert!(log.stop_line(coll) < log.stop_line(group));
        assert_eq!(
            (coll.get("send"), coll.get("recv")),
            (&*ptr(b.send), &*ptr(b.recv))
        );
        assert_eq!(coll.get("count"), "1000");
        assert_eq!(coll.get("seq"), "0");
        assert_eq!(coll.get("root"), "0");
        assert_eq!(coll.get("nwarps"), "16");
        assert_ne!(coll.get("nch"), "0");
        if version == 1 {
            // ncclFuncAllReduce, ncclFloat32, NCCL_ALGO_* / NCCL_PROTO_* (or undefined).
            assert_eq!((coll.get("func"), coll.get("dtype")), ("4", "7"));
            assert!(["0", "1", "255"].contains(&coll.get("algo")), "{coll:?}");
            assert!(["0", "1", "2"].contains(&coll.get("proto")), "{coll:?}");
        } else {
            assert_eq!(
                (coll.get("func"), coll.get("dtype")),
                ("AllReduce", "ncclFloat32")
            );
            assert!(["RING", "TREE", "Direct"].contains(&coll.get("algo")));
            assert!(["LL", "LL128", "SIMPLE"].contains(&coll.get("proto")));
        }
    }
    let mut bufs = Vec::new();
    let log = Log::of(bits::ALL, || bufs = grouped_ring(3));
    check_legacy_init(&log, version, 3);
    assert_eq!(log.kinds(), ["Group", "P2p"], "v{version}: {}", log.text);
    log.all_stopped();
    for (rank, b) in bufs.iter().enumerate() {
        let group = log.one("Group", rank);
        let (next, prev) = ((rank + 1) % 3, (rank + 2) % 3);
        let (send_name, recv_name, dtype) = if version == 1 {
            ("6", "7", "2")
        } else {
            ("Send", "Recv", "ncclInt32")
        };
        let send = log.find("P2p", rank, "func", send_name);
        let recv = log.find("P2p", rank, "func", recv_name);
        for (p, buf, count, peer) in [
            (send, b.send, ring_count(rank), next),
            (recv, b.recv, ring_count(prev), prev),
        ] {
            assert_eq!(p.get("parent"), group.id, "v{version} {p:?}");
            assert_eq!(p.get("buff"), ptr(buf));
            assert_eq!(p.get("count"), count.to_string());
            assert_eq!(p.get("dtype"), dtype);
            assert_eq!(p.get("peer"), peer.to_string());
            if version == 4 {
                assert_ne!(p.get("nch"), "0");
            }
            assert!(log.stop_line(p) < log.stop_line(group));
        }
    }
}

/// Checks the init lines of `nranks` communicators for a plugin of `version`.
fn check_legacy_init(log: &Log, version: u32, nranks: usize) {
    let inits: Vec<&str> = log.text.lines().filter(|l| l.starts_with("init")).collect();
    assert_eq!(inits.len(), nranks, "{}", log.text);
    for rank in 0..nranks {
        let want = format!("init rank={rank} nranks={nranks} nnodes=1 name=");
        // v1-v3's init gets the context and the mask only.
        let found = inits.iter().any(|l| {
            if version == 4 {
                l.starts_with(&want)
            } else {
                *l == "init"
            }
        });
        assert!(found, "v{version} rank {rank}: {}", log.text);
    }
    assert_eq!(
        log.text.lines().filter(|l| *l == "finalize").count(),
        nranks,
        "{}",
        log.text
    );
}
