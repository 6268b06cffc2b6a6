//! The exported C functions, grouped by topic. Every export is emitted by `nccl_api!` (plain and
//! `p`-prefixed) around an `unsafe fn` here that returns `Result`.

use crate::abi::ncclDataType_t;
use oxccl_core::datatype::DataType;
use oxccl_core::{Error, Result};
use std::ffi::c_int;

pub mod coll;
pub mod device;
pub mod ext;
pub mod init;
pub mod mem;
#[cfg(feature = "rccl")]
pub mod rccl;
pub mod reliability;

pub use coll::*;
pub use device::*;
pub use ext::*;
pub use init::*;
pub use mem::*;
#[cfg(feature = "rccl")]
pub use rccl::*;
pub use reliability::*;

/// `p` as a writable reference; NULL is `ncclInvalidArgument` naming `what`.
///
/// # Safety
/// `p` is NULL or valid for writes of a `T` and not aliased during the call.
unsafe fn out<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T> {
    // SAFETY: non-NULL pointers are valid per the caller.
    unsafe { p.as_mut() }.ok_or_else(|| Error::arg(format!("{what} argument is NULL")))
}

/// Checks a C `ncclDataType_t`.
fn dtype(d: ncclDataType_t) -> Result<DataType> {
    DataType::try_from(d.0)
}

/// Checks a rank-valued argument (root, peer) against the communicator size.
fn rank_arg(v: c_int, what: &str, nranks: usize) -> Result<u32> {
    match u32::try_from(v) {
        Ok(r) if (r as usize) < nranks => Ok(r),
        _ => Err(Error::arg(format!(
            "invalid {what} {v}: communicator has {nranks} ranks"
        ))),
    }
}
