//! Plays a kernel built against NVIDIA's 2.28.9 `nccl_device.h` on the host backend (where
//! "device" memory is host memory): reads a GIN proxy context's struct and posts descriptors to
//! its rings as the device code does, with an encoder written from the proxy descriptor's
//! published layout (not oxccl's decoder).

// Each test binary that includes this uses part of it.
#![allow(dead_code)]

use oxccl_ffi::abi::ncclResult_t as R;
use oxccl_ffi::abi::{
    NCCL_WIN_COLL_SYMMETRIC, ncclComm_t, ncclDevComm_t, ncclDevCommRequirements_t,
    ncclDevResourceRequirements_t, ncclWindow_t,
};
use oxccl_ffi::api::*;
use std::ffi::{CStr, c_int, c_void};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Readies this test binary for the three-rank scenario: the host backend, two GIN contexts of
/// four slots, `NCCL_NET_PLUGIN=plugin` when given, and a watchdog that ends the process when
/// the test has not finished within 120 s. The first thing the test does.
pub fn host_gin_process(plugin: Option<&str>) {
    // SAFETY: called first, before any thread reads the environment.
    unsafe {
        std::env::set_var("OXCCL_BACKEND", "host");
        std::env::set_var("NCCL_GIN_NCONTEXTS", "2");
        std::env::set_var("NCCL_GIN_PROXY_QUEUE_SIZE", "4");
        if let Some(lib) = plugin {
            std::env::set_var("NCCL_NET_PLUGIN", lib);
        }
    }
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(120));
        eprintln!("HANG: the GIN test did not finish within 120 s");
        std::process::exit(99);
    });
}

/// A counter (`int name(void)`) oxccl's C test plugin exports, from the library at `path`,
/// loaded already.
pub fn plugin_counter(path: &str, name: &str) -> i32 {
    let (p, n) = (
        std::ffi::CString::new(path).unwrap(),
        std::ffi::CString::new(name).unwrap(),
    );
    // SAFETY: the library is loaded already (RTLD_NOLOAD), so no initialisers run; the
    // counters are `int f(void)`.
    unsafe {
        let h = libc::dlopen(p.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        assert!(!h.is_null(), "{path} is not loaded");
        let f: unsafe extern "C" fn() -> i32 = std::mem::transmute(libc::dlsym(h, n.as_ptr()));
        f()
    }
}

/// The sentence of the last error (`ncclGetLastError`).
pub fn last_error() -> String {
    // SAFETY: ncclGetLastError returns a NUL-terminated string that outlives this copy.
    unsafe { CStr::from_ptr(ncclGetLastError(ncclComm_t::NULL)) }
        .to_string_lossy()
        .into_owned()
}

/// What a context's 48-byte struct says (`ncclGinProxyGpuCtx_t`).
#[derive(Debug, Clone, Copy)]
pub struct Ctx {
    pub queue_size: u32,
    pub queues: *mut u64,
    pub pis: *mut u32,
    pub cis: *mut u32,
    pub counters: *mut u64,
    pub signals: *mut u64,
}

impl Ctx {
    /// Reads the struct at `handle` (a `ginHandles[]` entry).
    ///
    /// # Safety
    /// `handle` points at a live context's struct in host memory.
    pub unsafe fn read(handle: *mut c_void, nranks: usize) -> Ctx {
        let p = handle.cast::<u64>();
        // SAFETY: the caller's contract: 48 bytes, 8-aligned.
        let w = |i: usize| unsafe { p.add(i).read() };
        let head = w(0);
        assert_eq!(head as u32 as usize, nranks, "nranks");
        Ctx {
            queue_size: (head >> 32) as u32,
            queues: w(1) as *mut u64,
            pis: w(2) as *mut u32,
            cis: w(3) as *mut u32,
            counters: w(4) as *mut u64,
            signals: w(5) as *mut u64,
        }
    }

    pub fn word(base: *mut u64, i: usize) -> &'static AtomicU64 {
        // SAFETY: the context outlives the test's use; every access is atomic.
        unsafe { AtomicU64::from_ptr(base.add(i)) }
    }

    pub fn index(base: *mut u32, i: usize) -> &'static AtomicU32 {
        // SAFETY: as above.
        unsafe { AtomicU32::from_ptr(base.add(i)) }
    }

    /// Posts `gfd` to the ring of `peer` as the device does: claim a slot with the producer
    /// index, wait for a credit from the consumer index, write the eight flagged qwords.
    pub fn post(&self, peer: usize, gfd: [u64; 8]) {
        let idx = Ctx::index(self.pis, peer).fetch_add(1, Ordering::Relaxed);
        let t0 = Instant::now();
        while idx.wrapping_sub(Ctx::index(self.cis, peer).load(Ordering::Acquire))
            >= self.queue_size
        {
            assert!(t0.elapsed() < Duration::from_secs(30), "no credit");
            std::hint::spin_loop();
        }
        let slot = peer * self.queue_size as usize + (idx & (self.queue_size - 1)) as usize;
        for (i, q) in gfd.into_iter().enumerate() {
            Ctx::word(self.queues, slot * 8 + i).store(q, Ordering::Release);
        }
    }
}

