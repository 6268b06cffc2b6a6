//! Finding and opening network plugin libraries as NCCL 2.28 does (`reference/net.md` §1).
//!
//! `NCCL_NET_PLUGIN` unset means `libnccl-net.so`; set, it is a comma list of entries, `none`
//! meaning no plugin. An entry is `dlopen`ed as given (RTLD_NOW | RTLD_LOCAL), and, when that
//! fails and the entry is a bare name (no `/`, not `lib…so`), as `libnccl-net-<entry>.so`; an
//! entry starting with `STATIC_PLUGIN` (any case) means the main program. The library's newest
//! exported `ncclNetPlugin_v12` … `v6` wins (NCCL 2.30's search); the same library's newest
//! `ncclGinPlugin_v13` … `v11`, if any, is kept beside it for GIN. Libraries stay loaded for the
//! life of the process.

use super::abi::SYMBOLS;
use super::gin_abi::GIN_SYMBOLS;
use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
use std::ffi::c_void;

/// The library NCCL looks for when `NCCL_NET_PLUGIN` is unset.
pub const DEFAULT_LIBRARY: &str = "libnccl-net.so";
/// Entries starting with this (any case) name the main program instead of a library.
const STATIC_PREFIX: &str = "STATIC_PLUGIN";
/// NCCL's bound on plugin entries (16 slots, 2 kept for its internal networks).
const MAX_ENTRIES: usize = 14;

/// The entries of `NCCL_NET_PLUGIN` (`spec`), in order.
pub fn entries(spec: Option<&str>) -> Vec<String> {
    let Some(spec) = spec else {
        return vec![DEFAULT_LIBRARY.to_string()];
    };
    if spec.trim().eq_ignore_ascii_case("none") {
        return Vec::new();
    }
    spec.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty() && !e.eq_ignore_ascii_case("none") && e.len() < 255)
        .take(MAX_ENTRIES)
        .map(str::to_string)
        .collect()
}

/// The files `dlopen` tries for one entry, in order.
pub fn file_names(entry: &str) -> Vec<String> {
    let mut names = vec![entry.to_string()];
    let lib_so = entry.starts_with("lib") && entry.ends_with(".so");
    if !entry.contains('/') && !lib_so {
        names.push(format!("libnccl-net-{entry}.so"));
    }
    names
}

/// An opened plugin library and the net struct it exports.
pub struct Opened {
    /// The file that opened (or "the main program").
    pub path: String,
    /// ABI version of the symbol taken (6 to 12).
    pub version: u32,
    /// Address of the exported `ncclNetPlugin_vN` struct.
    pub sym: *mut c_void,
    /// The newest exported `ncclGinPlugin_vN` struct (v13 to v11) and its version, if any.
    pub gin: Option<(*mut c_void, u32)>,
    /// Keeps the library mapped (never closed: see the module docs).
    _lib: Library,
}

// SAFETY: `sym` and `gin` are addresses of structs inside the library, which stays mapped as long as
// `_lib` lives; they are only read under the plugin's lock (see `PluginLib`) or copied once.
unsafe impl Send for Opened {}
// SAFETY: as for Send; `Opened` itself is never mutated after opening.
unsafe impl Sync for Opened {}

/// Why an entry gave no plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenError {
    /// No file of the entry could be opened (NCCL logs this only at INFO).
    NotFound(String),
    /// The library opened but exports no `ncclNetPlugin_v6..v12`.
    NoSymbol(String),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::NotFound(m) => write!(f, "{m}"),
            OpenError::NoSymbol(p) => write!(
                f,
                "{p} exports none of ncclNetPlugin_v12 .. ncclNetPlugin_v6: unsupported, closed"
            ),
        }
    }
}

/// An error with its sources (libloading keeps `dlerror`'s text in the source).
fn describe(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        text.push_str(": ");
        text.push_str(&s.to_string());
        src = s.source();
    }
    text
}

/// Opens one entry of `NCCL_NET_PLUGIN` and finds its newest net symbol.
pub fn open(entry: &str) -> Result<Opened, OpenError> {
    let (lib, path) = if entry.len() >= STATIC_PREFIX.len()
        && entry[..STATIC_PREFIX.len()].eq_ignore_ascii_case(STATIC_PREFIX)
    {
        (Library::this(), "the main program".to_string())
    } else {
        let mut errors = Vec::new();
        let mut found = None;
        for name in file_names(entry) {
            // SAFETY: loading a network plugin runs its initialisers; that is what
            // NCCL_NET_PLUGIN asks for, exactly as NCCL does.
            match unsafe { Library::open(Some(name.as_str()), RTLD_NOW | RTLD_LOCAL) } {
                Ok(lib) => {
                    found = Some((lib, name));
                    break;
                }
                Err(e) => errors.push(describe(&e)),
            }
        }
        found.ok_or_else(|| OpenError::NotFound(errors.join("; ")))?
    };
    let Some((sym, version)) = newest(&lib, &SYMBOLS) else {
        return Err(OpenError::NoSymbol(path));
    };
    Ok(Opened {
        path,
        version,
        sym,
        gin: newest(&lib, &GIN_SYMBOLS),
        _lib: lib,
    })
}

/// The first of `symbols` (name, version) that `lib` exports with a non-NULL address.
fn newest(lib: &Library, symbols: &[(&str, u32)]) -> Option<(*mut c_void, u32)> {
    symbols.iter().find_map(|&(name, version)| {
        // SAFETY: only the symbol's address is taken (as a pointer-sized `Symbol`, which
        // libloading requires); nothing is read through it here.
        let sym = unsafe { lib.get::<*mut c_void>(name) }.map(|s| s.into_raw());
        sym.ok().filter(|s| !s.is_null()).map(|s| (s, version))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_follow_nccl() {
        assert_eq!(entries(None), ["libnccl-net.so"]);
        assert!(entries(Some("none")).is_empty());
        assert!(entries(Some(" NONE ")).is_empty());
        assert_eq!(entries(Some("ofi")), ["ofi"]);
        assert_eq!(entries(Some("a, /x/b.so,,none")), ["a", "/x/b.so"]);
    }

    #[test]
    fn file_names_follow_nccl() {
        assert_eq!(file_names("ofi"), ["ofi", "libnccl-net-ofi.so"]);
        assert_eq!(file_names("/opt/p/libx.so"), ["/opt/p/libx.so"]);
        assert_eq!(file_names("./x.so"), ["./x.so"]);
        assert_eq!(file_names("libnccl-net-ofi.so"), ["libnccl-net-ofi.so"]);
    }

    #[test]
    fn a_missing_library_is_not_found() {
        let e = open("/nonexistent/libnccl-net-nothing.so")
            .err()
            .expect("an error");
        assert!(matches!(e, OpenError::NotFound(_)), "{e:?}");
        let e = open("oxccl-no-such-net").err().expect("an error");
        assert!(
            e.to_string().contains("libnccl-net-oxccl-no-such-net.so"),
            "{e}"
        );
    }
}
