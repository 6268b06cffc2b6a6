//! One interface over plugin ABI versions 6 to 12: each call goes to the member of the version
//! the library exports, with NCCL's adapter rules for the older ones (`reference/net.md` §2,
//! "Adapters"). v12 is v11 with a larger properties struct, so the two share every call but
//! `getProperties`. v6-v8 messages are limited to 1 GiB (`maxP2pBytes` reads as 1 GiB), v6/v7
//! registrations to less than 2 GiB, the optional-completion hint of receives goes only to v9+,
//! profiler handles only to v10+, v10's `connect` gets the communicator's config, and
//! `forceFlush` reads as 0 before v9. `regMrDmaBuf` and `iflush` have one signature in every
//! version; a plugin whose `regMrDmaBuf` is NULL has the `NCCL_PTR_DMABUF` bit of its devices
//! cleared, so nothing above asks it for a dma-buf registration.
//!
//! Every method is an `unsafe fn`: it calls into the plugin with pointers the caller vouches for.

use super::abi::*;
use crate::Properties;
use oxccl_core::error::{Error, Result};
use oxccl_core::plugin_abi::logger;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::ptr::null_mut;

/// A copy of the net struct a library exports, tagged with its version.
#[derive(Clone, Copy)]
pub(crate) enum VTable {
    V6(NetV6),
    V7(NetV7),
    V8(NetV8),
    V9(NetV9),
    V10(NetV10),
    V11(NetV11),
    V12(NetV12),
}

// SAFETY: the struct holds function pointers and a pointer to the plugin's constant name string;
// plugins are called from several threads in NCCL too (service and progress threads).
unsafe impl Send for VTable {}
// SAFETY: as for Send; the copy is never written.
unsafe impl Sync for VTable {}

/// Runs `$body` with `$t` bound to the struct of whichever version `$v` holds.
macro_rules! each {
    ($v:expr, $t:ident => $body:expr) => {
        match $v {
            VTable::V6($t) => $body,
            VTable::V7($t) => $body,
            VTable::V8($t) => $body,
            VTable::V9($t) => $body,
            VTable::V10($t) => $body,
            VTable::V11($t) | VTable::V12($t) => $body,
        }
    };
}

/// A required member, or an error naming it.
macro_rules! member {
    ($t:expr, $m:ident) => {
        $t.$m.ok_or_else(|| {
            Error::Internal(format!(
                "the network plugin has no `{}` function (a NULL member)",
                stringify!($m)
            ))
        })?
    };
}

/// A member whose type is the same in every version, or an error naming it.
macro_rules! same {
    ($v:expr, $m:ident) => {
        each!($v, t => t.$m).ok_or_else(|| {
            Error::Internal(format!(
                "the network plugin has no `{}` function (a NULL member)",
                stringify!($m)
            ))
        })?
    };
}

/// What one device of a plugin reports, read through any version's properties struct.
#[derive(Debug, Clone)]
pub(crate) struct DevProps {
    /// The fields the `Net` trait exposes.
    pub props: Properties,
    /// `netDeviceType` (HOST for v6).
    pub device_type: c_int,
    /// `netDeviceVersion`.
    pub device_version: c_int,
    /// `forceFlush` (v9+; false before): flush every receive into GPU memory.
    pub force_flush: bool,
}

/// The receive arguments of one `irecv` (one buffer), kept at a stable address until the
/// request completes, in case the plugin reads them late.
#[derive(Debug)]
pub(crate) struct RecvArgs {
    pub data: [*mut c_void; 1],
    pub sizes_int: [c_int; 1],
    pub sizes: [usize; 1],
    pub tags: [c_int; 1],
    pub mhandles: [*mut c_void; 1],
    pub phandles: [*mut c_void; 1],
}

