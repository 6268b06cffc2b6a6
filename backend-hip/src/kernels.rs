//! The device kernels: the code objects hipcc built from `kernels/common`, and the work layout
//! they read (`oxccl-kernel-abi`, re-exported).
//!
//! `build.rs` (rules in `kernels/hip/build.rs`) compiles the same `kernels/common/executor.cu`
//! as the CUDA backend, as HIP, for every target in `OXCCL_HIP_ARCHS` (default gfx908, gfx90a,
//! gfx940, gfx1030) into one clang offload bundle, embedded here for `hipModuleLoadData`. Without hipcc the blob is empty and
//! [`kernels_built`] is false, so the backend can say "built without device kernels".

pub use oxccl_kernel_abi::*;

/// Keeps the embedded blob 16-byte aligned: the loader parses its headers in place.
#[repr(C, align(16))]
struct Aligned<B: ?Sized>(B);

static CODE_OBJECT_ALIGNED: &Aligned<[u8]> =
    &Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/oxccl.hipfb")));

/// The kernels' offload bundle, one code object per GPU target (empty when built without hipcc).
pub static CODE_OBJECT: &[u8] = &CODE_OBJECT_ALIGNED.0;

/// True when this build embeds device kernels.
pub fn kernels_built() -> bool {
    cfg!(oxccl_hip_kernels) && !CODE_OBJECT.is_empty()
}

/// One code object inside a clang offload bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BundleEntry<'a> {
    /// Target triple and processor, e.g. `hipv4-amdgcn-amd-amdhsa--gfx90a`.
    pub target: &'a str,
    /// The code object (an ELF; empty for the host entry).
    pub payload: &'a [u8],
}

impl BundleEntry<'_> {
    /// The GPU processor of a device entry (`gfx90a`), `None` for the host entry.
    pub fn gpu(&self) -> Option<&str> {
        let (triple, proc_) = self.target.split_once("--")?;
        triple.contains("amdgcn").then_some(proc_)
    }
}

const BUNDLE_MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";

