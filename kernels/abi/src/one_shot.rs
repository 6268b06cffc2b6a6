// The one-shot kernels' layout (`OxcclOneShotParams` and the inbox of work.h), shared by both GPU
// backends like `work.rs` (this crate, re-exported by their `kernels` module).
//
// A rank's inbox sits at the end of its FIFO allocation (`FifoGeometry::inbox_offset`), so it
// is mapped into the peers with the FIFOs; its per-block epochs sit at the end of its
// sender-local state (`FifoGeometry::epochs_offset`). Both are zeroed at connect.

use super::{ARGS_PRE_SCALE, ARGS_PRE_SCALE_PTR, reduction_args};
use oxccl_core::plan::CollKind;
use oxccl_core::plan::one_shot::{self, OneShot, Variant};
use std::mem::{offset_of, size_of};

/// Most ranks (`OXCCL_ONE_SHOT_MAX_RANKS`).
pub const ONE_SHOT_MAX_RANKS: usize = 8;
/// Threads, and so packets, per block (`OXCCL_ONE_SHOT_THREADS`).
pub const ONE_SHOT_THREADS: u32 = 256;
/// Most blocks of a launch (`OXCCL_ONE_SHOT_MAX_BLOCKS`).
pub const ONE_SHOT_MAX_BLOCKS: u32 = 32;
/// Most packets per thread (`OXCCL_ONE_SHOT_MAX_ITERS`).
pub const ONE_SHOT_MAX_ITERS: u32 = 4;
/// Largest per-peer message: 8-byte packets, every round of every thread of every block.
pub const ONE_SHOT_MAX_BYTES: u64 =
    ONE_SHOT_THREADS as u64 * ONE_SHOT_MAX_BLOCKS as u64 * ONE_SHOT_MAX_ITERS as u64 * 8;
/// Threads per block of the Simple variant (`OXCCL_ONE_SHOT_SIMPLE_THREADS`).
pub const ONE_SHOT_SIMPLE_THREADS: u32 = 512;
/// Most blocks of a Simple launch (`OXCCL_ONE_SHOT_SIMPLE_MAX_BLOCKS`).
pub const ONE_SHOT_SIMPLE_MAX_BLOCKS: u32 = 128;
/// Largest per-peer message of the Simple variant (`OXCCL_ONE_SHOT_SIMPLE_BYTES`).
pub const ONE_SHOT_SIMPLE_MAX_BYTES: u64 = 2 << 20;
/// Bytes of a Simple launch's slice per block, below [`ONE_SHOT_SIMPLE_MAX_BLOCKS`] blocks:
/// small enough that mid-size messages still spread over many SMs (one SM pushes about
/// 20 GB/s over NVLink, 16 about 320).
const SIMPLE_SLICE_BYTES: u64 = 16 << 10;
/// Bytes of a rank's epochs: the LL path's one per block, the Simple path's one and its count
/// of finished blocks.
pub const ONE_SHOT_EPOCH_BYTES: u64 = (ONE_SHOT_MAX_BLOCKS as u64 + 2) * 8;

const _: () = assert!(ONE_SHOT_MAX_RANKS as u32 == one_shot::MAX_RANKS);

/// Bytes of one rank's one-shot area (`OxcclOneShotParams::inbox` in work.h): the LL inbox
/// (two halves x blocks x senders x rounds x one 16-byte packet per thread), the Simple flags
/// (a `u64` per sender and block, padded to 4 KiB) and the Simple data (two halves x senders);
/// 0 where a communicator is too large for the one-shot kernels.
pub fn one_shot_inbox_bytes(nranks: u32) -> u64 {
    if nranks as usize > ONE_SHOT_MAX_RANKS {
        return 0;
    }
    let n = u64::from(nranks);
    let ll = 2 * u64::from(ONE_SHOT_MAX_BLOCKS * ONE_SHOT_MAX_ITERS * ONE_SHOT_THREADS) * n * 16;
    let flags = (n * u64::from(ONE_SHOT_SIMPLE_MAX_BLOCKS) * 8).next_multiple_of(4096);
    ll + flags + 2 * n * ONE_SHOT_SIMPLE_MAX_BYTES
}