/// Text of a plugin C string, empty for NULL.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string valid for the call.
pub(crate) unsafe fn c_text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// `Ok` for `ncclSuccess`, else the error an NCCL result code stands for.
pub(crate) fn check(what: &str, rc: NcclResult) -> Result<()> {
    let text = |kind: &str| format!("network plugin: {what} failed with {kind} ({rc})");
    match rc {
        SUCCESS => Ok(()),
        SYSTEM_ERROR => Err(Error::System {
            context: format!("network plugin: {what}"),
            message: format!("ncclSystemError ({rc})"),
        }),
        INVALID_ARGUMENT => Err(Error::InvalidArgument(text("ncclInvalidArgument"))),
        INVALID_USAGE => Err(Error::InvalidUsage(text("ncclInvalidUsage"))),
        REMOTE_ERROR => Err(Error::Remote(text("ncclRemoteError"))),
        INTERNAL_ERROR => Err(Error::Internal(text("ncclInternalError"))),
        _ => Err(Error::Internal(text("an unknown result"))),
    }
}

fn too_big(what: &str, size: usize, limit: u64, version: u32) -> Error {
    Error::InvalidArgument(format!(
        "network plugin (ABI v{version}): {what} of {size} bytes exceeds the limit of {limit} bytes"
    ))
}

impl VTable {
    /// Copies the net struct at `sym`.
    ///
    /// # Safety
    /// `sym` points to a live `ncclNet_v<version>_t` and `version` is 6 to 12.
    pub(crate) unsafe fn read(sym: *const c_void, version: u32) -> VTable {
        // SAFETY: the caller vouches for the layout; `read_unaligned` tolerates any alignment.
        unsafe {
            match version {
                6 => VTable::V6(sym.cast::<NetV6>().read_unaligned()),
                7 => VTable::V7(sym.cast::<NetV7>().read_unaligned()),
                8 => VTable::V8(sym.cast::<NetV8>().read_unaligned()),
                9 => VTable::V9(sym.cast::<NetV9>().read_unaligned()),
                10 => VTable::V10(sym.cast::<NetV10>().read_unaligned()),
                11 => VTable::V11(sym.cast::<NetV11>().read_unaligned()),
                _ => VTable::V12(sym.cast::<NetV12>().read_unaligned()),
            }
        }
    }

    /// The ABI version.
    pub(crate) fn version(&self) -> u32 {
        match self {
            VTable::V6(_) => 6,
            VTable::V7(_) => 7,
            VTable::V8(_) => 8,
            VTable::V9(_) => 9,
            VTable::V10(_) => 10,
            VTable::V11(_) => 11,
            VTable::V12(_) => 12,
        }
    }

    /// The plugin's `name`.
    pub(crate) fn name(&self) -> String {
        let p = each!(self, t => t.name);
        // SAFETY: `name` is the plugin's constant C string (or NULL).
        unsafe { c_text(p) }
    }

    /// Requests one comm may have in flight (`NCCL_NET_MAX_REQUESTS` of the version).
    pub(crate) fn max_requests(&self) -> usize {
        match self {
            VTable::V6(_) => MAX_REQUESTS_V6,
            _ => MAX_REQUESTS,
        }
    }

    /// The largest message the version's adapter lets through, before the device's own limit.
    fn message_cap(&self) -> Option<u64> {
        (self.version() <= 8).then_some(MAX_NET_SIZE)
    }

    /// The process-wide `init` of v6 to v10.
    ///
    /// # Safety
    /// Called once per process for this library, before any other member.
    pub(crate) unsafe fn init_process(&self) -> Result<()> {
        let log = logger();
        // SAFETY: `init` takes the logger (and the profiler callback for v10), both valid for
        // the life of the process.
        let rc = unsafe {
            match self {
                VTable::V6(t) => member!(t, init)(log),
                VTable::V7(t) => member!(t, init)(log),
                VTable::V8(t) => member!(t, init)(log),
                VTable::V9(t) => member!(t, init)(log),
                VTable::V10(t) => member!(t, init)(log, profiler_callback()),
                VTable::V11(_) | VTable::V12(_) => {
                    return Err(Error::Internal(
                        "v11 and v12 plugins init per communicator".into(),
                    ));
                }
            }
        };
        check("init", rc)
    }

