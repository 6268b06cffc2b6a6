//! oxccl backend for AMD GPUs: [`HipBackend`] implements [`Backend`] on the HIP runtime, which
//! is loaded at run time ([`runtime`]), so a binary with this backend starts on any machine.
//!
//! What is here: device selection, VMM memory (with a `hipMalloc` fallback), export and import of
//! memory for other processes (POSIX file descriptors of VMM allocations, `hipIpc*` handles of
//! `hipMalloc` ones), streams, events, async copies, pointer queries, capture status, loading
//! the kernels' code object ([`code_object`]: embedded, or `OXCCL_HIP_CODE_OBJECT`), and the HIP
//! runtime calls of the device transport ([`transport`]; the transport itself is
//! `oxccl-device-transport`, shared with the CUDA backend). None of it has run on an AMD GPU;
//! `tests/hip-on-cuda` runs it on NVIDIA GPUs (docs/hip.md).

pub mod buffers;
pub mod code_object;
pub mod kernels;
pub mod runtime;
#[rustfmt::skip]
pub mod sys;
pub mod transport;

use code_object::CodeObject;
pub use kernels::{FifoGeometry, MAX_CHANNELS};
use oxccl_core::backend::{
    Backend, ConnectContext, DevicePtr, Launch, PointerInfo, ShareableHandle,
};
use oxccl_core::datatype::DataType;
use oxccl_core::error::{Error, Result};
use oxccl_core::lock::lock;
use oxccl_core::plan::Protocol;
use oxccl_core::plan::tuner::Topology;
use oxccl_device_transport::DeviceApi;
use runtime::{Hip, MemoryType, hip_call};
use std::collections::{BTreeMap, HashMap};
use std::ffi::{CString, c_void};
use std::sync::{Arc, Mutex};
pub use transport::{HipApi, HipTransport};

/// Granularity reported when the runtime has no VMM (`hipMalloc` aligns to at least this).
const FALLBACK_GRANULARITY: usize = 4096;

/// Tag of an exported VMM allocation: POSIX file descriptor of the exporting process.
const HANDLE_FD: u8 = 1;
/// Tag of an exported `hipMalloc` allocation: a `hipIpcMemHandle_t`.
const HANDLE_IPC: u8 = 2;

/// A HIP stream handle (`hipStream_t`; 0 is the default stream). Not owned: C callers own their
/// streams, and [`HipBackend::stream_create`]'s are freed with [`HipBackend::stream_destroy`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HipStream(pub usize);

impl HipStream {
    fn raw(self) -> sys::hipStream_t {
        self.0 as sys::hipStream_t
    }
}

/// A HIP event, destroyed when dropped.
pub struct HipEvent {
    raw: usize,
    hip: Arc<Hip>,
}

impl Drop for HipEvent {
    fn drop(&mut self) {
        // SAFETY: `raw` came from hipEventCreateWithFlags and is destroyed once, here. A failure
        // is only logged: Drop must not panic.
        if let Err(e) = unsafe { hip_call!(self.hip, hipEventDestroy(self.raw as sys::hipEvent_t)) }
        {
            tracing::warn!(target: "oxccl::hip", "hipEventDestroy: {e}");
        }
    }
}

/// How an allocation in the table was made, which decides how it is freed.
#[derive(Debug)]
enum AllocKind {
    /// hipMemCreate + hipMemAddressReserve + hipMemMap (ours or imported).
    Vmm {
        handle: usize,
        /// File descriptors exported from this allocation, closed when it is freed.
        exported_fds: Vec<i32>,
    },
    /// hipMalloc (VMM unsupported).
    Malloc,
    /// hipIpcOpenMemHandle of a peer's hipMalloc memory.
    Ipc,
}

/// One range of `map_flat`: its size and the mappings in it.
#[derive(Debug)]
struct FlatRange {
    total: usize,
    maps: Vec<(DevicePtr, usize)>,
}

#[derive(Debug)]
struct Alloc {
    /// Mapped (or allocated) size in bytes.
    size: usize,
    device: i32,
    kind: AllocKind,
}

/// The HIP backend. Clones share the runtime and every table (transports keep one to free
/// their memory and find their kernels).
#[derive(Clone)]
pub struct HipBackend {
    hip: Arc<Hip>,
    /// Memory this backend allocated or imported, by base address.
    allocs: Arc<Mutex<BTreeMap<DevicePtr, Alloc>>>,
    /// Ranges of `map_flat` by start: their size and the mappings in them.
    flat: Arc<Mutex<BTreeMap<DevicePtr, FlatRange>>>,
    /// VMM granularity per device (`None`: VMM unsupported there, use hipMalloc).
    granularity: Arc<Mutex<HashMap<i32, Option<usize>>>>,
    /// The kernels' module per device (`hipModule_t`).
    modules: Arc<Mutex<HashMap<i32, usize>>>,
    /// How communicators' FIFOs are cut (`OXCCL_FIFO_*`).
    geometry: FifoGeometry,
    /// The kernels' code object (embedded, or `OXCCL_HIP_CODE_OBJECT`).
    code: CodeObject,
}

