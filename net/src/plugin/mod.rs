//! NCCL network plugins (`libnccl-net.so`, `NCCL_NET_PLUGIN`), loaded at run time and driven
//! through the [`Net`] trait like the built-in sockets, so the proxy serves both unchanged.
//!
//! - [`loader`] finds and opens a library as NCCL 2.28 does and takes its newest
//!   `ncclNetPlugin_v12` .. `v6` symbol (NCCL 2.30's search order).
//! - [`abi`] has the C layouts of every version; `adapter` calls whichever version the library
//!   exports, with NCCL's adapter rules for the older ones.
//! - the logger plugins receive is core's (`oxccl_core::plugin_abi`, shared with the tuner,
//!   profiler and environment plugins); `adapter` adds the v10+ profiler callback.
//! - [`PluginLib`] is one opened library (once per process); [`PluginNet`] one communicator's
//!   use of it: v11 and v12 plugins get an `init` (a context) per communicator, v6-v10 plugins
//!   one `init` per process.
//! - [`select`] chooses the network of a communicator (`NCCL_NET`), falling back to the
//!   built-in sockets when no plugin loads.
//!
//! All `unsafe` code of the plugin path is here, at the C boundary.

pub mod abi;
pub(crate) mod adapter;
pub mod gin;
pub mod gin_abi;
pub(crate) mod gin_adapter;
#[cfg(test)]
mod gin_tests;
pub mod loader;
pub mod select;
#[cfg(test)]
mod tests;

use super::{CommRef, Handle, Listen, MemHandle, Net, Properties, RecvComm, Request, SendComm};
use adapter::{RecvArgs, VTable};
use loader::{OpenError, Opened};
use oxccl_core::error::{Error, Result};
use oxccl_core::lock::lock;
use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// One opened plugin library, shared by every communicator of the process.
pub struct PluginLib {
    opened: Arc<Opened>,
    /// Serializes `init` and the struct copies that follow it; holds the result of the
    /// process-wide `init` of v6-v10 plugins once it ran.
    init: Mutex<Option<std::result::Result<(), Error>>>,
}

impl std::fmt::Debug for PluginLib {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PluginLib({} v{})",
            self.opened.path, self.opened.version
        )
    }
}

impl PluginLib {
    /// Opens one `NCCL_NET_PLUGIN` entry (a name or a path; see [`loader`]). A library opened
    /// before (by any entry naming the same file) is the same `PluginLib`, so a v6-v10 plugin
    /// is initialized once per process. Logs "NET/Plugin: Loaded net plugin `name` (vN)".
    pub fn load(entry: &str) -> std::result::Result<Arc<PluginLib>, OpenError> {
        static LIBS: Mutex<Option<HashMap<usize, Arc<PluginLib>>>> = Mutex::new(None);
        let opened = loader::open(entry)?;
        let mut libs = lock(&LIBS);
        let libs = libs.get_or_insert_with(HashMap::new);
        if let Some(lib) = libs.get(&(opened.sym as usize)) {
            return Ok(lib.clone());
        }
        let lib = Arc::new(PluginLib {
            opened: Arc::new(opened),
            init: Mutex::new(None),
        });
        tracing::info!(target: "oxccl::init",
            "NET/Plugin: Loaded net plugin {} (v{}) from {}",
            lib.name(), lib.version(), lib.opened.path);
        libs.insert(lib.opened.sym as usize, lib.clone());
        Ok(lib)
    }

    /// The ABI version taken (6 to 12).
    pub fn version(&self) -> u32 {
        self.opened.version
    }

    /// The ABI version of the library's newest `ncclGinPlugin_vN` (11 to 13), if it has one.
    pub fn gin_version(&self) -> Option<u32> {
        self.opened.gin.map(|(_, v)| v)
    }

    /// The file that was opened.
    pub fn path(&self) -> &str {
        &self.opened.path
    }

    /// The struct's `name` as it reads now (before `init`, as NCCL compares it with `NCCL_NET`).
    pub fn name(&self) -> String {
        let _g = lock(&self.init);
        // SAFETY: every version's struct starts with `const char* name`, at the exported
        // symbol's address, inside the library that `opened` keeps mapped; reads are serialized
        // with `init`, the only time a plugin may rewrite its struct.
        unsafe { adapter::c_text(self.opened.sym.cast::<*const c_char>().read_unaligned()) }
    }
}

