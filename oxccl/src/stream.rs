//! Streams: ordered queues of device work.

use crate::dispatch::{AnyBackend, AnyStream, RuntimeBackend};
use crate::error::Result;
use crate::runtime::{Device, Runtime};
use std::any::Any;
use std::sync::Arc;

/// An ordered queue of work on one device (`CUstream`, `hipStream_t`, a host worker). Cloning
/// shares it; a stream this crate created is destroyed, after its work completed, when the last
/// clone (including those buffers keep, see the crate's soundness rule) is dropped.
#[derive(Clone)]
pub struct Stream {
    inner: Arc<Inner>,
}

struct Inner {
    backend: Arc<AnyBackend>,
    device: i32,
    handle: AnyStream,
    /// Created here, so destroyed here.
    owned: bool,
    /// Whatever owns a borrowed handle (a cudarc stream), kept alive as long as this.
    _keep: Option<Arc<dyn Any + Send + Sync>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        if let Err(e) = self.backend.synchronize(&self.handle) {
            tracing::warn!(target: "oxccl::init", "synchronizing a stream before destroying it: {e}");
        }
        // SAFETY: the stream was created by `Stream::create`, its work has completed and this
        // was its last handle.
        if let Err(e) = unsafe { self.backend.destroy_stream(&self.handle) } {
            tracing::warn!(target: "oxccl::init", "destroying a stream: {e}");
        }
    }
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Stream(device {})", self.inner.device)
    }
}

impl Stream {
    /// A new stream on `device`.
    pub(crate) fn create(device: &Device) -> Result<Stream> {
        let backend = device.runtime.backend.clone();
        let handle = backend.create_stream(device.ordinal)?;
        Ok(Stream {
            inner: Arc::new(Inner {
                backend,
                device: device.ordinal,
                handle,
                owned: true,
                _keep: None,
            }),
        })
    }

    /// A stream of another library, named by its raw handle (`CUstream`, `hipStream_t`, as an
    /// integer; 0 is the default stream).
    ///
    /// # Safety
    /// `raw` is 0 or a live stream of `device`'s runtime on that device, and stays live as long
    /// as this `Stream`, its clones, and every buffer last used on it.
    pub unsafe fn from_raw(device: &Device, raw: usize) -> Result<Stream> {
        let backend = device.runtime.backend.clone();
        // SAFETY: forwarded from the caller.
        let handle = unsafe { backend.stream_from_raw(raw) }?;
        Ok(Stream::borrowed(device, handle, None))
    }

    /// A handle this crate does not own, kept valid by `keep`.
    pub(crate) fn borrowed(
        device: &Device,
        handle: AnyStream,
        keep: Option<Arc<dyn Any + Send + Sync>>,
    ) -> Stream {
        Stream {
            inner: Arc::new(Inner {
                backend: device.runtime.backend.clone(),
                device: device.ordinal,
                handle,
                owned: false,
                _keep: keep,
            }),
        }
    }

    /// Blocks until everything queued so far has run.
    pub fn synchronize(&self) -> Result<()> {
        Ok(self.inner.backend.synchronize(&self.inner.handle)?)
    }

    /// Whether everything queued so far has run (never blocks).
    pub fn is_complete(&self) -> Result<bool> {
        Ok(self.inner.backend.query(&self.inner.handle)?)
    }

    /// The device number it runs on.
    pub fn device(&self) -> usize {
        self.inner.device as usize
    }

    /// The backend's handle.
    pub(crate) fn handle(&self) -> &AnyStream {
        &self.inner.handle
    }

    /// Whether it belongs to `runtime`'s device `device`.
    pub(crate) fn is_on(&self, runtime: &Runtime, device: i32) -> bool {
        Arc::ptr_eq(&self.inner.backend, &runtime.backend) && self.inner.device == device
    }

    /// Whether both name the same stream.
    pub(crate) fn same(&self, other: &Stream) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner) || self.inner.handle.same(&other.inner.handle)
    }

    /// Makes this stream wait on the device for what `earlier` has queued so far.
    pub(crate) fn order_after(&self, earlier: &Stream) -> Result<()> {
        Ok(self
            .inner
            .backend
            .order_after(&self.inner.handle, &earlier.inner.handle)?)
    }
}
