//! The host backend's part of the dispatch layer.

use super::{AnyComm, AnyStream, DeviceBackend, GenComm};
use oxccl_core::backend::{Backend, DevicePtr};
use oxccl_core::host::HostStream;
use oxccl_core::{HostBackend, Result};

impl DeviceBackend for HostBackend {
    unsafe fn comm_stream(&self, raw: usize) -> Result<HostStream> {
        // Core runs each communicator's operations on its own queue, so ranks of one process
        // sharing a raw handle (usually NULL) never wait behind each other; the stream itself
        // only orders completion, and the backend already caches it per handle.
        // SAFETY: forwarded from the caller.
        unsafe { self.stream_from_raw(raw) }
    }
    fn wrap(comm: GenComm<Self>) -> AnyComm {
        AnyComm::Host(comm)
    }
    fn wrap_stream(stream: HostStream) -> AnyStream {
        AnyStream::Host(stream)
    }
    fn stream_of(stream: &AnyStream) -> Option<&HostStream> {
        match stream {
            AnyStream::Host(s) => Some(s),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }
    fn create_stream(&self, _device: i32) -> Result<HostStream> {
        self.stream_create()
    }
    unsafe fn destroy_stream(&self, _stream: &HostStream) -> Result<()> {
        // The worker thread ends when its last handle is dropped.
        Ok(())
    }
    fn query(&self, _stream: &HostStream) -> Result<bool> {
        // Every host-backend operation and copy has completed when its call returns.
        Ok(true)
    }
    unsafe fn copy_to_device(&self, _device: i32, dst: DevicePtr, src: &[u8]) -> Result<()> {
        // SAFETY: the caller guarantees `dst` is host-backend memory of `src.len()` bytes that
        // nothing else uses now; it cannot overlap `src`, which is borrowed.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len()) };
        Ok(())
    }
    unsafe fn copy_from_device(&self, _device: i32, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        // SAFETY: the caller guarantees `src` is host-backend memory of `dst.len()` bytes that
        // nothing writes now; it cannot overlap `dst`, which is borrowed mutably.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }
}