/// One communicator's network over a plugin (a v11 or v12 context, or the process-wide v6-v10
/// state).
pub struct PluginNet {
    lib: Arc<PluginLib>,
    vt: VTable,
    name: String,
    ctx: *mut c_void,
    /// The connection config v10's `connect` and the `init` of v11+ receive (default traffic
    /// class); boxed so its address stays valid while the plugin may hold it.
    config: Box<abi::CommConfig>,
    devices: Vec<Properties>,
    /// Each device's `forceFlush`.
    force_flush: Vec<bool>,
}

// SAFETY: `ctx` is an opaque context the plugin gave this communicator; plugins are called from
// several threads (NCCL's service and progress threads do the same); `config` is never written.
unsafe impl Send for PluginNet {}
// SAFETY: as for Send: `&self` methods only pass the pointers back to the plugin.
unsafe impl Sync for PluginNet {}

/// A plugin comm (listen, send or receive), with its in-flight request count.
struct Comm {
    ptr: *mut c_void,
    inflight: Arc<AtomicUsize>,
    max_bytes: u64,
}

// SAFETY: an opaque plugin pointer, used by one thread at a time (the proxy, or the setup).
unsafe impl Send for Comm {}

/// A plugin registration.
struct Mr(*mut c_void);
// SAFETY: an opaque plugin pointer.
unsafe impl Send for Mr {}

/// A plugin request; a receive keeps its argument arrays alive until it completes.
struct Req {
    ptr: *mut c_void,
    inflight: Arc<AtomicUsize>,
    _recv: Option<Box<RecvArgs>>,
    /// A flush request (tested with NULL sizes).
    flush: bool,
    done: bool,
}
// SAFETY: an opaque plugin pointer and memory owned by the request.
unsafe impl Send for Req {}

impl Drop for Req {
    fn drop(&mut self) {
        if !self.done {
            self.inflight.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

fn comm_of<'a, T: 'static>(b: &'a (dyn std::any::Any + Send), what: &str) -> Result<&'a T> {
    b.downcast_ref::<T>()
        .ok_or_else(|| Error::Internal(format!("a {what} of another network reached a plugin")))
}

impl PluginNet {
    /// Initializes `lib` for one communicator (`comm_id` goes to a v11+ `init`) and checks that
    /// oxccl can drive it: at least one device, device 0 proxy-driven (HOST) and reading host
    /// memory, `maxRecvs` >= 1.
    pub fn new(lib: Arc<PluginLib>, comm_id: u64) -> Result<PluginNet> {
        let config = Box::new(abi::CommConfig {
            traffic_class: abi::TRAFFIC_CLASS_UNDEF,
        });
        let (vt, ctx) = {
            let mut state = lock(&lib.init);
            let sym = lib.opened.sym;
            // SAFETY: `sym` is the exported struct of `version`, kept mapped by `lib`.
            let before = unsafe { VTable::read(sym, lib.version()) };
            let ctx = if lib.version() >= 11 {
                let cfg = (&*config as *const abi::CommConfig).cast_mut();
                // SAFETY: `config` lives in the PluginNet, which finalizes `ctx` before it drops.
                unsafe { before.init_comm(comm_id, cfg) }?
            } else {
                match &*state {
                    Some(r) => r.clone()?,
                    None => {
                        // SAFETY: the first init of this library in the process (under `init`).
                        let r = unsafe { before.init_process() };
                        *state = Some(r.clone());
                        r?
                    }
                }
                null_mut()
            };
            // Copy the members only after init: some plugins fill their struct in init.
            // SAFETY: as above.
            (unsafe { VTable::read(sym, lib.version()) }, ctx)
        };
        let mut net = PluginNet {
            name: vt.name(),
            lib,
            vt,
            ctx,
            config,
            devices: Vec::new(),
            force_flush: Vec::new(),
        };
        // SAFETY: initialized above.
        let ndev = unsafe { net.vt.devices() }?;
        if ndev == 0 {
            return Err(Error::InvalidUsage(format!(
                "network plugin {}: no devices",
                net.name
            )));
        }
        for dev in 0..ndev {
            // SAFETY: initialized above; `dev` < devices.
            let p = unsafe { net.vt.properties(dev) }?;
            if dev == 0 {
                if p.device_type != abi::DEVICE_HOST {
                    return Err(Error::InvalidUsage(format!(
                        "network plugin {}: device 0 has netDeviceType {} (version {}); oxccl drives only HOST devices (no GPU-side unpack)",
                        net.name, p.device_type, p.device_version
                    )));
                }
                if p.props.ptr_support & super::PTR_HOST == 0 {
                    return Err(Error::InvalidUsage(format!(
                        "network plugin {}: device 0 cannot use host memory (ptrSupport {:#x}); oxccl needs it (FIFOs stay in host memory without GPUDirect RDMA)",
                        net.name, p.props.ptr_support
                    )));
                }
                if p.props.max_recvs < 1 {
                    return Err(Error::InvalidUsage(format!(
                        "network plugin {}: maxRecvs {} < 1",
                        net.name, p.props.max_recvs
                    )));
                }
            }
            net.devices.push(p.props);
            net.force_flush.push(p.force_flush);
        }
        Ok(net)
    }

    /// The ABI version in use.
    pub fn version(&self) -> u32 {
        self.vt.version()
    }

    /// The library.
    pub fn lib(&self) -> &Arc<PluginLib> {
        &self.lib
    }

    fn device(&self, dev: usize) -> Result<&Properties> {
        self.devices.get(dev).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "network plugin {}: device {dev} of {}",
                self.name,
                self.devices.len()
            ))
        })
    }

