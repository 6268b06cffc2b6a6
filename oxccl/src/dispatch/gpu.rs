//! The GPU backends' part of the dispatch layer, written once over the vendors' runtime calls
//! (`DeviceApi`); what stays per vendor is which enum variant holds its communicators and
//! streams ([`GpuVariant`], in `cuda.rs` and `hip.rs`).

use super::{AnyComm, AnyStream, DeviceBackend, GenComm};
use oxccl_core::Result;
use oxccl_core::backend::DevicePtr;
use oxccl_device_transport::{DeviceApi, GpuBackend};

/// A vendor's place in the dispatch enums.
pub trait GpuVariant: DeviceApi {
    /// Wraps a communicator of this vendor's backend into the dispatch enum.
    fn wrap_comm(comm: GenComm<GpuBackend<Self>>) -> AnyComm;
    /// Wraps a stream of this vendor's backend into the dispatch enum.
    fn wrap_stream(stream: Self::Stream) -> AnyStream;
    /// This vendor's stream inside `stream`; `None` when it belongs to another backend.
    fn stream_of(stream: &AnyStream) -> Option<&Self::Stream>;
}

impl<A: GpuVariant> DeviceBackend for GpuBackend<A> {
    unsafe fn comm_stream(&self, raw: usize) -> Result<A::Stream> {
        Ok(A::stream_from_handle(raw))
    }
    fn wrap(comm: GenComm<Self>) -> AnyComm {
        A::wrap_comm(comm)
    }
    fn wrap_stream(stream: A::Stream) -> AnyStream {
        A::wrap_stream(stream)
    }
    fn stream_of(stream: &AnyStream) -> Option<&A::Stream> {
        A::stream_of(stream)
    }
    // Relaxed for the same reason as the backend's allocations: in global capture mode a
    // stream made or destroyed, or a synchronous copy, breaks every other thread's capture.
    fn create_stream(&self, device: i32) -> Result<A::Stream> {
        let _relaxed = self.api().relaxed_capture()?;
        self.api().caller_stream_create(device)
    }
    unsafe fn destroy_stream(&self, stream: &A::Stream) -> Result<()> {
        let _relaxed = self.api().relaxed_capture()?;
        // SAFETY: forwarded from the caller.
        unsafe { self.api().caller_stream_destroy(A::stream_handle(stream)) }
    }
    fn query(&self, stream: &A::Stream) -> Result<bool> {
        self.api().caller_stream_done(A::stream_handle(stream))
    }
    unsafe fn copy_to_device(&self, device: i32, dst: DevicePtr, src: &[u8]) -> Result<()> {
        let _relaxed = self.api().relaxed_capture()?;
        // SAFETY: forwarded from the caller.
        unsafe { self.api().caller_copy_to_device(device, dst, src) }
    }
    unsafe fn copy_from_device(&self, device: i32, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        let _relaxed = self.api().relaxed_capture()?;
        // SAFETY: forwarded from the caller.
        unsafe { self.api().caller_copy_from_device(device, dst, src) }
    }
}
