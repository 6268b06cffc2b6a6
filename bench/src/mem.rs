//! Memory of one rank: host memory (host backend) or a GPU's, allocated once for the whole
//! sweep and optionally registered with the library (`--reg`).

use super::options::Reg;
use oxccl_tests::cudart::{Cudart, Stream};
use oxccl_tests::nccl_lib::{NCCL_WIN_COLL_SYMMETRIC, NcclLib, RawComm, RawWindow};
use std::alloc::Layout;
use std::ffi::c_void;

/// Alignment of host buffers (what window registration asks for).
const HOST_ALIGN: usize = 4096;

/// Host memory or the CUDA runtime.
#[derive(Clone, Copy)]
pub enum Device<'a> {
    /// Host memory; operations complete when the library's call returns.
    Host,
    /// GPU memory through the CUDA runtime.
    Cuda(&'a Cudart),
}

impl Device<'_> {
    /// Makes GPU `gpu` current for this thread.
    pub fn set(&self, gpu: usize) -> Result<(), String> {
        match self {
            Device::Host => Ok(()),
            // More ranks than GPUs (`--launch procs`): ranks share them round robin.
            Device::Cuda(rt) => rt.set_device(gpu % rt.device_count().max(1)),
        }
    }

    /// Device memory in use on each of `gpus` (host: nothing to report).
    pub fn mem_used(&self, gpus: &[usize]) -> Vec<Option<usize>> {
        gpus.iter()
            .map(|&g| match self {
                Device::Host => None,
                Device::Cuda(rt) => rt.set_device(g).ok().and_then(|()| rt.mem_used()),
            })
            .collect()
    }

    /// A stream on the current device (NULL on the host).
    pub fn stream(&self) -> Result<Stream, String> {
        match self {
            Device::Host => Ok(std::ptr::null_mut()),
            Device::Cuda(rt) => rt.stream(),
        }
    }

    /// Destroys a stream from [`Device::stream`].
    ///
    /// # Safety
    /// No queued work uses `stream`.
    pub unsafe fn stream_destroy(&self, stream: Stream) {
        if let Device::Cuda(rt) = self {
            // SAFETY: forwarded from the caller.
            unsafe { rt.stream_destroy(stream) };
        }
    }

    /// Zeroed memory on the current device; failures are errors naming the size.
    pub fn alloc(&self, bytes: usize) -> Result<*mut u8, String> {
        match self {
            Device::Host => {
                let layout = host_layout(bytes)?;
                // SAFETY: the layout has a non-zero size.
                let p = unsafe { std::alloc::alloc_zeroed(layout) };
                if p.is_null() {
                    Err(format!("cannot allocate {bytes} B of host memory"))
                } else {
                    Ok(p)
                }
            }
            Device::Cuda(rt) => rt.alloc(bytes),
        }
    }

    /// Frees memory from [`Device::alloc`].
    ///
    /// # Safety
    /// `p` came from `alloc(bytes)` on this device and no queued work uses it.
    pub unsafe fn free(&self, p: *mut u8, bytes: usize) {
        match self {
            Device::Host => {
                if let Ok(layout) = host_layout(bytes) {
                    // SAFETY: forwarded from the caller; same layout as the allocation.
                    unsafe { std::alloc::dealloc(p, layout) };
                }
            }
            // SAFETY: forwarded from the caller.
            Device::Cuda(rt) => unsafe { rt.free(p) },
        }
    }

    /// Copies `src` to device address `dst`.
    ///
    /// # Safety
    /// `dst` is valid for `src.len()` bytes and no queued work uses it.
    pub unsafe fn upload(&self, dst: *mut u8, src: &[u8]) -> Result<(), String> {
        match self {
            Device::Host => {
                // SAFETY: forwarded from the caller; a fresh host slice never overlaps `dst`.
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
                Ok(())
            }
            // SAFETY: forwarded from the caller.
            Device::Cuda(rt) => unsafe { rt.copy(dst, src.as_ptr(), src.len()) },
        }
    }

    /// Copies device address `src` to `dst`.
    ///
    /// # Safety
    /// `src` is valid for `dst.len()` bytes and no queued work writes it.
    pub unsafe fn download(&self, dst: &mut [u8], src: *const u8) -> Result<(), String> {
        match self {
            Device::Host => {
                // SAFETY: forwarded from the caller.
                unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
                Ok(())
            }
            // SAFETY: forwarded from the caller.
            Device::Cuda(rt) => unsafe { rt.copy(dst.as_mut_ptr(), src, dst.len()) },
        }
    }

    /// Fills `bytes` bytes at `dst` with `byte` and waits for it.
    ///
    /// # Safety
    /// `dst` is valid for `bytes` bytes on the current device and no queued work uses it.
    pub unsafe fn memset(&self, dst: *mut u8, byte: u8, bytes: usize) -> Result<(), String> {
        if bytes == 0 {
            return Ok(());
        }
        match self {
            Device::Host => {
                // SAFETY: forwarded from the caller.
                unsafe { std::ptr::write_bytes(dst, byte, bytes) };
                Ok(())
            }
            Device::Cuda(rt) => {
                // SAFETY: forwarded from the caller.
                unsafe { rt.memset(dst, byte, bytes)? };
                rt.device_synchronize()
            }
        }
    }

    /// Waits for all work of the current device (synchronous copies from pageable host
    /// memory may return before their DMA lands; work on non-blocking streams is not ordered
    /// after them).
    pub fn device_sync(&self) -> Result<(), String> {
        match self {
            Device::Host => Ok(()),
            Device::Cuda(rt) => rt.device_synchronize(),
        }
    }

    /// Waits for `stream` (on the current device).
    ///
    /// # Safety
    /// `stream` came from [`Device::stream`] on the current device.
    pub unsafe fn sync(&self, stream: Stream) -> Result<(), String> {
        match self {
            Device::Host => Ok(()),
            // SAFETY: forwarded from the caller.
            Device::Cuda(rt) => unsafe { rt.sync(stream) },
        }
    }
}

