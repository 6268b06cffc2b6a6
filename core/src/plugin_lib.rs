//! Finding plugin libraries as NCCL 2.28 does, for the tuner, profiler and environment plugins
//! (the network plugins' entries, a comma list, are `oxccl_net::plugin::loader`'s).

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};

/// The files `dlopen` tries for one value of `NCCL_<KIND>_PLUGIN` (`kind`: "tuner", "net", …):
/// the value as given and, for a bare name (no `/`, not `lib….so`), `libnccl-<kind>-<value>.so`.
pub fn file_names(kind: &str, value: &str) -> Vec<String> {
    let mut names = vec![value.to_string()];
    let lib_so = value.starts_with("lib") && value.ends_with(".so");
    if !value.contains('/') && !lib_so {
        names.push(format!("libnccl-{kind}-{value}.so"));
    }
    names
}

/// The libraries to try for a `kind` plugin whose variable is `value`, in order: `None` when it
/// is `none`; unset, `libnccl-<kind>.so`; then, where `net` (`NCCL_NET_PLUGIN`) is given, the
/// network plugin's library (its first entry, else `libnccl-net.so`), where NCCL also looks for
/// tuner and profiler symbols.
pub fn candidates(
    kind: &str,
    value: Option<&str>,
    net: Option<Option<&str>>,
) -> Option<Vec<Vec<String>>> {
    let value = value.map(str::trim);
    if value.is_some_and(|v| v.eq_ignore_ascii_case("none")) {
        return None;
    }
    let mut out = vec![match value {
        Some(v) if !v.is_empty() => file_names(kind, v),
        _ => vec![format!("libnccl-{kind}.so")],
    }];
    if let Some(net) = net {
        let first = net
            .and_then(|n| n.split(',').next())
            .map(str::trim)
            .filter(|n| !n.is_empty() && !n.eq_ignore_ascii_case("none"));
        out.push(first.map_or_else(
            || vec!["libnccl-net.so".to_string()],
            |n| file_names("net", n),
        ));
    }
    Some(out)
}

/// A plugin's name: the C string its struct points at, or `path` where that is NULL.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string that lives as long as the plugin's library.
pub unsafe fn name_or_path(name: *const std::ffi::c_char, path: &str) -> String {
    if name.is_null() {
        return path.to_string();
    }
    // SAFETY: NUL-terminated and alive, by the caller's contract.
    unsafe { std::ffi::CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned()
}

/// Opens the first of `names` that loads, and says which.
pub fn open_first(names: &[String]) -> Option<(Library, String)> {
    for name in names {
        // SAFETY: loading a plugin runs its initialisers; that is what the variable asks for,
        // exactly as NCCL does.
        match unsafe { Library::open(Some(name.as_str()), RTLD_NOW | RTLD_LOCAL) } {
            Ok(lib) => return Some((lib, name.clone())),
            Err(e) => tracing::debug!(target: "oxccl::init", "plugin library {name}: {e}"),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_candidates_follow_nccl() {
        assert_eq!(file_names("tuner", "x"), ["x", "libnccl-tuner-x.so"]);
        assert_eq!(file_names("tuner", "/a/libx.so"), ["/a/libx.so"]);
        assert_eq!(file_names("env", "libx.so"), ["libx.so"]);
        assert_eq!(candidates("profiler", Some("none"), Some(None)), None);
        assert_eq!(
            candidates("profiler", None, Some(Some("ofi,ib"))).unwrap(),
            [
                vec!["libnccl-profiler.so".to_string()],
                file_names("net", "ofi")
            ]
        );
        assert_eq!(
            candidates("env", Some("x"), None).unwrap(),
            [file_names("env", "x")]
        );
    }
}
