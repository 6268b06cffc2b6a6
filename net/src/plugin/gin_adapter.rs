//! One interface over GIN plugin ABI versions 11 to 13, for the proxy type: each call goes to
//! the member of the version the library exports. v12 gets one connection per peer (connection
//! 0 for every put) and the ring size as its queue depth; v13 puts go to the context its
//! `createContext` made (context 0 of a block of one), which v11 and v12 never need in proxy
//! mode (NCCL 2.28.9 does not call their `createContext` for it).
//!
//! Every method is an `unsafe fn`: it calls into the plugin with pointers the caller vouches for.

use super::abi::{DeviceHandle, PropsV11, PropsV12, TRAFFIC_CLASS_UNDEF};
use super::adapter::{c_text, check};
use super::gin_abi::*;
use oxccl_core::error::{Error, Result};
use oxccl_core::plugin_abi::logger;
use std::ffi::{c_int, c_void};
use std::ptr::null_mut;

/// A copy of the GIN struct a library exports, tagged with its version.
#[derive(Clone, Copy)]
pub(crate) enum GinVTable {
    V11(GinV11),
    V12(GinV12),
    V13(GinV13),
}

// SAFETY: function pointers and the plugin's constant name; NCCL calls GIN plugins from its
// init and progress threads alike.
unsafe impl Send for GinVTable {}
// SAFETY: as for Send; the copy is never written.
unsafe impl Sync for GinVTable {}

/// Runs `$body` with `$t` bound to the struct of whichever version `$v` holds.
macro_rules! each {
    ($v:expr, $t:ident => $body:expr) => {
        match $v {
            GinVTable::V11($t) => $body,
            GinVTable::V12($t) => $body,
            GinVTable::V13($t) => $body,
        }
    };
}

/// A required member, or an error naming it.
macro_rules! member {
    ($t:expr, $m:ident) => {
        $t.$m.ok_or_else(|| {
            Error::Internal(format!(
                "the GIN plugin has no `{}` function (a NULL member)",
                stringify!($m)
            ))
        })?
    };
}

/// What device 0 of a GIN plugin reports that oxccl looks at.
#[derive(Debug, Clone)]
pub(crate) struct GinProps {
    /// The device's name.
    pub name: String,
    /// `netDeviceType`: [`DEVICE_GIN_PROXY`] for the type oxccl drives.
    pub device_type: c_int,
    /// `ptrSupport`.
    pub ptr_support: c_int,
}

/// `Ok` for `ncclSuccess`, else the error of GIN member `what`.
fn gin_check(what: &str, rc: i32) -> Result<()> {
    check(&format!("the GIN plugin's {what}"), rc)
}

impl GinVTable {
    /// Copies the GIN struct at `sym`.
    ///
    /// # Safety
    /// `sym` points to a live `ncclGin_v<version>_t` and `version` is 11 to 13.
    pub(crate) unsafe fn read(sym: *const c_void, version: u32) -> GinVTable {
        // SAFETY: the caller vouches for the layout; `read_unaligned` tolerates any alignment.
        unsafe {
            match version {
                11 => GinVTable::V11(sym.cast::<GinV11>().read_unaligned()),
                12 => GinVTable::V12(sym.cast::<GinV12>().read_unaligned()),
                _ => GinVTable::V13(sym.cast::<GinV13>().read_unaligned()),
            }
        }
    }

    /// The ABI version.
    pub(crate) fn version(&self) -> u32 {
        match self {
            GinVTable::V11(_) => 11,
            GinVTable::V12(_) => 12,
            GinVTable::V13(_) => 13,
        }
    }

    /// The plugin's `name`.
    pub(crate) fn name(&self) -> String {
        let p = each!(self, t => t.name);
        // SAFETY: `name` is the plugin's constant C string (or NULL).
        unsafe { c_text(p) }
    }

