//! The device kernels: the fatbin nvcc built from `kernels/common`, and the work layout they read
//! (`oxccl-kernel-abi`, re-exported).
//!
//! `build.rs` (rules in `kernels/cuda/build.rs`) compiles `kernels/common/executor.cu` for every architecture in `OXCCL_CUDA_ARCHS`
//! (default sm_75, sm_80, sm_90, sm_100, plus compute_100 PTX for newer GPUs) into one
//! uncompressed fatbin, embedded here for `cuModuleLoadData`. Without nvcc the blob is empty and
//! [`kernels_built`] is false, so the backend can say "built without device kernels".

pub use oxccl_kernel_abi::*;

/// Keeps the embedded blob 16-byte aligned: the loader parses its headers in place.
#[repr(C, align(16))]
struct Aligned<B: ?Sized>(B);

static FATBIN_ALIGNED: &Aligned<[u8]> =
    &Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/oxccl.fatbin")));

/// The kernels' fatbin (empty when built without nvcc).
pub static FATBIN: &[u8] = &FATBIN_ALIGNED.0;

/// True when this build embeds device kernels.
pub fn kernels_built() -> bool {
    cfg!(oxccl_cuda_kernels) && !FATBIN.is_empty()
}

/// What one fatbin entry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FatbinKind {
    /// PTX text, JIT-compiled by the driver for GPUs newer than every cubin.
    Ptx,
    /// A cubin (ELF) for one SM architecture.
    Cubin,
}

/// One code image inside a fatbin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FatbinEntry<'a> {
    /// PTX or cubin.
    pub kind: FatbinKind,
    /// Architecture times ten plus minor, as in `sm_90` -> 90.
    pub arch: u32,
    /// The payload is compressed (its names are then not searchable).
    pub compressed: bool,
    /// The image.
    pub payload: &'a [u8],
}

const FATBIN_MAGIC: u32 = 0xBA55_ED50;
/// Entry flag NVIDIA's tools set on compressed payloads.
const FATBIN_FLAG_COMPRESSED: u64 = 0x2000;

