//! The plugin path end to end, against oxccl's own C test plugin
//! (`tests/c/net_plugin/oxccl_test_net.c`, built by `core/build.rs` into `OUT_DIR`), opened by
//! path exactly as `NCCL_NET_PLUGIN=<path>` opens a third-party plugin.

use super::select::{self, BUILTIN};
use super::{PluginLib, PluginNet, abi, loader};
use crate::gdr::{self, GdrEnv, GpuCaps, GpuRegistration};
use crate::proxy::testkit::{Placement, transfer, transfer_with};
use crate::proxy::{FifoLayout, SlotMemory};
use crate::socket::{SocketConfig, SocketNet};
use crate::{CommRef, HANDLE_BYTES, Net, PTR_CUDA, PTR_DMABUF, PTR_HOST, RecvComm, SendComm};
use oxccl_core::bootstrap::wire::SessionKey;
use oxccl_core::error::{Error, ErrorKind};
use oxccl_core::testing::capture_logs as capture;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A test plugin variant's path.
fn plugin(file: &str) -> String {
    format!("{}/{file}", env!("OXCCL_TEST_NET_PLUGIN_DIR"))
}
const V11: &str = "libnccl-net-oxtest.so";
const V8: &str = "libnccl-net-oxtest8.so";
const V6: &str = "libnccl-net-oxtest6.so";
const V7: &str = "libnccl-net-oxtest7.so";
const V9: &str = "libnccl-net-oxtest9.so";
const V10: &str = "libnccl-net-oxtest10.so";
/// v12 only ("OxTest12"): railId 3, planeId 1 and maxP2pBytes 2^37 in v12's layout.
const V12: &str = "libnccl-net-oxtest12.so";
/// Exports v12 ("OxTest12") and v11 ("OxTest").
const V12_AND_V11: &str = "libnccl-net-oxtest12-11.so";
const NO_SYMBOL: &str = "libnccl-net-oxtest-nosym.so";
const BAD_INIT: &str = "libnccl-net-oxtest-badinit.so";
/// v11 in its fake GPU-memory mode: `PTR_CUDA`, GPU registrations used as host memory.
const GDR: &str = "libnccl-net-oxtest-gdr.so";
/// As [`GDR`], with dma-buf registration and `forceFlush`.
const GDR_DMABUF: &str = "libnccl-net-oxtest-gdr-dmabuf.so";

/// The test plugins keep process-wide counters: tests that read them run one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

fn load(file: &str) -> Arc<PluginLib> {
    PluginLib::load(&plugin(file)).unwrap_or_else(|e| panic!("loading {file}: {e}"))
}

/// A counter the test plugin exports (`oxtest_init_count`, ...).
fn counter(file: &str, name: &str) -> i32 {
    // SAFETY: the test plugin, already loaded by the caller (so no initialisers run again).
    let lib = unsafe { libloading::Library::new(plugin(file)) }.unwrap();
    // SAFETY: the test plugin exports these as `int f(void)`.
    let f = unsafe { lib.get::<unsafe extern "C" fn() -> i32>(name) }.unwrap();
    // SAFETY: as above.
    unsafe { f() }
}

fn builtin() -> Arc<dyn Net> {
    Arc::new(SocketNet::new(
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        "lo",
        0,
        SessionKey {
            secret: 5,
            nonce: 6,
        },
        Duration::from_secs(5),
        SocketConfig::default(),
    ))
}