    /// `init` for one communicator: the plugin's context.
    ///
    /// # Safety
    /// Called before any other member but `name`; the context is finalized once.
    pub(crate) unsafe fn init(&self, comm_id: u64) -> Result<*mut c_void> {
        let mut ctx = null_mut();
        // SAFETY: `ctx` receives the context; the logger lives for the process.
        let rc = unsafe { each!(self, t => member!(t, init)(&mut ctx, comm_id, logger())) };
        if let Err(e) = gin_check("init", rc) {
            // As for net plugins: a failed init still gets `finalize` with what it left.
            // SAFETY: the context (possibly NULL) this init just produced.
            let _ = unsafe { self.finalize(ctx) };
            return Err(e);
        }
        Ok(ctx)
    }

    /// `finalize(ctx)`.
    ///
    /// # Safety
    /// `ctx` came from [`GinVTable::init`]; every collective comm of it is closed.
    pub(crate) unsafe fn finalize(&self, ctx: *mut c_void) -> Result<()> {
        // SAFETY: as the caller promised.
        gin_check("finalize", unsafe {
            each!(self, t => member!(t, finalize)(ctx))
        })
    }

    /// Number of GIN-capable devices.
    ///
    /// # Safety
    /// The plugin was initialized.
    pub(crate) unsafe fn devices(&self) -> Result<usize> {
        let mut n: c_int = 0;
        // SAFETY: `n` is writable.
        gin_check("devices", unsafe {
            each!(self, t => member!(t, devices)(&mut n))
        })?;
        Ok(n.max(0) as usize)
    }

    /// Device `dev`'s properties, through v11's struct (v11, v12) or v12's (v13).
    ///
    /// # Safety
    /// The plugin was initialized; `dev` < [`GinVTable::devices`].
    pub(crate) unsafe fn properties(&self, dev: usize) -> Result<GinProps> {
        let dev = dev as c_int;
        // SAFETY: each call gets the properties struct of its version, zeroed and writable.
        let (name, device_type, ptr_support) = unsafe {
            match self {
                GinVTable::V11(GinV11 { get_properties, .. })
                | GinVTable::V12(GinV12 { get_properties, .. }) => {
                    let mut p = PropsV11::default();
                    gin_check(
                        "getProperties",
                        get_properties.ok_or_else(no_props)?(dev, &mut p),
                    )?;
                    (c_text(p.name), p.net_device_type, p.ptr_support)
                }
                GinVTable::V13(t) => {
                    let mut p = PropsV12::default();
                    gin_check(
                        "getProperties",
                        t.get_properties.ok_or_else(no_props)?(dev, &mut p),
                    )?;
                    (c_text(p.name), p.net_device_type, p.ptr_support)
                }
            }
        };
        Ok(GinProps {
            name,
            device_type,
            ptr_support,
        })
    }

    /// `listen` on `dev`: fills the [`HANDLE_BYTES`] at `handle`.
    ///
    /// # Safety
    /// `ctx` is this plugin's; `handle` holds [`HANDLE_BYTES`] writable bytes.
    pub(crate) unsafe fn listen(
        &self,
        ctx: *mut c_void,
        dev: usize,
        handle: *mut c_void,
    ) -> Result<*mut c_void> {
        let mut l = null_mut();
        // SAFETY: as the caller promised; `l` receives the listen comm.
        gin_check("listen", unsafe {
            each!(self, t => member!(t, listen)(ctx, dev as c_int, handle, &mut l))
        })?;
        Ok(l)
    }

    /// `connect` of `rank` among `handles.len()` ranks (v12: one connection per peer with
    /// `queue_depth` entries).
    ///
    /// # Safety
    /// `ctx` and `listen` are this plugin's; every handle points at a rank's listen handle.
    pub(crate) unsafe fn connect(
        &self,
        ctx: *mut c_void,
        handles: &mut [*mut c_void],
        rank: usize,
        listen: *mut c_void,
        queue_depth: u32,
    ) -> Result<*mut c_void> {
        let (n, r, hs) = (handles.len() as c_int, rank as c_int, handles.as_mut_ptr());
        let mut coll = null_mut();
        // SAFETY: as the caller promised; `coll` receives the collective comm.
        let rc = unsafe {
            match self {
                GinVTable::V11(t) => member!(t, connect)(ctx, hs, n, r, listen, &mut coll),
                GinVTable::V12(t) => {
                    let depth = queue_depth as c_int;
                    member!(t, connect)(ctx, hs, n, r, 1, depth, listen, &mut coll)
                }
                GinVTable::V13(t) => member!(t, connect)(ctx, hs, n, r, listen, &mut coll),
            }
        };
        gin_check("connect", rc)?;
        Ok(coll)
    }