/// Largest message ([`OneShot::message_bytes`]) the one-shot kernels take in `variant` on
/// `nranks` ranks in launches of at most `max_blocks` blocks ([`one_shot_grid`] never exceeds
/// it for such a message).
pub fn one_shot_max_bytes(variant: Variant, nranks: u32, max_blocks: u32) -> u64 {
    let blocks = u64::from(max_blocks);
    match variant {
        // Packets are spread over all ONE_SHOT_MAX_BLOCKS block indices before a thread takes a
        // second round, so fewer blocks only carry a single round.
        Variant::Ll if max_blocks < ONE_SHOT_MAX_BLOCKS => blocks * u64::from(ONE_SHOT_THREADS) * 8,
        Variant::Ll => ONE_SHOT_MAX_BYTES,
        Variant::Simple => ONE_SHOT_SIMPLE_MAX_BYTES.min(blocks * SIMPLE_SLICE_BYTES),
        // Each part's sender slot holds it and its result; a part, rounded up to whole 16-byte
        // packs, stays within both limits.
        Variant::TwoShot => {
            u64::from(nranks) * (TWO_SHOT_PART_BYTES.min(blocks * SIMPLE_SLICE_BYTES) - 16)
        }
    }
}

/// Largest part of a two-shot AllReduce: half a sender's Simple slot of an inbox half.
const TWO_SHOT_PART_BYTES: u64 = ONE_SHOT_SIMPLE_MAX_BYTES / 2;

/// One-shot entry points, indexed by `ncclDataType_t` like `KERNEL_NAMES`.
pub const ONE_SHOT_KERNEL_NAMES: [&str; 12] = [
    "oxccl_one_shot_i8",
    "oxccl_one_shot_u8",
    "oxccl_one_shot_i32",
    "oxccl_one_shot_u32",
    "oxccl_one_shot_i64",
    "oxccl_one_shot_u64",
    "oxccl_one_shot_f16",
    "oxccl_one_shot_f32",
    "oxccl_one_shot_f64",
    "oxccl_one_shot_bf16",
    "oxccl_one_shot_f8e4m3",
    "oxccl_one_shot_f8e5m2",
];

/// `OxcclOneShotParams::kind`.
const KIND_ALL_REDUCE: u8 = 0;
const KIND_ALL_GATHER: u8 = 1;
const KIND_REDUCE_SCATTER: u8 = 2;
const KIND_ALL_TO_ALL: u8 = 3;

/// The one-shot kernels' parameter (`OxcclOneShotParams`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OneShotParams {
    /// Send buffer.
    pub send: u64,
    /// Receive buffer.
    pub recv: u64,
    /// Every rank's inbox as mapped here (unused entries 0).
    pub inbox: [u64; ONE_SHOT_MAX_RANKS],
    /// This rank's per-block epochs.
    pub epochs: u64,
    /// Device-visible abort word.
    pub abort_flag: u64,
    /// Device scalar of PreMulSum, with `ARGS_PRE_SCALE_PTR`.
    pub pre_scale_ptr: u64,
    /// Immediate scalar of PreMulSum, with `ARGS_PRE_SCALE`.
    pub pre_scale_bytes: u64,
    /// Elements of one per-peer message.
    pub count: u64,
    /// This rank.
    pub rank: u32,
    /// Ranks.
    pub nranks: u32,
    /// Post-division divisor (0 or 1: none).
    pub post_div: u32,
    /// `OXCCL_ONE_SHOT_*`.
    pub kind: u8,
    /// `OP_*`.
    pub redop: u8,
    /// `ARGS_PRE_SCALE*`.
    pub flags: u8,
    /// 1: the Simple variant, 2: the two-shot AllReduce, else LL.
    pub simple: u8,
}

