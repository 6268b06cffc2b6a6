// The argument block of one launch, built the same way by both GPU backends (this crate, like
// `work.rs` and `fifo.rs`), and the kernel parameters that carry it.
//
// The block is position independent: its channel table, buffer table and loopback offsets are
// stored as byte offsets from the block's start (`OxcclLaunchArgs` in work.h), so the same bytes
// work inline in the kernel parameters (small launches: no copy before the kernel) or in device
// memory (large ones: the parameters then hold its address).

use super::{DevChannel, DevStep, EncodedWork, LaunchArgs};

/// Bytes of argument block the CUDA kernels accept inline (`OXCCL_INLINE_ARGS_BYTES` of work.h
/// for nvcc); the whole parameter struct stays under the classic 4 KiB limit.
pub const CUDA_INLINE_ARGS_BYTES: usize = 4000;
/// Bytes the CUDA `_large` entry points accept inline (`OXCCL_LARGE_INLINE_ARGS_BYTES`).
pub const CUDA_LARGE_INLINE_ARGS_BYTES: usize = 16000;
/// Bytes the CUDA `_small` entry points accept inline (`OXCCL_SMALL_INLINE_ARGS_BYTES`).
pub const CUDA_SMALL_INLINE_ARGS_BYTES: usize = 1008;
/// Bytes the CUDA `_medium` entry points accept inline (`OXCCL_MEDIUM_INLINE_ARGS_BYTES`).
pub const CUDA_MEDIUM_INLINE_ARGS_BYTES: usize = 8000;
/// The same for HIP, whose launches always pass the block by address (`OXCCL_INLINE_ARGS_BYTES`
/// of work.h for hipcc).
pub const HIP_INLINE_ARGS_BYTES: usize = 16;
/// Bytes before the inline block in the kernel parameters: the indirect address and padding.
pub const PARAMS_HEADER_BYTES: usize = 16;

/// Bytes of one step in the block.
const STEP: usize = size_of::<DevStep>();

/// Where each part of an argument block sits: args | channels | steps | buffers | loopback
/// offsets, each 16-byte aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArgsLayout {
    /// Offset of the `DevChannel` table.
    pub channels: usize,
    /// Offset of the steps.
    pub steps: usize,
    /// Offset of the buffer table.
    pub buffers: usize,
    /// Offset of the loopback message offsets.
    pub loopback_offs: usize,
    /// Bytes of the whole block.
    pub total: usize,
}

impl ArgsLayout {
    /// The layout for a launch of `nch` channels, `nsteps` steps, `nbuffers` buffer table
    /// entries and `nloopback` loopback messages.
    pub fn new(nch: usize, nsteps: usize, nbuffers: usize, nloopback: usize) -> ArgsLayout {
        let a16 = |x: usize| x.next_multiple_of(16);
        let channels = a16(size_of::<LaunchArgs>());
        let steps = channels + a16(nch * size_of::<DevChannel>());
        let buffers = steps + a16(nsteps * STEP);
        let loopback_offs = buffers + a16(nbuffers * 8);
        let total = loopback_offs + a16(nloopback * 8);
        ArgsLayout {
            channels,
            steps,
            buffers,
            loopback_offs,
            total,
        }
    }

    /// The block: `args` (its `channels`, `buffers` and `loopback_offs` are set here, as
    /// offsets), the channels with their steps' offsets, the buffer table and loopback offsets.
    pub fn image(&self, args: &LaunchArgs, enc: &EncodedWork, table: &[u64]) -> Vec<u8> {
        let mut bytes = vec![0u8; self.total];
        self.write(&mut bytes, args, enc, table);
        bytes
    }

