//! Rust mirror of `kernels/common/oxccl/work.h`: the layout the kernels read, and the lowering
//! of a [`WorkDesc`] into it.
//!
//! This file is part of the `oxccl-kernel-abi` crate that both backends depend on (re-exported
//! by `backend-*/src/kernels.rs`), so the CUDA and HIP flavours cannot drift apart, while neither
//! backend depends on the other.
//! Sizes, alignments and field offsets are asserted here and, with the same numbers, in `work.h`.

use oxccl_core::datatype::{DataType, ReduceOp, Reduction, ScalarSource};
use oxccl_core::error::{Error, Result};
use oxccl_core::plan::{BufId, Path, Step, WorkDesc};
use std::collections::{HashMap, VecDeque};
use std::mem::{align_of, offset_of, size_of};
use std::ops::Range;

/// `OxcclDevStep::flags`: combine/copy the local operand at `src_buf + src_off`.
pub const STEP_HAS_SRC: u8 = 0x01;
/// `OxcclDevStep::flags`: store the value at `dst_buf + dst_off`.
pub const STEP_HAS_DST: u8 = 0x02;
/// `OxcclDevStep::flags`: the operand is this rank's own input, apply the pre-scale.
pub const STEP_PRE_OP: u8 = 0x04;
/// `OxcclDevStep::flags`: the value is final, apply the post-division.
pub const STEP_POST_OP: u8 = 0x08;
/// `OxcclDevStep::flags`: `recv_peer` is a loopback message index, not a rank.
pub const STEP_RECV_SELF: u8 = 0x10;
/// `OxcclDevStep::flags`: `send_peer` is a loopback message index, not a rank.
pub const STEP_SEND_SELF: u8 = 0x20;
/// `OxcclDevStep::flags`: messages to and from other ranks use the LL packet FIFOs.
pub const STEP_LL: u8 = 0x40;
/// `OxcclDevStep::flags`: a zero-copy exchange (`Step::swap`): the peer's operand goes to the
/// destination and the local operand to the peer, both read before either is written.
pub const STEP_SWAP: u8 = 0x80;
/// `OxcclDevStep::pair`: run only when this rank's or `send_peer`'s AlltoAll is in place.
pub const PAIR_IN_PLACE: u8 = 1;
/// `OxcclDevStep::pair`: run only when neither this rank's nor `send_peer`'s is in place.
pub const PAIR_APART: u8 = 2;

/// `OxcclDevStep::zc`: read the operand at `peer_src_off` of `recv_peer`'s published buffer
/// (low nibble of `peer_bufs`) instead of receiving a message.
pub const ZC_DIRECT_RECV: u8 = 0x01;
/// `OxcclDevStep::zc`: write the value at `peer_dst_off` of `send_peer`'s published buffer
/// (high nibble of `peer_bufs`) instead of sending a message.
pub const ZC_DIRECT_SEND: u8 = 0x02;
/// `OxcclDevStep::zc`: the operand read from the peer is its own contribution (pre-scale).
pub const ZC_PRE_RECV: u8 = 0x04;
/// `OxcclDevStep::zc`: make the block's earlier writes visible system-wide before the step.
pub const ZC_FENCE: u8 = 0x08;
/// `OxcclDevStep::zc`: the source is this rank's buffer table.
pub const ZC_PUBLISH: u8 = 0x10;
/// `OxcclDevStep::zc`: the received message is the sender's buffer table.
pub const ZC_LEARN: u8 = 0x20;
/// `OxcclDevStep::zc`: run only on the zero-copy branch.
pub const ZC_ONLY: u8 = 0x40;
/// `OxcclDevStep::zc`: run only on the fallback branch.
pub const ZC_FALLBACK: u8 = 0x80;

/// `OxcclLaunchArgs::redop` of [`ReduceOp::Sum`].
pub const OP_SUM: u8 = 0;
/// `OxcclLaunchArgs::redop` of [`ReduceOp::Prod`].
pub const OP_PROD: u8 = 1;
/// `OxcclLaunchArgs::redop` of [`ReduceOp::Max`].
pub const OP_MAX: u8 = 2;
/// `OxcclLaunchArgs::redop` of [`ReduceOp::Min`].
pub const OP_MIN: u8 = 3;

/// `OxcclLaunchArgs::flags`: `pre_scale_bytes` holds the PreMulSum scalar.
pub const ARGS_PRE_SCALE: u8 = 0x01;
/// `OxcclLaunchArgs::flags`: `pre_scale_ptr` points to the PreMulSum scalar in device memory.
pub const ARGS_PRE_SCALE_PTR: u8 = 0x02;
/// `OxcclLaunchArgs::flags`: the peers may use this rank's buffers (zero-copy plans).
pub const ARGS_EXPOSED: u8 = 0x04;

/// Kernel entry points, indexed by `ncclDataType_t` (the order of [`DataType::ALL`]).
pub const KERNEL_NAMES: [&str; 12] = [
    "oxccl_exec_i8",
    "oxccl_exec_u8",
    "oxccl_exec_i32",
    "oxccl_exec_u32",
    "oxccl_exec_i64",
    "oxccl_exec_u64",
    "oxccl_exec_f16",
    "oxccl_exec_f32",
    "oxccl_exec_f64",
    "oxccl_exec_bf16",
    "oxccl_exec_f8e4m3",
    "oxccl_exec_f8e5m2",
];

/// CUDA's entry points for argument blocks of more than `CUDA_INLINE_ARGS_BYTES`, carried
/// inline in larger parameters (`OxcclKernelParamsLarge`), indexed like [`KERNEL_NAMES`].
pub const LARGE_KERNEL_NAMES: [&str; 12] = [
    "oxccl_exec_i8_large",
    "oxccl_exec_u8_large",
    "oxccl_exec_i32_large",
    "oxccl_exec_u32_large",
    "oxccl_exec_i64_large",
    "oxccl_exec_u64_large",
    "oxccl_exec_f16_large",
    "oxccl_exec_f32_large",
    "oxccl_exec_f64_large",
    "oxccl_exec_bf16_large",
    "oxccl_exec_f8e4m3_large",
    "oxccl_exec_f8e5m2_large",
];

/// CUDA's entry points for argument blocks of at most `CUDA_SMALL_INLINE_ARGS_BYTES`, carried
/// in 1 KiB parameters (`OxcclKernelParamsSmall`), indexed like [`KERNEL_NAMES`].
pub const SMALL_KERNEL_NAMES: [&str; 12] = [
    "oxccl_exec_i8_small",
    "oxccl_exec_u8_small",
    "oxccl_exec_i32_small",
    "oxccl_exec_u32_small",
    "oxccl_exec_i64_small",
    "oxccl_exec_u64_small",
    "oxccl_exec_f16_small",
    "oxccl_exec_f32_small",
    "oxccl_exec_f64_small",
    "oxccl_exec_bf16_small",
    "oxccl_exec_f8e4m3_small",
    "oxccl_exec_f8e5m2_small",
];