fn host_layout(bytes: usize) -> Result<Layout, String> {
    Layout::from_size_align(bytes.max(1), HOST_ALIGN)
        .map_err(|_| format!("cannot allocate {bytes} B of host memory (too large)"))
}

/// True when `lib` has what `reg` needs; otherwise the message to print.
pub fn reg_support(lib: &NcclLib, reg: Reg) -> Result<(), String> {
    let missing = match reg {
        Reg::None => return Ok(()),
        Reg::Register => [
            ("ncclCommRegister", lib.comm_register.is_some()),
            ("ncclCommDeregister", lib.comm_deregister.is_some()),
        ]
        .to_vec(),
        Reg::Window => [
            ("ncclMemAlloc", lib.mem_alloc.is_some()),
            ("ncclMemFree", lib.mem_free.is_some()),
            ("ncclCommWindowRegister", lib.comm_window_register.is_some()),
            (
                "ncclCommWindowDeregister",
                lib.comm_window_deregister.is_some(),
            ),
        ]
        .to_vec(),
    };
    let names: Vec<&str> = missing
        .iter()
        .filter(|(_, ok)| !ok)
        .map(|(n, _)| *n)
        .collect();
    if names.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "--reg {} needs {}, which this library lacks",
            reg.name(),
            names.join(", ")
        ))
    }
}

/// One rank's send and receive buffers.
pub struct Buffers {
    /// Send buffer.
    pub send: *mut u8,
    /// Receive buffer.
    pub recv: *mut u8,
    /// Bytes of the send buffer.
    pub send_bytes: usize,
    /// Bytes of the receive buffer.
    pub recv_bytes: usize,
    /// From ncclMemAlloc (else from [`Device::alloc`]).
    nccl_mem: bool,
    /// ncclCommRegister handles.
    handles: Vec<*mut c_void>,
    /// ncclCommWindowRegister windows (send, recv), boxed: inside a group NCCL fills them in
    /// at ncclGroupEnd, so their address must not move.
    windows: Box<[RawWindow; 2]>,
}