const _: () = {
    assert!(size_of::<OneShotParams>() == 136);
    assert!(offset_of!(OneShotParams, inbox) == 16);
    assert!(offset_of!(OneShotParams, epochs) == 80);
    assert!(offset_of!(OneShotParams, abort_flag) == 88);
    assert!(offset_of!(OneShotParams, pre_scale_ptr) == 96);
    assert!(offset_of!(OneShotParams, pre_scale_bytes) == 104);
    assert!(offset_of!(OneShotParams, count) == 112);
    assert!(offset_of!(OneShotParams, rank) == 120);
    assert!(offset_of!(OneShotParams, nranks) == 124);
    assert!(offset_of!(OneShotParams, post_div) == 128);
    assert!(offset_of!(OneShotParams, kind) == 132);
    assert!(offset_of!(OneShotParams, redop) == 133);
    assert!(offset_of!(OneShotParams, flags) == 134);
    assert!(offset_of!(OneShotParams, simple) == 135);
};

impl OneShotParams {
    /// The parameters of `op` on `rank` of `nranks`, whose inboxes are mapped here at `inbox`.
    pub fn new(
        op: &OneShot,
        rank: u32,
        inbox: &[u64],
        epochs: u64,
        abort_flag: u64,
    ) -> OneShotParams {
        let red = reduction_args(&op.reduction);
        let mut p = OneShotParams {
            send: op.send,
            recv: op.recv,
            epochs,
            abort_flag,
            pre_scale_ptr: red.pre_scale_ptr,
            pre_scale_bytes: red.pre_scale_bytes,
            count: op.count,
            rank,
            nranks: inbox.len() as u32,
            post_div: red.post_div,
            kind: match op.kind {
                CollKind::AllGather => KIND_ALL_GATHER,
                CollKind::ReduceScatter => KIND_REDUCE_SCATTER,
                CollKind::AllToAll => KIND_ALL_TO_ALL,
                _ => KIND_ALL_REDUCE,
            },
            redop: red.redop,
            flags: red.flags & (ARGS_PRE_SCALE | ARGS_PRE_SCALE_PTR),
            simple: match op.variant {
                Variant::Ll => 0,
                Variant::Simple => 1,
                Variant::TwoShot => 2,
            },
            ..OneShotParams::default()
        };
        p.inbox[..inbox.len()].copy_from_slice(inbox);
        p
    }

    /// The bytes the kernel reads.
    pub fn to_bytes(&self) -> [u8; size_of::<OneShotParams>()] {
        let mut b = [0u8; size_of::<OneShotParams>()];
        let mut put = |at: usize, v: &[u8]| b[at..at + v.len()].copy_from_slice(v);
        put(offset_of!(OneShotParams, send), &self.send.to_le_bytes());
        put(offset_of!(OneShotParams, recv), &self.recv.to_le_bytes());
        for (i, a) in self.inbox.iter().enumerate() {
            put(offset_of!(OneShotParams, inbox) + 8 * i, &a.to_le_bytes());
        }
        put(
            offset_of!(OneShotParams, epochs),
            &self.epochs.to_le_bytes(),
        );
        put(
            offset_of!(OneShotParams, abort_flag),
            &self.abort_flag.to_le_bytes(),
        );
        put(
            offset_of!(OneShotParams, pre_scale_ptr),
            &self.pre_scale_ptr.to_le_bytes(),
        );
        put(
            offset_of!(OneShotParams, pre_scale_bytes),
            &self.pre_scale_bytes.to_le_bytes(),
        );
        put(offset_of!(OneShotParams, count), &self.count.to_le_bytes());
        put(offset_of!(OneShotParams, rank), &self.rank.to_le_bytes());
        put(
            offset_of!(OneShotParams, nranks),
            &self.nranks.to_le_bytes(),
        );
        put(
            offset_of!(OneShotParams, post_div),
            &self.post_div.to_le_bytes(),
        );
        put(
            offset_of!(OneShotParams, kind),
            &[self.kind, self.redop, self.flags, self.simple],
        );
        b
    }
}

