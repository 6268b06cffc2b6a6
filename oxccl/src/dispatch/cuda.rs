//! The CUDA backend's place in the dispatch enums.

use super::gpu::GpuVariant;
use super::{AnyComm, AnyStream, GenComm};
use oxccl_cuda::{CudaApi, CudaBackend, CudaStream};

impl GpuVariant for CudaApi {
    fn wrap_comm(comm: GenComm<CudaBackend>) -> AnyComm {
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
}
