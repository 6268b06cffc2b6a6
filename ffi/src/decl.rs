//! The declaration list: every exported function's C signature, written independently of the
//! exports and checked two ways so Rust, header and library cannot drift apart:
//! - at compile time, each export (and its `p` twin) must coerce to the listed signature;
//! - a test turns the list into C prototypes and compiles them against our header, where any
//!   difference is a "conflicting types" error, and also compares every struct size, field
//!   offset and constant of the header with the Rust side ([`crate::abi`]).

#![allow(non_camel_case_types)]

use crate::abi::*;
use std::ffi::{c_char, c_int, c_uint, c_void};

/// A Rust type with a C spelling, for generating prototypes.
pub trait CType {
    /// The C type name.
    fn c() -> String;
}

macro_rules! ctype {
    ($($t:ty => $s:expr),* $(,)?) => {
        $(impl CType for $t {
            fn c() -> String {
                $s.to_string()
            }
        })*
    };
}

ctype! {
    () => "void",
    c_void => "void",
    c_char => "char",
    c_int => "int",
    c_uint => "unsigned int",
    usize => "size_t",
    u64 => "uint64_t",
    ncclResult_t => "ncclResult_t",
    ncclDataType_t => "ncclDataType_t",
    ncclRedOp_t => "ncclRedOp_t",
    ncclScalarResidence_t => "ncclScalarResidence_t",
    ncclCommMemStat_t => "ncclCommMemStat_t",
    ncclCommProperties_t => "ncclCommProperties_t",
    ncclComm_t => "ncclComm_t",
    ncclWindow_t => "ncclWindow_t",
    ncclUniqueId => "ncclUniqueId",
    ncclConfig_t => "ncclConfig_t",
    ncclSimInfo_t => "ncclSimInfo_t",
    ncclTeam_t => "ncclTeam_t",
    ncclDevComm_t => "ncclDevComm_t",
    ncclDevCommRequirements_t => "ncclDevCommRequirements_t",
    ncclDevResourceRequirements_t => "ncclDevResourceRequirements_t",
    ncclLsaBarrierHandle_t => "ncclLsaBarrierHandle_t",
    ncclGinBarrierHandle_t => "ncclGinBarrierHandle_t",
    ncclLLA2AHandle_t => "ncclLLA2AHandle_t",
}
#[cfg(not(feature = "rccl"))]
ctype! { Stream => "cudaStream_t" }
#[cfg(feature = "rccl")]
ctype! { Stream => "hipStream_t", ncclWaitSignalDesc_t => "ncclWaitSignalDesc_t" }

impl<T: CType> CType for *mut T {
    fn c() -> String {
        format!("{}*", T::c())
    }
}
impl<T: CType> CType for *const T {
    fn c() -> String {
        format!("const {}*", T::c())
    }
}

/// A C function-pointer type whose prototype can be written out.
pub trait CSig {
    /// `ret name(args)`.
    fn proto(name: &str) -> String;
}

macro_rules! csig {
    ($($a:ident),*) => {
        impl<R: CType, $($a: CType),*> CSig for unsafe extern "C" fn($($a),*) -> R {
            fn proto(name: &str) -> String {
                let args: Vec<String> = vec![$($a::c()),*];
                let args = if args.is_empty() { "void".to_string() } else { args.join(", ") };
                format!("{} {}({})", R::c(), name, args)
            }
        }
    };
}
csig!();
csig!(A);
csig!(A, B);
csig!(A, B, C);
csig!(A, B, C, D);
csig!(A, B, C, D, E);
csig!(A, B, C, D, E, F);
csig!(A, B, C, D, E, F, G);
csig!(A, B, C, D, E, F, G, H);
csig!(A, B, C, D, E, F, G, H, I);
csig!(A, B, C, D, E, F, G, H, I, J);
csig!(A, B, C, D, E, F, G, H, I, J, K);
csig!(A, B, C, D, E, F, G, H, I, J, K, L);
csig!(A, B, C, D, E, F, G, H, I, J, K, L, M);
csig!(A, B, C, D, E, F, G, H, I, J, K, L, M, N);

