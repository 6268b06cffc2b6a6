//! Opening the HIP runtime (`libamdhip64.so`) at run time, checking its entry points, and the
//! ROCm-version differences the backend has to pick at run time.
//!
//! Nothing here links against ROCm: a library built with the HIP backend starts on any machine
//! and reports "no HIP runtime" or "no HIP device" as an ordinary [`Error`].
//! `OXCCL_HIP_RUNTIME=<path>` loads that library and no other ([`RUNTIME_ENV`]).
//!
//! # ROCm 5 vs ROCm 6
//!
//! `sys.rs` is generated from Debian's ROCm 5.2 headers. The differences that matter to the
//! entry points we call are handled here from `hipRuntimeGetVersion`:
//!
//! - `hipMemoryType` (in `hipPointerAttribute_t`): ROCm 5 numbers Host 0, Device 1, Array 2,
//!   Unified 3, Managed 4; ROCm 6 numbers Unregistered 0, Host 1, Device 2, Managed 3, Array 10,
//!   Unified 11. See [`Hip::memory_type`].
//! - `hipPointerAttribute_t`: the same layout in both (ROCm 6 renamed `memoryType` to `type`),
//!   but ROCm 6 answers pageable host memory with success and `hipMemoryTypeUnregistered`, where
//!   ROCm 5 returns `hipErrorInvalidValue`; both mean "host memory" to us.
//! - `hipMemAllocationProp`: HIP 5.2 and older lay it out as `{u8 compressionType; location;
//!   requestedHandleType; type; u16 usage; void* win32}`; later versions use CUDA's layout
//!   `{type; requestedHandleType; location; void* win32; allocFlags}`. See [`AllocProp`]. The exact
//!   release that switched (we assume HIP 5.3) was not verified on hardware.
//! - `hipDeviceProp_t` changed size in ROCm 6 (`hipGetDevicePropertiesR0600`); the backend never
//!   reads it, so it needs no handling.

use crate::sys;
use oxccl_core::config::{self, vars};
use oxccl_core::error::{Error, Result};
use std::ffi::CStr;
use std::path::PathBuf;

/// The sentence reported when no candidate library could be opened.
pub const NO_RUNTIME: &str = "no HIP runtime (libamdhip64.so not found; set ROCM_PATH)";
/// The variable naming the one runtime library to load instead of the default candidates (a HIP
/// runtime outside ROCm's paths, or the test runtime for NVIDIA GPUs in `tests/hip-on-cuda`).
pub const RUNTIME_ENV: &str = vars::OXCCL_HIP_RUNTIME.name;
/// The sentence reported when the runtime loads but sees no device.
pub const NO_DEVICE: &str = "no HIP device";

/// HIP's version number of ROCm 5.3 (`HIP_VERSION_MAJOR * 10^7 + HIP_VERSION_MINOR * 10^5 + patch`).
const HIP_5_3: i32 = 50_300_000;
/// HIP's version number of ROCm 6.0.
const HIP_6_0: i32 = 60_000_000;

/// Entry points without which the backend cannot work at all: loading fails naming the first
/// missing one. Everything else (VMM, export, capture status) is probed where it is used.
const REQUIRED: &[&str] = &[
    "hipInit",
    "hipRuntimeGetVersion",
    "hipGetDeviceCount",
    "hipSetDevice",
    "hipGetDevice",
    "hipMalloc",
    "hipFree",
    "hipStreamSynchronize",
    "hipEventCreateWithFlags",
    "hipEventRecord",
    "hipEventSynchronize",
    "hipEventDestroy",
    "hipStreamWaitEvent",
    "hipMemcpyAsync",
    "hipPointerGetAttributes",
    "hipGetErrorName",
    "hipGetErrorString",
];