/// Polls a never-blocking connect or accept until it yields.
fn poll<T>(mut step: impl FnMut() -> oxccl_core::Result<Option<T>>) -> (T, usize) {
    let t0 = Instant::now();
    let mut nulls = 0;
    loop {
        if let Some(v) = step().unwrap() {
            return (v, nulls);
        }
        nulls += 1;
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "connection never completed"
        );
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// A connection from `n0` to `n1`, set up as `net::connect` does (connect from another thread
/// while this one accepts, both returning "not yet" until done).
fn pair(n0: &Arc<dyn Net>, n1: &Arc<dyn Net>) -> (SendComm, RecvComm, usize) {
    let mut h = [0u8; HANDLE_BYTES];
    let mut l = n1.listen(0, &mut h).unwrap();
    let n0c = n0.clone();
    let connector = std::thread::spawn(move || poll(|| n0c.connect(0, &mut h)));
    let (r, _) = poll(|| n1.accept(&mut l));
    let (s, nulls) = connector.join().unwrap();
    n1.close_listen(l).unwrap();
    (s, r, nulls)
}

/// Every size the proxy must carry: empty, one byte, odd, a whole slot, over 1 MiB.
fn messages(slot: usize, count: usize) -> Vec<Vec<u8>> {
    let sizes = [0, 1, 7, 4097, (1 << 20) + 3, slot, slot - 1, 1000, 0, 8];
    (0..count)
        .map(|i| {
            let n = sizes[i % sizes.len()];
            (0..n).map(|k| (k * 13 + i * 101 + 1) as u8).collect()
        })
        .collect()
}

fn net_of(lib: &Arc<PluginLib>, comm_id: u64) -> Arc<dyn Net> {
    Arc::new(PluginNet::new(lib.clone(), comm_id).unwrap())
}

#[test]
fn plugin_v11_loads_by_path_and_reports_itself() {
    let _s = serial();
    let lib = load(V11);
    assert_eq!(lib.version(), 11);
    assert_eq!(lib.name(), "OxTest");
    assert_eq!(lib.path(), plugin(V11));
    // The same file opened again is the same library (init stays once per process for v6-v10).
    assert!(Arc::ptr_eq(&lib, &load(V11)));
    let (net, log) = capture(|| PluginNet::new(lib.clone(), 0xabc).unwrap());
    // The plugin's own INFO line, formatted by the C logger shim from C varargs, carrying the
    // comm id and the default traffic class (-1) of the config oxccl passed.
    assert!(
        log.contains("OxTest: init for comm 0xabc, traffic class -1"),
        "{log}"
    );
    assert!(log.contains("oxccl::net"), "{log}");
    assert_eq!(net.version(), 11);
    assert_eq!(net.devices().unwrap(), 1);
    let p = net.properties(0).unwrap();
    assert_eq!(p.name, "lo");
    assert_eq!(p.pci_path, None);
    assert_eq!(p.ptr_support, PTR_HOST);
    assert_eq!(p.max_recvs, 1);
    assert_eq!(p.max_p2p_bytes, 1 << 40);
    assert_eq!(p.speed_mbps, 10_000);
    assert!(net.properties(1).is_err());
}

#[test]
fn plugin_v11_carries_the_proxy_patterns() {
    let _s = serial();
    let lib = load(V11);
    let (n0, n1) = (net_of(&lib, 1), net_of(&lib, 2));
    let (s, r, nulls) = pair(&n0, &n1);
    assert!(
        nulls >= 1,
        "the test plugin's connect answers NULL at least once"
    );
    let layout = FifoLayout {
        nslots: 4,
        slot_bytes: 2 << 20,
    };
    transfer(n0, n1, s, r, layout, messages(2 << 20, 41));
    assert_eq!(counter(V11, "oxtest_open_comms"), 0, "every comm closed");
}

#[test]
fn plugin_v11_inits_and_finalizes_per_communicator() {
    let _s = serial();
    let lib = load(V11);
    let (i0, f0) = (
        counter(V11, "oxtest_init_count"),
        counter(V11, "oxtest_finalize_count"),
    );
    let (a, b) = (net_of(&lib, 7), net_of(&lib, 8));
    assert_eq!(counter(V11, "oxtest_init_count"), i0 + 2);
    drop((a, b));
    assert_eq!(counter(V11, "oxtest_finalize_count"), f0 + 2);
}

#[test]
fn plugin_requests_stop_at_the_abi_limit_and_complete() {
    let _s = serial();
    let lib = load(V11);
    let (n0, n1) = (net_of(&lib, 3), net_of(&lib, 4));
    let (mut s, mut r, _) = pair(&n0, &n1);
    let mut src = vec![0u8; 64];
    let mut dst = vec![0u8; 64 * 40];
    let smh = n0
        .reg_mr(CommRef::Send(&s), src.as_mut_ptr(), src.len(), PTR_HOST)
        .unwrap();
    let rmh = n1
        .reg_mr(CommRef::Recv(&r), dst.as_mut_ptr(), dst.len(), PTR_HOST)
        .unwrap();
    let mut sends = Vec::new();
    for i in 0..abi::MAX_REQUESTS {
        src[i] = i as u8;
        // SAFETY: `src` is registered and outlives the requests (tested to completion below).
        let q = unsafe { n0.isend(&mut s, src.as_ptr().add(i), 1, 0, &smh) }.unwrap();
        sends.push(q.expect("a request below the limit"));
    }
    // SAFETY: as above; the adapter answers "busy" without calling the plugin.
    let over = unsafe { n0.isend(&mut s, src.as_ptr(), 1, 0, &smh) }.unwrap();
    assert!(
        over.is_none(),
        "request {} must wait",
        abi::MAX_REQUESTS + 1
    );
    let mut recvs = Vec::new();
    for i in 0..abi::MAX_REQUESTS {
        // SAFETY: `dst` is registered and outlives the requests.
        let q = unsafe { n1.irecv(&mut r, dst.as_mut_ptr().add(64 * i), 64, 0, &rmh) }.unwrap();
        recvs.push(q.expect("a receive below the limit"));
    }
    let t0 = Instant::now();
    let mut sizes = vec![None; recvs.len()];
    let mut sent = vec![false; sends.len()];
    while sizes.iter().any(Option::is_none) || sent.iter().any(|d| !d) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "requests never completed"
        );
        for (q, d) in sends.iter_mut().zip(&mut sent) {
            if !*d {
                *d = n0.test(q).unwrap().is_some();
            }
        }
        for (q, got) in recvs.iter_mut().zip(&mut sizes) {
            if got.is_none() {
                *got = n1.test(q).unwrap();
            }
        }
    }
    for (i, got) in sizes.iter().enumerate() {
        assert_eq!(*got, Some(1), "receive {i}");
        assert_eq!(dst[64 * i], i as u8, "receive {i}");
    }
    // A finished request is never tested again.
    assert!(n0.test(&mut sends[0]).is_err());
    // Slots are free again.
    // SAFETY: as above.
    let again = unsafe { n0.isend(&mut s, src.as_ptr(), 1, 0, &smh) }.unwrap();
    assert!(again.is_some());
    drop(again);
    n0.dereg_mr(CommRef::Send(&s), smh).unwrap();
    n1.dereg_mr(CommRef::Recv(&r), rmh).unwrap();
    n0.close_send(s).unwrap();
    n1.close_recv(r).unwrap();
}

