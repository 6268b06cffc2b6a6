//! NCCL data types and reduction operators as Rust values, checked from C integers.

use crate::error::{Error, Result};

/// An element type NCCL can move and reduce (`ncclDataType_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DataType {
    /// `ncclInt8` (0).
    Int8 = 0,
    /// `ncclUint8` (1).
    Uint8 = 1,
    /// `ncclInt32` (2).
    Int32 = 2,
    /// `ncclUint32` (3).
    Uint32 = 3,
    /// `ncclInt64` (4).
    Int64 = 4,
    /// `ncclUint64` (5).
    Uint64 = 5,
    /// `ncclFloat16` (6), IEEE binary16.
    Float16 = 6,
    /// `ncclFloat32` (7).
    Float32 = 7,
    /// `ncclFloat64` (8).
    Float64 = 8,
    /// `ncclBfloat16` (9).
    Bfloat16 = 9,
    /// `ncclFloat8e4m3` (10), OCP E4M3 "fn": no infinities, max 448.
    Float8E4M3 = 10,
    /// `ncclFloat8e5m2` (11), OCP E5M2 with infinities, max 57344.
    Float8E5M2 = 11,
}

impl DataType {
    /// Every type, in `ncclDataType_t` order.
    pub const ALL: [DataType; 12] = [
        DataType::Int8,
        DataType::Uint8,
        DataType::Int32,
        DataType::Uint32,
        DataType::Int64,
        DataType::Uint64,
        DataType::Float16,
        DataType::Float32,
        DataType::Float64,
        DataType::Bfloat16,
        DataType::Float8E4M3,
        DataType::Float8E5M2,
    ];

    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            DataType::Int8 | DataType::Uint8 | DataType::Float8E4M3 | DataType::Float8E5M2 => 1,
            DataType::Float16 | DataType::Bfloat16 => 2,
            DataType::Int32 | DataType::Uint32 | DataType::Float32 => 4,
            DataType::Int64 | DataType::Uint64 | DataType::Float64 => 8,
        }
    }

    /// True for the floating-point types.
    pub const fn is_float(self) -> bool {
        matches!(
            self,
            DataType::Float16
                | DataType::Float32
                | DataType::Float64
                | DataType::Bfloat16
                | DataType::Float8E4M3
                | DataType::Float8E5M2
        )
    }

    /// The NCCL spelling, for messages.
    pub const fn name(self) -> &'static str {
        match self {
            DataType::Int8 => "ncclInt8",
            DataType::Uint8 => "ncclUint8",
            DataType::Int32 => "ncclInt32",
            DataType::Uint32 => "ncclUint32",
            DataType::Int64 => "ncclInt64",
            DataType::Uint64 => "ncclUint64",
            DataType::Float16 => "ncclFloat16",
            DataType::Float32 => "ncclFloat32",
            DataType::Float64 => "ncclFloat64",
            DataType::Bfloat16 => "ncclBfloat16",
            DataType::Float8E4M3 => "ncclFloat8e4m3",
            DataType::Float8E5M2 => "ncclFloat8e5m2",
        }
    }
}

impl TryFrom<i32> for DataType {
    type Error = Error;
    fn try_from(v: i32) -> Result<DataType> {
        DataType::ALL
            .get(usize::try_from(v).unwrap_or(usize::MAX))
            .copied()
            .ok_or_else(|| Error::arg(format!("invalid data type {v}")))
    }
}

/// The element-wise combiner of a reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Addition (also used by Avg and PreMulSum).
    Sum,
    /// Multiplication.
    Prod,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
}

/// A user-visible reduction operator (`ncclRedOp_t`), before it is lowered to a [`Reduction`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RedOp {
    /// `ncclSum`.
    Sum,
    /// `ncclProd`.
    Prod,
    /// `ncclMax`.
    Max,
    /// `ncclMin`.
    Min,
    /// `ncclAvg`: sum, then divide by the number of ranks.
    Avg,
    /// `ncclRedOpCreatePreMulSum`: multiply each rank's input by a scalar, then sum.
    PreMulSum(ScalarSource),
}

/// Where the PreMulSum scalar lives.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ScalarSource {
    /// Copied at creation (`ncclScalarHostImmediate`).
    Immediate(Scalar),
    /// Read from device (for the host backend: host) memory at execution time (`ncclScalarDevice`).
    Device(u64),
}

/// One element of some [`DataType`], stored little-endian in 8 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Scalar {
    /// The element's bytes (only the first `dtype.size()` are used).
    pub bytes: [u8; 8],
}

impl Scalar {
    /// A scalar from the first `size` bytes of `src`.
    pub fn from_bytes(src: &[u8]) -> Scalar {
        let mut bytes = [0u8; 8];
        let n = src.len().min(8);
        bytes[..n].copy_from_slice(&src[..n]);
        Scalar { bytes }
    }
}

/// A reduction as executors apply it: a combiner plus optional pre-scaling and post-division.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reduction {
    /// The element-wise combiner.
    pub op: ReduceOp,
    /// Multiply each rank's own input by this before combining (PreMulSum).
    pub pre_scale: Option<ScalarSource>,
    /// Divide the final result by this (Avg).
    pub post_div: Option<u32>,
}

impl Reduction {
    /// Lowers a user operator for a communicator of `nranks`.
    pub fn lower(op: RedOp, nranks: usize) -> Reduction {
        let plain = |op| Reduction {
            op,
            pre_scale: None,
            post_div: None,
        };
        match op {
            RedOp::Sum => plain(ReduceOp::Sum),
            RedOp::Prod => plain(ReduceOp::Prod),
            RedOp::Max => plain(ReduceOp::Max),
            RedOp::Min => plain(ReduceOp::Min),
            RedOp::Avg => Reduction {
                op: ReduceOp::Sum,
                pre_scale: None,
                post_div: Some(nranks as u32),
            },
            RedOp::PreMulSum(s) => Reduction {
                op: ReduceOp::Sum,
                pre_scale: Some(s),
                post_div: None,
            },
        }
    }

    /// A reduction that only copies (for non-reducing collectives).
    pub fn none() -> Reduction {
        Reduction {
            op: ReduceOp::Sum,
            pre_scale: None,
            post_div: None,
        }
    }
}