/// CUDA's entry points for argument blocks of at most `CUDA_MEDIUM_INLINE_ARGS_BYTES` (and more than the
/// plain ones take), carried in 8000-byte parameters (`OxcclKernelParamsMedium`), indexed like [`KERNEL_NAMES`].
pub const MEDIUM_KERNEL_NAMES: [&str; 12] = [
    "oxccl_exec_i8_medium",
    "oxccl_exec_u8_medium",
    "oxccl_exec_i32_medium",
    "oxccl_exec_u32_medium",
    "oxccl_exec_i64_medium",
    "oxccl_exec_u64_medium",
    "oxccl_exec_f16_medium",
    "oxccl_exec_f32_medium",
    "oxccl_exec_f64_medium",
    "oxccl_exec_bf16_medium",
    "oxccl_exec_f8e4m3_medium",
    "oxccl_exec_f8e5m2_medium",
];

/// The entry point that executes work of element type `dtype`.
pub fn kernel_name(dtype: DataType) -> &'static str {
    KERNEL_NAMES[dtype as usize]
}

/// Largest block size the kernels were compiled for (`OXCCL_MAX_THREADS`, `__launch_bounds__`).
pub const MAX_THREADS_PER_BLOCK: u32 = 512;

/// Byte alignment of every loopback message, so the 16-byte vector path applies to them.
pub const LOOPBACK_ALIGN: u64 = 16;

/// One primitive of a channel (`OxcclDevStep`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DevStep {
    /// Elements this step moves.
    pub count: u64,
    /// Tag of the message (carried for debugging; connections match messages in order).
    pub tag: u64,
    /// Offset of the local operand in `src_buf`, in elements.
    pub src_off: u64,
    /// Offset of the destination in `dst_buf`, in elements.
    pub dst_off: u64,
    /// Peer to receive from, loopback message index with [`STEP_RECV_SELF`], or -1.
    pub recv_peer: i32,
    /// Peer to send to, loopback message index with [`STEP_SEND_SELF`], or -1.
    pub send_peer: i32,
    /// Buffer-table index of the local operand.
    pub src_buf: u16,
    /// Buffer-table index of the destination.
    pub dst_buf: u16,
    /// `STEP_*` bits.
    pub flags: u8,
    /// `ZC_*` bits.
    pub zc: u8,
    /// Published buffers (0 input, 1 output) a direct step reads (low nibble) and writes (high).
    pub peer_bufs: u8,
    /// 0, or [`PAIR_IN_PLACE`] or [`PAIR_APART`]: run only when this rank's or `send_peer`'s
    /// buffers are in place, or only when neither's are.
    pub pair: u8,
    /// Offset of the operand in `recv_peer`'s buffer ([`ZC_DIRECT_RECV`]), in elements.
    pub peer_src_off: u64,
    /// Offset of the destination in `send_peer`'s buffer ([`ZC_DIRECT_SEND`]), in elements.
    pub peer_dst_off: u64,
}

/// One channel's steps (`OxcclDevChannel`); one thread block runs one channel.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DevChannel {
    /// Block offset of `nsteps` [`DevStep`]s.
    pub steps: u64,
    /// Number of steps.
    pub nsteps: u32,
    /// The FIFO channel index its steps to and from other ranks use.
    pub fifo: u32,
}

/// One side of a Simple-protocol FIFO between two ranks (`OxcclConn`); see `work.h`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DevConn {
    /// Device address of `nslots * slot_bytes` bytes of slots (on the receiver).
    pub buff: u64,
    /// Device address of the `u64` count of slots the receiver has freed.
    pub head: u64,
    /// Device address of the `u64` count of slots the sender has filled.
    pub tail: u64,
    /// Bytes per slot (a multiple of 16, and of every element size).
    pub slot_bytes: u64,
    /// Number of slots.
    pub nslots: u32,
    /// Zero.
    pub pad: u32,
    /// Send side, optional (0: unused): sender-local copy of `tail`, so the sender finds its
    /// position without a read across the link.
    pub tail_mirror: u64,
    /// Send side, optional (0: unused): sender-local copy of the last `head` it saw, so it reads
    /// the receiver's counter only when the FIFO may really be full.
    pub head_seen: u64,
    /// Device address of the LL FIFO's `ll_nslots * ll_slot_bytes` bytes of packets (receiver).
    pub ll_buff: u64,
    /// Device address of the `u64` count of LL slots the receiver has consumed (receiver).
    pub ll_head: u64,
    /// Device address of this side's LL position: a sender-local counter, or `ll_head`.
    pub ll_pos: u64,
    /// Send side: device address of the sender-local copy of the last `ll_head` it saw.
    pub ll_head_seen: u64,
    /// Bytes of packets per LL slot (a multiple of 16; half of them are data).
    pub ll_slot_bytes: u32,
    /// Number of LL slots.
    pub ll_nslots: u32,
    /// Send side of a NET connection (0 otherwise): address of the per-slot `u64` byte counts
    /// the network proxy reads, written before `tail` moves; the LL slots' records follow at
    /// index `nslots` (`oxccl_net::ll`).
    pub sizes: u64,
}

/// Everything one launch reads (`OxcclLaunchArgs`), at the start of its argument block
/// (`args_block.rs`); `channels`, `buffers` and `loopback_offs` are offsets within that block.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LaunchArgs {
    /// Block offset of `nchannels` [`DevChannel`]s.
    pub channels: u64,
    /// Block offset of `nbuffers` buffer addresses, indexed by `BufId`.
    pub buffers: u64,
    /// Device address of `nchannels * nranks` send [`DevConn`]s, channel-major.
    pub send_conns: u64,
    /// Device address of `nchannels * nranks` receive [`DevConn`]s, channel-major.
    pub recv_conns: u64,
    /// Device address of [`EncodedWork::loopback_bytes`] bytes of staging.
    pub loopback: u64,
    /// Block offset of the `u64` byte offsets [`EncodedWork::loopback_offsets`].
    pub loopback_offs: u64,
    /// Device address of one `u64` ready flag per loopback message (zero-initialised once).
    pub loopback_flags: u64,
    /// Device address of the PreMulSum scalar, with [`ARGS_PRE_SCALE_PTR`].
    pub pre_scale_ptr: u64,
    /// Device-visible address of the communicator's `u32` abort flag (0: keep going).
    pub abort_flag: u64,
    /// The PreMulSum scalar's little-endian bytes, with [`ARGS_PRE_SCALE`].
    pub pre_scale_bytes: u64,
    /// Non-zero launch number, larger than every earlier launch's that used `loopback_flags`.
    pub epoch: u64,
    /// Number of channels (= grid size).
    pub nchannels: u32,
    /// Ranks in the communicator.
    pub nranks: u32,
    /// This rank.
    pub rank: u32,
    /// Entries in the buffer table.
    pub nbuffers: u32,
    /// Post-division divisor (0 or 1: none).
    pub post_div: u32,
    /// `ncclDataType_t`, for debugging (the entry point fixes the type).
    pub dtype: u8,
    /// `OP_*`.
    pub redop: u8,
    /// `ARGS_*` bits.
    pub flags: u8,
    /// Zero.
    pub pad: u8,
}

