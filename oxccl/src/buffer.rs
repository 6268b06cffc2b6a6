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
/// The buffer remembers the streams of the operations that used it. Host access
/// ([`DeviceBuffer::copy_from_host`], [`DeviceBuffer::copy_to_host`]) and the release on drop
/// first wait for those streams, and an operation on another stream first makes its stream
/// wait for them: see the crate's soundness rule. Parts of it are passed to operations as
/// [`DeviceSlice`]s and [`DeviceSliceMut`]s ([`DeviceBuffer::slice`],
/// [`DeviceBuffer::split_at_mut`], [`DeviceBuffer::chunks_mut`]).
pub struct DeviceBuffer<T: Element> {
    device: Device,
    ptr: DevicePtr,
    len: usize,
    /// Every stream an operation on any part of the buffer was queued on since the buffer was
    /// last known idle. A set rather than the last stream: operations of other threads on other
    /// views may be queued between another thread's ordering and its launch.
    uses: Mutex<Vec<Stream>>,
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
            uses: Mutex::new(Vec::new()),
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
        self.as_mut_slice().copy_from_host(src)
    }

    /// Copies the contents into `dst`, which must have the same length. Waits for the
    /// operations that use the buffer, then copies.
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        self.as_slice().copy_to_host(dst)
    }

    /// The contents as a vector.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.as_slice().to_vec()
    }

    /// All of it, as a shared view.
    pub fn as_slice(&self) -> DeviceSlice<'_, T> {
        DeviceSlice {
            buf: self,
            start: 0,
            len: self.len,
        }
    }

    /// All of it, as an exclusive view.
    pub fn as_mut_slice(&mut self) -> DeviceSliceMut<'_, T> {
        DeviceSliceMut {
            part: self.as_slice(),
            whole: true,
            _exclusive: PhantomData,
        }
    }

    /// Elements `range` as a shared view; an error when the range does not lie inside.
    pub fn slice(&self, range: impl std::ops::RangeBounds<usize>) -> Result<DeviceSlice<'_, T>> {
        self.as_slice().slice(range)
    }

    /// Elements `range` as an exclusive view; an error when the range does not lie inside.
    pub fn slice_mut(
        &mut self,
        range: impl std::ops::RangeBounds<usize>,
    ) -> Result<DeviceSliceMut<'_, T>> {
        self.as_mut_slice().into_slice_mut(range)
    }

    /// Two exclusive views, of elements `..mid` and `mid..`; an error when `mid > len`.
    pub fn split_at_mut(
        &mut self,
        mid: usize,
    ) -> Result<(DeviceSliceMut<'_, T>, DeviceSliceMut<'_, T>)> {
        self.as_mut_slice().split_at_mut(mid)
    }

    /// Exclusive views of `chunk` elements each (the last may be shorter), in order: the
    /// buckets of a flat gradient buffer. An error when `chunk` is 0.
    pub fn chunks_mut(&mut self, chunk: usize) -> Result<Vec<DeviceSliceMut<'_, T>>> {
        self.as_mut_slice().chunks_mut(chunk)
    }

    fn backend(&self) -> &crate::dispatch::AnyBackend {
        &self.device.runtime.backend
    }

    fn lock_uses(&self) -> std::sync::MutexGuard<'_, Vec<Stream>> {
        self.uses.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for every stream an operation on the buffer was queued on. The set is copied, not
    /// emptied: another thread's operation on another view may be in it.
    fn wait_shared(&self) -> Result<()> {
        let streams = self.lock_uses().clone();
        for s in streams {
            s.synchronize()?;
        }
        Ok(())
    }

    /// Checks that an operation of `runtime`'s device `device` may use this buffer.
    pub(crate) fn check_place(&self, runtime: &Runtime, device: i32, what: &str) -> Result<()> {
        if !self.device.runtime.same(runtime) {
            return Err(Error::arg(format!(
                "{what} buffer was allocated by the {} runtime, the communicator runs on the {} \
                 runtime",
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

    /// Records that an operation is about to be queued on `stream` with part of this buffer:
    /// orders it after every other stream that used the buffer. `whole` says the caller holds
    /// the whole buffer exclusively, so nothing else can be queued meanwhile and the set can
    /// shrink to `stream`.
    pub(crate) fn track(&self, stream: &Stream, whole: bool) -> Result<()> {
        if self.device.runtime.synchronous() {
            // Every operation completed when its call (or its group) returned.
            return Ok(());
        }
        let mut uses = self.lock_uses();
        for prev in uses.iter().filter(|p| !p.same(stream)) {
            stream.order_after(prev)?;
        }
        if whole {
            uses.clear();
        }
        if !uses.iter().any(|s| s.same(stream)) {
            uses.push(stream.clone());
        }
        Ok(())
    }
}

impl<T: Element> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        let streams = std::mem::take(&mut *self.lock_uses());
        for s in streams {
            if let Err(e) = s.synchronize() {
                // The stream failed; its operations are over either way.
                tracing::warn!(target: "oxccl::alloc", "waiting for a buffer's last operation: {e}");
            }
        }
        // SAFETY: the memory came from `mem_alloc` of this backend; every operation that used
        // it was queued on one of the streams waited for above (`&mut self`: none can be
        // queued now).
        if let Err(e) = unsafe { self.backend().mem_free(self.ptr) } {
            tracing::warn!(target: "oxccl::alloc", "freeing a device buffer: {e}");
        }
    }
}

/// A shared view of elements of a [`DeviceBuffer`]: what an operation reads. Borrows the
/// buffer as `&` does, so the same rules hold for views as for whole buffers.
pub struct DeviceSlice<'a, T: Element> {
    buf: &'a DeviceBuffer<T>,
    start: usize,
    len: usize,
}

impl<T: Element> Clone for DeviceSlice<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: Element> Copy for DeviceSlice<'_, T> {}

impl<T: Element> std::fmt::Debug for DeviceSlice<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?}[{}..{}]",
            self.buf,
            self.start,
            self.start + self.len
        )
    }
}

