//! oxccl's C ABI: builds as a drop-in `libnccl.so.2` (feature `nccl`, the default) or
//! `librccl.so.1` (feature `rccl`). A thin layer on top of the `oxccl` crate, whose `dispatch`
//! module picks the backend at run time: this crate keeps the C handles, result codes and the
//! last-error text.
//!
//! Layout:
//! - [`abi`]: the C types of `include/nccl.h` / `include/rccl/rccl.h`; [`decl`] checks every
//!   export's signature against a declaration list that a test compiles against the header.
//! - [`boundary`]: the panic/error boundary and the macro emitting `ncclX` + `pncclX`.
//! - [`api`]: the exports. [`handles`]: `ncclComm_t` registry. [`group`]: group bookkeeping.
//! - [`config`]: versioned `ncclConfig_t`. [`last_error`]: `ncclGetLastError`'s buffer.
//!
//! Only `#[no_mangle]` functions of this crate are exported from the shared library; rustc's
//! version script hides everything else.

#[cfg(all(feature = "nccl", feature = "rccl"))]
compile_error!(
    "features `nccl` and `rccl` are mutually exclusive: build the RCCL flavour with \
     `--no-default-features --features rccl` (in its own target directory)"
);
#[cfg(not(any(feature = "nccl", feature = "rccl")))]
compile_error!("enable one of the features `nccl` (default) or `rccl`");

pub mod abi;
pub mod api;
pub mod boundary;
pub mod config;
#[cfg(test)]
mod config_fuzz;
pub mod decl;
pub mod group;
pub mod handles;
pub mod last_error;
pub mod msccl;
pub mod result;

pub use oxccl::dispatch::{AnyBackend, AnyComm, CommOps, RuntimeBackend, backend};
