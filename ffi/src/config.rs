//! Reading the caller's versioned `ncclConfig_t` into core's `CommConfig`.
//!
//! `ncclConfig_t` only grows at the end. A caller compiled against an older header passes a
//! smaller struct whose `size` and `version` say so: copy only `min(size, ours)` bytes, then reset
//! every field newer than the caller's `version` (its bytes may be anything), then turn
//! `NCCL_CONFIG_UNDEF_*` into defaults. Environment variables override the result, as in NCCL.

use crate::abi::{
    NCCL_CONFIG_MAGIC, NCCL_CONFIG_UNDEF_INT, VERSION_CODE, nccl_version, ncclConfig_t,
};
use oxccl_core::config::CommConfig;
use oxccl_core::{Error, Result};
use std::ffi::{CStr, c_char, c_int};

/// Upper bound of `minCTAs`/`maxCTAs` (NCCL's MAXCHANNELS).
pub const MAX_CTAS: c_int = 64;

/// Smallest `size` that still holds `size`, `magic` and `version`.
const HEADER_BYTES: usize = 16;

impl ncclConfig_t {
    /// What `NCCL_CONFIG_INITIALIZER` of this flavour's header produces.
    pub const fn initializer() -> ncclConfig_t {
        let u = NCCL_CONFIG_UNDEF_INT;
        ncclConfig_t {
            size: size_of::<ncclConfig_t>(),
            magic: NCCL_CONFIG_MAGIC,
            version: VERSION_CODE,
            blocking: u,
            cgaClusterSize: u,
            minCTAs: u,
            maxCTAs: u,
            netName: std::ptr::null(),
            splitShare: u,
            trafficClass: u,
            commName: std::ptr::null(),
            collnetEnable: u,
            CTAPolicy: u,
            shrinkShare: u,
            nvlsCTAs: u,
            nChannelsPerNetPeer: u,
            nvlinkCentricSched: u,
            #[cfg(feature = "rccl")]
            graphUsageMode: u,
            #[cfg(feature = "rccl")]
            numRmaCtx: u,
            #[cfg(feature = "rccl")]
            maxP2pPeers: u,
        }
    }
}

/// Fields introduced by one release, reset when the caller's `version` predates it.
struct Threshold {
    version: u32,
    reset: fn(&mut ncclConfig_t),
}

const UNDEF: c_int = NCCL_CONFIG_UNDEF_INT;

// NCCL's own list (parseCommConfig), plus splitShare and commName: NCCL relies on `size` alone for
// those two, but a caller whose version predates them cannot have meant to set them either.
const THRESHOLDS: &[Threshold] = &[
    Threshold {
        version: nccl_version(2, 14, 0),
        reset: |c| c.blocking = UNDEF,
    },
    Threshold {
        version: nccl_version(2, 17, 0),
        reset: |c| {
            c.cgaClusterSize = UNDEF;
            c.minCTAs = UNDEF;
            c.maxCTAs = UNDEF;
            c.netName = std::ptr::null();
        },
    },
    Threshold {
        version: nccl_version(2, 18, 0),
        reset: |c| c.splitShare = UNDEF,
    },
    Threshold {
        version: nccl_version(2, 25, 0),
        reset: |c| c.trafficClass = UNDEF,
    },
    Threshold {
        version: nccl_version(2, 27, 0),
        reset: |c| {
            c.commName = std::ptr::null();
            c.collnetEnable = UNDEF;
            c.CTAPolicy = UNDEF;
            c.shrinkShare = UNDEF;
            c.nvlsCTAs = UNDEF;
        },
    },
    Threshold {
        version: nccl_version(2, 28, 0),
        reset: |c| {
            c.nChannelsPerNetPeer = UNDEF;
            c.nvlinkCentricSched = UNDEF;
        },
    },
    #[cfg(feature = "rccl")]
    Threshold {
        version: nccl_version(2, 29, 0),
        reset: |c| {
            c.graphUsageMode = UNDEF;
            c.numRmaCtx = UNDEF;
        },
    },
    #[cfg(feature = "rccl")]
    Threshold {
        version: nccl_version(2, 30, 0),
        reset: |c| c.maxP2pPeers = UNDEF,
    },
];

