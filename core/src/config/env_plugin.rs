//! NCCL environment plugins (`NCCL_ENV_PLUGIN`, ABI v1 of NCCL 2.28.7 and v2): a library that
//! answers for the environment. When one loads, every variable of the registry is read through
//! its `getEnv` (which may hand it on to the real environment, as NVIDIA's example does).
//!
//! Found as NCCL finds it: unset means `libnccl-env.so`, `none` no plugin; a value is
//! `dlopen`ed as given and, when that fails and it is a bare name, as `libnccl-env-<value>.so`.
//! The plugin is loaded on the first read of the registry and stays for the process; its
//! `finalize` is not called (NCCL calls it at exit, when nothing reads the environment any more).

use libloading::os::unix::Library;
use std::ffi::{CStr, CString, OsString, c_char, c_int, c_void};
use std::os::unix::ffi::OsStrExt;
use std::sync::OnceLock;

type Logger = crate::plugin_abi::Logger;

/// `ncclEnv_v1_t`.
#[repr(C)]
struct EnvV1 {
    name: *const c_char,
    init: Option<unsafe extern "C" fn(u8, u8, u8, *const c_char) -> c_int>,
    finalize: Option<unsafe extern "C" fn() -> c_int>,
    get_env: Option<unsafe extern "C" fn(*const c_char) -> *const c_char>,
}

/// `ncclEnv_v2_t`: v1 with the logger passed to `init`.
#[repr(C)]
struct EnvV2 {
    name: *const c_char,
    init: Option<unsafe extern "C" fn(u8, u8, u8, *const c_char, Logger) -> c_int>,
    finalize: Option<unsafe extern "C" fn() -> c_int>,
    get_env: Option<unsafe extern "C" fn(*const c_char) -> *const c_char>,
}

/// A loaded environment plugin: its name and `getEnv`.
struct EnvPlugin {
    name: String,
    get_env: unsafe extern "C" fn(*const c_char) -> *const c_char,
    _lib: Library,
}

// SAFETY: `get_env` points into the library, which stays mapped while `_lib` lives; NCCL calls
// it from any thread too, so the plugin must allow that.
unsafe impl Send for EnvPlugin {}
// SAFETY: as for Send.
unsafe impl Sync for EnvPlugin {}

/// The NCCL version an environment plugin is told oxccl implements.
const VERSION: (u8, u8, u8) = (2, 28, 9);

fn load() -> Option<EnvPlugin> {
    // Read directly: the registry reads through this plugin, so it cannot be asked for it.
    let value = std::env::var("NCCL_ENV_PLUGIN").ok();
    let candidates = crate::plugin_lib::candidates("env", value.as_deref(), None)?;
    let (lib, path) = crate::plugin_lib::open_first(&candidates[0])?;
    let suffix = CString::default();
    let sym = |name: &[u8]| {
        // SAFETY: only the symbol's address is taken.
        unsafe { lib.get::<*mut c_void>(name) }
            .ok()
            .map(|s| s.into_raw())
            .filter(|p| !p.is_null())
    };
    let (name, rc, get_env) = if let Some(p) = sym(b"ncclEnvPlugin_v2\0") {
        // SAFETY: the library exports this symbol as `ncclEnv_v2_t` (the ABI's contract).
        let t = unsafe { &*(p as *const EnvV2) };
        // SAFETY: the version numbers, a valid C string and the logger, for the call.
        let rc = t.init.map(|f| unsafe {
            f(
                VERSION.0,
                VERSION.1,
                VERSION.2,
                suffix.as_ptr(),
                crate::plugin_abi::logger(),
            )
        });
        (t.name, rc, t.get_env)
    } else if let Some(p) = sym(b"ncclEnvPlugin_v1\0") {
        // SAFETY: as above, for `ncclEnv_v1_t`.
        let t = unsafe { &*(p as *const EnvV1) };
        // SAFETY: the version numbers and a valid C string, for the call.
        let rc = t
            .init
            .map(|f| unsafe { f(VERSION.0, VERSION.1, VERSION.2, suffix.as_ptr()) });
        (t.name, rc, t.get_env)
    } else {
        tracing::warn!(target: "oxccl::env", "{path} exports no ncclEnvPlugin_v2 or _v1: not used");
        return None;
    };
    // SAFETY: the plugin's name is NULL or a C string in its library, which stays loaded.
    let name = unsafe { crate::plugin_lib::name_or_path(name, &path) };
    match (rc, get_env) {
        (Some(0), Some(get_env)) => {
            tracing::info!(target: "oxccl::env", "ENV/Plugin: Using {name} from {path}");
            Some(EnvPlugin {
                name,
                get_env,
                _lib: lib,
            })
        }
        (rc, _) => {
            tracing::warn!(target: "oxccl::env", "ENV/Plugin {name}: init returned {rc:?} or no getEnv: not used");
            None
        }
    }
}

fn plugin() -> Option<&'static EnvPlugin> {
    static PLUGIN: OnceLock<Option<EnvPlugin>> = OnceLock::new();
    PLUGIN.get_or_init(load).as_ref()
}

/// The loaded environment plugin's name (`None`: the process environment answers).
pub fn name() -> Option<&'static str> {
    plugin().map(|p| p.name.as_str())
}

/// The value of `name` as the environment plugin gives it; `None` when it has none for it.
/// `Err` when no plugin is loaded (then the process environment answers).
pub(super) fn get(name: &str) -> Result<Option<OsString>, ()> {
    let plugin = plugin().ok_or(())?;
    let Ok(c_name) = CString::new(name) else {
        return Ok(None);
    };
    // SAFETY: a valid C string for the call; the answer is NULL or a C string the plugin keeps
    // valid until the next call for this name, and it is copied at once.
    let value = unsafe { (plugin.get_env)(c_name.as_ptr()) };
    if value.is_null() {
        return Ok(None);
    }
    // SAFETY: as above.
    let text = unsafe { CStr::from_ptr(value) };
    Ok(Some(
        std::ffi::OsStr::from_bytes(text.to_bytes()).to_os_string(),
    ))
}
