//! `ncclMemAlloc`/`ncclMemFree`, buffer registration and windows.

use super::out;
use crate::abi::{
    NCCL_WIN_COLL_SYMMETRIC, NCCL_WIN_STRICT_ORDERING, ncclComm_t, ncclWindow_t, ncclWindow_vidmem,
};
use crate::boundary::nccl_api;
use crate::group;
use crate::handles::{self, Need, Registration};
use oxccl::device_api::shared as device_api;
use oxccl::dispatch::{self as runtime, RuntimeBackend};
use oxccl_core::{Error, Result};
use std::ffi::{c_int, c_void};

unsafe fn mem_alloc(ptr: *mut *mut c_void, size: usize) -> Result<()> {
    // SAFETY: forwarded from the caller.
    let slot = unsafe { out(ptr, "ptr") }?;
    // NCCL hands zero bytes to cudaMalloc, which succeeds with NULL; nccl-tests asks for them.
    if size == 0 {
        *slot = std::ptr::null_mut();
        return Ok(());
    }
    let backend = runtime::backend()?;
    let device = backend.current_device()?;
    *slot = backend.mem_alloc(device, size)? as *mut c_void;
    Ok(())
}

unsafe fn mem_free(ptr: *mut c_void) -> Result<()> {
    if ptr.is_null() {
        return Ok(());
    }
    // SAFETY: the caller passes memory from ncclMemAlloc that no queued work uses; the backend
    // rejects addresses it did not allocate.
    unsafe { runtime::backend()?.mem_free(ptr as u64) }
}

unsafe fn comm_register(
    comm: ncclComm_t,
    buff: *mut c_void,
    size: usize,
    handle: *mut *mut c_void,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    let slot = unsafe { out(handle, "handle") }?;
    let live = handles::lookup(comm, Need::Ops)?;
    if buff.is_null() && size > 0 {
        return Err(Error::arg("buff argument is NULL"));
    }
    // Operations on the host backend read user buffers directly; the handle records the buffer
    // so deregistration can be checked.
    let reg = Box::new(Registration {
        buff: buff as usize,
        size,
    });
    let addr = &*reg as *const Registration as usize;
    live.handle.lock().registrations.insert(addr, reg);
    *slot = addr as *mut c_void;
    Ok(())
}

unsafe fn comm_deregister(comm: ncclComm_t, handle: *mut c_void) -> Result<()> {
    let live = handles::lookup(comm, Need::Query)?;
    if handle.is_null() {
        return Err(Error::arg("handle argument is NULL"));
    }
    match live.handle.lock().registrations.remove(&(handle as usize)) {
        Some(_) => Ok(()),
        None => Err(Error::arg(format!(
            "handle {handle:p} was not returned by ncclCommRegister on this communicator"
        ))),
    }
}

unsafe fn comm_window_register(
    comm: ncclComm_t,
    buff: *mut c_void,
    size: usize,
    win: *mut ncclWindow_t,
    win_flags: c_int,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    let slot = unsafe { out(win, "win") }?;
    *slot = ncclWindow_t(std::ptr::null_mut());
    let live = handles::lookup(comm, Need::Ops)?;
    if buff.is_null() && size > 0 {
        return Err(Error::arg("buff argument is NULL"));
    }
    let known = NCCL_WIN_COLL_SYMMETRIC | NCCL_WIN_STRICT_ORDERING;
    if win_flags & !known != 0 {
        return Err(Error::arg(format!("invalid winFlags {win_flags:#x}")));
    }
    // Collective, as NCCL's: inside a group the window is made, and `*win` written, at the
    // group end, where every rank this thread registered maps its peers' buffers at once.
    let (handle, user, out_addr) = (live.handle, buff as usize, slot as *mut _ as usize);
    group::together(
        handle as *const _ as usize,
        Box::new(move || {
            let comm = handle.lock().live_comm()?;
            // SAFETY: the caller keeps the buffer allocated until it deregisters the window.
            let at = unsafe {
                device_api::register_window(
                    &comm,
                    user as u64,
                    size,
                    win_flags,
                    Box::new(|f| f(handle.lock().device_api()?)),
                )
            }?;
            // SAFETY: `win` stays writable until the group end (NCCL's contract for grouped calls).
            unsafe {
                *(out_addr as *mut ncclWindow_t) = ncclWindow_t(at as *mut ncclWindow_vidmem)
            };
            Ok(())
        }),
    )
}

