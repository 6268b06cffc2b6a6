//! The host backend: CPU memory, streams as worker queues, plans run on threads, sockets
//! between ranks. The default when no GPU is present, and the simulator for large rank counts.

pub mod executor;
pub mod mesh;
pub mod stream;

use crate::abort::AbortFlag;
use crate::backend::{Backend, ConnectContext, DevicePtr, Launch, PointerInfo, ShareableHandle};
use crate::error::{Error, Result};
use mesh::SocketMesh;
use std::alloc::Layout;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
pub use stream::HostStream;

/// Alignment of host-backend allocations (NCCL's window alignment).
const ALLOC_ALIGN: usize = 4096;

/// "Devices" the host backend reports (ranks of one process may each claim one).
const HOST_DEVICES: usize = 1024;

/// The CPU backend.
pub struct HostBackend {
    streams: Mutex<HashMap<usize, HostStream>>,
    allocations: Mutex<BTreeMap<DevicePtr, usize>>,
}

impl Default for HostBackend {
    fn default() -> Self {
        HostBackend::new()
    }
}

impl HostBackend {
    /// A new host backend.
    pub fn new() -> HostBackend {
        HostBackend {
            streams: Mutex::new(HashMap::new()),
            allocations: Mutex::new(BTreeMap::new()),
        }
    }

    /// A fresh stream not tied to any raw handle.
    pub fn stream_create(&self) -> Result<HostStream> {
        HostStream::new("user")
    }
}

/// One communicator's connections on the host backend, and the queue its operations run on.
///
/// Operations run on the communicator's own queue rather than on the caller's stream: ranks of
/// one process often pass the same stream, and a rank blocked on its peers must not keep the
/// other ranks' operations from running.
pub struct HostTransport {
    /// Sockets to every peer.
    pub mesh: SocketMesh,
    /// Runs this communicator's operations in issue order.
    pub queue: HostStream,
    /// The communicator's flag: its first error travels with the goodbye when it closes.
    abort: AbortFlag,
}

impl Drop for HostTransport {
    fn drop(&mut self) {
        let reason = self.abort.error().map(|e| e.to_string());
        self.mesh.close_after(reason.as_deref());
    }
}

/// A marker on a host stream: the stream and the number of jobs queued when it was recorded.
#[derive(Default)]
pub struct HostEvent {
    mark: Mutex<Option<(HostStream, u64)>>,
}

impl Backend for HostBackend {
    type Stream = HostStream;
    type Event = HostEvent;
    type Transport = HostTransport;