impl std::fmt::Debug for HipBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HipBackend")
            .field("hip", &self.hip)
            .finish_non_exhaustive()
    }
}

/// Adds which code object was used to a module error (a user-supplied one may lack a kernel or
/// target another GPU).
fn with_source(e: Error, code: &CodeObject) -> Error {
    match e {
        Error::Backend {
            api,
            code: c,
            detail,
        } => Error::Backend {
            api,
            code: c,
            detail: format!("{detail} (code object: {})", code.describe()),
        },
        other => other,
    }
}

/// Runs `f` with `device` current, restoring the previous device afterwards.
fn with_device<T>(b: &HipBackend, device: i32, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let prev = b.current_device()?;
    if prev != device {
        b.set_device(device)?;
    }
    let r = f();
    if prev != device {
        let _ = b.set_device(prev);
    }
    r
}

impl HipBackend {
    /// Whether everything queued on `stream` has run (`hipStreamQuery`, never blocking);
    /// `None` when the runtime lacks it.
    pub fn stream_query(&self, stream: &HipStream) -> Result<Option<bool>> {
        // SAFETY: a `HipStream` is 0 or a live stream of this runtime (`stream_from_raw`'s
        // contract, or one this backend created and has not destroyed).
        unsafe { self.hip.stream_done(stream.raw()) }
    }

    /// Loads the HIP runtime (`OXCCL_HIP_RUNTIME`, else ROCm's) and checks that a device exists
    /// ("no HIP runtime ..." / "no HIP device" otherwise); the kernels come from
    /// `OXCCL_HIP_CODE_OBJECT` when it is set, else from this build.
    pub fn load() -> Result<HipBackend> {
        let geometry = FifoGeometry::from_env()?;
        let code = CodeObject::from_env()?;
        let mut be = HipBackend::with_runtime(Hip::load()?);
        be.geometry = geometry;
        be.code = code;
        Ok(be)
    }

    /// A backend over an already loaded runtime.
    pub fn with_runtime(hip: Hip) -> HipBackend {
        HipBackend {
            hip: Arc::new(hip),
            allocs: Arc::new(Mutex::new(BTreeMap::new())),
            flat: Arc::new(Mutex::new(BTreeMap::new())),
            granularity: Arc::new(Mutex::new(HashMap::new())),
            modules: Arc::new(Mutex::new(HashMap::new())),
            geometry: FifoGeometry::default(),
            code: CodeObject::embedded(),
        }
    }

    /// True when there are kernels to launch (embedded, or `OXCCL_HIP_CODE_OBJECT`).
    pub fn has_kernels(&self) -> bool {
        self.code.available()
    }

    /// The code object the kernels are loaded from.
    pub fn code_object(&self) -> &CodeObject {
        &self.code
    }

    /// How this backend's communicators cut their FIFOs.
    pub fn geometry(&self) -> FifoGeometry {
        self.geometry
    }

    /// The loaded runtime.
    pub fn runtime(&self) -> &Hip {
        &self.hip
    }

    /// A new non-blocking stream (the default stream would serialise with other work).
    pub fn stream_create(&self) -> Result<HipStream> {
        let mut s: sys::hipStream_t = std::ptr::null_mut();
        // SAFETY: `s` is a valid out-pointer; the flag is a defined value.
        unsafe {
            hip_call!(
                self.hip,
                hipStreamCreateWithFlags(&mut s, sys::hipStreamNonBlocking)
            )
        }?;
        Ok(HipStream(s as usize))
    }

    /// Destroys a stream from [`HipBackend::stream_create`].
    ///
    /// # Safety
    /// `stream` came from `stream_create` and is not used afterwards.
    pub unsafe fn stream_destroy(&self, stream: HipStream) -> Result<()> {
        // SAFETY: the caller guarantees the stream is ours and unused from now on.
        unsafe { hip_call!(self.hip, hipStreamDestroy(stream.raw())) }
    }

    /// Pinned host memory mapped into the device address space: (host pointer, device pointer).
    pub fn host_alloc(&self, size: usize) -> Result<(*mut u8, DevicePtr)> {
        let mut p: *mut c_void = std::ptr::null_mut();
        let flags = sys::hipHostMallocMapped | sys::hipHostMallocPortable;
        // SAFETY: `p` is a valid out-pointer; the flags are defined values.
        unsafe { hip_call!(self.hip, hipHostMalloc(&mut p, size.max(1), flags)) }?;
        let mut d: *mut c_void = std::ptr::null_mut();
        // SAFETY: `p` is mapped pinned memory from hipHostMalloc; `d` is a valid out-pointer.
        if let Err(e) = unsafe { hip_call!(self.hip, hipHostGetDevicePointer(&mut d, p, 0)) } {
            // SAFETY: `p` came from hipHostMalloc above and is not used after this.
            let _ = unsafe { hip_call!(self.hip, hipHostFree(p)) };
            return Err(e);
        }
        Ok((p.cast(), d as DevicePtr))
    }

