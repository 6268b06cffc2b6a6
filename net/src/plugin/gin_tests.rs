//! GIN over a GIN plugin, against the in-process GIN plugin of oxccl's C test plugin
//! (`tests/c/net_plugin/oxccl_test_net.c` built with `OXTEST_GIN`), opened by path as
//! `NCCL_NET_PLUGIN=<path>` opens one: ranks are threads of this process, each with its
//! runner, and the plugin copies between their windows.

use super::PluginLib;
use super::gin::GinPlugin;
use crate::PTR_HOST;
use crate::gin::engine::ContextMem;
use crate::gin::gfd::{Signal, encode};
use crate::gin::runner::{GinRunner, GinTransport, Idle};
use crate::gin::testkit::{context, post};
use crate::proxy::testkit::Mem;
use oxccl_core::abort::AbortFlag;
use oxccl_core::bootstrap::Bootstrap;
use oxccl_core::testing::run_ranks;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

const GIN11: &str = "libnccl-net-oxtest-gin.so";
const GIN13: &str = "libnccl-net-oxtest-gin13.so";
const GDAKI: &str = "libnccl-net-oxtest-gin-gdaki.so";
const FAIL: &str = "libnccl-net-oxtest-gin-fail.so";
/// Net plugin only.
const NET_ONLY: &str = "libnccl-net-oxtest.so";

fn path(file: &str) -> String {
    format!("{}/{file}", env!("OXCCL_TEST_NET_PLUGIN_DIR"))
}

fn load(file: &str) -> Arc<PluginLib> {
    PluginLib::load(&path(file)).unwrap_or_else(|e| panic!("loading {file}: {e}"))
}

/// A counter the test plugin exports (`oxtest_gin_put_count`, ...).
fn counter(file: &str, name: &str) -> i32 {
    // SAFETY: the test plugin, already loaded by the caller (no initialisers run again).
    let lib = unsafe { libloading::Library::new(path(file)) }.unwrap();
    // SAFETY: the test plugin exports these as `int f(void)`.
    let f = unsafe { lib.get::<unsafe extern "C" fn() -> i32>(name) }.unwrap();
    // SAFETY: as above.
    unsafe { f() }
}

/// Rank `b`'s runner over `lib`'s GIN plugin (initialized for communicator `comm_id`), with
/// one context of four slots per peer among `nranks` ranks and host windows: the context's
/// memory (in the `Mem`), the abort flag and the runner, last, so that it is dropped first.
fn plugin_runner(
    b: &Bootstrap,
    lib: &Arc<PluginLib>,
    comm_id: u64,
    nranks: usize,
) -> Result<(Mem, ContextMem, AbortFlag, GinRunner), String> {
    let plugin = Arc::new(GinPlugin::new(lib, comm_id).map_err(|e| e.to_string())?);
    let (mem, keep) = context(nranks, 4);
    let abort = AbortFlag::new();
    let transport = GinTransport::Plugin {
        plugin,
        device: 0,
        ptr_type: PTR_HOST,
    };
    let runner =
        GinRunner::start(b, &abort, transport, vec![mem], Idle::Park).map_err(|e| e.to_string())?;
    Ok((keep, mem, abort, runner))
}

/// The plugins' counters are process-wide: tests that read them run one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

#[test]
fn the_gin_side_is_found_beside_the_net_symbol_and_checked() {
    assert_eq!(load(GIN11).gin_version(), Some(11));
    assert_eq!(load(GIN13).gin_version(), Some(13));
    assert_eq!(load(NET_ONLY).gin_version(), None);
    let e = GinPlugin::new(&load(NET_ONLY), 1).unwrap_err().to_string();
    assert!(e.contains("exports none of ncclGinPlugin"), "{e}");
    let e = GinPlugin::new(&load(GDAKI), 1).unwrap_err().to_string();
    assert!(
        e.contains("GIN type 3") && e.contains("proxy type (2)"),
        "{e}"
    );
    let p = GinPlugin::new(&load(GIN11), 1).unwrap();
    assert_eq!((p.name(), p.version()), ("OxTestGin", 11));
    let p = GinPlugin::new(&load(GIN13), 1).unwrap();
    assert_eq!((p.name(), p.version()), ("OxTestGin13", 13));
}

const PART: usize = 5000 + 3;
const RANKS: usize = 3;

fn byte(rank: usize, i: usize) -> u8 {
    (i as u8).wrapping_mul(7) ^ (rank as u8).wrapping_mul(59)
}

