//! The CUDA backend's part of the dispatch layer. Stream destruction and queries are driver
//! calls that backend-cuda does not wrap, so they are made here through cudarc's `sys`.

use super::{AnyComm, AnyStream, DeviceBackend, GenComm};
use cudarc::driver::sys;
use oxccl_core::Result;
use oxccl_core::backend::{Backend, DevicePtr};
use oxccl_cuda::{CudaBackend, CudaStream};

/// A driver result as ours.
fn check(api: &'static str, r: sys::CUresult) -> Result<()> {
    oxccl_cuda::driver::check(api, r)
}

impl DeviceBackend for CudaBackend {
    unsafe fn comm_stream(&self, raw: usize) -> Result<CudaStream> {
        // SAFETY: forwarded from the caller.
        unsafe { self.stream_from_raw(raw) }
    }
    fn wrap(comm: GenComm<Self>) -> AnyComm {
        AnyComm::Cuda(comm)
    }
    fn wrap_stream(stream: CudaStream) -> AnyStream {
        AnyStream::Cuda(stream)
    }
    fn stream_of(stream: &AnyStream) -> Option<&CudaStream> {
        match stream {
            AnyStream::Cuda(s) => Some(s),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }
    fn create_stream(&self, device: i32) -> Result<CudaStream> {
        self.stream_create(device)
    }
    unsafe fn destroy_stream(&self, stream: &CudaStream) -> Result<()> {
        // SAFETY: the caller guarantees the stream is ours, idle and not used again.
        check("cuStreamDestroy", unsafe {
            sys::cuStreamDestroy_v2(stream.raw())
        })
    }
    fn query(&self, stream: &CudaStream) -> Result<bool> {
        // SAFETY: the stream is live (it came from `create_stream` or a caller who keeps it).
        match unsafe { sys::cuStreamQuery(stream.raw()) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            r => check("cuStreamQuery", r).map(|()| false),
        }
    }
    unsafe fn copy_to_device(&self, device: i32, dst: DevicePtr, src: &[u8]) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { CudaBackend::copy_to_device(self, device, dst, src) }
    }
    unsafe fn copy_from_device(&self, device: i32, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { CudaBackend::copy_from_device(self, device, dst, src) }
    }
}
