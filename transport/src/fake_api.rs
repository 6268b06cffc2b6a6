//! A runtime for tests that only records what it is asked (no device).

use crate::api::{CaptureStatus, DeviceApi, Executor, Handle};
use oxccl_core::backend::{DevicePtr, PointerInfo, ShareableHandle};
use oxccl_core::datatype::DataType;
use oxccl_core::error::{Error, Result};
use std::sync::Mutex;

/// A runtime that only records what it is asked (no device): addresses and
/// handles count up from 0x1000, calls are logged in order; events are complete unless
/// [`FakeApi::hold_events`] was called; argument blocks go by address unless
/// [`FakeApi::inline_blocks`] was called.
#[derive(Clone, Default)]
pub(crate) struct FakeApi(std::sync::Arc<Mutex<FakeState>>);

#[derive(Default)]
struct FakeState {
    /// The last address or handle handed out.
    last: u64,
    calls: Vec<String>,
    held: bool,
    /// Inline capacity of the executor's parameters (`None`: by address).
    inline_cap: Option<usize>,
    /// The parameters of every kernel launch, in order.
    params: Vec<Vec<u8>>,
}

impl FakeApi {
    fn next(&self, what: String) -> u64 {
        let mut g = self.0.lock().unwrap();
        g.last += 0x1000;
        g.calls.push(what);
        g.last
    }
    fn log(&self, what: String) {
        self.0.lock().unwrap().calls.push(what);
    }
    pub(crate) fn calls(&self) -> Vec<String> {
        std::mem::take(&mut self.0.lock().unwrap().calls)
    }
    /// From now on no event completes: as if the device never ran what was queued.
    pub(crate) fn hold_events(&self) {
        self.0.lock().unwrap().held = true;
    }
    /// From now on the executor takes argument blocks of up to `cap` bytes inline.
    pub(crate) fn inline_blocks(&self, cap: usize) {
        self.0.lock().unwrap().inline_cap = Some(cap);
    }
    /// The parameters of the kernel launches since the last call.
    pub(crate) fn launched_params(&self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.0.lock().unwrap().params)
    }
}

