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