/// Copies the caller's config as its `size` allows and resets fields newer than its `version`.
///
/// # Safety
/// `ptr` is non-NULL, aligned, and readable for its own `size` field and then for
/// `min(size, sizeof(ncclConfig_t))` bytes.
pub unsafe fn read_raw(ptr: *const ncclConfig_t) -> Result<ncclConfig_t> {
    // SAFETY: the caller guarantees `size` (the first field) is readable.
    let size = unsafe { std::ptr::read(ptr.cast::<usize>()) };
    if size < HEADER_BYTES {
        return Err(Error::arg(format!(
            "config size {size} is too small; initialize ncclConfig_t with NCCL_CONFIG_INITIALIZER"
        )));
    }
    let mut out = ncclConfig_t::initializer();
    let n = size.min(size_of::<ncclConfig_t>());
    // SAFETY: `n` bytes are readable at `ptr` (caller) and writable in `out` (n <= its size);
    // every bit pattern is a valid ncclConfig_t (integers and raw pointers).
    unsafe { std::ptr::copy_nonoverlapping(ptr.cast::<u8>(), (&raw mut out).cast::<u8>(), n) };
    if out.magic != NCCL_CONFIG_MAGIC {
        return Err(Error::arg(format!(
            "config magic {:#x} is not {NCCL_CONFIG_MAGIC:#x}: ncclConfig_t was not initialized with NCCL_CONFIG_INITIALIZER",
            out.magic
        )));
    }
    for t in THRESHOLDS {
        if out.version < t.version {
            (t.reset)(&mut out);
        }
    }
    Ok(out)
}

/// `field`, or `default` when the caller left it at `NCCL_CONFIG_UNDEF_INT`.
fn or(field: c_int, default: c_int) -> c_int {
    if field == UNDEF { default } else { field }
}

fn check_bool(name: &str, v: c_int) -> Result<()> {
    if v != UNDEF && v != 0 && v != 1 {
        return Err(Error::arg(format!(
            "invalid config {name} attribute value {v}: must be 0 or 1"
        )));
    }
    Ok(())
}