#[test]
fn plugin_v8_runs_through_the_adapter() {
    let _s = serial();
    let lib = load(V8);
    assert_eq!(lib.version(), 8);
    assert_eq!(lib.name(), "OxTest8");
    let (n0, log) = capture(|| net_of(&lib, 1));
    let n1 = net_of(&lib, 2);
    // v6-v10 plugins are initialized once per process, whatever the number of communicators.
    assert_eq!(counter(V8, "oxtest_init_count"), 1);
    let _ = log;
    let p = n0.properties(0).unwrap();
    assert_eq!(
        p.max_p2p_bytes,
        abi::MAX_NET_SIZE,
        "the v8 adapter's 1 GiB cap"
    );
    assert_eq!(p.max_recvs, 1);
    let (mut s, r, nulls) = pair(&n0, &n1);
    assert!(nulls >= 1);
    // Over 1 GiB is refused before the plugin sees it.
    let mut one = [0u8; 1];
    let mh = n0
        .reg_mr(CommRef::Send(&s), one.as_mut_ptr(), 1, PTR_HOST)
        .unwrap();
    // SAFETY: the size is rejected before any byte is read.
    let big = unsafe { n0.isend(&mut s, one.as_ptr(), (1 << 30) + 1, 0, &mh) };
    let err = big.err().expect("a send over 1 GiB fails");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    n0.dereg_mr(CommRef::Send(&s), mh).unwrap();
    let layout = FifoLayout {
        nslots: 3,
        slot_bytes: (1 << 20) + 64,
    };
    transfer(n0, n1, s, r, layout, messages((1 << 20) + 64, 23));
    assert_eq!(counter(V8, "oxtest_open_comms"), 0);
}

