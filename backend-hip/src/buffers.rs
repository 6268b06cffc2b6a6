//! Plain device buffers, synchronous copies, streams and graph capture on a chosen device, for
//! tests and tools (the GPU check drives the HIP backend with them, as it drives the CUDA backend
//! with its own).

use crate::runtime::hip_call;
use crate::{HipApi, HipStream, sys, with_device};
use oxccl_core::backend::DevicePtr;
use oxccl_core::error::Result;
use std::ffi::c_void;

impl HipApi {
    /// `hipMalloc` on `device` (plain device memory).
    pub fn plain_alloc(&self, device: i32, bytes: usize) -> Result<DevicePtr> {
        with_device(self, device, || {
            let mut p: *mut c_void = std::ptr::null_mut();
            // SAFETY: `p` is a valid out-pointer.
            unsafe { hip_call!(self.hip, hipMalloc(&mut p, bytes.max(1))) }?;
            Ok(p as DevicePtr)
        })
    }

    /// Frees [`HipApi::plain_alloc`] memory.
    ///
    /// # Safety
    /// `ptr` came from `plain_alloc` and no work uses it.
    pub unsafe fn plain_free(&self, device: i32, ptr: DevicePtr) -> Result<()> {
        with_device(self, device, || {
            // SAFETY: forwarded from the caller.
            unsafe { hip_call!(self.hip, hipFree(ptr as *mut c_void)) }
        })
    }

    /// Copies `src` to memory of `device` at `dst` and waits for the copy.
    ///
    /// # Safety
    /// `dst` is device memory of at least `src.len()` bytes.
    pub unsafe fn copy_to_device(&self, device: i32, dst: DevicePtr, src: &[u8]) -> Result<()> {
        // SAFETY: forwarded from the caller; `src` outlives the synchronised copy.
        unsafe { self.copy_and_wait(device, dst as *mut c_void, src.as_ptr().cast(), src.len()) }
    }

    /// Copies memory of `device` at `src` into `dst` and waits for the copy.
    ///
    /// # Safety
    /// `src` is device memory of at least `dst.len()` bytes.
    pub unsafe fn copy_from_device(
        &self,
        device: i32,
        dst: &mut [u8],
        src: DevicePtr,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller; `dst` outlives the synchronised copy.
        unsafe {
            self.copy_and_wait(
                device,
                dst.as_mut_ptr().cast(),
                src as *const c_void,
                dst.len(),
            )
        }
    }

    /// A copy on `device`'s null stream, which is then synchronised: the copy has landed when
    /// this returns, whatever kind of host memory took part.
    ///
    /// # Safety
    /// Both ranges hold `bytes` bytes.
    unsafe fn copy_and_wait(
        &self,
        device: i32,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
    ) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        with_device(self, device, || {
            // SAFETY: the caller guarantees both ranges; the null stream is synchronised before
            // the host memory can go away.
            unsafe {
                hip_call!(
                    self.hip,
                    hipMemcpyAsync(
                        dst,
                        src,
                        bytes,
                        sys::hipMemcpyKind::hipMemcpyDefault,
                        std::ptr::null_mut()
                    )
                )?;
                hip_call!(self.hip, hipStreamSynchronize(std::ptr::null_mut()))
            }
        })
    }

    /// A new non-blocking stream on `device`.
    pub fn stream_on(&self, device: i32) -> Result<HipStream> {
        with_device(self, device, || self.stream_create())
    }

    /// Starts capturing `stream` into a graph (`thread_local`: only this thread's calls are
    /// restricted while it captures; else every thread's).
    pub fn begin_capture(&self, device: i32, stream: &HipStream, thread_local: bool) -> Result<()> {
        let mode = if thread_local {
            sys::hipStreamCaptureMode::hipStreamCaptureModeThreadLocal
        } else {
            sys::hipStreamCaptureMode::hipStreamCaptureModeGlobal
        };
        with_device(self, device, || {
            // SAFETY: `stream` is a live stream of this runtime; the mode is a defined value.
            unsafe { hip_call!(self.hip, hipStreamBeginCapture(stream.raw(), mode)) }
        })
    }

    /// Ends the capture of `stream` (also after a failed capture) and returns the graph
    /// (`hipGraph_t`; 0 when the runtime returned none).
    pub fn end_capture(&self, device: i32, stream: &HipStream) -> Result<usize> {
        with_device(self, device, || {
            let mut g: sys::hipGraph_t = std::ptr::null_mut();
            // SAFETY: `stream` is capturing; `g` is a valid out-pointer.
            unsafe { hip_call!(self.hip, hipStreamEndCapture(stream.raw(), &mut g)) }?;
            Ok(g as usize)
        })
    }

    /// Nodes of a captured graph.
    pub fn graph_nodes(&self, graph: usize) -> Result<usize> {
        let mut n = 0usize;
        // SAFETY: `graph` is a live graph of this runtime; only the count is written.
        unsafe {
            hip_call!(
                self.hip,
                hipGraphGetNodes(graph as sys::hipGraph_t, std::ptr::null_mut(), &mut n)
            )
        }?;
        Ok(n)
    }

    /// Instantiates a captured graph; its executable (`hipGraphExec_t`).
    pub fn graph_instantiate(&self, device: i32, graph: usize) -> Result<usize> {
        with_device(self, device, || {
            let mut e: sys::hipGraphExec_t = std::ptr::null_mut();
            // SAFETY: `graph` is a complete captured graph; no error node or log is asked for.
            unsafe {
                hip_call!(
                    self.hip,
                    hipGraphInstantiate(
                        &mut e,
                        graph as sys::hipGraph_t,
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                        0
                    )
                )
            }?;
            Ok(e as usize)
        })
    }

    /// Replays an instantiated graph on `stream`.
    ///
    /// # Safety
    /// `exec` came from [`HipApi::graph_instantiate`] and everything the graph uses is live.
    pub unsafe fn graph_launch(&self, device: i32, exec: usize, stream: &HipStream) -> Result<()> {
        with_device(self, device, || {
            // SAFETY: forwarded from the caller; the stream is live.
            unsafe {
                hip_call!(
                    self.hip,
                    hipGraphLaunch(exec as sys::hipGraphExec_t, stream.raw())
                )
            }
        })
    }

    /// Destroys a graph and its executable (0s are skipped).
    ///
    /// # Safety
    /// Neither is launched again.
    pub unsafe fn graph_destroy(&self, device: i32, graph: usize, exec: usize) {
        let _ = with_device(self, device, || {
            if exec != 0 {
                // SAFETY: the caller's executable, launched no more (a running replay finishes
                // first).
                let _ = unsafe {
                    hip_call!(self.hip, hipGraphExecDestroy(exec as sys::hipGraphExec_t))
                };
            }
            if graph != 0 {
                // SAFETY: the caller's graph; its executable is destroyed.
                let _ = unsafe { hip_call!(self.hip, hipGraphDestroy(graph as sys::hipGraph_t)) };
            }
            Ok(())
        });
    }
}