    /// The per-communicator `init` of v11 and v12: a new context.
    ///
    /// # Safety
    /// `config` stays valid until [`VTable::finalize`] of the returned context.
    pub(crate) unsafe fn init_comm(
        &self,
        comm_id: u64,
        config: *mut CommConfig,
    ) -> Result<*mut c_void> {
        let (VTable::V11(t) | VTable::V12(t)) = self else {
            return Err(Error::Internal(
                "only v11 and v12 plugins init per communicator".into(),
            ));
        };
        let mut ctx = null_mut();
        // SAFETY: `ctx` receives the context; `config` lives as the caller promised; the
        // callbacks live for the process.
        let rc =
            unsafe { member!(t, init)(&mut ctx, comm_id, config, logger(), profiler_callback()) };
        if let Err(e) = check("init", rc) {
            // As NCCL does: a failed init still gets `finalize` with whatever context it left.
            // SAFETY: the context (possibly NULL) this plugin's init just produced.
            let _ = unsafe { self.finalize(ctx) };
            return Err(e);
        }
        Ok(ctx)
    }

    /// The `finalize(ctx)` of v11 and v12; nothing for older versions.
    ///
    /// # Safety
    /// `ctx` came from [`VTable::init_comm`] and is finalized once, after its comms are closed.
    pub(crate) unsafe fn finalize(&self, ctx: *mut c_void) -> Result<()> {
        if let VTable::V11(t) | VTable::V12(t) = self {
            // SAFETY: as the caller promised.
            check("finalize", unsafe { member!(t, finalize)(ctx) })?;
        }
        Ok(())
    }

    /// Number of devices.
    ///
    /// # Safety
    /// The plugin was initialized.
    pub(crate) unsafe fn devices(&self) -> Result<usize> {
        let mut n: c_int = 0;
        // SAFETY: `n` receives the count.
        check("devices", unsafe { same!(self, devices)(&mut n) })?;
        Ok(n.max(0) as usize)
    }

    /// Properties of `dev`, with the adapters' defaults for fields older versions lack.
    ///
    /// # Safety
    /// The plugin was initialized.
    pub(crate) unsafe fn properties(&self, dev: usize) -> Result<DevProps> {
        let d = dev as c_int;
        macro_rules! get {
            ($t:expr, $ty:ty) => {{
                let mut p = <$ty>::default();
                // SAFETY: `p` is the properties struct of this version, written by the plugin.
                check("getProperties", unsafe {
                    member!($t, get_properties)(d, &mut p)
                })?;
                p
            }};
        }
        macro_rules! base {
            ($p:expr, $max:expr) => {
                Properties {
                    // SAFETY: the plugin's strings, valid while the plugin is loaded.
                    name: unsafe { c_text($p.name) },
                    // SAFETY: as above.
                    pci_path: Some(unsafe { c_text($p.pci_path) }).filter(|s| !s.is_empty()),
                    guid: $p.guid,
                    ptr_support: $p.ptr_support as u32,
                    speed_mbps: if $p.speed > 0 { $p.speed } else { 10_000 },
                    port: $p.port,
                    latency_us: $p.latency,
                    max_comms: $p.max_comms,
                    max_recvs: $p.max_recvs,
                    max_p2p_bytes: $max,
                }
            };
        }
        let v9_max = |bytes: usize| -> Result<u64> {
            let b = bytes as u64;
            if b == 0 || b > MAX_NET_SIZE_BYTES {
                return Err(Error::Internal(format!(
                    "network plugin device {dev}: maxP2pBytes {b} is outside (0, 2^40]"
                )));
            }
            Ok(b)
        };
        // v9 and later share the mapping; their structs differ only in where fields lie.
        macro_rules! v9_plus {
            ($p:expr) => {{
                let p = $p;
                DevProps {
                    props: base!(p, v9_max(p.max_p2p_bytes)?),
                    device_type: p.net_device_type,
                    device_version: p.net_device_version,
                    force_flush: p.force_flush != 0,
                }
            }};
        }
        let mut got = match self {
            VTable::V6(t) => {
                let p = get!(t, PropsV6);
                DevProps {
                    props: base!(p, MAX_NET_SIZE),
                    device_type: DEVICE_HOST,
                    device_version: 0,
                    force_flush: false,
                }
            }
            VTable::V7(t) => {
                let p = get!(t, PropsV7);
                DevProps {
                    props: base!(p, MAX_NET_SIZE),
                    device_type: p.net_device_type,
                    device_version: p.net_device_version,
                    force_flush: false,
                }
            }
            VTable::V8(t) => {
                let p = get!(t, PropsV8);
                DevProps {
                    props: base!(p, MAX_NET_SIZE),
                    device_type: p.net_device_type,
                    device_version: p.net_device_version,
                    force_flush: false,
                }
            }
            VTable::V9(t) => v9_plus!(get!(t, PropsV9)),
            VTable::V10(t) => v9_plus!(get!(t, PropsV9)),
            VTable::V11(t) => v9_plus!(get!(t, PropsV11)),
            VTable::V12(t) => {
                let mut p = PropsV12::default();
                // SAFETY: a v12 plugin fills a `PropsV12`; the member is typed with v11's struct
                // (see `NetV12`), and a pointer argument is passed alike whatever it points to.
                check("getProperties", unsafe {
                    member!(t, get_properties)(d, (&raw mut p).cast())
                })?;
                // One device per connection: a rail or plane has nothing to choose between.
                tracing::debug!(target: "oxccl::net",
                    "network plugin device {dev}: railId {}, planeId {} (not used)",
                    p.rail_id, p.plane_id);
                v9_plus!(p)
            }
        };
        if !self.has_dma_buf() {
            got.props.ptr_support &= !crate::PTR_DMABUF;
        }
        Ok(got)
    }

