//! Results: CUDA's codes mapped to the HIP codes of the same meaning, HIP's names and
//! descriptions, and the detail of each thread's latest failure (which CUDA call failed and how),
//! which `hipGetErrorString` adds to the description so that errors stay diagnosable.

use crate::types::HipError;
use cudarc::driver::sys;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::sync::Mutex;

/// A failed HIP call: the code it returns and a sentence for `hipGetErrorString`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The HIP code returned.
    pub code: HipError,
    /// What went wrong, e.g. "cuMemCreate: CUDA_ERROR_INVALID_VALUE (invalid argument)".
    pub detail: String,
}

/// The result of an entry point's body.
pub type HipResult<T = ()> = Result<T, Failure>;

impl Failure {
    /// A failure with `code` and `detail`.
    pub fn new(code: HipError, detail: impl Into<String>) -> Failure {
        Failure {
            code,
            detail: detail.into(),
        }
    }

    /// `hipErrorInvalidValue` with `detail`.
    pub fn invalid(detail: impl Into<String>) -> Failure {
        Failure::new(HipError::INVALID_VALUE, detail)
    }
}

/// Codes whose number and meaning CUDA's driver API and HIP share (HIP took CUDA's numbers).
const SHARED_CODES: &[std::ops::RangeInclusive<u32>] = &[
    0..=8,
    100..=101,
    200..=202,
    205..=217,
    219..=219,
    300..=304,
    400..=401,
    500..=500,
    600..=600,
    700..=702,
    704..=705,
    708..=710,
    712..=713,
    719..=720,
    801..=801,
    900..=908,
    910..=910,
    999..=999,
];

/// The HIP code for a CUDA driver result (its numeric value).
pub fn hip_code(cuda: u32) -> HipError {
    if SHARED_CODES.iter().any(|r| r.contains(&cuda)) {
        return HipError(cuda);
    }
    match cuda {
        // PTX the driver cannot JIT: the code object is unusable, as a bad kernel file on HIP.
        218 | 221..=223 => HipError::INVALID_KERNEL_FILE,
        // A stub libcuda, an unavailable device, a driver/kernel-module mismatch.
        34 | 46 | 803 | 804 => HipError::INSUFFICIENT_DRIVER,
        102 => HipError::INVALID_DEVICE,
        // Faults of a running kernel.
        714..=718 => HipError::LAUNCH_FAILURE,
        800 => HipError::NOT_SUPPORTED,
        _ => HipError::UNKNOWN,
    }
}

/// `Ok` for `CUDA_SUCCESS`, else the HIP failure naming the call and CUDA's error.
pub fn cu(api: &str, r: sys::CUresult) -> HipResult {
    if r == sys::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    Err(Failure::new(
        hip_code(r as u32),
        format!("{api}: {}", cuda_text(r)),
    ))
}

/// "CUDA_ERROR_X (description)" from the driver, or the enum's name when it cannot say.
fn cuda_text(r: sys::CUresult) -> String {
    let mut name: *const std::ffi::c_char = std::ptr::null();
    let mut text: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: both calls only store a pointer to a static string (or leave the null); the
    // driver is loaded, since a call just returned `r`.
    let found = unsafe {
        sys::cuGetErrorName(r, &mut name) == sys::CUresult::CUDA_SUCCESS
            && sys::cuGetErrorString(r, &mut text) == sys::CUresult::CUDA_SUCCESS
    };
    if !found || name.is_null() || text.is_null() {
        return format!("{r:?}");
    }
    // SAFETY: non-null results are NUL-terminated static strings of the driver.
    let (name, text) = unsafe { (CStr::from_ptr(name), CStr::from_ptr(text)) };
    format!("{} ({})", name.to_string_lossy(), text.to_string_lossy())
}