const _: () = {
    assert!(size_of::<DevStep>() == 64);
    assert!(align_of::<DevStep>() == 8);
    assert!(offset_of!(DevStep, count) == 0);
    assert!(offset_of!(DevStep, tag) == 8);
    assert!(offset_of!(DevStep, src_off) == 16);
    assert!(offset_of!(DevStep, dst_off) == 24);
    assert!(offset_of!(DevStep, recv_peer) == 32);
    assert!(offset_of!(DevStep, send_peer) == 36);
    assert!(offset_of!(DevStep, src_buf) == 40);
    assert!(offset_of!(DevStep, dst_buf) == 42);
    assert!(offset_of!(DevStep, flags) == 44);
    assert!(offset_of!(DevStep, zc) == 45);
    assert!(offset_of!(DevStep, peer_bufs) == 46);
    assert!(offset_of!(DevStep, pair) == 47);
    assert!(offset_of!(DevStep, peer_src_off) == 48);
    assert!(offset_of!(DevStep, peer_dst_off) == 56);
    assert!(size_of::<DevChannel>() == 16);
    assert!(align_of::<DevChannel>() == 8);
    assert!(offset_of!(DevChannel, steps) == 0);
    assert!(offset_of!(DevChannel, nsteps) == 8);
    assert!(offset_of!(DevChannel, fifo) == 12);
    assert!(size_of::<DevConn>() == 104);
    assert!(align_of::<DevConn>() == 8);
    assert!(offset_of!(DevConn, buff) == 0);
    assert!(offset_of!(DevConn, head) == 8);
    assert!(offset_of!(DevConn, tail) == 16);
    assert!(offset_of!(DevConn, slot_bytes) == 24);
    assert!(offset_of!(DevConn, nslots) == 32);
    assert!(offset_of!(DevConn, tail_mirror) == 40);
    assert!(offset_of!(DevConn, head_seen) == 48);
    assert!(offset_of!(DevConn, ll_buff) == 56);
    assert!(offset_of!(DevConn, ll_head) == 64);
    assert!(offset_of!(DevConn, ll_pos) == 72);
    assert!(offset_of!(DevConn, ll_head_seen) == 80);
    assert!(offset_of!(DevConn, ll_slot_bytes) == 88);
    assert!(offset_of!(DevConn, ll_nslots) == 92);
    assert!(offset_of!(DevConn, sizes) == 96);
    assert!(size_of::<LaunchArgs>() == 112);
    assert!(align_of::<LaunchArgs>() == 8);
    assert!(offset_of!(LaunchArgs, channels) == 0);
    assert!(offset_of!(LaunchArgs, buffers) == 8);
    assert!(offset_of!(LaunchArgs, send_conns) == 16);
    assert!(offset_of!(LaunchArgs, recv_conns) == 24);
    assert!(offset_of!(LaunchArgs, loopback) == 32);
    assert!(offset_of!(LaunchArgs, loopback_offs) == 40);
    assert!(offset_of!(LaunchArgs, loopback_flags) == 48);
    assert!(offset_of!(LaunchArgs, pre_scale_ptr) == 56);
    assert!(offset_of!(LaunchArgs, abort_flag) == 64);
    assert!(offset_of!(LaunchArgs, pre_scale_bytes) == 72);
    assert!(offset_of!(LaunchArgs, epoch) == 80);
    assert!(offset_of!(LaunchArgs, nchannels) == 88);
    assert!(offset_of!(LaunchArgs, nranks) == 92);
    assert!(offset_of!(LaunchArgs, rank) == 96);
    assert!(offset_of!(LaunchArgs, nbuffers) == 100);
    assert!(offset_of!(LaunchArgs, post_div) == 104);
    assert!(offset_of!(LaunchArgs, dtype) == 108);
    assert!(offset_of!(LaunchArgs, redop) == 109);
    assert!(offset_of!(LaunchArgs, flags) == 110);
};

// Explicit little-endian serialisation keeps uploads free of `unsafe` byte views; writing each
// field at its `offset_of!` ties the bytes to the `#[repr(C)]` layout asserted above.
fn put(out: &mut [u8], at: usize, bytes: &[u8]) {
    out[at..at + bytes.len()].copy_from_slice(bytes);
}

impl DevStep {
    /// The step's bytes as the device reads them.
    pub fn to_bytes(&self) -> [u8; size_of::<DevStep>()] {
        let mut b = [0u8; size_of::<DevStep>()];
        self.write_to(&mut b);
        b
    }

    /// Writes the step's bytes as the device reads them into `b` (an argument block's slot):
    /// directly, because copying them out of a temporary read each back before its narrow
    /// stores had landed, which cost most of the block's build.
    #[inline(always)]
    pub fn write_to(&self, b: &mut [u8; size_of::<DevStep>()]) {
        let b = &mut b[..];
        put(b, offset_of!(DevStep, count), &self.count.to_le_bytes());
        put(b, offset_of!(DevStep, tag), &self.tag.to_le_bytes());
        put(b, offset_of!(DevStep, src_off), &self.src_off.to_le_bytes());
        put(b, offset_of!(DevStep, dst_off), &self.dst_off.to_le_bytes());
        put(
            b,
            offset_of!(DevStep, recv_peer),
            &self.recv_peer.to_le_bytes(),
        );
        put(
            b,
            offset_of!(DevStep, send_peer),
            &self.send_peer.to_le_bytes(),
        );
        put(b, offset_of!(DevStep, src_buf), &self.src_buf.to_le_bytes());
        put(b, offset_of!(DevStep, dst_buf), &self.dst_buf.to_le_bytes());
        put(b, offset_of!(DevStep, flags), &[self.flags]);
        put(b, offset_of!(DevStep, zc), &[self.zc]);
        put(b, offset_of!(DevStep, peer_bufs), &[self.peer_bufs]);
        put(b, offset_of!(DevStep, pair), &[self.pair]);
        put(
            b,
            offset_of!(DevStep, peer_src_off),
            &self.peer_src_off.to_le_bytes(),
        );
        put(
            b,
            offset_of!(DevStep, peer_dst_off),
            &self.peer_dst_off.to_le_bytes(),
        );
    }
}

