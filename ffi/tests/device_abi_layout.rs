//! The device API's structures as laid out by `oxccl_ffi::abi` against NVIDIA's NCCL 2.28.9:
//! every size and field offset that device code compiled against NVIDIA's `nccl_device.h`
//! reads. `NCCL_2_28_9` holds NVIDIA's numbers (x86-64); the first test checks ours against
//! them everywhere, the second re-derives them from NVIDIA's header where it is at hand
//! (`OXCCL_NV_NCCL_INCLUDE`, or the wheel `scripts/nccl-tests/build.sh` unpacks, plus a CUDA
//! include directory from `CUDA_HOME`) by compiling a C++ program that prints them, and the
//! third compiles the same program against oxccl's own `include/nccl_device.h`.
//!
//! The last two compile `tests/device_api/kernels.cu`, kernels over every part of the device
//! API, with the GPU compilers against the headers as each flavour installs them: hipcc for AMD
//! GPUs (gfx90a, wave64, and gfx1030, wave32) against `rccl/nccl_device.h`, nvcc for sm_90
//! against `nccl_device.h`, with [`NCCL_2_28_9`] as `static_assert`s the device compiler checks.
//! Without a compiler they skip, unless `OXCCL_REQUIRE_KERNELS=1` (CI), where they fail.

use oxccl_ffi::abi::{
    ncclDevComm_t, ncclDevCommRequirements_t, ncclDevCommWindowEntry, ncclDevCommWindowTable,
    ncclDevResourceRequirements_t, ncclGinBarrierHandle_t, ncclLLA2AHandle_t,
    ncclLsaBarrierHandle_t, ncclMultimemHandle_t, ncclTeam_t, ncclTeamRequirements_t,
    ncclWindow_vidmem,
};
use std::mem::{offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The kernel builds' rules for finding nvcc and hipcc and for `OXCCL_REQUIRE_KERNELS`.
#[path = "../../kernels/build/common.rs"]
#[allow(dead_code)]
mod kernel_build;

/// (C++ struct name, its size in ours, [(field, offset in ours)]) for every struct.
macro_rules! layouts {
    ($($c:literal => $ty:ty { $($f:ident),* $(,)? }),* $(,)?) => {
        vec![$(($c, size_of::<$ty>(), vec![$((stringify!($f), offset_of!($ty, $f))),*])),*]
    };
}

type Layout = (&'static str, usize, Vec<(&'static str, usize)>);

fn ours() -> Vec<Layout> {
    layouts! {
        "ncclTeam" => ncclTeam_t { nRanks, rank, stride },
        "ncclWindow_vidmem" => ncclWindow_vidmem {
            winHost, lsaFlatBase, lsaRank, worldRank, stride4G, mcOffset4K, ginOffset4K, ginWins
        },
        "ncclMultimemHandle" => ncclMultimemHandle_t { mcBasePtr },
        "ncclLsaBarrierHandle" => ncclLsaBarrierHandle_t { bufHandle, nBarriers },
        "ncclGinBarrierHandle" => ncclGinBarrierHandle_t { signal0, bufHandle },
        "ncclLLA2AHandle" => ncclLLA2AHandle_t { bufHandle, nSlots },
        "ncclDevCommWindowTable::Entry" => ncclDevCommWindowEntry { base, size, window },
        "ncclDevCommWindowTable" => ncclDevCommWindowTable { entries, next },
        "ncclDevComm" => ncclDevComm_t {
            rank, nRanks, nRanks_rcp32, lsaRank, lsaSize, lsaSize_rcp32, windowTable,
            resourceWindow, resourceWindow_inlined, lsaMultimem, lsaBarrier, railGinBarrier,
            ginContextCount, ginTypes, ginHandles, ginSignalBase, ginSignalCount, ginCounterBase,
            ginCounterCount, ginSignalShadows
        },
        "ncclDevCommRequirements" => ncclDevCommRequirements_t {
            resourceRequirementsList, teamRequirementsList, lsaMultimem, barrierCount,
            lsaBarrierCount, railGinBarrierCount, lsaLLA2ABlockCount, lsaLLA2ASlotCount,
            ginForceEnable, ginContextCount, ginSignalCount, ginCounterCount
        },
        "ncclDevResourceRequirements" => ncclDevResourceRequirements_t {
            next, bufferSize, bufferAlign, outBufferHandle, ginSignalCount, ginCounterCount,
            outGinSignalStart, outGinCounterStart
        },
        "ncclTeamRequirements" => ncclTeamRequirements_t { next, team, multimem, outMultimemHandle },
    }
}