/// On two networks of plugin `name`: a connection takes `max_reqs` sends in flight and asks the
/// next to wait; a 2 GiB registration is taken or refused as `big_registration` says (v6/v7 cap
/// sizes at 2 GiB); then the proxy's patterns move 17 messages of up to 1 MiB + 64 through it.
fn requests_registration_and_transfer(
    n0: Arc<dyn Net>,
    n1: Arc<dyn Net>,
    name: &str,
    max_reqs: usize,
    big_registration: bool,
) {
    let (mut s, r, nulls) = pair(&n0, &n1);
    assert!(nulls >= 1, "{name}: connect answered NULL first");
    let mut one = [7u8; 1];
    let big = n0.reg_mr(CommRef::Send(&s), one.as_mut_ptr(), 1 << 31, PTR_HOST);
    assert_eq!(
        big.is_ok(),
        big_registration,
        "{name}: a 2 GiB registration"
    );
    if let Ok(mh) = big {
        n0.dereg_mr(CommRef::Send(&s), mh).unwrap();
    }
    let mh = n0
        .reg_mr(CommRef::Send(&s), one.as_mut_ptr(), 1, PTR_HOST)
        .unwrap();
    let mut reqs = Vec::new();
    for i in 0..max_reqs {
        // SAFETY: `one` is registered and outlives the requests (dropped untested below, with
        // the connection closed before `one` goes).
        let q = unsafe { n0.isend(&mut s, one.as_ptr(), 1, 0, &mh) }.unwrap();
        reqs.push(q.unwrap_or_else(|| panic!("{name}: request {i} below the limit")));
    }
    // SAFETY: as above.
    let over = unsafe { n0.isend(&mut s, one.as_ptr(), 1, 0, &mh) }.unwrap();
    assert!(over.is_none(), "{name}: request {} must wait", max_reqs + 1);
    drop(reqs);
    n0.dereg_mr(CommRef::Send(&s), mh).unwrap();
    n0.close_send(s).unwrap();
    n1.close_recv(r).unwrap();

    let (s, r, _) = pair(&n0, &n1);
    let layout = FifoLayout {
        nslots: 3,
        slot_bytes: (1 << 20) + 64,
    };
    transfer(n0, n1, s, r, layout, messages((1 << 20) + 64, 17));
}

#[test]
fn plugin_v6_v7_v9_v10_run_through_their_adapters() {
    let _s = serial();
    for (file, version, name, max_p2p, max_reqs) in [
        (V6, 6, "OxTest6", abi::MAX_NET_SIZE, abi::MAX_REQUESTS_V6),
        (V7, 7, "OxTest7", abi::MAX_NET_SIZE, abi::MAX_REQUESTS),
        (V9, 9, "OxTest9", 1 << 36, abi::MAX_REQUESTS),
        (V10, 10, "OxTest10", 1 << 36, abi::MAX_REQUESTS),
    ] {
        let lib = load(file);
        assert_eq!((lib.version(), lib.name()), (version, name.to_string()));
        let (n0, n1) = (net_of(&lib, 1), net_of(&lib, 2));
        assert_eq!(
            counter(file, "oxtest_init_count"),
            1,
            "{name}: one init per process"
        );
        let p = n0.properties(0).unwrap();
        assert_eq!(p.max_p2p_bytes, max_p2p, "{name}: maxP2pBytes");
        assert_eq!((p.name.as_str(), p.max_recvs), ("lo", 1), "{name}");

        requests_registration_and_transfer(n0, n1, name, max_reqs, version > 7);
        assert_eq!(
            counter(file, "oxtest_open_comms"),
            0,
            "{name}: every comm closed"
        );
    }
}

