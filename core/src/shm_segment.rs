//! POSIX shared-memory segments (`/dev/shm`): the host memory the SHM transport's FIFOs live in.
//!
//! A receiving rank creates one segment for the FIFOs its SHM peers write into, publishes the
//! segment's name over the bootstrap, and every sender opens and maps it. The owner removes the
//! name as soon as every peer has mapped it, so a crash later leaves nothing in `/dev/shm`; the
//! memory itself lives until the last mapping goes.
//!
//! `posix_fallocate` reserves the whole segment at creation: a `/dev/shm` too small for it fails
//! there, with a sentence naming the sizes, instead of a SIGBUS when a kernel first touches a
//! page that tmpfs cannot supply.

use crate::error::{Error, Result};
use std::ffi::CString;

/// Where POSIX shared memory lives on Linux, named in errors.
const SHM_DIR: &str = "/dev/shm";
/// Every segment name starts with this, so a peer can only make us open one of ours.
const NAME_PREFIX: &str = "/oxccl-shm-";
/// Longest name accepted from a peer.
const MAX_NAME: usize = 64;

/// A mapped shared-memory segment.
#[derive(Debug)]
pub struct ShmSegment {
    base: *mut u8,
    bytes: usize,
    name: String,
    /// Created by this process and its name not yet removed.
    linked: bool,
}

// SAFETY: the mapping is owned by this value; what is written through `base` is synchronised by
// the users' own protocol (FIFO counters).
unsafe impl Send for ShmSegment {}
// SAFETY: as above; nothing here mutates through `&self`.
unsafe impl Sync for ShmSegment {}

impl ShmSegment {
    /// Creates, reserves and maps a zeroed segment of `bytes` bytes under a fresh name.
    /// `purpose` says what it is for, in the error when `/dev/shm` is too small.
    pub fn create(bytes: usize, purpose: &str) -> Result<ShmSegment> {
        if bytes == 0 {
            return Err(Error::Internal("empty shared-memory segment".into()));
        }
        let name = format!(
            "{NAME_PREFIX}{}-{:016x}",
            std::process::id(),
            rand::random::<u64>()
        );
        let c = CString::new(name.clone()).expect("no NUL in the name");
        // SAFETY: `c` is a NUL-terminated name; O_EXCL never opens someone else's segment.
        let fd = unsafe {
            libc::shm_open(
                c.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC,
                0o600,
            )
        };
        if fd < 0 {
            return Err(Error::io(
                format!("SHM transport: creating {SHM_DIR}{name}"),
                std::io::Error::last_os_error(),
            ));
        }
        let unlink = || {
            // SAFETY: removes the name we just created.
            unsafe { libc::shm_unlink(c.as_ptr()) };
        };
        // SAFETY: `fd` is our open segment; the length is checked against off_t's range.
        let rc = unsafe { libc::posix_fallocate(fd, 0, bytes as libc::off_t) };
        if rc != 0 {
            // SAFETY: our descriptor, closed once.
            unsafe { libc::close(fd) };
            unlink();
            if rc == libc::ENOSPC {
                return Err(too_small(bytes, purpose));
            }
            return Err(Error::io(
                format!("SHM transport: reserving {bytes} bytes in {SHM_DIR}{name}"),
                std::io::Error::from_raw_os_error(rc),
            ));
        }
        let mapped = map(fd, bytes);
        // SAFETY: our descriptor; the mapping keeps the segment alive without it.
        unsafe { libc::close(fd) };
        match mapped {
            Ok(base) => Ok(ShmSegment {
                base,
                bytes,
                name,
                linked: true,
            }),
            Err(e) => {
                unlink();
                Err(e)
            }
        }
    }