    /// Whether the plugin has a `regMrDmaBuf` member.
    pub(crate) fn has_dma_buf(&self) -> bool {
        each!(self, t => t.reg_mr_dma_buf).is_some()
    }

    /// `listen`: fills `handle` (128 bytes), returns the listen comm.
    ///
    /// # Safety
    /// `ctx` is this communicator's context (v11+), `handle` 128 writable bytes.
    pub(crate) unsafe fn listen(
        &self,
        ctx: *mut c_void,
        dev: usize,
        handle: *mut c_void,
    ) -> Result<*mut c_void> {
        let mut lc = null_mut();
        let d = dev as c_int;
        // SAFETY: as the caller promised; `lc` receives the comm.
        let rc = unsafe {
            match self {
                VTable::V6(t) => member!(t, listen)(d, handle, &mut lc),
                VTable::V7(t) => member!(t, listen)(d, handle, &mut lc),
                VTable::V8(t) => member!(t, listen)(d, handle, &mut lc),
                VTable::V9(t) => member!(t, listen)(d, handle, &mut lc),
                VTable::V10(t) => member!(t, listen)(d, handle, &mut lc),
                VTable::V11(t) | VTable::V12(t) => member!(t, listen)(ctx, d, handle, &mut lc),
            }
        };
        check("listen", rc)?;
        if lc.is_null() {
            return Err(Error::Internal(
                "network plugin: listen returned a NULL comm".into(),
            ));
        }
        Ok(lc)
    }

    /// `connect`: the send comm, or NULL while the connection is in progress.
    ///
    /// # Safety
    /// `ctx` and `config` belong to this communicator; `handle` is the same 128-byte buffer on
    /// every retry.
    pub(crate) unsafe fn connect(
        &self,
        ctx: *mut c_void,
        config: *mut CommConfig,
        dev: usize,
        handle: *mut c_void,
    ) -> Result<*mut c_void> {
        let mut sc = null_mut();
        // No device offload: the device-comm argument points to NULL.
        let mut dc: *mut DeviceHandle = null_mut();
        let d = dev as c_int;
        // SAFETY: as the caller promised; `sc` receives the comm.
        let rc = unsafe {
            match self {
                VTable::V6(t) => member!(t, connect)(d, handle, &mut sc),
                VTable::V7(t) => member!(t, connect)(d, handle, &mut sc, &mut dc),
                VTable::V8(t) => member!(t, connect)(d, handle, &mut sc, &mut dc),
                VTable::V9(t) => member!(t, connect)(d, handle, &mut sc, &mut dc),
                VTable::V10(t) => member!(t, connect)(d, config, handle, &mut sc, &mut dc),
                VTable::V11(t) | VTable::V12(t) => {
                    member!(t, connect)(ctx, d, handle, &mut sc, &mut dc)
                }
            }
        };
        check("connect", rc)?;
        Ok(sc)
    }

