//! Device memory through the VMM API (create / reserve / map / set-access), the allocation table
//! behind `pointer_info`, and sharing with other processes of the same host.
//!
//! Sharing: an allocation is created with a POSIX file-descriptor handle type and exported with
//! `cuMemExportToShareableHandle`. The exporting process keeps the descriptor open until the
//! memory is freed; an importer in another process of the same host (and pid namespace) copies it
//! with `pidfd_open` + `pidfd_getfd`, which needs ptrace permission over the exporter (same user
//! under Yama `ptrace_scope` 0, or `CAP_SYS_PTRACE`, as root has). Importers in the same process
//! use the address directly: VMM mappings are process wide.

use crate::call;
use crate::driver::{CUcontext, CUdevice, CUdeviceptr, CUmemGenericAllocationHandle, Shared};
use crate::transport::CudaApi;
use cudarc::driver::sys;
use oxccl_core::backend::{DevicePtr, PointerInfo, ShareableHandle};
use oxccl_core::error::{Error, Result};
use oxccl_device_transport::{DeviceApi, Handle, fd_of_process};
use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

/// Magic of our shareable handles ("OXCU").
const HANDLE_MAGIC: u32 = 0x5543_584f;
/// Bytes of a serialized handle: magic, pid, fd, base address, size, offset.
const HANDLE_LEN: usize = 4 + 4 + 4 + 8 + 8 + 8;
/// Magic of legacy IPC handles ("OXCI").
const IPC_MAGIC: u32 = 0x4943_584f;
/// Bytes of a serialized legacy handle: magic, pid, base, size, offset, `CUipcMemHandle`.
const IPC_HANDLE_LEN: usize = 4 + 4 + 8 + 8 + 8 + 64;

/// How an allocation was made, and so how it is shared and released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `cuMemCreate` + a mapping of ours.
    Vmm(CUmemGenericAllocationHandle),
    /// `cuMemAlloc`, shared with `cuIpcGetMemHandle`.
    Plain,
    /// Another process's `cuMemAlloc` memory opened with `cuIpcOpenMemHandle`.
    IpcOpened,
}

/// One mapping made by [`CudaApi::alloc_shared`] or [`CudaApi::import_mapped`].
#[derive(Debug)]
struct Alloc {
    size: usize,
    kind: Kind,
    device: i32,
    exportable: bool,
    /// Descriptor returned by the export, kept open for importers until the memory is freed.
    exported_fd: Option<i32>,
}

/// Per-process memory state shared by the backend and its transports.
pub struct Memory {
    /// The driver's handle of each device.
    pub(crate) devices: Vec<CUdevice>,
    /// Each device's primary context, retained on first use: retaining initialises it, which
    /// takes hundreds of MiB on the device, so a process must not do it for GPUs it never uses
    /// (one process per GPU would otherwise hold a context on every GPU).
    ctxs: Vec<OnceLock<Shared<CUcontext>>>,
    /// `peer[a][b]`: device `a` can access memory of device `b`.
    pub(crate) peer: Vec<Vec<bool>>,
    gran: Vec<OnceLock<usize>>,
    /// Per device: allocate through VMM (else `cuMemAlloc` + legacy IPC).
    vmm: Vec<bool>,
    allocs: Mutex<BTreeMap<DevicePtr, Alloc>>,
}

/// Makes a device's primary context current for a scope and restores the previous one.
pub struct CtxGuard {
    prev: CUcontext,
    changed: bool,
}

impl Drop for CtxGuard {
    fn drop(&mut self) {
        if self.changed {
            // SAFETY: `prev` was the current context (possibly null) when the guard was made.
            let _ = unsafe { sys::cuCtxSetCurrent(self.prev) };
        }
    }
}

fn prop(device: i32, handle: sys::CUmemAllocationHandleType) -> sys::CUmemAllocationProp {
    // SAFETY: the struct is plain C data for which all-zero is a valid (default) value.
    let mut p: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    p.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    p.requestedHandleTypes = handle;
    p.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = device;
    p
}

const FD_HANDLE: sys::CUmemAllocationHandleType =
    sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;

