//! The HIP backend's part of the dispatch layer.

use super::{AnyComm, AnyStream, DeviceBackend, GenComm};
use oxccl_core::backend::{Backend, DevicePtr};
use oxccl_core::{Error, Result};
use oxccl_hip::{HipBackend, HipStream};

impl DeviceBackend for HipBackend {
    unsafe fn comm_stream(&self, raw: usize) -> Result<HipStream> {
        // SAFETY: forwarded from the caller.
        unsafe { self.stream_from_raw(raw) }
    }
    fn wrap(comm: GenComm<Self>) -> AnyComm {
        AnyComm::Hip(comm)
    }
    fn wrap_stream(stream: HipStream) -> AnyStream {
        AnyStream::Hip(stream)
    }
    fn stream_of(stream: &AnyStream) -> Option<&HipStream> {
        match stream {
            AnyStream::Hip(s) => Some(s),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }
    fn create_stream(&self, device: i32) -> Result<HipStream> {
        // hipStreamCreate binds the stream to the current device.
        self.set_device(device)?;
        self.stream_create()
    }
    unsafe fn destroy_stream(&self, stream: &HipStream) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.stream_destroy(*stream) }
    }
    fn query(&self, stream: &HipStream) -> Result<bool> {
        match self.stream_query(stream)? {
            Some(done) => Ok(done),
            None => Err(Error::usage(
                "this HIP runtime has no hipStreamQuery; synchronize instead",
            )),
        }
    }
    unsafe fn copy_to_device(&self, device: i32, dst: DevicePtr, src: &[u8]) -> Result<()> {
        let stream = HipStream(0);
        self.set_device(device)?;
        // SAFETY: the caller guarantees `dst`; `src` is borrowed until the synchronize below.
        unsafe { self.memcpy_async(device, dst, src.as_ptr() as DevicePtr, src.len(), &stream) }?;
        self.stream_synchronize(&stream)
    }
    unsafe fn copy_from_device(&self, device: i32, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        let stream = HipStream(0);
        self.set_device(device)?;
        // SAFETY: the caller guarantees `src`; `dst` is borrowed until the synchronize below.
        unsafe {
            self.memcpy_async(
                device,
                dst.as_mut_ptr() as DevicePtr,
                src,
                dst.len(),
                &stream,
            )
        }?;
        self.stream_synchronize(&stream)
    }
}
