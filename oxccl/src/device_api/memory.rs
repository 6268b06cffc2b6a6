//! The device API's memory on one communicator: the window descriptors device code reads
//! (`ncclWindow_vidmem`), the window table `ncclFindWindow` searches, and the resource buffers
//! of device communicators. The C layer keeps one per `ncclComm_t`, the safe API one per
//! `Communicator`.
//!
//! Descriptors and tables live in one slab of device memory per communicator, cut into 128-byte
//! slots (a descriptor takes one, a table of 32 windows seven). Windows are mapped flat by core
//! (`Communicator::map_flat`): LSA rank i's copy at `lsaFlatBase + i * stride4G * 4 GiB`, which
//! is the arithmetic NCCL's inline device functions do.

use super::gin::{GinIds, GinState};
use super::layout::{
    NCCL_GIN_MAX_CONTEXTS, ncclDevCommWindowEntry, ncclDevCommWindowTable, ncclWindow_vidmem,
};
use crate::dispatch::{AnyBackend, AnyComm, CommOps, RuntimeBackend};
use oxccl_core::backend::DevicePtr;
use oxccl_core::comm::symmetric::{FLAT_STRIDE_UNIT, FlatWindow, LsaTeam};
use oxccl_core::{Error, Result};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

/// Bytes of one slab slot (NCCL's resource handles count 128-byte units too).
const SLOT: usize = 128;
/// Bytes of a communicator's slab: 16384 slots.
const SLAB_BYTES: usize = 2 << 20;
/// Windows one table holds.
const TABLE_ENTRIES: usize = 32;

/// Device memory handed out in runs of slots.
struct Slab {
    base: DevicePtr,
    used: Vec<bool>,
}

impl Slab {
    fn new(backend: &AnyBackend, device: i32) -> Result<Slab> {
        let base = backend.mem_alloc(device, SLAB_BYTES)?;
        Ok(Slab {
            base,
            used: vec![false; SLAB_BYTES / SLOT],
        })
    }

    /// The first free run of slots that holds `bytes`.
    fn take(&mut self, bytes: usize) -> Result<DevicePtr> {
        let n = bytes.div_ceil(SLOT);
        let mut run = 0;
        for i in 0..self.used.len() {
            run = if self.used[i] { 0 } else { run + 1 };
            if run == n {
                let first = i + 1 - n;
                self.used[first..=i].fill(true);
                return Ok(self.base + (first * SLOT) as u64);
            }
        }
        Err(Error::usage(format!(
            "too many windows on this communicator: their descriptors fill the {} KiB the device API reserves per communicator",
            SLAB_BYTES >> 10
        )))
    }

    fn give(&mut self, at: DevicePtr, bytes: usize) {
        let first = ((at - self.base) as usize) / SLOT;
        self.used[first..first + bytes.div_ceil(SLOT)].fill(false);
    }
}

/// A window of `ncclCommWindowRegister`; its descriptor's address is the `ncclWindow_t`.
#[derive(Debug)]
pub struct RegisteredWindow {
    /// The user's buffer.
    pub user_ptr: usize,
    /// Its size in bytes.
    pub size: usize,
    /// `winFlags` given at registration.
    pub flags: i32,
    /// The flat mapping (none on backends without one).
    flat: Option<FlatWindow>,
    /// Its index in the window table.
    entry: usize,
    /// Its GIN handle (`ginWins[]`): the same on every rank, as registrations are collective.
    gin_handle: u64,
}

/// Resources of one device communicator.
struct DevCommResources {
    /// The resource buffers' memory (`ncclMemAlloc`).
    memory: DevicePtr,
    /// Its bytes.
    bytes: usize,
    flat: Option<FlatWindow>,
    /// Its GIN handle, as a window's.
    gin_handle: u64,
    /// The signal and counter ids GIN gave it.
    gin_ids: Option<GinIds>,
}