/// v12 as NCCL 2.30 takes it: v11's per-communicator calls, v12's properties layout.
#[test]
fn plugin_v12_reads_its_properties_layout_and_runs_like_v11() {
    let _s = serial();
    // This test is the only one to load this file, so the load is logged here.
    let (lib, log) = capture(|| load(V12));
    assert_eq!((lib.version(), lib.name()), (12, "OxTest12".to_string()));
    assert!(
        log.contains("NET/Plugin: Loaded net plugin OxTest12 (v12) from"),
        "{log}"
    );
    let (i0, f0) = (
        counter(V12, "oxtest_init_count"),
        counter(V12, "oxtest_finalize_count"),
    );
    let (n0, log) = capture(|| net_of(&lib, 0x12));
    let n1 = net_of(&lib, 0x13);
    assert_eq!(
        counter(V12, "oxtest_init_count"),
        i0 + 2,
        "one init per communicator"
    );
    assert!(
        log.contains("OxTest: init for comm 0x12, traffic class -1"),
        "{log}"
    );
    assert!(log.contains("railId 3, planeId 1"), "{log}");
    let p = n0.properties(0).unwrap();
    assert_eq!(p.max_p2p_bytes, 1 << 37, "maxP2pBytes at v12's offset 104");
    assert_eq!(
        (p.name.as_str(), p.max_recvs, p.speed_mbps, p.ptr_support),
        ("lo", 1, 10_000, PTR_HOST)
    );
    assert!(!n0.force_flush(0).unwrap());

    requests_registration_and_transfer(n0, n1, "OxTest12", abi::MAX_REQUESTS, true);
    assert_eq!(counter(V12, "oxtest_open_comms"), 0, "every comm closed");
    assert_eq!(
        counter(V12, "oxtest_finalize_count"),
        f0 + 2,
        "one finalize per communicator"
    );
}

/// NCCL 2.30 searches v12 first, so a library exporting v12 and v11 is used as v12.
#[test]
fn a_library_exporting_v12_and_v11_is_taken_as_v12() {
    let _s = serial();
    let (lib, log) = capture(|| load(V12_AND_V11));
    assert_eq!((lib.version(), lib.name()), (12, "OxTest12".to_string()));
    assert!(
        log.contains("NET/Plugin: Loaded net plugin OxTest12 (v12) from"),
        "{log}"
    );
    let (net, log) = capture(|| {
        select::select(std::slice::from_ref(&lib), Some("oxtest12"), 5, builtin).unwrap()
    });
    assert!(log.contains("Using network OxTest12 (plugin v12"), "{log}");
    let p = net.properties(0).unwrap();
    assert_eq!(p.max_p2p_bytes, 1 << 37, "v12's getProperties, not v11's");
}

#[test]
fn a_library_without_the_symbol_falls_back_to_sockets_with_a_log_line() {
    let path = plugin(NO_SYMBOL);
    let e = loader::open(&path).err().expect("no symbol");
    assert_eq!(e, loader::OpenError::NoSymbol(path.clone()));
    let (libs, log) = capture(|| select::load_all(Some(&path)));
    assert!(libs.is_empty());
    assert!(log.contains("exports none of ncclNetPlugin_v12"), "{log}");
    let (net, log) = capture(|| select::select(&libs, None, 1, builtin).unwrap());
    assert_eq!(net.name(), BUILTIN);
    assert!(log.contains("Using internal network Socket"), "{log}");
}

#[test]
fn a_missing_default_library_is_logged_and_sockets_are_used() {
    let (libs, log) = capture(|| select::load_all(Some("/nonexistent/libnccl-net.so")));
    assert!(libs.is_empty());
    assert!(
        log.contains("WARN"),
        "a named plugin that is missing warns: {log}"
    );
    assert!(log.contains("/nonexistent/libnccl-net.so"), "{log}");
    assert!(select::load_all(Some("none")).is_empty());
}

#[test]
fn a_plugin_whose_init_fails_falls_back_to_sockets() {
    let lib = load(BAD_INIT);
    assert_eq!(lib.name(), "OxTestBad");
    let (net, log) =
        capture(|| select::select(std::slice::from_ref(&lib), None, 1, builtin).unwrap());
    assert_eq!(net.name(), BUILTIN);
    // The plugin's own WARN (C varargs through the shim), then ours.
    assert!(log.contains("init fails on purpose (code 2)"), "{log}");
    assert!(log.contains("failed to initialize"), "{log}");
    assert!(
        log.contains("falling back to the internal network Socket"),
        "{log}"
    );
    // Asked for by name, a failing plugin is an error naming it.
    let e = select::select(&[lib], Some("OxTestBad"), 1, builtin)
        .err()
        .expect("error");
    assert_eq!(e.kind(), ErrorKind::InvalidUsage);
    assert!(
        e.to_string().contains("failed to initialize: OxTestBad"),
        "{e}"
    );
}

