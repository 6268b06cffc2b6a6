//! Helpers shared by oxccl's tests (unit, ffi and integration); not part of the API.

use crate::abort::AbortFlag;
use crate::bootstrap::{Bootstrap, BootstrapOptions, UniqueId};
use std::sync::Arc;
use std::time::Duration;

/// Runs `f` and returns what it logged on this thread (every level), as the log subscriber
/// formats it.
pub fn capture_logs<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone)]
    struct Buf(Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            crate::lock::lock(&self.0).extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buf = Buf(Arc::new(std::sync::Mutex::new(Vec::new())));
    let writer = buf.clone();
    let sub = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let out = tracing::subscriber::with_default(sub, f);
    let text = String::from_utf8_lossy(&crate::lock::lock(&buf.0)).into_owned();
    (out, text)
}

/// A deterministic xorshift64* generator: fuzz tests reproduce from their seed without a crate.
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (any value; 0 is remapped).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Fills `b` with random bytes.
    pub fn fill(&mut self, b: &mut [u8]) {
        for x in b {
            *x = self.next_u64() as u8;
        }
    }

    /// `len` random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.fill(&mut v);
        v
    }
}

/// Runs `f(rank, comm, stream)` on `n` host ranks in threads of this process, each with a fresh
/// communicator (`setup` applied after init) and stream; returns the results by rank. The
/// communicators are destroyed afterwards (an aborted one's destroy error is ignored).
pub fn on_host_ranks<T: Send>(
    n: usize,
    setup: impl Fn(&crate::Communicator<crate::HostBackend>) + Sync,
    f: impl Fn(usize, &crate::Communicator<crate::HostBackend>, &crate::host::HostStream) -> T + Sync,
) -> Vec<T> {
    let backend = std::sync::Arc::new(crate::HostBackend::new());
    let id = crate::bootstrap::UniqueId::generate(&crate::bootstrap::BootstrapOptions::from_env())
        .expect("unique id");
    std::thread::scope(|sc| {
        let hs: Vec<_> = (0..n)
            .map(|rank| {
                let (backend, f, setup) = (backend.clone(), &f, &setup);
                sc.spawn(move || {
                    let comm = crate::Communicator::init_rank(
                        backend.clone(),
                        n,
                        id,
                        rank,
                        0,
                        crate::config::CommConfig::default(),
                    )
                    .expect("init");
                    setup(&comm);
                    let stream = backend.stream_create().expect("stream");
                    let out = f(rank, &comm, &stream);
                    let _ = comm.destroy();
                    out
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("rank thread"))
            .collect()
    })
}

/// Bootstrap options with short handshake and linger times, so tests stay fast.
pub fn bootstrap_opts(init_timeout: Duration) -> BootstrapOptions {
    BootstrapOptions {
        init_timeout,
        handshake_timeout: Duration::from_millis(500),
        root_linger: Duration::from_secs(30),
        ..BootstrapOptions::default()
    }
}

/// Initialises `n` bootstrap ranks on threads of this process and runs `f` on each; returns the
/// results by rank (the bootstrap's tests, and the network's in `oxccl-net`).
pub fn run_ranks<T, F>(n: u32, f: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(Bootstrap) -> T + Send + Sync + 'static,
{
    let o = bootstrap_opts(Duration::from_secs(20));
    let id = UniqueId::generate(&o).expect("generate");
    let f = Arc::new(f);
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let (f, o) = (f.clone(), o.clone());
            std::thread::spawn(move || {
                let b = Bootstrap::init(&id, r, n, &o, &AbortFlag::new())
                    .unwrap_or_else(|e| panic!("rank {r} init: {e}"));
                f(b)
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("rank thread panicked"))
        .collect()
}
