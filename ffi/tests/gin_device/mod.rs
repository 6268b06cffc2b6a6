//! Plays a kernel built against NVIDIA's 2.28.9 `nccl_device.h` on the host backend (where
//! "device" memory is host memory): reads a GIN proxy context's struct and posts descriptors to
//! its rings as the device code does, with an encoder written from the proxy descriptor's
//! published layout (not oxccl's decoder).

// Each test binary that includes this uses part of it.
#![allow(dead_code)]

use oxccl_ffi::abi::ncclComm_t;
use oxccl_ffi::api::ncclGetLastError;
use std::ffi::{CStr, c_void};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

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
