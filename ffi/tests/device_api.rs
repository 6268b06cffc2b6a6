//! The host side of NCCL's device API through the exported C functions, on the host backend
//! (where "device" memory is host memory, so descriptors can be read back): teams, requirement
//! sizes, device communicators and windows as NCCL 2.28 lays them out, grouped creation from
//! one thread, and the sentences of what is refused. Kernels reading these structures run in
//! the GPU suite (`tests/gpu/device_api`).

use oxccl_ffi::abi::ncclResult_t as R;
use oxccl_ffi::abi::{
    COMM_PROPERTIES_2_29_2_BYTES, NCCL_CONFIG_MAGIC, NCCL_WIN_COLL_SYMMETRIC, ncclComm_t,
    ncclCommProperties_t, ncclDevComm_t, ncclDevCommRequirements_t, ncclDevResourceRequirements_t,
    ncclGinType_t, ncclLLA2AHandle_t, ncclLsaBarrierHandle_t, ncclTeam_t, ncclTeamRequirements_t,
    ncclWindow_t,
};
use oxccl_ffi::api::*;
use std::ffi::{CStr, c_int, c_void};
use std::sync::Once;
use std::time::Duration;

fn setup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: the first thing every test does, before any thread of ours reads the
        // environment.
        unsafe { std::env::set_var("OXCCL_BACKEND", "host") };
        // A grouped collective that runs one rank after another would wait forever.
        std::thread::spawn(|| {
            std::thread::sleep(Duration::from_secs(120));
            eprintln!("HANG: a device API test did not finish within 120 s");
            std::process::exit(99);
        });
    });
}

fn last_error() -> String {
    // SAFETY: ncclGetLastError returns a NUL-terminated string that outlives this copy.
    unsafe { CStr::from_ptr(ncclGetLastError(ncclComm_t::NULL)) }
        .to_string_lossy()
        .into_owned()
}

/// `n` communicators made by one thread (`ncclCommInitAll`).
fn comms(n: usize) -> Vec<ncclComm_t> {
    let mut c = vec![ncclComm_t::NULL; n];
    // SAFETY: `c` holds `n` out-slots; a NULL device list means devices 0..n.
    let r = unsafe { ncclCommInitAll(c.as_mut_ptr(), n as c_int, std::ptr::null()) };
    assert_eq!(r, R::SUCCESS, "{}", last_error());
    c
}

fn destroy(comms: Vec<ncclComm_t>) {
    for c in comms {
        // SAFETY: live handles, not used afterwards.
        assert_eq!(unsafe { ncclCommDestroy(c) }, R::SUCCESS);
    }
}

fn zero_reqs() -> ncclDevCommRequirements_t {
    // SAFETY: plain C data (null pointers, zeros, false): what `memset(&reqs, 0, ...)` gives.
    unsafe { std::mem::zeroed() }
}

fn zero_resource() -> ncclDevResourceRequirements_t {
    // SAFETY: as above.
    unsafe { std::mem::zeroed() }
}

#[test]
fn teams_and_requirement_sizes_follow_nccl() {
    setup();
    let c = comms(3);
    for (r, &comm) in c.iter().enumerate() {
        // SAFETY: live communicator.
        let (world, lsa, rail) =
            unsafe { (ncclTeamWorld(comm), ncclTeamLsa(comm), ncclTeamRail(comm)) };
        let team = |n, rank, stride| ncclTeam_t {
            nRanks: n,
            rank,
            stride,
        };
        assert_eq!(world, team(3, r as c_int, 1));
        // One host: the LSA team is the world, each rail holds one rank.
        assert_eq!(lsa, team(3, r as c_int, 1));
        assert_eq!(rail, team(1, 0, 3));
        // SAFETY: live communicator.
        assert_eq!(unsafe { ncclTeamRankToLsa(comm, world, 2) }, 2);
        // SAFETY: as above.
        let got = unsafe { ncclTeamRankToWorld(comm, rail, 1) };
        assert_eq!(got, -1, "rail rank 1 is out of range");
    }
    let mut bar = ncclLsaBarrierHandle_t::default();
    let mut req = zero_resource();
    let lsa = ncclTeam_t {
        nRanks: 4,
        rank: 1,
        stride: 1,
    };
    // SAFETY: valid out-pointers.
    let got = unsafe { ncclLsaBarrierCreateRequirement(lsa, 3, &mut bar, &mut req) };
    assert_eq!(got, R::SUCCESS);
    // Three epochs and an inbox per rank for each barrier, in 32-bit words.
    assert_eq!(
        (req.bufferSize, req.bufferAlign, bar.nBarriers),
        ((9 + 12) * 4, 4, 3)
    );
    assert_eq!(req.outBufferHandle, &mut bar.bufHandle as *mut u32);
    let mut a2a = ncclLLA2AHandle_t::default();
    // SAFETY: valid out-pointers.
    let got = unsafe { ncclLLA2ACreateRequirement(2, 5, &mut a2a, &mut req) };
    assert_eq!(got, R::SUCCESS);
    assert_eq!(
        (req.bufferSize, req.bufferAlign, a2a.nSlots),
        (2 * 11 * 16, 16, 5)
    );
    // SAFETY: no pointers.
    assert_eq!(unsafe { ncclLLA2ACalcSlots(10, 12) }, 20);
    destroy(c);
}