/// The proxy descriptor of a put (or a bare signal: `size` 0, handles 0) with a remote signal
/// (`add`: `Some(value)` for SignalAdd, `None` for SignalInc) and an optional local counter;
/// every qword carries the valid flag in bit 0.
pub fn gfd(
    size: u64,
    src: (u64, u64),
    dst: (u64, u64),
    signal: (u16, Option<u64>),
    counter: Option<u16>,
) -> [u64; 8] {
    const PUT: u64 = 1;
    const COUNTER: u64 = 4;
    const SIGNAL_INC: u64 = 8;
    const SIGNAL_ADD: u64 = 16;
    let op = PUT
        | if counter.is_some() { COUNTER } else { 0 }
        | if signal.1.is_some() {
            SIGNAL_ADD
        } else {
            SIGNAL_INC
        };
    let value = signal.1.unwrap_or(1);
    let flagged = |v: u64| (v << 1) | 1;
    [
        1 | (op << 1) | (size << 7),
        flagged(src.1),
        flagged(src.0),
        flagged(dst.1),
        flagged(dst.0),
        1 | (u64::from(counter.unwrap_or(0)) << 8)
            | (u64::from(signal.0) << 24)
            | ((value & 0xffff) << 40),
        1 | (((value >> 16) & 0xffff) << 8) | ((value >> 32) << 24),
        1,
    ]
}

/// Ranks of the scenario.
pub const RANKS: usize = 3;
/// Bytes each rank puts into each peer: more than one of the engines' 256 KiB messages.
pub const PART: usize = (300 << 10) + 3;
/// The GIN context every put goes through (of two).
pub const CONTEXT: usize = 1;

/// What rank `rank` puts at byte `i`.
pub fn pattern(rank: usize, i: usize) -> u8 {
    (i as u8).wrapping_mul(13) ^ (rank as u8).wrapping_mul(101)
}