fn le_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn le_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn le_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Lists the images of a fatbin as `nvcc --fatbin` writes it (for diagnostics: which
/// architectures a build carries).
///
/// Layout: a 16-byte header (magic, version, header size, size of what follows), then entries of
/// a header (kind 1 = PTX, 2 = ELF; header size; payload size; flags at +40; arch at +28) and the
/// payload.
pub fn fatbin_entries(blob: &[u8]) -> Result<Vec<FatbinEntry<'_>>, String> {
    let bad = |what: &str| format!("malformed fatbin: {what}");
    if le_u32(blob, 0) != Some(FATBIN_MAGIC) {
        return Err(bad("no magic"));
    }
    let header = usize::from(le_u16(blob, 6).ok_or_else(|| bad("short header"))?);
    let body = usize::try_from(le_u64(blob, 8).ok_or_else(|| bad("short header"))?)
        .map_err(|_| bad("size"))?;
    let end = header
        .checked_add(body)
        .filter(|&e| e <= blob.len())
        .ok_or_else(|| bad("truncated"))?;
    let mut at = header;
    let mut out = Vec::new();
    while at < end {
        let kind = match le_u16(blob, at).ok_or_else(|| bad("entry header"))? {
            1 => FatbinKind::Ptx,
            2 => FatbinKind::Cubin,
            k => return Err(bad(&format!("entry kind {k}"))),
        };
        let ehdr = le_u32(blob, at + 4).ok_or_else(|| bad("entry header"))? as usize;
        let size = usize::try_from(le_u64(blob, at + 8).ok_or_else(|| bad("entry header"))?)
            .map_err(|_| bad("entry size"))?;
        let arch = le_u32(blob, at + 28).ok_or_else(|| bad("entry header"))?;
        let flags = le_u64(blob, at + 40).ok_or_else(|| bad("entry header"))?;
        let start = at
            .checked_add(ehdr)
            .ok_or_else(|| bad("entry header size"))?;
        let stop = start
            .checked_add(size)
            .filter(|&s| s <= end)
            .ok_or_else(|| bad("entry size"))?;
        out.push(FatbinEntry {
            kind,
            arch,
            compressed: flags & FATBIN_FLAG_COMPRESSED != 0,
            payload: &blob[start..stop],
        });
        at = stop;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_built_matches_the_blob() {
        assert_eq!(kernels_built(), !FATBIN.is_empty());
        assert_eq!(FATBIN.as_ptr() as usize % 16, 0);
        if !kernels_built() {
            eprintln!("built without nvcc: no fatbin to check");
        }
    }

    #[test]
    fn fatbin_parser_rejects_garbage() {
        assert!(fatbin_entries(b"").is_err());
        assert!(fatbin_entries(&[0u8; 64]).is_err());
        let mut hdr = Vec::new();
        hdr.extend_from_slice(&FATBIN_MAGIC.to_le_bytes());
        hdr.extend_from_slice(&1u16.to_le_bytes());
        hdr.extend_from_slice(&16u16.to_le_bytes());
        hdr.extend_from_slice(&1000u64.to_le_bytes());
        assert!(fatbin_entries(&hdr).is_err(), "declared body past the end");
    }

    #[cfg(oxccl_cuda_kernels)]
    fn contains(hay: &[u8], needle: &[u8]) -> bool {
        hay.windows(needle.len()).any(|w| w == needle)
    }

    /// Every image (each cubin and the PTX) defines every entry point the backend looks up.
    #[cfg(oxccl_cuda_kernels)]
    #[test]
    fn every_image_has_every_entry_point() {
        let entries = fatbin_entries(FATBIN).expect("embedded fatbin parses");
        assert!(!entries.is_empty());
        for e in &entries {
            assert!(
                !e.compressed,
                "sm_{} image is compressed; build with --no-compress",
                e.arch
            );
            match e.kind {
                FatbinKind::Cubin => assert!(e.payload.starts_with(b"\x7fELF"), "sm_{}", e.arch),
                FatbinKind::Ptx => assert!(contains(e.payload, b".version"), "PTX {}", e.arch),
            }
            for name in KERNEL_NAMES
                .iter()
                .chain(&LARGE_KERNEL_NAMES)
                .chain(&SMALL_KERNEL_NAMES)
                .chain(&MEDIUM_KERNEL_NAMES)
            {
                let found = match e.kind {
                    // A cubin's symbol table holds the name NUL-terminated.
                    FatbinKind::Cubin => contains(e.payload, format!("{name}\0").as_bytes()),
                    FatbinKind::Ptx => contains(e.payload, format!(".entry {name}(").as_bytes()),
                };
                assert!(
                    found,
                    "{name} missing from the {:?} image for {}",
                    e.kind, e.arch
                );
            }
        }
        let archs: Vec<u32> = entries
            .iter()
            .filter(|e| e.kind == FatbinKind::Cubin)
            .map(|e| e.arch)
            .collect();
        let expected = option_env!("OXCCL_CUDA_BUILT_ARCHS").unwrap_or("");
        if !expected.is_empty() {
            let want: Vec<u32> = expected.split(',').map(|a| a.parse().unwrap()).collect();
            assert_eq!(archs, want, "cubins in the fatbin");
            assert!(
                entries.iter().any(|e| e.kind == FatbinKind::Ptx),
                "no PTX for newer GPUs"
            );
        }
    }

    /// Spills put local-memory traffic into the copy loops; ptxas reports them (-warn-spills).
    #[cfg(oxccl_cuda_kernels)]
    #[test]
    fn no_register_spills() {
        if option_env!("OXCCL_NVCC_USED").is_none() {
            return;
        }
        let log = std::fs::read_to_string(concat!(env!("OUT_DIR"), "/oxccl.fatbin.log")).unwrap();
        let spills: Vec<&str> = log.lines().filter(|l| l.contains("spilled")).collect();
        assert!(
            spills.is_empty(),
            "ptxas spilled registers:\n{}",
            spills.join("\n")
        );
    }

    /// The HIP flavour converts bf16/fp8 in software; on the host, check those conversions bit for
    /// bit against NVIDIA's, plus the reduction arithmetic (kernels/tests/host_codec_test.cu).
    #[cfg(oxccl_cuda_kernels)]
    #[test]
    fn host_codecs_match_nvidia() {
        let Some(nvcc) = option_env!("OXCCL_NVCC_USED") else {
            eprintln!("kernels came prebuilt: no nvcc to build the host test with");
            return;
        };
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels");
        let cuda_home = std::path::Path::new(nvcc)
            .parent()
            .and_then(|p| p.parent())
            .unwrap();
        let dir =
            std::env::temp_dir().join(format!("oxccl-host-codec-cuda-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join("host_codec_test");
        let out = std::process::Command::new(nvcc)
            .args(["-std=c++17", "-O2"])
            .arg(format!("-L{}", cuda_home.join("lib").display()))
            .arg(format!("-L{}", cuda_home.join("lib64").display()))
            .arg(format!("-I{}", root.join("common").display()))
            .arg(root.join("tests/host_codec_test.cu"))
            .arg("-o")
            .arg(&exe)
            .output()
            .expect("run nvcc");
        assert!(
            out.status.success(),
            "nvcc failed:\n{}",
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