    /// `closeListen`.
    ///
    /// # Safety
    /// A live listen comm of this plugin, closed once.
    pub(crate) unsafe fn close_listen(&self, listen: *mut c_void) -> Result<()> {
        // SAFETY: as the caller promised.
        gin_check("closeListen", unsafe {
            each!(self, t => member!(t, close_listen)(listen))
        })
    }

    /// `closeColl`.
    ///
    /// # Safety
    /// A live collective comm of this plugin, closed once, after its registrations and context.
    pub(crate) unsafe fn close_coll(&self, coll: *mut c_void) -> Result<()> {
        // SAFETY: as the caller promised.
        gin_check("closeColl", unsafe {
            each!(self, t => member!(t, close_coll)(coll))
        })
    }

    /// The context v13 puts go to (NULL for v11 and v12, which put on the collective comm).
    ///
    /// # Safety
    /// `coll` is a live collective comm of this plugin.
    pub(crate) unsafe fn create_context(
        &self,
        coll: *mut c_void,
        signals: usize,
        counters: usize,
        queue_depth: u32,
    ) -> Result<*mut c_void> {
        let GinVTable::V13(t) = self else {
            return Ok(null_mut());
        };
        let mut config = GinConfigV13 {
            n_signals: signals as c_int,
            n_counters: counters as c_int,
            n_contexts: 1,
            queue_depth: queue_depth as c_int,
            traffic_class: TRAFFIC_CLASS_UNDEF,
        };
        let (mut ctx, mut dev): (*mut c_void, *mut DeviceHandle) = (null_mut(), null_mut());
        // SAFETY: `config` lives through the call; `ctx` and `dev` receive the results (the
        // device handle stays the plugin's: the proxy type needs nothing from it).
        gin_check("createContext", unsafe {
            member!(t, create_context)(coll, &mut config, &mut ctx, &mut dev)
        })?;
        Ok(ctx)
    }

    /// `destroyContext` of what [`GinVTable::create_context`] made (nothing for NULL).
    ///
    /// # Safety
    /// `gin_ctx` came from `create_context` and is destroyed once, after its last request.
    pub(crate) unsafe fn destroy_context(&self, gin_ctx: *mut c_void) -> Result<()> {
        if gin_ctx.is_null() {
            return Ok(());
        }
        // SAFETY: as the caller promised.
        gin_check("destroyContext", unsafe {
            each!(self, t => member!(t, destroy_context)(gin_ctx))
        })
    }

    /// `regMrSym` of `size` bytes at `data` of type `ptr_type` with `flags`: the handle puts
    /// name the memory by.
    ///
    /// # Safety
    /// `coll` is live; the memory stays allocated until [`GinVTable::dereg_mr_sym`].
    pub(crate) unsafe fn reg_mr_sym(
        &self,
        coll: *mut c_void,
        data: *mut c_void,
        size: usize,
        ptr_type: u32,
        flags: u64,
    ) -> Result<*mut c_void> {
        let (mut mh, mut gin) = (null_mut(), null_mut());
        let ty = ptr_type as c_int;
        // SAFETY: as the caller promised; `mh` and `gin` receive the handles (the device-side
        // one is unused: descriptors carry oxccl's own window handles).
        gin_check("regMrSym", unsafe {
            each!(self, t => member!(t, reg_mr_sym)(coll, data, size, ty, flags, &mut mh, &mut gin))
        })?;
        if mh.is_null() {
            return Err(Error::Internal(
                "the GIN plugin's regMrSym returned no memory handle".into(),
            ));
        }
        Ok(mh)
    }

    /// `deregMrSym`.
    ///
    /// # Safety
    /// `mh` was registered on `coll` and no request uses it any more.
    pub(crate) unsafe fn dereg_mr_sym(&self, coll: *mut c_void, mh: *mut c_void) -> Result<()> {
        // SAFETY: as the caller promised.
        gin_check("deregMrSym", unsafe {
            each!(self, t => member!(t, dereg_mr_sym)(coll, mh))
        })
    }