/// NVIDIA's NCCL 2.28.9 on x86-64: "struct size" and "struct.field offset" lines, as the
/// program of `from_nvidia_header` prints them.
const NCCL_2_28_9: &str = "\
ncclTeam 12
ncclTeam.nRanks 0
ncclTeam.rank 4
ncclTeam.stride 8
ncclWindow_vidmem 72
ncclWindow_vidmem.winHost 0
ncclWindow_vidmem.lsaFlatBase 8
ncclWindow_vidmem.lsaRank 16
ncclWindow_vidmem.worldRank 20
ncclWindow_vidmem.stride4G 24
ncclWindow_vidmem.mcOffset4K 28
ncclWindow_vidmem.ginOffset4K 32
ncclWindow_vidmem.ginWins 40
ncclMultimemHandle 8
ncclMultimemHandle.mcBasePtr 0
ncclLsaBarrierHandle 8
ncclLsaBarrierHandle.bufHandle 0
ncclLsaBarrierHandle.nBarriers 4
ncclGinBarrierHandle 8
ncclGinBarrierHandle.signal0 0
ncclGinBarrierHandle.bufHandle 4
ncclLLA2AHandle 8
ncclLLA2AHandle.bufHandle 0
ncclLLA2AHandle.nSlots 4
ncclDevCommWindowTable::Entry 24
ncclDevCommWindowTable::Entry.base 0
ncclDevCommWindowTable::Entry.size 8
ncclDevCommWindowTable::Entry.window 16
ncclDevCommWindowTable 776
ncclDevCommWindowTable.entries 0
ncclDevCommWindowTable.next 768
ncclDevComm 200
ncclDevComm.rank 0
ncclDevComm.nRanks 4
ncclDevComm.nRanks_rcp32 8
ncclDevComm.lsaRank 12
ncclDevComm.lsaSize 16
ncclDevComm.lsaSize_rcp32 20
ncclDevComm.windowTable 24
ncclDevComm.resourceWindow 32
ncclDevComm.resourceWindow_inlined 40
ncclDevComm.lsaMultimem 112
ncclDevComm.lsaBarrier 120
ncclDevComm.railGinBarrier 128
ncclDevComm.ginContextCount 136
ncclDevComm.ginTypes 137
ncclDevComm.ginHandles 144
ncclDevComm.ginSignalBase 176
ncclDevComm.ginSignalCount 180
ncclDevComm.ginCounterBase 184
ncclDevComm.ginCounterCount 188
ncclDevComm.ginSignalShadows 192
ncclDevCommRequirements 56
ncclDevCommRequirements.resourceRequirementsList 0
ncclDevCommRequirements.teamRequirementsList 8
ncclDevCommRequirements.lsaMultimem 16
ncclDevCommRequirements.barrierCount 20
ncclDevCommRequirements.lsaBarrierCount 24
ncclDevCommRequirements.railGinBarrierCount 28
ncclDevCommRequirements.lsaLLA2ABlockCount 32
ncclDevCommRequirements.lsaLLA2ASlotCount 36
ncclDevCommRequirements.ginForceEnable 40
ncclDevCommRequirements.ginContextCount 44
ncclDevCommRequirements.ginSignalCount 48
ncclDevCommRequirements.ginCounterCount 52
ncclDevResourceRequirements 56
ncclDevResourceRequirements.next 0
ncclDevResourceRequirements.bufferSize 8
ncclDevResourceRequirements.bufferAlign 16
ncclDevResourceRequirements.outBufferHandle 24
ncclDevResourceRequirements.ginSignalCount 32
ncclDevResourceRequirements.ginCounterCount 36
ncclDevResourceRequirements.outGinSignalStart 40
ncclDevResourceRequirements.outGinCounterStart 48
ncclTeamRequirements 32
ncclTeamRequirements.next 0
ncclTeamRequirements.team 8
ncclTeamRequirements.multimem 20
ncclTeamRequirements.outMultimemHandle 24
";

