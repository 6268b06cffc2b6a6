//! Device buffers owned by the runtime, with stream-ordered reuse and release.

use crate::Element;
use crate::dispatch::RuntimeBackend;
use crate::element::{as_bytes, as_bytes_mut};
use crate::error::{Error, Result};
use crate::runtime::{Device, Runtime};
use crate::stream::Stream;
use oxccl_core::backend::DevicePtr;
use std::marker::PhantomData;
use std::sync::Mutex;

/// Bytes zeroed per host-to-device copy when a buffer is allocated.
const ZERO_CHUNK: usize = 64 << 20;

/// `len` elements of `T` in memory of one device, freed when dropped.
///
/// The buffer remembers the stream of the last operation that used it. Host access
/// ([`DeviceBuffer::copy_from_host`], [`DeviceBuffer::copy_to_host`]) and the release on drop
/// first wait for that stream, and an operation on another stream first makes its stream wait
/// for it: see the crate's soundness rule.
pub struct DeviceBuffer<T: Element> {
    device: Device,
    ptr: DevicePtr,
    len: usize,
    last_use: Mutex<Option<Stream>>,
    _elements: PhantomData<T>,
}

impl<T: Element> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceBuffer<{}>(len {}, {} device {})",
            T::NAME,
            self.len,
            self.device.runtime.name(),
            self.device.ordinal
        )
    }
}

impl<T: Element> DeviceBuffer<T> {
    /// Memory for `len` elements with unspecified (but, for every `Element`, valid) contents.
    pub(crate) fn uninit(device: &Device, len: usize) -> Result<DeviceBuffer<T>> {
        let bytes = len
            .checked_mul(size_of::<T>())
            .filter(|b| *b <= isize::MAX as usize)
            .ok_or_else(|| Error::arg(format!("{len} elements of {} are too many", T::NAME)))?;
        // Zero-length buffers still get an address, so they can be passed like any other.
        let ptr = device
            .runtime
            .backend
            .mem_alloc(device.ordinal, bytes.max(1))?;
        Ok(DeviceBuffer {
            device: device.clone(),
            ptr,
            len,
            last_use: Mutex::new(None),
            _elements: PhantomData,
        })
    }

    /// Memory for `len` elements, all zero.
    pub(crate) fn zeroed(device: &Device, len: usize) -> Result<DeviceBuffer<T>> {
        let b = DeviceBuffer::uninit(device, len)?;
        let total = len * size_of::<T>();
        let zeros = vec![0u8; total.min(ZERO_CHUNK)];
        let mut done = 0;
        while done < total {
            let n = zeros.len().min(total - done);
            // SAFETY: the range lies inside the allocation, which nothing else uses yet.
            unsafe {
                device.runtime.backend.copy_to_device(
                    device.ordinal,
                    b.ptr + done as u64,
                    &zeros[..n],
                )
            }?;
            done += n;
        }
        Ok(b)
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when it holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device it lives on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Its address in the backend's address space (for logging or handing to foreign code
    /// through an `unsafe` interface; reading it is harmless).
    pub fn as_raw(&self) -> u64 {
        self.ptr
    }

    /// Replaces the contents with `src`, which must have the same length. Waits for the
    /// operations that use the buffer, then copies.
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        self.check_host_len(src.len())?;
        self.wait_idle()?;
        // SAFETY: the allocation holds `len` elements, and `wait_idle` saw every operation that
        // used it complete; `&mut self` keeps new ones from starting.
        unsafe {
            self.backend()
                .copy_to_device(self.device.ordinal, self.ptr, as_bytes(src))
        }?;
        Ok(())
    }

    /// Copies the contents into `dst`, which must have the same length. Waits for the
    /// operations that use the buffer, then copies.
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        self.check_host_len(dst.len())?;
        self.wait_idle()?;
        // SAFETY: the allocation holds `len` elements, and `wait_idle` saw every operation that
        // used it complete. Operations started since through `&self` only read it (writers
        // need `&mut`).
        unsafe {
            self.backend()
                .copy_from_device(self.device.ordinal, as_bytes_mut(dst), self.ptr)
        }?;
        Ok(())
    }

    /// The contents as a vector.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut v = vec![T::default(); self.len];
        self.copy_to_host(&mut v)?;
        Ok(v)
    }

    fn backend(&self) -> &crate::dispatch::AnyBackend {
        &self.device.runtime.backend
    }

    fn check_host_len(&self, n: usize) -> Result<()> {
        if n != self.len {
            return Err(Error::arg(format!(
                "host slice has {n} elements, the device buffer {}",
                self.len
            )));
        }
        Ok(())
    }

    /// Waits for the stream of the last operation that used the buffer.
    fn wait_idle(&self) -> Result<()> {
        let last = self.lock_last().take();
        if let Some(s) = last {
            s.synchronize()?;
        }
        Ok(())
    }

    fn lock_last(&self) -> std::sync::MutexGuard<'_, Option<Stream>> {
        self.last_use.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Checks that an operation of `runtime`'s device `device` may use this buffer.
    pub(crate) fn check_place(&self, runtime: &Runtime, device: i32, what: &str) -> Result<()> {
        if !self.device.runtime.same(runtime) {
            return Err(Error::arg(format!(
                "{what} buffer was allocated by another runtime ({}) than the communicator's ({})",
                self.device.runtime.name(),
                runtime.name()
            )));
        }
        if self.device.ordinal != device {
            return Err(Error::arg(format!(
                "{what} buffer is on device {}, the communicator on device {device}",
                self.device.ordinal
            )));
        }
        Ok(())
    }

    /// Records that an operation is about to be queued on `stream` with this buffer: orders it
    /// after the buffer's previous use on another stream.
    pub(crate) fn track(&self, stream: &Stream) -> Result<()> {
        if self.device.runtime.synchronous() {
            // Every operation completed when its call (or its group) returned.
            return Ok(());
        }
        let mut last = self.lock_last();
        if let Some(prev) = last.as_ref() {
            if prev.same(stream) {
                return Ok(());
            }
            stream.order_after(prev)?;
        }
        *last = Some(stream.clone());
        Ok(())
    }

    /// The address of element `at`.
    pub(crate) fn addr(&self, at: usize) -> DevicePtr {
        debug_assert!(at <= self.len);
        self.ptr + (at * size_of::<T>()) as u64
    }
}

impl<T: Element> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        if let Err(e) = self.wait_idle() {
            // The stream failed; its operations are over either way.
            tracing::warn!(target: "oxccl::alloc", "waiting for a buffer's last operation: {e}");
        }
        // SAFETY: the memory came from `mem_alloc` of this backend, and `wait_idle` saw the last
        // operation that used it complete.
        if let Err(e) = unsafe { self.backend().mem_free(self.ptr) } {
            tracing::warn!(target: "oxccl::alloc", "freeing a device buffer: {e}");
        }
    }
}