/// Three ranks of one process (`ncclCommInitAll`, two GIN contexts of 4 slots: the caller sets
/// the environment) register two windows and two device communicators each; every rank puts
/// `PART` bytes into each peer's destination at its own slice (a signal and a counter), then
/// adds 2^40 + 7 to the peer's resource signal; every byte, signal and counter is checked, and
/// everything is destroyed.
pub fn three_ranks_put_signal_and_count() {
    let mut c = vec![ncclComm_t::NULL; RANKS];
    // SAFETY: `c` holds RANKS out-slots; NULL devices mean 0..RANKS.
    let r = unsafe { ncclCommInitAll(c.as_mut_ptr(), RANKS as c_int, std::ptr::null()) };
    assert_eq!(r, R::SUCCESS, "{}", last_error());
    let mut src: Vec<Vec<u8>> = (0..RANKS)
        .map(|r| (0..PART).map(|i| pattern(r, i)).collect())
        .collect();
    let mut dst: Vec<Vec<u8>> = (0..RANKS).map(|_| vec![0u8; RANKS * PART]).collect();
    let mut wins = [[ncclWindow_t(std::ptr::null_mut()); 2]; RANKS];
    // SAFETY: plain C data; all-zero is what NCCL's callers start from.
    let mut dcs: Vec<[ncclDevComm_t; 2]> = vec![unsafe { std::mem::zeroed() }; RANKS];
    // One resource buffer per rank with two signals of its own.
    let mut res: Vec<ncclDevResourceRequirements_t> = (0..RANKS)
        // SAFETY: as above.
        .map(|_| unsafe { std::mem::zeroed() })
        .collect();
    let mut res_out = [[u32::MAX; 3]; RANKS];
    // SAFETY: every pointer stays valid until the group end; buffers outlive their windows.
    unsafe {
        assert_eq!(ncclGroupStart(), R::SUCCESS);
        for r in 0..RANKS {
            for (w, buf) in [src[r].as_mut_ptr(), dst[r].as_mut_ptr()]
                .into_iter()
                .enumerate()
            {
                let bytes = if w == 0 { PART } else { RANKS * PART };
                let got = ncclCommWindowRegister(
                    c[r],
                    buf.cast(),
                    bytes,
                    &mut wins[r][w],
                    NCCL_WIN_COLL_SYMMETRIC,
                );
                assert_eq!(got, R::SUCCESS, "{}", last_error());
            }
            res[r].bufferSize = 256;
            res[r].bufferAlign = 128;
            res[r].ginSignalCount = 2;
            res[r].outBufferHandle = &mut res_out[r][0];
            res[r].outGinSignalStart = &mut res_out[r][1];
            res[r].outGinCounterStart = &mut res_out[r][2];
            let mut reqs: ncclDevCommRequirements_t = std::mem::zeroed();
            reqs.ginSignalCount = 1;
            reqs.ginCounterCount = 1;
            reqs.railGinBarrierCount = 1;
            reqs.resourceRequirementsList = &mut res[r];
            let got = ncclDevCommCreate(c[r], &reqs, &mut dcs[r][0]);
            assert_eq!(got, R::SUCCESS, "{}", last_error());
            // A second device communicator takes the ids after the first's.
            let mut reqs: ncclDevCommRequirements_t = std::mem::zeroed();
            reqs.ginSignalCount = 3;
            let got = ncclDevCommCreate(c[r], &reqs, &mut dcs[r][1]);
            assert_eq!(got, R::SUCCESS, "{}", last_error());
        }
        assert_eq!(ncclGroupEnd(), R::SUCCESS, "{}", last_error());
    }
    for r in 0..RANKS {
        let [dc, second] = dcs[r];
        assert_eq!(dc.ginContextCount, 2);
        assert_eq!(dc.ginTypes, [2, 2, 0, 0], "the proxy type");
        // The caller's signal, the rail barrier's, then the resource buffer's two.
        assert_eq!(dc.railGinBarrier.signal0, 1);
        assert_eq!(res_out[r][1..], [2, 1]);
        assert_eq!((dc.ginSignalBase, dc.ginSignalCount), (0, 4));
        assert_eq!((dc.ginCounterBase, dc.ginCounterCount), (0, 1));
        assert_eq!((second.ginSignalBase, second.ginSignalCount), (4, 3));
        assert_eq!(second.ginCounterCount, 0);
        // Shadows of every context's signals, zeroed, in the resource buffer.
        // SAFETY: host-backend descriptors are host memory.
        let resw = unsafe { *dc.resourceWindow };
        assert!(!dc.ginSignalShadows.is_null());
        // SAFETY: the shadows hold contexts x signals words.
        let shadows = unsafe { std::slice::from_raw_parts(dc.ginSignalShadows, 2 * 4) };
        assert!(shadows.iter().all(|&v| v == 0));
        assert!(resw.ginWins.iter().all(|h| !h.is_null()));
    }
    // Handles name one window alike on every rank.
    // SAFETY: host-backend descriptors are host memory.
    let handle = |r: usize, w: usize| unsafe { (*wins[r][w].0).ginWins[CONTEXT] } as u64;
    for r in 1..RANKS {
        assert_eq!((handle(r, 0), handle(r, 1)), (handle(0, 0), handle(0, 1)));
    }
    // SAFETY: `ginHandles` point at live contexts' structs in host memory.
    let ctx: Vec<Ctx> = (0..RANKS)
        .map(|r| unsafe { Ctx::read(dcs[r][0].ginHandles[CONTEXT], RANKS) })
        .collect();
    assert_eq!(ctx[0].queue_size, 4);
    // Every rank puts its source into each peer's destination at its own slice, bumping the
    // peer's signal 0 and its own counter 0; then adds 2^40 + 7 to the peer's resource signal.
    let big = (1u64 << 40) + 7;
    for r in 0..RANKS {
        let [dc, _] = dcs[r];
        for p in (0..RANKS).filter(|&p| p != r) {
            let put = gfd(
                PART as u64,
                (handle(r, 0), 0),
                (handle(r, 1), (r * PART) as u64),
                (dc.ginSignalBase as u16, None),
                Some(dc.ginCounterBase as u16),
            );
            ctx[r].post(p, put);
            let sig = (dc.ginSignalBase + res_out[r][1]) as u16;
            ctx[r].post(p, gfd(0, (0, 0), (0, 0), (sig, Some(big)), None));
        }
    }
    let peers = (RANKS - 1) as u64;
    let t0 = Instant::now();
    for r in 0..RANKS {
        let base = dcs[r][0].ginSignalBase as usize;
        let signal = Ctx::word(ctx[r].signals, base);
        let counter = Ctx::word(ctx[r].counters, dcs[r][0].ginCounterBase as usize);
        let resource = Ctx::word(ctx[r].signals, base + res_out[r][1] as usize);
        while signal.load(Ordering::Acquire) < peers
            || counter.load(Ordering::Acquire) < peers
            || resource.load(Ordering::Acquire) < big * peers
        {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "rank {r}: signal {}, counter {}, resource signal {:#x}",
                signal.load(Ordering::Acquire),
                counter.load(Ordering::Acquire),
                resource.load(Ordering::Acquire)
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(signal.load(Ordering::Acquire), peers, "rank {r}");
        assert_eq!(resource.load(Ordering::Acquire), big * peers, "rank {r}");
        // Nothing landed on the other context.
        // SAFETY: as above.
        let other = unsafe { Ctx::read(dcs[r][0].ginHandles[1 - CONTEXT], RANKS) };
        assert_eq!(Ctx::word(other.signals, base).load(Ordering::Acquire), 0);
    }
    for (r, got) in dst.iter().enumerate() {
        for p in 0..RANKS {
            let slice = &got[p * PART..(p + 1) * PART];
            if p == r {
                assert!(slice.iter().all(|&b| b == 0), "rank {r}: its own slice");
            } else {
                let first_bad = (0..PART).find(|&i| slice[i] != pattern(p, i));
                assert_eq!(first_bad, None, "rank {r}: rank {p}'s slice");
            }
        }
    }
    // SAFETY: live handles; the windows and device communicators are not used afterwards.
    unsafe {
        for r in 0..RANKS {
            for dc in &dcs[r] {
                assert_eq!(ncclDevCommDestroy(c[r], dc), R::SUCCESS, "{}", last_error());
            }
            for w in wins[r] {
                assert_eq!(ncclCommWindowDeregister(c[r], w), R::SUCCESS);
            }
        }
        for comm in c {
            assert_eq!(ncclCommDestroy(comm), R::SUCCESS);
        }
    }
    src.clear();
}