impl Memory {
    /// `vmm[d]`: device `d` supports VMM and the user did not turn it off.
    pub(crate) fn new(devices: Vec<CUdevice>, peer: Vec<Vec<bool>>, vmm: Vec<bool>) -> Memory {
        let gran = devices.iter().map(|_| OnceLock::new()).collect();
        Memory {
            ctxs: devices.iter().map(|_| OnceLock::new()).collect(),
            devices,
            peer,
            gran,
            vmm,
            allocs: Mutex::new(BTreeMap::new()),
        }
    }

    /// True when `device` allocates through VMM.
    pub fn uses_vmm(&self, device: i32) -> bool {
        usize::try_from(device)
            .ok()
            .and_then(|d| self.vmm.get(d).copied())
            .unwrap_or(false)
    }

    fn check_device(&self, device: i32) -> Result<usize> {
        usize::try_from(device)
            .ok()
            .filter(|&d| d < self.ctxs.len())
            .ok_or_else(|| {
                Error::arg(format!(
                    "device {device} does not exist ({} CUDA devices)",
                    self.ctxs.len()
                ))
            })
    }

    /// Device `d`'s primary context (`d` checked), retained (and so initialised) on first use.
    fn ctx(&self, d: usize) -> Result<CUcontext> {
        if let Some(c) = self.ctxs[d].get() {
            return Ok(c.0);
        }
        let mut c: CUcontext = std::ptr::null_mut();
        // SAFETY: retains the primary context of a valid device; never released (the backend
        // lives as long as the process). A racing thread's retain only bumps the count.
        unsafe { call!(cuDevicePrimaryCtxRetain(&mut c, self.devices[d])) }?;
        Ok(self.ctxs[d].get_or_init(|| Shared(c)).0)
    }

    /// Streaming multiprocessors of `device`.
    pub fn multiprocessors(&self, device: i32) -> Result<u32> {
        let n = self.attribute(
            device,
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        )?;
        Ok(n.max(1) as u32)
    }

    /// An integer attribute of `device`.
    pub fn attribute(&self, device: i32, attr: sys::CUdevice_attribute) -> Result<i32> {
        let d = self.check_device(device)?;
        let mut n = 0i32;
        // SAFETY: a valid device; writes an integer attribute.
        unsafe { call!(cuDeviceGetAttribute(&mut n, attr, self.devices[d])) }?;
        Ok(n)
    }

    /// The PCI bus id of `device` (`DDDD:BB:DD.F`).
    pub fn pci_bus_id(&self, device: i32) -> Result<String> {
        let d = self.check_device(device)?;
        let mut buf = [0 as std::ffi::c_char; 32];
        // SAFETY: a valid device; the driver writes a NUL-terminated id of at most `len` bytes.
        unsafe {
            call!(cuDeviceGetPCIBusId(
                buf.as_mut_ptr(),
                buf.len() as i32,
                self.devices[d]
            ))
        }?;
        // SAFETY: NUL-terminated within `buf` (the driver's contract, and the buffer is zeroed).
        let id = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
        Ok(id.to_string_lossy().into_owned())
    }

    /// Makes `device`'s primary context current until the guard drops.
    pub fn bind(&self, device: i32) -> Result<CtxGuard> {
        let d = self.check_device(device)?;
        // SAFETY: a primary context retained for the process lifetime.
        unsafe { self.bind_context(self.ctx(d)?) }
    }

    /// Makes `ctx` current on the calling thread until the guard drops.
    ///
    /// # Safety
    /// `ctx` is a live context.
    pub unsafe fn bind_context(&self, ctx: CUcontext) -> Result<CtxGuard> {
        let mut prev: CUcontext = std::ptr::null_mut();
        // SAFETY: writes the calling thread's current context into `prev`.
        unsafe { call!(cuCtxGetCurrent(&mut prev)) }?;
        if prev == ctx {
            return Ok(CtxGuard {
                prev,
                changed: false,
            });
        }
        // SAFETY: the caller passes a live context.
        unsafe { call!(cuCtxSetCurrent(ctx)) }?;
        Ok(CtxGuard {
            prev,
            changed: true,
        })
    }