fn le_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// Lists the entries of an uncompressed clang offload bundle (what `hipcc --genco` writes), for
/// diagnostics: which GPU targets a build carries.
///
/// Layout: the magic, a `u64` entry count, then per entry `u64` offset, `u64` size, `u64` target
/// length and the target string; offsets are from the start of the bundle.
pub fn bundle_entries(blob: &[u8]) -> Result<Vec<BundleEntry<'_>>, String> {
    let bad = |what: &str| format!("malformed offload bundle: {what}");
    if !blob.starts_with(BUNDLE_MAGIC) {
        return Err(bad("no magic"));
    }
    let mut at = BUNDLE_MAGIC.len();
    let count = le_u64(blob, at).ok_or_else(|| bad("no entry count"))?;
    at += 8;
    let mut out = Vec::new();
    for _ in 0..count {
        let field = |at: usize| {
            le_u64(blob, at)
                .and_then(|v| usize::try_from(v).ok())
                .ok_or_else(|| bad("entry header"))
        };
        let (offset, size, tlen) = (field(at)?, field(at + 8)?, field(at + 16)?);
        at += 24;
        let tend = at
            .checked_add(tlen)
            .filter(|&e| e <= blob.len())
            .ok_or_else(|| bad("target"))?;
        let target =
            std::str::from_utf8(&blob[at..tend]).map_err(|_| bad("target is not UTF-8"))?;
        at = tend;
        let pend = offset
            .checked_add(size)
            .filter(|&e| e <= blob.len())
            .ok_or_else(|| bad("entry size"))?;
        out.push(BundleEntry {
            target,
            payload: &blob[offset..pend],
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shared kernels must not depend on the warp width (32 on NVIDIA and RDNA, 64 on CDNA):
    /// they stride by `blockDim.x` and synchronise whole blocks only. Warp-level intrinsics belong
    /// in `gpu_port.h`, which defines them for both widths; the kernel sources use none. On
    /// NVIDIA, `OXCCL_BLOCK_THREADS=256` runs them with the HIP backend's block shape.
    #[test]
    fn kernel_sources_use_no_warp_level_operations() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels/common");
        let banned = [
            "__shfl",
            "warpSize",
            "__ballot",
            "__activemask",
            "__syncwarp",
            "__any",
            "__all",
            "oxccl_shfl",
            "OXCCL_WARP_SIZE",
            "__lane",
            "% 32",
            "& 31",
            "/ 32",
            ">> 5",
        ];
        let mut checked = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            // The kernel sources sit at the top; `oxccl/` holds the headers (gpu_port.h is where
            // warp-level operations belong).
            if !path.is_file() {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for (i, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                for b in banned {
                    assert!(
                        !code.contains(b),
                        "{}:{}: `{b}` ties the kernel to a warp width: {line}",
                        path.display(),
                        i + 1
                    );
                }
            }
            checked += 1;
        }
        assert!(
            checked >= 3,
            "kernel sources not found in {}",
            dir.display()
        );
    }

    #[test]
    fn kernels_built_matches_the_blob() {
        assert_eq!(kernels_built(), !CODE_OBJECT.is_empty());
        assert_eq!(CODE_OBJECT.as_ptr() as usize % 16, 0);
        if !kernels_built() {
            eprintln!("built without hipcc: no code object to check");
        }
    }

    #[test]
    fn bundle_parser_rejects_garbage() {
        assert!(bundle_entries(b"").is_err());
        assert!(bundle_entries(b"__CLANG_OFFLOAD_BUNDLE__").is_err());
        let mut b = BUNDLE_MAGIC.to_vec();
        b.extend_from_slice(&1u64.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
        b.extend_from_slice(&100u64.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
        assert!(bundle_entries(&b).is_err(), "entry past the end");
    }

    #[test]
    fn bundle_target_names_parse() {
        let e = BundleEntry {
            target: "hipv4-amdgcn-amd-amdhsa--gfx90a",
            payload: &[],
        };
        assert_eq!(e.gpu(), Some("gfx90a"));
        let h = BundleEntry {
            target: "host-x86_64-unknown-linux-gnu",
            payload: &[],
        };
        assert_eq!(h.gpu(), None);
    }

    #[cfg(oxccl_hip_kernels)]
    fn contains(hay: &[u8], needle: &[u8]) -> bool {
        hay.windows(needle.len()).any(|w| w == needle)
    }

    /// Every GPU code object defines every entry point (and its kernel descriptor).
    #[cfg(oxccl_hip_kernels)]
    #[test]
    fn every_code_object_has_every_entry_point() {
        let entries = bundle_entries(CODE_OBJECT).expect("embedded bundle parses");
        let gpus: Vec<&BundleEntry<'_>> = entries.iter().filter(|e| e.gpu().is_some()).collect();
        assert!(!gpus.is_empty(), "no GPU code objects in the bundle");
        for e in &gpus {
            assert!(
                e.payload.starts_with(b"\x7fELF"),
                "{} is not an ELF",
                e.target
            );
            for name in KERNEL_NAMES {
                assert!(
                    contains(e.payload, format!("{name}\0").as_bytes()),
                    "{name} missing in {}",
                    e.target
                );
                // hipModuleGetFunction needs the kernel descriptor symbol too.
                assert!(
                    contains(e.payload, format!("{name}.kd\0").as_bytes()),
                    "{name}.kd missing in {}",
                    e.target
                );
            }
        }
        let expected = option_env!("OXCCL_HIP_BUILT_ARCHS").unwrap_or("");
        if !expected.is_empty() {
            let mut want: Vec<&str> = expected.split(',').collect();
            let mut got: Vec<&str> = gpus.iter().filter_map(|e| e.gpu()).collect();
            want.sort_unstable();
            got.sort_unstable();
            assert_eq!(got, want, "GPU targets in the bundle");
        }
    }

    /// The HIP flavour's conversions and arithmetic on the host, compiled by the same hipcc
    /// (kernels/tests/host_codec_test.cu; the CUDA backend compares them with NVIDIA's).
    #[cfg(oxccl_hip_kernels)]
    #[test]
    fn host_codecs_hold_under_hipcc() {
        let Some(hipcc) = option_env!("OXCCL_HIPCC_USED") else {
            eprintln!("kernels came prebuilt: no hipcc to build the host test with");
            return;
        };
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels");
        let dir = std::env::temp_dir().join(format!("oxccl-host-codec-hip-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join("host_codec_test");
        // Any offload target works: the test has no kernels, it only needs HIP's headers.
        let gpu = option_env!("OXCCL_HIP_BUILT_ARCHS")
            .and_then(|a| a.split(',').next())
            .unwrap_or("gfx90a");
        let out = std::process::Command::new(hipcc)
            .env("HIP_PLATFORM", "amd")
            .args(["-std=c++17", "-O2", "-x", "hip"])
            .arg(format!("--offload-arch={gpu}"))
            .arg(format!("-I{}", root.join("common").display()))
            .arg(root.join("tests/host_codec_test.cu"))
            .arg("-o")
            .arg(&exe)
            .output()
            .expect("run hipcc");
        assert!(
            out.status.success(),
            "hipcc failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let run = std::process::Command::new(&exe)
            .output()
            .expect("run host_codec_test");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            run.status.success(),
            "host_codec_test failed:\n{}{}",
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr)
        );
    }
}