/// HIP's name and description of the codes this runtime returns.
const NAMES: &[(u32, &CStr, &CStr)] = &[
    (0, c"hipSuccess", c"no error"),
    (1, c"hipErrorInvalidValue", c"invalid argument"),
    (2, c"hipErrorOutOfMemory", c"out of memory"),
    (3, c"hipErrorNotInitialized", c"initialization error"),
    (4, c"hipErrorDeinitialized", c"driver shutting down"),
    (5, c"hipErrorProfilerDisabled", c"profiler disabled"),
    (
        6,
        c"hipErrorProfilerNotInitialized",
        c"profiler not initialized",
    ),
    (
        7,
        c"hipErrorProfilerAlreadyStarted",
        c"profiler already started",
    ),
    (
        8,
        c"hipErrorProfilerAlreadyStopped",
        c"profiler already stopped",
    ),
    (
        21,
        c"hipErrorInvalidMemcpyDirection",
        c"invalid copy direction for memcpy",
    ),
    (
        35,
        c"hipErrorInsufficientDriver",
        c"driver version is insufficient",
    ),
    (100, c"hipErrorNoDevice", c"no device found"),
    (101, c"hipErrorInvalidDevice", c"invalid device ordinal"),
    (
        200,
        c"hipErrorInvalidImage",
        c"device kernel image is invalid",
    ),
    (201, c"hipErrorInvalidContext", c"invalid device context"),
    (
        202,
        c"hipErrorContextAlreadyCurrent",
        c"context already current",
    ),
    (
        205,
        c"hipErrorMapFailed",
        c"mapping of buffer object failed",
    ),
    (
        206,
        c"hipErrorUnmapFailed",
        c"unmapping of buffer object failed",
    ),
    (207, c"hipErrorArrayIsMapped", c"array is mapped"),
    (208, c"hipErrorAlreadyMapped", c"resource already mapped"),
    (
        209,
        c"hipErrorNoBinaryForGpu",
        c"no kernel image is available for the GPU",
    ),
    (
        210,
        c"hipErrorAlreadyAcquired",
        c"resource already acquired",
    ),
    (211, c"hipErrorNotMapped", c"resource not mapped"),
    (
        212,
        c"hipErrorNotMappedAsArray",
        c"resource not mapped as array",
    ),
    (
        213,
        c"hipErrorNotMappedAsPointer",
        c"resource not mapped as pointer",
    ),
    (
        214,
        c"hipErrorECCNotCorrectable",
        c"uncorrectable ECC error",
    ),
    (215, c"hipErrorUnsupportedLimit", c"limit not supported"),
    (
        216,
        c"hipErrorContextAlreadyInUse",
        c"context already in use",
    ),
    (
        217,
        c"hipErrorPeerAccessUnsupported",
        c"peer access not supported",
    ),
    (218, c"hipErrorInvalidKernelFile", c"invalid kernel file"),
    (
        219,
        c"hipErrorInvalidGraphicsContext",
        c"invalid graphics context",
    ),
    (300, c"hipErrorInvalidSource", c"invalid source"),
    (301, c"hipErrorFileNotFound", c"file not found"),
    (
        302,
        c"hipErrorSharedObjectSymbolNotFound",
        c"shared object symbol not found",
    ),
    (
        303,
        c"hipErrorSharedObjectInitFailed",
        c"shared object initialization failed",
    ),
    (304, c"hipErrorOperatingSystem", c"OS call failed"),
    (400, c"hipErrorInvalidHandle", c"invalid resource handle"),
    (401, c"hipErrorIllegalState", c"illegal state"),
    (500, c"hipErrorNotFound", c"named symbol not found"),
    (600, c"hipErrorNotReady", c"device not ready"),
    (
        700,
        c"hipErrorIllegalAddress",
        c"an illegal memory access was encountered",
    ),
    (
        701,
        c"hipErrorLaunchOutOfResources",
        c"too many resources requested for launch",
    ),
    (702, c"hipErrorLaunchTimeOut", c"the launch timed out"),
    (
        704,
        c"hipErrorPeerAccessAlreadyEnabled",
        c"peer access is already enabled",
    ),
    (
        705,
        c"hipErrorPeerAccessNotEnabled",
        c"peer access has not been enabled",
    ),
    (
        708,
        c"hipErrorSetOnActiveProcess",
        c"cannot set while device is active",
    ),
    (709, c"hipErrorContextIsDestroyed", c"context is destroyed"),
    (710, c"hipErrorAssert", c"device-side assert triggered"),
    (
        712,
        c"hipErrorHostMemoryAlreadyRegistered",
        c"host memory already registered",
    ),
    (
        713,
        c"hipErrorHostMemoryNotRegistered",
        c"host memory not registered",
    ),
    (719, c"hipErrorLaunchFailure", c"unspecified launch failure"),
    (
        720,
        c"hipErrorCooperativeLaunchTooLarge",
        c"too many blocks in cooperative launch",
    ),
    (801, c"hipErrorNotSupported", c"operation not supported"),
    (
        900,
        c"hipErrorStreamCaptureUnsupported",
        c"operation not permitted when stream is capturing",
    ),
    (
        901,
        c"hipErrorStreamCaptureInvalidated",
        c"operation failed due to a previous error during capture",
    ),
    (
        902,
        c"hipErrorStreamCaptureMerge",
        c"operation would result in a merge of separate capture sequences",
    ),
    (
        903,
        c"hipErrorStreamCaptureUnmatched",
        c"capture was not ended in the same stream as it began",
    ),
    (
        904,
        c"hipErrorStreamCaptureUnjoined",
        c"capturing stream has unjoined work",
    ),
    (
        905,
        c"hipErrorStreamCaptureIsolation",
        c"dependency created on uncaptured work in another stream",
    ),
    (
        906,
        c"hipErrorStreamCaptureImplicit",
        c"operation would make the legacy stream depend on a capturing blocking stream",
    ),
    (
        907,
        c"hipErrorCapturedEvent",
        c"operation not permitted on an event last recorded in a capturing stream",
    ),
    (
        908,
        c"hipErrorStreamCaptureWrongThread",
        c"attempt to terminate a thread-local capture sequence from another thread",
    ),
    (
        910,
        c"hipErrorGraphExecUpdateFailure",
        c"the graph update was not performed",
    ),
    (999, c"hipErrorUnknown", c"unknown error"),
];

