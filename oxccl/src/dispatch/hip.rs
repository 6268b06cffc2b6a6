//! The HIP backend's place in the dispatch enums.

use super::gpu::GpuVariant;
use super::{AnyComm, AnyStream, GenComm};
use oxccl_hip::{HipApi, HipBackend, HipStream};

impl GpuVariant for HipApi {
    fn wrap_comm(comm: GenComm<HipBackend>) -> AnyComm {
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
}
