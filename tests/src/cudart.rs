//! The CUDA runtime loaded at run time, for the benchmark's device buffers, streams and graphs.

use libloading::Library;
use std::ffi::{CStr, c_char, c_int, c_uint, c_ulonglong, c_void};

/// `cudaStream_t`.
pub type Stream = *mut c_void;
/// `cudaGraph_t`.
pub type Graph = *mut c_void;
/// `cudaGraphExec_t`.
pub type GraphExec = *mut c_void;

/// `cudaStreamCaptureModeGlobal`.
pub const CAPTURE_MODE_GLOBAL: c_int = 0;
/// `cudaStreamCaptureModeThreadLocal`.
pub const CAPTURE_MODE_THREAD_LOCAL: c_int = 1;

/// The CUDA graph entry points (absent from very old runtimes).
struct GraphFns {
    begin_capture: unsafe extern "C" fn(Stream, c_int) -> c_int,
    end_capture: unsafe extern "C" fn(Stream, *mut Graph) -> c_int,
    instantiate: unsafe extern "C" fn(*mut GraphExec, Graph, c_ulonglong) -> c_int,
    launch: unsafe extern "C" fn(GraphExec, Stream) -> c_int,
    exec_destroy: unsafe extern "C" fn(GraphExec) -> c_int,
    destroy: unsafe extern "C" fn(Graph) -> c_int,
}

/// The few runtime entry points the benchmark needs.
pub struct Cudart {
    _lib: Library,
    set_device: unsafe extern "C" fn(c_int) -> c_int,
    get_device_count: unsafe extern "C" fn(*mut c_int) -> c_int,
    malloc: unsafe extern "C" fn(*mut *mut c_void, usize) -> c_int,
    free: unsafe extern "C" fn(*mut c_void) -> c_int,
    memcpy: unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int) -> c_int,
    memset: unsafe extern "C" fn(*mut c_void, c_int, usize) -> c_int,
    device_synchronize: unsafe extern "C" fn() -> c_int,
    stream_create_with_flags: unsafe extern "C" fn(*mut Stream, c_uint) -> c_int,
    stream_destroy: unsafe extern "C" fn(Stream) -> c_int,
    stream_synchronize: unsafe extern "C" fn(Stream) -> c_int,
    get_error_string: Option<unsafe extern "C" fn(c_int) -> *const c_char>,
    mem_get_info: Option<unsafe extern "C" fn(*mut usize, *mut usize) -> c_int>,
    graph: Option<GraphFns>,
}

/// `cudaMemcpyDefault`: direction inferred from unified addresses.
const MEMCPY_DEFAULT: c_int = 4;
/// `cudaStreamNonBlocking`, as nccl-tests creates its streams.
const STREAM_NON_BLOCKING: c_uint = 1;