    /// Writes [`ArgsLayout::image`]'s bytes into `bytes` (`total` zeroed bytes).
    pub fn write(&self, bytes: &mut [u8], args: &LaunchArgs, enc: &EncodedWork, table: &[u64]) {
        self.refresh(bytes, args, table);
        for (c, r) in enc.channels.iter().enumerate() {
            let ch = DevChannel {
                steps: (self.steps + r.start * STEP) as u64,
                nsteps: r.len() as u32,
                fifo: enc.fifos[c],
            };
            let at = self.channels + c * size_of::<DevChannel>();
            bytes[at..at + size_of::<DevChannel>()].copy_from_slice(&ch.to_bytes());
        }
        let steps = &mut bytes[self.steps..self.steps + enc.steps.len() * STEP];
        for (at, step) in steps.chunks_exact_mut(STEP).zip(&enc.steps) {
            step.write_to(at.try_into().expect("chunks of one step"));
        }
        for (i, o) in enc.loopback_offsets.iter().enumerate() {
            let at = self.loopback_offs + i * 8;
            bytes[at..at + 8].copy_from_slice(&o.to_le_bytes());
        }
    }

    /// Rewrites the parts of a written block that differ between launches of one plan: the
    /// launch arguments and the buffer table.
    pub fn refresh(&self, bytes: &mut [u8], args: &LaunchArgs, table: &[u64]) {
        assert_eq!(bytes.len(), self.total, "an argument block's room");
        let args = LaunchArgs {
            channels: self.channels as u64,
            buffers: self.buffers as u64,
            loopback_offs: self.loopback_offs as u64,
            nbuffers: table.len() as u32,
            ..*args
        };
        bytes[..size_of::<LaunchArgs>()].copy_from_slice(&args.to_bytes());
        for (i, b) in table.iter().enumerate() {
            let at = self.buffers + i * 8;
            bytes[at..at + 8].copy_from_slice(&b.to_le_bytes());
        }
    }
}

/// The kernel parameters (`OxcclKernelParams` of work.h, `inline_cap` bytes of inline block)
/// with `layout`'s block for `args`, `enc` and `table` written inline (it must fit).
pub fn inline_params(
    inline_cap: usize,
    layout: &ArgsLayout,
    args: &LaunchArgs,
    enc: &EncodedWork,
    table: &[u64],
) -> Vec<u8> {
    assert!(
        layout.total <= inline_cap,
        "argument block too large to pass inline"
    );
    let mut p = vec![0u8; PARAMS_HEADER_BYTES + inline_cap];
    layout.write(
        &mut p[PARAMS_HEADER_BYTES..PARAMS_HEADER_BYTES + layout.total],
        args,
        enc,
        table,
    );
    p
}

/// The kernel parameters (`OxcclKernelParams` of work.h, `inline_cap` bytes of inline block)
/// carrying the device address `indirect` of the block instead.
pub fn indirect_params(inline_cap: usize, indirect: u64) -> Vec<u8> {
    let mut p = vec![0u8; PARAMS_HEADER_BYTES + inline_cap];
    p[..8].copy_from_slice(&indirect.to_le_bytes());
    p
}

#[cfg(test)]
mod args_block_tests {
    use super::*;

    #[test]
    fn layout_orders_and_aligns_the_parts() {
        let l = ArgsLayout::new(3, 7, 5, 2);
        assert!(l.channels >= size_of::<LaunchArgs>());
        assert!(l.steps >= l.channels + 3 * size_of::<DevChannel>());
        assert!(l.buffers >= l.steps + 7 * STEP);
        assert!(l.loopback_offs >= l.buffers + 5 * 8);
        assert!(l.total >= l.loopback_offs + 2 * 8);
        for o in [l.channels, l.steps, l.buffers, l.loopback_offs, l.total] {
            assert_eq!(o % 16, 0);
        }
        let empty = ArgsLayout::new(0, 0, 0, 0);
        assert_eq!(empty.total, size_of::<LaunchArgs>().next_multiple_of(16));
    }

