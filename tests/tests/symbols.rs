//! The dynamic symbols of the installed libraries: exactly the header's functions, each with its
//! `p` twin, plus `ncclResetDebugInitInternal`; no Rust symbols, no symbol versions; the right
//! soname; no device runtime linked at build time.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use xtask::{Flavour, Installed, install, profile_of};

/// The 52 functions NVIDIA's libnccl.so.2 2.28.9 exports (each also as `pncclX`).
const NCCL_2_28_9: [&str; 52] = [
    "ncclGetVersion",
    "ncclGetUniqueId",
    "ncclCommInitRank",
    "ncclCommInitRankConfig",
    "ncclCommInitRankScalable",
    "ncclCommInitAll",
    "ncclCommFinalize",
    "ncclCommDestroy",
    "ncclCommAbort",
    "ncclCommRevoke",
    "ncclCommSplit",
    "ncclCommShrink",
    "ncclCommCount",
    "ncclCommCuDevice",
    "ncclCommUserRank",
    "ncclGetErrorString",
    "ncclGetLastError",
    "ncclCommGetAsyncError",
    "ncclResetDebugInit",
    "ncclMemAlloc",
    "ncclMemFree",
    "ncclCommRegister",
    "ncclCommDeregister",
    "ncclCommWindowRegister",
    "ncclCommWindowDeregister",
    "ncclAllReduce",
    "ncclBroadcast",
    "ncclBcast",
    "ncclReduce",
    "ncclAllGather",
    "ncclReduceScatter",
    "ncclAlltoAll",
    "ncclGather",
    "ncclScatter",
    "ncclSend",
    "ncclRecv",
    "ncclGroupStart",
    "ncclGroupEnd",
    "ncclGroupSimulateEnd",
    "ncclRedOpCreatePreMulSum",
    "ncclRedOpDestroy",
    "ncclDevCommCreate",
    "ncclDevCommDestroy",
    "ncclTeamWorld",
    "ncclTeamLsa",
    "ncclTeamRail",
    "ncclTeamRankToWorld",
    "ncclTeamRankToLsa",
    "ncclLsaBarrierCreateRequirement",
    "ncclGinBarrierCreateRequirement",
    "ncclLLA2ACalcSlots",
    "ncclLLA2ACreateRequirement",
];

/// Documented extensions of both builds (each with a `p` twin): NCCL 2.29 additions and AlltoAllv.
const EXTENSIONS: [&str; 8] = [
    "ncclCommGetUniqueId",
    "ncclCommGrow",
    "ncclCommSuspend",
    "ncclCommResume",
    "ncclCommMemStats",
    "ncclWinGetUserPtr",
    "ncclCommQueryProperties",
    "ncclAlltoAllv",
];

/// RCCL-only functions (each with a `p` twin).
const RCCL_ONLY: [&str; 9] = [
    "ncclAllToAll",
    "ncclAllToAllv",
    "ncclAllReduceWithBias",
    "mscclLoadAlgo",
    "mscclRunAlgo",
    "mscclUnloadAlgo",
    "ncclPutSignal",
    "ncclSignal",
    "ncclWaitSignal",
];

fn installed(flavour: Flavour) -> Installed {
    let prefix = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("symbols-{flavour:?}"));
    install(&prefix, flavour, profile_of(cfg!(debug_assertions))).expect("build and install")
}

fn tool(args: &[&str], lib: &Path) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .arg(lib)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", args[0]));
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `(name, nm type letter)` of every defined dynamic symbol.
fn exported(lib: &Path) -> Vec<(String, String)> {
    tool(&["nm", "-D", "--defined-only"], lib)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3).then(|| (f[2].to_string(), f[1].to_string()))
        })
        .collect()
}

fn with_twins(names: impl IntoIterator<Item = String>) -> BTreeSet<String> {
    names
        .into_iter()
        .flat_map(|n| [format!("p{n}"), n])
        .collect()
}

fn check(flavour: Flavour) {
    let inst = installed(flavour);
    let lib: PathBuf = inst.lib_dir.join(flavour.soname());
    let syms = exported(&lib);
    let names: BTreeSet<String> = syms.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(names.len(), syms.len(), "duplicate symbols");

    // Exactly what the installed header declares, plus the one undeclared NCCL export.
    let header = std::fs::read_to_string(inst.include_dir.join(flavour.header())).unwrap();
    let mut want = xtask::header_functions(&header);
    want.insert("ncclResetDebugInitInternal".to_string());
    let missing: Vec<_> = want.difference(&names).collect();
    let extra: Vec<_> = names.difference(&want).collect();
    assert!(
        missing.is_empty(),
        "declared in the header but not exported: {missing:?}"
    );
    assert!(
        extra.is_empty(),
        "exported but not declared (Rust internals?): {extra:?}"
    );

    // Independently of the header: the fixed lists.
    let mut fixed: Vec<String> = NCCL_2_28_9
        .iter()
        .chain(&EXTENSIONS)
        .map(|s| s.to_string())
        .collect();
    if flavour == Flavour::Rccl {
        fixed.extend(RCCL_ONLY.iter().map(|s| s.to_string()));
    }
    let mut fixed = with_twins(fixed);
    fixed.insert("ncclResetDebugInitInternal".into());
    fixed.insert("oxcclGetVersionString".into());
    fixed.insert("oxcclCommHangReport".into());
    assert_eq!(names, fixed);
    let expected_count = match flavour {
        Flavour::Nccl => 2 * 52 + 2 * 8 + 3,
        Flavour::Rccl => 2 * 52 + 2 * 8 + 2 * 9 + 3,
    };
    assert_eq!(names.len(), expected_count);

    for (name, kind) in &syms {
        assert!(
            kind == "T" || kind == "W",
            "{name} is exported as {kind}, not as a function"
        );
        assert!(!name.contains('@'), "{name} carries a symbol version");
    }
    let dynamic = tool(&["readelf", "-d"], &lib);
    assert!(
        dynamic.contains(&format!("Library soname: [{}]", flavour.soname())),
        "soname missing: {dynamic}"
    );
    for runtime in ["libcuda", "libcudart", "libamdhip64", "libnccl", "librccl"] {
        assert!(
            !dynamic
                .lines()
                .any(|l| l.contains("(NEEDED)") && l.contains(runtime)),
            "{runtime} must be loaded at run time, not linked: {dynamic}"
        );
    }
    let versions = tool(&["readelf", "-V"], &lib);
    assert!(
        !versions.contains("Version definition"),
        "symbol versions defined: {versions}"
    );
}

#[test]
fn nccl_exports_exactly_its_header() {
    check(Flavour::Nccl);
}

#[test]
fn rccl_exports_exactly_its_header() {
    check(Flavour::Rccl);
}
