//! HIP's device model on CUDA contexts: each thread has a current device, which is that device's
//! primary context made current on the thread. A thread that never called `hipSetDevice` gets
//! device 0 on its first call, as with HIP's runtime. Primary contexts are retained once per
//! device and kept for the process's life (HIP has no call that would release them).

use crate::boundary::driver;
use crate::status::{Failure, HipResult, cu};
use crate::types::HipError;
use cudarc::driver::sys;
use std::sync::{Mutex, OnceLock};

/// The driver's devices in ordinal order, and their primary contexts once retained.
struct Devices {
    handles: Vec<sys::CUdevice>,
    /// `CUcontext` per ordinal as an address (raw pointers are not `Send`); 0 until retained.
    primary: Mutex<Vec<usize>>,
}

fn devices() -> HipResult<&'static Devices> {
    static DEVICES: OnceLock<HipResult<Devices>> = OnceLock::new();
    driver()?;
    DEVICES
        .get_or_init(|| {
            let mut n = 0;
            // SAFETY: the driver is initialised; `n` is a valid out-pointer.
            cu("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut n) })?;
            let mut handles = Vec::with_capacity(n.max(0) as usize);
            for i in 0..n {
                let mut d = 0;
                // SAFETY: `i` is below the device count; `d` is a valid out-pointer.
                cu("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut d, i) })?;
                handles.push(d);
            }
            Ok(Devices {
                primary: Mutex::new(vec![0; handles.len()]),
                handles,
            })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Number of devices.
pub fn count() -> HipResult<usize> {
    Ok(devices()?.handles.len())
}

/// The `CUdevice` of HIP ordinal `ordinal` (`hipErrorInvalidDevice` when out of range).
pub fn device(ordinal: i32) -> HipResult<sys::CUdevice> {
    let d = devices()?;
    usize::try_from(ordinal)
        .ok()
        .and_then(|i| d.handles.get(i).copied())
        .ok_or_else(|| {
            Failure::new(
                HipError::INVALID_DEVICE,
                format!("device {ordinal} of {}", d.handles.len()),
            )
        })
}

/// The primary context of device `ordinal`, retained on first use.
pub fn primary(ordinal: i32) -> HipResult<sys::CUcontext> {
    let dev = device(ordinal)?;
    let d = devices()?;
    let mut primary = d.primary.lock().unwrap_or_else(|p| p.into_inner());
    let slot = &mut primary[ordinal as usize];
    if *slot == 0 {
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: `dev` is a valid device; `ctx` is a valid out-pointer. The retain is never
        // released: the context lives as long as the process, like HIP's device state.
        cu("cuDevicePrimaryCtxRetain", unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut ctx, dev)
        })?;
        *slot = ctx as usize;
    }
    Ok(*slot as sys::CUcontext)
}

/// `hipSetDevice`: makes device `ordinal`'s primary context current on this thread.
pub fn set_current(ordinal: i32) -> HipResult {
    let ctx = primary(ordinal)?;
    // SAFETY: `ctx` is a retained primary context.
    cu("cuCtxSetCurrent", unsafe { sys::cuCtxSetCurrent(ctx) })
}

/// `hipGetDevice`: the ordinal of this thread's current device, device 0 when it has none yet.
pub fn current() -> HipResult<i32> {
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: `ctx` is a valid out-pointer.
    cu("cuCtxGetCurrent", unsafe { sys::cuCtxGetCurrent(&mut ctx) })?;
    if ctx.is_null() {
        set_current(0)?;
        return Ok(0);
    }
    let mut dev = 0;
    // SAFETY: a context is current; `dev` is a valid out-pointer.
    cu("cuCtxGetDevice", unsafe { sys::cuCtxGetDevice(&mut dev) })?;
    let d = devices()?;
    d.handles
        .iter()
        .position(|&h| h == dev)
        .map(|i| i as i32)
        .ok_or_else(|| Failure::new(HipError::INVALID_DEVICE, "the current context's device"))
}

/// Makes sure this thread has a current device (HIP's implicit device 0).
pub fn ensure_current() -> HipResult {
    current().map(|_| ())
}