/// `ours()` as the lines of [`NCCL_2_28_9`].
fn lines(layouts: &[Layout]) -> String {
    let mut s = String::new();
    for (name, size, fields) in layouts {
        s += &format!("{name} {size}\n");
        for (f, off) in fields {
            s += &format!("{name}.{f} {off}\n");
        }
    }
    s
}

#[test]
fn our_layouts_are_nvidias() {
    assert_eq!(lines(&ours()), NCCL_2_28_9);
}

/// NVIDIA's include directory and a CUDA one, if both are here.
fn nvidia_headers() -> Option<(PathBuf, PathBuf)> {
    let nv = std::env::var_os("OXCCL_NV_NCCL_INCLUDE")
        .map(PathBuf::from)
        .or_else(|| {
            let home = std::env::var_os("HOME")?;
            Some(PathBuf::from(home).join(".cache/oxccl-nccl-tests/nccl-2.28.9/include"))
        })
        .filter(|p| p.join("nccl_device.h").exists())?;
    let cuda = PathBuf::from(std::env::var_os("CUDA_HOME")?).join("include");
    cuda.join("cuda_runtime.h").exists().then_some((nv, cuda))
}

/// The sizes and offsets of every struct in [`ours`], as a C++ program compiled by g++ (or
/// `CXX`) with `includes` prints them in the form of [`NCCL_2_28_9`].
fn printed_by_header(includes: &[PathBuf]) -> String {
    let mut prog = String::from(
        "#include <nccl.h>\n#include <nccl_device.h>\n#include <cstddef>\n#include <cstdio>\nint main() {\n",
    );
    for (name, _, fields) in ours() {
        prog += &format!("  printf(\"{name} %zu\\n\", sizeof({name}));\n");
        for (f, _) in fields {
            prog += &format!("  printf(\"{name}.{f} %zu\\n\", offsetof({name}, {f}));\n");
        }
    }
    prog += "}\n";
    let dir = std::env::temp_dir().join(format!(
        "oxccl-layout-{}-{}",
        std::process::id(),
        std::thread::current()
            .name()
            .unwrap_or("main")
            .replace("::", "-")
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, exe) = (dir.join("layout.cpp"), dir.join("layout"));
    std::fs::write(&src, prog).unwrap();
    let mut cc = Command::new(cxx());
    cc.args(["-std=c++17", "-o"]).arg(&exe).arg(&src);
    for inc in includes {
        cc.arg("-I").arg(inc);
    }
    let built = cc.output().expect("run the C++ compiler");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn cxx() -> String {
    std::env::var("CXX").unwrap_or_else(|_| "g++".into())
}

#[test]
fn from_nvidia_header() {
    let Some((nv, cuda)) = nvidia_headers() else {
        eprintln!(
            "skipped: NVIDIA's nccl_device.h (OXCCL_NV_NCCL_INCLUDE) or CUDA_HOME/include is missing"
        );
        return;
    };
    assert_eq!(printed_by_header(&[nv, cuda]), NCCL_2_28_9);
}

/// oxccl's `include/nccl_device.h` lays the structs out as NVIDIA's does, so a kernel compiled
/// against it reads what the library writes (and runs on NVIDIA's library too).
#[test]
fn from_our_header() {
    let ours = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../include");
    let cuda = std::env::var_os("CUDA_HOME").map(|h| PathBuf::from(h).join("include"));
    let Some(cuda) = cuda.filter(|c| c.join("cuda_runtime.h").exists()) else {
        eprintln!("skipped: CUDA_HOME/include is missing");
        return;
    };
    if Command::new(cxx()).arg("--version").output().is_err() {
        eprintln!("skipped: no C++ compiler ({})", cxx());
        return;
    }
    assert_eq!(printed_by_header(&[ours, cuda]), NCCL_2_28_9);
}

/// `static_assert`s of every size and offset in `table` (lines as in [`NCCL_2_28_9`]), for a
/// device compiler to check against the headers it compiles.
fn layout_asserts(table: &str) -> String {
    let mut h = String::from("// Written by ffi/tests/device_abi_layout.rs.\n#pragma once\n");
    for line in table.lines() {
        let (what, n) = line
            .rsplit_once(' ')
            .expect("a layout line is `name number`");
        h += &match what.rsplit_once('.') {
            Some((ty, field)) => {
                format!("static_assert(offsetof({ty}, {field}) == {n}, \"{what}\");\n")
            }
            None => format!("static_assert(sizeof({what}) == {n}, \"{what}\");\n"),
        };
    }
    h
}

/// The kernels of `tests/device_api/kernels.cu`, each of which must be in the code object.
const KERNELS: &[&str] = &[
    "_Z7lsa_sum", // the suite's kernel keeps its C++ (mangled) name
    "oxccl_dev_windows",
    "oxccl_dev_teams",
    "oxccl_dev_lla2a",
    "oxccl_dev_coops",
    "oxccl_dev_barriers",
    "oxccl_dev_gin",
];

/// The GPU compiler the kernel builds would use, or None (with the reason printed) to skip;
/// a panic when `OXCCL_REQUIRE_KERNELS` says it must be there.
fn gpu_compiler(
    name: &'static str,
    compiler_env: &'static str,
    home_envs: &'static [&'static str],
    exe: &'static str,
) -> Option<PathBuf> {
    let f = kernel_build::Flavour {
        name,
        blob: "",
        cfg: "",
        compiler_env,
        home_envs,
        exe,
        archs_env: "",
        dir: "",
    };
    match kernel_build::find_compiler(&f) {
        Ok(path) => Some(path),
        Err(why) if kernel_build::require_kernels() => {
            panic!("OXCCL_REQUIRE_KERNELS is set, but no {name} compiler: {why}")
        }
        Err(why) => {
            eprintln!("skipped: {why}");
            None
        }
    }
}

/// A fresh scratch directory holding `layout_asserts.h` from `table`, and the headers of
/// `flavour` installed under `<dir>/prefix` as `cargo xtask install` lays them out (beside a
/// stand-in library: only the headers are compiled against). Returns the directory and the
/// installed include directory.
fn scratch(tag: &str, flavour: xtask::Flavour, table: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("oxccl-devapi-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let stand_in = dir.join("lib.so");
    std::fs::write(&stand_in, b"not a library").unwrap();
    let installed = xtask::install_built(&dir.join("prefix"), flavour, &stand_in).unwrap();
    std::fs::write(dir.join("layout_asserts.h"), layout_asserts(table)).unwrap();
    (dir, installed.include_dir)
}

fn kernels_source() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/device_api/kernels.cu")
}

/// Where `lsa_sum_kernel.cuh`, the GPU suite's kernel that kernels.cu includes, is.
fn suite_kernels() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/gpu/device_api")
}