    fn new_comm(&self, ptr: *mut c_void, dev: usize) -> Result<Comm> {
        Ok(Comm {
            ptr,
            inflight: Arc::new(AtomicUsize::new(0)),
            max_bytes: self.device(dev)?.max_p2p_bytes,
        })
    }

    /// Takes a request slot of `comm` (false: `NCCL_NET_MAX_REQUESTS` are in flight).
    fn take_slot(&self, comm: &Comm) -> bool {
        let max = self.vt.max_requests();
        comm.inflight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
    }

    fn request(
        &self,
        comm: &Comm,
        ptr: *mut c_void,
        recv: Option<Box<RecvArgs>>,
        flush: bool,
    ) -> Option<Request> {
        if ptr.is_null() {
            comm.inflight.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Request(Box::new(Req {
            ptr,
            inflight: comm.inflight.clone(),
            _recv: recv,
            flush,
            done: false,
        })))
    }

    fn comm_ref<'a>(comm: &'a CommRef<'_>) -> Result<&'a Comm> {
        match comm {
            CommRef::Send(s) => comm_of::<Comm>(&*s.0, "send comm"),
            CommRef::Recv(r) => comm_of::<Comm>(&*r.0, "receive comm"),
        }
    }

    fn check_size(&self, comm: &Comm, size: usize, what: &str) -> Result<()> {
        if size as u64 > comm.max_bytes {
            return Err(Error::InvalidArgument(format!(
                "network plugin {}: {what} of {size} bytes exceeds maxP2pBytes {}",
                self.name, comm.max_bytes
            )));
        }
        Ok(())
    }
}

impl Drop for PluginNet {
    fn drop(&mut self) {
        // SAFETY: `ctx` came from this PluginNet's init; the proxy closed every comm before
        // dropping its last reference to the network.
        if let Err(e) = unsafe { self.vt.finalize(self.ctx) } {
            tracing::warn!(target: "oxccl::net", "network plugin {}: {e}", self.name);
        }
    }
}

impl Net for PluginNet {
    fn name(&self) -> &str {
        &self.name
    }

    fn devices(&self) -> Result<usize> {
        Ok(self.devices.len())
    }

    fn plugin_lib(&self) -> Option<&Arc<PluginLib>> {
        Some(&self.lib)
    }

    fn properties(&self, dev: usize) -> Result<Properties> {
        self.device(dev).cloned()
    }

    fn listen(&self, dev: usize, handle: &mut Handle) -> Result<Listen> {
        self.device(dev)?;
        // SAFETY: `ctx` is ours; `handle` is 128 writable bytes.
        let lc = unsafe { self.vt.listen(self.ctx, dev, handle.as_mut_ptr().cast()) }?;
        Ok(Listen(Box::new(self.new_comm(lc, dev)?)))
    }