/// Blocks and threads per block of a one-shot launch of `op` on `nranks` ranks. LL: one thread
/// per 8-byte packet of a per-peer message up to [`ONE_SHOT_MAX_BLOCKS`] blocks of
/// [`ONE_SHOT_THREADS`] (then more packets per thread); fewer threads, in warps, when one block
/// is enough: a tiny message should not pay for idle warps. Block `b` always covers the same
/// packets, which the kernels' per-block epochs rely on. Simple and two-shot: a block per 16 KiB
/// slice of a per-peer message (two-shot: of one rank's part).
pub fn one_shot_grid(op: &OneShot, nranks: u32) -> (u32, u32) {
    let slices = match op.variant {
        Variant::Ll => None,
        Variant::Simple => Some(op.message_bytes()),
        // Block b takes the b-th slice of every part.
        Variant::TwoShot => Some(op.message_bytes().div_ceil(u64::from(nranks.max(1)))),
    };
    if let Some(bytes) = slices {
        // One slice per block, up to the most blocks; every block takes part (it raises and
        // waits for its flags even when its slice is empty).
        let blocks = bytes.div_ceil(SIMPLE_SLICE_BYTES);
        let blocks = blocks.clamp(1, u64::from(ONE_SHOT_SIMPLE_MAX_BLOCKS)) as u32;
        return (blocks, ONE_SHOT_SIMPLE_THREADS);
    }
    let packets = op.message_bytes().div_ceil(8).max(1);
    let blocks = packets.div_ceil(u64::from(ONE_SHOT_THREADS));
    if blocks > 1 {
        (
            blocks.min(u64::from(ONE_SHOT_MAX_BLOCKS)) as u32,
            ONE_SHOT_THREADS,
        )
    } else {
        (1, packets.next_multiple_of(32) as u32)
    }
}

#[cfg(test)]
mod one_shot_tests {
    use super::*;
    use oxccl_core::datatype::{DataType, RedOp, Reduction};

    fn op(kind: CollKind, dtype: DataType, count: u64) -> OneShot {
        OneShot {
            kind,
            dtype,
            reduction: Reduction::lower(RedOp::Avg, 2),
            count,
            send: 0x1000,
            recv: 0x2000,
            variant: Variant::Ll,
        }
    }

    fn one_shot_grid2(o: &OneShot) -> (u32, u32) {
        one_shot_grid(o, 2)
    }

    #[test]
    fn one_thread_per_packet_and_full_blocks_beyond_one() {
        let f32 = DataType::Float32;
        assert_eq!(one_shot_grid2(&op(CollKind::AllReduce, f32, 1)), (1, 32));
        assert_eq!(
            one_shot_grid2(&op(CollKind::AllReduce, DataType::Int8, 7)),
            (1, 32)
        );
        assert_eq!(
            one_shot_grid2(&op(CollKind::AllGather, f32, 2 * 33)),
            (1, 64)
        );
        assert_eq!(one_shot_grid2(&op(CollKind::AllGather, f32, 512)), (1, 256));
        assert_eq!(one_shot_grid2(&op(CollKind::AllReduce, f32, 513)), (2, 256));
        // Simple: a block per 16 KiB slice, up to 128.
        let simple = |count| OneShot {
            variant: Variant::Simple,
            ..op(CollKind::AllReduce, f32, count)
        };
        assert_eq!(one_shot_grid2(&simple(1)), (1, 512));
        assert_eq!(one_shot_grid2(&simple(4097)), (2, 512));
        assert_eq!(one_shot_grid2(&simple(1 << 19)), (128, 512));
        assert_eq!(one_shot_grid2(&simple(1 << 20)), (128, 512));
        // Two-shot: a block per 16 KiB slice of one rank's part.
        let two = |count, nranks| {
            let o = OneShot {
                variant: Variant::TwoShot,
                ..op(CollKind::AllReduce, f32, count)
            };
            one_shot_grid(&o, nranks)
        };
        assert_eq!(two(0, 4), (1, 512));
        assert_eq!(two(4 * 4096, 4), (1, 512));
        assert_eq!(two(4 * 4096 + 1, 4), (2, 512));
        assert_eq!(two(1 << 20, 4), (64, 512));
        assert_eq!(two(1 << 20, 8), (32, 512));
        // Beyond one packet per thread of every block, threads take more rounds.
        let full = (ONE_SHOT_MAX_BLOCKS * ONE_SHOT_THREADS * 2) as u64;
        for count in [full, full + 1, ONE_SHOT_MAX_BYTES / 4] {
            assert_eq!(
                one_shot_grid2(&op(CollKind::ReduceScatter, f32, count)),
                (ONE_SHOT_MAX_BLOCKS, ONE_SHOT_THREADS)
            );
        }
    }