/// Calls a HIP entry point of a [`Hip`] and converts its `hipError_t`.
///
/// Expands to an unsafe call: use it inside an `unsafe` block whose `// SAFETY:` comment covers
/// the arguments. A symbol the runtime lacks becomes an error instead of bindgen's panic.
macro_rules! hip_call {
    ($hip:expr, $f:ident ( $($arg:expr),* $(,)? )) => {{
        let hip: &$crate::runtime::Hip = &$hip;
        match &hip.api.$f {
            Ok(f) => {
                let rc = f($($arg),*);
                hip.check(stringify!($f), rc)
            }
            Err(_) => Err(hip.missing(stringify!($f))),
        }
    }};
}
pub(crate) use hip_call;

/// What a pointer query says about where memory lives, with ROCm's numbering removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryType {
    /// Pageable host memory the runtime does not know.
    Unregistered,
    /// Pinned or registered host memory.
    Host,
    /// Device memory.
    Device,
    /// Managed (unified) memory.
    Managed,
    /// A HIP array, or a value this version does not define.
    Other,
}

/// `hipMemAllocationProp` in the layout of the loaded runtime (see the module docs).
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, Default)]
pub struct AllocProp([u8; 32]);

/// `hipMemAllocationProp` as HIP 5.2 declares it (the layout `sys.rs` was generated from).
#[repr(C)]
struct PropV52 {
    compression_type: u8,
    location_type: u32,
    location_id: i32,
    requested_handle_type: u32,
    alloc_type: u32,
    usage: u16,
    win32: *mut std::ffi::c_void,
}

/// `hipMemAllocationProp` from HIP 5.3 on (CUDA's `CUmemAllocationProp`).
#[repr(C)]
struct PropV53 {
    alloc_type: u32,
    requested_handle_type: u32,
    location_type: u32,
    location_id: i32,
    win32: *mut std::ffi::c_void,
    compression_type: u8,
    gpu_direct_rdma_capable: u8,
    usage: u16,
}

const _: () = assert!(std::mem::size_of::<PropV52>() <= 32);
const _: () = assert!(std::mem::size_of::<PropV53>() <= 32);
const _: () = assert!(std::mem::offset_of!(PropV52, location_type) == 4);
const _: () = assert!(std::mem::offset_of!(PropV53, location_type) == 8);

impl AllocProp {
    /// A pinned device allocation on `device` exportable as a POSIX file descriptor.
    fn new(hip_version: i32, device: i32) -> AllocProp {
        let mut out = AllocProp::default();
        let dst = out.0.as_mut_ptr();
        let pinned = sys::hipMemAllocationType::hipMemAllocationTypePinned.0;
        let fd = sys::hipMemAllocationHandleType::hipMemHandleTypePosixFileDescriptor.0;
        let on_device = sys::hipMemLocationType::hipMemLocationTypeDevice.0;
        if hip_version < HIP_5_3 {
            let p = PropV52 {
                compression_type: 0,
                location_type: on_device,
                location_id: device,
                requested_handle_type: fd,
                alloc_type: pinned,
                usage: 0,
                win32: std::ptr::null_mut(),
            };
            // SAFETY: `PropV52` fits in the 32 zeroed, 8-aligned bytes (asserted above).
            unsafe { dst.cast::<PropV52>().write(p) };
        } else {
            let p = PropV53 {
                alloc_type: pinned,
                requested_handle_type: fd,
                location_type: on_device,
                location_id: device,
                win32: std::ptr::null_mut(),
                compression_type: 0,
                gpu_direct_rdma_capable: 0,
                usage: 0,
            };
            // SAFETY: `PropV53` fits in the 32 zeroed, 8-aligned bytes (asserted above).
            unsafe { dst.cast::<PropV53>().write(p) };
        }
        out
    }

    /// The pointer `hipMemCreate` and `hipMemGetAllocationGranularity` take.
    pub fn as_ptr(&self) -> *const sys::hipMemAllocationProp {
        self.0.as_ptr().cast()
    }
}

