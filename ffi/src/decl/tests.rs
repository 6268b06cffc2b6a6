//! Compiles our header against the Rust declarations and layouts.

use super::*;
use crate::config;
use std::collections::BTreeSet;
use std::mem::offset_of;
use std::path::{Path, PathBuf};
use std::process::Command;

fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../include")
}

fn header_text() -> String {
    std::fs::read_to_string(include_dir().join(HEADER)).expect("read header")
}

#[test]
fn header_declares_exactly_the_exports() {
    let declared = xtask::header_functions(&header_text());
    let listed: BTreeSet<String> = header_functions().iter().map(|s| s.to_string()).collect();
    let missing: Vec<_> = listed.difference(&declared).collect();
    let extra: Vec<_> = declared.difference(&listed).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "exported but not in {HEADER}: {missing:?}; in {HEADER} but not exported: {extra:?}"
    );
    // NCCL 2.28.9 exports 52 functions, each with a twin.
    assert_eq!(COMMON.len(), 2 * 52);
}

/// `(C expression, expected value)` pairs: layouts, enum values, macros, initializers.
fn expectations() -> Vec<(String, i128)> {
    let mut v: Vec<(String, i128)> = Vec::new();
    let mut push = |e: &str, x: i128| v.push((e.to_string(), x));
    macro_rules! layout {
        ($c:literal, $t:ty { $($f:ident),* }) => {
            push(concat!("sizeof(", $c, ")"), size_of::<$t>() as i128);
            push(concat!("_Alignof(", $c, ")"), align_of::<$t>() as i128);
            $(push(concat!("offsetof(", $c, ", ", stringify!($f), ")"), offset_of!($t, $f) as i128);)*
        };
    }
    layout!("ncclUniqueId", ncclUniqueId { internal });
    #[cfg(not(feature = "rccl"))]
    layout!(
        "ncclConfig_t",
        ncclConfig_t {
            size,
            magic,
            version,
            blocking,
            cgaClusterSize,
            minCTAs,
            maxCTAs,
            netName,
            splitShare,
            trafficClass,
            commName,
            collnetEnable,
            CTAPolicy,
            shrinkShare,
            nvlsCTAs,
            nChannelsPerNetPeer,
            nvlinkCentricSched
        }
    );
    #[cfg(feature = "rccl")]
    layout!(
        "ncclConfig_t",
        ncclConfig_t {
            size,
            magic,
            version,
            blocking,
            cgaClusterSize,
            minCTAs,
            maxCTAs,
            netName,
            splitShare,
            trafficClass,
            commName,
            collnetEnable,
            CTAPolicy,
            shrinkShare,
            nvlsCTAs,
            nChannelsPerNetPeer,
            nvlinkCentricSched,
            graphUsageMode,
            numRmaCtx,
            maxP2pPeers
        }
    );
    layout!(
        "ncclSimInfo_t",
        ncclSimInfo_t {
            size,
            magic,
            version,
            estimatedTime
        }
    );
    layout!(
        "ncclCommProperties_t",
        ncclCommProperties_t {
            size,
            magic,
            version,
            rank,
            nRanks,
            cudaDev,
            nvmlDev,
            deviceApiSupport,
            multimemSupport,
            ginType,
            nLsaTeams,
            hostRmaSupport,
            railedGinType
        }
    );
    push(
        "offsetof(ncclCommProperties_t, ginType) + sizeof(ncclGinType_t)",
        COMM_PROPERTIES_2_29_2_BYTES as i128,
    );
    layout!(
        "ncclTeam_t",
        ncclTeam_t {
            nRanks,
            rank,
            stride
        }
    );
    #[cfg(feature = "rccl")]
    layout!(
        "ncclWaitSignalDesc_t",
        ncclWaitSignalDesc_t {
            opCnt,
            peer,
            sigIdx,
            ctx
        }
    );
    for (t, s) in [
        ("ncclResult_t", size_of::<ncclResult_t>()),
        ("ncclDataType_t", size_of::<ncclDataType_t>()),
        ("ncclRedOp_t", size_of::<ncclRedOp_t>()),
        ("ncclScalarResidence_t", size_of::<ncclScalarResidence_t>()),
        ("ncclCommMemStat_t", size_of::<ncclCommMemStat_t>()),
        ("ncclGinType_t", size_of::<ncclGinType_t>()),
        ("ncclComm_t", size_of::<ncclComm_t>()),
        ("ncclWindow_t", size_of::<ncclWindow_t>()),
        (<Stream as CType>::c().leak() as &str, size_of::<Stream>()),
    ] {
        push(&format!("sizeof({t})"), s as i128);
    }
    // ncclConfig_t is 80 bytes at 2.28 and 96 at RCCL's 2.30 level, whatever Rust says.
    #[cfg(not(feature = "rccl"))]
    push("sizeof(ncclConfig_t) == 80", 1);
    #[cfg(feature = "rccl")]
    push("sizeof(ncclConfig_t) == 96", 1);
    push("sizeof(ncclUniqueId) == 128", 1);

    let results = [
        "ncclSuccess",
        "ncclUnhandledCudaError",
        "ncclSystemError",
        "ncclInternalError",
        "ncclInvalidArgument",
        "ncclInvalidUsage",
        "ncclRemoteError",
        "ncclInProgress",
    ];
    for (i, r) in results.iter().enumerate() {
        push(r, i as i128);
    }
    push("ncclNumResults", ncclResult_t::NUM_RESULTS.0 as i128);
    #[cfg(feature = "rccl")]
    push("ncclTimeout", ncclResult_t::TIMEOUT.0 as i128);
    for (i, d) in oxccl_core::datatype::DataType::ALL.iter().enumerate() {
        let name = d.name();
        push(name, i as i128);
    }
    for (alias, v) in [
        ("ncclChar", 0),
        ("ncclInt", 2),
        ("ncclHalf", 6),
        ("ncclFloat", 7),
        ("ncclDouble", 8),
        ("ncclNumTypes", 12),
        ("ncclSum", 0),
        ("ncclProd", 1),
        ("ncclMax", 2),
        ("ncclMin", 3),
        ("ncclAvg", 4),
        ("ncclNumOps", 5),
        ("ncclMaxRedOp", 0x7fff_ffff),
        ("ncclScalarDevice", 0),
        ("ncclScalarHostImmediate", 1),
        ("ncclStatGpuMemSuspend", 0),
        ("ncclStatGpuMemSuspended", 1),
        ("ncclStatGpuMemPersist", 2),
        ("ncclStatGpuMemTotal", 3),
        ("NCCL_UNIQUE_ID_BYTES", NCCL_UNIQUE_ID_BYTES as i128),
        ("NCCL_SPLIT_NOCOLOR", NCCL_SPLIT_NOCOLOR as i128),
        ("NCCL_CONFIG_UNDEF_INT", NCCL_CONFIG_UNDEF_INT as i128),
        ("NCCL_SHRINK_DEFAULT", NCCL_SHRINK_DEFAULT as i128),
        ("NCCL_SHRINK_ABORT", NCCL_SHRINK_ABORT as i128),
        ("NCCL_REVOKE_DEFAULT", NCCL_REVOKE_DEFAULT as i128),
        ("NCCL_SUSPEND_MEM", NCCL_SUSPEND_MEM as i128),
        ("NCCL_WIN_DEFAULT", 0),
        ("NCCL_WIN_COLL_SYMMETRIC", NCCL_WIN_COLL_SYMMETRIC as i128),
        ("NCCL_WIN_REQUIRED_ALIGNMENT", 4096),
        ("NCCL_CTA_POLICY_DEFAULT", 0),
        ("NCCL_CTA_POLICY_EFFICIENCY", 1),
        ("NCCL_CTA_POLICY_ZERO", 2),
        ("NCCL_API_MAGIC", NCCL_CONFIG_MAGIC as i128),
        ("NCCL_GIN_TYPE_NONE", ncclGinType_t::NONE.0 as i128),
        ("NCCL_GIN_TYPE_PROXY", ncclGinType_t::PROXY.0 as i128),
        ("NCCL_GIN_TYPE_GDAKI", ncclGinType_t::GDAKI.0 as i128),
        ("NCCL_MAJOR", API_LEVEL.0 as i128),
        ("NCCL_MINOR", API_LEVEL.1 as i128),
        ("NCCL_PATCH", API_LEVEL.2 as i128),
        ("NCCL_VERSION_CODE", VERSION_CODE as i128),
        ("NCCL_VERSION(2,8,4)", 2804),
        ("NCCL_VERSION(2,28,9)", 22809),
        ("NCCL_VERSION(2,30,4)", 23004),
        ("NCCL_VERSION(3,0,0)", 30000),
        ("(NCCL_CONFIG_UNDEF_PTR == NULL)", 1),
    ] {
        push(alias, v);
    }
    #[cfg(feature = "rccl")]
    for (m, v) in [
        ("ncclFp8E4M3", 10),
        ("ncclFp8E5M2", 11),
        ("NCCL_WIN_STRICT_ORDERING", NCCL_WIN_STRICT_ORDERING as i128),
        ("RCCL_BFLOAT16", 1),
        ("RCCL_FLOAT8", 1),
        ("RCCL_GATHER_SCATTER", 1),
        ("RCCL_ALLTOALLV", 1),
        ("RCCL_ALLREDUCE_WITH_BIAS", 1),
        ("RCCL_SUSPEND_RESUME", 1),
        (
            "sizeof(mscclAlgoHandle_t)",
            size_of::<mscclAlgoHandle_t>() as i128,
        ),
    ] {
        push(m, v);
    }

    // NCCL_CONFIG_INITIALIZER must produce what the Rust side treats as "all defaults".
    let init = ncclConfig_t::initializer();
    for (f, x) in [
        ("size", init.size as i128),
        ("magic", init.magic as i128),
        ("version", init.version as i128),
        ("blocking", init.blocking as i128),
        ("cgaClusterSize", init.cgaClusterSize as i128),
        ("minCTAs", init.minCTAs as i128),
        ("maxCTAs", init.maxCTAs as i128),
        ("(init_cfg.netName == NULL)", 1),
        ("splitShare", init.splitShare as i128),
        ("trafficClass", init.trafficClass as i128),
        ("(init_cfg.commName == NULL)", 1),
        ("collnetEnable", init.collnetEnable as i128),
        ("CTAPolicy", init.CTAPolicy as i128),
        ("shrinkShare", init.shrinkShare as i128),
        ("nvlsCTAs", init.nvlsCTAs as i128),
        ("nChannelsPerNetPeer", init.nChannelsPerNetPeer as i128),
        ("nvlinkCentricSched", init.nvlinkCentricSched as i128),
    ] {
        if f.starts_with('(') {
            push(f, x);
        } else {
            push(&format!("init_cfg.{f}"), x);
        }
    }
    #[cfg(feature = "rccl")]
    for (f, x) in [
        ("graphUsageMode", init.graphUsageMode),
        ("numRmaCtx", init.numRmaCtx),
        ("maxP2pPeers", init.maxP2pPeers),
    ] {
        push(&format!("init_cfg.{f}"), x as i128);
    }
    push("init_sim.size", size_of::<ncclSimInfo_t>() as i128);
    push("init_sim.magic", NCCL_SIM_INFO_MAGIC as i128);
    push("init_sim.version", VERSION_CODE as i128);
    push("(init_sim.estimatedTime == -1.0f)", 1);
    push("init_props.size", size_of::<ncclCommProperties_t>() as i128);
    push("init_props.magic", NCCL_CONFIG_MAGIC as i128);
    push("init_props.version", VERSION_CODE as i128);
    // The initializer parses as "every field default".
    // SAFETY: no strings are set in the initializer.
    assert!(unsafe { config::to_core(&init) }.is_ok());
    v
}

