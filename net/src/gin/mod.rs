//! GIN (GPU-initiated networking, NCCL 2.28's device API) through the host proxy, over any
//! [`Net`](crate::Net): the host half of NCCL's proxy GIN type.
//!
//! A kernel built against NVIDIA's `nccl_device.h` posts each put, inline put or signal as a
//! 64-byte descriptor ([`gfd`]) into a ring per destination rank in host-mapped memory, and
//! waits on three things the host moves: the ring's consumer index (`cis`: descriptors done
//! locally), counters (a put's source consumed) and signals (on the destination: its data and
//! every earlier put's to that rank have landed). NVIDIA carries these over RDMA writes and
//! atomics; here the engine ([`engine`]) turns each descriptor into messages on an ordinary
//! network connection per peer (`wire.rs`): the destination's engine writes the payload into its
//! own copy of the symmetric window, then applies the signal, in the order the messages came.
//!
//! Window handles are the ones the posting rank's descriptor carries: symmetric windows are
//! registered collectively in one order, so a handle names the same window on every rank, and
//! [`GinMemory`] resolves it to this rank's copy.

pub mod context_layout;
pub mod engine;
pub mod gfd;
pub mod plugin_engine;
mod rings;
pub mod runner;
#[cfg(test)]
pub(crate) mod testkit;
mod wire;

use oxccl_core::error::{Error, Result};
use oxccl_core::lock::lock;
use std::collections::HashMap;
use std::sync::Mutex;

/// Where this rank's windows lie, by GIN handle: the bounds every [`GinMemory`] checks a copy
/// against before it touches memory.
#[derive(Debug, Default)]
pub struct WindowRanges(Mutex<HashMap<u64, (u64, u64)>>);

impl WindowRanges {
    /// Window `handle` is this rank's `bytes` bytes at `base`.
    pub fn add(&self, handle: u64, base: u64, bytes: u64) {
        lock(&self.0).insert(handle, (base, bytes));
    }

    /// Window `handle` is gone (deregistered after every put that names it completed).
    pub fn remove(&self, handle: u64) {
        lock(&self.0).remove(&handle);
    }

    /// The address of `len` bytes at `offset` of window `handle`, when they lie in it; `what`
    /// ("reads", "writes") says what the put does there, for the error.
    pub fn at(&self, handle: u64, offset: u64, len: usize, what: &str) -> Result<u64> {
        let Some(&(base, bytes)) = lock(&self.0).get(&handle) else {
            return Err(Error::Internal(format!(
                "a GIN put {what} window {handle:#x}, which this rank has not registered"
            )));
        };
        match offset.checked_add(len as u64) {
            Some(end) if end <= bytes => Ok(base + offset),
            _ => Err(Error::Internal(format!(
                "a GIN put {what} bytes {offset}..{} of a window of {bytes} bytes",
                offset.saturating_add(len as u64)
            ))),
        }
    }
}

/// The device addresses of a context's consumer indices, counters and signals when its backend
/// keeps them in device memory: kernels read device memory far faster than mapped host memory,
/// where many blocks polling one line wait for each other's reads. The engine then writes them
/// through its [`GinMemory`] instead of in the context's host allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceCells {
    /// `nranks` u32.
    pub cis: u64,
    /// The context's u64 counters.
    pub counters: u64,
    /// The context's u64 signals.
    pub signals: u64,
}

/// This rank's copies of the symmetric windows, by GIN window handle: where the engine reads a
/// put's source and writes a received payload; on a GPU also what writes the words kernels
/// poll ([`DeviceCells`]), after those payloads.
pub trait GinMemory: Send + Sync {
    /// Copies `dst.len()` bytes at `offset` of window `handle` into `dst`.
    fn read(&self, handle: u64, offset: u64, dst: &mut [u8]) -> Result<()>;
    /// Copies `src` to `offset` of window `handle`; the device sees it once this returns.
    fn write(&self, handle: u64, offset: u64, src: &[u8]) -> Result<()>;
    /// [`GinMemory::read`] for each `(handle, offset, at, len)` of `reads`, into
    /// `out[at..at + len]`: a memory that waits for its copies can wait once for them all.
    fn read_many(&self, reads: &[(u64, u64, usize, usize)], out: &mut [u8]) -> Result<()> {
        reads
            .iter()
            .try_for_each(|&(h, o, at, len)| self.read(h, o, &mut out[at..at + len]))
    }
    /// [`GinMemory::write`] for each `(handle, offset, bytes)` of `writes`, in order.
    fn write_many(&self, writes: &[(u64, u64, &[u8])]) -> Result<()> {
        writes.iter().try_for_each(|&(h, o, b)| self.write(h, o, b))
    }
    /// Copies `len` bytes from `src` to `dst` (each a window handle and offset) of this rank:
    /// a put to the rank itself. The device sees them once this returns.
    fn copy_within(&self, src: (u64, u64), dst: (u64, u64), len: usize) -> Result<()> {
        let mut data = vec![0u8; len];
        self.read(src.0, src.1, &mut data)?;
        self.write(dst.0, dst.1, &data)
    }
    /// Sets the device's u32 at `addr` (a consumer index in [`DeviceCells`]) to `value`, seen
    /// after every copy before it. Default: this memory keeps no words on a device.
    fn set_word32(&self, addr: u64, value: u32) -> Result<()> {
        let _ = (addr, value);
        Err(no_device_words())
    }
    /// Adds `value` to the device's u64 at `addr` (a counter or signal in [`DeviceCells`]),
    /// seen after every copy before it. Only the engine adds to it; a kernel may reset it to 0
    /// while nothing is on its way to it (NVIDIA's rule), so the sum starts from what the
    /// device holds.
    fn add_word64(&self, addr: u64, value: u64) -> Result<()> {
        let _ = (addr, value);
        Err(no_device_words())
    }
    /// [`GinMemory::add_word64`] for each `(addr, value)` of `adds`, in any order: a memory
    /// that reads the words back can read them all before it writes any.
    fn add_words64(&self, adds: &[(u64, u64)]) -> Result<()> {
        adds.iter().try_for_each(|&(a, v)| self.add_word64(a, v))
    }
}

fn no_device_words() -> Error {
    Error::Internal(
        "a GIN context keeps its words on a device whose memory cannot write them".into(),
    )
}