/// The loaded HIP runtime: its entry points and what it reported at start-up.
pub struct Hip {
    /// The entry points (each a `Result`: the symbol may be missing).
    pub api: sys::HipApi,
    /// The library that was opened.
    pub path: PathBuf,
    /// `hipRuntimeGetVersion` (HIP_VERSION numbering, e.g. 50221153 for 5.2.21153).
    pub runtime_version: i32,
    /// `hipDriverGetVersion`, 0 when the runtime lacks it.
    pub driver_version: i32,
    /// `hipGetDeviceCount` at load time (at least 1).
    pub device_count: usize,
}

impl std::fmt::Debug for Hip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hip")
            .field("path", &self.path)
            .field("runtime_version", &self.runtime_version)
            .field("device_count", &self.device_count)
            .finish_non_exhaustive()
    }
}

/// The error for "the HIP backend cannot be used on this machine".
pub fn unavailable(message: impl Into<String>) -> Error {
    Error::System {
        context: "HIP backend unavailable".into(),
        message: message.into(),
    }
}

/// Library names tried in order: `$ROCM_PATH/lib/libamdhip64.so` first, then the versioned
/// sonames (newest ROCm first) and the unversioned name through the dynamic loader's path.
pub fn default_candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(root) = config::get(&vars::ROCM_PATH) {
        out.push(root.join("lib/libamdhip64.so"));
    }
    for name in [
        "libamdhip64.so.7",
        "libamdhip64.so.6",
        "libamdhip64.so.5",
        "libamdhip64.so",
    ] {
        out.push(PathBuf::from(name));
    }
    out
}

/// The library `OXCCL_HIP_RUNTIME` names, when it is set and not empty.
pub fn runtime_override() -> Option<PathBuf> {
    config::get(&vars::OXCCL_HIP_RUNTIME)
}

/// Opens exactly `path` (what `OXCCL_HIP_RUNTIME` names): no other candidate is tried, so a
/// mistyped path is an error naming it and the loader's reason, never another runtime.
pub fn open_override(path: &std::path::Path) -> Result<(sys::HipApi, PathBuf)> {
    // SAFETY: as in `open_library`: the user chose this library as the HIP runtime.
    match unsafe { sys::HipApi::new(path) } {
        Ok(api) => Ok((api, path.to_path_buf())),
        Err(e) => {
            // libloading keeps the loader's own words (dlerror) in the error's source.
            let why = match std::error::Error::source(&e) {
                Some(src) => format!("{e}: {src}"),
                None => e.to_string(),
            };
            Err(unavailable(format!(
                "{RUNTIME_ENV}={}: cannot load it ({why})",
                path.display()
            )))
        }
    }
}

/// Opens the first candidate that loads; [`NO_RUNTIME`] when none does.
pub fn open_library(candidates: &[PathBuf]) -> Result<(sys::HipApi, PathBuf)> {
    for path in candidates {
        // SAFETY: loading a library runs its initialisers; libamdhip64's are those of any HIP
        // program. The symbols are only called through the checked fields.
        match unsafe { sys::HipApi::new(path) } {
            Ok(api) => return Ok((api, path.clone())),
            Err(e) => tracing::debug!(target: "oxccl::init", "HIP runtime {}: {e}", path.display()),
        }
    }
    Err(unavailable(NO_RUNTIME))
}

impl Hip {
    /// Opens the runtime `OXCCL_HIP_RUNTIME` names, else the first of the default candidates,
    /// and checks that a device exists.
    pub fn load() -> Result<Hip> {
        match runtime_override() {
            Some(path) => {
                let (api, path) = open_override(&path)?;
                Hip::start(api, path)
            }
            None => Hip::load_from(&default_candidates()),
        }
    }

    /// Opens the runtime from `candidates`, checks the required entry points, initialises it
    /// and counts devices: [`NO_RUNTIME`] or [`NO_DEVICE`] when it cannot be used.
    pub fn load_from(candidates: &[PathBuf]) -> Result<Hip> {
        let (api, path) = open_library(candidates)?;
        Hip::start(api, path)
    }

