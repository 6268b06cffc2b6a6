//! STUB: host reduction arithmetic (replaced by the real implementation).

use crate::datatype::{DataType, ReduceOp, Scalar};

/// `acc[i] = acc[i] ⊕ other[i]` for every element.
pub fn accumulate(_dtype: DataType, _op: ReduceOp, _acc: &mut [u8], _other: &[u8]) {}
/// `buf[i] *= scalar`.
pub fn pre_scale(_dtype: DataType, _buf: &mut [u8], _scalar: &Scalar) {}
/// `buf[i] /= n`.
pub fn post_divide(_dtype: DataType, _buf: &mut [u8], _n: u32) {}