impl<'a, T: Element> DeviceSlice<'a, T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when it holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The buffer it is a view of.
    pub fn buffer(&self) -> &'a DeviceBuffer<T> {
        self.buf
    }

    /// Index of its first element in the buffer.
    pub fn offset(&self) -> usize {
        self.start
    }

    /// Elements `range` of this view; an error when the range does not lie inside.
    pub fn slice(self, range: impl std::ops::RangeBounds<usize>) -> Result<DeviceSlice<'a, T>> {
        let (start, len) = sub_range(self.len, range)?;
        Ok(DeviceSlice {
            buf: self.buf,
            start: self.start + start,
            len,
        })
    }

    /// Copies the contents into `dst`, which must have the same length. Waits for the
    /// operations that use the buffer, then copies.
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        check_host_len(self.len, dst.len())?;
        self.buf.wait_shared()?;
        // SAFETY: the range lies inside the allocation, and every operation queued on it so
        // far completed. Operations started since through shared views only read it (writers
        // need an exclusive view, which cannot coexist with this one).
        unsafe {
            self.buf.backend().copy_from_device(
                self.buf.device.ordinal,
                as_bytes_mut(dst),
                self.addr(0),
            )
        }?;
        Ok(())
    }

    /// The contents as a vector.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut v = vec![T::default(); self.len];
        self.copy_to_host(&mut v)?;
        Ok(v)
    }

    /// The view an operation addresses (never the whole buffer held exclusively).
    pub(crate) fn access(&self) -> (DeviceSlice<'a, T>, bool) {
        (*self, false)
    }

    /// The address of element `at` of the view.
    pub(crate) fn addr(&self, at: usize) -> DevicePtr {
        debug_assert!(at <= self.len);
        self.buf.ptr + ((self.start + at) * size_of::<T>()) as u64
    }
}

/// An exclusive view of elements of a [`DeviceBuffer`]: what an operation writes. Borrows the
/// buffer as `&mut` does; [`DeviceBuffer::split_at_mut`] and [`DeviceBuffer::chunks_mut`]
/// give disjoint ones, which may be used by different operations (and threads) at once.
pub struct DeviceSliceMut<'a, T: Element> {
    part: DeviceSlice<'a, T>,
    /// Made from `&mut DeviceBuffer` and covering all of it: no other view exists.
    whole: bool,
    _exclusive: PhantomData<&'a mut DeviceBuffer<T>>,
}

impl<T: Element> std::fmt::Debug for DeviceSliceMut<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "mut {:?}", self.part)
    }
}

