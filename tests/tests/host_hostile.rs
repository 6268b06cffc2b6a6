//! reliability suite T16/T17 on the host backend: malformed traffic to every listener of ours (the
//! bootstrap root, each rank's bootstrap listener, the socket transport's data listeners) during
//! init and in steady state. The real init and collectives still succeed with correct results,
//! nothing crashes, and the process is idle afterwards.
//!
//! `OXCCL_TEST_PARALLEL` sets the number of parallel silent connections (default 200 for CI;
//! the suite's figure is 1000).

use oxccl_core::bootstrap::{BootstrapOptions, UniqueId};
use oxccl_core::config::CommConfig;
use oxccl_core::testing::Rng;
use oxccl_core::{Communicator, HostBackend};
use oxccl_tests::harness::{all_reduce, proc_status};
use std::collections::HashSet;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A hello with the id's secret (an attacker who stole the id; the frames after it are garbage).
fn hello(id: &UniqueId, kind: u8) -> Vec<u8> {
    let mut b = b"OXCCL-HS".to_vec();
    b.extend_from_slice(&1u16.to_le_bytes());
    b.push(kind);
    b.push(0);
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&id.0[32..48]);
    b
}

/// One round of every kind of malformed traffic against `addr`; returns connections to hold.
fn attack(addr: SocketAddr, id: &UniqueId, rng: &mut Rng) -> Vec<TcpStream> {
    let mut held = Vec::new();
    let mut send = |bytes: &[u8], keep: bool| {
        if let Ok(mut c) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
            let _ = c.write_all(bytes);
            if keep {
                held.push(c);
            }
        }
    };
    send(&[], false); // connect and close
    for n in 1..8 {
        send(&b"OXCCL-HS"[..n], true); // partial magic
    }
    send(b"GET / HTTP/1.1\r\n\r\n", false); // wrong magic
    send(&rng.bytes(64), false);
    for kind in [1u8, 2, 3] {
        // Right secret, then a frame announcing 2^40 bytes, then garbage.
        let mut m = hello(id, kind);
        m.extend_from_slice(&7u64.to_le_bytes());
        m.extend_from_slice(&(1u64 << 40).to_le_bytes());
        m.extend_from_slice(&rng.bytes(100));
        send(&m, true);
    }
    let mut wrong = hello(id, 2);
    wrong[20] ^= 0xff; // wrong secret
    send(&wrong, true);
    held
}

/// The TCP ports this process listens on (from /proc: sockets we hold in state LISTEN).
fn own_listeners() -> Vec<u16> {
    let inodes: HashSet<String> = std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter_map(|l| {
                    let s = l.to_string_lossy().into_owned();
                    s.strip_prefix("socket:[")?
                        .strip_suffix(']')
                        .map(String::from)
                })
                .collect()
        })
        .unwrap_or_default();
    let mut ports = Vec::new();
    for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
        for line in std::fs::read_to_string(table)
            .unwrap_or_default()
            .lines()
            .skip(1)
        {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() > 9
                && f[3] == "0A"
                && inodes.contains(f[9])
                && let Some(port) = f[1].rsplit(':').next()
            {
                ports.push(u16::from_str_radix(port, 16).unwrap_or(0));
            }
        }
    }
    ports
}

/// User + system CPU time of this process, in clock ticks.
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)
}

fn all_reduce_ok(comm: &Communicator<HostBackend>, stream: &oxccl_core::host::HostStream) -> bool {
    let n = comm.nranks();
    let mut buf = vec![(comm.rank() + 1) as f32; 4096];
    all_reduce(comm, stream, &mut buf).expect("allreduce under attack");
    buf.iter().all(|&x| x == (n * (n + 1) / 2) as f32)
}

#[test]
fn malformed_traffic_to_every_listener_leaves_init_and_collectives_intact() {
    let parallel: usize = std::env::var("OXCCL_TEST_PARALLEL")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let n = 3;
    let id = UniqueId::generate(&BootstrapOptions::from_env()).expect("id");
    let root = id.root_addr().expect("root");
    let mut rng = Rng::new(16);
    // During init: every kind of garbage, plus `parallel` silent connections, at the root.
    let mut held = attack(root, &id, &mut rng);
    for _ in 0..parallel {
        if let Ok(c) = TcpStream::connect(root) {
            held.push(c);
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let slowloris = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            // One byte of a hello every 200 ms.
            let Ok(mut c) = TcpStream::connect(root) else {
                return;
            };
            for b in b"OXCCL-HS".iter().cycle() {
                if stop.load(Ordering::Acquire) || c.write_all(&[*b]).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    };
    let backend = Arc::new(HostBackend::new());
    let before = own_listeners();
    let t = Instant::now();
    let comms: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let b = backend.clone();
                s.spawn(move || Communicator::init_rank(b, n, id, r, 0, CommConfig::default()))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let init_took = t.elapsed();
    let comms: Vec<Communicator<HostBackend>> = comms
        .into_iter()
        .map(|c| c.expect("init succeeds under attack"))
        .collect();
    // Steady state: every listener we own now (root, bootstrap, data) gets the same treatment
    // while the ranks run collectives.
    let ports: Vec<u16> = own_listeners()
        .into_iter()
        .filter(|p| !before.contains(p) || *p == root.port())
        .collect();
    assert!(ports.len() >= n, "found listeners {ports:?}");
    let t = Instant::now();
    let steady_ok = std::thread::scope(|s| {
        let ranks: Vec<_> = comms
            .iter()
            .map(|c| {
                let b = backend.clone();
                s.spawn(move || {
                    let stream = b.stream_create().unwrap();
                    (0..30).all(|_| all_reduce_ok(c, &stream))
                })
            })
            .collect();
        let mut rng = Rng::new(17);
        for &p in &ports {
            held.extend(attack(SocketAddr::new(root.ip(), p), &id, &mut rng));
        }
        ranks.into_iter().all(|h| h.join().unwrap())
    });
    let steady_took = t.elapsed();
    assert!(steady_ok, "wrong results under attack");
    stop.store(true, Ordering::Release);
    drop(held);
    let _ = slowloris.join();
    // Idle: handshake threads of the dropped connections end within their 5 s deadline; then
    // the communicators' own threads only.
    std::thread::sleep(Duration::from_secs(6));
    let rss = proc_status("VmRSS:");
    let (c0, t0) = (cpu_ticks(), Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    let ticks_per_s = 100.0;
    let idle_cpu = (cpu_ticks() - c0) as f64 / ticks_per_s / t0.elapsed().as_secs_f64() * 100.0;
    eprintln!(
        "init under attack {init_took:?} ({parallel} parallel silent connections), 30 allreduces \
         while {} listeners were attacked {steady_took:?}, idle CPU {idle_cpu:.1}% of one core, \
         RSS {rss} KiB",
        ports.len()
    );
    assert!(init_took < Duration::from_secs(20), "{init_took:?}");
    assert!(idle_cpu < 5.0, "idle CPU {idle_cpu:.1}%");
    for c in &comms {
        c.destroy().unwrap();
    }
    drop(comms);
    // T17: no listener of the communicators remains after destroy (the root lingers on purpose
    // to answer late ranks).
    let t = Instant::now();
    loop {
        let left: Vec<u16> = own_listeners()
            .into_iter()
            .filter(|p| ports.contains(p) && *p != root.port())
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "listeners left after destroy: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