    /// `accept`: the receive comm, or NULL while the connection is in progress.
    ///
    /// # Safety
    /// `listen` is a live listen comm of this plugin.
    pub(crate) unsafe fn accept(&self, listen: *mut c_void) -> Result<*mut c_void> {
        let mut rc_comm = null_mut();
        let mut dc: *mut DeviceHandle = null_mut();
        // SAFETY: as the caller promised; `rc_comm` receives the comm.
        let rc = unsafe {
            match self {
                VTable::V6(t) => member!(t, accept)(listen, &mut rc_comm),
                VTable::V7(t) => member!(t, accept)(listen, &mut rc_comm, &mut dc),
                VTable::V8(t) => member!(t, accept)(listen, &mut rc_comm, &mut dc),
                VTable::V9(t) => member!(t, accept)(listen, &mut rc_comm, &mut dc),
                VTable::V10(t) => member!(t, accept)(listen, &mut rc_comm, &mut dc),
                VTable::V11(t) | VTable::V12(t) => {
                    member!(t, accept)(listen, &mut rc_comm, &mut dc)
                }
            }
        };
        check("accept", rc)?;
        Ok(rc_comm)
    }

    /// `regMr`.
    ///
    /// # Safety
    /// `comm` is a live send or receive comm; `data` is valid for `size` bytes until `deregMr`.
    pub(crate) unsafe fn reg_mr(
        &self,
        comm: *mut c_void,
        data: *mut c_void,
        size: usize,
        ptr_type: u32,
    ) -> Result<*mut c_void> {
        let mut mh = null_mut();
        let ty = ptr_type as c_int;
        let small = |what| -> Result<c_int> {
            if size >= 1 << 31 {
                return Err(too_big(what, size, (1 << 31) - 1, self.version()));
            }
            Ok(size as c_int)
        };
        // SAFETY: as the caller promised; `mh` receives the handle.
        let rc = unsafe {
            match self {
                VTable::V6(t) => {
                    member!(t, reg_mr)(comm, data, small("a registration")?, ty, &mut mh)
                }
                VTable::V7(t) => {
                    member!(t, reg_mr)(comm, data, small("a registration")?, ty, &mut mh)
                }
                VTable::V8(t) => member!(t, reg_mr)(comm, data, size, ty, &mut mh),
                VTable::V9(t) => member!(t, reg_mr)(comm, data, size, ty, &mut mh),
                VTable::V10(t) => member!(t, reg_mr)(comm, data, size, ty, &mut mh),
                VTable::V11(t) | VTable::V12(t) => {
                    member!(t, reg_mr)(comm, data, size, ty, &mut mh)
                }
            }
        };
        check("regMr", rc)?;
        Ok(mh)
    }

    /// `regMrDmaBuf`: registers `size` bytes at `data` through the dma-buf `fd` (at `offset`).
    ///
    /// # Safety
    /// `comm` is a live send or receive comm; `data` and `fd` describe the same memory, valid
    /// until `deregMr`.
    pub(crate) unsafe fn reg_mr_dma_buf(
        &self,
        comm: *mut c_void,
        data: *mut c_void,
        size: usize,
        ptr_type: u32,
        offset: u64,
        fd: c_int,
    ) -> Result<*mut c_void> {
        let f = each!(self, t => t.reg_mr_dma_buf).ok_or_else(|| {
            Error::Internal("the network plugin has no `regMrDmaBuf` (a NULL member)".into())
        })?;
        let mut mh = null_mut();
        // SAFETY: as the caller promised; `mh` receives the handle.
        let rc = unsafe { f(comm, data, size, ptr_type as c_int, offset, fd, &mut mh) };
        check("regMrDmaBuf", rc)?;
        Ok(mh)
    }