/// What the device API holds on one communicator.
pub struct DeviceApi {
    comm: AnyComm,
    backend: Arc<AnyBackend>,
    device: i32,
    lsa: LsaTeam,
    slab: Slab,
    /// Device addresses of the window tables, each linked to the next.
    tables: Vec<DevicePtr>,
    /// Which table entries hold a window.
    entries: Vec<bool>,
    /// Windows by descriptor address (boxed: `winHost` points at them).
    windows: HashMap<DevicePtr, Box<RegisteredWindow>>,
    /// Device communicators by resource descriptor address.
    dev_comms: HashMap<DevicePtr, DevCommResources>,
    /// The GIN handle the next window or resource buffer gets.
    next_gin_handle: u64,
    /// GIN, once a device communicator needed it.
    gin: Option<GinState>,
}

/// Writes `value`'s bytes to device address `at`.
fn write<T: Copy>(backend: &AnyBackend, device: i32, at: DevicePtr, value: &T) -> Result<()> {
    // SAFETY: `T` is plain C data (`repr(C)`, `Copy`), viewed as its bytes.
    let bytes =
        unsafe { std::slice::from_raw_parts((value as *const T).cast::<u8>(), size_of::<T>()) };
    // SAFETY: `at` is slab or resource memory of `device` holding `size_of::<T>()` bytes.
    unsafe { backend.copy_to_device(device, at, bytes) }
}

impl RegisteredWindow {
    /// Its flat mapping (none on backends without one).
    pub fn flat(&self) -> Option<&FlatWindow> {
        self.flat.as_ref()
    }
}

impl DeviceApi {
    /// The device API's state on `comm` (whose memory `backend` allocates), with a fresh slab.
    pub fn new(comm: AnyComm, backend: Arc<AnyBackend>) -> Result<DeviceApi> {
        let device = comm.device();
        Ok(DeviceApi {
            slab: Slab::new(&backend, device)?,
            backend,
            device,
            lsa: comm.lsa_team()?,
            comm,
            tables: Vec::new(),
            entries: Vec::new(),
            windows: HashMap::new(),
            dev_comms: HashMap::new(),
            next_gin_handle: 1,
            gin: None,
        })
    }

    /// The first window table (made on first use): what `ncclDevComm.windowTable` points at.
    pub fn window_table(&mut self) -> Result<DevicePtr> {
        if self.tables.is_empty() {
            self.add_table()?;
        }
        Ok(self.tables[0])
    }

    fn add_table(&mut self) -> Result<()> {
        let at = self.slab.take(size_of::<ncclDevCommWindowTable>())?;
        let empty = ncclDevCommWindowTable {
            entries: [ncclDevCommWindowEntry::default(); TABLE_ENTRIES],
            next: std::ptr::null_mut(),
        };
        write(&self.backend, self.device, at, &empty)?;
        if let Some(&last) = self.tables.last() {
            let next = at as usize;
            write(
                &self.backend,
                self.device,
                last + std::mem::offset_of!(ncclDevCommWindowTable, next) as u64,
                &next,
            )?;
        }
        self.tables.push(at);
        self.entries
            .resize(self.tables.len() * TABLE_ENTRIES, false);
        Ok(())
    }

    fn entry_addr(&self, i: usize) -> DevicePtr {
        self.tables[i / TABLE_ENTRIES]
            + (i % TABLE_ENTRIES * size_of::<ncclDevCommWindowEntry>()) as u64
    }