impl DevChannel {
    /// The channel's bytes as the device reads them.
    pub fn to_bytes(&self) -> [u8; size_of::<DevChannel>()] {
        let mut b = [0u8; size_of::<DevChannel>()];
        put(
            &mut b,
            offset_of!(DevChannel, steps),
            &self.steps.to_le_bytes(),
        );
        put(
            &mut b,
            offset_of!(DevChannel, nsteps),
            &self.nsteps.to_le_bytes(),
        );
        put(
            &mut b,
            offset_of!(DevChannel, fifo),
            &self.fifo.to_le_bytes(),
        );
        b
    }
}

impl DevConn {
    /// The connection's bytes as the device reads them.
    pub fn to_bytes(&self) -> [u8; size_of::<DevConn>()] {
        let mut b = [0u8; size_of::<DevConn>()];
        put(&mut b, offset_of!(DevConn, buff), &self.buff.to_le_bytes());
        put(&mut b, offset_of!(DevConn, head), &self.head.to_le_bytes());
        put(&mut b, offset_of!(DevConn, tail), &self.tail.to_le_bytes());
        put(
            &mut b,
            offset_of!(DevConn, slot_bytes),
            &self.slot_bytes.to_le_bytes(),
        );
        put(
            &mut b,
            offset_of!(DevConn, nslots),
            &self.nslots.to_le_bytes(),
        );
        put(
            &mut b,
            offset_of!(DevConn, tail_mirror),
            &self.tail_mirror.to_le_bytes(),
        );
        put(
            &mut b,
            offset_of!(DevConn, head_seen),
            &self.head_seen.to_le_bytes(),
        );
        for (at, v) in [
            (offset_of!(DevConn, ll_buff), self.ll_buff),
            (offset_of!(DevConn, ll_head), self.ll_head),
            (offset_of!(DevConn, ll_pos), self.ll_pos),
            (offset_of!(DevConn, ll_head_seen), self.ll_head_seen),
            (offset_of!(DevConn, sizes), self.sizes),
        ] {
            put(&mut b, at, &v.to_le_bytes());
        }
        put(
            &mut b,
            offset_of!(DevConn, ll_slot_bytes),
            &self.ll_slot_bytes.to_le_bytes(),
        );
        put(
            &mut b,
            offset_of!(DevConn, ll_nslots),
            &self.ll_nslots.to_le_bytes(),
        );
        b
    }
}

impl LaunchArgs {
    /// The arguments' bytes as the device reads them.
    pub fn to_bytes(&self) -> [u8; size_of::<LaunchArgs>()] {
        let mut b = [0u8; size_of::<LaunchArgs>()];
        let u64s = [
            (offset_of!(LaunchArgs, channels), self.channels),
            (offset_of!(LaunchArgs, buffers), self.buffers),
            (offset_of!(LaunchArgs, send_conns), self.send_conns),
            (offset_of!(LaunchArgs, recv_conns), self.recv_conns),
            (offset_of!(LaunchArgs, loopback), self.loopback),
            (offset_of!(LaunchArgs, loopback_offs), self.loopback_offs),
            (offset_of!(LaunchArgs, loopback_flags), self.loopback_flags),
            (offset_of!(LaunchArgs, pre_scale_ptr), self.pre_scale_ptr),
            (offset_of!(LaunchArgs, abort_flag), self.abort_flag),
            (
                offset_of!(LaunchArgs, pre_scale_bytes),
                self.pre_scale_bytes,
            ),
            (offset_of!(LaunchArgs, epoch), self.epoch),
        ];
        for (at, v) in u64s {
            put(&mut b, at, &v.to_le_bytes());
        }
        let u32s = [
            (offset_of!(LaunchArgs, nchannels), self.nchannels),
            (offset_of!(LaunchArgs, nranks), self.nranks),
            (offset_of!(LaunchArgs, rank), self.rank),
            (offset_of!(LaunchArgs, nbuffers), self.nbuffers),
            (offset_of!(LaunchArgs, post_div), self.post_div),
        ];
        for (at, v) in u32s {
            put(&mut b, at, &v.to_le_bytes());
        }
        put(&mut b, offset_of!(LaunchArgs, dtype), &[self.dtype]);
        put(&mut b, offset_of!(LaunchArgs, redop), &[self.redop]);
        put(&mut b, offset_of!(LaunchArgs, flags), &[self.flags]);
        b
    }
}

/// Concatenated device bytes of `items`, for one upload.
pub fn concat_bytes<T, const N: usize>(items: &[T], to_bytes: impl Fn(&T) -> [u8; N]) -> Vec<u8> {
    items.iter().flat_map(to_bytes).collect()
}

/// The reduction part of [`LaunchArgs`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReductionArgs {
    /// `OP_*`.
    pub redop: u8,
    /// `ARGS_*` bits.
    pub flags: u8,
    /// Immediate scalar bytes.
    pub pre_scale_bytes: u64,
    /// Address of a device scalar.
    pub pre_scale_ptr: u64,
    /// Post-division divisor (0: none).
    pub post_div: u32,
}

/// Lowers a [`Reduction`] into launch-argument fields.
pub fn reduction_args(r: &Reduction) -> ReductionArgs {
    let redop = match r.op {
        ReduceOp::Sum => OP_SUM,
        ReduceOp::Prod => OP_PROD,
        ReduceOp::Max => OP_MAX,
        ReduceOp::Min => OP_MIN,
    };
    let mut out = ReductionArgs {
        redop,
        post_div: r.post_div.unwrap_or(0),
        ..ReductionArgs::default()
    };
    match r.pre_scale {
        None => {}
        Some(ScalarSource::Immediate(s)) => {
            out.flags |= ARGS_PRE_SCALE;
            out.pre_scale_bytes = u64::from_le_bytes(s.bytes);
        }
        Some(ScalarSource::Device(ptr)) => {
            out.flags |= ARGS_PRE_SCALE_PTR;
            out.pre_scale_ptr = ptr;
        }
    }
    out
}

