//! User-created reduction operators (`ncclRedOpCreatePreMulSum`) and raw operator lookup.

use super::{Communicator, NUM_BUILTIN_OPS};
use crate::backend::Backend;
use crate::datatype::{DataType, RedOp, ScalarSource};
use crate::error::{Error, Result};

impl<B: Backend> Communicator<B> {
    /// `ncclRedOpCreatePreMulSum`: a new operator handle multiplying inputs by `scalar`.
    pub fn create_premul_sum(&self, dtype: DataType, scalar: ScalarSource) -> Result<i32> {
        let mut ops = self.inner.red_ops.lock().unwrap_or_else(|p| p.into_inner());
        let slot = match ops.iter().position(|o| o.is_none()) {
            Some(i) => {
                ops[i] = Some((dtype, scalar));
                i
            }
            None => {
                ops.push(Some((dtype, scalar)));
                ops.len() - 1
            }
        };
        Ok(NUM_BUILTIN_OPS + slot as i32)
    }

    /// `ncclRedOpDestroy`.
    pub fn destroy_red_op(&self, op: i32) -> Result<()> {
        if op < NUM_BUILTIN_OPS {
            return Err(Error::arg(format!(
                "operator {op} is built in and cannot be destroyed"
            )));
        }
        let mut ops = self.inner.red_ops.lock().unwrap_or_else(|p| p.into_inner());
        match ops.get_mut((op - NUM_BUILTIN_OPS) as usize) {
            Some(slot @ Some(_)) => {
                *slot = None;
                Ok(())
            }
            _ => Err(Error::arg(format!(
                "operator {op} was not created on this communicator"
            ))),
        }
    }

    /// Resolves a raw `ncclRedOp_t` for an operation on `dtype`.
    pub fn resolve_op(&self, raw: i32, dtype: DataType) -> Result<RedOp> {
        match raw {
            0 => Ok(RedOp::Sum),
            1 => Ok(RedOp::Prod),
            2 => Ok(RedOp::Max),
            3 => Ok(RedOp::Min),
            4 => Ok(RedOp::Avg),
            r if r >= NUM_BUILTIN_OPS => {
                let ops = self.inner.red_ops.lock().unwrap_or_else(|p| p.into_inner());
                match ops.get((r - NUM_BUILTIN_OPS) as usize) {
                    Some(Some((t, s))) if *t == dtype => Ok(RedOp::PreMulSum(*s)),
                    Some(Some((t, _))) => Err(Error::arg(format!(
                        "operator {r} was created for {} but the operation uses {}",
                        t.name(),
                        dtype.name()
                    ))),
                    _ => Err(Error::arg(format!(
                        "invalid reduction operator {r} (not created on this communicator or destroyed)"
                    ))),
                }
            }
            r => Err(Error::arg(format!("invalid reduction operator {r}"))),
        }
    }
}
