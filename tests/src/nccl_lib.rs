//! Any NCCL-ABI library (ours or NVIDIA's) loaded at run time, for the benchmark.

use libloading::Library;
use std::ffi::{CStr, c_char, c_int, c_void};

/// `ncclUniqueId`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RawUniqueId(pub [u8; 128]);

/// `ncclComm_t`.
pub type RawComm = *mut c_void;

/// `ncclWindow_t`.
pub type RawWindow = *mut c_void;

/// `NCCL_WIN_COLL_SYMMETRIC`: every rank uses the same offsets into the window.
pub const NCCL_WIN_COLL_SYMMETRIC: c_int = 1;

type InitRank = unsafe extern "C" fn(*mut RawComm, c_int, RawUniqueId, c_int) -> c_int;
type Coll7 = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    RawComm,
    *mut c_void,
) -> c_int;
type Coll6 =
    unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, RawComm, *mut c_void) -> c_int;
type Coll8 = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    c_int,
    RawComm,
    *mut c_void,
) -> c_int;
type P2p = unsafe extern "C" fn(*const c_void, usize, c_int, c_int, RawComm, *mut c_void) -> c_int;
type CommRegister = unsafe extern "C" fn(RawComm, *mut c_void, usize, *mut *mut c_void) -> c_int;
type WindowRegister =
    unsafe extern "C" fn(RawComm, *mut c_void, usize, *mut RawWindow, c_int) -> c_int;

/// The entry points the benchmark calls, resolved once.
pub struct NcclLib {
    _lib: Library,
    /// `ncclGetVersion`.
    pub get_version: unsafe extern "C" fn(*mut c_int) -> c_int,
    /// `ncclGetUniqueId`.
    pub get_unique_id: unsafe extern "C" fn(*mut RawUniqueId) -> c_int,
    /// `ncclCommInitRank`.
    pub comm_init_rank: InitRank,
    /// `ncclCommInitAll`.
    pub comm_init_all: unsafe extern "C" fn(*mut RawComm, c_int, *const c_int) -> c_int,
    /// `ncclCommDestroy`.
    pub comm_destroy: unsafe extern "C" fn(RawComm) -> c_int,
    /// `ncclCommCount`.
    pub comm_count: unsafe extern "C" fn(RawComm, *mut c_int) -> c_int,
    /// `ncclCommUserRank`.
    pub comm_user_rank: unsafe extern "C" fn(RawComm, *mut c_int) -> c_int,
    /// `ncclGetErrorString`.
    pub get_error_string: unsafe extern "C" fn(c_int) -> *const c_char,
    /// `ncclGroupStart`.
    pub group_start: unsafe extern "C" fn() -> c_int,
    /// `ncclGroupEnd`.
    pub group_end: unsafe extern "C" fn() -> c_int,
    /// `ncclAllReduce`.
    pub all_reduce: Coll7,
    /// `ncclBroadcast` (root in the op slot).
    pub broadcast: Coll7,
    /// `ncclReduce`.
    pub reduce: Coll8,
    /// `ncclAllGather`.
    pub all_gather: Coll6,
    /// `ncclReduceScatter`.
    pub reduce_scatter: Coll7,
    /// `ncclAlltoAll` (absent before NCCL 2.28).
    pub all_to_all: Option<Coll6>,
    /// `ncclGather`.
    pub gather: Option<Coll7>,
    /// `ncclScatter`.
    pub scatter: Option<Coll7>,
    /// `ncclSend`.
    pub send: P2p,
    /// `ncclRecv`.
    pub recv: P2p,
    /// `ncclGetLastError` (NCCL 2.13 and later).
    pub get_last_error: Option<unsafe extern "C" fn(RawComm) -> *const c_char>,
    /// `ncclMemAlloc` (NCCL 2.19 and later).
    pub mem_alloc: Option<unsafe extern "C" fn(*mut *mut c_void, usize) -> c_int>,
    /// `ncclMemFree`.
    pub mem_free: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
    /// `ncclCommRegister` (NCCL 2.19 and later).
    pub comm_register: Option<CommRegister>,
    /// `ncclCommDeregister`.
    pub comm_deregister: Option<unsafe extern "C" fn(RawComm, *mut c_void) -> c_int>,
    /// `ncclCommWindowRegister` (NCCL 2.27 and later).
    pub comm_window_register: Option<WindowRegister>,
    /// `ncclCommWindowDeregister`.
    pub comm_window_deregister: Option<unsafe extern "C" fn(RawComm, RawWindow) -> c_int>,
}

