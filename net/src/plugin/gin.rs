//! The GIN side of a network plugin library (`ncclGinPlugin_v11` .. `v13`), for the proxy GIN
//! type: [`GinPlugin`] is one communicator's `init` of it, [`GinColl`] one GIN context's
//! collective comm (every rank's `listen` handle exchanged over the bootstrap, then `connect`),
//! with its symmetric registrations and puts.
//!
//! Windows are registered by oxccl's own GIN window handle, the one device descriptors carry:
//! a put names its windows by those handles and [`GinColl`] resolves them to the plugin's
//! memory handles under a lock that deregistration takes too, so no put reaches a handle the
//! plugin has let go.

use super::PluginLib;
use super::gin_abi::{DEVICE_GIN_PROXY, HANDLE_BYTES};
use super::gin_adapter::GinVTable;
use oxccl_core::bootstrap::Bootstrap;
use oxccl_core::error::{Error, Result};
use oxccl_core::lock::lock;
use std::collections::HashMap;
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::{Arc, Mutex};

/// One communicator's `init` of a library's GIN plugin.
pub struct GinPlugin {
    lib: Arc<PluginLib>,
    vt: GinVTable,
    ctx: *mut c_void,
    name: String,
}

// SAFETY: `ctx` is the opaque context the plugin gave this communicator; NCCL calls GIN plugins
// from its init thread and its GIN progress thread alike.
unsafe impl Send for GinPlugin {}
// SAFETY: as for Send: `&self` methods only pass the pointers back to the plugin.
unsafe impl Sync for GinPlugin {}

impl std::fmt::Debug for GinPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GinPlugin({} v{})", self.name, self.vt.version())
    }
}

