//! Test helpers of the GIN engines: windows and context memory in host memory, and a stand-in
//! for the device posting a descriptor.

use super::GinMemory;
use super::engine::ContextMem;
use super::gfd::{self, Gfd};
use crate::proxy::testkit::Mem;
use oxccl_core::error::Result;
use std::sync::Mutex;
use std::sync::atomic::Ordering;

/// Windows in host memory; handle `h` is window `h - 1`.
pub(crate) struct HostWindows(Vec<Mutex<Vec<u8>>>);

impl HostWindows {
    pub(crate) fn new(sizes: &[usize], seed: u8) -> HostWindows {
        HostWindows(
            (sizes.iter().enumerate())
                .map(|(w, &n)| {
                    let bytes = (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed ^ w as u8);
                    Mutex::new(bytes.collect())
                })
                .collect(),
        )
    }
    pub(crate) fn get(&self, handle: u64, offset: u64, n: usize) -> Vec<u8> {
        let w = self.0[handle as usize - 1].lock().unwrap();
        w[offset as usize..offset as usize + n].to_vec()
    }
}

impl GinMemory for HostWindows {
    fn read(&self, handle: u64, offset: u64, dst: &mut [u8]) -> Result<()> {
        dst.copy_from_slice(&self.get(handle, offset, dst.len()));
        Ok(())
    }
    fn write(&self, handle: u64, offset: u64, src: &[u8]) -> Result<()> {
        let mut w = self.0[handle as usize - 1].lock().unwrap();
        w[offset as usize..offset as usize + src.len()].copy_from_slice(src);
        Ok(())
    }
}

/// Windows in host memory whose memory also keeps a context's words "on the device": each
/// word by address, and every write and word update in one log, in order.
pub(crate) struct DeviceWords {
    pub(crate) windows: HostWindows,
    pub(crate) words: Mutex<std::collections::HashMap<u64, u64>>,
    pub(crate) log: Mutex<Vec<String>>,
}

impl DeviceWords {
    pub(crate) fn new(windows: HostWindows) -> DeviceWords {
        DeviceWords {
            windows,
            words: Mutex::default(),
            log: Mutex::default(),
        }
    }
    pub(crate) fn word(&self, addr: u64) -> u64 {
        self.words.lock().unwrap().get(&addr).copied().unwrap_or(0)
    }
}

impl GinMemory for DeviceWords {
    fn read(&self, handle: u64, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.windows.read(handle, offset, dst)
    }
    fn write(&self, handle: u64, offset: u64, src: &[u8]) -> Result<()> {
        self.log
            .lock()
            .unwrap()
            .push(format!("write {handle} {offset}"));
        self.windows.write(handle, offset, src)
    }
    fn set_word32(&self, addr: u64, value: u32) -> Result<()> {
        self.log
            .lock()
            .unwrap()
            .push(format!("set {addr:#x} {value}"));
        self.words.lock().unwrap().insert(addr, u64::from(value));
        Ok(())
    }
    fn add_word64(&self, addr: u64, value: u64) -> Result<()> {
        self.log
            .lock()
            .unwrap()
            .push(format!("add {addr:#x} {value}"));
        *self.words.lock().unwrap().entry(addr).or_default() += value;
        Ok(())
    }
}

/// A context's memory for `nranks` ranks, in `mem` (kept alive by the caller).
pub(crate) fn context(nranks: usize, queue_size: u32) -> (ContextMem, Mem) {
    let queues = nranks * queue_size as usize * 64;
    let m = Mem::new(queues + 4096 + 2 * 16 * 8);
    let mem = ContextMem {
        queues: m.ptr.cast(),
        queue_size,
        cis: m.ptr.wrapping_add(queues).cast(),
        counters: m.ptr.wrapping_add(queues + 4096).cast(),
        ncounters: 16,
        signals: m.ptr.wrapping_add(queues + 4096 + 16 * 8).cast(),
        nsignals: 16,
        device_cells: None,
    };
    (mem, m)
}

/// Plays the device: writes `g` into slot `index` of `peer`'s ring.
pub(crate) fn post(mem: &ContextMem, peer: usize, index: u32, g: &Gfd) {
    for (w, v) in mem.slot(peer, index).iter().zip(gfd::encode::encode(g)) {
        w.store(v, Ordering::Release);
    }
}