#[test]
fn nccl_net_selects_by_name_and_socket_forces_the_builtin() {
    let _s = serial();
    let libs = [load(V8), load(V11)];
    let (net, log) = capture(|| select::select(&libs, Some("oxtest"), 9, builtin).unwrap());
    assert_eq!(net.name(), "OxTest");
    assert!(log.contains("Using network OxTest (plugin v11"), "{log}");
    let net = select::select(&libs, None, 9, builtin).unwrap();
    assert_eq!(
        net.name(),
        "OxTest8",
        "without NCCL_NET the first plugin that works wins"
    );
    let net = select::select(&libs, Some("SOCKET"), 9, builtin).unwrap();
    assert_eq!(net.name(), BUILTIN);
}

#[test]
fn nccl_net_naming_a_missing_network_is_an_error() {
    let _s = serial();
    let libs = [load(V11)];
    let e: Error = select::select(&libs, Some("IB"), 1, builtin)
        .err()
        .expect("error");
    assert_eq!(e.kind(), ErrorKind::InvalidUsage);
    let msg = e.to_string();
    assert!(msg.contains("NCCL_NET=IB"), "{msg}");
    assert!(msg.contains("Socket") && msg.contains("OxTest"), "{msg}");
    let e = select::select(&[], Some("Libfabric"), 1, builtin)
        .err()
        .expect("error");
    assert!(e.to_string().contains("NCCL_NET_PLUGIN"), "{e}");
}

/// Set in the child process of [`plugin_v11_connects_across_two_processes`]: the listener's
/// handle, in hex.
const CHILD_ENV: &str = "OXCCL_TEST_NET_PLUGIN_CHILD";

/// The sending half of [`plugin_v11_connects_across_two_processes`], run by that test in a
/// child process (this test binary, filtered to this test); on its own it does nothing.
#[test]
fn child_sends_over_the_plugin() {
    let Ok(hex) = std::env::var(CHILD_ENV) else {
        return;
    };
    let bytes: Vec<u8> = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    let mut handle: crate::Handle = bytes.try_into().unwrap();
    let lib = load(V11);
    let net = net_of(&lib, 77);
    let (mut s, _) = poll(|| net.connect(0, &mut handle));
    let msgs = messages(2 << 20, 12);
    let mut buf = msgs.concat();
    let mh = net
        .reg_mr(CommRef::Send(&s), buf.as_mut_ptr(), buf.len(), PTR_HOST)
        .unwrap();
    let mut off = 0;
    for m in &msgs {
        // SAFETY: `buf` is registered and outlives the request, which is tested to completion.
        let (mut q, _) =
            poll(|| unsafe { net.isend(&mut s, buf.as_ptr().add(off), m.len(), 0, &mh) });
        let (n, _) = poll(|| net.test(&mut q));
        assert_eq!(n, m.len());
        off += m.len();
    }
    net.dereg_mr(CommRef::Send(&s), mh).unwrap();
    net.close_send(s).unwrap();
}