impl GinPlugin {
    /// Initializes `lib`'s GIN plugin for one communicator (`comm_id` goes to its `init`) and
    /// checks that oxccl can drive it: at least one device, device 0 of the proxy type. The
    /// error says why not (no GIN symbol, a failed call, another type).
    pub fn new(lib: &Arc<PluginLib>, comm_id: u64) -> Result<GinPlugin> {
        let Some((sym, version)) = lib.opened.gin else {
            return Err(Error::InvalidUsage(format!(
                "{} exports none of ncclGinPlugin_v13 .. ncclGinPlugin_v11",
                lib.path()
            )));
        };
        let (vt, ctx) = {
            let _g = lock(&lib.init);
            // SAFETY: `sym` is the exported struct of `version`, kept mapped by `lib`.
            let before = unsafe { GinVTable::read(sym, version) };
            // SAFETY: the first call of this communicator's use of the plugin.
            let ctx = unsafe { before.init(comm_id) }?;
            // Some plugins fill their struct in init: the members are copied after it.
            // SAFETY: as above.
            (unsafe { GinVTable::read(sym, version) }, ctx)
        };
        let plugin = GinPlugin {
            lib: lib.clone(),
            name: vt.name(),
            vt,
            ctx,
        };
        // SAFETY: initialized above.
        let ndev = unsafe { plugin.vt.devices() }?;
        if ndev == 0 {
            return Err(Error::InvalidUsage(format!(
                "GIN plugin {} (v{version}): no GIN devices",
                plugin.name
            )));
        }
        // SAFETY: initialized above; device 0 exists.
        let props = unsafe { plugin.vt.properties(0) }?;
        if props.device_type != DEVICE_GIN_PROXY {
            return Err(Error::InvalidUsage(format!(
                "GIN plugin {} (v{version}): device 0 ({}) has GIN type {}; oxccl drives only the proxy type ({DEVICE_GIN_PROXY})",
                plugin.name, props.name, props.device_type
            )));
        }
        tracing::debug!(target: "oxccl::init",
            "GIN plugin {}: device 0 {} of the proxy type, ptrSupport {:#x}",
            plugin.name, props.name, props.ptr_support);
        Ok(plugin)
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The GIN ABI version in use (11 to 13).
    pub fn version(&self) -> u32 {
        self.vt.version()
    }

    /// The library.
    pub fn lib(&self) -> &Arc<PluginLib> {
        &self.lib
    }

    /// Connects one GIN context on `dev` (collective: every rank of `bootstrap` at once): this
    /// rank's `listen` handle goes to every rank, then `connect`; a v13 plugin also makes the
    /// context its puts go to, for `signals` signals and `counters` counters.
    pub fn connect(
        self: &Arc<Self>,
        bootstrap: &Bootstrap,
        dev: usize,
        queue_depth: u32,
        signals: usize,
        counters: usize,
    ) -> Result<GinColl> {
        let mut handle = [0u8; HANDLE_BYTES];
        // SAFETY: `ctx` is ours; `handle` holds HANDLE_BYTES writable bytes.
        let listen = unsafe { self.vt.listen(self.ctx, dev, handle.as_mut_ptr().cast()) }?;
        let connected = self.connect_listening(bootstrap, &handle, listen, queue_depth);
        // SAFETY: the listen comm made above, closed once, after `connect` used it.
        let closed = unsafe { self.vt.close_listen(listen) };
        let coll = connected?;
        let mut coll = GinColl {
            plugin: self.clone(),
            coll,
            gin_ctx: null_mut(),
            windows: Mutex::new(HashMap::new()),
        };
        closed?;
        // SAFETY: `coll` is live; the context is destroyed when it drops.
        coll.gin_ctx = unsafe {
            self.vt
                .create_context(coll.coll, signals, counters, queue_depth)
        }?;
        Ok(coll)
    }

    fn connect_listening(
        &self,
        bootstrap: &Bootstrap,
        handle: &[u8; HANDLE_BYTES],
        listen: *mut c_void,
        queue_depth: u32,
    ) -> Result<*mut c_void> {
        let mut all = bootstrap.all_gather(handle)?;
        if let Some(r) = all.iter().position(|h| h.len() != HANDLE_BYTES) {
            return Err(Error::Internal(format!(
                "GIN plugin {}: rank {r}'s listen handle has {} bytes, not {HANDLE_BYTES}",
                self.name,
                all[r].len()
            )));
        }
        let mut ptrs: Vec<*mut c_void> = all.iter_mut().map(|h| h.as_mut_ptr().cast()).collect();
        let rank = bootstrap.rank() as usize;
        // SAFETY: `ctx` and `listen` are ours; each pointer is a rank's handle, alive in `all`
        // through the call.
        unsafe {
            self.vt
                .connect(self.ctx, &mut ptrs, rank, listen, queue_depth)
        }
    }
}

impl Drop for GinPlugin {
    fn drop(&mut self) {
        // SAFETY: `ctx` came from this plugin's init; every GinColl holds an Arc of this, so
        // all of them are closed.
        if let Err(e) = unsafe { self.vt.finalize(self.ctx) } {
            tracing::warn!(target: "oxccl::net", "GIN plugin {}: {e}", self.name);
        }
    }
}

/// A registration [`GinColl::register`] made (the context's signals, its inline values); it
/// lives until given to [`GinColl::deregister`].
#[derive(Debug)]
pub struct LocalMr(*mut c_void);

// SAFETY: an opaque plugin handle.
unsafe impl Send for LocalMr {}

/// Memory a put reads or writes.
#[derive(Debug, Clone, Copy)]
pub enum Region<'a> {
    /// A window, by oxccl's GIN handle (0: none, for a put without data).
    Window(u64),
    /// A registration of this context's own.
    Local(&'a LocalMr),
}

/// A put's signal: `op` ([`SIGNAL_OP_INC`](super::gin_abi::SIGNAL_OP_INC) or `ADD`) of
/// `value` on the word at `offset` of `signals`.
#[derive(Debug, Clone, Copy)]
pub struct SignalPut<'a> {
    /// The destination's signals, as registered here.
    pub signals: &'a LocalMr,
    /// Byte offset of the signal word (id x 8).
    pub offset: u64,
    /// Added (1 for an increment).
    pub value: u64,
    /// The plugin's signal op.
    pub op: u32,
}

/// A request a put returned, until [`GinColl::test`] finds it done.
#[derive(Debug)]
pub struct GinRequest(*mut c_void);

// SAFETY: an opaque plugin handle, tested from one thread at a time.
unsafe impl Send for GinRequest {}

/// One GIN context's collective comm.
pub struct GinColl {
    plugin: Arc<GinPlugin>,
    coll: *mut c_void,
    /// v13's context (NULL for v11 and v12).
    gin_ctx: *mut c_void,
    /// Windows' memory handles, by GIN window handle.
    windows: Mutex<HashMap<u64, usize>>,
}

// SAFETY: opaque plugin pointers; registrations (the application's thread) and puts (the GIN
// thread) may overlap, as in NCCL; the window table is behind its lock.
unsafe impl Send for GinColl {}
// SAFETY: as for Send.
unsafe impl Sync for GinColl {}

impl GinColl {
    /// The plugin.
    pub fn plugin(&self) -> &Arc<GinPlugin> {
        &self.plugin
    }

    /// Registers `size` bytes at `data` (`ptr_type` `NCCL_PTR_HOST` or `NCCL_PTR_CUDA`, `flags`
    /// such as [`MR_FLAG_FORCE_SO`](super::gin_abi::MR_FLAG_FORCE_SO)); collective: every rank
    /// registers in the same order.
    ///
    /// # Safety
    /// The memory stays allocated until the registration is deregistered.
    pub unsafe fn register(
        &self,
        data: *mut u8,
        size: usize,
        ptr_type: u32,
        flags: u64,
    ) -> Result<LocalMr> {
        // SAFETY: `coll` is live; the caller keeps the memory.
        let mh = unsafe {
            self.plugin
                .vt
                .reg_mr_sym(self.coll, data.cast(), size, ptr_type, flags)
        }?;
        Ok(LocalMr(mh))
    }

