//! Where a GIN context's parts lie (NCCL 2.28.9's proxy GIN type), and the 48-byte struct a
//! device communicator's `ginHandles[i]` points at. NVIDIA's inline device code fixes both: it
//! reads the struct (ring size and five addresses) and nothing else, so the rings, consumer
//! indices, counters and signals may lie wherever the backend can share them with its kernels.
//! One allocation holds the parts the host moves; the producer indices and the struct only the
//! device touches.

use super::DeviceCells;
use super::engine::ContextMem;

/// The value of `ncclDevComm::ginTypes[i]` for a proxy context (`NCCL_NET_DEVICE_GIN_PROXY`).
pub const GIN_TYPE_PROXY: u8 = 2;

/// Bytes of one descriptor slot.
const SLOT_BYTES: usize = 64;

/// Bytes of the struct `ncclDevComm::ginHandles[i]` points at.
pub const GPU_CTX_BYTES: usize = 48;

/// Where each part lies in the allocation the host engine moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextLayout {
    /// Ranks (rings, consumer and producer indices).
    pub nranks: usize,
    /// Slots per ring (a power of two).
    pub queue_size: u32,
    /// Offset of the consumer indices (`nranks` u32).
    pub cis: usize,
    /// Offset of the counters.
    pub counters: usize,
    /// Counters.
    pub ncounters: usize,
    /// Offset of the signals.
    pub signals: usize,
    /// Signals.
    pub nsignals: usize,
    /// Bytes of the allocation.
    pub total: usize,
}

impl ContextLayout {
    /// Rings first (`nranks * queue_size` slots), then the consumer indices, counters and
    /// signals, each on 64-byte lines of their own.
    pub fn new(nranks: usize, queue_size: u32, ncounters: usize, nsignals: usize) -> Self {
        let cis = nranks * queue_size as usize * SLOT_BYTES;
        let counters = (cis + 4 * nranks).next_multiple_of(64);
        let signals = (counters + 8 * ncounters).next_multiple_of(64);
        ContextLayout {
            nranks,
            queue_size,
            cis,
            counters,
            ncounters,
            signals,
            nsignals,
            total: (signals + 8 * nsignals).next_multiple_of(64),
        }
    }

    /// The engine's view of a context whose allocation the host sees at `host`.
    ///
    /// # Safety
    /// `host` holds `self.total` bytes, 8-aligned, that outlive every engine given the result.
    pub unsafe fn context_mem(&self, host: *mut u8) -> ContextMem {
        ContextMem {
            queues: host.cast(),
            queue_size: self.queue_size,
            cis: host.wrapping_add(self.cis).cast(),
            counters: host.wrapping_add(self.counters).cast(),
            ncounters: self.ncounters,
            signals: host.wrapping_add(self.signals).cast(),
            nsignals: self.nsignals,
            device_cells: None,
        }
    }

    /// Bytes of the consumer indices, counters and signals alone (what a device keeps of them
    /// in its own memory).
    pub fn cells_bytes(&self) -> usize {
        self.total - self.cis
    }

    /// Where the consumer indices, counters and signals lie when they start at `at`, at the
    /// same distances from each other as in the host allocation.
    pub fn cells_at(&self, at: u64) -> DeviceCells {
        DeviceCells {
            cis: at,
            counters: at + (self.counters - self.cis) as u64,
            signals: at + (self.signals - self.cis) as u64,
        }
    }

    /// The 48 bytes of `ncclGinProxyGpuCtx_t` for a context whose allocation the device sees at
    /// `at`, whose producer indices are at `pis`, and whose consumer indices, counters and
    /// signals are at `cells` when not in that allocation: `int nranks; uint32 queueSize;` then
    /// the addresses of the rings, producer and consumer indices, counters and signals.
    pub fn gpu_ctx(&self, at: u64, pis: u64, cells: Option<DeviceCells>) -> [u8; GPU_CTX_BYTES] {
        let mut out = [0u8; GPU_CTX_BYTES];
        out[0..4].copy_from_slice(&(self.nranks as i32).to_le_bytes());
        out[4..8].copy_from_slice(&self.queue_size.to_le_bytes());
        let cells = cells.unwrap_or(self.cells_at(at + self.cis as u64));
        let addrs = [at, pis, cells.cis, cells.counters, cells.signals];
        for (i, v) in addrs.into_iter().enumerate() {
            out[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parts never overlap and the struct carries each part's address at NVIDIA's offsets
    /// (nranks 0, queueSize 4, queues 8, pis 16, cis 24, counters 32, signals 40).
    #[test]
    fn parts_are_disjoint_and_the_struct_points_at_each() {
        let l = ContextLayout::new(3, 8, 100, 70);
        assert_eq!(l.cis, 3 * 8 * 64);
        assert_eq!(l.counters, (l.cis + 12).next_multiple_of(64));
        assert_eq!(l.signals, (l.counters + 800).next_multiple_of(64));
        assert!(l.total >= l.signals + 560 && l.total.is_multiple_of(64));
        let img = l.gpu_ctx(0x10_0000, 0x9000, None);
        let word = |at: usize| u64::from_le_bytes(img[at..at + 8].try_into().unwrap());
        assert_eq!(i32::from_le_bytes(img[0..4].try_into().unwrap()), 3);
        assert_eq!(u32::from_le_bytes(img[4..8].try_into().unwrap()), 8);
        assert_eq!(word(8), 0x10_0000);
        assert_eq!(word(16), 0x9000);
        assert_eq!(word(24), 0x10_0000 + l.cis as u64);
        assert_eq!(word(32), 0x10_0000 + l.counters as u64);
        assert_eq!(word(40), 0x10_0000 + l.signals as u64);
        let cells = l.cells_at(0x50_0000);
        assert_eq!(cells.cis, 0x50_0000);
        assert_eq!(cells.counters, 0x50_0000 + (l.counters - l.cis) as u64);
        assert!(cells.signals + 8 * 70 <= 0x50_0000 + l.cells_bytes() as u64);
        let img = l.gpu_ctx(0x10_0000, 0x9000, Some(cells));
        let word = |at: usize| u64::from_le_bytes(img[at..at + 8].try_into().unwrap());
        assert_eq!(
            (word(8), word(16)),
            (0x10_0000, 0x9000),
            "rings and pis stay"
        );
        assert_eq!(
            [word(24), word(32), word(40)],
            [cells.cis, cells.counters, cells.signals]
        );
    }
}
