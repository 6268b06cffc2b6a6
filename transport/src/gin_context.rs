//! The memory of one GIN context (NCCL 2.28.9's proxy GIN type) on a GPU: the struct a device
//! communicator's `ginHandles[i]` points at, and the rings, indices, counters and signals it
//! names, which the host engine (`oxccl_net::gin`) moves.
//!
//! NVIDIA's inline device code fixes what it reads: a 48-byte struct in device memory (read
//! through the read-only cache, so it never changes while kernels run) holding the ring size
//! and five addresses. The rings, the consumer indices, the counters and the signals are in
//! one mapped host allocation (the device writes descriptors and reads the rest with
//! system-scope atomics; the host engine reads and writes them directly); the producer indices
//! only the device touches, so they are in device memory, as NCCL keeps them.

use crate::api::DeviceApi;
use oxccl_core::backend::DevicePtr;
use oxccl_core::error::{Error, Result};
use oxccl_net::gin::engine::ContextMem;

/// `ncclGinProxyGpuCtx_t` of NVIDIA's 2.28.9 headers: what `ncclDevComm::ginHandles[i]`
/// points at.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct GpuCtx {
    nranks: i32,
    queue_size: u32,
    queues: u64,
    pis: u64,
    cis: u64,
    counters: u64,
    signals: u64,
}

const _: () = assert!(size_of::<GpuCtx>() == 48);

/// The value of `ncclDevComm::ginTypes[i]` for a proxy context (`NCCL_NET_DEVICE_GIN_PROXY`).
pub const GIN_TYPE_PROXY: u8 = 2;

/// Bytes of one descriptor slot.
const SLOT_BYTES: usize = 64;

/// Where each part lies in the mapped host allocation of a context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HostLayout {
    cis: usize,
    counters: usize,
    signals: usize,
    total: usize,
}

impl HostLayout {
    /// Rings first (`nranks * queue_size` slots), then the consumer indices, counters and
    /// signals, each on 64-byte lines of their own.
    fn new(nranks: usize, queue_size: usize, ncounters: usize, nsignals: usize) -> HostLayout {
        let cis = nranks * queue_size * SLOT_BYTES;
        let counters = (cis + 4 * nranks).next_multiple_of(64);
        let signals = (counters + 8 * ncounters).next_multiple_of(64);
        HostLayout {
            cis,
            counters,
            signals,
            total: (signals + 8 * nsignals).next_multiple_of(64),
        }
    }
}

/// One GIN context's memory on a device; freed when dropped (after every kernel that used it
/// and the engine that moves it are done).
pub struct GinContextMemory<A: DeviceApi> {
    api: A,
    host: *mut u8,
    pis: DevicePtr,
    ctx: DevicePtr,
    mem: ContextMem,
}

// SAFETY: the pointers are the context's own allocations; the host half is only touched
// through `ContextMem`, by one engine thread at a time.
unsafe impl<A: DeviceApi> Send for GinContextMemory<A> {}

impl<A: DeviceApi> GinContextMemory<A> {
    /// A context for `nranks` ranks with rings of `queue_size` slots (a power of two) and
    /// `ncounters` counters and `nsignals` signals, all zero; `api`'s device must be bound.
    pub fn new(
        api: &A,
        nranks: usize,
        queue_size: u32,
        ncounters: usize,
        nsignals: usize,
    ) -> Result<GinContextMemory<A>> {
        if !queue_size.is_power_of_two() {
            return Err(Error::arg(format!(
                "a GIN queue of {queue_size} slots is not a power of two"
            )));
        }
        let layout = HostLayout::new(nranks, queue_size as usize, ncounters, nsignals);
        let (host, dev) = api.host_alloc(layout.total)?;
        let mut me = GinContextMemory {
            api: api.clone(),
            host,
            pis: 0,
            ctx: 0,
            mem: ContextMem {
                queues: host.cast(),
                queue_size,
                cis: host.wrapping_add(layout.cis).cast(),
                counters: host.wrapping_add(layout.counters).cast(),
                ncounters,
                signals: host.wrapping_add(layout.signals).cast(),
                nsignals,
            },
        };
        // SAFETY: `host` holds `layout.total` bytes of fresh pinned memory nobody uses yet.
        unsafe { std::ptr::write_bytes(host, 0, layout.total) };
        me.pis = api.dev_alloc(4 * nranks)?;
        // SAFETY: `pis` holds `4 * nranks` bytes.
        unsafe { api.copy_h2d(me.pis, &vec![0u8; 4 * nranks]) }?;
        let image = gpu_ctx(nranks, queue_size, dev, me.pis, &layout);
        me.ctx = api.dev_alloc(size_of::<GpuCtx>())?;
        // SAFETY: `ctx` holds the struct's 48 bytes.
        unsafe { api.copy_h2d(me.ctx, &image) }?;
        Ok(me)
    }