/// A NUL-terminated C string from a config field, or `None` for NULL.
///
/// # Safety
/// `p` is NULL or a valid NUL-terminated string.
unsafe fn opt_string(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL, and the caller guarantees NUL termination.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Checks the values NCCL checks and fills core's config, with the environment applied on top.
///
/// # Safety
/// `netName` and `commName` are NULL or valid NUL-terminated strings.
pub unsafe fn to_core(c: &ncclConfig_t) -> Result<CommConfig> {
    check_bool("blocking", c.blocking)?;
    check_bool("splitShare", c.splitShare)?;
    check_bool("collnetEnable", c.collnetEnable)?;
    check_bool("shrinkShare", c.shrinkShare)?;
    if c.cgaClusterSize != UNDEF && c.cgaClusterSize < 0 {
        return Err(Error::arg(format!(
            "invalid config cgaClusterSize attribute value {}",
            c.cgaClusterSize
        )));
    }
    for (name, v) in [
        ("minCTAs", c.minCTAs),
        ("maxCTAs", c.maxCTAs),
        ("nvlsCTAs", c.nvlsCTAs),
    ] {
        if v != UNDEF && v <= 0 {
            return Err(Error::arg(format!(
                "invalid config {name} attribute value {v}: must be positive"
            )));
        }
    }
    let min_ctas = or(c.minCTAs, 1).min(MAX_CTAS);
    let max_ctas = or(c.maxCTAs, MAX_CTAS).min(MAX_CTAS);
    if min_ctas > max_ctas {
        return Err(Error::arg(format!(
            "invalid config: minCTAs {min_ctas} is larger than maxCTAs {max_ctas}"
        )));
    }
    let cta_policy = or(c.CTAPolicy, 0);
    if !(0..=2).contains(&cta_policy) {
        return Err(Error::arg(format!(
            "invalid config CTAPolicy attribute value {cta_policy}"
        )));
    }
    let mut out = CommConfig {
        blocking: or(c.blocking, 1) == 1,
        min_ctas: min_ctas as u32,
        max_ctas: max_ctas as u32,
        split_share: or(c.splitShare, 0) == 1,
        // SAFETY: the caller guarantees both are NULL or valid strings.
        comm_name: unsafe { opt_string(c.commName) },
        // SAFETY: as above.
        net_name: unsafe { opt_string(c.netName) },
        cta_policy,
        ..CommConfig::default()
    };
    out.apply_env();
    if let Some(net) = oxccl_core::config::get(&oxccl_core::config::vars::NCCL_NET) {
        out.net_name = Some(net);
    }
    Ok(out)
}

/// `ncclConfig_t*` argument → core config: NULL means defaults plus environment.
///
/// # Safety
/// `ptr` is NULL or satisfies [`read_raw`] and [`to_core`].
pub unsafe fn from_ptr(ptr: *const ncclConfig_t) -> Result<CommConfig> {
    if ptr.is_null() {
        return Ok(CommConfig::from_env());
    }
    // SAFETY: forwarded from the caller.
    let raw = unsafe { read_raw(ptr) }?;
    // SAFETY: the strings come from the caller's config.
    unsafe { to_core(&raw) }
}

/// Like [`from_ptr`], but NULL means "inherit" (`None`), as split and shrink want.
///
/// # Safety
/// As for [`from_ptr`].
pub unsafe fn from_ptr_inherit(ptr: *const ncclConfig_t) -> Result<Option<CommConfig>> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: forwarded from the caller.
    unsafe { from_ptr(ptr) }.map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field set to a recognisable non-default value.
    fn full(version: u32) -> ncclConfig_t {
        ncclConfig_t {
            size: size_of::<ncclConfig_t>(),
            magic: NCCL_CONFIG_MAGIC,
            version,
            blocking: 0,
            cgaClusterSize: 2,
            minCTAs: 3,
            maxCTAs: 7,
            netName: c"Socket".as_ptr(),
            splitShare: 1,
            trafficClass: 9,
            commName: c"tp".as_ptr(),
            collnetEnable: 1,
            CTAPolicy: 2,
            shrinkShare: 1,
            nvlsCTAs: 5,
            nChannelsPerNetPeer: 4,
            nvlinkCentricSched: 1,
            #[cfg(feature = "rccl")]
            graphUsageMode: 1,
            #[cfg(feature = "rccl")]
            numRmaCtx: 2,
            #[cfg(feature = "rccl")]
            maxP2pPeers: 3,
        }
    }

    fn read(c: &ncclConfig_t) -> Result<ncclConfig_t> {
        // SAFETY: `c` is a complete, live ncclConfig_t.
        unsafe { read_raw(c) }
    }

    #[test]
    fn current_version_keeps_everything() {
        let c = full(VERSION_CODE);
        assert_eq!(read(&c).unwrap(), c);
    }

    #[test]
    fn each_threshold_resets_exactly_its_fields() {
        let newest = full(VERSION_CODE);
        for (i, t) in THRESHOLDS.iter().enumerate() {
            // Just below the threshold: this group and every later one are reset.
            let got = read(&full(t.version - 1)).unwrap();
            let mut want = full(t.version - 1);
            for later in &THRESHOLDS[i..] {
                (later.reset)(&mut want);
            }
            assert_eq!(
                got,
                want,
                "version {} (below threshold {})",
                t.version - 1,
                t.version
            );
            // At the threshold: this group is kept.
            let got = read(&full(t.version)).unwrap();
            let mut want = full(t.version);
            for later in &THRESHOLDS[i + 1..] {
                (later.reset)(&mut want);
            }
            assert_eq!(got, want, "version {}", t.version);
            let _ = newest;
        }
        // The documented thresholds, spelled out.
        let v: Vec<u32> = THRESHOLDS.iter().map(|t| t.version).collect();
        assert_eq!(&v[..6], &[21400, 21700, 21800, 22500, 22700, 22800]);
        #[cfg(feature = "rccl")]
        assert_eq!(&v[6..], &[22900, 23000]);
    }

    #[test]
    fn below_2_14_only_defaults() {
        let got = read(&full(nccl_version(2, 13, 0))).unwrap();
        let mut want = ncclConfig_t::initializer();
        want.version = nccl_version(2, 13, 0);
        assert_eq!(got, want);
    }

    #[test]
    fn smaller_older_struct_is_accepted() {
        // A 2.27-era caller whose struct is 64 bytes: nothing past byte 64 may be read.
        let mut c = full(nccl_version(2, 27, 0));
        c.size = 64;
        c.shrinkShare = 77; // past `size`: must not be read
        c.nvlsCTAs = 77;
        let got = read(&c).unwrap();
        assert_eq!(got.size, 64);
        assert_eq!(got.CTAPolicy, 2, "offset 60 is inside the caller's struct");
        assert_eq!(got.shrinkShare, UNDEF);
        assert_eq!(got.nvlsCTAs, UNDEF);
        assert_eq!(got.nChannelsPerNetPeer, UNDEF);
        // SAFETY: the strings in `full` are static C strings.
        let core = unsafe { to_core(&got) }.unwrap();
        assert_eq!(core.cta_policy, 2);
    }

    #[test]
    fn larger_newer_struct_reads_only_what_we_know() {
        #[repr(C)]
        struct Newer {
            base: ncclConfig_t,
            extra: [c_int; 8],
        }
        let mut n = Newer {
            base: full(nccl_version(2, 31, 0)),
            extra: [1; 8],
        };
        n.base.size = size_of::<Newer>();
        // SAFETY: `Newer` starts with an ncclConfig_t and is readable for its whole size.
        let got = unsafe { read_raw(&n.base) }.unwrap();
        assert_eq!(got.size, size_of::<Newer>());
        assert_eq!(got.minCTAs, 3);
    }

    #[test]
    fn bad_magic_and_tiny_size_are_rejected() {
        let mut c = full(VERSION_CODE);
        c.magic = 0xdead;
        let e = read(&c).unwrap_err();
        assert!(e.to_string().contains("NCCL_CONFIG_INITIALIZER"), "{e}");
        assert_eq!(crate::result::code_of(&e).0, 4);
        let mut c = full(VERSION_CODE);
        c.size = 8;
        assert!(read(&c).is_err());
    }

    #[test]
    fn defaults_and_values_reach_core() {
        let c = ncclConfig_t::initializer();
        // SAFETY: no strings set.
        let core = unsafe { to_core(&c) }.unwrap();
        let d = CommConfig::from_env();
        assert_eq!(core.blocking, d.blocking);
        assert_eq!((core.min_ctas, core.max_ctas), (d.min_ctas, d.max_ctas));
        let c = full(VERSION_CODE);
        // SAFETY: static strings.
        let core = unsafe { to_core(&c) }.unwrap();
        assert_eq!(core.comm_name.as_deref(), Some("tp"));
        assert_eq!((core.min_ctas, core.max_ctas), (3, 7));
        assert!(core.split_share);
    }

    #[test]
    fn invalid_values_are_rejected() {
        let cases: [fn(&mut ncclConfig_t); 6] = [
            |c| c.blocking = 2,
            |c| c.minCTAs = 0,
            |c| c.maxCTAs = -3,
            |c| {
                c.minCTAs = 9;
                c.maxCTAs = 4
            },
            |c| c.splitShare = 5,
            |c| c.CTAPolicy = 17,
        ];
        for (i, f) in cases.iter().enumerate() {
            let mut c = ncclConfig_t::initializer();
            f(&mut c);
            // SAFETY: no strings set.
            let r = unsafe { to_core(&c) };
            assert!(r.is_err(), "case {i} accepted");
        }
    }
}