    /// `deregMr`.
    ///
    /// # Safety
    /// `mh` came from [`VTable::reg_mr`] on `comm`, which is still open.
    pub(crate) unsafe fn dereg_mr(&self, comm: *mut c_void, mh: *mut c_void) -> Result<()> {
        // SAFETY: as the caller promised.
        check("deregMr", unsafe { same!(self, dereg_mr)(comm, mh) })
    }

    /// `isend`: the request, or NULL when the plugin is busy (try again).
    ///
    /// # Safety
    /// `comm` is a live send comm, `mh` its registration of `data`, readable for `size` bytes
    /// until the request is done.
    pub(crate) unsafe fn isend(
        &self,
        comm: *mut c_void,
        data: *mut c_void,
        size: usize,
        tag: i32,
        mh: *mut c_void,
        phandle: *mut c_void,
    ) -> Result<*mut c_void> {
        if let Some(cap) = self.message_cap()
            && size as u64 > cap
        {
            return Err(too_big("a send", size, cap, self.version()));
        }
        let mut req = null_mut();
        let n = size as c_int;
        // SAFETY: as the caller promised; `req` receives the request; `phandle` goes to v10+
        // plugins only, which hand it back to the profiler callback while the request lives.
        let rc = unsafe {
            match self {
                VTable::V6(t) => member!(t, isend)(comm, data, n, tag, mh, &mut req),
                VTable::V7(t) => member!(t, isend)(comm, data, n, tag, mh, &mut req),
                VTable::V8(t) => member!(t, isend)(comm, data, n, tag, mh, &mut req),
                VTable::V9(t) => member!(t, isend)(comm, data, size, tag, mh, &mut req),
                VTable::V10(t) => member!(t, isend)(comm, data, size, tag, mh, phandle, &mut req),
                VTable::V11(t) | VTable::V12(t) => {
                    member!(t, isend)(comm, data, size, tag, mh, phandle, &mut req)
                }
            }
        };
        check("isend", rc)?;
        Ok(req)
    }

    /// `irecv` of the one buffer in `args` (`sizes[0]` bytes): the request, or NULL when the
    /// plugin is busy. `optional` passes NCCL's optional-completion hint (v9+ only).
    ///
    /// # Safety
    /// `comm` is a live receive comm; `args` (buffer, registration) stays valid and unmoved
    /// until the request is done.
    pub(crate) unsafe fn irecv(
        &self,
        comm: *mut c_void,
        args: *mut RecvArgs,
        optional: bool,
    ) -> Result<*mut c_void> {
        // SAFETY: `args` is valid as the caller promised.
        let a = unsafe { &mut *args };
        let size = a.sizes[0];
        if let Some(cap) = self.message_cap()
            && size as u64 > cap
        {
            return Err(too_big("a receive", size, cap, self.version()));
        }
        a.sizes_int[0] = size as c_int;
        let hint = if optional && self.version() >= 9 {
            OPTIONAL_RECV_COMPLETION as *mut c_void
        } else {
            null_mut()
        };
        let mut req = hint;
        let (d, si, s, tg, m, ph) = (
            a.data.as_mut_ptr(),
            a.sizes_int.as_mut_ptr(),
            a.sizes.as_mut_ptr(),
            a.tags.as_mut_ptr(),
            a.mhandles.as_mut_ptr(),
            a.phandles.as_mut_ptr(),
        );
        // SAFETY: one-element arrays inside `args`, as the caller promised; `req` receives the
        // request.
        let rc = unsafe {
            match self {
                VTable::V6(t) => member!(t, irecv)(comm, 1, d, si, tg, m, &mut req),
                VTable::V7(t) => member!(t, irecv)(comm, 1, d, si, tg, m, &mut req),
                VTable::V8(t) => member!(t, irecv)(comm, 1, d, si, tg, m, &mut req),
                VTable::V9(t) => member!(t, irecv)(comm, 1, d, s, tg, m, &mut req),
                VTable::V10(t) => member!(t, irecv)(comm, 1, d, s, tg, m, ph, &mut req),
                VTable::V11(t) | VTable::V12(t) => {
                    member!(t, irecv)(comm, 1, d, s, tg, m, ph, &mut req)
                }
            }
        };
        check("irecv", rc)?;
        // A plugin that leaves the hint in place posted nothing.
        if req == hint && optional {
            req = null_mut();
        }
        Ok(req)
    }