impl DeviceApi for FakeApi {
    type Bound = ();
    type Relaxed = ();
    const BLOCK_THREADS: u32 = 256;
    const SIZED_LAUNCHES: bool = false;
    const NAME: &'static str = "fake";
    type Stream = Handle;
    type Event = Handle;
    const ZERO_COPY: bool = false;
    const ONE_SHOT_KERNELS: bool = false;
    fn bind(&self, _: i32) -> Result<()> {
        Ok(())
    }
    fn kernels_missing(&self) -> Option<Error> {
        None
    }
    fn has_one_shot(&self) -> bool {
        false
    }
    fn multiprocessors(&self, _: i32) -> Result<u32> {
        Ok(0)
    }
    fn pci_bus_id(&self, _: i32) -> Option<String> {
        None
    }
    fn can_access_peer(&self, _: i32, _: i32) -> bool {
        true
    }
    fn enable_peer_access(&self, _: i32, _: i32) -> Result<()> {
        Ok(())
    }
    fn shared_alloc(&self, _: i32, n: usize) -> Result<DevicePtr> {
        Ok(self.next(format!("shared_alloc {n}")))
    }
    unsafe fn shared_free(&self, p: DevicePtr) -> Result<()> {
        self.log(format!("shared_free {p:#x}"));
        Ok(())
    }
    fn export(&self, _: DevicePtr) -> Result<ShareableHandle> {
        Ok(ShareableHandle(Vec::new()))
    }
    unsafe fn import(&self, _: &ShareableHandle, _: i32, _: usize) -> Result<DevicePtr> {
        Ok(self.next("import".into()))
    }
    fn dev_alloc(&self, n: usize) -> Result<DevicePtr> {
        Ok(self.next(format!("dev_alloc {n}")))
    }
    unsafe fn dev_free(&self, p: DevicePtr) {
        self.log(format!("dev_free {p:#x}"));
    }
    fn host_alloc(&self, n: usize) -> Result<(*mut u8, DevicePtr)> {
        let a = self.next(format!("host_alloc {n}"));
        Ok((a as *mut u8, a))
    }
    unsafe fn host_free(&self, p: *mut u8) {
        self.log(format!("host_free {:#x}", p as usize));
    }
    unsafe fn host_register(&self, p: *mut u8, _: usize) -> Result<DevicePtr> {
        Ok(p as DevicePtr)
    }
    unsafe fn host_unregister(&self, _: *mut u8) {}
    unsafe fn copy_h2d(&self, d: DevicePtr, s: &[u8]) -> Result<()> {
        self.log(format!("copy_h2d {d:#x} {}", s.len()));
        Ok(())
    }
    unsafe fn copy_h2d_async(&self, d: DevicePtr, _: *const u8, n: usize, s: Handle) -> Result<()> {
        self.log(format!("copy_h2d_async {d:#x} {n} on {s}"));
        Ok(())
    }
    unsafe fn copy_d2h_async(&self, _: *mut u8, src: DevicePtr, n: usize, s: Handle) -> Result<()> {
        self.log(format!("copy_d2h_async {src:#x} {n} on {s}"));
        Ok(())
    }
    fn has_word_writes(&self, _: i32) -> bool {
        true
    }
    unsafe fn write_word_async(&self, d: DevicePtr, v: u64, wide: bool, s: Handle) -> Result<()> {
        let bits = if wide { 64 } else { 32 };
        self.log(format!("write_word{bits} {d:#x} = {v} on {s}"));
        Ok(())
    }
    unsafe fn memset_zero_async(&self, d: DevicePtr, n: usize, s: Handle) -> Result<()> {
        self.log(format!("memset {d:#x} {n} on {s}"));
        Ok(())
    }
    fn stream_create(&self) -> Result<Handle> {
        Ok(self.next("stream_create".into()) as Handle)
    }
    unsafe fn stream_destroy(&self, _: Handle) {}
    fn stream_sync(&self, s: Handle) -> Result<()> {
        self.log(format!("stream_sync {s}"));
        Ok(())
    }
    fn event_create(&self) -> Result<Handle> {
        Ok(self.next("event_create".into()) as Handle)
    }
    fn event_record(&self, e: Handle, s: Handle) -> Result<()> {
        self.log(format!("event_record {e:#x} on {s}"));
        Ok(())
    }
    fn event_sync(&self, e: Handle) -> Result<()> {
        self.log(format!("event_sync {e:#x}"));
        Ok(())
    }
    unsafe fn event_destroy(&self, _: Handle) {}
    fn stream_wait_event(&self, s: Handle, e: Handle) -> Result<()> {
        self.log(format!("wait {s} on {e:#x}"));
        Ok(())
    }
    fn capture_status(&self, _: Handle) -> Result<CaptureStatus> {
        Ok(CaptureStatus::None)
    }
    fn relaxed_capture(&self) -> Result<()> {
        Ok(())
    }
    fn executor(&self, _: i32, _: DataType, block: usize) -> Result<Executor> {
        let cap = self.0.lock().unwrap().inline_cap;
        Ok(Executor {
            func: 1,
            inline_cap: cap.filter(|&c| block <= c),
            address_cap: 16,
        })
    }
    fn one_shot(&self, _: i32, _: DataType) -> Result<Handle> {
        Ok(2)
    }
    unsafe fn launch(&self, _: Handle, g: u32, t: u32, p: &mut [u8], s: Handle) -> Result<()> {
        self.log(format!("launch {g}x{t} on {s}"));
        self.0.lock().unwrap().params.push(p.to_vec());
        Ok(())
    }
    // The backend's calls: the transport never makes them; `GpuBackend`'s tests make the
    // flat-range ones.
    fn load() -> Result<Self> {
        unreachable!()
    }
    fn stream_handle(s: &Handle) -> Handle {
        *s
    }
    fn stream_from_handle(raw: Handle) -> Handle {
        raw
    }
    fn event_handle(e: &Handle) -> Handle {
        *e
    }
    fn device_count(&self) -> Result<usize> {
        unreachable!()
    }
    fn current_device(&self) -> Result<i32> {
        unreachable!()
    }
    fn set_device(&self, _: i32) -> Result<()> {
        unreachable!()
    }
    fn granularity(&self, _: i32) -> Result<usize> {
        unreachable!()
    }
    unsafe fn import_here(&self, _: &ShareableHandle, _: usize) -> Result<DevicePtr> {
        unreachable!()
    }
    fn flat_begin(&self, d: i32) -> Result<(usize, Option<()>)> {
        self.log(format!("flat_begin {d}"));
        Ok((0x1000, Some(())))
    }
    /// Handles of one byte: the allocation's size in KiB, 0 for memory that cannot be mapped.
    fn flat_allocation(&self, h: &ShareableHandle, stride: usize) -> Result<(Handle, usize)> {
        let size = usize::from(h.0[0]) << 10;
        if size == 0 || size > stride {
            return Err(Error::usage("not mappable"));
        }
        Ok((self.next(format!("flat_allocation {size}")) as Handle, size))
    }
    /// Grants an address asked for above every fresh one handed out so far; below, it is
    /// taken and, as the driver does, a fresh one comes back instead.
    unsafe fn va_reserve(&self, n: usize, _: usize, at: DevicePtr) -> Result<DevicePtr> {
        if at > self.0.lock().unwrap().last {
            self.log(format!("va_reserve {n} at {at:#x}"));
            return Ok(at);
        }
        Ok(self.next(format!("va_reserve {n}")))
    }
    unsafe fn va_map(&self, at: DevicePtr, n: usize, a: Handle) -> Result<()> {
        self.log(format!("va_map {at:#x} {n} {a:#x}"));
        Ok(())
    }
    unsafe fn allocation_release(&self, a: Handle) {
        self.log(format!("allocation_release {a:#x}"));
    }
    /// Refuses device -1.
    unsafe fn va_set_access(&self, at: DevicePtr, n: usize, d: &[i32]) -> Result<()> {
        self.log(format!("va_set_access {at:#x} {n} {d:?}"));
        if d.contains(&-1) {
            return Err(Error::usage("no device -1"));
        }
        Ok(())
    }
    unsafe fn va_unmap(&self, at: DevicePtr, n: usize) {
        self.log(format!("va_unmap {at:#x} {n}"));
    }
    unsafe fn va_free(&self, va: DevicePtr, n: usize) {
        self.log(format!("va_free {va:#x} {n}"));
    }
    fn stream_event(&self, _: Handle) -> Result<Handle> {
        unreachable!()
    }
    fn event_query(&self, e: Handle) -> Result<Option<bool>> {
        let held = self.0.lock().unwrap().held;
        if !held {
            self.log(format!("event_query {e:#x}"));
        }
        Ok(Some(!held))
    }
    unsafe fn memcpy_async(
        &self,
        _: i32,
        d: DevicePtr,
        s: DevicePtr,
        n: usize,
        st: Handle,
    ) -> Result<()> {
        self.log(format!("memcpy_async {s:#x} -> {d:#x} {n} on {st}"));
        Ok(())
    }
    fn pointer_info(&self, _: DevicePtr) -> Result<PointerInfo> {
        unreachable!()
    }
    fn exposable(&self, _: DevicePtr) -> bool {
        unreachable!()
    }
    fn caller_stream_create(&self, _: i32) -> Result<Handle> {
        unreachable!()
    }
    unsafe fn caller_stream_destroy(&self, _: Handle) -> Result<()> {
        unreachable!()
    }
    fn caller_stream_done(&self, _: Handle) -> Result<bool> {
        unreachable!()
    }
    unsafe fn caller_copy_to_device(&self, dev: i32, d: DevicePtr, s: &[u8]) -> Result<()> {
        self.log(format!("copy_to_device {dev} {d:#x} {}", s.len()));
        Ok(())
    }
    unsafe fn caller_copy_from_device(&self, dev: i32, d: &mut [u8], s: DevicePtr) -> Result<()> {
        self.log(format!("copy_from_device {dev} {s:#x} {}", d.len()));
        Ok(())
    }
}