#[test]
fn device_communicators_and_windows_made_in_one_group() {
    setup();
    let n = 3;
    let c = comms(n);
    let mut bufs: Vec<Vec<f32>> = (0..n).map(|r| vec![r as f32; 1024]).collect();
    let mut wins = vec![ncclWindow_t(std::ptr::null_mut()); n];
    let mut dcs: Vec<ncclDevComm_t> = vec![
        // SAFETY: plain C data; all-zero is what NCCL's callers start from.
        unsafe { std::mem::zeroed() };
        n
    ];
    let mut user_handles = vec![u32::MAX; n];
    let mut user_reqs: Vec<ncclDevResourceRequirements_t> =
        (0..n).map(|_| zero_resource()).collect();
    // SAFETY: every pointer below stays valid until the group end.
    unsafe {
        assert_eq!(ncclGroupStart(), R::SUCCESS);
        for r in 0..n {
            let buf = bufs[r].as_mut_ptr().cast::<c_void>();
            assert_eq!(
                ncclCommWindowRegister(c[r], buf, 4096, &mut wins[r], NCCL_WIN_COLL_SYMMETRIC),
                R::SUCCESS,
                "{}",
                last_error()
            );
            user_reqs[r].bufferSize = 1000;
            user_reqs[r].bufferAlign = 256;
            user_reqs[r].outBufferHandle = &mut user_handles[r];
            let mut reqs = zero_reqs();
            reqs.lsaBarrierCount = 2;
            reqs.resourceRequirementsList = &mut user_reqs[r];
            assert_eq!(
                ncclDevCommCreate(c[r], &reqs, &mut dcs[r]),
                R::SUCCESS,
                "{}",
                last_error()
            );
        }
        // Each rank's creation waits for the others: they must run side by side.
        assert_eq!(ncclGroupEnd(), R::SUCCESS, "{}", last_error());
    }
    for r in 0..n {
        let dc = &dcs[r];
        assert_eq!(
            (dc.rank, dc.nRanks, dc.lsaRank, dc.lsaSize),
            (r as c_int, 3, r as c_int, 3)
        );
        assert_eq!(dc.nRanks_rcp32, u32::MAX / 3);
        // The LSA barriers first (the rail barriers take no space), then the caller's buffer
        // at its 256-byte alignment: handles count 128-byte units.
        assert_eq!((dc.lsaBarrier.bufHandle, dc.lsaBarrier.nBarriers), (0, 2));
        assert_eq!(user_handles[r], 2);
        assert!(!dc.resourceWindow.is_null() && !dc.windowTable.is_null());
        // SAFETY: on the host backend descriptors and tables are host memory.
        let (res, win, table) = unsafe { (*dc.resourceWindow, *wins[r].0, &*dc.windowTable) };
        assert_eq!(res, dc.resourceWindow_inlined);
        assert_eq!(res.worldRank, r as c_int);
        // The host backend maps nothing flat: descriptors of a 3-rank team point at nothing
        // rather than at one rank's memory for all.
        assert!(res.lsaFlatBase.is_null() && win.lsaFlatBase.is_null());
        let buf = bufs[r].as_ptr() as usize;
        assert_eq!((win.lsaRank, win.worldRank), (r as c_int, r as c_int));
        assert!(!win.winHost.is_null());
        let e = table.entries[0];
        assert_eq!((e.base, e.size, e.window), (buf, 4096, wins[r].0 as usize));
        let mut user: *mut c_void = std::ptr::null_mut();
        // SAFETY: live communicator and window; valid out-pointer.
        let got = unsafe { ncclWinGetUserPtr(c[r], wins[r], &mut user) };
        assert_eq!(got, R::SUCCESS);
        assert_eq!(user as usize, buf);
        // SAFETY: as above; the window is not used afterwards.
        unsafe {
            assert_eq!(ncclCommWindowDeregister(c[r], wins[r]), R::SUCCESS);
            assert_eq!(
                ncclWinGetUserPtr(c[r], wins[r], &mut user),
                R::INVALID_ARGUMENT
            );
            assert_eq!(ncclDevCommDestroy(c[r], dc), R::SUCCESS, "{}", last_error());
            assert_eq!(ncclDevCommDestroy(c[r], dc), R::INVALID_ARGUMENT);
        }
        // The table entry is free again.
        // SAFETY: as above.
        assert_eq!(unsafe { (*dc.windowTable).entries[0].window }, 0);
    }
    destroy(c);
}