    /// Frees memory from [`HipBackend::host_alloc`].
    ///
    /// # Safety
    /// `host` came from `host_alloc` and neither the host nor the device uses it any more.
    pub unsafe fn host_free(&self, host: *mut u8) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { hip_call!(self.hip, hipHostFree(host.cast())) }
    }

    /// The kernel of element type `dtype` on `device`, loading the code object on first use
    /// ("built without device kernels" when there is none).
    pub fn function(&self, device: i32, dtype: DataType) -> Result<sys::hipFunction_t> {
        if !self.has_kernels() {
            return Err(CodeObject::missing());
        }
        let module = {
            let mut modules = lock(&self.modules);
            match modules.get(&device) {
                Some(&m) => m,
                None => {
                    let m = with_device(self, device, || {
                        let mut m: sys::hipModule_t = std::ptr::null_mut();
                        // SAFETY: the image is a whole, 16-byte aligned code object that
                        // `self.code` keeps alive as long as the backend (and so the module).
                        unsafe {
                            hip_call!(self.hip, hipModuleLoadData(&mut m, self.code.image()))
                        }
                        .map_err(|e| with_source(e, &self.code))?;
                        Ok(m as usize)
                    })?;
                    modules.insert(device, m);
                    m
                }
            }
        };
        let name = CString::new(kernels::kernel_name(dtype)).expect("kernel names have no NUL");
        let mut f: sys::hipFunction_t = std::ptr::null_mut();
        // SAFETY: `module` is a live module of this runtime; `name` is NUL-terminated.
        unsafe {
            hip_call!(
                self.hip,
                hipModuleGetFunction(&mut f, module as sys::hipModule_t, name.as_ptr())
            )
        }
        .map_err(|e| with_source(e, &self.code))?;
        Ok(f)
    }

    /// VMM granularity of `device`, `None` when the runtime or device has no VMM.
    fn vmm_granularity(&self, device: i32) -> Option<usize> {
        if let Some(g) = lock(&self.granularity).get(&device) {
            return *g;
        }
        let g = if self.hip.has_vmm() {
            let prop = self.hip.alloc_prop(device);
            let mut g = 0usize;
            // SAFETY: `g` is a valid out-pointer; `prop` is laid out for this runtime.
            let r = unsafe {
                hip_call!(
                    self.hip,
                    hipMemGetAllocationGranularity(
                        &mut g,
                        prop.as_ptr(),
                        sys::hipMemAllocationGranularity_flags::hipMemAllocationGranularityRecommended
                    )
                )
            };
            match r {
                Ok(()) if g > 0 => Some(g),
                Ok(()) => None,
                Err(e) => {
                    tracing::info!(target: "oxccl::hip", "device {device}: no VMM ({e}); using hipMalloc");
                    None
                }
            }
        } else {
            None
        };
        lock(&self.granularity).insert(device, g);
        g
    }

    /// Devices that may access memory of `device` (itself and its peers).
    fn access_devices(&self, device: i32) -> Vec<i32> {
        let mut out = vec![device];
        for peer in 0..self.hip.device_count as i32 {
            if peer == device {
                continue;
            }
            let mut can = 0;
            // SAFETY: `can` is a valid out-pointer; both ordinals are below the device count.
            let r = unsafe { hip_call!(self.hip, hipDeviceCanAccessPeer(&mut can, peer, device)) };
            if r.is_ok() && can != 0 {
                out.push(peer);
            }
        }
        out
    }

    /// Reserves `size` bytes of address space, maps `handle` there and enables access from
    /// `devices`; undoes its own steps on failure.
    fn map_vmm(
        &self,
        handle: sys::hipMemGenericAllocationHandle_t,
        size: usize,
        align: usize,
        devices: &[i32],
    ) -> Result<DevicePtr> {
        let mut va: *mut c_void = std::ptr::null_mut();
        // SAFETY: `va` is a valid out-pointer; size and alignment are granularity multiples.
        unsafe {
            hip_call!(
                self.hip,
                hipMemAddressReserve(&mut va, size, align, std::ptr::null_mut(), 0)
            )
        }?;
        // SAFETY: `va` is a fresh reservation of `size` bytes; `handle` is live and this size.
        if let Err(e) = unsafe { hip_call!(self.hip, hipMemMap(va, size, 0, handle, 0)) } {
            // SAFETY: the reservation above is unused.
            let _ = unsafe { hip_call!(self.hip, hipMemAddressFree(va, size)) };
            return Err(e);
        }
        let desc: Vec<sys::hipMemAccessDesc> = devices
            .iter()
            .map(|&d| sys::hipMemAccessDesc {
                location: sys::hipMemLocation {
                    type_: sys::hipMemLocationType::hipMemLocationTypeDevice,
                    id: d,
                },
                flags: sys::hipMemAccessFlags::hipMemAccessFlagsProtReadWrite,
            })
            .collect();
        // SAFETY: `va` maps `size` bytes; `desc` holds `desc.len()` valid entries.
        if let Err(e) = unsafe {
            hip_call!(
                self.hip,
                hipMemSetAccess(va, size, desc.as_ptr(), desc.len())
            )
        } {
            // SAFETY: the mapping and reservation above are unused.
            unsafe {
                let _ = hip_call!(self.hip, hipMemUnmap(va, size));
                let _ = hip_call!(self.hip, hipMemAddressFree(va, size));
            }
            return Err(e);
        }
        Ok(va as DevicePtr)
    }

    /// The allocation process `pid` exported as descriptor `fd` (in this process the
    /// exporter's descriptor is ours already; it stays open until the allocation is freed).
    fn import_allocation(&self, pid: u32, fd: i32) -> Result<sys::hipMemGenericAllocationHandle_t> {
        let (fd, close_after) = if pid == std::process::id() {
            (fd, false)
        } else {
            (fd_from_process(pid, fd)?, true)
        };
        let mut h: sys::hipMemGenericAllocationHandle_t = std::ptr::null_mut();
        // SAFETY: `h` is a valid out-pointer; HIP takes the descriptor's value as the OS handle
        // argument for the POSIX-fd type (it does not take ownership).
        let r = unsafe {
            hip_call!(
                self.hip,
                hipMemImportFromShareableHandle(
                    &mut h,
                    fd as isize as *mut c_void,
                    sys::hipMemAllocationHandleType::hipMemHandleTypePosixFileDescriptor
                )
            )
        };
        if close_after {
            // SAFETY: the duplicate came from pidfd_getfd and is ours.
            unsafe { libc::close(fd) };
        }
        r.map(|()| h)
    }

    /// Unmaps a [`FlatRange`]'s mappings and frees its addresses (best effort).
    ///
    /// # Safety
    /// Nothing uses the range.
    unsafe fn release_flat(&self, va: DevicePtr, range: &FlatRange) {
        for &(at, size) in &range.maps {
            // SAFETY: mapped by `map_flat` with this size.
            let _ = unsafe { hip_call!(self.hip, hipMemUnmap(at as *mut c_void, size)) };
        }
        // SAFETY: reserved by `map_flat` with this size, unmapped above.
        let _ = unsafe { hip_call!(self.hip, hipMemAddressFree(va as *mut c_void, range.total)) };
    }

    /// The allocation in the table containing `ptr`: (base, size).
    fn find(&self, ptr: DevicePtr) -> Option<(DevicePtr, usize)> {
        let allocs = lock(&self.allocs);
        let (&base, a) = allocs.range(..=ptr).next_back()?;
        (ptr < base + a.size as u64).then_some((base, a.size))
    }
}

