//! The CUDA runtime loaded at run time, for the benchmark's device buffers and streams.

use libloading::Library;
use std::ffi::{c_int, c_void};

/// `cudaStream_t`.
pub type Stream = *mut c_void;

/// The few runtime entry points the benchmark needs.
pub struct Cudart {
    _lib: Library,
    set_device: unsafe extern "C" fn(c_int) -> c_int,
    get_device_count: unsafe extern "C" fn(*mut c_int) -> c_int,
    malloc: unsafe extern "C" fn(*mut *mut c_void, usize) -> c_int,
    free: unsafe extern "C" fn(*mut c_void) -> c_int,
    memcpy: unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int) -> c_int,
    stream_create: unsafe extern "C" fn(*mut Stream) -> c_int,
    stream_synchronize: unsafe extern "C" fn(Stream) -> c_int,
}

/// `cudaMemcpyDefault`: direction inferred from unified addresses.
const MEMCPY_DEFAULT: c_int = 4;

macro_rules! sym {
    ($lib:expr, $name:literal) => {{
        // SAFETY: the type is the CUDA runtime's documented signature for this name.
        let s = unsafe { $lib.get(concat!($name, "\0").as_bytes()) }
            .map_err(|e| format!("{}: {e}", $name))?;
        *s
    }};
}

impl Cudart {
    /// Loads the first CUDA runtime found (`CUDART` overrides the search).
    pub fn load() -> Result<Cudart, String> {
        let mut names: Vec<String> = std::env::var("CUDART").ok().into_iter().collect();
        names.extend(
            [
                "libcudart.so.13",
                "libcudart.so.12",
                "libcudart.so",
                "/usr/local/cuda/lib64/libcudart.so.13",
                "/usr/local/cuda/lib64/libcudart.so",
            ]
            .map(String::from),
        );
        let lib = names
            .iter()
            // SAFETY: loading the CUDA runtime runs only its initialisers.
            .find_map(|n| unsafe { Library::new(n) }.ok())
            .ok_or_else(|| format!("no CUDA runtime found (tried {names:?}; set CUDART)"))?;
        Ok(Cudart {
            set_device: sym!(lib, "cudaSetDevice"),
            get_device_count: sym!(lib, "cudaGetDeviceCount"),
            malloc: sym!(lib, "cudaMalloc"),
            free: sym!(lib, "cudaFree"),
            memcpy: sym!(lib, "cudaMemcpy"),
            stream_create: sym!(lib, "cudaStreamCreate"),
            stream_synchronize: sym!(lib, "cudaStreamSynchronize"),
            _lib: lib,
        })
    }

    fn check(what: &str, r: c_int) -> Result<(), String> {
        if r == 0 {
            Ok(())
        } else {
            Err(format!("{what} failed with CUDA error {r}"))
        }
    }

    /// Number of visible GPUs (0 when none or no driver).
    pub fn device_count(&self) -> usize {
        let mut n = 0;
        // SAFETY: `n` is a valid out-pointer.
        let r = unsafe { (self.get_device_count)(&mut n) };
        if r == 0 { n.max(0) as usize } else { 0 }
    }

    /// Makes `dev` current for this thread.
    pub fn set_device(&self, dev: usize) -> Result<(), String> {
        // SAFETY: plain value argument.
        Self::check("cudaSetDevice", unsafe { (self.set_device)(dev as c_int) })
    }

    /// `cudaMalloc` on the current device.
    pub fn alloc(&self, bytes: usize) -> Result<*mut u8, String> {
        let mut p = std::ptr::null_mut();
        // SAFETY: `p` is a valid out-pointer.
        Self::check("cudaMalloc", unsafe { (self.malloc)(&mut p, bytes.max(1)) })?;
        Ok(p as *mut u8)
    }

    /// `cudaFree`.
    ///
    /// # Safety
    /// `p` came from [`Cudart::alloc`] and is no longer used.
    pub unsafe fn free(&self, p: *mut u8) {
        // SAFETY: forwarded from the caller.
        unsafe { (self.free)(p as *mut c_void) };
    }

    /// Synchronous copy in any direction.
    ///
    /// # Safety
    /// Both ranges are valid for `bytes` bytes.
    pub unsafe fn copy(&self, dst: *mut u8, src: *const u8, bytes: usize) -> Result<(), String> {
        // SAFETY: forwarded from the caller.
        Self::check("cudaMemcpy", unsafe {
            (self.memcpy)(
                dst as *mut c_void,
                src as *const c_void,
                bytes,
                MEMCPY_DEFAULT,
            )
        })
    }

    /// A new stream on the current device.
    pub fn stream(&self) -> Result<Stream, String> {
        let mut s = std::ptr::null_mut();
        // SAFETY: `s` is a valid out-pointer.
        Self::check("cudaStreamCreate", unsafe { (self.stream_create)(&mut s) })?;
        Ok(s)
    }

    /// Waits for `s`.
    ///
    /// # Safety
    /// `s` came from [`Cudart::stream`] on the current device.
    pub unsafe fn sync(&self, s: Stream) -> Result<(), String> {
        // SAFETY: forwarded from the caller.
        Self::check("cudaStreamSynchronize", unsafe {
            (self.stream_synchronize)(s)
        })
    }
}
