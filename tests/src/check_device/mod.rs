//! What the GPU check (`src/bin/gpu-check.rs`) needs from a device backend beyond the
//! [`Backend`] trait: plain buffers, synchronous copies, streams on a chosen device, and graph
//! capture. One implementation per backend ([`cuda`], [`hip`]) keeps the check itself generic, so
//! the same suite runs through librccl.so.1's code path (the HIP backend) as through
//! libnccl.so.2's.

/// The part of a [`CheckDevice`] implementation that is the same on every backend: loading it
/// (`$missing` when it sees no device) and the plain-buffer calls, which each backend crate
/// provides as inherent methods of the same names (`plain_alloc`, `plain_free`,
/// `copy_to_device`, `copy_from_device`).
macro_rules! check_device_common {
    ($name:literal, $missing:literal) => {
        const NAME: &'static str = $name;

        fn open() -> std::result::Result<Self, String> {
            match Self::load() {
                Ok(b) if b.device_count().unwrap_or(0) > 0 => Ok(b),
                Ok(_) => Err($missing.into()),
                Err(e) => Err(e.to_string()),
            }
        }

        fn alloc_plain(&self, device: i32, bytes: usize) -> Result<DevicePtr> {
            self.plain_alloc(device, bytes)
        }

        unsafe fn free_plain(&self, device: i32, ptr: DevicePtr) -> Result<()> {
            // SAFETY: forwarded from the caller.
            unsafe { self.plain_free(device, ptr) }
        }

        unsafe fn upload(&self, device: i32, dst: DevicePtr, src: &[u8]) -> Result<()> {
            // SAFETY: forwarded from the caller.
            unsafe { self.copy_to_device(device, dst, src) }
        }

        unsafe fn download(&self, device: i32, dst: &mut [u8], src: DevicePtr) -> Result<()> {
            // SAFETY: forwarded from the caller.
            unsafe { self.copy_from_device(device, dst, src) }
        }
    };
}

pub mod cuda;
pub mod hip;

use oxccl_core::Result;
use oxccl_core::backend::{Backend, DevicePtr};

/// A captured graph and its executable, as the backend's own handles (0: none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Graph {
    /// The captured graph.
    pub graph: usize,
    /// Its executable; 0 when the graph has no node (nothing to replay).
    pub exec: usize,
}

/// Device operations of the GPU check.
pub trait CheckDevice: Backend {
    /// The backend as `--backend` names it.
    const NAME: &'static str;

    /// Loads the backend; `Err` with the reason when there is no device to check on.
    fn open() -> std::result::Result<Self, String>;

    /// Plain device memory on `device` (what `cudaMalloc` / `hipMalloc` return).
    fn alloc_plain(&self, device: i32, bytes: usize) -> Result<DevicePtr>;

    /// Frees [`CheckDevice::alloc_plain`] memory.
    ///
    /// # Safety
    /// `ptr` came from `alloc_plain` on `device` and no work uses it.
    unsafe fn free_plain(&self, device: i32, ptr: DevicePtr) -> Result<()>;

    /// Device memory on `device` that peers cannot map (zero-copy plans must fall back);
    /// backends without such memory refuse.
    fn alloc_unshared(&self, _device: i32, _bytes: usize) -> Result<DevicePtr> {
        Err(oxccl_core::Error::usage(format!(
            "{} has no unshared memory (--hide-rank)",
            Self::NAME
        )))
    }

    /// Frees [`CheckDevice::alloc_unshared`] memory.
    ///
    /// # Safety
    /// `ptr` came from `alloc_unshared` on `device` and no work uses it.
    unsafe fn free_unshared(&self, _device: i32, _ptr: DevicePtr) -> Result<()> {
        Ok(())
    }

    /// Copies `src` to `dst` on `device`; the copy has landed when this returns, for work on any
    /// stream.
    ///
    /// # Safety
    /// `dst` is device memory of at least `src.len()` bytes.
    unsafe fn upload(&self, device: i32, dst: DevicePtr, src: &[u8]) -> Result<()>;

    /// Copies device memory at `src` into `dst` and waits for it.
    ///
    /// # Safety
    /// `src` is device memory of at least `dst.len()` bytes.
    unsafe fn download(&self, device: i32, dst: &mut [u8], src: DevicePtr) -> Result<()>;

    /// A new non-blocking stream on `device`.
    fn new_stream(&self, device: i32) -> Result<Self::Stream>;

    /// Whether `--graph` can run on this backend (`Err` says why not).
    fn graphs_supported(&self) -> std::result::Result<(), String> {
        Ok(())
    }

    /// Starts capturing `stream` into a graph (`thread_local`: only this thread's calls are
    /// restricted while it captures; else every thread's, as PyTorch's default).
    fn begin_capture(&self, device: i32, stream: &Self::Stream, thread_local: bool) -> Result<()>;

    /// Ends the capture (also after a failed capture) and returns the graph, not instantiated.
    fn end_capture(&self, device: i32, stream: &Self::Stream) -> Result<Graph>;

    /// Instantiates a captured graph; an empty graph gets no executable (nothing to replay).
    /// Called once every stream's capture has ended.
    fn instantiate(&self, device: i32, graph: &mut Graph) -> Result<()>;

    /// Replays an instantiated graph on `stream`.
    fn launch_graph(&self, device: i32, graph: &Graph, stream: &Self::Stream) -> Result<()>;

    /// Destroys a graph and its executable.
    ///
    /// # Safety
    /// The graph is not launched again.
    unsafe fn destroy_graph(&self, device: i32, graph: Graph);
}
