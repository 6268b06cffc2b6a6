//! The safe crate's device API on the host backend: windows and device communicators made
//! collectively by every rank, with NCCL's resource placement, and released when dropped.

use oxccl::{DevCommRequirements, LsaTeam};
use oxccl_tests::safe::on_ranks;

#[test]
fn windows_and_device_communicators_on_three_ranks() {
    let out = on_ranks(3, |comm| {
        let team = comm.lsa_team().unwrap();
        let buf = comm.device().alloc::<f32>(1000).unwrap();
        let win = comm.register_window(&buf).unwrap();
        // The host backend maps nothing flat: no peer pointers to hand out.
        let peer = win.lsa_ptr(0);
        let req = DevCommRequirements {
            lsa_barriers: 2,
            rail_barriers: 0,
            resources: vec![(1000, 256), (16, 16)],
            ..DevCommRequirements::default()
        };
        let dc = comm.create_dev_comm(&req).unwrap();
        let raw = *dc.raw();
        let handles = dc.resource_handles().to_vec();
        drop(dc);
        drop(win);
        // A second window after the first is gone reuses its table entry.
        let again = comm.register_window(&buf).map(|w| w.handle() != 0);
        (
            team,
            peer,
            raw.nRanks,
            raw.lsaSize,
            raw.lsaBarrier.nBarriers,
            handles,
            again.unwrap(),
        )
    });
    for (rank, (team, peer, n, lsa, barriers, handles, again)) in out.into_iter().enumerate() {
        assert_eq!(
            team,
            LsaTeam {
                rank: rank as u32,
                size: 3
            }
        );
        assert_eq!(peer, None);
        assert_eq!((n, lsa, barriers), (3, 3, 2));
        // LSA barriers at 0 (6 + 6 words), the first buffer at its 256-byte alignment (unit 2),
        // the second after its 1000 bytes (unit 10).
        assert_eq!(handles, vec![2, 10]);
        assert!(again);
    }
}

/// GIN through the safe crate: the device communicator's contexts and ids, and where each
/// resource buffer's own signals and counters start.
#[test]
fn a_device_communicator_with_gin_signals_and_counters() {
    let out = on_ranks(2, |comm| {
        let req = DevCommRequirements {
            rail_barriers: 1,
            resources: vec![(64, 16), (64, 16)],
            resource_gin: vec![(3, 1), (2, 2)],
            gin_signals: 2,
            gin_counters: 1,
            ..DevCommRequirements::default()
        };
        let dc = comm.create_dev_comm(&req).unwrap();
        let raw = *dc.raw();
        let starts = dc.resource_gin_starts();
        (
            raw.ginContextCount,
            raw.ginSignalCount,
            raw.ginCounterCount,
            raw.railGinBarrier.signal0,
            starts,
        )
    });
    for (contexts, signals, counters, rail, starts) in out {
        assert_eq!(contexts, 4);
        // The caller's 2, the rail barrier's 1, then the buffers' 3 and 2.
        assert_eq!((signals, counters, rail), (8, 4, 2));
        assert_eq!(starts, vec![(3, 1), (6, 2)]);
    }
}