    /// Checks the required entry points of an opened runtime, initialises it and counts devices.
    fn start(api: sys::HipApi, path: PathBuf) -> Result<Hip> {
        let mut hip = Hip {
            api,
            path,
            runtime_version: 0,
            driver_version: 0,
            device_count: 0,
        };
        if let Some(name) = REQUIRED.iter().find(|n| !hip.has(n)) {
            return Err(unavailable(format!(
                "{} lacks {name}: ROCm 5.2 or newer is needed",
                hip.path.display()
            )));
        }
        // SAFETY: hipInit takes flags (0 is the only defined value).
        if let Err(e) = unsafe { hip_call!(hip, hipInit(0)) } {
            return Err(unavailable(format!("{NO_DEVICE} ({e})")));
        }
        let mut v = 0;
        // SAFETY: `v` is a valid out-pointer.
        unsafe { hip_call!(hip, hipRuntimeGetVersion(&mut v)) }?;
        hip.runtime_version = v;
        let mut d = 0;
        // SAFETY: `d` is a valid out-pointer. A runtime without the call keeps 0.
        if unsafe { hip_call!(hip, hipDriverGetVersion(&mut d)) }.is_ok() {
            hip.driver_version = d;
        }
        let mut n = 0;
        // SAFETY: `n` is a valid out-pointer.
        match unsafe { hip_call!(hip, hipGetDeviceCount(&mut n)) } {
            Ok(()) if n > 0 => hip.device_count = n as usize,
            Ok(()) => return Err(unavailable(NO_DEVICE)),
            Err(e) => return Err(unavailable(format!("{NO_DEVICE} ({e})"))),
        }
        tracing::info!(
            target: "oxccl::init",
            "HIP runtime {} (version {}, driver {}), {} device(s)",
            hip.path.display(),
            hip.runtime_version,
            hip.driver_version,
            hip.device_count
        );
        Ok(hip)
    }

    /// True when the runtime exports `name` (one of the generated fields).
    pub fn has(&self, name: &str) -> bool {
        macro_rules! fields {
            ($($f:ident),*) => {
                match name {
                    $(stringify!($f) => self.api.$f.is_ok(),)*
                    _ => false,
                }
            };
        }
        fields!(
            hipInit,
            hipRuntimeGetVersion,
            hipDriverGetVersion,
            hipGetDeviceCount,
            hipSetDevice,
            hipGetDevice,
            hipDeviceCanAccessPeer,
            hipDeviceEnablePeerAccess,
            hipDeviceGetAttribute,
            hipDeviceGetPCIBusId,
            hipMemCreate,
            hipMemRelease,
            hipMemAddressReserve,
            hipMemAddressFree,
            hipMemMap,
            hipMemUnmap,
            hipMemSetAccess,
            hipMemGetAllocationGranularity,
            hipMemExportToShareableHandle,
            hipMemImportFromShareableHandle,
            hipIpcGetMemHandle,
            hipIpcOpenMemHandle,
            hipIpcCloseMemHandle,
            hipHostMalloc,
            hipHostFree,
            hipHostGetDevicePointer,
            hipHostRegister,
            hipHostUnregister,
            hipStreamCreateWithFlags,
            hipStreamDestroy,
            hipStreamSynchronize,
            hipStreamQuery,
            hipStreamIsCapturing,
            hipThreadExchangeStreamCaptureMode,
            hipStreamBeginCapture,
            hipStreamEndCapture,
            hipGraphInstantiate,
            hipGraphLaunch,
            hipGraphGetNodes,
            hipGraphDestroy,
            hipGraphExecDestroy,
            hipEventCreateWithFlags,
            hipEventRecord,
            hipEventSynchronize,
            hipEventQuery,
            hipEventDestroy,
            hipStreamWaitEvent,
            hipMemcpyAsync,
            hipMemsetAsync,
            hipMalloc,
            hipFree,
            hipPointerGetAttributes,
            hipMemGetAddressRange,
            hipModuleLoadData,
            hipModuleUnload,
            hipModuleGetFunction,
            hipModuleLaunchKernel,
            hipGetErrorString,
            hipGetErrorName
        )
    }

