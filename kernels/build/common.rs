//! Build-script logic shared by backend-cuda and backend-hip (each `build.rs` includes this file
//! and its vendor's rules, `kernels/cuda/build.rs` or `kernels/hip/build.rs`, with `#[path]`, so
//! there is no extra crate and no build-dependency).
//!
//! The device sources: `kernels/common/` (seen by both compilers: the collective logic, the
//! portability header and the work layout), `kernels/<vendor>/` (seen by one compiler only).
//!
//! Both flavours follow the same rules:
//! - `OXCCL_PREBUILT_KERNELS=<dir>` takes the blob from `<dir>` instead of compiling;
//! - otherwise the compiler comes from `$<COMPILER>`, `$<HOME>/bin`, or `PATH`;
//! - without a compiler, or when it fails, the build warns and embeds an empty blob, unless
//!   `OXCCL_REQUIRE_KERNELS=1` (CI), which turns both into a build error.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Instant, UNIX_EPOCH};

/// What differs between the CUDA and the HIP kernel builds.
pub struct Flavour {
    /// For messages: "CUDA" or "HIP".
    pub name: &'static str,
    /// File name of the blob in OUT_DIR (and in OXCCL_PREBUILT_KERNELS).
    pub blob: &'static str,
    /// The cfg set when the blob holds kernels.
    pub cfg: &'static str,
    /// Variable naming the compiler executable ("NVCC", "HIPCC").
    pub compiler_env: &'static str,
    /// Variables naming a toolkit root whose bin/ holds the compiler.
    pub home_envs: &'static [&'static str],
    /// Executable name to look for.
    pub exe: &'static str,
    /// Variable overriding the architecture list.
    pub archs_env: &'static str,
    /// The folder under `kernels/` with what only this flavour's compiler sees ("cuda", "hip").
    pub dir: &'static str,
}

/// Where the device sources are: `kernels/` beside the crate (the backends), else the nearest
/// one above it (`tests/hip-on-cuda`). The backends keep their `../kernels` spelling, which is
/// part of the compile cache's key.
pub fn kernels_dir() -> PathBuf {
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let beside = Path::new(&manifest).join("../kernels");
    if beside.join("common").is_dir() {
        return beside;
    }
    Path::new(&manifest)
        .ancestors()
        .map(|dir| dir.join("kernels"))
        .find(|k| k.join("common").is_dir())
        .unwrap_or(beside)
}

