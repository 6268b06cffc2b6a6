//! GIN across hosts through the exported C functions on the host backend: four processes on
//! two "hosts" (`NCCL_HOSTID`), two ranks each. A device communicator there starts GIN by
//! itself (its ranks span hosts, NCCL's rule), and this test plays the kernels: a rail barrier
//! as NVIDIA's device code runs it (an increment of the barrier's signal on the rail peer, then
//! a wait for the peer's), then a put to the rail peer and one to the other rank of its host.
//!
//! Each rank runs in a child process of this test binary (`--exact`), told its part by
//! environment variables.

mod gin_device;

use gin_device::{Ctx, gfd, last_error};
use oxccl_ffi::abi::ncclResult_t as R;
use oxccl_ffi::abi::{
    NCCL_WIN_COLL_SYMMETRIC, ncclComm_t, ncclDevComm_t, ncclDevResourceRequirements_t,
    ncclUniqueId, ncclWindow_t,
};
use oxccl_ffi::api::*;
use std::ffi::c_int;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const RANKS: usize = 4;
const PER_HOST: usize = 2;
const PART: usize = 70_000;
const RANK: &str = "OXCCL_GIN_HOSTS_RANK";
const ID: &str = "OXCCL_GIN_HOSTS_ID";

fn pattern(rank: usize, i: usize) -> u8 {
    (i as u8).wrapping_mul(29) ^ (rank as u8).wrapping_mul(77)
}