unsafe fn comm_window_deregister(comm: ncclComm_t, win: ncclWindow_t) -> Result<()> {
    let live = handles::lookup(comm, Need::Query)?;
    let mut st = live.handle.lock();
    let api = st.device_api.as_mut().ok_or_else(|| not_registered(win))?;
    // SAFETY: the caller deregisters a window its work no longer uses.
    unsafe { api.remove_window(win.0 as u64) }
}

fn not_registered(win: ncclWindow_t) -> Error {
    Error::arg(format!(
        "window {:p} was not registered on this communicator",
        win.0
    ))
}

unsafe fn win_get_user_ptr(
    comm: ncclComm_t,
    win: ncclWindow_t,
    out_user_ptr: *mut *mut c_void,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    let slot = unsafe { out(out_user_ptr, "outUserPtr") }?;
    let live = handles::lookup(comm, Need::Query)?;
    let st = live.handle.lock();
    let w = st
        .device_api
        .as_ref()
        .and_then(|api| api.window(win.0 as u64))
        .ok_or_else(|| not_registered(win))?;
    *slot = w.user_ptr as *mut c_void;
    Ok(())
}

nccl_api! {
    /// `ncclMemAlloc`: backend memory other ranks can map (host backend: aligned host memory);
    /// zero bytes give NULL, as `cudaMalloc` does.
    fn ncclMemAlloc, pncclMemAlloc(ptr: *mut *mut c_void, size: usize) => mem_alloc;
}
nccl_api! {
    /// `ncclMemFree` (NULL is a no-op).
    fn ncclMemFree, pncclMemFree(ptr: *mut c_void) => mem_free;
}
nccl_api! {
    /// `ncclCommRegister`.
    fn ncclCommRegister, pncclCommRegister(
        comm: ncclComm_t, buff: *mut c_void, size: usize, handle: *mut *mut c_void
    ) => comm_register;
}
nccl_api! {
    /// `ncclCommDeregister`.
    fn ncclCommDeregister, pncclCommDeregister(comm: ncclComm_t, handle: *mut c_void) => comm_deregister;
}
nccl_api! {
    /// `ncclCommWindowRegister`.
    fn ncclCommWindowRegister, pncclCommWindowRegister(
        comm: ncclComm_t, buff: *mut c_void, size: usize, win: *mut ncclWindow_t, win_flags: c_int
    ) => comm_window_register;
}
nccl_api! {
    /// `ncclCommWindowDeregister`.
    fn ncclCommWindowDeregister, pncclCommWindowDeregister(
        comm: ncclComm_t, win: ncclWindow_t
    ) => comm_window_deregister;
}
nccl_api! {
    /// `ncclWinGetUserPtr` (NCCL 2.29).
    fn ncclWinGetUserPtr, pncclWinGetUserPtr(
        comm: ncclComm_t, win: ncclWindow_t, out_user_ptr: *mut *mut c_void
    ) => win_get_user_ptr;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::ncclResult_t;

    /// NCCL passes zero bytes to `cudaMalloc`: success and NULL, which `ncclMemFree` takes.
    #[test]
    fn zero_bytes_allocate_nothing() {
        let mut p = std::ptr::dangling_mut::<c_void>();
        // SAFETY: `p` is writable; NULL is a valid argument to ncclMemFree.
        unsafe {
            assert_eq!(ncclMemAlloc(&mut p, 0), ncclResult_t::SUCCESS);
            assert!(p.is_null());
            assert_eq!(ncclMemFree(p), ncclResult_t::SUCCESS);
        }
    }
}