/// One exported function: its name and a prototype writer.
pub type Decl = (&'static str, fn(&str) -> String);

macro_rules! decls {
    ($list:ident: $( $name:ident / $pname:ident : fn($($t:ty),* $(,)?) -> $r:ty; )*) => {
        /// Exported functions with `p` twins, as the header declares them.
        pub const $list: &[Decl] = &[
            $(
                (stringify!($name), <unsafe extern "C" fn($($t),*) -> $r as CSig>::proto),
                (stringify!($pname), <unsafe extern "C" fn($($t),*) -> $r as CSig>::proto),
            )*
        ];
        $(
            const _: unsafe extern "C" fn($($t),*) -> $r = crate::api::$name;
            const _: unsafe extern "C" fn($($t),*) -> $r = crate::api::$pname;
        )*
    };
}

decls! { COMMON:
    ncclGetVersion / pncclGetVersion: fn(*mut c_int) -> ncclResult_t;
    ncclGetUniqueId / pncclGetUniqueId: fn(*mut ncclUniqueId) -> ncclResult_t;
    ncclCommInitRankConfig / pncclCommInitRankConfig:
        fn(*mut ncclComm_t, c_int, ncclUniqueId, c_int, *mut ncclConfig_t) -> ncclResult_t;
    ncclCommInitRank / pncclCommInitRank:
        fn(*mut ncclComm_t, c_int, ncclUniqueId, c_int) -> ncclResult_t;
    ncclCommInitRankScalable / pncclCommInitRankScalable:
        fn(*mut ncclComm_t, c_int, c_int, c_int, *mut ncclUniqueId, *mut ncclConfig_t) -> ncclResult_t;
    ncclCommInitAll / pncclCommInitAll: fn(*mut ncclComm_t, c_int, *const c_int) -> ncclResult_t;
    ncclCommFinalize / pncclCommFinalize: fn(ncclComm_t) -> ncclResult_t;
    ncclCommDestroy / pncclCommDestroy: fn(ncclComm_t) -> ncclResult_t;
    ncclCommAbort / pncclCommAbort: fn(ncclComm_t) -> ncclResult_t;
    ncclCommRevoke / pncclCommRevoke: fn(ncclComm_t, c_int) -> ncclResult_t;
    ncclCommSplit / pncclCommSplit:
        fn(ncclComm_t, c_int, c_int, *mut ncclComm_t, *mut ncclConfig_t) -> ncclResult_t;
    ncclCommShrink / pncclCommShrink:
        fn(ncclComm_t, *mut c_int, c_int, *mut ncclComm_t, *mut ncclConfig_t, c_int) -> ncclResult_t;
    ncclGetErrorString / pncclGetErrorString: fn(ncclResult_t) -> *const c_char;
    ncclGetLastError / pncclGetLastError: fn(ncclComm_t) -> *const c_char;
    ncclResetDebugInit / pncclResetDebugInit: fn() -> ();
    ncclCommGetAsyncError / pncclCommGetAsyncError: fn(ncclComm_t, *mut ncclResult_t) -> ncclResult_t;
    ncclCommCount / pncclCommCount: fn(ncclComm_t, *mut c_int) -> ncclResult_t;
    ncclCommCuDevice / pncclCommCuDevice: fn(ncclComm_t, *mut c_int) -> ncclResult_t;
    ncclCommUserRank / pncclCommUserRank: fn(ncclComm_t, *mut c_int) -> ncclResult_t;
    ncclMemAlloc / pncclMemAlloc: fn(*mut *mut c_void, usize) -> ncclResult_t;
    ncclMemFree / pncclMemFree: fn(*mut c_void) -> ncclResult_t;
    ncclCommRegister / pncclCommRegister:
        fn(ncclComm_t, *mut c_void, usize, *mut *mut c_void) -> ncclResult_t;
    ncclCommDeregister / pncclCommDeregister: fn(ncclComm_t, *mut c_void) -> ncclResult_t;
    ncclCommWindowRegister / pncclCommWindowRegister:
        fn(ncclComm_t, *mut c_void, usize, *mut ncclWindow_t, c_int) -> ncclResult_t;
    ncclCommWindowDeregister / pncclCommWindowDeregister: fn(ncclComm_t, ncclWindow_t) -> ncclResult_t;
    ncclRedOpCreatePreMulSum / pncclRedOpCreatePreMulSum:
        fn(*mut ncclRedOp_t, *mut c_void, ncclDataType_t, ncclScalarResidence_t, ncclComm_t) -> ncclResult_t;
    ncclRedOpDestroy / pncclRedOpDestroy: fn(ncclRedOp_t, ncclComm_t) -> ncclResult_t;
    ncclReduce / pncclReduce:
        fn(*const c_void, *mut c_void, usize, ncclDataType_t, ncclRedOp_t, c_int, ncclComm_t, Stream) -> ncclResult_t;
    ncclBcast / pncclBcast:
        fn(*mut c_void, usize, ncclDataType_t, c_int, ncclComm_t, Stream) -> ncclResult_t;
    ncclBroadcast / pncclBroadcast:
        fn(*const c_void, *mut c_void, usize, ncclDataType_t, c_int, ncclComm_t, Stream) -> ncclResult_t;
    ncclAllReduce / pncclAllReduce:
        fn(*const c_void, *mut c_void, usize, ncclDataType_t, ncclRedOp_t, ncclComm_t, Stream) -> ncclResult_t;
    ncclReduceScatter / pncclReduceScatter:
        fn(*const c_void, *mut c_void, usize, ncclDataType_t, ncclRedOp_t, ncclComm_t, Stream) -> ncclResult_t;
    ncclAllGather / pncclAllGather:
        fn(*const c_void, *mut c_void, usize, ncclDataType_t, ncclComm_t, Stream) -> ncclResult_t;
    ncclAlltoAll / pncclAlltoAll:
        fn(*const c_void, *mut c_void, usize, ncclDataType_t, ncclComm_t, Stream) -> ncclResult_t;
    ncclGather / pncclGather:
        fn(*const c_void, *mut c_void, usize, ncclDataType_t, c_int, ncclComm_t, Stream) -> ncclResult_t;
    ncclScatter / pncclScatter:
        fn(*const c_void, *mut c_void, usize, ncclDataType_t, c_int, ncclComm_t, Stream) -> ncclResult_t;
    ncclSend / pncclSend:
        fn(*const c_void, usize, ncclDataType_t, c_int, ncclComm_t, Stream) -> ncclResult_t;
    ncclRecv / pncclRecv:
        fn(*mut c_void, usize, ncclDataType_t, c_int, ncclComm_t, Stream) -> ncclResult_t;
    ncclGroupStart / pncclGroupStart: fn() -> ncclResult_t;
    ncclGroupEnd / pncclGroupEnd: fn() -> ncclResult_t;
    ncclGroupSimulateEnd / pncclGroupSimulateEnd: fn(*mut ncclSimInfo_t) -> ncclResult_t;
    ncclDevCommCreate / pncclDevCommCreate:
        fn(ncclComm_t, *const ncclDevCommRequirements_t, *mut ncclDevComm_t) -> ncclResult_t;
    ncclDevCommDestroy / pncclDevCommDestroy: fn(ncclComm_t, *const ncclDevComm_t) -> ncclResult_t;
    ncclTeamWorld / pncclTeamWorld: fn(ncclComm_t) -> ncclTeam_t;
    ncclTeamLsa / pncclTeamLsa: fn(ncclComm_t) -> ncclTeam_t;
    ncclTeamRail / pncclTeamRail: fn(ncclComm_t) -> ncclTeam_t;
    ncclTeamRankToWorld / pncclTeamRankToWorld: fn(ncclComm_t, ncclTeam_t, c_int) -> c_int;
    ncclTeamRankToLsa / pncclTeamRankToLsa: fn(ncclComm_t, ncclTeam_t, c_int) -> c_int;
    ncclLsaBarrierCreateRequirement / pncclLsaBarrierCreateRequirement:
        fn(ncclTeam_t, c_int, *mut ncclLsaBarrierHandle_t, *mut ncclDevResourceRequirements_t) -> ncclResult_t;
    ncclGinBarrierCreateRequirement / pncclGinBarrierCreateRequirement:
        fn(ncclComm_t, ncclTeam_t, c_int, *mut ncclGinBarrierHandle_t, *mut ncclDevResourceRequirements_t) -> ncclResult_t;
    ncclLLA2ACalcSlots / pncclLLA2ACalcSlots: fn(c_int, c_int) -> c_int;
    ncclLLA2ACreateRequirement / pncclLLA2ACreateRequirement:
        fn(c_int, c_int, *mut ncclLLA2AHandle_t, *mut ncclDevResourceRequirements_t) -> ncclResult_t;
}

decls! { ADDED_2_29:
    ncclCommGetUniqueId / pncclCommGetUniqueId: fn(ncclComm_t, *mut ncclUniqueId) -> ncclResult_t;
    ncclCommGrow / pncclCommGrow:
        fn(ncclComm_t, c_int, *const ncclUniqueId, c_int, *mut ncclComm_t, *mut ncclConfig_t) -> ncclResult_t;
    ncclCommSuspend / pncclCommSuspend: fn(ncclComm_t, c_int) -> ncclResult_t;
    ncclCommResume / pncclCommResume: fn(ncclComm_t) -> ncclResult_t;
    ncclCommMemStats / pncclCommMemStats: fn(ncclComm_t, ncclCommMemStat_t, *mut u64) -> ncclResult_t;
    ncclWinGetUserPtr / pncclWinGetUserPtr: fn(ncclComm_t, ncclWindow_t, *mut *mut c_void) -> ncclResult_t;
    ncclCommQueryProperties / pncclCommQueryProperties: fn(ncclComm_t, *mut ncclCommProperties_t) -> ncclResult_t;
    ncclAlltoAllv / pncclAlltoAllv:
        fn(*const c_void, *const usize, *const usize, *mut c_void, *const usize, *const usize, ncclDataType_t, ncclComm_t, Stream) -> ncclResult_t;
}

#[cfg(feature = "rccl")]
decls! { RCCL_ONLY:
    ncclPutSignal / pncclPutSignal:
        fn(*const c_void, usize, ncclDataType_t, c_int, ncclWindow_t, usize, c_int, c_int, c_uint, ncclComm_t, Stream) -> ncclResult_t;
    ncclSignal / pncclSignal: fn(c_int, c_int, c_int, c_uint, ncclComm_t, Stream) -> ncclResult_t;
    ncclWaitSignal / pncclWaitSignal:
        fn(c_int, *mut ncclWaitSignalDesc_t, ncclComm_t, Stream) -> ncclResult_t;
    ncclAllToAll / pncclAllToAll:
        fn(*const c_void, *mut c_void, usize, ncclDataType_t, ncclComm_t, Stream) -> ncclResult_t;
    ncclAllToAllv / pncclAllToAllv:
        fn(*const c_void, *const usize, *const usize, *mut c_void, *const usize, *const usize, ncclDataType_t, ncclComm_t, Stream) -> ncclResult_t;
    ncclAllReduceWithBias / pncclAllReduceWithBias:
        fn(*const c_void, *mut c_void, usize, ncclDataType_t, ncclRedOp_t, ncclComm_t, Stream, *const c_void) -> ncclResult_t;
    mscclLoadAlgo / pmscclLoadAlgo: fn(*const c_char, *mut c_int, c_int) -> ncclResult_t;
    mscclRunAlgo / pmscclRunAlgo:
        fn(*const c_void, *const usize, *const usize, *mut c_void, *const usize, *const usize, usize, ncclDataType_t, c_int, c_int, ncclRedOp_t, c_int, ncclComm_t, Stream) -> ncclResult_t;
    mscclUnloadAlgo / pmscclUnloadAlgo: fn(c_int) -> ncclResult_t;
}

/// Exports without a `p` twin.
pub const SINGLES: &[Decl] = &[
    (
        "ncclResetDebugInitInternal",
        <unsafe extern "C" fn() as CSig>::proto,
    ),
    (
        "oxcclGetVersionString",
        <unsafe extern "C" fn() -> *const c_char as CSig>::proto,
    ),
    (
        "oxcclCommHangReport",
        <unsafe extern "C" fn(ncclComm_t, *mut c_char, usize) -> ncclResult_t as CSig>::proto,
    ),
];
const _: unsafe extern "C" fn() = crate::api::ncclResetDebugInitInternal;
const _: unsafe extern "C" fn() -> *const c_char = crate::api::oxcclGetVersionString;
const _: unsafe extern "C" fn(ncclComm_t, *mut c_char, usize) -> ncclResult_t =
    crate::api::oxcclCommHangReport;

/// Every function this flavour exports.
pub fn all() -> Vec<Decl> {
    let v = COMMON.iter().chain(ADDED_2_29).chain(SINGLES);
    #[cfg(feature = "rccl")]
    let v = v.chain(RCCL_ONLY);
    v.copied().collect()
}

/// Functions the flavour's header declares (every export except `ncclResetDebugInitInternal`,
/// which NCCL exports without declaring it).
pub fn header_functions() -> Vec<&'static str> {
    all()
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| *n != "ncclResetDebugInitInternal")
        .collect()
}

/// Path of this flavour's header below `include/`.
#[cfg(not(feature = "rccl"))]
pub const HEADER: &str = "nccl.h";
/// Path of this flavour's header below `include/`.
#[cfg(feature = "rccl")]
pub const HEADER: &str = "rccl/rccl.h";

#[cfg(test)]
mod tests;