/// `LaunchArgs::flags` of a launch of `work`: its reduction's `ARGS_*` bits, and
/// [`ARGS_EXPOSED`] when the peers may read and write its buffers (zero-copy plans).
pub fn launch_flags(work: &WorkDesc, red: &ReductionArgs) -> u8 {
    red.flags | if work.exposed { ARGS_EXPOSED } else { 0 }
}

/// A [`WorkDesc`] lowered for the kernels of one rank.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EncodedWork {
    /// Every channel's steps, channel after channel.
    pub steps: Vec<DevStep>,
    /// Where each channel's steps are in `steps`.
    pub channels: Vec<Range<usize>>,
    /// Each channel's FIFO channel index ([`oxccl_core::plan::ChannelWork::fifo_index`]).
    pub fifos: Vec<u32>,
    /// Byte offset in the loopback staging of each message this rank sends to itself.
    pub loopback_offsets: Vec<u64>,
    /// Bytes of loopback staging the launch must provide.
    pub loopback_bytes: u64,
}

impl EncodedWork {
    /// FIFO channels a transport needs: up to the highest FIFO index of a channel with a step
    /// that sends to or receives from another rank (other channels only copy locally or
    /// through loopback).
    pub fn fifo_channels(&self) -> usize {
        self.channels
            .iter()
            .zip(&self.fifos)
            .filter(|(r, _)| {
                self.steps[(*r).clone()].iter().any(|st| {
                    (st.recv_peer >= 0 && st.flags & STEP_RECV_SELF == 0)
                        || (st.send_peer >= 0 && st.flags & STEP_SEND_SELF == 0)
                })
            })
            .map(|(_, &f)| f as usize + 1)
            .max()
            .unwrap_or(0)
    }
}

fn plan_bug(msg: String) -> Error {
    Error::Internal(format!("work description cannot run on the device: {msg}"))
}

fn peer_field(peer: u32, what: &str) -> Result<i32> {
    i32::try_from(peer)
        .map_err(|_| plan_bug(format!("{what} peer {peer} does not fit the device step")))
}

/// Lowers `work` as rank `rank` runs it.
///
/// Messages to the rank itself become loopback messages: the n-th send to self with a tag
/// matches the n-th receive from self with that tag, counting channel by channel in order (the
/// host executor's FIFO per peer and tag). Each gets its own staging area, so a plan needs no
/// bound on what it keeps in flight to itself. Fails on plans the device cannot run: a step that
/// stores or sends without a value, unmatched or differently sized self messages, or a receive
/// from self that its own channel reaches before the matching send (it would wait forever).
pub fn encode(work: &WorkDesc, rank: u32) -> Result<EncodedWork> {
    let elem = work.dtype.size() as u64;

    // Match self messages: the i-th self send (channel-major order) is loopback message i.
    let mut sends: HashMap<u64, VecDeque<(usize, usize, u32)>> = HashMap::new();
    let mut send_counts: Vec<u64> = Vec::new();
    for (c, ch) in work.channels.iter().enumerate() {
        for (i, st) in ch.steps.iter().enumerate() {
            if st.send == Some(rank) {
                let msg = u32::try_from(send_counts.len())
                    .map_err(|_| plan_bug("too many self messages".into()))?;
                sends.entry(st.tag).or_default().push_back((c, i, msg));
                send_counts.push(st.count);
            }
        }
    }
    let mut recv_msg: HashMap<(usize, usize), u32> = HashMap::new();
    for (c, ch) in work.channels.iter().enumerate() {
        for (i, st) in ch.steps.iter().enumerate() {
            if st.recv != Some(rank) {
                continue;
            }
            let (sc, si, msg) = sends
                .get_mut(&st.tag)
                .and_then(|q| q.pop_front())
                .ok_or_else(|| {
                    plan_bug(format!(
                        "channel {c} step {i} receives from self (tag {}) but nothing sends it",
                        st.tag
                    ))
                })?;
            if send_counts[msg as usize] != st.count {
                return Err(plan_bug(format!(
                    "channel {c} step {i} receives {} elements from self, channel {sc} step {si} sends {}",
                    st.count, send_counts[msg as usize]
                )));
            }
            if sc == c && si >= i {
                return Err(plan_bug(format!(
                    "channel {c} step {i} receives from self before step {si} sends it"
                )));
            }
            recv_msg.insert((c, i), msg);
        }
    }
    if let Some((tag, q)) = sends.iter().find(|(_, q)| !q.is_empty()) {
        let (c, i, _) = q[0];
        return Err(plan_bug(format!(
            "channel {c} step {i} sends to self (tag {tag}) but nothing receives it"
        )));
    }

    let mut loopback_offsets = Vec::with_capacity(send_counts.len());
    let mut loopback_bytes = 0u64;
    for &count in &send_counts {
        loopback_offsets.push(loopback_bytes);
        let bytes = count
            .checked_mul(elem)
            .and_then(|b| b.checked_next_multiple_of(LOOPBACK_ALIGN))
            .and_then(|b| b.checked_add(loopback_bytes))
            .ok_or_else(|| plan_bug("loopback staging size overflows".into()))?;
        loopback_bytes = bytes;
    }

    let mut out = EncodedWork {
        steps: Vec::with_capacity(work.step_count()),
        channels: Vec::with_capacity(work.channels.len()),
        fifos: Vec::with_capacity(work.channels.len()),
        loopback_offsets,
        loopback_bytes,
    };
    let mut next_send_msg = 0u32;
    for (c, ch) in work.channels.iter().enumerate() {
        let first = out.steps.len();
        for (i, st) in ch.steps.iter().enumerate() {
            // Only a step receiving from this rank has a loopback message (and most plans have
            // none): no lookup for the others.
            let recv = if st.recv == Some(rank) {
                recv_msg.get(&(c, i)).copied()
            } else {
                None
            };
            let send = if st.send == Some(rank) {
                next_send_msg += 1;
                Some(next_send_msg - 1)
            } else {
                None
            };
            out.steps.push(encode_step(st, recv, send, c, i)?);
        }
        out.channels.push(first..out.steps.len());
        let fifo = ch.fifo_index(c);
        out.fifos.push(
            u32::try_from(fifo).map_err(|_| plan_bug(format!("channel {c}: FIFO index {fifo}")))?,
        );
    }
    Ok(out)
}