#[test]
fn plugin_v11_connects_across_two_processes() {
    if std::env::var_os(CHILD_ENV).is_some() {
        return;
    }
    let _s = serial();
    let lib = load(V11);
    let net = net_of(&lib, 76);
    let mut h = [0u8; HANDLE_BYTES];
    let mut l = net.listen(0, &mut h).unwrap();
    let hex: String = h.iter().map(|b| format!("{b:02x}")).collect();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "plugin::tests::child_sends_over_the_plugin",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(CHILD_ENV, hex)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (mut r, _) = poll(|| net.accept(&mut l));
    net.close_listen(l).unwrap();
    let slot = 2 << 20;
    let mut buf = vec![0u8; slot];
    let mh = net
        .reg_mr(CommRef::Recv(&r), buf.as_mut_ptr(), slot, PTR_HOST)
        .unwrap();
    for (i, m) in messages(slot, 12).iter().enumerate() {
        // SAFETY: `buf` is registered and outlives the request, which is tested to completion.
        let (mut q, _) = poll(|| unsafe { net.irecv(&mut r, buf.as_mut_ptr(), slot, 0, &mh) });
        let (n, _) = poll(|| net.test(&mut q));
        assert_eq!(n, m.len(), "message {i}: the size the plugin reports");
        assert!(buf[..n] == m[..], "message {i} differs");
    }
    net.dereg_mr(CommRef::Recv(&r), mh).unwrap();
    net.close_recv(r).unwrap();
    assert!(
        child.wait().unwrap().success(),
        "the sending process failed"
    );
}

/// The GPU-memory counters of a test plugin: (regMr HOST, regMr CUDA, regMrDmaBuf, iflush).
fn gdr_counters(file: &str) -> [i32; 4] {
    [
        "oxtest_regmr_host_count",
        "oxtest_regmr_cuda_count",
        "oxtest_regmr_dmabuf_count",
        "oxtest_iflush_count",
    ]
    .map(|name| counter(file, name))
}

/// One side of a transfer with its slots in (stand-in) GPU memory.
fn gpu(reg: GpuRegistration<'_>) -> Placement<'_> {
    Placement {
        mem: SlotMemory::Gpu,
        gpu: reg,
    }
}

const HOST_SIDE: Placement<'static> = Placement {
    mem: SlotMemory::Host,
    gpu: GpuRegistration {
        flush: false,
        dma_buf: None,
        bind: None,
    },
};

/// The proxy's transfer sizes (0, 1, 7, 4097, 1 MiB + 3, whole slots) through slots that both
/// sides register as GPU memory (`regMr` with `PTR_CUDA`, which the fake mode uses as host
/// memory); receives are flushed only when asked to.
#[test]
fn plugin_gdr_registers_gpu_slots_as_cuda_and_flushes_when_asked() {
    let _s = serial();
    let lib = load(GDR);
    let n0 = net_of(&lib, 1);
    let n1 = net_of(&lib, 2);
    let p = n0.properties(0).unwrap();
    assert_eq!(p.ptr_support, PTR_HOST | PTR_CUDA);
    assert!(!n0.force_flush(0).unwrap());
    let layout = FifoLayout {
        nslots: 4,
        slot_bytes: 2 << 20,
    };
    let msgs = messages(2 << 20, 21);
    let with_bytes = msgs.iter().filter(|m| !m.is_empty()).count() as i32;
    for flush in [false, true] {
        let before = gdr_counters(GDR);
        let (s, r, _) = pair(&n0, &n1);
        let reg = GpuRegistration {
            flush,
            ..GpuRegistration::default()
        };
        let ((), log) = capture(|| {
            transfer_with(
                n0.clone(),
                n1.clone(),
                s,
                r,
                layout,
                msgs.clone(),
                [gpu(reg), gpu(reg)],
            )
        });
        assert!(log.contains("OxTest: regMr CUDA"), "{log}");
        let after = gdr_counters(GDR);
        let delta: Vec<i32> = after.iter().zip(before).map(|(a, b)| a - b).collect();
        let flushes = if flush { with_bytes } else { 0 };
        assert_eq!(
            delta,
            [0, 2, 0, flushes],
            "flush {flush}: (regMr HOST, regMr CUDA, regMrDmaBuf, iflush)"
        );
    }
    // NCCL_NET_GDR_READ=0: the sender's slots stay in host memory, the receiver's do not.
    let before = gdr_counters(GDR);
    let (s, r, _) = pair(&n0, &n1);
    let reg = GpuRegistration::default();
    transfer_with(n0, n1, s, r, layout, msgs, [HOST_SIDE, gpu(reg)]);
    let after = gdr_counters(GDR);
    assert_eq!(after[0] - before[0], 1, "one host registration");
    assert_eq!(after[1] - before[1], 1, "one GPU registration");
    assert_eq!(counter(GDR, "oxtest_open_comms"), 0, "every comm closed");
}