/// HIP's name of `code` ("hipErrorUnknown" for codes it does not define).
pub fn name(code: HipError) -> &'static CStr {
    NAMES
        .iter()
        .find(|(c, ..)| *c == code.0)
        .map_or(c"hipErrorUnknown", |(_, n, _)| n)
}

/// HIP's description of `code`.
pub fn description(code: HipError) -> &'static CStr {
    NAMES
        .iter()
        .find(|(c, ..)| *c == code.0)
        .map_or(c"unknown error", |(_, _, d)| d)
}

thread_local! {
    /// The latest failure of an entry point called on this thread.
    static LAST: RefCell<Option<Failure>> = const { RefCell::new(None) };
}

/// Remembers `f` as this thread's latest failure.
pub fn record(f: &Failure) {
    LAST.with(|last| *last.borrow_mut() = Some(f.clone()));
}

/// Sentences handed out by `hipGetErrorString`, kept for the process's life (the C contract is a
/// static string); details name calls and codes, never addresses, so the set stays small.
static INTERNED: Mutex<Option<HashMap<String, &'static CStr>>> = Mutex::new(None);

fn intern(text: String) -> &'static CStr {
    let mut map = INTERNED.lock().unwrap_or_else(|p| p.into_inner());
    let map = map.get_or_insert_with(HashMap::new);
    if let Some(s) = map.get(&text) {
        return s;
    }
    let c = CString::new(text.replace('\0', " ")).expect("NULs replaced");
    let leaked: &'static CStr = Box::leak(c.into_boxed_c_str());
    map.insert(text, leaked);
    leaked
}

/// `hipGetErrorString`: HIP's description, plus this thread's latest failure detail when that
/// failure returned `code`.
pub fn explain(code: HipError) -> &'static CStr {
    let base = description(code);
    let detail = LAST.with(|last| {
        last.borrow()
            .as_ref()
            .filter(|f| f.code == code)
            .map(|f| f.detail.clone())
    });
    match detail {
        Some(d) if !d.is_empty() => intern(format!("{} [{d}]", base.to_string_lossy())),
        _ => base,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_backend_hip_tests_for_keep_their_meaning() {
        assert_eq!(hip_code(0), HipError::SUCCESS);
        assert_eq!(hip_code(600), HipError::NOT_READY);
        assert_eq!(hip_code(704), HipError::PEER_ACCESS_ALREADY_ENABLED);
        assert_eq!(hip_code(100), HipError::NO_DEVICE);
        assert_eq!(hip_code(2), HipError::OUT_OF_MEMORY);
        assert_eq!(hip_code(500), HipError::NOT_FOUND);
    }

    #[test]
    fn cuda_only_codes_map_to_the_nearest_hip_code() {
        assert_eq!(hip_code(222), HipError::INVALID_KERNEL_FILE);
        assert_eq!(hip_code(34), HipError::INSUFFICIENT_DRIVER);
        assert_eq!(hip_code(716), HipError::LAUNCH_FAILURE);
        assert_eq!(hip_code(909), HipError::UNKNOWN);
        assert_eq!(hip_code(12345), HipError::UNKNOWN);
    }

    #[test]
    fn every_shared_code_has_a_hip_name() {
        for r in SHARED_CODES {
            for c in r.clone() {
                assert!(
                    NAMES.iter().any(|(n, ..)| *n == c),
                    "code {c} is shared with CUDA but has no HIP name"
                );
            }
        }
        assert_eq!(name(HipError(999)), c"hipErrorUnknown");
        assert_eq!(name(HipError(4242)), c"hipErrorUnknown");
    }

    #[test]
    fn every_mapped_code_has_a_hip_name() {
        for cuda in 0..1100 {
            let hip = hip_code(cuda);
            assert!(
                NAMES.iter().any(|(c, ..)| *c == hip.0),
                "CUDA {cuda} maps to unnamed HIP {}",
                hip.0
            );
        }
    }

    #[test]
    fn the_error_string_carries_the_latest_detail() {
        let f = Failure::new(
            HipError::NOT_FOUND,
            "cuModuleGetFunction: CUDA_ERROR_NOT_FOUND",
        );
        record(&f);
        let s = explain(HipError::NOT_FOUND).to_string_lossy().into_owned();
        assert!(s.starts_with("named symbol not found ["), "{s}");
        assert!(s.contains("cuModuleGetFunction"), "{s}");
        // Another code gets the plain description, and the same text is interned once.
        assert_eq!(explain(HipError::OUT_OF_MEMORY), c"out of memory");
        assert_eq!(
            explain(HipError::NOT_FOUND).as_ptr(),
            explain(HipError::NOT_FOUND).as_ptr()
        );
    }
}
