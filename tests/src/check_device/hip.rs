//! The GPU check's device operations on the HIP backend. On an NVIDIA machine this is the HIP
//! backend over `tests/hip-on-cuda`'s runtime (`OXCCL_HIP_RUNTIME`, `OXCCL_HIP_CODE_OBJECT`).

use super::{CheckDevice, Graph};
use oxccl_core::Result;
use oxccl_core::backend::{Backend, DevicePtr};
use oxccl_core::error::Error;
use oxccl_hip::{HipApi, HipBackend, HipStream};

impl CheckDevice for HipBackend {
    check_device_common!("hip", "no HIP device");

    fn new_stream(&self, device: i32) -> Result<HipStream> {
        self.stream_on(device)
    }

    fn graphs_supported(&self) -> std::result::Result<(), String> {
        let rt = self.runtime();
        [
            "hipStreamBeginCapture",
            "hipStreamEndCapture",
            "hipGraphGetNodes",
            "hipGraphInstantiate",
            "hipGraphLaunch",
            "hipGraphDestroy",
            "hipGraphExecDestroy",
        ]
        .iter()
        .find(|n| !rt.has(n))
        .map_or(Ok(()), |n| Err(format!("{} lacks {n}", rt.path.display())))
    }

    fn begin_capture(&self, device: i32, stream: &HipStream, thread_local: bool) -> Result<()> {
        HipApi::begin_capture(self, device, stream, thread_local)
    }

    fn end_capture(&self, device: i32, stream: &HipStream) -> Result<Graph> {
        let g = HipApi::end_capture(self, device, stream)?;
        if g == 0 {
            return Err(Error::Internal("capture produced no graph".into()));
        }
        Ok(Graph { graph: g, exec: 0 })
    }

    fn instantiate(&self, device: i32, graph: &mut Graph) -> Result<()> {
        if self.graph_nodes(graph.graph)? > 0 {
            graph.exec = self.graph_instantiate(device, graph.graph)?;
        }
        Ok(())
    }

    fn launch_graph(&self, device: i32, graph: &Graph, stream: &HipStream) -> Result<()> {
        if graph.exec == 0 {
            return Ok(());
        }
        // SAFETY: an instantiated graph of this device; its buffers outlive the replay.
        unsafe { self.graph_launch(device, graph.exec, stream) }
    }

    unsafe fn destroy_graph(&self, device: i32, graph: Graph) {
        // SAFETY: forwarded from the caller: launched no more.
        unsafe { self.graph_destroy(device, graph.graph, graph.exec) }
    }
}