/// A network offering dma-buf and `forceFlush`: the decision takes both, the proxy registers
/// the slots through the descriptor its export gives (a stand-in file here: the fake mode only
/// checks that it is open) and flushes every receive with bytes.
#[test]
fn plugin_gdr_registers_through_a_dma_buf_and_forced_flushes() {
    let _s = serial();
    let lib = load(GDR_DMABUF);
    let n0 = net_of(&lib, 1);
    let n1 = net_of(&lib, 2);
    let p = n0.properties(0).unwrap();
    assert_eq!(p.ptr_support, PTR_HOST | PTR_CUDA | PTR_DMABUF);
    assert!(n0.force_flush(0).unwrap(), "forceFlush of a v11 device");
    let hopper = GpuCaps {
        rdma: true,
        dma_buf: true,
        compute_capability: Some((9, 0)),
        path: None,
    };
    let d = gdr::decide(&p, true, hopper, GdrEnv::default());
    assert!(d.send && d.recv && d.dma_buf && d.flush, "{d:?}");
    let exported = std::sync::atomic::AtomicUsize::new(0);
    let export = |_: *mut u8, n: usize| -> Option<OwnedFd> {
        assert!(n > 0);
        exported.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some(std::fs::File::open("/dev/null").unwrap().into())
    };
    let reg = GpuRegistration {
        flush: d.flush,
        dma_buf: Some(&export),
        bind: None,
    };
    let layout = FifoLayout {
        nslots: 4,
        slot_bytes: 2 << 20,
    };
    let msgs = messages(2 << 20, 12);
    let with_bytes = msgs.iter().filter(|m| !m.is_empty()).count() as i32;
    let before = gdr_counters(GDR_DMABUF);
    let (s, r, _) = pair(&n0, &n1);
    let ((), log) = capture(|| {
        transfer_with(
            n0.clone(),
            n1.clone(),
            s,
            r,
            layout,
            msgs,
            [gpu(reg), gpu(reg)],
        )
    });
    assert!(log.contains("OxTest: regMrDmaBuf CUDA"), "{log}");
    let after = gdr_counters(GDR_DMABUF);
    let delta: Vec<i32> = after.iter().zip(before).map(|(a, b)| a - b).collect();
    assert_eq!(delta, [0, 0, 2, with_bytes]);
    assert_eq!(exported.load(std::sync::atomic::Ordering::Relaxed), 2);
    // Without an export (the driver gave no descriptor) the slots fall back to regMr CUDA.
    let before = gdr_counters(GDR_DMABUF);
    let (s, r, _) = pair(&n0, &n1);
    let no_export = |_: *mut u8, _: usize| -> Option<OwnedFd> { None };
    let reg = GpuRegistration {
        flush: false,
        dma_buf: Some(&no_export),
        bind: None,
    };
    transfer_with(
        n0,
        n1,
        s,
        r,
        layout,
        messages(2 << 20, 3),
        [gpu(reg), gpu(reg)],
    );
    let after = gdr_counters(GDR_DMABUF);
    assert_eq!(after[1] - before[1], 2, "regMr CUDA instead");
    assert_eq!(
        counter(GDR_DMABUF, "oxtest_open_comms"),
        0,
        "every comm closed"
    );
}

/// Host-only plugins keep their behaviour: no `forceFlush`, no GPU bits; asked to register GPU
/// memory, the test plugin refuses.
#[test]
fn plugin_without_gdr_reports_host_memory_only() {
    let _s = serial();
    let lib = load(V9);
    let n0 = net_of(&lib, 1);
    assert_eq!(n0.properties(0).unwrap().ptr_support, PTR_HOST);
    assert!(!n0.force_flush(0).unwrap());
    let d = gdr::decide(
        &n0.properties(0).unwrap(),
        false,
        GpuCaps {
            rdma: true,
            dma_buf: true,
            compute_capability: None,
            path: None,
        },
        GdrEnv::default(),
    );
    assert_eq!(d, gdr::NetGdr::default());
}