    fn connect(&self, dev: usize, handle: &mut Handle) -> Result<Option<SendComm>> {
        self.device(dev)?;
        let cfg = (&*self.config as *const abi::CommConfig).cast_mut();
        // SAFETY: `ctx` and `config` are ours; the caller passes the same handle on every retry.
        let sc = unsafe {
            self.vt
                .connect(self.ctx, cfg, dev, handle.as_mut_ptr().cast())
        }?;
        if sc.is_null() {
            return Ok(None);
        }
        Ok(Some(SendComm(Box::new(self.new_comm(sc, dev)?))))
    }

    fn accept(&self, listen: &mut Listen) -> Result<Option<RecvComm>> {
        let l = comm_of::<Comm>(&*listen.0, "listener")?;
        // SAFETY: a live listen comm of this plugin.
        let rc = unsafe { self.vt.accept(l.ptr) }?;
        if rc.is_null() {
            return Ok(None);
        }
        Ok(Some(RecvComm(Box::new(Comm {
            ptr: rc,
            inflight: Arc::new(AtomicUsize::new(0)),
            max_bytes: l.max_bytes,
        }))))
    }

    fn reg_mr(
        &self,
        comm: CommRef<'_>,
        data: *mut u8,
        size: usize,
        ptr_type: u32,
    ) -> Result<MemHandle> {
        let c = Self::comm_ref(&comm)?;
        // SAFETY: a live comm; the caller keeps the memory until `dereg_mr`.
        let mh = unsafe { self.vt.reg_mr(c.ptr, data.cast(), size, ptr_type) }?;
        Ok(MemHandle(Box::new(Mr(mh))))
    }

    fn reg_mr_dma_buf(
        &self,
        comm: CommRef<'_>,
        data: *mut u8,
        size: usize,
        ptr_type: u32,
        offset: u64,
        fd: BorrowedFd<'_>,
    ) -> Result<MemHandle> {
        let c = Self::comm_ref(&comm)?;
        // SAFETY: a live comm; the caller keeps the memory until `dereg_mr`; the plugin takes
        // its own reference to the dma-buf during the call if it needs one.
        let mh = unsafe {
            self.vt
                .reg_mr_dma_buf(c.ptr, data.cast(), size, ptr_type, offset, fd.as_raw_fd())
        }?;
        Ok(MemHandle(Box::new(Mr(mh))))
    }

    fn force_flush(&self, dev: usize) -> Result<bool> {
        self.device(dev)?;
        Ok(self.force_flush[dev])
    }

    fn dereg_mr(&self, comm: CommRef<'_>, mh: MemHandle) -> Result<()> {
        let c = Self::comm_ref(&comm)?;
        let m = comm_of::<Mr>(&*mh.0, "registration")?;
        // SAFETY: `m` was registered on `c`, which is still open.
        unsafe { self.vt.dereg_mr(c.ptr, m.0) }
    }

    unsafe fn isend(
        &self,
        comm: &mut SendComm,
        data: *const u8,
        size: usize,
        tag: i32,
        mh: &MemHandle,
    ) -> Result<Option<Request>> {
        // SAFETY: forwarded from the caller; no profiler handle.
        unsafe { self.isend_profiled(comm, data, size, tag, mh, null_mut()) }
    }

    unsafe fn isend_profiled(
        &self,
        comm: &mut SendComm,
        data: *const u8,
        size: usize,
        tag: i32,
        mh: &MemHandle,
        phandle: *mut c_void,
    ) -> Result<Option<Request>> {
        let c = comm_of::<Comm>(&*comm.0, "send comm")?;
        let m = comm_of::<Mr>(&*mh.0, "registration")?;
        self.check_size(c, size, "a send")?;
        if !self.take_slot(c) {
            return Ok(None);
        }
        // SAFETY: the caller keeps `data` readable and registered as `mh` until the request is
        // done; the plugin does not write through a send buffer.
        let req = unsafe {
            self.vt
                .isend(c.ptr, data.cast_mut().cast(), size, tag, m.0, phandle)
        };
        match req {
            Ok(r) => Ok(self.request(c, r, None, false)),
            Err(e) => {
                c.inflight.fetch_sub(1, Ordering::AcqRel);
                Err(e)
            }
        }
    }