    /// Deregisters what [`GinColl::register`] gave; no request may use it any more.
    pub fn deregister(&self, mr: LocalMr) -> Result<()> {
        // SAFETY: `mr` was registered on this comm and is consumed here.
        unsafe { self.plugin.vt.dereg_mr_sym(self.coll, mr.0) }
    }

    /// Registers window `handle`, `bytes` at `base` (collective, in window order).
    ///
    /// # Safety
    /// The window stays allocated until [`GinColl::remove_window`].
    pub unsafe fn add_window(
        &self,
        handle: u64,
        base: u64,
        bytes: u64,
        ptr_type: u32,
    ) -> Result<()> {
        // SAFETY: the caller's contract.
        let mr = unsafe { self.register(base as *mut u8, bytes as usize, ptr_type, 0) }?;
        lock(&self.windows).insert(handle, mr.0 as usize);
        Ok(())
    }

    /// Deregisters window `handle` (nothing if it was never registered here).
    pub fn remove_window(&self, handle: u64) -> Result<()> {
        let mh = lock(&self.windows).remove(&handle);
        match mh {
            Some(mh) => self.deregister(LocalMr(mh as *mut c_void)),
            None => Ok(()),
        }
    }

    fn handle_of(&self, windows: &HashMap<u64, usize>, r: Region<'_>) -> Result<*mut c_void> {
        match r {
            Region::Window(0) => Ok(null_mut()),
            Region::Window(h) => windows.get(&h).map(|&m| m as *mut c_void).ok_or_else(|| {
                Error::Internal(format!(
                    "a GIN put names window {h:#x}, which is not registered with GIN plugin {}",
                    self.plugin.name
                ))
            }),
            Region::Local(mr) => Ok(mr.0),
        }
    }

    /// Puts `size` bytes from `src` (region, offset) to `dst` of `rank`, then applies
    /// `signal` there, if any (`iput` or `iputSignal`).
    pub fn put(
        &self,
        src: (Region<'_>, u64),
        size: usize,
        dst: (Region<'_>, u64),
        rank: u32,
        signal: Option<SignalPut<'_>>,
    ) -> Result<GinRequest> {
        // Held through the call: a window is not deregistered under a put that names it.
        let windows = lock(&self.windows);
        let s = (src.1, self.handle_of(&windows, src.0)?);
        let d = (dst.1, self.handle_of(&windows, dst.0)?);
        let sig = signal.map(|g| (g.offset, g.signals.0, g.value, g.op));
        // SAFETY: `coll` and `gin_ctx` are live; the handles are registrations of this comm,
        // alive while `windows` is locked (locals: borrowed, so not yet deregistered).
        let req = unsafe {
            self.plugin
                .vt
                .put(self.coll, self.gin_ctx, s, size, d, rank, sig)
        }?;
        Ok(GinRequest(req))
    }

    /// Whether `req` is done; a done request must not be tested again.
    pub fn test(&self, req: &GinRequest) -> Result<bool> {
        if req.0.is_null() {
            // A plugin may finish a put at once and return no request.
            return Ok(true);
        }
        // SAFETY: a live request of this comm; the caller never tests it once done.
        unsafe { self.plugin.vt.test(self.coll, req.0) }
    }

    /// Lets the plugin progress (its `ginProgress`, when it has one), then asks a v13 context
    /// whether it failed.
    pub fn progress(&self) -> Result<()> {
        // SAFETY: `coll` and `gin_ctx` are live.
        unsafe { self.plugin.vt.progress(self.coll, self.gin_ctx) }?;
        // SAFETY: as above.
        if unsafe { self.plugin.vt.last_error(self.gin_ctx) }? {
            return Err(Error::Remote(format!(
                "GIN plugin {}: queryLastError reports a failed operation",
                self.plugin.name
            )));
        }
        Ok(())
    }
}

impl Drop for GinColl {
    fn drop(&mut self) {
        let vt = &self.plugin.vt;
        let windows: Vec<usize> = lock(&self.windows).drain().map(|(_, m)| m).collect();
        for mh in windows {
            // SAFETY: registered on this comm; nothing uses it any more (the engine is gone).
            let _ = unsafe { vt.dereg_mr_sym(self.coll, mh as *mut c_void) };
        }
        // SAFETY: made by this comm's connect; destroyed and closed once, after every request.
        let closed = unsafe { vt.destroy_context(self.gin_ctx) }
            // SAFETY: as above.
            .and_then(|()| unsafe { vt.close_coll(self.coll) });
        if let Err(e) = closed {
            tracing::warn!(target: "oxccl::net", "GIN plugin {}: {e}", self.plugin.name);
        }
    }
}
