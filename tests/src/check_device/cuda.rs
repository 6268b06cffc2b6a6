//! The GPU check's device operations on the CUDA backend (the driver API through cudarc).

use super::{CheckDevice, Graph};
use cudarc::driver::sys;
use oxccl_core::Result;
use oxccl_core::backend::{Backend, DevicePtr};
use oxccl_core::error::Error;
use oxccl_cuda::driver::check;
use oxccl_cuda::{CudaBackend, CudaStream};

impl CheckDevice for CudaBackend {
    check_device_common!("cuda", "no CUDA device");

    fn new_stream(&self, device: i32) -> Result<CudaStream> {
        self.stream_create(device)
    }

    fn alloc_unshared(&self, device: i32, bytes: usize) -> Result<DevicePtr> {
        // The device's default memory pool: its memory is not legacy-IPC capable, so the
        // backend reports it as not exposable to peers.
        let _g = self.memory().bind(device)?;
        let mut p = 0;
        // SAFETY: allocates on the legacy default stream of `device`'s context, then waits.
        unsafe {
            check(
                "cuMemAllocAsync",
                sys::cuMemAllocAsync(&mut p, bytes.max(1), std::ptr::null_mut()),
            )?;
            check(
                "cuStreamSynchronize",
                sys::cuStreamSynchronize(std::ptr::null_mut()),
            )?;
        }
        Ok(p)
    }

    unsafe fn free_unshared(&self, device: i32, ptr: DevicePtr) -> Result<()> {
        let _g = self.memory().bind(device)?;
        // SAFETY: `ptr` came from `alloc_unshared` and no work uses it (the caller's contract).
        unsafe {
            check(
                "cuMemFreeAsync",
                sys::cuMemFreeAsync(ptr, std::ptr::null_mut()),
            )?;
            check(
                "cuStreamSynchronize",
                sys::cuStreamSynchronize(std::ptr::null_mut()),
            )
        }
    }

    fn begin_capture(&self, device: i32, stream: &CudaStream, thread_local: bool) -> Result<()> {
        let mode = if thread_local {
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        } else {
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL
        };
        let _g = self.memory().bind(device)?;
        // SAFETY: a live stream of this device.
        check("cuStreamBeginCapture_v2", unsafe {
            sys::cuStreamBeginCapture_v2(stream.raw(), mode)
        })
    }

    fn end_capture(&self, device: i32, stream: &CudaStream) -> Result<Graph> {
        let _g = self.memory().bind(device)?;
        let mut g: sys::CUgraph = std::ptr::null_mut();
        // SAFETY: the stream is capturing; this ends the capture even after a failure.
        check("cuStreamEndCapture", unsafe {
            sys::cuStreamEndCapture(stream.raw(), &mut g)
        })?;
        if g.is_null() {
            return Err(Error::Internal("capture produced no graph".into()));
        }
        Ok(Graph {
            graph: g as usize,
            exec: 0,
        })
    }

    fn instantiate(&self, device: i32, graph: &mut Graph) -> Result<()> {
        let _g = self.memory().bind(device)?;
        let g = graph.graph as sys::CUgraph;
        let mut nodes = 0usize;
        // SAFETY: `g` is a complete captured graph; only the count is written.
        check("cuGraphGetNodes", unsafe {
            sys::cuGraphGetNodes(g, std::ptr::null_mut(), &mut nodes)
        })?;
        if nodes > 0 {
            let mut e: sys::CUgraphExec = std::ptr::null_mut();
            // SAFETY: `g` is a complete captured graph.
            check("cuGraphInstantiateWithFlags", unsafe {
                sys::cuGraphInstantiateWithFlags(&mut e, g, 0)
            })?;
            graph.exec = e as usize;
        }
        Ok(())
    }

    fn launch_graph(&self, device: i32, graph: &Graph, stream: &CudaStream) -> Result<()> {
        if graph.exec == 0 {
            return Ok(());
        }
        let _g = self.memory().bind(device)?;
        // SAFETY: an instantiated graph of this device; its buffers outlive the replay.
        check("cuGraphLaunch", unsafe {
            sys::cuGraphLaunch(graph.exec as sys::CUgraphExec, stream.raw())
        })
    }

    unsafe fn destroy_graph(&self, device: i32, graph: Graph) {
        let _g = self.memory().bind(device);
        if graph.exec != 0 {
            // SAFETY: instantiated by end_capture and launched no more (caller); one still
            // running is freed when it completes.
            unsafe { sys::cuGraphExecDestroy(graph.exec as sys::CUgraphExec) };
        }
        if graph.graph != 0 {
            // SAFETY: captured by end_capture; its executable is destroyed.
            unsafe { sys::cuGraphDestroy(graph.graph as sys::CUgraph) };
        }
    }
}