macro_rules! sym {
    ($lib:expr, $name:literal) => {{
        // SAFETY: the type is the CUDA runtime's documented signature for this name.
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
                "/usr/local/cuda/lib64/libcudart.so.12",
                "/usr/local/cuda/lib64/libcudart.so",
            ]
            .map(String::from),
        );
        let lib = names
            .iter()
            // SAFETY: loading the CUDA runtime runs only its initialisers.
            .find_map(|n| unsafe { Library::new(n) }.ok())
            .ok_or_else(|| format!("no CUDA runtime found (tried {names:?}; set CUDART)"))?;
        let graph = (|| -> Option<GraphFns> {
            Some(GraphFns {
                begin_capture: opt_sym!(lib, "cudaStreamBeginCapture")?,
                end_capture: opt_sym!(lib, "cudaStreamEndCapture")?,
                instantiate: opt_sym!(lib, "cudaGraphInstantiateWithFlags")?,
                launch: opt_sym!(lib, "cudaGraphLaunch")?,
                exec_destroy: opt_sym!(lib, "cudaGraphExecDestroy")?,
                destroy: opt_sym!(lib, "cudaGraphDestroy")?,
            })
        })();
        Ok(Cudart {
            set_device: sym!(lib, "cudaSetDevice"),
            get_device_count: sym!(lib, "cudaGetDeviceCount"),
            malloc: sym!(lib, "cudaMalloc"),
            free: sym!(lib, "cudaFree"),
            memcpy: sym!(lib, "cudaMemcpy"),
            memset: sym!(lib, "cudaMemset"),
            device_synchronize: sym!(lib, "cudaDeviceSynchronize"),
            stream_create_with_flags: sym!(lib, "cudaStreamCreateWithFlags"),
            stream_destroy: sym!(lib, "cudaStreamDestroy"),
            stream_synchronize: sym!(lib, "cudaStreamSynchronize"),
            get_error_string: opt_sym!(lib, "cudaGetErrorString"),
            mem_get_info: opt_sym!(lib, "cudaMemGetInfo"),
            graph,
            _lib: lib,
        })
    }

    fn check(&self, what: &str, r: c_int) -> Result<(), String> {
        if r == 0 {
            return Ok(());
        }
        let text = match self.get_error_string {
            // SAFETY: cudaGetErrorString returns a static NUL-terminated string for any code.
            Some(f) => unsafe { CStr::from_ptr(f(r)) }
                .to_string_lossy()
                .into_owned(),
            None => String::new(),
        };
        Err(format!("{what} failed with CUDA error {r} {text}")
            .trim_end()
            .to_string())
    }

    /// Bytes of device memory in use on the current GPU (total minus free), when the runtime
    /// can tell.
    pub fn mem_used(&self) -> Option<usize> {
        let f = self.mem_get_info?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: both are valid out-pointers.
        let r = unsafe { f(&mut free, &mut total) };
        (r == 0).then(|| total.saturating_sub(free))
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
        self.check("cudaSetDevice", unsafe { (self.set_device)(dev as c_int) })
    }

    /// `cudaMalloc` on the current device.
    pub fn alloc(&self, bytes: usize) -> Result<*mut u8, String> {
        let mut p = std::ptr::null_mut();
        // SAFETY: `p` is a valid out-pointer.
        let r = unsafe { (self.malloc)(&mut p, bytes.max(1)) };
        self.check(&format!("cudaMalloc({bytes} B)"), r)?;
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
        let r = unsafe {
            (self.memcpy)(
                dst as *mut c_void,
                src as *const c_void,
                bytes,
                MEMCPY_DEFAULT,
            )
        };
        self.check("cudaMemcpy", r)
    }

    /// `cudaMemset` (on the legacy stream; follow with [`Cudart::device_synchronize`]).
    ///
    /// # Safety
    /// `dst` is device memory valid for `bytes` bytes.
    pub unsafe fn memset(&self, dst: *mut u8, byte: u8, bytes: usize) -> Result<(), String> {
        // SAFETY: forwarded from the caller.
        let r = unsafe { (self.memset)(dst as *mut c_void, c_int::from(byte), bytes) };
        self.check("cudaMemset", r)
    }

    /// Waits for all work on the current device.
    pub fn device_synchronize(&self) -> Result<(), String> {
        // SAFETY: no arguments.
        self.check("cudaDeviceSynchronize", unsafe {
            (self.device_synchronize)()
        })
    }

    /// A new non-blocking stream on the current device.
    pub fn stream(&self) -> Result<Stream, String> {
        let mut s = std::ptr::null_mut();
        // SAFETY: `s` is a valid out-pointer.
        let r = unsafe { (self.stream_create_with_flags)(&mut s, STREAM_NON_BLOCKING) };
        self.check("cudaStreamCreateWithFlags", r)?;
        Ok(s)
    }

    /// Destroys a stream.
    ///
    /// # Safety
    /// `s` came from [`Cudart::stream`] and no queued work uses it any more.
    pub unsafe fn stream_destroy(&self, s: Stream) {
        // SAFETY: forwarded from the caller.
        unsafe { (self.stream_destroy)(s) };
    }

    /// Waits for `s`.
    ///
    /// # Safety
    /// `s` came from [`Cudart::stream`] on the current device.
    pub unsafe fn sync(&self, s: Stream) -> Result<(), String> {
        // SAFETY: forwarded from the caller.
        self.check("cudaStreamSynchronize", unsafe {
            (self.stream_synchronize)(s)
        })
    }

    fn graph_fns(&self) -> Result<&GraphFns, String> {
        self.graph
            .as_ref()
            .ok_or_else(|| "this CUDA runtime lacks the graph API (CUDA 11.4 or later)".into())
    }

    /// True when the runtime has the graph entry points [`Cudart::begin_capture`] needs.
    pub fn has_graphs(&self) -> bool {
        self.graph.is_some()
    }

    /// `cudaStreamBeginCapture` with `mode` ([`CAPTURE_MODE_GLOBAL`], ...).
    ///
    /// # Safety
    /// `s` is a live stream that is not the legacy default stream.
    pub unsafe fn begin_capture(&self, s: Stream, mode: c_int) -> Result<(), String> {
        let g = self.graph_fns()?;
        // SAFETY: forwarded from the caller.
        self.check("cudaStreamBeginCapture", unsafe {
            (g.begin_capture)(s, mode)
        })
    }

    /// `cudaStreamEndCapture`: the captured graph.
    ///
    /// # Safety
    /// `s` is capturing (begun with [`Cudart::begin_capture`]).
    pub unsafe fn end_capture(&self, s: Stream) -> Result<Graph, String> {
        let g = self.graph_fns()?;
        let mut graph = std::ptr::null_mut();
        // SAFETY: forwarded from the caller; `graph` is a valid out-pointer.
        let r = unsafe { (g.end_capture)(s, &mut graph) };
        self.check("cudaStreamEndCapture", r)?;
        Ok(graph)
    }

    /// `cudaGraphInstantiateWithFlags(.., 0)`.
    ///
    /// # Safety
    /// `graph` came from [`Cudart::end_capture`] and was not destroyed.
    pub unsafe fn instantiate(&self, graph: Graph) -> Result<GraphExec, String> {
        let g = self.graph_fns()?;
        let mut exec = std::ptr::null_mut();
        // SAFETY: forwarded from the caller; `exec` is a valid out-pointer.
        let r = unsafe { (g.instantiate)(&mut exec, graph, 0) };
        self.check("cudaGraphInstantiateWithFlags", r)?;
        Ok(exec)
    }

    /// `cudaGraphLaunch`.
    ///
    /// # Safety
    /// `exec` came from [`Cudart::instantiate`]; `s` is a live stream of the same device.
    pub unsafe fn graph_launch(&self, exec: GraphExec, s: Stream) -> Result<(), String> {
        let g = self.graph_fns()?;
        // SAFETY: forwarded from the caller.
        self.check("cudaGraphLaunch", unsafe { (g.launch)(exec, s) })
    }

    /// `cudaGraphDestroy`.
    ///
    /// # Safety
    /// `graph` came from [`Cudart::end_capture`] and is not used afterwards.
    pub unsafe fn graph_destroy(&self, graph: Graph) {
        if let Some(g) = &self.graph {
            // SAFETY: forwarded from the caller.
            unsafe { (g.destroy)(graph) };
        }
    }

    /// `cudaGraphExecDestroy`.
    ///
    /// # Safety
    /// `exec` came from [`Cudart::instantiate`]; no launch of it is still running.
    pub unsafe fn graph_exec_destroy(&self, exec: GraphExec) {
        if let Some(g) = &self.graph {
            // SAFETY: forwarded from the caller.
            unsafe { (g.exec_destroy)(exec) };
        }
    }
}