    /// Opens and maps a peer's segment `name`, which must hold at least `bytes` bytes.
    pub fn open(name: &str, bytes: usize) -> Result<ShmSegment> {
        let valid = name.len() <= MAX_NAME
            && name.starts_with(NAME_PREFIX)
            && !name[1..].contains('/')
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_/".contains(&b));
        if !valid || bytes == 0 {
            return Err(Error::Internal(format!(
                "a peer published an invalid shared-memory segment {name:?} ({bytes} bytes)"
            )));
        }
        let c = CString::new(name).expect("checked: no NUL");
        // SAFETY: `c` is a NUL-terminated name.
        let fd = unsafe { libc::shm_open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC, 0) };
        if fd < 0 {
            return Err(Error::io(
                format!("SHM transport: opening a peer's segment {SHM_DIR}{name}"),
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: `st` is plain old data filled by fstat on our descriptor.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is open; `st` is writable.
        let size = if unsafe { libc::fstat(fd, &mut st) } == 0 {
            st.st_size as u64
        } else {
            0
        };
        let mapped = if size < bytes as u64 {
            Err(Error::Internal(format!(
                "a peer's shared-memory segment {SHM_DIR}{name} holds {size} bytes, not {bytes}"
            )))
        } else {
            map(fd, bytes)
        };
        // SAFETY: our descriptor, closed once.
        unsafe { libc::close(fd) };
        Ok(ShmSegment {
            base: mapped?,
            bytes,
            name: name.to_string(),
            linked: false,
        })
    }

    /// Removes the segment's name (the owner, once every peer has opened it); the memory stays
    /// mapped. Later calls, and calls on a peer's segment, do nothing.
    pub fn unlink(&mut self) {
        if std::mem::take(&mut self.linked) {
            let c = CString::new(self.name.clone()).expect("no NUL in the name");
            // SAFETY: removes the name this process created.
            unsafe { libc::shm_unlink(c.as_ptr()) };
        }
    }

    /// The name peers open it by.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Address of the mapping in this process.
    pub fn base(&self) -> *mut u8 {
        self.base
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.bytes
    }

    /// Never true: segments are at least one byte.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }
}

impl Drop for ShmSegment {
    fn drop(&mut self) {
        self.unlink();
        // SAFETY: our mapping of `bytes` bytes; the users of the memory are gone.
        unsafe { libc::munmap(self.base.cast(), self.bytes) };
    }
}

/// Maps `bytes` bytes of the shared segment open as `fd`, read-write.
fn map(fd: i32, bytes: usize) -> Result<*mut u8> {
    // SAFETY: a fresh shared mapping of an open descriptor; the kernel picks the address.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Error::io(
            format!("SHM transport: mapping {bytes} bytes of shared memory"),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(p.cast())
}

/// `(free, total)` bytes of `/dev/shm`, if it can be asked.
fn shm_space() -> Option<(u64, u64)> {
    let dir = CString::new(SHM_DIR).expect("no NUL");
    // SAFETY: plain old data filled by statvfs.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `dir` is NUL-terminated, `st` writable.
    (unsafe { libc::statvfs(dir.as_ptr(), &mut st) } == 0).then(|| {
        let unit = st.f_frsize as u64;
        (st.f_bavail as u64 * unit, st.f_blocks as u64 * unit)
    })
}

/// The error for a `/dev/shm` without room for `bytes` more bytes.
fn too_small(bytes: usize, purpose: &str) -> Error {
    let mib = |b: u64| b.div_ceil(1 << 20);
    // Other processes allocate and free at the same time: the free figure is what was free
    // when the reservation failed, not a promise.
    let space = shm_space()
        .map(|(free, total)| format!(" ({} MiB in all, {} MiB free now)", mib(total), mib(free)))
        .unwrap_or_default();
    Error::System {
        context: format!(
            "SHM transport: {SHM_DIR}{space} has no room for {purpose}: {} MiB",
            mib(bytes as u64)
        ),
        message: "enlarge /dev/shm (docker: --shm-size; Kubernetes: an emptyDir with medium \
                  Memory), or set NCCL_SHM_DISABLE=1 to use the network between these ranks \
                  instead"
            .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exists(name: &str) -> bool {
        std::path::Path::new(&format!("{SHM_DIR}{name}")).exists()
    }

    #[test]
    fn a_peer_sees_what_the_owner_writes_and_the_name_goes_at_unlink() {
        let mut own = ShmSegment::create(3 * 4096 + 5, "the test's FIFOs").unwrap();
        assert!(own.name().starts_with(NAME_PREFIX));
        assert!(exists(own.name()));
        // SAFETY: inside the mapping.
        let last = unsafe { *own.base().add(3 * 4096 + 4) };
        assert_eq!(last, 0, "fresh memory is zero");
        let peer = ShmSegment::open(own.name(), own.len()).unwrap();
        // SAFETY: both inside their mappings of the same segment.
        unsafe {
            own.base().add(4097).write_volatile(0x5a);
            assert_eq!(peer.base().add(4097).read_volatile(), 0x5a);
        }
        own.unlink();
        assert!(!exists(own.name()));
        // Mapped memory outlives the name.
        // SAFETY: inside the mapping.
        unsafe { peer.base().add(1).write_volatile(7) };
        // SAFETY: inside the mapping.
        assert_eq!(unsafe { own.base().add(1).read_volatile() }, 7);
        assert!(
            ShmSegment::open(own.name(), 1).is_err(),
            "gone after unlink"
        );
    }

    #[test]
    fn dropping_the_owner_removes_the_name() {
        let name = {
            let s = ShmSegment::create(4096, "x").unwrap();
            s.name().to_string()
        };
        assert!(!exists(&name));
    }

    #[test]
    fn a_too_small_dev_shm_is_an_error_naming_it_and_the_size() {
        // Beyond the whole size, which tmpfs refuses before allocating anything (asking for
        // just more than the free space would fill the machine's memory first).
        let Some((_, total)) = shm_space().filter(|s| s.1 > 0) else {
            return;
        };
        let want = (total + (1 << 30)) as usize;
        let e = ShmSegment::create(want, "this rank's SHM FIFOs (3 peers x 4 channels)")
            .unwrap_err()
            .to_string();
        assert!(e.contains("SHM transport: /dev/shm ("), "{e}");
        assert!(e.contains("MiB in all"), "{e}");
        let need = format!(
            "no room for this rank's SHM FIFOs (3 peers x 4 channels): {} MiB",
            (want as u64).div_ceil(1 << 20)
        );
        assert!(e.contains(&need), "{e}");
        assert!(e.contains("NCCL_SHM_DISABLE"), "{e}");
    }

    #[test]
    fn peers_cannot_make_us_open_other_files_or_short_segments() {
        for bad in [
            "/etc/passwd",
            "/oxccl-shm-../x",
            "oxccl-shm-1",
            "/oxccl-shm-a/b",
            "",
        ] {
            assert!(ShmSegment::open(bad, 4096).is_err(), "{bad}");
        }
        let own = ShmSegment::create(4096, "x").unwrap();
        let e = ShmSegment::open(own.name(), 8192).unwrap_err().to_string();
        assert!(e.contains("holds 4096 bytes"), "{e}");
    }
}
