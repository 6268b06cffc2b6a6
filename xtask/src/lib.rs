//! Building and installing oxccl's C libraries the way NCCL and RCCL install:
//!
//! ```text
//! NCCL flavour                          RCCL flavour
//! <prefix>/lib/libnccl.so.2.28.9        <prefix>/lib/librccl.so.1.0
//! <prefix>/lib/libnccl.so.2 -> ...      <prefix>/lib/librccl.so.1 -> librccl.so.1.0
//! <prefix>/lib/libnccl.so   -> ...      <prefix>/lib/librccl.so   -> librccl.so.1
//! <prefix>/include/nccl.h               <prefix>/include/rccl/rccl.h
//! <prefix>/include/nccl_device.h        <prefix>/include/rccl/nccl_device.h
//! <prefix>/include/nccl_device/*.h      <prefix>/include/rccl/nccl_device/*.h
//! ```
//!
//! `nccl_device.h` and its folder are oxccl's own device-API headers (NCCL 2.28.9's, GIN
//! declared only), copied as they are from `include/`: one set of files for nvcc and for hipcc
//! (AMD GPUs), which each flavour installs beside its API header. AMD's RCCL installs no device
//! headers (only `rccl/rccl.h` and plugin headers), so the RCCL flavour puts them where its
//! users already point the compiler, `<rccl/nccl_device.h>`.
//!
//! The two flavours are mutually exclusive cargo features of one crate, so each is built in its
//! own target directory (`target/` and `target-rccl/`) and neither rebuild clobbers the other.
//! The integration tests call [`install`] directly. Both headers are generated from one
//! template, `include/api.h.in` ([`headers`]; `cargo xtask headers`).

pub mod headers;

use std::io;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The device-API headers in the source tree, below `include/`: the umbrella header and the
/// folder of its parts.
pub const DEVICE_HEADERS: (&str, &str) = ("nccl_device.h", "nccl_device");

/// Which drop-in library to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flavour {
    /// `libnccl.so.2` with `nccl.h` (cargo feature `nccl`, the default).
    Nccl,
    /// `librccl.so.1` with `rccl/rccl.h` (cargo feature `rccl`).
    Rccl,
}

impl Flavour {
    /// The file name the library is installed under (the real file, not a link).
    pub fn file_name(self) -> &'static str {
        match self {
            Flavour::Nccl => "libnccl.so.2.28.9",
            Flavour::Rccl => "librccl.so.1.0",
        }
    }
    /// The soname (what programs record in `DT_NEEDED`).
    pub fn soname(self) -> &'static str {
        match self {
            Flavour::Nccl => "libnccl.so.2",
            Flavour::Rccl => "librccl.so.1",
        }
    }
    /// The link-time name (`-lnccl` / `-lrccl`).
    pub fn link_name(self) -> &'static str {
        match self {
            Flavour::Nccl => "libnccl.so",
            Flavour::Rccl => "librccl.so",
        }
    }
    /// `-l` argument.
    pub fn lib_flag(self) -> &'static str {
        match self {
            Flavour::Nccl => "-lnccl",
            Flavour::Rccl => "-lrccl",
        }
    }
    /// Header path below `include/`, in the source tree and in the install.
    pub fn header(self) -> &'static str {
        match self {
            Flavour::Nccl => "nccl.h",
            Flavour::Rccl => "rccl/rccl.h",
        }
    }
    /// Where the device-API headers ([`DEVICE_HEADERS`]) are installed below `<prefix>/include`:
    /// the umbrella header and the folder of its parts, in the folder of [`Flavour::header`].
    /// Their `core.h` includes the API header one folder up, so it must sit there.
    pub fn device_headers(self) -> (&'static str, &'static str) {
        match self {
            Flavour::Nccl => ("nccl_device.h", "nccl_device"),
            Flavour::Rccl => ("rccl/nccl_device.h", "rccl/nccl_device"),
        }
    }
    /// Cargo feature arguments selecting this flavour.
    pub fn cargo_features(self) -> &'static [&'static str] {
        match self {
            Flavour::Nccl => &[],
            Flavour::Rccl => &["--no-default-features", "--features", "rccl"],
        }
    }
}

/// Cargo profile to build with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Profile {
    /// `dev` (shares artifacts with `cargo build` / `cargo test`).
    Debug,
    /// `release` (what users install).
    Release,
}

impl Profile {
    fn dir(self) -> &'static str {
        match self {
            Profile::Debug => "debug",
            Profile::Release => "release",
        }
    }
}

/// Where an install put things.
#[derive(Debug, Clone)]
pub struct Installed {
    /// `<prefix>`.
    pub prefix: PathBuf,
    /// `<prefix>/lib`.
    pub lib_dir: PathBuf,
    /// `<prefix>/include`.
    pub include_dir: PathBuf,
    /// The real library file.
    pub library: PathBuf,
}

/// The workspace root (this crate's parent directory).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives inside the workspace")
        .to_path_buf()
}

