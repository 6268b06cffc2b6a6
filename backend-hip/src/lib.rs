//! oxccl backend for AMD GPUs: [`HipApi`] implements `oxccl-device-transport`'s [`DeviceApi`] on
//! the HIP runtime, which is loaded at run time ([`runtime`]), so a binary with this backend
//! starts on any machine; [`HipBackend`] is the GPU backend written once over it.
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
use oxccl_core::backend::DevicePtr;
use oxccl_core::datatype::DataType;
use oxccl_core::error::{Error, Result};
use oxccl_core::lock::lock;
use oxccl_device_transport::{DeviceApi, GpuBackend, fd_of_process};
use runtime::{Hip, hip_call};
use std::collections::{BTreeMap, HashMap};
use std::ffi::{CString, c_void};
use std::sync::{Arc, Mutex};
pub use transport::HipTransport;

/// The HIP backend: the GPU backend written once over [`HipApi`].
pub type HipBackend = GpuBackend<HipApi>;

/// Granularity reported when the runtime has no VMM (`hipMalloc` aligns to at least this).
const FALLBACK_GRANULARITY: usize = 4096;

/// Tag of an exported VMM allocation: POSIX file descriptor of the exporting process.
const HANDLE_FD: u8 = 1;
/// Tag of an exported `hipMalloc` allocation: a `hipIpcMemHandle_t`.
const HANDLE_IPC: u8 = 2;

/// A HIP stream handle (`hipStream_t`; 0 is the default stream). Not owned: C callers own their
/// streams, and [`HipApi::stream_create`]'s are freed with [`HipApi::stream_destroy`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HipStream(pub usize);

impl HipStream {
    pub(crate) fn raw(self) -> sys::hipStream_t {
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

#[derive(Debug)]
struct Alloc {
    /// Mapped (or allocated) size in bytes.
    size: usize,
    device: i32,
    kind: AllocKind,
}

/// The HIP runtime calls of the backend and its transports ([`DeviceApi`]). Clones share the
/// runtime and every table (transports keep one to free their memory and find their kernels).
#[derive(Clone)]
pub struct HipApi {
    hip: Arc<Hip>,
    /// Memory this backend allocated or imported, by base address.
    allocs: Arc<Mutex<BTreeMap<DevicePtr, Alloc>>>,
    /// VMM granularity per device (`None`: VMM unsupported there, use hipMalloc).
    granularity: Arc<Mutex<HashMap<i32, Option<usize>>>>,
    /// The kernels' module per device (`hipModule_t`).
    modules: Arc<Mutex<HashMap<i32, usize>>>,
    /// The kernels' code object (embedded, or `OXCCL_HIP_CODE_OBJECT`).
    code: CodeObject,
}

impl std::fmt::Debug for HipApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HipApi")
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
fn with_device<T>(b: &HipApi, device: i32, f: impl FnOnce() -> Result<T>) -> Result<T> {
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

impl HipApi {
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
    fn open() -> Result<HipApi> {
        let code = CodeObject::from_env()?;
        let mut be = HipApi::with_runtime(Hip::load()?);
        be.code = code;
        Ok(be)
    }

    /// Runtime calls over an already loaded runtime (the embedded kernels).
    pub fn with_runtime(hip: Hip) -> HipApi {
        HipApi {
            hip: Arc::new(hip),
            allocs: Arc::new(Mutex::new(BTreeMap::new())),
            granularity: Arc::new(Mutex::new(HashMap::new())),
            modules: Arc::new(Mutex::new(HashMap::new())),
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

    /// Destroys a stream from [`HipApi::stream_create`].
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

    /// Frees memory from [`HipApi::host_alloc`].
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
    fd_of_process(pid, fd).map_err(|e| Error::System {
        context: format!(
            "importing a HIP memory handle of process {pid} ({})",
            e.call
        ),
        message: e.os.to_string(),
    })
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
