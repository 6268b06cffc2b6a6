//! RCCL flavour: the backend choice between HIP and the host (no AMD GPU needed).
//!
//! The backend is chosen once per process, so each case runs in a child process of this test
//! binary with its own `OXCCL_BACKEND`.
#![cfg(feature = "rccl")]

use oxccl_ffi::abi::{Stream, ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclResult_t, ncclUniqueId};
use oxccl_ffi::api::{
    ncclAllReduce, ncclCommDestroy, ncclCommInitRank, ncclGetLastError, ncclGetUniqueId,
};
use std::ffi::CStr;
use std::process::Command;

const CHILD: &str = "OXCCL_HIP_CHOICE_CHILD";

/// Runs test `name` of this binary in a child with `OXCCL_BACKEND=backend` (unset when `None`).
fn run_child(name: &str, backend: Option<&str>) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1");
    match backend {
        Some(b) => cmd.env("OXCCL_BACKEND", b),
        None => cmd.env_remove("OXCCL_BACKEND"),
    };
    let out = cmd.output().expect("spawn the test binary");
    assert!(
        out.status.success(),
        "child {name} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One-rank ncclCommInitRank: its result and ncclGetLastError's sentence.
fn init_one_rank() -> (ncclResult_t, ncclComm_t, String) {
    let mut id = ncclUniqueId { internal: [0; 128] };
    let mut comm = ncclComm_t(std::ptr::null_mut());
    // SAFETY: valid out-pointers; a one-rank communicator of a fresh id.
    let r = unsafe {
        let r = ncclGetUniqueId(&mut id);
        if r != ncclResult_t::SUCCESS {
            r
        } else {
            ncclCommInitRank(&mut comm, 1, id, 0)
        }
    };
    // SAFETY: ncclGetLastError returns a NUL-terminated string that lives until the next call.
    let msg = unsafe { CStr::from_ptr(ncclGetLastError(ncclComm_t(std::ptr::null_mut()))) }
        .to_string_lossy()
        .into_owned();
    (r, comm, msg)
}

#[test]
fn forced_hip_without_a_device_fails_with_the_sentence() {
    if std::env::var_os(CHILD).is_none() {
        run_child("child_forced_hip", Some("hip"));
    }
}

#[test]
fn child_forced_hip() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let (r, _comm, msg) = init_one_rank();
    if r == ncclResult_t::SUCCESS {
        eprintln!("a HIP device is present: nothing to check");
        return;
    }
    assert!(
        msg.contains("no HIP device") || msg.contains("no HIP runtime"),
        "result {r:?}, last error {msg:?}"
    );
    eprintln!("ncclCommInitRank: {r:?}: {msg}");
    assert_ne!(
        r,
        ncclResult_t::INTERNAL_ERROR,
        "an unavailable backend is not an internal error"
    );
}

#[test]
fn default_choice_falls_back_to_host() {
    if std::env::var_os(CHILD).is_none() {
        run_child("child_default_host", None);
    }
}

#[test]
fn child_default_host() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    if oxccl_hip::HipBackend::load().is_ok() {
        eprintln!("a HIP device is present: the default is HIP, not the host");
        return;
    }
    let (r, comm, msg) = init_one_rank();
    assert_eq!(r, ncclResult_t::SUCCESS, "{msg}");
    let send = [1.5f32, 2.0, -3.0];
    let mut recv = [0f32; 3];
    // SAFETY: host buffers of 3 floats; the host backend completes the call before returning.
    let r = unsafe {
        ncclAllReduce(
            send.as_ptr().cast(),
            recv.as_mut_ptr().cast(),
            3,
            ncclDataType_t(7), // ncclFloat32
            ncclRedOp_t(0),    // ncclSum
            comm,
            Stream(std::ptr::null_mut()),
        )
    };
    assert_eq!(r, ncclResult_t::SUCCESS);
    assert_eq!(recv, send);
    // SAFETY: `comm` is live and not used afterwards.
    assert_eq!(unsafe { ncclCommDestroy(comm) }, ncclResult_t::SUCCESS);
}