/// The cargo target directory a flavour is built in.
pub fn target_dir(flavour: Flavour) -> PathBuf {
    let base = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    match flavour {
        Flavour::Nccl => base,
        Flavour::Rccl => {
            let mut name = base.file_name().unwrap_or_default().to_os_string();
            name.push("-rccl");
            base.with_file_name(name)
        }
    }
}

fn err(context: impl std::fmt::Display, e: io::Error) -> String {
    format!("{context}: {e}")
}

/// Builds the flavour's shared library; returns the path cargo wrote it to.
pub fn build(flavour: Flavour, profile: Profile) -> Result<PathBuf, String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target = target_dir(flavour);
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace_root())
        .env("CARGO_TARGET_DIR", &target)
        .args(["build", "--package", "oxccl-ffi", "--lib"])
        .args(flavour.cargo_features());
    if flavour == Flavour::Rccl && std::env::var_os("OXCCL_KERNEL_CACHE").is_none() {
        // The librccl build has its own target directory (other features); its HIP kernels
        // are the ones the main build compiled, so it shares that build's compile cache.
        cmd.env(
            "OXCCL_KERNEL_CACHE",
            target_dir(Flavour::Nccl).join("oxccl-kernels"),
        );
    }
    if profile == Profile::Release {
        cmd.arg("--release");
    }
    let status = cmd
        .status()
        .map_err(|e| err(format!("running {cmd:?}"), e))?;
    if !status.success() {
        return Err(format!("{cmd:?} failed with {status}"));
    }
    let lib = target.join(profile.dir()).join("liboxccl_ffi.so");
    if !lib.is_file() {
        return Err(format!("cargo did not produce {}", lib.display()));
    }
    Ok(lib)
}

/// Replaces `link` with a symlink to `target` (a name in the same directory).
fn relink(target: &str, link: &Path) -> Result<(), String> {
    match std::fs::remove_file(link) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(format!("removing {}", link.display()), e)),
    }
    symlink(target, link).map_err(|e| err(format!("linking {}", link.display()), e))
}

/// Copies `from` to `to` through a temporary name, so a process that has the old file mapped
/// keeps its copy intact.
fn replace_file(from: &Path, to: &Path) -> Result<(), String> {
    let tmp = to.with_extension("oxccl-tmp");
    std::fs::copy(from, &tmp).map_err(|e| err(format!("copying to {}", tmp.display()), e))?;
    std::fs::rename(&tmp, to).map_err(|e| err(format!("renaming to {}", to.display()), e))
}

/// Lays out an already built library and the flavour's header under `prefix`.
pub fn install_built(prefix: &Path, flavour: Flavour, built: &Path) -> Result<Installed, String> {
    let lib_dir = prefix.join("lib");
    let include_dir = prefix.join("include");
    let header_dst = include_dir.join(flavour.header());
    for d in [
        &lib_dir,
        header_dst.parent().expect("header has a directory"),
    ] {
        std::fs::create_dir_all(d).map_err(|e| err(format!("creating {}", d.display()), e))?;
    }
    let library = lib_dir.join(flavour.file_name());
    replace_file(built, &library)?;
    relink(flavour.file_name(), &lib_dir.join(flavour.soname()))?;
    relink(flavour.soname(), &lib_dir.join(flavour.link_name()))?;
    replace_file(
        &workspace_root().join("include").join(flavour.header()),
        &header_dst,
    )?;
    let (umbrella, folder) = flavour.device_headers();
    install_device_headers(&include_dir.join(umbrella), &include_dir.join(folder))?;
    Ok(Installed {
        prefix: prefix.to_path_buf(),
        lib_dir,
        include_dir,
        library,
    })
}

/// Copies the umbrella header of [`DEVICE_HEADERS`] to `umbrella` and the `.h` files of its
/// folder into `folder`. The folder is listed rather than named file by file, so a header added
/// there is installed without touching this.
fn install_device_headers(umbrella: &Path, folder: &Path) -> Result<(), String> {
    let src = workspace_root().join("include");
    let (src_umbrella, src_folder) = DEVICE_HEADERS;
    let src_folder = src.join(src_folder);
    std::fs::create_dir_all(folder)
        .map_err(|e| err(format!("creating {}", folder.display()), e))?;
    replace_file(&src.join(src_umbrella), umbrella)?;
    let listing = std::fs::read_dir(&src_folder)
        .map_err(|e| err(format!("listing {}", src_folder.display()), e))?;
    for entry in listing {
        let path = entry
            .map_err(|e| err(format!("listing {}", src_folder.display()), e))?
            .path();
        if path.extension().is_some_and(|x| x == "h") {
            let name = path.file_name().expect("a listed file has a name");
            replace_file(&path, &folder.join(name))?;
        }
    }
    Ok(())
}

/// Builds the flavour and installs it under `prefix`.
pub fn install(prefix: &Path, flavour: Flavour, profile: Profile) -> Result<Installed, String> {
    let built = build(flavour, profile)?;
    install_built(prefix, flavour, &built)
}

fn compiler(cpp: bool) -> cc::Tool {
    cc::Build::new()
        .cpp(cpp)
        .target(env!("XTASK_BUILD_TARGET"))
        .host(env!("XTASK_BUILD_HOST"))
        .opt_level(1)
        .cargo_metadata(false)
        .cargo_warnings(false)
        .get_compiler()
}

