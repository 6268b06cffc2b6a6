//! What profilers are told an operation is: NCCL's names (v2-v5) and NCCL's enum values (v1).

use crate::datatype::DataType;
use crate::plan::{Algorithm, CollKind, P2pDir, Protocol};
use std::ffi::CStr;

/// NCCL's name of a collective, as profilers show it.
pub fn func_name(kind: CollKind) -> &'static CStr {
    use CollKind::*;
    match kind {
        AllReduce => c"AllReduce",
        Broadcast => c"Broadcast",
        Reduce => c"Reduce",
        AllGather => c"AllGather",
        ReduceScatter => c"ReduceScatter",
        AllToAll => c"AlltoAll",
        AllToAllv => c"AlltoAllv",
        Gather => c"Gather",
        Scatter => c"Scatter",
        SendRecv => c"SendRecv",
    }
}

/// NCCL's name of a send or receive.
pub fn p2p_name(dir: P2pDir) -> &'static CStr {
    match dir {
        P2pDir::Send => c"Send",
        P2pDir::Recv => c"Recv",
    }
}

/// NCCL's name of a data type (`ncclFloat32`, …).
pub fn type_name(t: DataType) -> &'static CStr {
    use DataType::*;
    match t {
        Int8 => c"ncclInt8",
        Uint8 => c"ncclUint8",
        Int32 => c"ncclInt32",
        Uint32 => c"ncclUint32",
        Int64 => c"ncclInt64",
        Uint64 => c"ncclUint64",
        Float16 => c"ncclFloat16",
        Float32 => c"ncclFloat32",
        Float64 => c"ncclFloat64",
        Bfloat16 => c"ncclBfloat16",
        Float8E4M3 => c"ncclFloat8e4m3",
        Float8E5M2 => c"ncclFloat8e5m2",
    }
}

/// The name of an algorithm: NCCL's where NCCL has it.
pub fn algo_name(algo: Algorithm) -> &'static CStr {
    match algo {
        Algorithm::Ring => c"RING",
        Algorithm::Tree => c"TREE",
        Algorithm::Direct => c"Direct",
    }
}

/// NCCL's name of a protocol.
pub fn proto_name(proto: Protocol) -> &'static CStr {
    match proto {
        Protocol::Ll => c"LL",
        Protocol::Ll128 => c"LL128",
        Protocol::Simple => c"SIMPLE",
    }
}

/// `ncclFunc_t` of a collective; an AlltoAllv is an AlltoAll (NCCL has no value for it).
pub fn func_id(kind: CollKind) -> u8 {
    use CollKind::*;
    match kind {
        Broadcast => 0,
        Reduce => 1,
        AllGather => 2,
        ReduceScatter => 3,
        AllReduce => 4,
        SendRecv => 5,
        AllToAll | AllToAllv => 8,
        Scatter => 9,
        Gather => 10,
    }
}

/// `ncclFunc_t` of a send or receive.
pub fn p2p_id(dir: P2pDir) -> u8 {
    match dir {
        P2pDir::Send => 6,
        P2pDir::Recv => 7,
    }
}

/// `NCCL_ALGO_*`; the direct algorithm, which NCCL lacks, is `NCCL_ALGO_UNDEF` in a byte.
pub fn algo_id(algo: Algorithm) -> u8 {
    match algo {
        Algorithm::Tree => 0,
        Algorithm::Ring => 1,
        Algorithm::Direct => u8::MAX,
    }
}

/// `NCCL_PROTO_*`.
pub fn proto_id(proto: Protocol) -> u8 {
    match proto {
        Protocol::Ll => 0,
        Protocol::Ll128 => 1,
        Protocol::Simple => 2,
    }
}