    /// Every part of the block lands at its offset, each step as `DevStep::to_bytes` lays it
    /// out, and nothing else is written.
    #[test]
    fn the_block_holds_every_part_at_its_offset() {
        let step = |i: u64| DevStep {
            count: 1000 + i,
            tag: 7 * i,
            src_off: 11 * i,
            dst_off: 13 * i,
            recv_peer: i as i32 - 1,
            send_peer: i as i32 + 1,
            src_buf: 2,
            dst_buf: 1,
            flags: 0x5a,
            zc: 3,
            peer_bufs: 0x10,
            pair: 0,
            peer_src_off: u64::MAX - i,
            peer_dst_off: 1 << 40 | i,
        };
        let enc = EncodedWork {
            steps: (0..5).map(step).collect(),
            channels: vec![0..2, 2..5],
            fifos: vec![4, 9],
            loopback_offsets: vec![0, 256],
            loopback_bytes: 512,
        };
        let table = [0x1000u64, 0x2000, 0x3000];
        let l = ArgsLayout::new(2, 5, table.len(), 2);
        let img = l.image(&LaunchArgs::default(), &enc, &table);
        assert_eq!(img.len(), l.total);
        for (i, st) in enc.steps.iter().enumerate() {
            let at = &img[l.steps + i * STEP..][..STEP];
            assert_eq!(at, &st.to_bytes()[..], "step {i}");
            let field = |off: usize, n: usize| &at[off..off + n];
            assert_eq!(
                field(0, 8),
                &(1000 + i as u64).to_le_bytes(),
                "step {i}'s count"
            );
            let dst = std::mem::offset_of!(DevStep, peer_dst_off);
            assert_eq!(field(dst, 8), &(1u64 << 40 | i as u64).to_le_bytes());
            assert_eq!(field(std::mem::offset_of!(DevStep, flags), 1), &[0x5a]);
        }
        let ch1 = DevChannel {
            steps: (l.steps + 2 * STEP) as u64,
            nsteps: 3,
            fifo: 9,
        };
        let at = l.channels + size_of::<DevChannel>();
        assert_eq!(&img[at..][..size_of::<DevChannel>()], &ch1.to_bytes()[..]);
        assert_eq!(&img[l.buffers + 8..][..8], &0x2000u64.to_le_bytes());
        assert_eq!(&img[l.loopback_offs + 8..][..8], &256u64.to_le_bytes());
        // The gap between the last step and the buffer table stays zero.
        assert!(img[l.steps + 5 * STEP..l.buffers].iter().all(|&b| b == 0));
    }

    #[test]
    fn inline_params_are_the_image_in_the_parameters() {
        let enc = EncodedWork {
            steps: vec![
                DevStep {
                    count: 9,
                    ..DevStep::default()
                };
                2
            ],
            channels: vec![0..1, 1..2],
            fifos: vec![3, 4],
            loopback_offsets: vec![],
            loopback_bytes: 0,
        };
        let l = ArgsLayout::new(2, 2, 2, 0);
        let args = LaunchArgs {
            epoch: 5,
            ..LaunchArgs::default()
        };
        let img = l.image(&args, &enc, &[1, 2]);
        let p = inline_params(1008, &l, &args, &enc, &[1, 2]);
        assert_eq!(p.len(), PARAMS_HEADER_BYTES + 1008);
        assert_eq!(&p[..8], &[0u8; 8], "no indirect address");
        assert_eq!(&p[PARAMS_HEADER_BYTES..][..img.len()], &img[..]);
        assert!(p[PARAMS_HEADER_BYTES + img.len()..].iter().all(|&b| b == 0));
    }

    /// Refreshing a block for another launch of its plan gives the block that launch would
    /// have written from scratch.
    #[test]
    fn a_refreshed_block_is_the_next_launchs_image() {
        let enc = EncodedWork {
            steps: vec![
                DevStep {
                    count: 3,
                    ..DevStep::default()
                };
                3
            ],
            channels: vec![0..1, 1..3],
            fifos: vec![0, 1],
            loopback_offsets: vec![0],
            loopback_bytes: 16,
        };
        let l = ArgsLayout::new(2, 3, 4, 1);
        let first = LaunchArgs {
            epoch: 1,
            loopback: 0x10,
            ..LaunchArgs::default()
        };
        let next = LaunchArgs {
            epoch: 2,
            loopback: 0x20,
            ..first
        };
        let mut img = l.image(&first, &enc, &[1, 2, 3, 4]);
        l.refresh(&mut img, &next, &[5, 6, 7, 8]);
        assert_eq!(img, l.image(&next, &enc, &[5, 6, 7, 8]));
    }

    #[test]
    fn params_carry_the_block_address() {
        let indirect = indirect_params(16, 0xabcd_0000);
        assert_eq!(&indirect[..8], &0xabcd_0000u64.to_le_bytes());
        assert_eq!(indirect.len(), PARAMS_HEADER_BYTES + 16);
    }
}