macro_rules! sym {
    ($lib:expr, $name:literal) => {{
        // SAFETY: the symbol's type is NCCL's documented signature for this name.
        let s = unsafe { $lib.get(concat!($name, "\0").as_bytes()) }
            .map_err(|e| format!("{}: {e}", $name))?;
        *s
    }};
}

macro_rules! opt_sym {
    ($lib:expr, $name:literal) => {{
        // SAFETY: as in `sym!`.
        unsafe { $lib.get(concat!($name, "\0").as_bytes()) }
            .ok()
            .map(|s| *s)
    }};
}

impl NcclLib {
    /// Loads the library at `path`.
    pub fn load(path: &str) -> Result<NcclLib, String> {
        // SAFETY: loading an NCCL library runs only its (trusted) initialisers.
        let lib = unsafe { Library::new(path) }.map_err(|e| format!("cannot load {path}: {e}"))?;
        Ok(NcclLib {
            get_version: sym!(lib, "ncclGetVersion"),
            get_unique_id: sym!(lib, "ncclGetUniqueId"),
            comm_init_rank: sym!(lib, "ncclCommInitRank"),
            comm_init_all: sym!(lib, "ncclCommInitAll"),
            comm_destroy: sym!(lib, "ncclCommDestroy"),
            comm_count: sym!(lib, "ncclCommCount"),
            comm_user_rank: sym!(lib, "ncclCommUserRank"),
            get_error_string: sym!(lib, "ncclGetErrorString"),
            group_start: sym!(lib, "ncclGroupStart"),
            group_end: sym!(lib, "ncclGroupEnd"),
            all_reduce: sym!(lib, "ncclAllReduce"),
            broadcast: sym!(lib, "ncclBroadcast"),
            reduce: sym!(lib, "ncclReduce"),
            all_gather: sym!(lib, "ncclAllGather"),
            reduce_scatter: sym!(lib, "ncclReduceScatter"),
            all_to_all: opt_sym!(lib, "ncclAlltoAll"),
            gather: opt_sym!(lib, "ncclGather"),
            scatter: opt_sym!(lib, "ncclScatter"),
            send: sym!(lib, "ncclSend"),
            recv: sym!(lib, "ncclRecv"),
            get_last_error: opt_sym!(lib, "ncclGetLastError"),
            mem_alloc: opt_sym!(lib, "ncclMemAlloc"),
            mem_free: opt_sym!(lib, "ncclMemFree"),
            comm_register: opt_sym!(lib, "ncclCommRegister"),
            comm_deregister: opt_sym!(lib, "ncclCommDeregister"),
            comm_window_register: opt_sym!(lib, "ncclCommWindowRegister"),
            comm_window_deregister: opt_sym!(lib, "ncclCommWindowDeregister"),
            _lib: lib,
        })
    }

    /// `ncclGetVersion`.
    pub fn version(&self) -> i32 {
        let mut v = 0;
        // SAFETY: `v` is a valid out-pointer.
        unsafe { (self.get_version)(&mut v) };
        v
    }

    /// Turns a result code into `Err` with NCCL's own text.
    pub fn check(&self, what: &str, r: c_int) -> Result<(), String> {
        if r == 0 {
            return Ok(());
        }
        // SAFETY: ncclGetErrorString returns a static NUL-terminated string.
        let text = unsafe { CStr::from_ptr((self.get_error_string)(r)) };
        let mut msg = format!("{what}: {} ({r})", text.to_string_lossy());
        if let Some(last) = self.get_last_error {
            // SAFETY: ncclGetLastError(NULL) returns NULL or a NUL-terminated string owned by
            // the library, valid until the next NCCL call on this thread.
            let p = unsafe { last(std::ptr::null_mut()) };
            if !p.is_null() {
                // SAFETY: checked non-NULL above; NUL-terminated per the API.
                let detail = unsafe { CStr::from_ptr(p) }.to_string_lossy();
                if !detail.trim().is_empty() {
                    msg.push_str(&format!(": {}", detail.trim()));
                }
            }
        }
        Err(msg)
    }
}