    /// True when the runtime has every VMM entry point the backend uses.
    pub fn has_vmm(&self) -> bool {
        [
            "hipMemCreate",
            "hipMemRelease",
            "hipMemAddressReserve",
            "hipMemAddressFree",
            "hipMemMap",
            "hipMemUnmap",
            "hipMemSetAccess",
            "hipMemGetAllocationGranularity",
        ]
        .iter()
        .all(|n| self.has(n))
    }

    /// Whether the work before `event` has run (`hipEventQuery`, never blocking); `None` when
    /// the runtime lacks the entry point.
    ///
    /// # Safety
    /// `event` is a live event of this runtime.
    pub unsafe fn event_done(&self, event: sys::hipEvent_t) -> Result<Option<bool>> {
        let Ok(f) = &self.api.hipEventQuery else {
            return Ok(None);
        };
        // SAFETY: the caller guarantees the event; the query never blocks.
        self.done("hipEventQuery", unsafe { f(event) })
    }

    /// Whether everything queued on `stream` has run (`hipStreamQuery`, never blocking); `None`
    /// when the runtime lacks the entry point.
    ///
    /// # Safety
    /// `stream` is 0 or a live stream of this runtime.
    pub unsafe fn stream_done(&self, stream: sys::hipStream_t) -> Result<Option<bool>> {
        let Ok(f) = &self.api.hipStreamQuery else {
            return Ok(None);
        };
        // SAFETY: the caller guarantees the stream; the query never blocks.
        self.done("hipStreamQuery", unsafe { f(stream) })
    }

    /// A query's answer: `hipErrorNotReady` is "not yet", any other error an error.
    fn done(&self, api: &'static str, rc: sys::hipError_t) -> Result<Option<bool>> {
        if rc == sys::hipError_t::hipErrorNotReady {
            return Ok(Some(false));
        }
        self.check(api, rc).map(|()| Some(true))
    }

    /// `Ok` for `hipSuccess`, otherwise an [`Error::Backend`] naming the call and HIP's text.
    pub fn check(&self, api: &'static str, rc: sys::hipError_t) -> Result<()> {
        if rc == sys::hipError_t::hipSuccess {
            return Ok(());
        }
        Err(Error::Backend {
            api,
            code: i64::from(rc.0),
            detail: self.error_text(rc),
        })
    }