    /// `iflush` of one buffer (`size` bytes at `data`, registered as `mh`): the request, or
    /// NULL when there is nothing to wait for.
    ///
    /// # Safety
    /// `comm` is a live receive comm and `mh` its registration of `data`, valid until the
    /// request is done.
    pub(crate) unsafe fn iflush(
        &self,
        comm: *mut c_void,
        data: *mut c_void,
        size: usize,
        mh: *mut c_void,
    ) -> Result<*mut c_void> {
        let n = c_int::try_from(size)
            .map_err(|_| too_big("a flush", size, c_int::MAX as u64, self.version()))?;
        let (mut data, mut sizes, mut mhandles) = ([data], [n], [mh]);
        let mut req = null_mut();
        // SAFETY: as the caller promised; one-element arrays on this frame, which the plugin
        // reads during the call (`iflush` takes no ownership of them).
        let rc = unsafe {
            same!(self, iflush)(
                comm,
                1,
                data.as_mut_ptr(),
                sizes.as_mut_ptr(),
                mhandles.as_mut_ptr(),
                &mut req,
            )
        };
        check("iflush", rc)?;
        Ok(req)
    }

    /// `test`: `Some(bytes)` once done (0 for a flush, which gets NULL sizes as in NCCL).
    ///
    /// # Safety
    /// `req` is a live request of this plugin that has not completed yet.
    pub(crate) unsafe fn test(&self, req: *mut c_void, flush: bool) -> Result<Option<usize>> {
        let mut done: c_int = 0;
        let mut sizes: [c_int; 1] = [0];
        let sizes_ptr = if flush {
            null_mut()
        } else {
            sizes.as_mut_ptr()
        };
        // SAFETY: as the caller promised; one size for a one-buffer request, none for a flush.
        check("test", unsafe {
            same!(self, test)(req, &mut done, sizes_ptr)
        })?;
        Ok((done != 0).then_some(sizes[0].max(0) as usize))
    }

    /// `closeSend`, `closeRecv` or `closeListen` (`which`: 0, 1, 2).
    ///
    /// # Safety
    /// `comm` is a live comm of that kind, closed once.
    pub(crate) unsafe fn close(&self, which: u8, comm: *mut c_void) -> Result<()> {
        let (f, what) = match which {
            0 => (each!(self, t => t.close_send), "closeSend"),
            1 => (each!(self, t => t.close_recv), "closeRecv"),
            _ => (each!(self, t => t.close_listen), "closeListen"),
        };
        let f = f.ok_or_else(|| Error::Internal(format!("the network plugin has no `{what}`")))?;
        // SAFETY: as the caller promised.
        check(what, unsafe { f(comm) })
    }
}

/// The v10+ profiler callback: NetPlugin events under the proxy step whose handle the plugin
/// got with the request ([`crate::proxy_events`]).
extern "C" fn profiler(
    e_handle: *mut *mut c_void,
    kind: c_int,
    p_handle: *mut c_void,
    plugin_id: i64,
    ext: *mut c_void,
) -> NcclResult {
    // SAFETY: the plugin passes back the `pHandle` of a request in flight (a `NetStepRef` the
    // proxy keeps until the request is done, or null) and its own event-handle slot.
    unsafe { crate::proxy_events::net_plugin_event(e_handle, kind, p_handle, plugin_id, ext) };
    SUCCESS
}

