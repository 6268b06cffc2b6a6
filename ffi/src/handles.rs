//! `ncclComm_t` handles: heap objects that are never freed, listed in a process-wide registry.
//!
//! A C program may keep using a communicator after destroying it, or pass garbage. Every handle
//! this library ever issued stays in the registry (destroyed ones as tombstones, a few dozen bytes
//! each, their communicator released), so a stale handle is recognised and answered with
//! `ncclInvalidUsage`, and a pointer never issued is rejected with `ncclInvalidArgument`, before
//! anything is dereferenced. Addresses are never reused, so a stale handle cannot alias a new one.

use crate::abi::{ncclComm, ncclComm_t};
use oxccl::device_api::memory::DeviceApi;
use oxccl::dispatch::{AnyComm, CommOps};
use oxccl_core::{Error, Result};
use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard, Once, RwLock};

/// `magic` of a live handle ("oxcclCom").
const LIVE_MAGIC: u64 = 0x6f78_6363_6c43_6f6d;
/// `magic` of a destroyed or aborted handle ("oxcclDed").
const DEAD_MAGIC: u64 = 0x6f78_6363_6c44_6564;

/// What became of a communicator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Life {
    /// Usable.
    Live,
    /// `ncclCommDestroy` was called.
    Destroyed,
    /// `ncclCommAbort` was called.
    Aborted,
}

/// A buffer registered with `ncclCommRegister`.
#[derive(Debug)]
pub struct Registration {
    /// Start of the buffer.
    pub buff: usize,
    /// Its size in bytes.
    pub size: usize,
}

/// Mutable state of one handle.
pub struct HandleState {
    /// The communicator while live; dropped on destroy/abort to release its resources.
    pub comm: Option<AnyComm>,
    /// Live, destroyed or aborted.
    pub life: Life,
    /// `ncclCommRevoke` was called: no new operations.
    pub revoked: bool,
    /// `ncclCommSuspend` was called and not resumed.
    pub suspended: bool,
    /// A panic happened while this communicator was in use.
    pub poisoned: Option<String>,
    /// Buffers from `ncclCommRegister`, by handle address (boxed: the address is the handle).
    pub registrations: HashMap<usize, Box<Registration>>,
    /// Windows and device communicators (made on first use).
    pub device_api: Option<DeviceApi>,
}

impl HandleState {
    /// The live communicator (work deferred to a group's end may find it destroyed).
    pub fn live_comm(&self) -> Result<AnyComm> {
        self.comm
            .clone()
            .ok_or_else(|| Error::usage("communicator was destroyed"))
    }

    /// The device API's state of the live communicator, made on first use.
    pub fn device_api(&mut self) -> Result<&mut DeviceApi> {
        if self.device_api.is_none() {
            let comm = self.live_comm()?;
            let backend = oxccl::dispatch::backend()?.clone();
            self.device_api = Some(DeviceApi::new(comm, backend)?);
        }
        Ok(self.device_api.as_mut().expect("made above"))
    }
}

/// What the C handle points at.
pub struct CommHandle {
    magic: AtomicU64,
    /// [`FORKS`] when the handle was issued: a different value means this is a forked child
    /// of the process that created the communicator.
    fork_gen: u64,
    state: Mutex<HandleState>,
}

/// How many `fork()`s separate this process from the one that loaded the library: incremented
/// in the child by a `pthread_atfork` handler.
static FORKS: AtomicU64 = AtomicU64::new(0);

extern "C" fn after_fork_in_child() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// Installs the fork handler (once, before the first handle is issued).
fn watch_forks() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a handler that only increments an atomic (async-signal-safe).
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    });
}

impl CommHandle {
    /// Locks the handle's state.
    pub fn lock(&self) -> MutexGuard<'_, HandleState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this process is a forked child of the one that created the communicator: its
    /// threads did not survive the fork and its connections are shared with the parent, so it
    /// must not be used (a call would wait for a thread that is gone, or write into the
    /// parent's connections).
    pub fn forked(&self) -> bool {
        self.fork_gen != FORKS.load(Ordering::Relaxed)
    }

    /// Destroy or abort in a forked child: the handle dies, its communicator is forgotten
    /// without any teardown (which would wait for the parent's threads or close connections the
    /// parent still uses). The state lock is only tried: a parent thread may have held it at
    /// the fork.
    pub fn forget_after_fork(&self, life: Life) {
        self.magic.store(DEAD_MAGIC, Ordering::Release);
        if let Ok(mut st) = self.state.try_lock() {
            if let Some(c) = st.comm.take() {
                std::mem::forget(c);
            }
            st.registrations.clear();
            std::mem::forget(st.device_api.take());
            st.life = life;
        }
    }

    /// Marks the handle dead and releases its communicator and registrations.
    pub fn bury(&self, state: &mut HandleState, life: Life) {
        state.life = life;
        state.comm = None;
        state.registrations.clear();
        state.device_api = None;
        self.magic.store(DEAD_MAGIC, Ordering::Release);
    }
}

/// Addresses of every handle ever issued (never shrinks: handles are never freed).
static HANDLES: LazyLock<RwLock<HashSet<usize>>> = LazyLock::new(|| RwLock::new(HashSet::new()));

thread_local! {
    /// Handles this thread found in [`HANDLES`] lately: handles are never freed, so an address
    /// once issued stays a handle, and a thread asking about its own communicators again skips
    /// the process-wide lock.
    static RECENT: Cell<[usize; 8]> = const { Cell::new([0; 8]) };
    /// The handle the current API call looked up, so a panic can poison it.
    static CURRENT: Cell<Option<&'static CommHandle>> = const { Cell::new(None) };
}