    unsafe fn irecv(
        &self,
        comm: &mut RecvComm,
        data: *mut u8,
        size: usize,
        tag: i32,
        mh: &MemHandle,
    ) -> Result<Option<Request>> {
        // SAFETY: forwarded from the caller; no profiler handle.
        unsafe { self.irecv_profiled(comm, data, size, tag, mh, null_mut()) }
    }

    unsafe fn irecv_profiled(
        &self,
        comm: &mut RecvComm,
        data: *mut u8,
        size: usize,
        tag: i32,
        mh: &MemHandle,
        phandle: *mut c_void,
    ) -> Result<Option<Request>> {
        let c = comm_of::<Comm>(&*comm.0, "receive comm")?;
        let m = comm_of::<Mr>(&*mh.0, "registration")?;
        self.check_size(c, size, "a receive")?;
        if !self.take_slot(c) {
            return Ok(None);
        }
        // One buffer per receive: within every plugin's maxRecvs (checked >= 1 at init).
        let mut args = Box::new(RecvArgs {
            data: [data.cast()],
            sizes_int: [0],
            sizes: [size],
            tags: [tag],
            mhandles: [m.0],
            phandles: [phandle],
        });
        // SAFETY: the caller keeps `data` writable and registered until the request is done;
        // `args` moves into the request, at a stable heap address, until then.
        let req = unsafe { self.vt.irecv(c.ptr, &mut *args, false) };
        match req {
            Ok(r) => Ok(self.request(c, r, Some(args), false)),
            Err(e) => {
                c.inflight.fetch_sub(1, Ordering::AcqRel);
                Err(e)
            }
        }
    }

    unsafe fn iflush(
        &self,
        comm: &mut RecvComm,
        data: *mut u8,
        size: usize,
        mh: &MemHandle,
    ) -> Result<Option<Request>> {
        let c = comm_of::<Comm>(&*comm.0, "receive comm")?;
        let m = comm_of::<Mr>(&*mh.0, "registration")?;
        // A flush takes the request slot of the receive it follows, which completed just before
        // (the proxy keeps one request per slot it owns), so it never waits for a free one.
        c.inflight.fetch_add(1, Ordering::AcqRel);
        // SAFETY: as the caller promised: `data` lies in the registration `m` of this comm.
        let req = unsafe { self.vt.iflush(c.ptr, data.cast(), size, m.0) };
        match req {
            Ok(r) => Ok(self.request(c, r, None, true)),
            Err(e) => {
                c.inflight.fetch_sub(1, Ordering::AcqRel);
                Err(e)
            }
        }
    }

    fn test(&self, req: &mut Request) -> Result<Option<usize>> {
        let r = req.0.downcast_mut::<Req>().ok_or_else(|| {
            Error::Internal("a request of another network reached a plugin".into())
        })?;
        if r.done {
            return Err(Error::Internal(
                "a finished network request was tested again".into(),
            ));
        }
        // SAFETY: a live request of this plugin that has not completed.
        let got = unsafe { self.vt.test(r.ptr, r.flush) }?;
        if got.is_some() {
            r.done = true;
            r.inflight.fetch_sub(1, Ordering::AcqRel);
        }
        Ok(got)
    }

    fn close_send(&self, comm: SendComm) -> Result<()> {
        let c = comm_of::<Comm>(&*comm.0, "send comm")?;
        // SAFETY: a live send comm, closed once (it is consumed).
        unsafe { self.vt.close(0, c.ptr) }
    }

    fn close_recv(&self, comm: RecvComm) -> Result<()> {
        let c = comm_of::<Comm>(&*comm.0, "receive comm")?;
        // SAFETY: a live receive comm, closed once.
        unsafe { self.vt.close(1, c.ptr) }
    }

    fn close_listen(&self, listen: Listen) -> Result<()> {
        let c = comm_of::<Comm>(&*listen.0, "listener")?;
        // SAFETY: a live listen comm, closed once.
        unsafe { self.vt.close(2, c.ptr) }
    }
}