    /// Minimum VMM granularity of `device`.
    pub fn granularity(&self, device: i32) -> Result<usize> {
        let d = self.check_device(device)?;
        if let Some(g) = self.gran[d].get() {
            return Ok(*g);
        }
        if !self.vmm[d] {
            // cuMemAlloc's own alignment; nothing is mapped by hand.
            return Ok(*self.gran[d].get_or_init(|| 512));
        }
        let p = prop(device, FD_HANDLE);
        let mut g = 0usize;
        // SAFETY: `p` is a valid allocation property; `g` receives the granularity.
        unsafe {
            call!(cuMemGetAllocationGranularity(
                &mut g,
                &p,
                sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM
            ))
        }?;
        let g = g.max(1);
        Ok(*self.gran[d].get_or_init(|| g))
    }

    /// Devices that may access memory of `owner`: itself and its P2P-capable peers.
    fn accessors(&self, owner: usize) -> Vec<i32> {
        (0..self.ctxs.len())
            .filter(|&a| a == owner || self.peer[a][owner])
            .map(|a| a as i32)
            .collect()
    }

    /// Lets kernels on `accessor` read and write every `cuMemAlloc` allocation of `owner`'s
    /// primary context (those of other libraries too, e.g. PyTorch's caching allocator).
    pub fn enable_peer_access(&self, accessor: i32, owner: i32) -> Result<()> {
        let owner_ctx = self.ctx(self.check_device(owner)?)?;
        let _g = self.bind(accessor)?;
        // SAFETY: enables access from `accessor`'s (current) context to `owner`'s primary context.
        let r = unsafe { sys::cuCtxEnablePeerAccess(owner_ctx, 0) };
        if r != sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
            crate::driver::check("cuCtxEnablePeerAccess", r)?;
        }
        Ok(())
    }

    /// Whether kernels on every P2P-capable device of this process can read and write `ptr`:
    /// our own allocations (mapped for those peers), and `cuMemAlloc` memory once peer access
    /// is enabled. Memory pools, other VMM mappings and host memory answer false.
    pub fn peer_accessible(&self, ptr: DevicePtr) -> bool {
        self.ours(ptr).is_some()
            || pointer_attr_u32(
                ptr,
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
            )
            .is_some_and(|legacy| legacy != 0)
    }

    /// The allocation of ours that contains `ptr`: its base, size and device.
    fn ours(&self, ptr: DevicePtr) -> Option<(DevicePtr, usize, i32)> {
        let table = self.table();
        let (&base, a) = table.range(..=ptr).next_back()?;
        (ptr < base + a.size as u64).then_some((base, a.size, a.device))
    }

    /// [`CudaApi::alloc_shared`] without VMM: `cuMemAlloc`, with peer access enabled from every P2P-capable
    /// device of the process (VMM grants it per mapping instead).
    fn alloc_plain(&self, d: usize, size: usize) -> Result<DevicePtr> {
        let device = d as i32;
        for a in self.accessors(d).into_iter().filter(|&a| a != device) {
            self.enable_peer_access(a, device)?;
        }
        let _g = self.bind(device)?;
        let size = size.max(1).next_multiple_of(512);
        let mut p: CUdeviceptr = 0;
        // SAFETY: allocates in `device`'s (current) context; `p` receives the address.
        unsafe { call!(cuMemAlloc_v2(&mut p, size)) }?;
        self.table().insert(
            p,
            Alloc {
                size,
                kind: Kind::Plain,
                device,
                exportable: true,
                exported_fd: None,
            },
        );
        Ok(p)
    }

    fn table(&self) -> std::sync::MutexGuard<'_, BTreeMap<DevicePtr, Alloc>> {
        self.allocs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `mem_free`.
    ///
    /// # Safety
    /// `ptr` came from `CudaApi::alloc_shared` or `CudaApi::import_mapped` (the backend's
    /// `mem_alloc` and `import_handle`) and nothing uses it any more.
    pub unsafe fn free(&self, ptr: DevicePtr) -> Result<()> {
        let a = self
            .table()
            .remove(&ptr)
            .ok_or_else(|| Error::arg(format!("{ptr:#x} was not allocated by ncclMemAlloc")))?;
        let _g = self.bind(a.device.max(0))?;
        let handle = match a.kind {
            // SAFETY: the caller guarantees nothing uses the memory; it came from cuMemAlloc.
            Kind::Plain => return unsafe { call!(cuMemFree_v2(ptr)) },
            // SAFETY: the caller guarantees nothing uses the mapping; opened by cuIpcOpenMemHandle.
            Kind::IpcOpened => return unsafe { call!(cuIpcCloseMemHandle(ptr)) },
            Kind::Vmm(h) => h,
        };
        // SAFETY: the caller guarantees nothing uses the mapping; it was made with these sizes.
        let r1 = unsafe { call!(cuMemUnmap(ptr, a.size)) };
        // SAFETY: the range was reserved with this size and is unmapped now.
        let r2 = unsafe { call!(cuMemAddressFree(ptr, a.size)) };
        // SAFETY: the handle's only mapping is gone.
        let r3 = unsafe { call!(cuMemRelease(handle)) };
        if let Some(fd) = a.exported_fd {
            // SAFETY: the descriptor came from the export and is owned by the table.
            unsafe { libc::close(fd) };
        }
        r1.and(r2).and(r3)
    }

    /// `export_handle`: a handle naming this process, the allocation's descriptor and address.
    pub fn export(&self, ptr: DevicePtr) -> Result<ShareableHandle> {
        let mut t = self.table();
        let (&base, a) = t
            .range_mut(..=ptr)
            .next_back()
            .filter(|(b, a)| ptr < **b + a.size as u64)
            .ok_or_else(|| Error::arg(format!("{ptr:#x} was not allocated by oxccl")))?;
        if !a.exportable {
            return Err(Error::usage(format!(
                "memory at {ptr:#x} cannot be shared with other processes (the driver refused a POSIX file descriptor handle)"
            )));
        }
        let handle = match a.kind {
            Kind::Vmm(h) => h,
            Kind::Plain => {
                let mut ipc = sys::CUipcMemHandle_st { reserved: [0; 64] };
                // SAFETY: `base` is the start of a live cuMemAlloc allocation.
                unsafe { call!(cuIpcGetMemHandle(&mut ipc, base)) }?;
                let raw: Vec<u8> = ipc.reserved.iter().map(|&c| c as u8).collect();
                return Ok(ipc_handle(
                    std::process::id(),
                    base,
                    a.size,
                    ptr - base,
                    &raw,
                ));
            }
            Kind::IpcOpened => {
                return Err(Error::usage(format!(
                    "memory at {ptr:#x} belongs to another process and cannot be re-exported"
                )));
            }
        };
        let fd = match a.exported_fd {
            Some(fd) => fd,
            None => {
                let mut fd: libc::c_int = -1;
                // SAFETY: `fd` receives the descriptor for the live allocation `a.handle`.
                unsafe {
                    call!(cuMemExportToShareableHandle(
                        (&mut fd as *mut libc::c_int).cast(),
                        handle,
                        FD_HANDLE,
                        0
                    ))
                }?;
                a.exported_fd = Some(fd);
                fd
            }
        };
        let mut h = Vec::with_capacity(HANDLE_LEN);
        h.extend_from_slice(&HANDLE_MAGIC.to_le_bytes());
        h.extend_from_slice(&std::process::id().to_le_bytes());
        h.extend_from_slice(&fd.to_le_bytes());
        h.extend_from_slice(&base.to_le_bytes());
        h.extend_from_slice(&(a.size as u64).to_le_bytes());
        h.extend_from_slice(&(ptr - base).to_le_bytes());
        Ok(ShareableHandle(h))
    }

    /// [`CudaApi::import_mapped`] of a legacy handle: `cuIpcOpenMemHandle` (same process: the address).
    fn import_ipc(&self, h: &IpcHandle, device: i32) -> Result<DevicePtr> {
        if h.pid == std::process::id() {
            return Ok(h.base + h.offset);
        }
        let _g = self.bind(device)?;
        let mut raw = sys::CUipcMemHandle_st { reserved: [0; 64] };
        for (d, s) in raw.reserved.iter_mut().zip(h.raw.iter()) {
            *d = *s as std::ffi::c_char;
        }
        let mut p: CUdeviceptr = 0;
        // SAFETY: `raw` is a peer's handle of a live allocation; `p` receives our mapping.
        unsafe {
            call!(cuIpcOpenMemHandle_v2(
                &mut p,
                raw,
                sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32
            ))
        }?;
        let size = usize::try_from(h.size).map_err(|_| Error::arg("memory handle size"))?;
        self.table().insert(
            p,
            Alloc {
                size,
                kind: Kind::IpcOpened,
                device,
                exportable: false,
                exported_fd: None,
            },
        );
        Ok(p + h.offset)
    }

    /// The allocation behind one rank's handle of a flat range (`map_flat`), with a reference
    /// of its own, and its size (at most `stride`). Allocations of this process are taken by
    /// address (`cuMemRetainAllocationHandle`), those of other processes through their
    /// descriptors.
    pub(crate) fn flat_allocation(
        &self,
        h: &ShareableHandle,
        stride: usize,
    ) -> Result<(CUmemGenericAllocationHandle, usize)> {
        let v = VmmHandle::parse(&h.0).ok_or_else(|| {
            Error::usage(
                "a rank's symmetric window is not VMM memory; allocate it with ncclMemAlloc",
            )
        })?;
        let size = usize::try_from(v.size)
            .ok()
            .filter(|&s| s <= stride)
            .ok_or_else(|| Error::arg("a symmetric window's allocation exceeds the stride"))?;
        let alloc = if v.pid == std::process::id() {
            let mut a: CUmemGenericAllocationHandle = 0;
            // SAFETY: `v.base` is the start of a live VMM mapping of this process.
            unsafe {
                call!(cuMemRetainAllocationHandle(
                    &mut a,
                    v.base as usize as *mut std::ffi::c_void
                ))
            }?;
            a
        } else {
            import_allocation(&v)?
        };
        Ok((alloc, size))
    }

    /// `pointer_info`: our table first, then the driver's attributes.
    pub fn pointer_info(&self, ptr: DevicePtr) -> Result<PointerInfo> {
        if let Some((base, size, device)) = self.ours(ptr) {
            return Ok(PointerInfo {
                on_device: true,
                device,
                base,
                size,
            });
        }
        let mtype = pointer_attr_u32(
            ptr,
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        );
        if mtype != Some(sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32) {
            return Ok(PointerInfo {
                on_device: false,
                device: -1,
                base: ptr,
                size: 0,
            });
        }
        let mut dev: i32 = -1;
        // SAFETY: the attribute is a 32-bit device ordinal written into `dev`.
        unsafe {
            call!(cuPointerGetAttribute(
                (&mut dev as *mut i32).cast(),
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                ptr
            ))
        }?;
        let (mut base, mut size): (CUdeviceptr, usize) = (0, 0);
        // SAFETY: writes the range of the allocation containing `ptr`.
        unsafe { call!(cuMemGetAddressRange_v2(&mut base, &mut size, ptr)) }?;
        Ok(PointerInfo {
            on_device: true,
            device: dev,
            base,
            size,
        })
    }
}