    /// The descriptor of a window whose LSA rank 0 copy is at `flat`, written to a fresh slot;
    /// returns the slot and what it holds. Unmapped (a backend without flat mapping), the
    /// descriptor points at this rank's buffer when it is the only one of its team, else at
    /// nothing: device code then faults instead of reading the wrong rank's memory.
    fn descriptor(
        &mut self,
        user_ptr: DevicePtr,
        flat: Option<&FlatWindow>,
        host: *mut c_void,
        gin_handle: u64,
    ) -> Result<(DevicePtr, ncclWindow_vidmem)> {
        let at = self.slab.take(size_of::<ncclWindow_vidmem>())?;
        let d = ncclWindow_vidmem {
            winHost: host,
            lsaFlatBase: match flat {
                Some(f) => f.base,
                None if self.lsa.size == 1 => user_ptr,
                None => 0,
            } as *mut _,
            lsaRank: flat.map_or(self.lsa.rank, |f| f.lsa.rank) as i32,
            worldRank: self.comm.rank() as i32,
            stride4G: flat.map_or(0, |f| (f.stride / FLAT_STRIDE_UNIT) as u32),
            mcOffset4K: 0,
            // Each window is registered with GIN on its own, from its start.
            ginOffset4K: 0,
            ginWins: [gin_handle as usize as *mut c_void; NCCL_GIN_MAX_CONTEXTS],
        };
        if let Err(e) = write(&self.backend, self.device, at, &d) {
            self.slab.give(at, size_of::<ncclWindow_vidmem>());
            return Err(e);
        }
        Ok((at, d))
    }

    /// Records a registered window (its flat mapping already made): writes its descriptor and
    /// table entry; returns the `ncclWindow_t`.
    pub fn add_window(
        &mut self,
        user_ptr: usize,
        size: usize,
        flags: i32,
        flat: Option<FlatWindow>,
    ) -> Result<DevicePtr> {
        let entry = match self.entries.iter().position(|&u| !u) {
            Some(i) => i,
            None => {
                self.add_table()?;
                self.entries
                    .iter()
                    .position(|&u| !u)
                    .expect("a fresh table")
            }
        };
        let gin_handle = self.take_gin_handle();
        let mut w = Box::new(RegisteredWindow {
            user_ptr,
            size,
            flags,
            flat,
            entry,
            gin_handle,
        });
        let host = (&mut *w as *mut RegisteredWindow).cast::<c_void>();
        let (at, _) = self.descriptor(user_ptr as DevicePtr, flat.as_ref(), host, gin_handle)?;
        if let Some(g) = &self.gin
            && let Err(err) = g.add_window(gin_handle, user_ptr as DevicePtr, size as u64)
        {
            self.slab.give(at, size_of::<ncclWindow_vidmem>());
            return Err(err);
        }
        let e = ncclDevCommWindowEntry {
            base: user_ptr,
            size,
            window: at as usize,
        };
        if let Err(err) = write(&self.backend, self.device, self.entry_addr(entry), &e) {
            if let Some(g) = &self.gin {
                let _ = g.remove_window(gin_handle);
            }
            self.slab.give(at, size_of::<ncclWindow_vidmem>());
            return Err(err);
        }
        self.entries[entry] = true;
        self.windows.insert(at, w);
        Ok(at)
    }

    /// The next GIN handle (never 0, which device code sends for "no window").
    fn take_gin_handle(&mut self) -> u64 {
        let h = self.next_gin_handle;
        self.next_gin_handle += 1;
        h
    }

    /// Starts GIN on the communicator unless it runs (collective: every rank at once), with
    /// every window and resource buffer registered so far.
    pub fn start_gin(&mut self) -> Result<&mut GinState> {
        if self.gin.is_none() {
            let windows = (self.windows.values())
                .map(|w| (w.gin_handle, w.user_ptr as DevicePtr, w.size as u64))
                .chain((self.dev_comms.values()).map(|r| (r.gin_handle, r.memory, r.bytes as u64)));
            self.gin = Some(GinState::start(&self.comm, &self.backend, windows)?);
        }
        Ok(self.gin.as_mut().expect("set above"))
    }

    /// The window whose descriptor is at `at`.
    pub fn window(&self, at: DevicePtr) -> Option<&RegisteredWindow> {
        self.windows.get(&at).map(|w| &**w)
    }

