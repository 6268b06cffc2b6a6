//! The backend a program runs on, chosen at run time, and its devices.

use crate::Element;
use crate::buffer::DeviceBuffer;
use crate::dispatch::{self, AnyBackend, RuntimeBackend};
use crate::error::{Error, Result};
use crate::stream::Stream;
use std::sync::Arc;

/// A backend (CUDA, HIP or the host) chosen at run time. Cheap to clone; everything made from
/// one runtime (devices, buffers, streams, communicators) works only with that runtime.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) backend: Arc<AnyBackend>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Runtime({})", self.name())
    }
}

impl Runtime {
    /// The process-wide runtime: `OXCCL_BACKEND` (`host`, `cuda`, `hip`, `auto`) when set, else
    /// the first of CUDA and HIP that loads and has a device, else the host. Chosen once per
    /// process and shared with the C ABI.
    pub fn auto() -> Result<Runtime> {
        Ok(Runtime {
            backend: dispatch::backend()?.clone(),
        })
    }

    /// The host backend: CPU memory and threads, no device needed. One per process: every call
    /// returns the same runtime.
    pub fn host() -> Runtime {
        Runtime {
            backend: dispatch::choose::host(),
        }
    }

    /// The CUDA backend (one per process); an error when no driver or no device is present.
    #[cfg(feature = "cuda")]
    pub fn cuda() -> Result<Runtime> {
        Ok(Runtime {
            backend: dispatch::choose::cuda()?,
        })
    }

    /// The HIP backend (one per process); an error when no runtime or no device is present.
    #[cfg(feature = "hip")]
    pub fn hip() -> Result<Runtime> {
        Ok(Runtime {
            backend: dispatch::choose::hip()?,
        })
    }

    /// `"cuda"`, `"hip"` or `"host"`.
    pub fn name(&self) -> &'static str {
        self.backend.name()
    }

    /// Number of devices (the host backend offers 1024 virtual ones, so that every rank of a
    /// process can have its own).
    pub fn device_count(&self) -> Result<usize> {
        Ok(self.backend.device_count()?)
    }

    /// Every device.
    pub fn devices(&self) -> Result<Vec<Device>> {
        Ok((0..self.device_count()?)
            .map(|d| Device {
                runtime: self.clone(),
                ordinal: d as i32,
            })
            .collect())
    }

    /// Device number `ordinal`.
    pub fn device(&self, ordinal: usize) -> Result<Device> {
        let n = self.device_count()?;
        if ordinal >= n {
            return Err(Error::arg(format!(
                "device {ordinal} does not exist: the {} backend has {n}",
                self.name()
            )));
        }
        Ok(Device {
            runtime: self.clone(),
            ordinal: ordinal as i32,
        })
    }

    /// Whether both handles are the same runtime.
    pub fn same(&self, other: &Runtime) -> bool {
        Arc::ptr_eq(&self.backend, &other.backend)
    }

    /// True when operations complete before their call returns (the host backend).
    pub(crate) fn synchronous(&self) -> bool {
        self.backend.synchronous()
    }
}

/// One device of a [`Runtime`].
#[derive(Clone, Debug)]
pub struct Device {
    pub(crate) runtime: Runtime,
    pub(crate) ordinal: i32,
}

impl Device {
    /// The device number.
    pub fn ordinal(&self) -> usize {
        self.ordinal as usize
    }

    /// Its runtime.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// A zero-filled buffer of `len` elements on this device (VMM memory that peers can map,
    /// as `ncclMemAlloc` gives).
    pub fn alloc<T: Element>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        DeviceBuffer::zeroed(self, len)
    }

    /// A buffer on this device holding a copy of `data`.
    pub fn buffer_from<T: Element>(&self, data: &[T]) -> Result<DeviceBuffer<T>> {
        let mut b = DeviceBuffer::uninit(self, data.len())?;
        b.copy_from_host(data)?;
        Ok(b)
    }

    /// A new stream on this device, destroyed when its last handle is dropped.
    pub fn create_stream(&self) -> Result<Stream> {
        Stream::create(self)
    }
}