    /// "hipErrorX: description" for a HIP error code.
    pub fn error_text(&self, rc: sys::hipError_t) -> String {
        let text =
            |f: &Result<unsafe extern "C" fn(sys::hipError_t) -> *const std::ffi::c_char, _>| {
                let f = f.as_ref().ok()?;
                // SAFETY: both functions take any code and return a static string or null.
                let p = unsafe { f(rc) };
                // SAFETY: a non-null result is a NUL-terminated static string.
                (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
            };
        match (
            text(&self.api.hipGetErrorName),
            text(&self.api.hipGetErrorString),
        ) {
            (Some(n), Some(s)) if n != s => format!("{n}: {s}"),
            (Some(n), Some(_)) => n,
            (Some(t), None) | (None, Some(t)) => t,
            (None, None) => format!("hipError_t {}", rc.0),
        }
    }

    /// The error for an optional entry point this runtime lacks.
    pub fn missing(&self, api: &'static str) -> Error {
        Error::Backend {
            api,
            code: -1,
            detail: format!(
                "not exported by {} (HIP version {})",
                self.path.display(),
                self.runtime_version
            ),
        }
    }

    /// True for ROCm 6 or newer (its enum numbering).
    pub fn is_rocm6(&self) -> bool {
        self.runtime_version >= HIP_6_0
    }

    /// A raw `hipMemoryType` value in this runtime's numbering, as a [`MemoryType`].
    pub fn memory_type(&self, raw: u32) -> MemoryType {
        memory_type(self.runtime_version, raw)
    }

    /// `hipMemAllocationProp` for a shareable allocation on `device`, in this runtime's layout.
    pub fn alloc_prop(&self, device: i32) -> AllocProp {
        AllocProp::new(self.runtime_version, device)
    }
}

/// `hipMemoryType` numbering of HIP version `version` (see the module docs).
pub fn memory_type(version: i32, raw: u32) -> MemoryType {
    if version >= HIP_6_0 {
        match raw {
            0 => MemoryType::Unregistered,
            1 => MemoryType::Host,
            2 => MemoryType::Device,
            3 => MemoryType::Managed,
            _ => MemoryType::Other,
        }
    } else {
        match raw {
            0 => MemoryType::Host,
            1 => MemoryType::Device,
            4 => MemoryType::Managed,
            _ => MemoryType::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_type_numbering_follows_the_version() {
        assert_eq!(memory_type(50_221_153, 1), MemoryType::Device);
        assert_eq!(memory_type(50_221_153, 0), MemoryType::Host);
        assert_eq!(memory_type(60_032_830, 2), MemoryType::Device);
        assert_eq!(memory_type(60_032_830, 1), MemoryType::Host);
        assert_eq!(memory_type(60_032_830, 0), MemoryType::Unregistered);
        assert_eq!(memory_type(70_000_000, 3), MemoryType::Managed);
    }

    #[test]
    fn alloc_prop_layouts() {
        let old = AllocProp::new(50_221_153, 3);
        // HIP 5.2: location {type, id} at 4 and 8, requestedHandleType at 12, type at 16.
        assert_eq!(old.0[4..8], 1u32.to_ne_bytes());
        assert_eq!(old.0[8..12], 3i32.to_ne_bytes());
        assert_eq!(old.0[12..16], 1u32.to_ne_bytes());
        assert_eq!(old.0[16..20], 1u32.to_ne_bytes());
        let new = AllocProp::new(60_032_830, 3);
        // CUDA's layout: type, requestedHandleType, location {type, id}.
        assert_eq!(new.0[0..4], 1u32.to_ne_bytes());
        assert_eq!(new.0[4..8], 1u32.to_ne_bytes());
        assert_eq!(new.0[8..12], 1u32.to_ne_bytes());
        assert_eq!(new.0[12..16], 3i32.to_ne_bytes());
    }

    #[test]
    fn the_v52_layout_matches_the_generated_bindings() {
        use std::mem::{offset_of, size_of};
        assert_eq!(size_of::<sys::hipMemAllocationProp>(), size_of::<PropV52>());
        assert_eq!(
            offset_of!(sys::hipMemAllocationProp, location),
            offset_of!(PropV52, location_type)
        );
        assert_eq!(
            offset_of!(sys::hipMemAllocationProp, requestedHandleType),
            offset_of!(PropV52, requested_handle_type)
        );
        assert_eq!(
            offset_of!(sys::hipMemAllocationProp, type_),
            offset_of!(PropV52, alloc_type)
        );
    }

    #[test]
    fn no_candidate_is_no_runtime() {
        let dir = std::env::temp_dir().join(format!("oxccl-no-rocm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cands = vec![
            dir.join("lib/libamdhip64.so"),
            PathBuf::from("libamdhip64-oxccl-absent.so.99"),
        ];
        let err = Hip::load_from(&cands).unwrap_err();
        assert!(err.to_string().contains(NO_RUNTIME), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_override_that_does_not_load_is_named() {
        let path = std::env::temp_dir().join("oxccl-absent-dir/libamdhip64.so");
        let Err(err) = open_override(&path) else {
            panic!("nothing to load at {}", path.display());
        };
        let s = err.to_string();
        assert!(s.contains(RUNTIME_ENV), "{s}");
        assert!(s.contains(&path.display().to_string()), "{s}");
    }

    #[test]
    fn rocm_path_comes_first() {
        // The candidate list is a pure function of ROCM_PATH; check its shape without setting
        // the variable (tests run in parallel threads).
        let c = default_candidates();
        let tail: Vec<_> = c[c.len() - 4..]
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(
            tail,
            [
                "libamdhip64.so.7",
                "libamdhip64.so.6",
                "libamdhip64.so.5",
                "libamdhip64.so"
            ]
        );
    }
}