/// Every rank (itself included) puts `PART` bytes of its window 1 into every rank's window 2
/// at its own slice, with a signal increment and a counter, then an inline 8-byte value with
/// a 2^40 signal add: once a rank's signals count every rank, every slice holds what its
/// sender had, and every rank's descriptors are done locally (`cis`, the counter).
fn puts_through(file: &str) {
    let _g = serial();
    let lib = load(file);
    let (puts0, open0) = (
        counter(file, "oxtest_gin_put_count"),
        counter(file, "oxtest_gin_open_colls"),
    );
    let strong0 = counter(file, "oxtest_gin_reg_strong_count");
    let results = run_ranks(RANKS as u32, move |b| -> Result<(), String> {
        let rank = b.rank() as usize;
        let (_keep, mem, abort, runner) = plugin_runner(&b, &lib, 77, RANKS)?;
        let (src, dst) = (Mem::new(PART), Mem::new(RANKS * PART + 8 * RANKS));
        // SAFETY: `src` holds PART bytes, written here before any put reads them.
        let s = unsafe { std::slice::from_raw_parts_mut(src.ptr, PART) };
        for (i, v) in s.iter_mut().enumerate() {
            *v = byte(rank, i);
        }
        runner
            .add_window(1, src.ptr as u64, PART as u64)
            .and_then(|()| runner.add_window(2, dst.ptr as u64, (RANKS * PART + 8 * RANKS) as u64))
            .map_err(|e| e.to_string())?;
        for peer in 0..RANKS {
            let g = encode::put(
                2,
                (rank * PART) as u64,
                1,
                0,
                PART as u64,
                Some(3),
                Some(Signal::Inc(0)),
            );
            post(&mem, peer, 0, &g);
            let v = encode::put_value(
                2,
                (RANKS * PART + 8 * rank) as u64,
                0x1122_3344_5566_7700 | rank as u64,
                8,
                Some(Signal::Add(1, 1 << 40)),
            );
            post(&mem, peer, 1, &v);
        }
        let t0 = Instant::now();
        let word = |base, i| mem.word64(base, i).load(Ordering::Acquire);
        let done = |p: usize| mem.ci(p).load(Ordering::Acquire) == 2;
        while word(mem.signals, 0) < RANKS as u64
            || word(mem.signals, 1) < (RANKS as u64) << 40
            || word(mem.counters, 3) < RANKS as u64
            || !(0..RANKS).all(done)
        {
            if let Some(e) = abort.error() {
                return Err(format!("rank {rank} aborted: {e}"));
            }
            if t0.elapsed() > Duration::from_secs(20) {
                return Err(format!(
                    "rank {rank}: signals {} {:#x}, counter {}",
                    word(mem.signals, 0),
                    word(mem.signals, 1),
                    word(mem.counters, 3)
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        // SAFETY: every put into `dst` landed (the signals count them all).
        let d = unsafe { std::slice::from_raw_parts(dst.ptr, RANKS * PART + 8 * RANKS) };
        for p in 0..RANKS {
            let slice = &d[p * PART..(p + 1) * PART];
            if let Some(i) = (0..PART).find(|&i| slice[i] != byte(p, i)) {
                return Err(format!("rank {rank}: byte {i} of rank {p}'s slice differs"));
            }
            let at = RANKS * PART + 8 * p;
            let v = u64::from_le_bytes(d[at..at + 8].try_into().unwrap());
            if v != 0x1122_3344_5566_7700 | p as u64 {
                return Err(format!("rank {rank}: rank {p}'s inline value {v:#x}"));
            }
        }
        b.barrier().map_err(|e| e.to_string())?;
        runner.remove_window(1).map_err(|e| e.to_string())?;
        drop(runner);
        b.barrier().map_err(|e| e.to_string())?;
        Ok(())
    });
    for r in results {
        r.unwrap();
    }
    assert_eq!(
        counter(file, "oxtest_gin_put_count") - puts0,
        (2 * RANKS * RANKS) as i32
    );
    assert_eq!(
        counter(file, "oxtest_gin_reg_strong_count") - strong0,
        RANKS as i32,
        "each rank's signals, with strong ordering"
    );
    assert_eq!(counter(file, "oxtest_gin_open_colls"), open0, "all closed");
    assert!(counter(file, "oxtest_gin_progress_count") > 0);
}

#[test]
fn a_v11_gin_plugin_carries_puts_signals_and_counters() {
    puts_through(GIN11);
}

#[test]
fn a_v13_gin_plugin_carries_them_through_its_context() {
    puts_through(GIN13);
    assert_eq!(counter(GIN13, "oxtest_gin_context_count"), 0, "destroyed");
}

/// A put the plugin refuses aborts the communicator with the plugin's error, on the rank that
/// posted it; nothing hangs.
#[test]
fn a_failing_gin_put_aborts_with_a_clear_error() {
    let lib = load(FAIL);
    let results = run_ranks(2, move |b| -> Result<String, String> {
        let (_keep, mem, abort, runner) = plugin_runner(&b, &lib, 78, 2)?;
        let peer = 1 - b.rank() as usize;
        post(&mem, peer, 0, &encode::signal(Signal::Inc(0)));
        let t0 = Instant::now();
        while !abort.is_aborted() {
            if t0.elapsed() > Duration::from_secs(20) {
                return Err("not aborted".into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(runner);
        Ok(abort.error().map(|e| e.to_string()).unwrap_or_default())
    });
    for r in results {
        let e = r.unwrap();
        assert!(
            e.contains("iputSignal") && e.contains("ncclRemoteError") && e.contains("rank"),
            "{e}"
        );
    }
}
