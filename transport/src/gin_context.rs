//! The memory of one GIN context (NCCL 2.28.9's proxy GIN type) on a GPU: the struct a device
//! communicator's `ginHandles[i]` points at, and the rings, indices, counters and signals it
//! names, which the host engine (`oxccl_net::gin`) moves.
//!
//! NVIDIA's inline device code fixes what it reads: a 48-byte struct in device memory (read
//! through the read-only cache, so it never changes while kernels run) holding the ring size
//! and five addresses. The rings are in mapped host memory: the device writes descriptors
//! there and the host engine reads them. The producer indices only the device touches, so they
//! are in device memory, as NCCL keeps them. The consumer indices, counters and signals, which
//! kernels poll, are in device memory too where the runtime can write device words from a
//! stream (`cells_on_device`): every block of a kernel polling one line of mapped host memory
//! waits for the others' reads, about a microsecond each, where device memory answers in
//! about a tenth of that. The engine then writes them through its stream (`gin_windows`).
//! Otherwise (a GIN plugin, which writes signals itself) they share the host allocation.

use crate::api::DeviceApi;
use oxccl_core::backend::DevicePtr;
use oxccl_core::error::{Error, Result};
use oxccl_net::gin::context_layout::{ContextLayout, GPU_CTX_BYTES};
use oxccl_net::gin::engine::ContextMem;

pub use oxccl_net::gin::context_layout::GIN_TYPE_PROXY;

/// One GIN context's memory on a device; freed when dropped (after every kernel that used it
/// and the engine that moves it are done).
pub struct GinContextMemory<A: DeviceApi> {
    api: A,
    device: i32,
    host: *mut u8,
    pis: DevicePtr,
    ctx: DevicePtr,
    /// The consumer indices, counters and signals, when on the device; else 0.
    cells: DevicePtr,
    mem: ContextMem,
}

// SAFETY: the pointers are the context's own allocations; the host half is only touched
// through `ContextMem`, by one engine thread at a time.
unsafe impl<A: DeviceApi> Send for GinContextMemory<A> {}

impl<A: DeviceApi> GinContextMemory<A> {
    /// A context for `nranks` ranks with rings of `queue_size` slots (a power of two) and
    /// `ncounters` counters and `nsignals` signals, all zero, on `device`; its consumer
    /// indices, counters and signals in device memory when `cells_on_device` (the engine must
    /// then write them through a `GinWindows` of `device`).
    pub fn new(
        api: &A,
        device: i32,
        nranks: usize,
        queue_size: u32,
        ncounters: usize,
        nsignals: usize,
        cells_on_device: bool,
    ) -> Result<GinContextMemory<A>> {
        if !queue_size.is_power_of_two() {
            return Err(Error::arg(format!(
                "a GIN queue of {queue_size} slots is not a power of two"
            )));
        }
        let layout = ContextLayout::new(nranks, queue_size, ncounters, nsignals);
        let _bound = api.bind(device)?;
        // Beside whatever the application captures.
        let _relaxed = api.relaxed_capture()?;
        let (host, dev) = api.host_alloc(layout.total)?;
        let mut me = GinContextMemory {
            api: api.clone(),
            device,
            host,
            pis: 0,
            ctx: 0,
            cells: 0,
            // SAFETY: `host` holds `layout.total` bytes that live as long as `me`.
            mem: unsafe { layout.context_mem(host) },
        };
        // SAFETY: `host` holds `layout.total` bytes of fresh pinned memory nobody uses yet.
        unsafe { std::ptr::write_bytes(host, 0, layout.total) };
        me.pis = api.dev_alloc(4 * nranks)?;
        // SAFETY: `pis` holds `4 * nranks` bytes.
        unsafe { api.copy_h2d(me.pis, &vec![0u8; 4 * nranks]) }?;
        if cells_on_device {
            let bytes = layout.cells_bytes();
            me.cells = api.dev_alloc(bytes)?;
            // SAFETY: `cells` holds `bytes` bytes.
            unsafe { api.copy_h2d(me.cells, &vec![0u8; bytes]) }?;
            me.mem.device_cells = Some(layout.cells_at(me.cells));
        }
        let image = layout.gpu_ctx(dev, me.pis, me.mem.device_cells);
        me.ctx = api.dev_alloc(GPU_CTX_BYTES)?;
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

impl<A: DeviceApi> Drop for GinContextMemory<A> {
    fn drop(&mut self) {
        // Dropped on whichever thread destroys the communicator, maybe beside a capture.
        let _bound = self.api.bind(self.device);
        let _relaxed = self.api.relaxed_capture();
        // SAFETY: the context's own allocations; its kernels and engine are done (the caller's
        // order of teardown).
        unsafe {
            self.api.dev_free(self.ctx);
            self.api.dev_free(self.pis);
            if self.cells != 0 {
                self.api.dev_free(self.cells);
            }
            self.api.host_free(self.host);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_size_that_is_not_a_power_of_two_is_refused() {
        let api = crate::fake_api::FakeApi::default();
        let e = GinContextMemory::new(&api, 0, 2, 6, 1, 1, true)
            .err()
            .unwrap();
        assert!(e.to_string().contains("power of two"), "{e}");
        assert!(api.calls().is_empty(), "nothing allocated");
    }
}