/// One step; `recv_self`/`send_self` are its loopback message indices when the peer is this rank.
#[inline(always)]
fn encode_step(
    st: &Step,
    recv_self: Option<u32>,
    send_self: Option<u32>,
    c: usize,
    i: usize,
) -> Result<DevStep> {
    let mut d = DevStep {
        count: st.count,
        tag: st.tag,
        recv_peer: -1,
        send_peer: -1,
        ..DevStep::default()
    };
    if st.src.is_none()
        && st.recv.is_none()
        && !st.publish
        && (st.dst.is_some() || st.send.is_some())
    {
        return Err(plan_bug(format!(
            "channel {c} step {i} stores or sends without a value"
        )));
    }
    if let Some(src) = st.src {
        d.flags |= STEP_HAS_SRC;
        d.src_buf = src.buf.0;
        d.src_off = src.offset;
        if st.pre_op {
            d.flags |= STEP_PRE_OP;
        }
    }
    if let Some(dst) = st.dst {
        d.flags |= STEP_HAS_DST;
        d.dst_buf = dst.buf.0;
        d.dst_off = dst.offset;
    }
    if st.post_op {
        d.flags |= STEP_POST_OP;
    }
    if st.ll {
        d.flags |= STEP_LL;
    }
    if st.swap {
        d.flags |= STEP_SWAP;
    }
    d.pair = match st.pair_in_place {
        None => 0,
        Some(true) => PAIR_IN_PLACE,
        Some(false) => PAIR_APART,
    };
    d.zc = zero_copy_bits(st, c, i)?;
    if let Some(r) = st.peer_src {
        d.peer_bufs |= published_buf(r.buf, c, i)?;
        d.peer_src_off = r.offset;
    }
    if let Some(r) = st.peer_dst {
        d.peer_bufs |= published_buf(r.buf, c, i)? << 4;
        d.peer_dst_off = r.offset;
    }
    match (st.recv, recv_self) {
        (_, Some(msg)) => {
            d.flags |= STEP_RECV_SELF;
            d.recv_peer = peer_field(msg, "loopback")?;
        }
        (Some(p), None) => d.recv_peer = peer_field(p, "receive")?,
        (None, None) => {}
    }
    match (st.send, send_self) {
        (_, Some(msg)) => {
            d.flags |= STEP_SEND_SELF;
            d.send_peer = peer_field(msg, "loopback")?;
        }
        (Some(p), None) => d.send_peer = peer_field(p, "send")?,
        (None, None) => {}
    }
    Ok(d)
}

/// The `ZC_*` bits of a step.
fn zero_copy_bits(st: &Step, c: usize, i: usize) -> Result<u8> {
    let mut z = 0;
    if st.peer_src.is_some() {
        if st.recv.is_none() {
            return Err(plan_bug(format!(
                "channel {c} step {i} reads a peer's buffer but names no peer"
            )));
        }
        z |= ZC_DIRECT_RECV;
    }
    if st.peer_dst.is_some() {
        if st.send.is_none() {
            return Err(plan_bug(format!(
                "channel {c} step {i} writes a peer's buffer but names no peer"
            )));
        }
        z |= ZC_DIRECT_SEND;
    }
    if st.pre_recv {
        z |= ZC_PRE_RECV;
    }
    if st.fence {
        z |= ZC_FENCE;
    }
    if st.publish {
        z |= ZC_PUBLISH;
    }
    if st.learn {
        z |= ZC_LEARN;
    }
    z |= match st.path {
        Path::Always => 0,
        Path::ZeroCopy => ZC_ONLY,
        Path::Fallback => ZC_FALLBACK,
    };
    Ok(z)
}