/// The C program: prototypes from the declaration list (a mismatch fails to compile), then a
/// `main` printing every expectation as `expr=value`.
fn c_program() -> String {
    let mut s = format!(
        "#include <{HEADER}>\n#include <stdio.h>\n#include <stddef.h>\n\n/* Declarations from ffi/src/decl.rs */\n"
    );
    for (name, proto) in all() {
        s.push_str(&proto(name));
        s.push_str(";\n");
    }
    s.push_str("\nstatic ncclConfig_t init_cfg = NCCL_CONFIG_INITIALIZER;\n");
    s.push_str("static ncclSimInfo_t init_sim = NCCL_SIM_INFO_INITIALIZER;\n");
    s.push_str("static ncclCommProperties_t init_props = NCCL_COMM_PROPERTIES_INITIALIZER;\n\nint main(void) {\n");
    for (expr, _) in expectations() {
        s.push_str(&format!(
            "  printf(\"%s=%lld\\n\", \"{}\", (long long)({expr}));\n",
            expr.replace('"', "\\\"")
        ));
    }
    s.push_str("  return 0;\n}\n");
    s
}

fn compiler(cpp: bool) -> cc::Tool {
    if cpp {
        xtask::cxx_compiler()
    } else {
        xtask::c_compiler()
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("oxccl-ffi-abi-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("run compiler or program");
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn header_matches_rust_layouts_constants_and_signatures() {
    let dir = scratch("c");
    let src = dir.join("abi_check.c");
    let exe = dir.join("abi_check");
    std::fs::write(&src, c_program()).unwrap();
    let tool = compiler(false);
    run(tool
        .to_command()
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic"])
        .arg("-I")
        .arg(include_dir())
        .arg(&src)
        .arg("-o")
        .arg(&exe));
    let out = run(&mut Command::new(&exe));
    let mut mismatches = Vec::new();
    let lines: Vec<&str> = out.lines().collect();
    let want = expectations();
    assert_eq!(lines.len(), want.len());
    for (line, (expr, expected)) in lines.iter().zip(&want) {
        let got: i128 = line.rsplit_once('=').unwrap().1.parse().unwrap();
        if got != *expected {
            mismatches.push(format!("{expr}: header {got}, Rust {expected}"));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn header_compiles_as_cpp_and_old_c() {
    let dir = scratch("cpp");
    let src = dir.join("use.cpp");
    std::fs::write(
        &src,
        format!(
            "#include <{HEADER}>\nint main() {{ ncclConfig_t c = NCCL_CONFIG_INITIALIZER; \
             ncclSimInfo_t s = NCCL_SIM_INFO_INITIALIZER; return (int)(c.size + (size_t)s.magic) & 0; }}\n"
        ),
    )
    .unwrap();
    run(compiler(true)
        .to_command()
        .args(["-std=c++11", "-Wall", "-Wextra", "-Werror", "-c"])
        .arg("-I")
        .arg(include_dir())
        .arg(&src)
        .arg("-o")
        .arg(dir.join("use_cpp.o")));
    // C99 rejects a repeated typedef: the stream typedef must step aside for CUDA's/HIP's own.
    let csrc = dir.join("use99.c");
    #[cfg(not(feature = "rccl"))]
    let pre = "#define __DRIVER_TYPES_H__\ntypedef struct CUstream_st *cudaStream_t;\n";
    #[cfg(feature = "rccl")]
    let pre =
        "#define HIP_INCLUDE_HIP_HIP_RUNTIME_API_H\ntypedef struct ihipStream_t *hipStream_t;\n";
    std::fs::write(
        &csrc,
        format!("{pre}#include <{HEADER}>\nint main(void) {{ ncclConfig_t c = NCCL_CONFIG_INITIALIZER; return (int)c.size & 0; }}\n"),
    )
    .unwrap();
    run(compiler(false)
        .to_command()
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-c"])
        .arg("-I")
        .arg(include_dir())
        .arg(&csrc)
        .arg("-o")
        .arg(dir.join("use99.o")));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn prototype_text() {
    let (_, p) = COMMON[0];
    assert_eq!(p("ncclGetVersion"), "ncclResult_t ncclGetVersion(int*)");
    let ar = COMMON
        .iter()
        .find(|(n, _)| *n == "ncclAllReduce")
        .unwrap()
        .1;
    #[cfg(not(feature = "rccl"))]
    assert_eq!(
        ar("ncclAllReduce"),
        "ncclResult_t ncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t)"
    );
    let _ = ar;
}