    #[test]
    fn messages_within_a_block_cap_launch_within_it() {
        let max = one_shot_max_bytes;
        assert_eq!(max(Variant::Ll, 2, 1000), ONE_SHOT_MAX_BYTES);
        assert_eq!(max(Variant::Ll, 2, 4), 8 << 10);
        assert_eq!(max(Variant::Simple, 2, 128), 2 << 20);
        assert_eq!(max(Variant::Simple, 2, 16), 256 << 10);
        assert_eq!(max(Variant::TwoShot, 4, 128), 4 * ((1 << 20) - 16));
        assert_eq!(max(Variant::TwoShot, 8, 16), 8 * ((256 << 10) - 16));
        for nranks in [2, 3, 4, 7, 8] {
            for cap in 1..=140 {
                for variant in [Variant::Ll, Variant::Simple, Variant::TwoShot] {
                    let max = max(variant, nranks, cap);
                    assert!(max > 0);
                    for dtype in [DataType::Int8, DataType::Float32, DataType::Float64] {
                        let es = dtype.size() as u64;
                        let count = max / es;
                        let o = OneShot {
                            variant,
                            ..op(CollKind::AllReduce, dtype, count)
                        };
                        let (blocks, _) = one_shot_grid(&o, nranks);
                        assert!(
                            blocks <= cap,
                            "{variant:?} cap {cap} {dtype:?}: {blocks} blocks"
                        );
                        if variant == Variant::TwoShot {
                            // The kernel's part: ceil(count / n) rounded up to 16-byte packs,
                            // within half a sender's slot.
                            let part = count.div_ceil(u64::from(nranks)).next_multiple_of(16 / es);
                            assert!(part * es <= TWO_SHOT_PART_BYTES, "{nranks} {dtype:?}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn parameters_carry_the_reduction_and_every_inbox() {
        let p = OneShotParams::new(
            &op(CollKind::ReduceScatter, DataType::Float16, 9),
            1,
            &[0xa0, 0xb0],
            0xe0,
            0xf0,
        );
        assert_eq!((p.rank, p.nranks, p.count, p.post_div), (1, 2, 9, 2));
        assert_eq!(
            (p.kind, p.inbox[..3].to_vec()),
            (KIND_REDUCE_SCATTER, vec![0xa0, 0xb0, 0])
        );
        let b = p.to_bytes();
        assert_eq!(&b[16..24], &0xa0u64.to_le_bytes());
        assert_eq!(&b[80..88], &0xe0u64.to_le_bytes());
        assert_eq!(&b[124..128], &2u32.to_le_bytes());
        assert_eq!(b[132], KIND_REDUCE_SCATTER);
        assert_eq!(p.simple, 0);
        let two = OneShot {
            variant: Variant::TwoShot,
            ..op(CollKind::AllReduce, DataType::Float32, 9)
        };
        assert_eq!(
            OneShotParams::new(&two, 0, &[0xa0, 0xb0], 0, 0).to_bytes()[135],
            2
        );
        // 2 ranks: LL 2 halves x 32 blocks x 2 senders x 4 rounds x 256 packets of 16 bytes;
        // a page of flags; Simple 2 halves x 2 senders x 2 MiB.
        assert_eq!(one_shot_inbox_bytes(2), (2 << 20) + 4096 + (8 << 20));
        assert_eq!(one_shot_inbox_bytes(9), 0);
    }
}