    fn name(&self) -> &'static str {
        "host"
    }
    fn device_count(&self) -> Result<usize> {
        Ok(HOST_DEVICES)
    }
    fn current_device(&self) -> Result<i32> {
        Ok(0)
    }
    fn set_device(&self, _device: i32) -> Result<()> {
        Ok(())
    }
    fn granularity(&self, _device: i32) -> Result<usize> {
        Ok(ALLOC_ALIGN)
    }
    fn mem_alloc(&self, _device: i32, size: usize) -> Result<DevicePtr> {
        let size = size.max(1).next_multiple_of(ALLOC_ALIGN);
        let layout = Layout::from_size_align(size, ALLOC_ALIGN)
            .map_err(|_| Error::arg(format!("cannot allocate {size} bytes")))?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        if p.is_null() {
            return Err(Error::System {
                context: format!("allocating {size} bytes of host memory"),
                message: "out of memory".into(),
            });
        }
        self.allocations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(p as DevicePtr, size);
        Ok(p as DevicePtr)
    }
    unsafe fn mem_free(&self, ptr: DevicePtr) -> Result<()> {
        let size = self
            .allocations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&ptr)
            .ok_or_else(|| Error::arg(format!("{ptr:#x} was not allocated by ncclMemAlloc")))?;
        let layout = Layout::from_size_align(size, ALLOC_ALIGN).expect("layout was valid at alloc");
        // SAFETY: `ptr` came from `alloc_zeroed` with this layout (it was in the table).
        unsafe { std::alloc::dealloc(ptr as *mut u8, layout) };
        Ok(())
    }
    unsafe fn export_handle(&self, ptr: DevicePtr) -> Result<ShareableHandle> {
        let mut h = std::process::id().to_le_bytes().to_vec();
        h.extend_from_slice(&ptr.to_le_bytes());
        Ok(ShareableHandle(h))
    }
    unsafe fn import_handle(&self, handle: &ShareableHandle, _size: usize) -> Result<DevicePtr> {
        let pid = handle
            .0
            .get(0..4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4")));
        let ptr = handle
            .0
            .get(4..12)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8")));
        match (pid, ptr) {
            (Some(pid), Some(ptr)) if pid == std::process::id() => Ok(ptr),
            (Some(_), Some(_)) => Err(Error::usage(
                "the host backend cannot map memory of another process",
            )),
            _ => Err(Error::arg("malformed memory handle")),
        }
    }
    unsafe fn stream_from_raw(&self, raw: usize) -> Result<HostStream> {
        let mut streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = streams.get(&raw) {
            return Ok(s.clone());
        }
        let s = HostStream::new(&format!("{raw:#x}"))?;
        streams.insert(raw, s.clone());
        Ok(s)
    }
    fn stream_synchronize(&self, stream: &HostStream) -> Result<()> {
        stream.synchronize()
    }
    fn is_capturing(&self, _stream: &HostStream) -> Result<bool> {
        Ok(false)
    }
    fn event_create(&self, _stream: &HostStream) -> Result<HostEvent> {
        Ok(HostEvent::default())
    }
    fn event_record(&self, event: &HostEvent, stream: &HostStream) -> Result<()> {
        *event.mark.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((stream.clone(), stream.tail()));
        Ok(())
    }
    fn event_synchronize(&self, event: &HostEvent) -> Result<()> {
        let mark = event.mark.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some((stream, pos)) = mark {
            stream.wait_for(pos);
        }
        Ok(())
    }
    fn event_query(&self, event: &HostEvent) -> Result<Option<bool>> {
        let mark = event.mark.lock().unwrap_or_else(|p| p.into_inner()).clone();
        Ok(Some(mark.is_none_or(|(stream, pos)| stream.has_run(pos))))
    }
    fn stream_id(&self, stream: &HostStream) -> u64 {
        stream.id()
    }
    fn stream_wait_event(&self, stream: &HostStream, event: &HostEvent) -> Result<()> {
        let mark = event.mark.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some((other, pos)) = mark
            && !other.same(stream)
        {
            stream.push(Box::new(move || {
                other.wait_for(pos);
                Ok(())
            }));
        }
        Ok(())
    }
    unsafe fn memcpy_async(
        &self,
        _device: i32,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        stream: &HostStream,
    ) -> Result<()> {
        stream.push(Box::new(move || {
            // SAFETY: the caller guarantees both ranges stay valid until the copy has run.
            unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, bytes) };
            Ok(())
        }));
        Ok(())
    }
    fn pointer_info(&self, ptr: DevicePtr) -> Result<PointerInfo> {
        let allocs = self.allocations.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((&base, &size)) = allocs.range(..=ptr).next_back()
            && ptr < base + size as u64
        {
            return Ok(PointerInfo {
                on_device: true,
                device: 0,
                base,
                size,
            });
        }
        Ok(PointerInfo {
            on_device: false,
            device: -1,
            base: ptr,
            size: 0,
        })
    }
    fn zero_copy(&self) -> bool {
        true
    }
    fn exposable(&self, _ptr: DevicePtr) -> bool {
        // Host memory: every thread of the process reads and writes it.
        true
    }
    fn synchronous_api(&self) -> bool {
        true
    }
    fn connect(&self, ctx: &ConnectContext<'_>) -> Result<HostTransport> {
        let rank = ctx.bootstrap.rank();
        Ok(HostTransport {
            mesh: SocketMesh::connect(ctx.bootstrap, ctx.abort, ctx.timeout)?,
            queue: HostStream::new(&format!("comm-r{rank}"))?,
            abort: ctx.abort.clone(),
        })
    }
    unsafe fn launch(
        &self,
        stream: &HostStream,
        launch: Launch<Self>,
    ) -> Result<Option<HostEvent>> {
        let (done_tx, done_rx) = std::sync::mpsc::sync_channel(1);
        let queue = launch.transport.queue.clone();
        let pos = queue.push(Box::new(move || {
            // SAFETY: `Backend::launch`'s caller keeps the buffers valid until the op has run.
            let r = unsafe {
                executor::execute(
                    &launch.work,
                    &launch.buffers,
                    &launch.transport.mesh,
                    &launch.abort,
                    launch.channel_times.as_deref(),
                )
            };
            if let Err(e) = &r
                && !matches!(e, Error::Aborted)
            {
                launch.abort.record(e.clone());
            }
            let _ = done_tx.send(r);
            Ok(())
        }));
        // The user's stream completes when the operation does, so synchronising it (and events
        // recorded after it) observes the result, without the stream's worker running it.
        stream.push(Box::new(move || {
            done_rx
                .recv()
                .unwrap_or_else(|_| Err(Error::Internal("host operation was dropped".into())))
        }));
        Ok(Some(HostEvent {
            mark: Mutex::new(Some((queue, pos))),
        }))
    }
}
