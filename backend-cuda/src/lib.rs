//! oxccl backend for NVIDIA GPUs: the CUDA driver API, loaded at run time through cudarc.
//!
//! `CudaBackend::load` fails cleanly (no panic) where no driver or no device exists. Memory is
//! VMM memory shareable with peers ([`memory`]), connections are P2P FIFOs in peer-mapped memory
//! ([`transport`]), and operations run as the kernels of `kernels/common` embedded as a fatbin
//! ([`kernels`]). [`CudaBackend`] is the GPU backend written once in `oxccl-device-transport`
//! over [`CudaApi`], this crate's runtime calls.

pub mod driver;
pub mod kernels;
pub mod memory;
pub mod modules;
pub mod transport;

use crate::driver::{CUdevice, CUevent, Shared};
use crate::memory::Memory;
use crate::modules::Modules;
use cudarc::driver::sys;
pub use kernels::{FifoGeometry, MAX_CHANNELS};
use oxccl_core::backend::DevicePtr;
use oxccl_core::config::{self, vars};
use oxccl_core::error::{Error, Result};
use oxccl_device_transport::{DeviceApi, GpuBackend};
use std::sync::Arc;
pub use transport::{CudaApi, CudaStream, CudaTransport};

/// The CUDA backend: one primary context per device, retained for the process lifetime (the
/// backend written once over [`CudaApi`]).
pub type CudaBackend = GpuBackend<CudaApi>;

/// A CUDA event (timing disabled), destroyed on drop.
pub struct CudaEvent(Shared<CUevent>);

impl Drop for CudaEvent {
    fn drop(&mut self) {
        // SAFETY: the event is ours; the driver defers destruction until recorded work is done.
        let _ = unsafe { sys::cuEventDestroy_v2(self.0.0) };
    }
}

impl CudaApi {
    /// Loads the driver, initialises it and retains every device's primary context.
    ///
    /// Fails with an error (never a panic) when no driver library exists or it has no device.
    fn open() -> Result<CudaApi> {
        if !driver::driver_present() {
            return Err(Error::Backend {
                api: "dlopen(libcuda.so)",
                code: 0,
                detail: "no CUDA driver".into(),
            });
        }
        // SAFETY: first driver call; the library is present.
        unsafe { call!(cuInit(0)) }?;
        let mut n = 0i32;
        // SAFETY: writes the device count.
        unsafe { call!(cuDeviceGetCount(&mut n)) }?;
        let mut devices = Vec::new();
        for i in 0..n {
            let mut d: CUdevice = 0;
            // SAFETY: `i` is below the device count.
            unsafe { call!(cuDeviceGet(&mut d, i)) }?;
            devices.push(d);
        }
        let mut peer = vec![vec![false; devices.len()]; devices.len()];
        for (a, &da) in devices.iter().enumerate() {
            for (b, &db) in devices.iter().enumerate() {
                if a != b {
                    let mut can = 0i32;
                    // SAFETY: both devices are valid.
                    unsafe { call!(cuDeviceCanAccessPeer(&mut can, da, db)) }?;
                    peer[a][b] = can != 0;
                }
            }
        }
        // NCCL's switch for its cuMem* path; 0 selects cuMemAlloc + legacy IPC here too.
        let cumem_off = !config::get(&vars::NCCL_CUMEM_ENABLE);
        let mut vmm = Vec::with_capacity(devices.len());
        for &d in &devices {
            let mut supported = 0i32;
            // SAFETY: `d` is a valid device; writes an integer attribute.
            unsafe {
                call!(cuDeviceGetAttribute(
                    &mut supported,
                    sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED,
                    d
                ))
            }?;
            vmm.push(supported != 0 && !cumem_off);
        }
        Ok(CudaApi {
            mem: Arc::new(Memory::new(devices, peer, vmm)),
            modules: Arc::new(Modules::default()),
        })
    }

    /// Memory management, for tests and tools that need device buffers.
    pub fn memory(&self) -> &Memory {
        &self.mem
    }

    /// Copies `src` to memory of `device` at `dst` (synchronous; for tests and tools).
    ///
    /// # Safety
    /// `dst` is device memory of at least `src.len()` bytes.
    pub unsafe fn copy_to_device(&self, device: i32, dst: DevicePtr, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        let _g = self.mem.bind(device)?;
        // SAFETY: the caller guarantees `dst` holds `src.len()` bytes; `device`'s context is
        // bound.
        unsafe { crate::driver::copy_h2d_complete(dst, src) }
    }

    /// Copies memory of `device` at `src` into `dst` (synchronous; for tests and tools).
    ///
    /// # Safety
    /// `src` is device memory of at least `dst.len()` bytes.
    pub unsafe fn copy_from_device(
        &self,
        device: i32,
        dst: &mut [u8],
        src: DevicePtr,
    ) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        let _g = self.mem.bind(device)?;
        // SAFETY: the caller guarantees `src` holds `dst.len()` bytes.
        unsafe { call!(cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), src, dst.len())) }
    }

    /// `cuMemAlloc` on `device` (plain device memory, as `cudaMalloc`; for tests and tools).
    pub fn plain_alloc(&self, device: i32, bytes: usize) -> Result<DevicePtr> {
        let _g = self.mem.bind(device)?;
        let mut p = 0;
        // SAFETY: allocates in `device`'s context.
        unsafe { call!(cuMemAlloc_v2(&mut p, bytes.max(1))) }?;
        Ok(p)
    }

    /// Frees [`CudaApi::plain_alloc`] memory.
    ///
    /// # Safety
    /// `ptr` came from `plain_alloc` and no work uses it.
    pub unsafe fn plain_free(&self, device: i32, ptr: DevicePtr) -> Result<()> {
        let _g = self.mem.bind(device)?;
        // SAFETY: forwarded from the caller.
        unsafe { call!(cuMemFree_v2(ptr)) }
    }

    /// A new non-blocking stream on `device` (for tests and tools).
    pub fn stream_create(&self, device: i32) -> Result<CudaStream> {
        let _g = self.mem.bind(device)?;
        // The transport's own set-up streams are made the same way.
        let s = DeviceApi::stream_create(self)?;
        Ok(CudaStream(Shared(s as sys::CUstream)))
    }
}