/// Waits until signal `id` of `ctx` reaches `least`.
fn wait_signal(ctx: &Ctx, id: u32, least: u64, what: &str) {
    let t0 = Instant::now();
    let s = Ctx::word(ctx.signals, id as usize);
    while s.load(Ordering::Acquire) < least {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{what}: signal {id} at {}, waiting for {least}",
            s.load(Ordering::Acquire)
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// One rank's part (in a child process).
fn rank_main(rank: usize, id: ncclUniqueId) {
    let mut c = ncclComm_t::NULL;
    // SAFETY: a valid out-pointer.
    let r = unsafe { ncclCommInitRank(&mut c, RANKS as c_int, id, rank as c_int) };
    assert_eq!(r, R::SUCCESS, "init: {}", last_error());
    let mut src: Vec<u8> = (0..PART).map(|i| pattern(rank, i)).collect();
    let mut dst = vec![0u8; RANKS * PART];
    let mut wins = [ncclWindow_t(std::ptr::null_mut()); 2];
    // SAFETY: plain C data; all-zero is what NCCL's callers start from.
    let mut dc: ncclDevComm_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut res: ncclDevResourceRequirements_t = unsafe { std::mem::zeroed() };
    let mut res_signal = u32::MAX;
    // SAFETY: valid pointers; the buffers outlive their windows.
    unsafe {
        for (w, (buf, bytes)) in [(src.as_mut_ptr(), PART), (dst.as_mut_ptr(), RANKS * PART)]
            .into_iter()
            .enumerate()
        {
            let got =
                ncclCommWindowRegister(c, buf.cast(), bytes, &mut wins[w], NCCL_WIN_COLL_SYMMETRIC);
            assert_eq!(got, R::SUCCESS, "{}", last_error());
        }
        // A resource buffer with a signal of its own (which does not start GIN by itself).
        res.bufferSize = 64;
        res.bufferAlign = 64;
        res.ginSignalCount = 1;
        res.outGinSignalStart = &mut res_signal;
        let mut reqs: oxccl_ffi::abi::ncclDevCommRequirements_t = std::mem::zeroed();
        reqs.lsaBarrierCount = 1;
        reqs.railGinBarrierCount = 2;
        reqs.resourceRequirementsList = &mut res;
        let got = ncclDevCommCreate(c, &reqs, &mut dc);
        assert_eq!(got, R::SUCCESS, "{}", last_error());
    }
    let (host, lsa_rank) = (rank / PER_HOST, rank % PER_HOST);
    assert_eq!(
        (dc.lsaSize, dc.lsaRank),
        (PER_HOST as c_int, lsa_rank as c_int)
    );
    assert!(
        dc.ginContextCount > 0,
        "GIN starts for ranks on several hosts"
    );
    // No signals of the caller's own: the two rail barriers' come first, then the buffer's.
    assert_eq!(
        (dc.railGinBarrier.signal0, res_signal, dc.ginSignalCount),
        (0, 2, 3)
    );
    // SAFETY: `ginHandles[0]` points at a live context's struct in host memory.
    let ctx = unsafe { Ctx::read(dc.ginHandles[0], RANKS) };
    // SAFETY: host-backend descriptors are host memory.
    let handle = |w: usize| unsafe { (*wins[w].0).ginWins[0] } as u64;
    let rail_peer = (1 - host) * PER_HOST + lsa_rank;
    let host_peer = host * PER_HOST + (1 - lsa_rank);
    // Rail barrier 1, as the device runs it: +1 on the peer's signal, then wait for the peer's.
    let barrier = dc.ginSignalBase + dc.railGinBarrier.signal0 + 1;
    ctx.post(
        rail_peer,
        gfd(0, (0, 0), (0, 0), (barrier as u16, None), None),
    );
    wait_signal(&ctx, barrier, 1, "rail barrier");
    // Then this rank's source into both peers' destination at its slice, with signal 0.
    let landed = dc.ginSignalBase + res_signal;
    for peer in [rail_peer, host_peer] {
        let put = gfd(
            PART as u64,
            (handle(0), 0),
            (handle(1), (rank * PART) as u64),
            (landed as u16, None),
            None,
        );
        ctx.post(peer, put);
    }
    wait_signal(&ctx, landed, 2, "puts");
    for peer in 0..RANKS {
        let slice = &dst[peer * PART..(peer + 1) * PART];
        let want_data = peer == rail_peer || peer == host_peer;
        let bad = (0..PART).find(|&i| slice[i] != if want_data { pattern(peer, i) } else { 0 });
        assert_eq!(bad, None, "rank {rank}: the slice of rank {peer}");
    }
    // Both peers hold this rank's data before it goes: each says so once its own checks pass.
    let done = dc.ginSignalBase + dc.railGinBarrier.signal0;
    for peer in [rail_peer, host_peer] {
        ctx.post(peer, gfd(0, (0, 0), (0, 0), (done as u16, None), None));
    }
    wait_signal(&ctx, done, 2, "the peers' checks");
    // SAFETY: live handles, not used afterwards.
    unsafe {
        assert_eq!(ncclDevCommDestroy(c, &dc), R::SUCCESS, "{}", last_error());
        for w in wins {
            assert_eq!(ncclCommWindowDeregister(c, w), R::SUCCESS);
        }
        assert_eq!(ncclCommDestroy(c), R::SUCCESS);
    }
    src.clear();
}

#[test]
fn gin_crosses_hosts_after_a_rail_barrier() {
    if let Some(rank) = std::env::var_os(RANK) {
        let rank: usize = rank.to_str().and_then(|s| s.parse().ok()).expect("a rank");
        let hex = std::env::var(ID).expect("the unique id");
        let mut id = ncclUniqueId { internal: [0; 128] };
        for (i, b) in id.internal.iter_mut().enumerate() {
            *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex") as _;
        }
        rank_main(rank, id);
        return;
    }
    let mut id = ncclUniqueId { internal: [0; 128] };
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { ncclGetUniqueId(&mut id) }, R::SUCCESS);
    let hex: String = id
        .internal
        .iter()
        .map(|&b| format!("{:02x}", b as u8))
        .collect();
    let children: Vec<_> = (0..RANKS)
        .map(|rank| {
            Command::new(std::env::current_exe().expect("this test binary"))
                .args([
                    "--exact",
                    "gin_crosses_hosts_after_a_rail_barrier",
                    "--nocapture",
                    "-q",
                ])
                .env(RANK, rank.to_string())
                .env(ID, &hex)
                .env("OXCCL_BACKEND", "host")
                .env("NCCL_HOSTID", format!("gin-host-{}", rank / PER_HOST))
                .env("NCCL_GIN_NCONTEXTS", "1")
                .spawn()
                .expect("spawn a rank")
        })
        .collect();
    let t0 = Instant::now();
    let mut failed = Vec::new();
    for (rank, mut child) in children.into_iter().enumerate() {
        let status = loop {
            if let Some(s) = child.try_wait().expect("wait") {
                break Some(s);
            }
            if t0.elapsed() > Duration::from_secs(120) {
                let _ = child.kill();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        match status {
            Some(s) if s.success() => {}
            other => failed.push(format!("rank {rank}: {other:?}")),
        }
    }
    assert!(failed.is_empty(), "{failed:?}");
}

/// A device communicator that asks for GIN is refused with `ncclInternalError` and a sentence
/// naming the variable, as NCCL refuses it, when `NCCL_GIN_ENABLE=0` turns GIN off or
/// `NCCL_GIN_TYPE` names a type oxccl lacks (3, NVIDIA's GDAKI). Each case runs in a child
/// process with the variable set.
#[test]
fn gin_switched_off_or_of_a_missing_type_is_refused() {
    const CHILD: &str = "OXCCL_GIN_REFUSAL_CHILD";
    if let Some(setting) = std::env::var_os(CHILD) {
        let mut c = ncclComm_t::NULL;
        // SAFETY: one out-slot; a NULL device list means device 0.
        let r = unsafe { ncclCommInitAll(&mut c, 1, std::ptr::null()) };
        assert_eq!(r, R::SUCCESS, "{}", last_error());
        // SAFETY: plain C data.
        let (mut reqs, mut dc): (oxccl_ffi::abi::ncclDevCommRequirements_t, ncclDevComm_t) =
            unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        reqs.ginForceEnable = true;
        // SAFETY: valid pointers.
        let got = unsafe { ncclDevCommCreate(c, &reqs, &mut dc) };
        assert_eq!(got, R::INTERNAL_ERROR);
        let setting = setting.to_string_lossy();
        assert!(last_error().contains(&*setting), "{}", last_error());
        // SAFETY: a live handle, not used afterwards.
        assert_eq!(unsafe { ncclCommDestroy(c) }, R::SUCCESS);
        return;
    }
    for (var, value) in [("NCCL_GIN_ENABLE", "0"), ("NCCL_GIN_TYPE", "3")] {
        let status = Command::new(std::env::current_exe().expect("this test binary"))
            .args([
                "--exact",
                "gin_switched_off_or_of_a_missing_type_is_refused",
                "--nocapture",
                "-q",
            ])
            .env(CHILD, format!("{var}={value}"))
            .env("OXCCL_BACKEND", "host")
            .env(var, value)
            .status()
            .expect("run the child");
        assert!(status.success(), "{var}={value}: {status:?}");
    }
}