/// Allocation and import of shareable memory, mapped by the mapping written once for both
/// vendors (`DeviceApi::va_map_new`).
impl CudaApi {
    /// `mem_alloc`: shareable device memory on `device`, accessible to its P2P peers.
    pub(crate) fn alloc_shared(&self, device: i32, size: usize) -> Result<DevicePtr> {
        let d = self.mem.check_device(device)?;
        if !self.mem.vmm[d] {
            return self.mem.alloc_plain(d, size);
        }
        let _g = self.mem.bind(device)?;
        let gran = self.mem.granularity(device)?;
        let size = size.max(1).next_multiple_of(gran);
        let mut handle: CUmemGenericAllocationHandle = 0;
        let mut exportable = true;
        let p = prop(device, FD_HANDLE);
        // SAFETY: `p` describes pinned memory on `device`; `handle` receives the allocation.
        if unsafe { call!(cuMemCreate(&mut handle, size, &p, 0)) }.is_err() {
            exportable = false;
            let p = prop(
                device,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
            );
            // SAFETY: as above, without a shareable handle type.
            unsafe { call!(cuMemCreate(&mut handle, size, &p, 0)) }?;
        }
        // SAFETY: `handle` is a live allocation of `size` bytes, a granularity multiple, used
        // by nothing else.
        unsafe {
            self.map_tracked(
                handle,
                size,
                gran,
                &self.mem.accessors(d),
                device,
                exportable,
            )
        }
    }