/// A file descriptor of process `pid`, duplicated into this one (pidfd_getfd, Linux 5.6+; needs
/// ptrace permission over the exporter, i.e. the same user and no stricter Yama setting).
fn fd_from_process(pid: u32, fd: i32) -> Result<i32> {
    let sys_err = |what: &str| Error::System {
        context: format!("importing a HIP memory handle of process {pid} ({what})"),
        message: std::io::Error::last_os_error().to_string(),
    };
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if pidfd < 0 {
        return Err(sys_err("pidfd_open"));
    }
    // SAFETY: pidfd_getfd takes a pidfd, a descriptor number of that process and flags.
    let got = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd as i32, fd, 0) };
    let err = (got < 0).then(|| sys_err("pidfd_getfd"));
    // SAFETY: `pidfd` is a descriptor we own.
    unsafe { libc::close(pidfd as i32) };
    match err {
        Some(e) => Err(e),
        None => Ok(got as i32),
    }
}

fn read_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The exporter's pid and descriptor in a `HANDLE_FD` handle's bytes.
fn fd_handle_owner(b: &[u8]) -> Option<(u32, i32)> {
    let pid = u32::from_le_bytes(b.get(17..21)?.try_into().ok()?);
    let fd = i32::from_le_bytes(b.get(21..25)?.try_into().ok()?);
    Some((pid, fd))
}

impl Backend for HipBackend {
    type Stream = HipStream;
    type Event = HipEvent;
    type Transport = HipTransport;

