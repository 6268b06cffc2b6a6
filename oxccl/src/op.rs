//! Reduction operators.

use crate::Element;
use oxccl_core::datatype::{RedOp, ScalarSource};

/// How a reduction combines the ranks' elements (`ncclRedOp_t`), typed by the element so that a
/// PreMulSum factor always has the buffers' type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ReduceOp<T: Element> {
    /// `ncclSum`.
    Sum,
    /// `ncclProd`.
    Prod,
    /// `ncclMin`.
    Min,
    /// `ncclMax`.
    Max,
    /// `ncclAvg`: the sum divided by the number of ranks.
    Avg,
    /// `ncclRedOpCreatePreMulSum` with a host scalar: each rank's input times the factor, summed.
    PreMulSum(T),
}

impl<T: Element> ReduceOp<T> {
    /// The runtime's operator.
    pub(crate) fn lower(self) -> RedOp {
        match self {
            ReduceOp::Sum => RedOp::Sum,
            ReduceOp::Prod => RedOp::Prod,
            ReduceOp::Min => RedOp::Min,
            ReduceOp::Max => RedOp::Max,
            ReduceOp::Avg => RedOp::Avg,
            ReduceOp::PreMulSum(f) => RedOp::PreMulSum(ScalarSource::Immediate(f.scalar())),
        }
    }
}