#[test]
fn a_lone_rank_s_descriptors_point_at_its_buffers() {
    setup();
    let c = comms(1);
    let mut buf = vec![1.0f32; 256];
    let mut win = ncclWindow_t(std::ptr::null_mut());
    // SAFETY: plain C data.
    let mut dc: ncclDevComm_t = unsafe { std::mem::zeroed() };
    let mut reqs = zero_reqs();
    reqs.lsaBarrierCount = 4;
    // SAFETY: valid pointers; the buffer outlives the window.
    unsafe {
        let b = buf.as_mut_ptr().cast::<c_void>();
        let r = ncclCommWindowRegister(c[0], b, 1024, &mut win, NCCL_WIN_COLL_SYMMETRIC);
        assert_eq!(r, R::SUCCESS, "{}", last_error());
        assert_eq!(
            ncclDevCommCreate(c[0], &reqs, &mut dc),
            R::SUCCESS,
            "{}",
            last_error()
        );
    }
    // SAFETY: host-backend descriptors are host memory.
    let (w, res) = unsafe { (*win.0, *dc.resourceWindow) };
    assert_eq!(w.lsaFlatBase as usize, buf.as_ptr() as usize);
    // Four barriers of one rank: 16 words, zeroed at creation.
    // SAFETY: the resource buffers hold at least 64 bytes.
    let state = unsafe { std::slice::from_raw_parts(res.lsaFlatBase as *const u32, 16) };
    assert!(state.iter().all(|&v| v == 0));
    // SAFETY: live handles, not used afterwards.
    unsafe {
        assert_eq!(ncclDevCommDestroy(c[0], &dc), R::SUCCESS);
        assert_eq!(ncclCommWindowDeregister(c[0], win), R::SUCCESS);
    }
    destroy(c);
}

#[test]
fn multicast_is_refused_with_a_sentence_and_forced_gin_runs() {
    setup();
    let c = comms(1);
    // SAFETY: plain C data.
    let mut dc: ncclDevComm_t = unsafe { std::mem::zeroed() };
    let mut reqs = zero_reqs();
    reqs.lsaMultimem = true;
    // SAFETY: valid pointers.
    let got = unsafe { ncclDevCommCreate(c[0], &reqs, &mut dc) };
    assert_eq!(got, R::INVALID_USAGE);
    assert!(last_error().contains("multimem"), "{}", last_error());
    // GIN forced on one rank: the host backend starts its proxy contexts, with no peers.
    let mut reqs = zero_reqs();
    reqs.ginForceEnable = true;
    // SAFETY: valid pointers.
    let got = unsafe { ncclDevCommCreate(c[0], &reqs, &mut dc) };
    assert_eq!(got, R::SUCCESS, "{}", last_error());
    assert_eq!((dc.ginContextCount, dc.ginTypes), (4, [2; 4]));
    // SAFETY: a live device communicator, not used afterwards.
    assert_eq!(unsafe { ncclDevCommDestroy(c[0], &dc) }, R::SUCCESS);
    // SAFETY: NULL requirements are named, not read.
    let got = unsafe { ncclDevCommCreate(c[0], std::ptr::null(), &mut dc) };
    assert_eq!(got, R::INVALID_ARGUMENT);
    assert!(last_error().contains("reqs"), "{}", last_error());
    // A team list that loops back on itself is refused, not walked forever.
    // SAFETY: plain C data.
    let mut team: ncclTeamRequirements_t = unsafe { std::mem::zeroed() };
    team.next = &mut team;
    let mut reqs = zero_reqs();
    reqs.teamRequirementsList = &mut team;
    // SAFETY: valid pointers; the list's one entry points at itself.
    let got = unsafe { ncclDevCommCreate(c[0], &reqs, &mut dc) };
    assert_eq!(got, R::INVALID_ARGUMENT);
    assert!(
        last_error().contains("teamRequirementsList does not end"),
        "{}",
        last_error()
    );
    destroy(c);
}