    /// `iput`, or `iputSignal` when `signal` is `Some((offset, mhandle, value, op))`: `size`
    /// bytes from `src` (offset, mhandle) to `dst` of `rank`.
    ///
    /// # Safety
    /// `coll` (and `gin_ctx` for v13) are live; the handles are registrations of `coll` (or
    /// NULL where nothing is read or written there).
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn put(
        &self,
        coll: *mut c_void,
        gin_ctx: *mut c_void,
        src: (u64, *mut c_void),
        size: usize,
        dst: (u64, *mut c_void),
        rank: u32,
        signal: Option<(u64, *mut c_void, u64, u32)>,
    ) -> Result<*mut c_void> {
        let mut req = null_mut();
        let ((so, sm), (d_o, dm)) = (src, dst);
        // SAFETY: as the caller promised; `req` receives the request.
        let rc = unsafe {
            match (self, signal) {
                (GinVTable::V11(t), None) => {
                    member!(t, iput)(coll, so, sm, size, d_o, dm, rank, &mut req)
                }
                (GinVTable::V11(t), Some((go, gm, v, op))) => member!(t, iput_signal)(
                    coll, so, sm, size, d_o, dm, rank, go, gm, v, op, &mut req,
                ),
                (GinVTable::V12(t), None) => {
                    member!(t, iput)(coll, so, sm, size, d_o, dm, rank, 0, &mut req)
                }
                (GinVTable::V12(t), Some((go, gm, v, op))) => member!(t, iput_signal)(
                    coll, so, sm, size, d_o, dm, rank, go, gm, v, op, 0, &mut req,
                ),
                (GinVTable::V13(t), None) => {
                    member!(t, iput)(gin_ctx, 0, so, sm, size, d_o, dm, rank, &mut req)
                }
                (GinVTable::V13(t), Some((go, gm, v, op))) => member!(t, iput_signal)(
                    gin_ctx, 0, so, sm, size, d_o, dm, rank, go, gm, v, op, &mut req,
                ),
            }
        };
        gin_check(
            if signal.is_some() {
                "iputSignal"
            } else {
                "iput"
            },
            rc,
        )?;
        Ok(req)
    }

    /// `test`: whether the request is done (the plugin frees it then).
    ///
    /// # Safety
    /// `req` is a live request of `coll` that has not completed.
    pub(crate) unsafe fn test(&self, coll: *mut c_void, req: *mut c_void) -> Result<bool> {
        let mut done: c_int = 0;
        // SAFETY: as the caller promised; `done` is writable.
        gin_check("test", unsafe {
            each!(self, t => member!(t, test)(coll, req, &mut done))
        })?;
        Ok(done != 0)
    }

    /// `ginProgress` when the plugin has one: on the collective comm (v11, v12) or the context
    /// (v13).
    ///
    /// # Safety
    /// `coll` (and `gin_ctx` for v13) are live.
    pub(crate) unsafe fn progress(&self, coll: *mut c_void, gin_ctx: *mut c_void) -> Result<()> {
        let (f, arg) = match self {
            GinVTable::V11(t) => (t.gin_progress, coll),
            GinVTable::V12(t) => (t.gin_progress, coll),
            GinVTable::V13(t) => (t.gin_progress, gin_ctx),
        };
        match f {
            // SAFETY: as the caller promised.
            Some(f) => gin_check("ginProgress", unsafe { f(arg) }),
            None => Ok(()),
        }
    }

    /// `queryLastError` of a v13 context (v11 and v12 have no context in proxy mode to ask).
    ///
    /// # Safety
    /// `gin_ctx` is live (or NULL).
    pub(crate) unsafe fn last_error(&self, gin_ctx: *mut c_void) -> Result<bool> {
        let GinVTable::V13(t) = self else {
            return Ok(false);
        };
        let Some(f) = t.query_last_error.filter(|_| !gin_ctx.is_null()) else {
            return Ok(false);
        };
        let mut has = false;
        // SAFETY: as the caller promised; `has` is writable.
        gin_check("queryLastError", unsafe { f(gin_ctx, &mut has) })?;
        Ok(has)
    }
}

fn no_props() -> Error {
    Error::Internal("the GIN plugin has no `get_properties` function (a NULL member)".into())
}
