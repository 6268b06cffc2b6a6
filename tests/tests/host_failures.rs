//! Failure handling on the host backend: bad and stale unique ids, init deadlines naming the
//! missing ranks, abort while blocked on a peer.

use oxccl_core::bootstrap::{BootstrapOptions, UniqueId};
use oxccl_core::config::CommConfig;
use oxccl_core::datatype::DataType;
use oxccl_core::plan::P2pDir;
use oxccl_core::{Communicator, ErrorKind, HostBackend};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn config(timeout_s: u64) -> CommConfig {
    CommConfig { init_timeout: Duration::from_secs(timeout_s), ..CommConfig::default() }
}

#[test]
fn garbage_unique_id_is_rejected() {
    let backend = Arc::new(HostBackend::new());
    let t = Instant::now();
    let e = Communicator::init_rank(backend, 2, UniqueId([0x5a; 128]), 0, 0, config(5)).err().expect("must fail");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(t.elapsed() < Duration::from_secs(2));
}

#[test]
fn stale_unique_id_is_an_explicit_error() {
    let backend = Arc::new(HostBackend::new());
    let id = UniqueId::generate(&BootstrapOptions::from_env()).unwrap();
    let first: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|r| {
                let b = backend.clone();
                s.spawn(move || Communicator::init_rank(b, 2, id, r, 0, config(10)).unwrap())
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let e = Communicator::init_rank(backend, 2, id, 0, 0, config(5)).err().expect("reuse must fail");
    assert!(e.to_string().contains("already used"), "{e}");
    for c in first {
        c.destroy().unwrap();
    }
}

#[test]
fn init_deadline_lists_missing_ranks() {
    let backend = Arc::new(HostBackend::new());
    let id = UniqueId::generate(&BootstrapOptions::from_env()).unwrap();
    let t = Instant::now();
    let errs: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = [0usize, 2]
            .into_iter()
            .map(|r| {
                let b = backend.clone();
                s.spawn(move || Communicator::init_rank(b, 4, id, r, 0, config(2)).err().expect("must time out").to_string())
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(t.elapsed() < Duration::from_secs(10));
    for e in errs {
        assert!(e.contains('1') && e.contains('3'), "must name ranks 1 and 3: {e}");
    }
}

#[test]
fn bad_arguments_are_errors() {
    let backend = Arc::new(HostBackend::new());
    let id = UniqueId::generate(&BootstrapOptions::from_env()).unwrap();
    assert_eq!(Communicator::init_rank(backend.clone(), 2, id, 2, 0, config(1)).err().unwrap().kind(), ErrorKind::InvalidArgument);
    assert_eq!(Communicator::init_rank(backend.clone(), 0, id, 0, 0, config(1)).err().unwrap().kind(), ErrorKind::InvalidArgument);
    assert_eq!(Communicator::init_rank(backend.clone(), 1, id, 0, -1, config(1)).err().unwrap().kind(), ErrorKind::InvalidArgument);
    let comm = Communicator::init_rank(backend.clone(), 1, id, 0, 0, config(5)).unwrap();
    let s = backend.stream_create().unwrap();
    // SAFETY: the calls are rejected before any buffer is touched.
    let e = unsafe { comm.p2p(P2pDir::Send, 0, 10, DataType::Float32, 0, &s) }.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    // SAFETY: as above.
    let e = unsafe { comm.p2p(P2pDir::Send, 64, 10, DataType::Float32, 1, &s) }.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert_eq!(comm.resolve_op(77, DataType::Float32).unwrap_err().kind(), ErrorKind::InvalidArgument);
    comm.destroy().unwrap();
    // SAFETY: rejected before any buffer is touched.
    let e = unsafe { comm.p2p(P2pDir::Send, 64, 1, DataType::Float32, 0, &s) }.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidUsage, "{e}");
}

#[test]
fn abort_unblocks_a_receive_waiting_on_a_silent_peer() {
    let backend = Arc::new(HostBackend::new());
    let id = UniqueId::generate(&BootstrapOptions::from_env()).unwrap();
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|r| {
                let b = backend.clone();
                s.spawn(move || Communicator::init_rank(b, 2, id, r, 0, config(10)).unwrap())
            })
            .collect();
        let comms: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        let waiter = comms[0].clone();
        let stream = backend.stream_create().unwrap();
        let t = Instant::now();
        let aborter = s.spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            waiter.abort();
            waiter.abort(); // idempotent
        });
        let mut buf = vec![0f32; 16];
        // SAFETY: `buf` outlives the (synchronous) call.
        let e = unsafe { comms[0].p2p(P2pDir::Recv, buf.as_mut_ptr() as u64, 16, DataType::Float32, 1, &stream) }.unwrap_err();
        aborter.join().unwrap();
        assert!(t.elapsed() < Duration::from_secs(3), "abort took {:?}", t.elapsed());
        assert_eq!(e.kind(), ErrorKind::InvalidUsage, "{e}");
        comms[1].destroy().unwrap();
    });
}
