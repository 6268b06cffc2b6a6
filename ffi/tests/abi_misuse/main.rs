//! reliability suite T2 and T4 through the exported C functions (`ncclX` of this crate, called as a C
//! program calls them), on the host backend.
//!
//! T2: a table of every out-of-range argument (data type, reduction operator, root, peer, nranks,
//! rank, counts whose byte size overflows, NULL buffers with a nonzero count, NULL and foreign
//! communicators, NULL out-pointers). Each call must return NVIDIA NCCL's code
//! (`ncclInvalidArgument` for a bad argument, `ncclInvalidUsage` where NCCL says so), leave a
//! `ncclGetLastError` sentence naming the function and the argument, not touch the buffers, and
//! return at once. Afterwards the communicators still compute right results.
//!
//! T4: lifecycle misuse: destroy twice, every call after destroy and after abort, abort after
//! destroy, finalize twice, `ncclGroupEnd` without `ncclGroupStart`, unbalanced nesting, a group
//! whose calls failed.
//!
//! A watchdog ends the process naming the case if any call blocks for 60 s.

mod collective_args;
mod dead_handles;
mod groups;
mod helpers;
mod init;
mod non_collective_args;
