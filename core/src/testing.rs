//! Helpers shared by oxccl's tests (unit, ffi and integration); not part of the API.

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
