//! The GPU check's device operations on the HIP backend. On an NVIDIA machine this is the HIP
//! backend over `tests/hip-on-cuda`'s runtime (`OXCCL_HIP_RUNTIME`, `OXCCL_HIP_CODE_OBJECT`).

use super::{CheckDevice, Graph};
use oxccl_core::Result;
use oxccl_core::backend::{Backend, DevicePtr};
use oxccl_core::error::Error;
use oxccl_hip::{HipBackend, HipStream};

/// Why `--graph` cannot run here.
const NO_CAPTURE: &str = "graph capture through the HIP backend is not supported yet: the HIP backend refuses to launch into a capturing stream (issue 19, item 1)";

impl CheckDevice for HipBackend {
    const NAME: &'static str = "hip";

    fn open() -> std::result::Result<Self, String> {
        match HipBackend::load() {
            Ok(b) if b.device_count().unwrap_or(0) > 0 => Ok(b),
            Ok(_) => Err("no HIP device".into()),
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

    fn settle_uploads(&self, _device: i32) -> Result<()> {
        // Every upload synchronised the null stream it ran on before returning.
        Ok(())
    }

    fn new_stream(&self, device: i32) -> Result<HipStream> {
        self.stream_on(device)
    }

    fn graphs_supported(&self) -> std::result::Result<(), String> {
        Err(NO_CAPTURE.into())
    }

    fn begin_capture(&self, _device: i32, _stream: &HipStream, _thread_local: bool) -> Result<()> {
        Err(Error::usage(NO_CAPTURE))
    }

    fn end_capture(&self, _device: i32, _stream: &HipStream) -> Result<Graph> {
        Err(Error::usage(NO_CAPTURE))
    }

    fn instantiate(&self, _device: i32, _graph: &mut Graph) -> Result<()> {
        Err(Error::usage(NO_CAPTURE))
    }

    fn launch_graph(&self, _device: i32, _graph: &Graph, _stream: &HipStream) -> Result<()> {
        Err(Error::usage(NO_CAPTURE))
    }

    unsafe fn destroy_graph(&self, _device: i32, _graph: Graph) {}
}