/// A buffer a rank publishes to its peers, as its index in the published table.
fn published_buf(b: BufId, c: usize, i: usize) -> Result<u8> {
    match b {
        BufId::INPUT => Ok(0),
        BufId::OUTPUT => Ok(1),
        other => Err(plan_bug(format!(
            "channel {c} step {i} addresses buffer {} of a peer, which is not published",
            other.0
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxccl_core::datatype::{RedOp, Scalar};
    use oxccl_core::plan::{Algorithm, BufId, ChannelWork, CollKind, Protocol, Region};

    fn work(dtype: DataType, channels: Vec<Vec<Step>>) -> WorkDesc {
        WorkDesc {
            kind: CollKind::AllReduce,
            algo: Algorithm::Ring,
            proto: Protocol::Simple,
            dtype,
            reduction: Reduction::none(),
            scratch_elems: 0,
            exposed: false,
            channels: channels.into_iter().map(ChannelWork::new).collect(),
        }
    }

    #[test]
    fn kernel_names_follow_the_dtype_order() {
        for (i, dt) in DataType::ALL.iter().enumerate() {
            assert_eq!(*dt as usize, i);
            assert_eq!(kernel_name(*dt), KERNEL_NAMES[i]);
        }
        let mut sorted = KERNEL_NAMES.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), KERNEL_NAMES.len());
    }

    #[test]
    fn ring_allreduce_step_lowers_field_by_field() {
        let st = Step::new(1000, 77)
            .recv(3)
            .own(Region::input(500))
            .last()
            .dst(Region::output(500))
            .send(1);
        let enc = encode(&work(DataType::Float32, vec![vec![st]]), 2).unwrap();
        assert_eq!(enc.channels, vec![0..1]);
        assert_eq!(
            enc.steps[0],
            DevStep {
                count: 1000,
                tag: 77,
                src_off: 500,
                dst_off: 500,
                recv_peer: 3,
                send_peer: 1,
                src_buf: BufId::INPUT.0,
                dst_buf: BufId::OUTPUT.0,
                flags: STEP_HAS_SRC | STEP_HAS_DST | STEP_PRE_OP | STEP_POST_OP,
                ..DevStep::default()
            }
        );
        assert!(enc.loopback_offsets.is_empty());
        assert_eq!(enc.loopback_bytes, 0);
        let ll = encode(&work(DataType::Float32, vec![vec![st.ll()]]), 2).unwrap();
        assert_eq!(ll.steps[0].flags, enc.steps[0].flags | STEP_LL);
    }

    #[test]
    fn zero_copy_parts_lower_to_zc_bits_and_peer_fields() {
        let mut publish = Step::new(6, 1).send(1).ll();
        publish.publish = true;
        let mut learn = Step::new(6, 1).recv(1).ll();
        learn.learn = true;
        let mut direct = Step::new(100, 1)
            .read_peer(1, Region::input(40))
            .own(Region::input(40))
            .dst(Region::output(40))
            .write_peer(1, Region::output(40))
            .on(Path::ZeroCopy);
        direct.fence = true;
        let fallback = Step::new(100, 1)
            .recv(1)
            .dst(Region::output(0))
            .on(Path::Fallback);
        let enc = encode(
            &work(
                DataType::Float32,
                vec![vec![publish, learn, direct, fallback]],
            ),
            0,
        )
        .unwrap();
        let s = &enc.steps;
        assert_eq!((s[0].zc, s[0].flags & STEP_HAS_SRC), (ZC_PUBLISH, 0));
        assert_eq!((s[1].zc, s[1].recv_peer), (ZC_LEARN, 1));
        assert_eq!(
            s[2].zc,
            ZC_DIRECT_RECV | ZC_DIRECT_SEND | ZC_PRE_RECV | ZC_FENCE | ZC_ONLY
        );
        assert_eq!(
            (s[2].peer_bufs, s[2].peer_src_off, s[2].peer_dst_off),
            (0x10, 40, 40)
        );
        assert_eq!((s[2].recv_peer, s[2].send_peer), (1, 1));
        assert_eq!(s[3].zc, ZC_FALLBACK);
        // Exposed buffers travel as a launch flag, next to the reduction's own.
        let mut w = work(DataType::Float32, vec![]);
        w.reduction.pre_scale = Some(ScalarSource::Device(8));
        let red = reduction_args(&w.reduction);
        assert_eq!(launch_flags(&w, &red), ARGS_PRE_SCALE_PTR);
        w.exposed = true;
        assert_eq!(launch_flags(&w, &red), ARGS_PRE_SCALE_PTR | ARGS_EXPOSED);
        // Only a rank's input and output are published.
        let bad = Step::new(4, 1)
            .read_peer(1, Region::scratch(0))
            .dst(Region::output(0));
        assert!(encode(&work(DataType::Float32, vec![vec![bad]]), 0).is_err());
    }

    #[test]
    fn absent_parts_become_minus_one_and_clear_flags() {
        let copy = Step::new(8, 0)
            .src(Region::input(0))
            .dst(Region::scratch(4));
        let recv_only = Step::new(8, 1).recv(0).dst(Region::output(8));
        let enc = encode(&work(DataType::Int8, vec![vec![copy, recv_only]]), 1).unwrap();
        let [a, b] = [enc.steps[0], enc.steps[1]];
        assert_eq!((a.recv_peer, a.send_peer), (-1, -1));
        assert_eq!(a.flags, STEP_HAS_SRC | STEP_HAS_DST);
        assert_eq!((a.src_buf, a.dst_buf, a.dst_off), (0, BufId::SCRATCH.0, 4));
        assert_eq!((b.recv_peer, b.send_peer), (0, -1));
        assert_eq!(b.flags, STEP_HAS_DST);
    }

    #[test]
    fn channels_are_concatenated_in_order() {
        let s = |t| Step::new(4, t).src(Region::input(0)).dst(Region::output(0));
        let enc = encode(
            &work(DataType::Uint8, vec![vec![s(0), s(1)], vec![], vec![s(2)]]),
            0,
        )
        .unwrap();
        assert_eq!(enc.channels, vec![0..2, 2..2, 2..3]);
        assert_eq!(
            enc.steps.iter().map(|s| s.tag).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
    }

    #[test]
    fn self_messages_get_aligned_loopback_slots() {
        // Rank 0 sends 3 bf16 (6 bytes -> one 16-byte slot) to itself twice with tag 9, and
        // receives them in channel 1; a real peer (1) stays a peer.
        let send0 = Step::new(3, 9).own(Region::input(0)).send(0);
        let send1 = Step::new(3, 9).own(Region::input(3)).send(0);
        let to_peer = Step::new(3, 5).src(Region::input(0)).send(1);
        let recv0 = Step::new(3, 9).recv(0).dst(Region::output(0));
        let recv1 = Step::new(3, 9)
            .recv(0)
            .src(Region::input(3))
            .dst(Region::output(3))
            .send(0);
        let recv2 = Step::new(3, 9).recv(0).dst(Region::output(6));
        let w = work(
            DataType::Bfloat16,
            vec![vec![send0, to_peer, send1], vec![recv0, recv1, recv2]],
        );
        let enc = encode(&w, 0).unwrap();
        assert_eq!(enc.loopback_offsets, vec![0, 16, 32]);
        assert_eq!(enc.loopback_bytes, 48);
        let s = &enc.steps;
        assert_eq!(
            (s[0].send_peer, s[0].flags & STEP_SEND_SELF),
            (0, STEP_SEND_SELF)
        );
        assert_eq!((s[1].send_peer, s[1].flags & STEP_SEND_SELF), (1, 0));
        assert_eq!(
            (s[2].send_peer, s[2].flags & STEP_SEND_SELF),
            (1, STEP_SEND_SELF)
        );
        assert_eq!(
            (s[3].recv_peer, s[3].flags & STEP_RECV_SELF),
            (0, STEP_RECV_SELF)
        );
        // recv1 receives message 1 and itself sends message 2, which recv2 then receives.
        assert_eq!((s[4].recv_peer, s[4].send_peer), (1, 2));
        assert_eq!(
            s[4].flags & (STEP_RECV_SELF | STEP_SEND_SELF),
            STEP_RECV_SELF | STEP_SEND_SELF
        );
        assert_eq!(s[5].recv_peer, 2);
    }

    #[test]
    fn fifo_channels_ignore_trailing_local_and_loopback_channels() {
        let step = |recv: i32, send: i32, flags: u8| DevStep {
            count: 1,
            recv_peer: recv,
            send_peer: send,
            flags,
            ..DevStep::default()
        };
        let enc = |chs: Vec<Vec<DevStep>>| {
            let mut steps = Vec::new();
            let mut channels = Vec::new();
            for c in chs {
                channels.push(steps.len()..steps.len() + c.len());
                steps.extend(c);
            }
            EncodedWork {
                fifos: (0..channels.len() as u32).collect(),
                steps,
                channels,
                loopback_offsets: Vec::new(),
                loopback_bytes: 0,
            }
        };
        let to_peer = step(-1, 1, STEP_HAS_SRC);
        let from_peer = step(1, -1, STEP_HAS_DST);
        let to_self = step(-1, 0, STEP_HAS_SRC | STEP_SEND_SELF);
        let from_self = step(0, -1, STEP_HAS_DST | STEP_RECV_SELF);
        let local = step(-1, -1, STEP_HAS_SRC | STEP_HAS_DST);
        assert_eq!(enc(vec![]).fifo_channels(), 0);
        assert_eq!(
            enc(vec![vec![local], vec![to_self, from_self]]).fifo_channels(),
            0
        );
        assert_eq!(
            enc(vec![vec![to_peer], vec![], vec![to_self, from_self]]).fifo_channels(),
            1
        );
        assert_eq!(
            enc(vec![vec![], vec![local], vec![from_peer]]).fifo_channels(),
            3
        );
        // A channel on another channel's FIFO counts by its FIFO index.
        let mut split = enc(vec![vec![to_peer], vec![from_peer], vec![local]]);
        split.fifos = vec![0, 0, 7];
        assert_eq!(split.fifo_channels(), 1);
        split.fifos = vec![4, 0, 0];
        assert_eq!(split.fifo_channels(), 5);
    }

    #[test]
    fn broken_self_messages_are_rejected() {
        let send = Step::new(4, 1).src(Region::input(0)).send(0);
        let recv = Step::new(4, 1).recv(0).dst(Region::output(0));
        let recv_short = Step::new(2, 1).recv(0).dst(Region::output(0));
        // Receive before the send in the same channel: the block would wait for itself.
        assert!(encode(&work(DataType::Float32, vec![vec![recv, send]]), 0).is_err());
        // The same step receiving the message it sends.
        let own = Step::new(4, 1).recv(0).send(0);
        assert!(encode(&work(DataType::Float32, vec![vec![own]]), 0).is_err());
        // Sizes differ, nothing received, nothing sent.
        assert!(encode(&work(DataType::Float32, vec![vec![send, recv_short]]), 0).is_err());
        assert!(encode(&work(DataType::Float32, vec![vec![send]]), 0).is_err());
        assert!(encode(&work(DataType::Float32, vec![vec![recv]]), 0).is_err());
        // The same steps are fine on another rank, where peer 0 is a real peer.
        assert!(encode(&work(DataType::Float32, vec![vec![recv, send]]), 1).is_ok());
        // And across channels in either order.
        assert!(encode(&work(DataType::Float32, vec![vec![recv], vec![send]]), 0).is_ok());
    }

    #[test]
    fn valueless_store_is_rejected() {
        let bad = Step::new(4, 0).dst(Region::output(0));
        assert!(encode(&work(DataType::Float64, vec![vec![bad]]), 0).is_err());
        let bad_send = Step::new(4, 0).send(1);
        assert!(encode(&work(DataType::Float64, vec![vec![bad_send]]), 0).is_err());
        // A step with no parts at all is a harmless no-op.
        assert!(encode(&work(DataType::Float64, vec![vec![Step::new(4, 0)]]), 0).is_ok());
    }

    #[test]
    fn huge_peer_is_rejected() {
        let st = Step::new(1, 0).src(Region::input(0)).send(u32::MAX);
        assert!(encode(&work(DataType::Int32, vec![vec![st]]), 0).is_err());
    }

    #[test]
    fn reductions_lower_to_launch_fields() {
        let sum = reduction_args(&Reduction::lower(RedOp::Sum, 4));
        assert_eq!(
            sum,
            ReductionArgs {
                redop: OP_SUM,
                ..ReductionArgs::default()
            }
        );
        assert_eq!(
            reduction_args(&Reduction::lower(RedOp::Prod, 4)).redop,
            OP_PROD
        );
        assert_eq!(
            reduction_args(&Reduction::lower(RedOp::Max, 4)).redop,
            OP_MAX
        );
        assert_eq!(
            reduction_args(&Reduction::lower(RedOp::Min, 4)).redop,
            OP_MIN
        );
        let avg = reduction_args(&Reduction::lower(RedOp::Avg, 8));
        assert_eq!((avg.redop, avg.post_div, avg.flags), (OP_SUM, 8, 0));
        let s = Scalar::from_bytes(&2.5f32.to_le_bytes());
        let pre = reduction_args(&Reduction::lower(
            RedOp::PreMulSum(ScalarSource::Immediate(s)),
            2,
        ));
        assert_eq!(pre.flags, ARGS_PRE_SCALE);
        assert_eq!(pre.pre_scale_bytes, u64::from(2.5f32.to_bits()));
        let dev = reduction_args(&Reduction::lower(
            RedOp::PreMulSum(ScalarSource::Device(0x1000)),
            2,
        ));
        assert_eq!((dev.flags, dev.pre_scale_ptr), (ARGS_PRE_SCALE_PTR, 0x1000));
    }

    #[test]
    fn serialisation_matches_the_c_layout() {
        let st = DevStep {
            count: 0x0102030405060708,
            tag: 9,
            src_off: 10,
            dst_off: 11,
            recv_peer: -1,
            send_peer: 5,
            src_buf: 0x0203,
            dst_buf: 4,
            flags: 0x3f,
            zc: 0x81,
            peer_bufs: 0x10,
            pair: 0,
            peer_src_off: 12,
            peer_dst_off: 0x0a0b,
        };
        let b = st.to_bytes();
        assert_eq!(&b[0..8], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(&b[32..36], &[0xff; 4]);
        assert_eq!(&b[36..40], &[5, 0, 0, 0]);
        assert_eq!(&b[40..42], &[3, 2]);
        assert_eq!(b[44], 0x3f);
        assert_eq!(&b[45..48], &[0x81, 0x10, 0]);
        assert_eq!(b[48], 12);
        assert_eq!(&b[56..58], &[0x0b, 0x0a]);

        let args = LaunchArgs {
            channels: 1,
            abort_flag: 2,
            epoch: 3,
            nchannels: 4,
            post_div: 5,
            dtype: 6,
            redop: 7,
            flags: 8,
            ..LaunchArgs::default()
        };
        let b = args.to_bytes();
        assert_eq!(b[0], 1);
        assert_eq!(b[64], 2);
        assert_eq!(b[80], 3);
        assert_eq!(b[88], 4);
        assert_eq!(b[104], 5);
        assert_eq!(&b[108..112], &[6, 7, 8, 0]);

        let ch = DevChannel {
            steps: 0xaa,
            nsteps: 3,
            fifo: 9,
        };
        assert_eq!(
            ch.to_bytes(),
            [0xaa, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 9, 0, 0, 0]
        );
        let conn = DevConn {
            buff: 1,
            head: 2,
            tail: 3,
            slot_bytes: 4,
            nslots: 5,
            pad: 0,
            tail_mirror: 6,
            head_seen: 7,
            ll_buff: 8,
            ll_head: 9,
            ll_pos: 10,
            ll_head_seen: 11,
            ll_slot_bytes: 12,
            ll_nslots: 13,
            sizes: 14,
        };
        let cb = conn.to_bytes();
        let at = [0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 92, 96];
        assert_eq!(
            at.map(|i| cb[i]),
            [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
        );
        assert_eq!(concat_bytes(&[st, st], DevStep::to_bytes).len(), 128);
    }
}