impl<'a, T: Element> DeviceSliceMut<'a, T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.part.len
    }

    /// True when it holds no element.
    pub fn is_empty(&self) -> bool {
        self.part.len == 0
    }

    /// Index of its first element in the buffer.
    pub fn offset(&self) -> usize {
        self.part.start
    }

    /// A shared view of the same elements, for as long as this one is borrowed.
    pub fn as_slice(&self) -> DeviceSlice<'_, T> {
        self.part
    }

    /// A shorter-lived exclusive view of the same elements (to pass it to an operation and
    /// keep this one).
    pub fn reborrow(&mut self) -> DeviceSliceMut<'_, T> {
        DeviceSliceMut {
            part: self.part,
            whole: self.whole,
            _exclusive: PhantomData,
        }
    }

    /// Elements `range` of this view; an error when the range does not lie inside.
    pub fn into_slice_mut(
        self,
        range: impl std::ops::RangeBounds<usize>,
    ) -> Result<DeviceSliceMut<'a, T>> {
        let part = self.part.slice(range)?;
        Ok(DeviceSliceMut {
            whole: self.whole && part.len == self.part.len,
            part,
            _exclusive: PhantomData,
        })
    }

    /// Two exclusive views, of elements `..mid` and `mid..`; an error when `mid > len`.
    pub fn split_at_mut(
        self,
        mid: usize,
    ) -> Result<(DeviceSliceMut<'a, T>, DeviceSliceMut<'a, T>)> {
        if mid > self.part.len {
            return Err(Error::arg(format!(
                "split at {mid} of a view of {} elements",
                self.part.len
            )));
        }
        let piece = |start: usize, len: usize| DeviceSliceMut {
            part: DeviceSlice {
                buf: self.part.buf,
                start: self.part.start + start,
                len,
            },
            whole: false,
            _exclusive: PhantomData,
        };
        Ok((piece(0, mid), piece(mid, self.part.len - mid)))
    }

    /// Exclusive views of `chunk` elements each (the last may be shorter), in order. An error
    /// when `chunk` is 0.
    pub fn chunks_mut(self, chunk: usize) -> Result<Vec<DeviceSliceMut<'a, T>>> {
        if chunk == 0 {
            return Err(Error::arg("chunks of 0 elements"));
        }
        let mut out = Vec::with_capacity(self.part.len.div_ceil(chunk));
        let mut rest = self;
        while rest.len() > chunk {
            let (head, tail) = rest.split_at_mut(chunk)?;
            out.push(head);
            rest = tail;
        }
        if !rest.is_empty() {
            out.push(rest);
        }
        Ok(out)
    }

    /// Replaces the contents with `src`, which must have the same length. Waits for the
    /// operations that use the buffer, then copies.
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        check_host_len(self.part.len, src.len())?;
        self.part.buf.wait_shared()?;
        // SAFETY: the range lies inside the allocation, every operation queued on it so far
        // completed, and this exclusive view keeps new ones off it.
        unsafe {
            self.part.buf.backend().copy_to_device(
                self.part.buf.device.ordinal,
                self.part.addr(0),
                as_bytes(src),
            )
        }?;
        Ok(())
    }

    /// Copies the contents into `dst`, which must have the same length.
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        self.part.copy_to_host(dst)
    }

    /// The contents as a vector.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.part.to_vec()
    }

    /// The view an operation addresses, and whether it is the whole buffer held exclusively.
    pub(crate) fn access(&self) -> (DeviceSlice<'a, T>, bool) {
        (self.part, self.whole)
    }

    /// The address of element `at` of the view.
    pub(crate) fn addr(&self, at: usize) -> DevicePtr {
        self.part.addr(at)
    }
}