/// The build script's output directory.
pub fn out_dir() -> PathBuf {
    PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"))
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Declares every input of the kernel build, so cargo reruns the script exactly when needed.
pub fn declare_inputs(f: &Flavour) {
    println!("cargo::rustc-check-cfg=cfg({})", f.cfg);
    for dir in ["common", f.dir, "build"] {
        println!(
            "cargo::rerun-if-changed={}",
            kernels_dir().join(dir).display()
        );
    }
    for var in [
        f.compiler_env,
        f.archs_env,
        "OXCCL_PREBUILT_KERNELS",
        "OXCCL_REQUIRE_KERNELS",
        "OXCCL_KERNEL_CACHE",
    ] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    for var in f.home_envs {
        println!("cargo::rerun-if-env-changed={var}");
    }
    if let Some(dir) = env("OXCCL_PREBUILT_KERNELS") {
        println!(
            "cargo::rerun-if-changed={}",
            Path::new(&dir).join(f.blob).display()
        );
    }
}

/// CI sets `OXCCL_REQUIRE_KERNELS=1`: a build without kernels is then an error.
pub fn require_kernels() -> bool {
    matches!(
        env("OXCCL_REQUIRE_KERNELS").as_deref(),
        Some("1" | "true" | "yes")
    )
}

/// Ends the build without kernels: an error when they are required, else a warning and an
/// empty blob (the backend then reports "built without device kernels" at run time).
pub fn no_kernels(f: &Flavour, why: &str) -> ! {
    if require_kernels() {
        eprintln!(
            "error: OXCCL_REQUIRE_KERNELS is set but the {} kernels were not built: {why}",
            f.name
        );
        std::process::exit(1);
    }
    println!(
        "cargo::warning=building without {} device kernels: {why}",
        f.name
    );
    std::fs::write(out_dir().join(f.blob), b"").expect("write empty kernel blob");
    std::process::exit(0);
}

/// Copies a blob built elsewhere when `OXCCL_PREBUILT_KERNELS` is set; true if it did.
pub fn use_prebuilt(f: &Flavour) -> bool {
    let Some(dir) = env("OXCCL_PREBUILT_KERNELS") else {
        return false;
    };
    let src = Path::new(&dir).join(f.blob);
    match std::fs::read(&src) {
        Ok(bytes) if !bytes.is_empty() => {
            std::fs::write(out_dir().join(f.blob), bytes).expect("write kernel blob");
            println!("cargo::rustc-cfg={}", f.cfg);
            true
        }
        Ok(_) => no_kernels(f, &format!("{} is empty", src.display())),
        Err(e) => no_kernels(f, &format!("cannot read {}: {e}", src.display())),
    }
}

/// `$<COMPILER>`, then `$<HOME>/bin/<exe>`, then `<exe>` on PATH.
pub fn find_compiler(f: &Flavour) -> Result<PathBuf, String> {
    if let Some(path) = env(f.compiler_env) {
        let p = PathBuf::from(&path);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("{}={path} does not exist", f.compiler_env))
        };
    }
    for home in f.home_envs {
        if let Some(root) = env(home) {
            let p = Path::new(&root).join("bin").join(f.exe);
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            let p = dir.join(f.exe);
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    Err(format!(
        "no {} (set {}, or {}, or put it on PATH; .ci/install-gpu-compilers.sh installs one)",
        f.exe,
        f.compiler_env,
        f.home_envs.join(" or ")
    ))
}

/// The architecture list: `$<ARCHS_ENV>` (comma or space separated) or `default`.
pub fn archs(f: &Flavour, default: &[&str]) -> Vec<String> {
    match env(f.archs_env) {
        Some(list) => list
            .split([',', ' ', ';'])
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(String::from)
            .collect(),
        None => default.iter().map(|a| a.to_string()).collect(),
    }
}

/// FNV-1a, 64 bits: a stable hash for cache keys (std's hasher may change between releases).
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn add(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        // Length-delimit, so ("ab", "c") and ("a", "bc") differ.
        for b in (bytes.len() as u64).to_le_bytes() {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

fn hash_tree(h: &mut Fnv, dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for p in entries {
        h.add(p.to_string_lossy().as_bytes());
        if p.is_dir() {
            hash_tree(h, &p);
        } else if let Ok(bytes) = std::fs::read(&p) {
            h.add(&bytes);
        }
    }
}

/// A directory shared by every profile and every cargo command of this target directory
/// (OUT_DIR is `<target>/<profile>/build/<pkg>-<hash>/out`), so `cargo test`, `cargo clippy`
/// and `cargo build --release` compile identical kernels once instead of three times.
/// `OXCCL_KERNEL_CACHE=<dir>` names another (xtask points the librccl build's own target
/// directory at the main one's), `0` turns caching off.
fn cache_dir() -> Option<PathBuf> {
    match env("OXCCL_KERNEL_CACHE").as_deref() {
        Some("0") => return None,
        Some(dir) if !dir.is_empty() => return Some(PathBuf::from(dir)),
        _ => {}
    }
    let out = out_dir();
    Some(out.ancestors().nth(4)?.join("oxccl-kernels"))
}

/// Runs the compiler writing `<OUT_DIR>/<blob>`; records the command and its time in
/// `<OUT_DIR>/<blob>.log` (and in the build script's output) and sets the cfg on success.
/// An identical earlier compile (same sources, command and compiler binary) is reused.
pub fn compile(f: &Flavour, mut cmd: Command) {
    let out = out_dir().join(f.blob);
    let log_path = out_dir().join(format!("{}.log", f.blob));
    let mut key = Fnv::new();
    key.add(format!("{cmd:?}").as_bytes());
    if let Ok(meta) = std::fs::metadata(cmd.get_program()) {
        key.add(&meta.len().to_le_bytes());
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok());
        key.add(&mtime.unwrap_or_default().as_nanos().to_le_bytes());
    }
    hash_tree(&mut key, &kernels_dir().join("common"));
    hash_tree(&mut key, &kernels_dir().join(f.dir));
    let cache = cache_dir();
    let stem = format!("{}-{:016x}", f.blob, key.0);
    let cached = cache
        .as_ref()
        .map(|d| (d.join(format!("{stem}.bin")), d.join(format!("{stem}.log"))));
    if let Some((blob_c, log_c)) = &cached
        && let (Ok(blob), Ok(text)) = (std::fs::read(blob_c), std::fs::read(log_c))
        && !blob.is_empty()
    {
        std::fs::write(&out, blob).expect("write kernel blob");
        std::fs::write(&log_path, text).expect("write compile log");
        println!("oxccl: reused {} kernels from {}", f.name, blob_c.display());
        println!("cargo::rustc-cfg={}", f.cfg);
        return;
    }

    let tmp = out_dir().join(format!("{}.tmp", f.blob));
    cmd.arg("-o").arg(&tmp);
    let shown = format!("{cmd:?}");
    let start = Instant::now();
    let result = cmd.output();
    let secs = start.elapsed().as_secs_f64();
    let output = match result {
        Ok(o) => o,
        Err(e) => no_kernels(f, &format!("cannot run {shown}: {e}")),
    };
    let stderr = String::from_utf8_lossy(&output.stderr);
    let log = format!(
        "{shown}\nexit: {}\nseconds: {secs:.1}\n{stderr}",
        output.status
    );
    std::fs::write(&log_path, &log).expect("write compile log");
    if !output.status.success() {
        eprintln!("{log}");
        let why = format!(
            "the {} compiler failed ({}); its output is above",
            f.name, output.status
        );
        no_kernels(f, &why);
    }
    std::fs::rename(&tmp, &out).expect("move kernel blob into place");
    if let (Some(dir), Some((blob_c, log_c))) = (&cache, &cached) {
        store_in_cache(
            dir,
            &format!("{}-", f.blob),
            &[(&out, blob_c), (&log_path, log_c)],
        );
    }
    println!("oxccl: {} kernels compiled in {secs:.1} s", f.name);
    println!("cargo::rustc-cfg={}", f.cfg);
}

/// Copies build outputs into the cache and drops older entries of the same flavour (each is
/// megabytes, and only the newest matches the sources). Best effort: a failed write only costs a
/// later recompile. Files are written under temporary names and renamed, so a concurrent build
/// never reads a half-written blob.
fn store_in_cache(dir: &Path, prefix: &str, files: &[(&PathBuf, &PathBuf)]) {
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let current = files
                .iter()
                .any(|(_, dst)| dst.file_name() == Some(e.file_name().as_os_str()));
            if name.starts_with(prefix) && !current {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    for (src, dst) in files {
        let name = dst
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let tmp = dir.join(format!(".{name}.{}", std::process::id()));
        if std::fs::copy(src, &tmp)
            .and_then(|_| std::fs::rename(&tmp, dst))
            .is_err()
        {
            let _ = std::fs::remove_file(&tmp);
            return;
        }
    }
}

/// Parallel jobs for the compiler: cargo's job count, at most `max`.
pub fn jobs(max: usize) -> usize {
    env("NUM_JOBS")
        .and_then(|j| j.parse().ok())
        .unwrap_or(1)
        .clamp(1, max.max(1))
}