/// Runs `cmd`; its stderr when it fails.
fn run(mut cmd: Command) -> Result<(), String> {
    let out = cmd.output().expect("run the GPU compiler");
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The code object holds every kernel and every target named in `parts`.
fn assert_holds(object: &Path, parts: &[&str]) {
    let bytes = std::fs::read(object).unwrap();
    for part in KERNELS.iter().chain(parts) {
        assert!(
            bytes.windows(part.len()).any(|w| w == part.as_bytes()),
            "{} lacks {part}",
            object.display()
        );
    }
}

/// hipcc compiles the whole device API for AMD GPUs against the RCCL flavour's installed
/// headers, with NCCL's layouts as the device pass sees them; and a layout off by one field
/// fails that compile (so the layout check is not skipped by the headers or the compiler).
#[test]
fn rccl_flavour_compiles_for_amd_gpus() {
    let Some(hipcc) = gpu_compiler("HIP", "HIPCC", &["ROCM_PATH", "HIP_PATH"], "hipcc") else {
        return;
    };
    // `mode`: --genco for the device code alone, -c for a program's object (host pass too).
    let hip = |mode: &str, dir: &Path, include: &Path, src: &Path, out: &Path, archs: &[&str]| {
        let mut cmd = Command::new(&hipcc);
        // hipcc targets NVIDIA whenever it finds an nvcc, which CI also installs.
        cmd.env("HIP_PLATFORM", "amd")
            .arg(mode)
            .args(["-std=c++17", "-x", "hip", "-Wall", "-Wextra", "-Werror"])
            .arg("-I")
            .arg(include)
            .arg("-I")
            .arg(dir)
            .arg("-I")
            .arg(suite_kernels())
            .arg("-o")
            .arg(out)
            .arg(src);
        for a in archs {
            cmd.arg(format!("--offload-arch={a}"));
        }
        run(cmd)
    };

    let (dir, include) = scratch("hip", xtask::Flavour::Rccl, NCCL_2_28_9);
    assert!(include.join("rccl/nccl_device.h").is_file());
    let object = dir.join("kernels.hipfb");
    let archs = ["gfx90a", "gfx1030"];
    if let Err(e) = hip(
        "--genco",
        &dir,
        &include,
        &kernels_source(),
        &object,
        &archs,
    ) {
        panic!("{e}");
    }
    assert_holds(&object, &archs);
    let program = dir.join("kernels.o");
    if let Err(e) = hip(
        "-c",
        &dir,
        &include,
        &kernels_source(),
        &program,
        &archs[..1],
    ) {
        panic!("{e}");
    }
    let _ = std::fs::remove_dir_all(&dir);

    let wrong = NCCL_2_28_9.replace("ncclDevComm.lsaBarrier 120", "ncclDevComm.lsaBarrier 124");
    assert_ne!(wrong, NCCL_2_28_9);
    let (dir, include) = scratch("hip-wrong", xtask::Flavour::Rccl, &wrong);
    let src = dir.join("layout.hip");
    std::fs::write(
        &src,
        "#include <rccl/rccl.h>\n#include <rccl/nccl_device.h>\n#include <cstddef>\n\
         #include \"layout_asserts.h\"\n",
    )
    .unwrap();
    let failed = hip(
        "--genco",
        &dir,
        &include,
        &src,
        &dir.join("layout.hipfb"),
        &archs[..1],
    )
    .expect_err("a wrong layout number compiled");
    assert!(failed.contains("ncclDevComm.lsaBarrier"), "{failed}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// nvcc compiles the same kernels for sm_90 (where the multimem paths are compiled too) against
/// the NCCL flavour's installed headers.
#[test]
fn nccl_flavour_compiles_for_nvidia_gpus() {
    let Some(nvcc) = gpu_compiler("CUDA", "NVCC", &["CUDA_HOME", "CUDA_PATH"], "nvcc") else {
        return;
    };
    let (dir, include) = scratch("cuda", xtask::Flavour::Nccl, NCCL_2_28_9);
    let object = dir.join("kernels.cubin");
    let mut cmd = Command::new(&nvcc);
    cmd.args([
        "--cubin",
        "-arch=sm_90",
        "-std=c++17",
        "-Werror",
        "all-warnings",
    ])
    .arg("-I")
    .arg(&include)
    .arg("-I")
    .arg(&dir)
    .arg("-I")
    .arg(suite_kernels())
    .arg("-o")
    .arg(&object)
    .arg(kernels_source());
    if let Err(e) = run(cmd) {
        panic!("{e}");
    }
    assert_holds(&object, &[]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The GPU suite's device API programs (`tests/gpu/device_api`: the LSA sum and the GIN puts,
/// host code included) compile with nvcc against the NCCL flavour's installed headers, as they
/// do against NVIDIA's (where `scripts/nccl-tests/pack.sh` builds them for GPUs).
#[test]
fn the_gpu_suite_s_device_api_programs_compile_against_ours() {
    let Some(nvcc) = gpu_compiler("CUDA", "NVCC", &["CUDA_HOME", "CUDA_PATH"], "nvcc") else {
        return;
    };
    let (dir, include) = scratch("cuda-programs", xtask::Flavour::Nccl, NCCL_2_28_9);
    for program in ["lsa_sum.cu", "gin_put.cu"] {
        let mut cmd = Command::new(&nvcc);
        cmd.args(["-c", "-arch=sm_90", "-std=c++17", "-Werror", "all-warnings"])
            .arg("-I")
            .arg(&include)
            .arg("-o")
            .arg(dir.join(program).with_extension("o"))
            .arg(suite_kernels().join(program));
        if let Err(e) = run(cmd) {
            panic!("{program}: {e}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