/// `range` within `0..len` as (start, length).
fn sub_range(len: usize, range: impl std::ops::RangeBounds<usize>) -> Result<(usize, usize)> {
    use std::ops::Bound;
    let start = match range.start_bound() {
        Bound::Included(&s) => Some(s),
        Bound::Excluded(&s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => Some(len),
    };
    match (start, end) {
        (Some(s), Some(e)) if s <= e && e <= len => Ok((s, e - s)),
        _ => Err(Error::arg(format!(
            "range {:?}..{:?} does not lie inside a view of {len} elements",
            range.start_bound(),
            range.end_bound()
        ))),
    }
}

fn check_host_len(device: usize, host: usize) -> Result<()> {
    if host != device {
        return Err(Error::arg(format!(
            "host slice has {host} elements, the device buffer {device}"
        )));
    }
    Ok(())
}

/// What an operation reads: `&DeviceBuffer`, a [`DeviceSlice`], or `&DeviceSliceMut`.
/// Sealed: the soundness rule relies on the borrows these conversions keep.
pub trait DeviceInput<'b, T: Element>: crate::private::Sealed {
    /// The elements read.
    #[doc(hidden)]
    fn input(self) -> DeviceSlice<'b, T>;
}

/// What an operation writes: `&mut DeviceBuffer`, a [`DeviceSliceMut`], or
/// `&mut DeviceSliceMut`. Sealed, as [`DeviceInput`].
pub trait DeviceOutput<'b, T: Element>: crate::private::Sealed {
    /// The elements written.
    #[doc(hidden)]
    fn output(self) -> DeviceSliceMut<'b, T>;
}

impl<T: Element> crate::private::Sealed for &DeviceBuffer<T> {}
impl<T: Element> crate::private::Sealed for &mut DeviceBuffer<T> {}
impl<T: Element> crate::private::Sealed for DeviceSlice<'_, T> {}
impl<T: Element> crate::private::Sealed for DeviceSliceMut<'_, T> {}
impl<T: Element> crate::private::Sealed for &DeviceSliceMut<'_, T> {}
impl<T: Element> crate::private::Sealed for &mut DeviceSliceMut<'_, T> {}

impl<'b, T: Element> DeviceInput<'b, T> for &'b DeviceBuffer<T> {
    fn input(self) -> DeviceSlice<'b, T> {
        self.as_slice()
    }
}

impl<'b, T: Element> DeviceInput<'b, T> for DeviceSlice<'b, T> {
    fn input(self) -> DeviceSlice<'b, T> {
        self
    }
}

impl<'b, T: Element> DeviceInput<'b, T> for &'b DeviceSliceMut<'_, T> {
    fn input(self) -> DeviceSlice<'b, T> {
        self.part
    }
}

impl<'b, T: Element> DeviceOutput<'b, T> for &'b mut DeviceBuffer<T> {
    fn output(self) -> DeviceSliceMut<'b, T> {
        self.as_mut_slice()
    }
}

impl<'b, T: Element> DeviceOutput<'b, T> for DeviceSliceMut<'b, T> {
    fn output(self) -> DeviceSliceMut<'b, T> {
        self
    }
}

impl<'b, T: Element> DeviceOutput<'b, T> for &'b mut DeviceSliceMut<'_, T> {
    fn output(self) -> DeviceSliceMut<'b, T> {
        self.reborrow()
    }
}

#[cfg(test)]
mod tests {
    use crate::Runtime;

    #[test]
    fn views_address_their_range_and_copy_only_it() {
        let dev = Runtime::host().device(0).unwrap();
        let mut buf = dev.buffer_from(&[0i32, 1, 2, 3, 4, 5, 6]).unwrap();
        assert_eq!(buf.slice(2..5).unwrap().to_vec().unwrap(), [2, 3, 4]);
        assert_eq!(buf.slice(..=1).unwrap().to_vec().unwrap(), [0, 1]);
        assert!(buf.slice(3..8).is_err());
        let (start, end) = (5, 4);
        assert!(buf.slice(start..end).is_err());
        {
            let (mut a, b) = buf.split_at_mut(3).unwrap();
            a.copy_from_host(&[9, 9, 9]).unwrap();
            assert_eq!(b.to_vec().unwrap(), [3, 4, 5, 6]);
            assert!(a.copy_from_host(&[1]).is_err());
        }
        assert_eq!(buf.to_vec().unwrap(), [9, 9, 9, 3, 4, 5, 6]);
        let lens: Vec<_> = buf
            .chunks_mut(3)
            .unwrap()
            .iter()
            .map(|c| (c.offset(), c.len()))
            .collect();
        assert_eq!(lens, [(0, 3), (3, 3), (6, 1)]);
        assert!(buf.chunks_mut(0).is_err());
        assert!(buf.split_at_mut(8).is_err());
    }
}