/// Forgets the current call's handle (start of every call).
pub fn clear_current() {
    CURRENT.with(|c| c.set(None));
}

/// Poisons the handle the panicking call was using, if any.
pub fn poison_current(why: &str) {
    if let Some(h) = CURRENT.with(Cell::get) {
        let mut st = h.lock();
        st.poisoned.get_or_insert_with(|| why.to_string());
    }
}

/// Issues a new handle for `comm`.
pub fn register(comm: AnyComm) -> ncclComm_t {
    watch_forks();
    let handle: &'static CommHandle = Box::leak(Box::new(CommHandle {
        magic: AtomicU64::new(LIVE_MAGIC),
        fork_gen: FORKS.load(Ordering::Relaxed),
        state: Mutex::new(HandleState {
            comm: Some(comm),
            life: Life::Live,
            revoked: false,
            suspended: false,
            poisoned: None,
            registrations: HashMap::new(),
            device_api: None,
        }),
    }));
    let addr = handle as *const CommHandle as usize;
    HANDLES
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .insert(addr);
    ncclComm_t(addr as *mut ncclComm)
}

/// The handle behind `c`, whatever its state; errors for NULL or never-issued pointers.
pub fn handle(c: ncclComm_t) -> Result<&'static CommHandle> {
    if c.0.is_null() {
        return Err(Error::arg("comm argument is NULL"));
    }
    let addr = c.0 as usize;
    let known = RECENT.with(|r| r.get().contains(&addr)) || {
        let issued = HANDLES
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&addr);
        if issued {
            RECENT.with(|r| {
                let mut recent = r.get();
                recent.rotate_right(1);
                recent[0] = addr;
                r.set(recent);
            });
        }
        issued
    };
    if !known {
        return Err(Error::arg(format!(
            "comm {addr:#x} is not a communicator created by this library (uninitialized or corrupted handle)"
        )));
    }
    // SAFETY: `addr` is in the registry, so it is the address of a leaked, never-freed CommHandle.
    let h: &'static CommHandle = unsafe { &*(addr as *const CommHandle) };
    debug_assert!(matches!(
        h.magic.load(Ordering::Acquire),
        LIVE_MAGIC | DEAD_MAGIC
    ));
    CURRENT.with(|cur| cur.set(Some(h)));
    Ok(h)
}

/// What a call is about to do with a communicator, which decides the states it accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Queries and management (count, rank, async error, finalize, shrink): any live handle.
    Query,
    /// New operations (collectives, send/recv, split, registration): not revoked, suspended or
    /// poisoned.
    Ops,
}

/// Error for using a dead handle.
pub fn dead_error(life: Life) -> Error {
    match life {
        Life::Destroyed => Error::usage("communicator was destroyed (ncclCommDestroy)"),
        Life::Aborted => Error::usage("communicator was aborted (ncclCommAbort)"),
        Life::Live => Error::Internal("live communicator reported as dead".into()),
    }
}

/// A live communicator looked up from a C handle.
pub struct Live {
    /// The handle.
    pub handle: &'static CommHandle,
    /// A clone of its communicator (the handle's lock is not held).
    pub comm: AnyComm,
}

/// The handle behind `c` when this process made it (not a forked child's copy).
fn own_handle(c: ncclComm_t) -> Result<&'static CommHandle> {
    let handle = handle(c)?;
    if handle.forked() {
        return Err(Error::usage(
            "communicator was created before fork(): a forked child cannot use it (its threads \
             stayed in the parent and its connections are the parent's); create a new \
             communicator in the child",
        ));
    }
    Ok(handle)
}

/// Answers a query (`Need::Query`) about a live communicator under its handle's lock, without
/// taking a reference to it: programs ask for the rank and count around every operation.
pub fn query<T>(c: ncclComm_t, f: impl FnOnce(&AnyComm) -> Result<T>) -> Result<T> {
    let st = own_handle(c)?.lock();
    match (&st.comm, st.life) {
        (Some(comm), Life::Live) => f(comm),
        (_, life) => Err(dead_error(life)),
    }
}

/// Looks up a live communicator for a call that needs `need`.
pub fn lookup(c: ncclComm_t, need: Need) -> Result<Live> {
    let handle = own_handle(c)?;
    let st = handle.lock();
    let comm = match (&st.comm, st.life) {
        (Some(comm), Life::Live) => comm.clone(),
        (_, life) => return Err(dead_error(life)),
    };
    if need == Need::Ops {
        if let Some(why) = &st.poisoned {
            return Err(Error::usage(format!(
                "communicator is unusable after {why}; destroy or abort it"
            )));
        }
        if st.revoked {
            return Err(Error::usage(
                "communicator was revoked (ncclCommRevoke); only shrink, finalize, destroy and abort are allowed",
            ));
        }
        if st.suspended {
            return Err(Error::usage(
                "communicator is suspended (ncclCommSuspend); call ncclCommResume first",
            ));
        }
    }
    drop(st);
    Ok(Live { handle, comm })
}

impl Live {
    /// Number of ranks.
    pub fn nranks(&self) -> usize {
        self.comm.nranks()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_and_foreign_pointers_are_rejected_without_dereferencing() {
        let e = lookup(ncclComm_t::NULL, Need::Query).err().unwrap();
        assert_eq!(crate::result::code_of(&e).0, 4);
        // An address that cannot be dereferenced: it must never be touched.
        let e = lookup(ncclComm_t(0x10 as *mut ncclComm), Need::Query)
            .err()
            .unwrap();
        assert_eq!(crate::result::code_of(&e).0, 4);
        assert!(e.to_string().contains("not a communicator"), "{e}");
    }
}