    /// Maps the allocation `handle` of `size` bytes (a multiple of `gran`) for `accessors` and
    /// records it as ours; releases the handle when the mapping fails.
    ///
    /// # Safety
    /// `handle` is a live allocation of `size` bytes that nothing else uses or releases.
    unsafe fn map_tracked(
        &self,
        handle: CUmemGenericAllocationHandle,
        size: usize,
        gran: usize,
        accessors: &[i32],
        device: i32,
        exportable: bool,
    ) -> Result<DevicePtr> {
        // SAFETY: the caller's allocation of `size` bytes, a granularity multiple.
        let va = match unsafe { self.va_map_new(handle as Handle, size, gran, accessors) } {
            Ok(va) => va,
            Err(e) => {
                // SAFETY: the handle is unused after the failed mapping.
                let _ = unsafe { sys::cuMemRelease(handle) };
                return Err(e);
            }
        };
        self.mem.table().insert(
            va,
            Alloc {
                size,
                kind: Kind::Vmm(handle),
                device,
                exportable,
                exported_fd: None,
            },
        );
        Ok(va)
    }

    /// `import_handle`: maps a peer's allocation for `device` (same process: its address).
    pub(crate) fn import_mapped(&self, handle: &ShareableHandle, device: i32) -> Result<DevicePtr> {
        let b = &handle.0;
        if let Some(ipc) = parse_ipc_handle(b) {
            return self.mem.import_ipc(&ipc, device);
        }
        let v = VmmHandle::parse(b).ok_or_else(|| Error::arg("malformed CUDA memory handle"))?;
        let (size, off) = (v.size, v.offset);
        if v.pid == std::process::id() {
            return Ok(v.base + off);
        }
        let size = usize::try_from(size).map_err(|_| Error::arg("memory handle size"))?;
        let _g = self.mem.bind(device)?;
        let h = import_allocation(&v)?;
        let gran = self.mem.granularity(device)?;
        // SAFETY: `h` is a live imported allocation of `size` bytes, a granularity multiple,
        // used by nothing else.
        let va = unsafe { self.map_tracked(h, size, gran, &[device], device, false) }?;
        Ok(va + off)
    }
}