/// The profiler callback to pass to a v10+ `init`.
fn profiler_callback() -> ProfilerCallback {
    profiler
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PTR_DMABUF, PTR_HOST};

    unsafe extern "C" fn dma_buf_props(dev: c_int, p: *mut PropsV11) -> NcclResult {
        // SAFETY: the adapter passes a properties struct of this version.
        let p = unsafe { &mut *p };
        p.ptr_support = (PTR_HOST | PTR_DMABUF) as c_int;
        p.force_flush = dev;
        p.max_p2p_bytes = 1 << 20;
        SUCCESS
    }

    unsafe extern "C" fn refuse_dma_buf(
        _: *mut c_void,
        _: *mut c_void,
        _: usize,
        _: c_int,
        _: u64,
        _: c_int,
        _: *mut *mut c_void,
    ) -> NcclResult {
        INTERNAL_ERROR
    }

    /// A v11 struct with only `getProperties` (and `regMrDmaBuf` when asked).
    fn v11(dma_buf: bool) -> VTable {
        // SAFETY: every member is a raw pointer or an optional function pointer, for which
        // all-zero bytes are NULL.
        let mut t: NetV11 = unsafe { std::mem::zeroed() };
        t.get_properties = Some(dma_buf_props);
        if dma_buf {
            t.reg_mr_dma_buf = Some(refuse_dma_buf);
        }
        VTable::V11(t)
    }

    /// The dma-buf bit stands only with a `regMrDmaBuf` to honour it; `forceFlush` comes
    /// through from v9+ properties.
    #[test]
    fn dma_buf_bit_needs_reg_mr_dma_buf_and_force_flush_reads_through() {
        // SAFETY: the struct's only member called is `getProperties`, defined above.
        let with = unsafe { v11(true).properties(1) }.unwrap();
        assert_eq!(with.props.ptr_support, PTR_HOST | PTR_DMABUF);
        assert!(with.force_flush);
        // SAFETY: as above.
        let without = unsafe { v11(false).properties(0) }.unwrap();
        assert_eq!(without.props.ptr_support, PTR_HOST);
        assert!(!without.force_flush);
        // SAFETY: a NULL comm goes to the refusing stub, which reads nothing.
        let e = unsafe { v11(true).reg_mr_dma_buf(null_mut(), null_mut(), 1, 2, 0, 3) };
        assert!(e.is_err(), "the plugin's error comes back");
        // SAFETY: refused before the (missing) member could be called.
        let e = unsafe { v11(false).reg_mr_dma_buf(null_mut(), null_mut(), 1, 2, 0, 3) };
        assert!(e.unwrap_err().to_string().contains("regMrDmaBuf"));
    }

    unsafe extern "C" fn v12_props(_: c_int, p: *mut PropsV11) -> NcclResult {
        // SAFETY: the adapter passes a `PropsV12` to a v12 table (whose member has v11's type).
        let p = unsafe { &mut *p.cast::<PropsV12>() };
        p.ptr_support = PTR_HOST as c_int;
        p.speed = 0;
        p.max_recvs = 1;
        p.force_flush = 1;
        p.max_p2p_bytes = 3 << 30;
        p.rail_id = 2;
        p.plane_id = NET_ID_UNSET;
        SUCCESS
    }

    /// A v12 table reads its properties through the v12 layout, not v11's (where
    /// `maxP2pBytes` would come from the middle of vProps), with the usual speed default.
    #[test]
    fn v12_properties_come_from_the_v12_layout() {
        // SAFETY: as in `v11`.
        let mut t: NetV12 = unsafe { std::mem::zeroed() };
        t.get_properties = Some(v12_props);
        let vt = VTable::V12(t);
        assert_eq!(vt.version(), 12);
        // SAFETY: the struct's only member called is `getProperties`, defined above.
        let got = unsafe { vt.properties(0) }.unwrap();
        assert_eq!(got.props.max_p2p_bytes, 3 << 30);
        assert_eq!(got.props.speed_mbps, 10_000, "speed <= 0 reads as 10 Gbps");
        assert_eq!(got.props.max_recvs, 1);
        assert!(got.force_flush);
        assert_eq!(got.device_type, DEVICE_HOST);
    }
}