    fn name(&self) -> &'static str {
        "hip"
    }
    fn device_count(&self) -> Result<usize> {
        let mut n = 0;
        // SAFETY: `n` is a valid out-pointer.
        unsafe { hip_call!(self.hip, hipGetDeviceCount(&mut n)) }?;
        Ok(n.max(0) as usize)
    }
    fn current_device(&self) -> Result<i32> {
        let mut d = 0;
        // SAFETY: `d` is a valid out-pointer.
        unsafe { hip_call!(self.hip, hipGetDevice(&mut d)) }?;
        Ok(d)
    }
    fn set_device(&self, device: i32) -> Result<()> {
        // SAFETY: hipSetDevice validates the ordinal itself.
        unsafe { hip_call!(self.hip, hipSetDevice(device)) }
    }

    fn granularity(&self, device: i32) -> Result<usize> {
        Ok(self.vmm_granularity(device).unwrap_or(FALLBACK_GRANULARITY))
    }

    fn mem_alloc(&self, device: i32, size: usize) -> Result<DevicePtr> {
        let Some(g) = self.vmm_granularity(device) else {
            let size = size.max(1);
            let p = with_device(self, device, || {
                let mut p: *mut c_void = std::ptr::null_mut();
                // SAFETY: `p` is a valid out-pointer.
                unsafe { hip_call!(self.hip, hipMalloc(&mut p, size)) }?;
                Ok(p as DevicePtr)
            })?;
            lock(&self.allocs).insert(
                p,
                Alloc {
                    size,
                    device,
                    kind: AllocKind::Malloc,
                },
            );
            return Ok(p);
        };
        let size = size.max(1).next_multiple_of(g);
        let prop = self.hip.alloc_prop(device);
        let mut handle: sys::hipMemGenericAllocationHandle_t = std::ptr::null_mut();
        // SAFETY: `handle` is a valid out-pointer; `prop` is laid out for this runtime; `size`
        // is a multiple of the granularity.
        unsafe { hip_call!(self.hip, hipMemCreate(&mut handle, size, prop.as_ptr(), 0)) }?;
        match self.map_vmm(handle, size, g, &self.access_devices(device)) {
            Ok(va) => {
                let kind = AllocKind::Vmm {
                    handle: handle as usize,
                    exported_fds: Vec::new(),
                };
                lock(&self.allocs).insert(va, Alloc { size, device, kind });
                Ok(va)
            }
            Err(e) => {
                // SAFETY: `handle` is unmapped and unused.
                let _ = unsafe { hip_call!(self.hip, hipMemRelease(handle)) };
                Err(e)
            }
        }
    }

    /// Also releases memory from [`Backend::import_handle`].
    unsafe fn mem_free(&self, ptr: DevicePtr) -> Result<()> {
        let a = lock(&self.allocs)
            .remove(&ptr)
            .ok_or_else(|| Error::arg(format!("{ptr:#x} was not allocated by ncclMemAlloc")))?;
        let p = ptr as *mut c_void;
        match a.kind {
            AllocKind::Vmm {
                handle,
                exported_fds,
            } => {
                for fd in exported_fds {
                    // SAFETY: the descriptor came from hipMemExportToShareableHandle and is ours.
                    unsafe { libc::close(fd) };
                }
                // SAFETY: the caller guarantees nothing uses the range; it was mapped by us
                // with this size, and the handle is released once.
                unsafe {
                    hip_call!(self.hip, hipMemUnmap(p, a.size))?;
                    hip_call!(self.hip, hipMemAddressFree(p, a.size))?;
                    hip_call!(
                        self.hip,
                        hipMemRelease(handle as sys::hipMemGenericAllocationHandle_t)
                    )
                }
            }
            // SAFETY: from hipMalloc, unused from now on (caller's contract).
            AllocKind::Malloc => unsafe { hip_call!(self.hip, hipFree(p)) },
            // SAFETY: from hipIpcOpenMemHandle, unused from now on (caller's contract).
            AllocKind::Ipc => unsafe { hip_call!(self.hip, hipIpcCloseMemHandle(p)) },
        }
    }

    fn flat_mapping(&self) -> bool {
        true
    }

    unsafe fn map_flat(
        &self,
        device: i32,
        handles: &[ShareableHandle],
        stride: usize,
    ) -> Result<DevicePtr> {
        let total = stride
            .checked_mul(handles.len())
            .ok_or_else(|| Error::arg("symmetric window range overflows the address space"))?;
        let g = self.vmm_granularity(device).unwrap_or(FALLBACK_GRANULARITY);
        let mut va: *mut c_void = std::ptr::null_mut();
        // SAFETY: `va` is a valid out-pointer; `total` is a multiple of the 4 GiB stride.
        unsafe {
            hip_call!(
                self.hip,
                hipMemAddressReserve(&mut va, total, g, std::ptr::null_mut(), 0)
            )
        }?;
        let va = va as DevicePtr;
        let mut range = FlatRange {
            total,
            maps: Vec::with_capacity(handles.len()),
        };
        let malformed = || {
            Error::usage(
                "a rank's symmetric window is not VMM memory; allocate it with ncclMemAlloc",
            )
        };
        let mut map_all = || -> Result<()> {
            for (i, h) in handles.iter().enumerate() {
                let b = &h.0;
                if b.first() != Some(&HANDLE_FD) {
                    return Err(malformed());
                }
                let size = read_u64(b, 9).ok_or_else(malformed)? as usize;
                let (pid, fd) = fd_handle_owner(b).ok_or_else(malformed)?;
                if size > stride {
                    return Err(Error::arg(
                        "a symmetric window's allocation exceeds the stride",
                    ));
                }
                let alloc = self.import_allocation(pid, fd)?;
                let at = va + (i * stride) as u64;
                // SAFETY: `at..at + size` lies in the fresh reservation; `alloc` is a live
                // allocation of `size` bytes.
                let mapped =
                    unsafe { hip_call!(self.hip, hipMemMap(at as *mut c_void, size, 0, alloc, 0)) };
                // SAFETY: the mapping, if made, holds a reference of its own.
                let _ = unsafe { hip_call!(self.hip, hipMemRelease(alloc)) };
                mapped?;
                range.maps.push((at, size));
                let desc = sys::hipMemAccessDesc {
                    location: sys::hipMemLocation {
                        type_: sys::hipMemLocationType::hipMemLocationTypeDevice,
                        id: device,
                    },
                    flags: sys::hipMemAccessFlags::hipMemAccessFlagsProtReadWrite,
                };
                // SAFETY: `at` maps `size` bytes; one valid descriptor.
                unsafe { hip_call!(self.hip, hipMemSetAccess(at as *mut c_void, size, &desc, 1)) }?;
            }
            Ok(())
        };
        if let Err(e) = map_all() {
            // SAFETY: nothing has used the range yet.
            unsafe { self.release_flat(va, &range) };
            return Err(e);
        }
        lock(&self.flat).insert(va, range);
        Ok(va)
    }

    unsafe fn unmap_flat(&self, base: DevicePtr) -> Result<()> {
        let range = lock(&self.flat)
            .remove(&base)
            .ok_or_else(|| Error::arg(format!("{base:#x} is not a symmetric window range")))?;
        // SAFETY: the caller's contract.
        unsafe { self.release_flat(base, &range) };
        Ok(())
    }

    /// Handle bytes: a tag, the offset of `ptr` in its allocation, the allocation's size, then
    /// (VMM) the exporter's pid and file descriptor or (hipMalloc) the 64-byte IPC handle.
    unsafe fn export_handle(&self, ptr: DevicePtr) -> Result<ShareableHandle> {
        let mut allocs = lock(&self.allocs);
        let (&base, a) = allocs
            .range_mut(..=ptr)
            .next_back()
            .filter(|(b, a)| ptr < **b + a.size as u64)
            .ok_or_else(|| Error::arg(format!("{ptr:#x} was not allocated by ncclMemAlloc")))?;
        let mut out = Vec::with_capacity(84);
        match &mut a.kind {
            AllocKind::Vmm {
                handle,
                exported_fds,
            } => {
                let mut fd: i32 = -1;
                // SAFETY: `fd` receives an int for the POSIX-fd handle type; `handle` is live.
                unsafe {
                    hip_call!(
                        self.hip,
                        hipMemExportToShareableHandle(
                            (&mut fd as *mut i32).cast(),
                            *handle as sys::hipMemGenericAllocationHandle_t,
                            sys::hipMemAllocationHandleType::hipMemHandleTypePosixFileDescriptor,
                            0
                        )
                    )
                }?;
                exported_fds.push(fd);
                out.push(HANDLE_FD);
                out.extend_from_slice(&(ptr - base).to_le_bytes());
                out.extend_from_slice(&(a.size as u64).to_le_bytes());
                out.extend_from_slice(&std::process::id().to_le_bytes());
                out.extend_from_slice(&fd.to_le_bytes());
            }
            AllocKind::Malloc => {
                let mut h = sys::hipIpcMemHandle_t::default();
                // SAFETY: `h` is a valid out-pointer; `base` is the start of a hipMalloc block.
                unsafe { hip_call!(self.hip, hipIpcGetMemHandle(&mut h, base as *mut c_void)) }?;
                out.push(HANDLE_IPC);
                out.extend_from_slice(&(ptr - base).to_le_bytes());
                out.extend_from_slice(&(a.size as u64).to_le_bytes());
                out.extend(h.reserved.iter().map(|&c| c as u8));
            }
            AllocKind::Ipc => {
                return Err(Error::usage(
                    "memory imported from a peer cannot be exported again",
                ));
            }
        }
        Ok(ShareableHandle(out))
    }

    unsafe fn import_handle(&self, handle: &ShareableHandle, size: usize) -> Result<DevicePtr> {
        let b = &handle.0;
        let malformed = || Error::arg("malformed HIP memory handle");
        let tag = *b.first().ok_or_else(malformed)?;
        let offset = read_u64(b, 1).ok_or_else(malformed)?;
        let alloc_size = read_u64(b, 9).ok_or_else(malformed)? as usize;
        if offset.saturating_add(size as u64) > alloc_size as u64 {
            return Err(Error::arg("imported range exceeds the exported allocation"));
        }
        let device = self.current_device()?;
        match tag {
            HANDLE_FD => {
                let (pid, fd) = fd_handle_owner(b).ok_or_else(malformed)?;
                // In this process the exporter's descriptor is ours already; it stays open
                // until the exporting allocation is freed.
                let h = self.import_allocation(pid, fd)?;
                let g = self.vmm_granularity(device).unwrap_or(FALLBACK_GRANULARITY);
                match self.map_vmm(h, alloc_size, g, &[device]) {
                    Ok(va) => {
                        let kind = AllocKind::Vmm {
                            handle: h as usize,
                            exported_fds: Vec::new(),
                        };
                        lock(&self.allocs).insert(
                            va,
                            Alloc {
                                size: alloc_size,
                                device,
                                kind,
                            },
                        );
                        Ok(va + offset)
                    }
                    Err(e) => {
                        // SAFETY: `h` is unmapped and unused.
                        let _ = unsafe { hip_call!(self.hip, hipMemRelease(h)) };
                        Err(e)
                    }
                }
            }
            HANDLE_IPC => {
                let raw = b.get(17..17 + 64).ok_or_else(malformed)?;
                let mut h = sys::hipIpcMemHandle_t::default();
                for (d, s) in h.reserved.iter_mut().zip(raw) {
                    *d = *s as std::ffi::c_char;
                }
                let mut p: *mut c_void = std::ptr::null_mut();
                // SAFETY: `p` is a valid out-pointer; `h` came from a peer's hipIpcGetMemHandle
                // (the caller's contract).
                unsafe {
                    hip_call!(
                        self.hip,
                        hipIpcOpenMemHandle(&mut p, h, sys::hipIpcMemLazyEnablePeerAccess)
                    )
                }?;
                lock(&self.allocs).insert(
                    p as DevicePtr,
                    Alloc {
                        size: alloc_size,
                        device,
                        kind: AllocKind::Ipc,
                    },
                );
                Ok(p as DevicePtr + offset)
            }
            _ => Err(malformed()),
        }
    }

    unsafe fn stream_from_raw(&self, raw: usize) -> Result<HipStream> {
        Ok(HipStream(raw))
    }
    fn stream_synchronize(&self, stream: &HipStream) -> Result<()> {
        // SAFETY: `stream` is 0 or a live stream (stream_from_raw's contract).
        unsafe { hip_call!(self.hip, hipStreamSynchronize(stream.raw())) }
    }
    fn is_capturing(&self, stream: &HipStream) -> Result<bool> {
        if !self.hip.has("hipStreamIsCapturing") {
            // A runtime without graph capture cannot be capturing.
            return Ok(false);
        }
        let mut status = sys::hipStreamCaptureStatus::hipStreamCaptureStatusNone;
        // SAFETY: `status` is a valid out-pointer; `stream` is 0 or live.
        unsafe { hip_call!(self.hip, hipStreamIsCapturing(stream.raw(), &mut status)) }?;
        Ok(status != sys::hipStreamCaptureStatus::hipStreamCaptureStatusNone)
    }
    fn event_create(&self, _stream: &HipStream) -> Result<HipEvent> {
        // Timing off (cheaper, never read): the transport's events are made alike. On the
        // current device: the runtime's bindings have no call that names a stream's device.
        let raw = HipApi(self.clone()).event_create()?;
        Ok(HipEvent {
            raw,
            hip: self.hip.clone(),
        })
    }
    fn event_record(&self, event: &HipEvent, stream: &HipStream) -> Result<()> {
        // SAFETY: the event is live (owned by `event`); the stream is 0 or live.
        unsafe {
            hip_call!(
                self.hip,
                hipEventRecord(event.raw as sys::hipEvent_t, stream.raw())
            )
        }
    }
    fn event_synchronize(&self, event: &HipEvent) -> Result<()> {
        // SAFETY: the event is live.
        unsafe { hip_call!(self.hip, hipEventSynchronize(event.raw as sys::hipEvent_t)) }
    }
    fn event_query(&self, event: &HipEvent) -> Result<Option<bool>> {
        // SAFETY: the event is live (owned by `event`).
        unsafe { self.hip.event_done(event.raw as sys::hipEvent_t) }
    }
    fn stream_id(&self, stream: &HipStream) -> u64 {
        stream.0 as u64
    }
    fn stream_wait_event(&self, stream: &HipStream, event: &HipEvent) -> Result<()> {
        // SAFETY: both handles are live (or the stream is 0).
        unsafe {
            hip_call!(
                self.hip,
                hipStreamWaitEvent(stream.raw(), event.raw as sys::hipEvent_t, 0)
            )
        }
    }

    unsafe fn memcpy_async(
        &self,
        _device: i32,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        stream: &HipStream,
    ) -> Result<()> {
        // SAFETY: the caller guarantees both ranges; hipMemcpyDefault infers the direction
        // from the unified address space.
        unsafe {
            hip_call!(
                self.hip,
                hipMemcpyAsync(
                    dst as *mut c_void,
                    src as *const c_void,
                    bytes,
                    sys::hipMemcpyKind::hipMemcpyDefault,
                    stream.raw()
                )
            )
        }
    }

    fn pointer_info(&self, ptr: DevicePtr) -> Result<PointerInfo> {
        // VMM ranges first: the runtime's range query does not cover them everywhere.
        if let Some((base, size)) = self.find(ptr) {
            let device = lock(&self.allocs).get(&base).map_or(-1, |a| a.device);
            return Ok(PointerInfo {
                on_device: true,
                device,
                base,
                size,
            });
        }
        let host = PointerInfo {
            on_device: false,
            device: -1,
            base: ptr,
            size: 0,
        };
        let mut attr = sys::hipPointerAttribute_t::default();
        // SAFETY: `attr` is a valid out-pointer; the query accepts any address.
        let r = unsafe {
            hip_call!(
                self.hip,
                hipPointerGetAttributes(&mut attr, ptr as *const c_void)
            )
        };
        if r.is_err() {
            // ROCm 5 answers pageable host memory with hipErrorInvalidValue.
            return Ok(host);
        }
        match self.hip.memory_type(attr.memoryType.0) {
            MemoryType::Device | MemoryType::Managed => {
                let mut base: sys::hipDeviceptr_t = std::ptr::null_mut();
                let mut size = 0usize;
                // SAFETY: both out-pointers are valid; `ptr` is device memory per the query.
                let r = unsafe {
                    hip_call!(
                        self.hip,
                        hipMemGetAddressRange(&mut base, &mut size, ptr as sys::hipDeviceptr_t)
                    )
                };
                let (base, size) = match r {
                    Ok(()) => (base as DevicePtr, size),
                    Err(_) => (ptr, 0),
                };
                Ok(PointerInfo {
                    on_device: true,
                    device: attr.device,
                    base,
                    size,
                })
            }
            _ => Ok(host),
        }
    }

    fn max_chunk_bytes(&self, proto: Protocol) -> Option<u64> {
        Some(self.geometry.message_bytes(proto))
    }
    fn max_channels(&self, transport: &HipTransport) -> Option<u32> {
        Some((self.geometry.channels as u32).min(transport.max_blocks()))
    }
    fn max_direct_channels(&self, transport: &HipTransport) -> Option<u32> {
        transport.direct_channels()
    }
    fn connect_on_use(
        &self,
        transport: &HipTransport,
        work: &oxccl_core::plan::WorkDesc,
        bootstrap: &std::sync::Arc<oxccl_core::bootstrap::Bootstrap>,
        abort: &oxccl_core::abort::AbortFlag,
    ) -> Result<()> {
        transport.connect_on_use(work, bootstrap, abort)
    }
    fn topology(&self, transport: &HipTransport) -> Option<Topology> {
        transport.topology()
    }
    fn needs_peer_watch(&self) -> bool {
        true
    }
    fn connect(&self, ctx: &ConnectContext<'_>) -> Result<HipTransport> {
        HipTransport::connect(HipApi(self.clone()), self.geometry, ctx)
    }

    unsafe fn launch(&self, stream: &HipStream, launch: Launch<Self>) -> Result<Option<HipEvent>> {
        // SAFETY: forwarded from the caller.
        unsafe {
            launch
                .transport
                .launch(stream.0, &launch.work, &launch.buffers, &launch.abort)
        }?;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This machine has libamdhip64.so.5 and no AMD GPU: loading must say so, not panic. (On a
    /// machine without the library it says "no HIP runtime"; with a GPU it loads.)
    #[test]
    fn load_reports_no_device() {
        let have_runtime = runtime::open_library(&runtime::default_candidates()).is_ok();
        match HipBackend::load() {
            Ok(b) => eprintln!("a HIP device is present: {:?}", b.runtime()),
            Err(e) => {
                let s = e.to_string();
                let want = if have_runtime {
                    runtime::NO_DEVICE
                } else {
                    runtime::NO_RUNTIME
                };
                assert!(s.contains(want), "{s}");
                eprintln!("{s}");
            }
        }
    }

    /// The generated bindings resolve against the runtime installed here (when there is one).
    #[test]
    fn bindings_load_the_local_runtime() {
        let Ok((api, path)) = runtime::open_library(&runtime::default_candidates()) else {
            eprintln!("no libamdhip64 on this machine");
            return;
        };
        assert!(api.hipInit.is_ok(), "{}", path.display());
        assert!(api.hipGetDeviceCount.is_ok());
        assert!(api.hipMemCreate.is_ok(), "ROCm 5.2 has VMM entry points");
        assert!(api.hipModuleLaunchKernel.is_ok());
    }
}