    /// What `ncclDevComm::ginHandles[i]` holds for this context.
    pub fn device_handle(&self) -> DevicePtr {
        self.ctx
    }

    /// The host engine's view of the context.
    pub fn engine_memory(&self) -> ContextMem {
        self.mem
    }
}

/// The 48 bytes of the device struct of a context whose host allocation is mapped at `dev`.
fn gpu_ctx(
    nranks: usize,
    queue_size: u32,
    dev: DevicePtr,
    pis: DevicePtr,
    l: &HostLayout,
) -> [u8; 48] {
    let c = GpuCtx {
        nranks: nranks as i32,
        queue_size,
        queues: dev,
        pis,
        cis: dev + l.cis as u64,
        counters: dev + l.counters as u64,
        signals: dev + l.signals as u64,
    };
    let mut out = [0u8; 48];
    out[0..4].copy_from_slice(&c.nranks.to_le_bytes());
    out[4..8].copy_from_slice(&c.queue_size.to_le_bytes());
    for (i, v) in [c.queues, c.pis, c.cis, c.counters, c.signals]
        .into_iter()
        .enumerate()
    {
        out[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_le_bytes());
    }
    out
}

impl<A: DeviceApi> Drop for GinContextMemory<A> {
    fn drop(&mut self) {
        // SAFETY: the context's own allocations; its kernels and engine are done (the caller's
        // order of teardown).
        unsafe {
            self.api.dev_free(self.ctx);
            self.api.dev_free(self.pis);
            self.api.host_free(self.host);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    /// The struct's fields sit where NVIDIA's header has them, and the image carries the
    /// mapped addresses of each part.
    #[test]
    fn the_device_struct_matches_nvidias_layout_and_points_into_the_mapping() {
        assert_eq!(offset_of!(GpuCtx, queue_size), 4);
        assert_eq!(offset_of!(GpuCtx, queues), 8);
        assert_eq!(offset_of!(GpuCtx, pis), 16);
        assert_eq!(offset_of!(GpuCtx, cis), 24);
        assert_eq!(offset_of!(GpuCtx, counters), 32);
        assert_eq!(offset_of!(GpuCtx, signals), 40);
        let l = HostLayout::new(3, 8, 100, 70);
        assert_eq!(l.cis, 3 * 8 * 64);
        assert_eq!(l.counters, (l.cis + 12).next_multiple_of(64));
        assert_eq!(l.signals, (l.counters + 800).next_multiple_of(64));
        assert!(l.total >= l.signals + 560 && l.total.is_multiple_of(64));
        let img = gpu_ctx(3, 8, 0x10_0000, 0x9000, &l);
        let word = |at: usize| u64::from_le_bytes(img[at..at + 8].try_into().unwrap());
        assert_eq!(i32::from_le_bytes(img[0..4].try_into().unwrap()), 3);
        assert_eq!(u32::from_le_bytes(img[4..8].try_into().unwrap()), 8);
        assert_eq!(word(8), 0x10_0000);
        assert_eq!(word(16), 0x9000);
        assert_eq!(word(24), 0x10_0000 + l.cis as u64);
        assert_eq!(word(32), 0x10_0000 + l.counters as u64);
        assert_eq!(word(40), 0x10_0000 + l.signals as u64);
    }

    #[test]
    fn a_ring_size_that_is_not_a_power_of_two_is_refused() {
        let api = crate::fake_api::FakeApi::default();
        let e = GinContextMemory::new(&api, 2, 6, 1, 1).err().unwrap();
        assert!(e.to_string().contains("power of two"), "{e}");
        assert!(api.calls().is_empty(), "nothing allocated");
    }
}