/// Read and write access for `device`.
pub(crate) fn read_write(device: i32) -> sys::CUmemAccessDesc {
    // SAFETY: plain C data; all-zero is valid.
    let mut a: sys::CUmemAccessDesc = unsafe { std::mem::zeroed() };
    a.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = device;
    a.flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    a
}

/// A parsed handle of a VMM allocation (see [`Memory::export`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct VmmHandle {
    pid: u32,
    fd: i32,
    base: u64,
    size: u64,
    offset: u64,
}

impl VmmHandle {
    /// `None` for anything but an export's bytes.
    fn parse(b: &[u8]) -> Option<VmmHandle> {
        if b.len() != HANDLE_LEN || b[0..4] != HANDLE_MAGIC.to_le_bytes() {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Some(VmmHandle {
            pid: u32_at(4),
            fd: u32_at(8) as i32,
            base: u64_at(12),
            size: u64_at(20),
            offset: u64_at(28),
        })
    }
}

/// The allocation another process exported as `v`, imported through its descriptor.
fn import_allocation(v: &VmmHandle) -> Result<CUmemGenericAllocationHandle> {
    let local_fd = fetch_fd(v.pid, v.fd)?;
    let mut h: CUmemGenericAllocationHandle = 0;
    // SAFETY: `local_fd` is a descriptor of an exported allocation; for POSIX descriptors
    // the driver takes the descriptor value itself in the pointer argument.
    let r = unsafe {
        call!(cuMemImportFromShareableHandle(
            &mut h,
            local_fd as usize as *mut std::ffi::c_void,
            FD_HANDLE
        ))
    };
    // SAFETY: our copy of the descriptor is no longer needed once imported (or on failure).
    unsafe { libc::close(local_fd) };
    r.map(|()| h)
}

/// Copies descriptor `fd` of process `pid` into this process (`pidfd_open` + `pidfd_getfd`).
fn fetch_fd(pid: u32, fd: i32) -> Result<i32> {
    fd_of_process(pid, fd).map_err(|e| {
        let what = match e.call {
            "pidfd_getfd" => "pidfd_getfd (needs ptrace permission over the peer)",
            call => call,
        };
        Error::System {
            context: format!("{what} (fetching memory descriptor {fd} of process {pid})"),
            message: e.os.to_string(),
        }
    })
}

/// A parsed legacy (cuIpc) handle.
#[derive(Debug, Clone, PartialEq, Eq)]
struct IpcHandle {
    pid: u32,
    base: u64,
    size: u64,
    offset: u64,
    raw: Vec<u8>,
}

/// Serializes a legacy handle: magic, pid, base, size, offset, the driver's 64 bytes.
fn ipc_handle(pid: u32, base: u64, size: usize, offset: u64, raw: &[u8]) -> ShareableHandle {
    let mut h = Vec::with_capacity(IPC_HANDLE_LEN);
    h.extend_from_slice(&IPC_MAGIC.to_le_bytes());
    h.extend_from_slice(&pid.to_le_bytes());
    h.extend_from_slice(&base.to_le_bytes());
    h.extend_from_slice(&(size as u64).to_le_bytes());
    h.extend_from_slice(&offset.to_le_bytes());
    h.extend_from_slice(raw);
    ShareableHandle(h)
}

/// Parses [`ipc_handle`]'s bytes; `None` for anything else.
fn parse_ipc_handle(b: &[u8]) -> Option<IpcHandle> {
    if b.len() != IPC_HANDLE_LEN || b[0..4] != IPC_MAGIC.to_le_bytes() {
        return None;
    }
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    Some(IpcHandle {
        pid: u32::from_le_bytes(b[4..8].try_into().expect("4 bytes")),
        base: u64_at(8),
        size: u64_at(16),
        offset: u64_at(24),
        raw: b[32..].to_vec(),
    })
}

/// A 32-bit attribute of `ptr`, or `None` where the driver has none for it (memory CUDA does not
/// know, such as plain host memory).
fn pointer_attr_u32(ptr: DevicePtr, attr: sys::CUpointer_attribute) -> Option<u32> {
    let mut v: u32 = 0;
    // SAFETY: every attribute asked for here is 32 bits wide, written into `v`.
    let r = unsafe { sys::cuPointerGetAttribute((&mut v as *mut u32).cast(), attr, ptr) };
    (r == sys::CUresult::CUDA_SUCCESS).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_handles_round_trip_and_never_pass_for_vmm_ones() {
        let raw: Vec<u8> = (0..64).collect();
        let h = ipc_handle(77, 0x7f00_0000_0000, 1 << 21, 4096, &raw);
        assert_eq!(h.0.len(), IPC_HANDLE_LEN);
        assert_eq!(
            parse_ipc_handle(&h.0),
            Some(IpcHandle {
                pid: 77,
                base: 0x7f00_0000_0000,
                size: 1 << 21,
                offset: 4096,
                raw
            })
        );
        assert_ne!(IPC_HANDLE_LEN, HANDLE_LEN);
        let mut vmm = HANDLE_MAGIC.to_le_bytes().to_vec();
        vmm.resize(HANDLE_LEN, 0);
        assert_eq!(parse_ipc_handle(&vmm), None);
        assert_eq!(parse_ipc_handle(&h.0[..IPC_HANDLE_LEN - 1]), None);
    }
}