    /// Removes a window: clears its table entry, unmaps it and frees its descriptor.
    ///
    /// # Safety
    /// No queued or running work of this rank uses the window.
    pub unsafe fn remove_window(&mut self, at: DevicePtr) -> Result<()> {
        let w = self.windows.remove(&at).ok_or_else(|| {
            Error::arg(format!(
                "window {at:#x} was not registered on this communicator"
            ))
        })?;
        let deregistered = match &self.gin {
            Some(g) => g.remove_window(w.gin_handle),
            None => Ok(()),
        };
        self.entries[w.entry] = false;
        let cleared = write(
            &self.backend,
            self.device,
            self.entry_addr(w.entry),
            &ncclDevCommWindowEntry::default(),
        );
        self.slab.give(at, size_of::<ncclWindow_vidmem>());
        let unmapped = match &w.flat {
            // SAFETY: the caller's contract.
            Some(f) => unsafe { self.comm.unmap_flat(f) },
            None => Ok(()),
        };
        cleared.and(unmapped).and(deregistered)
    }

    /// Records the resource buffers of a new device communicator: `bytes` at `memory`
    /// (zeroed, mapped flat as `flat`), holding GIN's signal and counter ids from `gin_ids`;
    /// returns their descriptor (the `resourceWindow`) and its contents.
    pub fn add_resources(
        &mut self,
        memory: DevicePtr,
        bytes: usize,
        flat: Option<FlatWindow>,
        gin_ids: Option<GinIds>,
    ) -> Result<(DevicePtr, ncclWindow_vidmem)> {
        let gin_handle = self.take_gin_handle();
        let (at, d) = self.descriptor(memory, flat.as_ref(), std::ptr::null_mut(), gin_handle)?;
        if let Some(g) = &self.gin
            && let Err(err) = g.add_window(gin_handle, memory, bytes as u64)
        {
            self.slab.give(at, size_of::<ncclWindow_vidmem>());
            return Err(err);
        }
        self.dev_comms.insert(
            at,
            DevCommResources {
                memory,
                bytes,
                flat,
                gin_handle,
                gin_ids,
            },
        );
        Ok((at, d))
    }

    /// Frees a device communicator's resource buffers (`at`: its `resourceWindow`).
    ///
    /// # Safety
    /// No queued or running work of this rank uses the device communicator.
    pub unsafe fn remove_resources(&mut self, at: DevicePtr) -> Result<()> {
        let r = self.dev_comms.remove(&at).ok_or_else(|| {
            Error::arg(format!(
                "device communicator with resource window {at:#x} was not created on this communicator (or was destroyed)"
            ))
        })?;
        self.slab.give(at, size_of::<ncclWindow_vidmem>());
        let mut deregistered = Ok(());
        if let Some(g) = &mut self.gin {
            deregistered = g.remove_window(r.gin_handle);
            if let Some(ids) = r.gin_ids {
                g.give_ids(ids);
            }
        }
        // SAFETY: the caller's contract.
        unsafe { release_resources(&self.comm, &self.backend, r) }.and(deregistered)
    }
}

/// Unmaps and frees one device communicator's resource buffers.
///
/// # Safety
/// Nothing uses them any more.
unsafe fn release_resources(
    comm: &AnyComm,
    backend: &AnyBackend,
    r: DevCommResources,
) -> Result<()> {
    let unmapped = match &r.flat {
        // SAFETY: the caller's contract.
        Some(f) => unsafe { comm.unmap_flat(f) },
        None => Ok(()),
    };
    // SAFETY: the caller's contract; the memory came from `mem_alloc`.
    let freed = unsafe { backend.mem_free(r.memory) };
    unmapped.and(freed)
}

impl Drop for DeviceApi {
    /// The communicator is gone: nothing of its device API is in use any more.
    fn drop(&mut self) {
        // GIN's engines stop before the windows they write go.
        self.gin = None;
        for (_, w) in self.windows.drain() {
            if let Some(f) = &w.flat {
                // SAFETY: the communicator is destroyed; its windows are no longer used.
                let _ = unsafe { self.comm.unmap_flat(f) };
            }
        }
        for (_, r) in self.dev_comms.drain() {
            // SAFETY: as above.
            let _ = unsafe { release_resources(&self.comm, &self.backend, r) };
        }
        // SAFETY: as above; the slab came from `mem_alloc`.
        let _ = unsafe { self.backend.mem_free(self.slab.base) };
    }
}