/// A C compiler for the target this crate was built for (for tests compiling C programs).
pub fn c_compiler() -> cc::Tool {
    compiler(false)
}

/// The matching C++ compiler.
pub fn cxx_compiler() -> cc::Tool {
    compiler(true)
}

/// The profile a test binary was built with, so its installs reuse the same artifacts.
pub fn profile_of(debug_assertions: bool) -> Profile {
    if debug_assertions {
        Profile::Debug
    } else {
        Profile::Release
    }
}

/// Removes `/* */` and `//` comments from C source.
fn strip_c_comments(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    loop {
        let block = rest.find("/*");
        let line = rest.find("//");
        match (block, line) {
            (Some(b), l) if l.is_none_or(|l| b < l) => {
                out.push_str(&rest[..b]);
                out.push(' ');
                rest = match rest[b + 2..].find("*/") {
                    Some(end) => &rest[b + 2 + end + 2..],
                    None => "",
                };
            }
            (_, Some(l)) => {
                out.push_str(&rest[..l]);
                rest = &rest[l..];
                rest = &rest[rest.find('\n').unwrap_or(rest.len())..];
            }
            _ => {
                out.push_str(rest);
                return out;
            }
        }
    }
}

/// Names of the API functions a header declares: identifiers starting with `nccl`, `pnccl`,
/// `msccl`, `pmsccl` or `oxccl` that are followed by `(` outside comments and `#define`s.
pub fn header_functions(header: &str) -> std::collections::BTreeSet<String> {
    let code = strip_c_comments(header);
    let mut names = std::collections::BTreeSet::new();
    for line in code.lines() {
        if line.trim_start().starts_with('#') {
            continue;
        }
        let bytes = line.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i].is_ascii_alphabetic() || bytes[i] == b'_' {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                let ident = &line[start..i];
                let api = ["nccl", "pnccl", "msccl", "pmsccl", "oxccl"]
                    .iter()
                    .any(|p| ident.starts_with(p));
                if api && line[i..].trim_start().starts_with('(') {
                    names.insert(ident.to_string());
                }
            } else {
                i += 1;
            }
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_parser() {
        let h = "/* ncclNotMe(int) */\n#define NCCL_X(a) ncclAlsoNot(a)\n\
                 ncclResult_t ncclA(int x); // ncclB(\nconst char *pncclC (void);\n\
                 typedef struct ncclComm *ncclComm_t;\nncclResult_t mscclD(int);\n";
        let got: Vec<_> = header_functions(h).into_iter().collect();
        assert_eq!(got, ["mscclD", "ncclA", "pncclC"]);
    }

    /// The device headers land beside each flavour's API header, byte for byte: `nccl.h` and
    /// `nccl_device.h` in `include/`, `rccl.h` and `nccl_device.h` in `include/rccl/` (where
    /// `core.h`'s `../rccl.h` then finds the RCCL header, and no `nccl.h` is there to be taken
    /// instead).
    #[test]
    fn install_lays_out_device_headers() {
        let root = std::env::temp_dir().join(format!("oxccl-xtask-install-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let built = root.join("liboxccl_ffi.so");
        std::fs::write(&built, b"not a library").unwrap();
        let src = workspace_root().join("include");
        let same = |a: &Path, b: &Path| std::fs::read(a).unwrap() == std::fs::read(b).unwrap();
        let parts: Vec<_> = std::fs::read_dir(src.join("nccl_device"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(parts.iter().any(|n| n == "core.h"), "{parts:?}");
        for (flavour, prefix, dir) in [(Flavour::Nccl, "nccl", ""), (Flavour::Rccl, "rccl", "rccl")]
        {
            let installed = install_built(&root.join(prefix), flavour, &built).unwrap();
            let inc = installed.include_dir.join(dir);
            assert!(
                inc.join(flavour.header().rsplit('/').next().unwrap())
                    .is_file()
            );
            assert!(same(&inc.join("nccl_device.h"), &src.join("nccl_device.h")));
            for name in &parts {
                assert!(same(
                    &inc.join("nccl_device").join(name),
                    &src.join("nccl_device").join(name)
                ));
            }
            let (umbrella, folder) = flavour.device_headers();
            assert_eq!(
                inc.join("nccl_device.h"),
                installed.include_dir.join(umbrella)
            );
            assert_eq!(inc.join("nccl_device"), installed.include_dir.join(folder));
        }
        let rccl = root.join("rccl/include");
        assert!(!rccl.join("nccl.h").exists() && !rccl.join("rccl/nccl.h").exists());
        assert!(!rccl.join("nccl_device.h").exists());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn rccl_target_dir_is_separate() {
        assert_ne!(target_dir(Flavour::Nccl), target_dir(Flavour::Rccl));
        assert!(
            target_dir(Flavour::Rccl).ends_with("target-rccl")
                || std::env::var_os("CARGO_TARGET_DIR").is_some()
        );
    }
}