/// `ncclCommQueryProperties` (NCCL 2.29) fills what the caller's `size` holds: every field of
/// 2.29.7's layout, or 2.29.2's shorter one without touching the bytes after it; a struct not
/// made by the initializer and a NULL one are refused with a sentence.
#[test]
fn comm_properties_answer_as_far_as_the_callers_struct_goes() {
    setup();
    let c = comms(2);
    let fresh = |size: usize| ncclCommProperties_t {
        size,
        magic: NCCL_CONFIG_MAGIC,
        version: 22907,
        rank: -7,
        nRanks: -7,
        cudaDev: -7,
        nvmlDev: -7,
        deviceApiSupport: false,
        multimemSupport: true,
        ginType: ncclGinType_t(-7),
        nLsaTeams: -7,
        hostRmaSupport: true,
        railedGinType: ncclGinType_t(-7),
    };
    let mut p = fresh(size_of::<ncclCommProperties_t>());
    // SAFETY: a live communicator and a whole struct.
    assert_eq!(unsafe { ncclCommQueryProperties(c[1], &mut p) }, R::SUCCESS);
    assert_eq!((p.rank, p.nRanks, p.cudaDev, p.nvmlDev), (1, 2, 1, -1));
    assert!(p.deviceApiSupport && !p.multimemSupport && !p.hostRmaSupport);
    assert_eq!(
        (p.ginType, p.railedGinType),
        (ncclGinType_t::PROXY, ncclGinType_t::PROXY)
    );
    assert_eq!(p.nLsaTeams, 1, "one host");

    let mut short = fresh(COMM_PROPERTIES_2_29_2_BYTES);
    // SAFETY: as above; the library writes only the first 40 bytes.
    let got = unsafe { ncclCommQueryProperties(c[0], &mut short) };
    assert_eq!(got, R::SUCCESS);
    assert_eq!((short.rank, short.ginType), (0, ncclGinType_t::PROXY));
    assert_eq!(
        (short.nLsaTeams, short.hostRmaSupport, short.railedGinType),
        (-7, true, ncclGinType_t(-7)),
        "2.29.2's struct ends at ginType"
    );

    let mut unmade = fresh(size_of::<ncclCommProperties_t>());
    unmade.magic = 0;
    // SAFETY: as above.
    let got = unsafe { ncclCommQueryProperties(c[0], &mut unmade) };
    assert_eq!(got, R::INVALID_USAGE);
    assert!(
        last_error().contains("NCCL_COMM_PROPERTIES_INITIALIZER"),
        "{}",
        last_error()
    );
    let mut tiny = fresh(16);
    // SAFETY: as above.
    let got = unsafe { ncclCommQueryProperties(c[0], &mut tiny) };
    assert_eq!(got, R::INVALID_ARGUMENT);
    // SAFETY: NULL is named, not written.
    let got = unsafe { ncclCommQueryProperties(c[0], std::ptr::null_mut()) };
    assert_eq!(got, R::INVALID_ARGUMENT);
    destroy(c);
}

/// Requirements built with NCCL 2.29's or later headers start with size, magic and version
/// (then 2.28's fields): `ncclDevCommCreate` names that layout and refuses it instead of
/// reading the size as a list pointer.
#[test]
fn requirements_of_a_newer_layout_are_refused_with_a_sentence() {
    setup();
    let c = comms(1);
    #[repr(C)]
    struct Newer {
        size: usize,
        magic: u32,
        version: u32,
        rest: ncclDevCommRequirements_t,
    }
    let newer = Newer {
        size: size_of::<Newer>(),
        magic: NCCL_CONFIG_MAGIC,
        version: 23007,
        rest: zero_reqs(),
    };
    // SAFETY: plain C data.
    let mut dc: ncclDevComm_t = unsafe { std::mem::zeroed() };
    // SAFETY: the struct holds more than 2.28's requirements; only its first 16 bytes are read.
    let got = unsafe { ncclDevCommCreate(c[0], (&newer as *const Newer).cast(), &mut dc) };
    assert_eq!(got, R::INVALID_USAGE);
    assert!(
        last_error().contains("NCCL 2.30.7") && last_error().contains("2.28.9"),
        "{}",
        last_error()
    );
    destroy(c);
}