impl Buffers {
    /// Allocates both buffers on the current device (before the communicator exists, so a
    /// failure leaves nothing waiting): ncclMemAlloc for `--reg window`, else [`Device::alloc`].
    pub fn alloc(
        lib: &NcclLib,
        dev: Device<'_>,
        reg: Reg,
        send_bytes: usize,
        recv_bytes: usize,
    ) -> Result<Buffers, String> {
        let (send_bytes, recv_bytes) = (send_bytes.max(1), recv_bytes.max(1));
        let nccl_mem = reg == Reg::Window;
        let one = |bytes: usize| -> Result<*mut u8, String> {
            if !nccl_mem {
                return dev.alloc(bytes);
            }
            let f = lib.mem_alloc.ok_or("no ncclMemAlloc")?;
            let mut p = std::ptr::null_mut();
            // SAFETY: `p` is a valid out-pointer.
            lib.check(&format!("ncclMemAlloc({bytes} B)"), unsafe {
                f(&mut p, bytes)
            })?;
            Ok(p as *mut u8)
        };
        let send = one(send_bytes)?;
        let recv = match one(recv_bytes) {
            Ok(p) => p,
            Err(e) => {
                let b = Buffers {
                    send,
                    recv: std::ptr::null_mut(),
                    send_bytes,
                    recv_bytes: 0,
                    nccl_mem,
                    handles: Vec::new(),
                    windows: Box::new([std::ptr::null_mut(); 2]),
                };
                // SAFETY: nothing uses the send buffer yet.
                unsafe { b.free(lib, dev) };
                return Err(e);
            }
        };
        Ok(Buffers {
            send,
            recv,
            send_bytes,
            recv_bytes,
            nccl_mem,
            handles: Vec::new(),
            windows: Box::new([std::ptr::null_mut(); 2]),
        })
    }

    /// Registers both buffers with `comm` as `reg` says. Window registration is collective:
    /// a thread driving several communicators calls this inside one ncclGroupStart/End.
    ///
    /// # Safety
    /// `comm` is a live communicator of `lib` on the buffers' device.
    pub unsafe fn register(
        &mut self,
        lib: &NcclLib,
        comm: RawComm,
        reg: Reg,
    ) -> Result<(), String> {
        let bufs = [(self.send, self.send_bytes), (self.recv, self.recv_bytes)];
        for (i, (p, bytes)) in bufs.into_iter().enumerate() {
            match reg {
                Reg::None => {}
                Reg::Register => {
                    let f = lib.comm_register.ok_or("no ncclCommRegister")?;
                    let mut h = std::ptr::null_mut();
                    // SAFETY: `p` holds `bytes` bytes for the communicator's lifetime.
                    lib.check("ncclCommRegister", unsafe {
                        f(comm, p as *mut c_void, bytes, &mut h)
                    })?;
                    self.handles.push(h);
                }
                Reg::Window => {
                    let f = lib
                        .comm_window_register
                        .ok_or("no ncclCommWindowRegister")?;
                    let slot: *mut RawWindow = &mut self.windows[i];
                    // SAFETY: `p` came from ncclMemAlloc with `bytes` bytes; `slot` is boxed,
                    // so it stays valid until ncclGroupEnd writes it.
                    lib.check("ncclCommWindowRegister", unsafe {
                        f(comm, p as *mut c_void, bytes, slot, NCCL_WIN_COLL_SYMMETRIC)
                    })?;
                }
            }
        }
        Ok(())
    }

    /// Undoes [`Buffers::register`] (before the communicator is destroyed).
    ///
    /// # Safety
    /// `comm` is the live communicator the buffers were registered with.
    pub unsafe fn deregister(&mut self, lib: &NcclLib, comm: RawComm) -> Result<(), String> {
        let mut result = Ok(());
        for h in self.handles.drain(..) {
            if let Some(f) = lib.comm_deregister {
                // SAFETY: `h` came from ncclCommRegister on `comm`.
                let r = lib.check("ncclCommDeregister", unsafe { f(comm, h) });
                result = result.and(r);
            }
        }
        for w in std::mem::replace(&mut *self.windows, [std::ptr::null_mut(); 2]) {
            if w.is_null() {
                continue;
            }
            if let Some(f) = lib.comm_window_deregister {
                // SAFETY: `w` came from ncclCommWindowRegister on `comm`.
                let r = lib.check("ncclCommWindowDeregister", unsafe { f(comm, w) });
                result = result.and(r);
            }
        }
        result
    }

    /// Frees both buffers.
    ///
    /// # Safety
    /// No queued work uses them; they were deregistered.
    pub unsafe fn free(self, lib: &NcclLib, dev: Device<'_>) {
        for (p, bytes) in [(self.send, self.send_bytes), (self.recv, self.recv_bytes)] {
            if p.is_null() {
                continue;
            }
            if self.nccl_mem {
                if let Some(f) = lib.mem_free {
                    // SAFETY: `p` came from ncclMemAlloc; forwarded from the caller.
                    unsafe { f(p as *mut c_void) };
                }
            } else {
                // SAFETY: `p` came from `dev.alloc(bytes)`; forwarded from the caller.
                unsafe { dev.free(p, bytes) };
            }
        }
    }
}
