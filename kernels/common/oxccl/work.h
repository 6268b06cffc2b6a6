// Device mirror of the work description (core/src/plan/work.rs), as the kernels read it.
//
// The Rust mirror is kernels/abi/src/work.rs; it asserts the same sizes and alignments, so
// a field change that is made on one side only fails to compile. Keep the two in step.
#pragma once

#include <stdint.h>

// OxcclDevStep::flags.
#define OXCCL_STEP_HAS_SRC 0x01u  // combine/copy the local operand at src_buf + src_off
#define OXCCL_STEP_HAS_DST 0x02u  // store the value at dst_buf + dst_off
#define OXCCL_STEP_PRE_OP 0x04u   // src is this rank's own input: apply the pre-scale
#define OXCCL_STEP_POST_OP 0x08u  // the value is final: apply the post-division
#define OXCCL_STEP_RECV_SELF 0x10u  // recv_peer is a loopback message index, not a rank
#define OXCCL_STEP_SEND_SELF 0x20u  // send_peer is a loopback message index, not a rank
#define OXCCL_STEP_LL 0x40u         // messages to/from other ranks use the LL packet FIFOs
#define OXCCL_STEP_SWAP 0x80u  // zero copy: the peer's operand to dst, the local one to the peer
// OxcclDevStep::pair: run only when this rank's or send_peer's AlltoAll is in place (its input is
// its output), or only when neither's is.
#define OXCCL_PAIR_IN_PLACE 1u
#define OXCCL_PAIR_APART 2u

// OxcclDevStep::zc: zero-copy plans (core/src/plan/zero_copy.rs). Ranks exchange buffer tables
// {input, output, exposed} as LL messages, then read and write each other's buffers directly.
#define OXCCL_ZC_DIRECT_RECV 0x01u  // operand: recv_peer's published buffer (peer_bufs & 15) + peer_src_off
#define OXCCL_ZC_DIRECT_SEND 0x02u  // destination: send_peer's published buffer (peer_bufs >> 4) + peer_dst_off
#define OXCCL_ZC_PRE_RECV 0x04u     // that operand is the peer's own contribution: pre-scale it
#define OXCCL_ZC_FENCE 0x08u        // make the block's earlier writes visible system-wide first
#define OXCCL_ZC_PUBLISH 0x10u      // the source is this rank's buffer table
#define OXCCL_ZC_LEARN 0x20u        // the received message is recv_peer's buffer table
#define OXCCL_ZC_ONLY 0x40u         // run only if every rank published usable buffers
#define OXCCL_ZC_FALLBACK 0x80u     // run only if some rank did not
// Bytes of a published table: input address, output address, exposed flag.
#define OXCCL_ZC_TABLE_BYTES 24

// OxcclLaunchArgs::redop.
#define OXCCL_OP_SUM 0u
#define OXCCL_OP_PROD 1u
#define OXCCL_OP_MAX 2u
#define OXCCL_OP_MIN 3u

// OxcclLaunchArgs::flags.
#define OXCCL_ARGS_PRE_SCALE 0x01u      // pre_scale_bytes holds the scalar (ncclScalarHostImmediate)
#define OXCCL_ARGS_PRE_SCALE_PTR 0x02u  // pre_scale_ptr points to it (ncclScalarDevice)
#define OXCCL_ARGS_EXPOSED 0x04u        // peers may read/write buffers[0] and [1] (zero copy)

// One primitive: v = recv(peer) (+) pre(src); v = post(v); dst = v; send(peer, v).
// Offsets are in elements of the operation's type. A peer of -1 means "no receive"/"no send".
struct OxcclDevStep {
  uint64_t count;
  uint64_t tag;  // carried for debugging; messages on a connection are matched in order
  uint64_t src_off;
  uint64_t dst_off;
  int32_t recv_peer;
  int32_t send_peer;
  uint16_t src_buf;  // index into OxcclLaunchArgs::buffers
  uint16_t dst_buf;
  uint8_t flags;
  uint8_t zc;         // OXCCL_ZC_*
  uint8_t peer_bufs;  // published buffer (0 input, 1 output) read (low nibble) / written (high)
  uint8_t pair;       // 0 or OXCCL_PAIR_*
  uint64_t peer_src_off;  // OXCCL_ZC_DIRECT_RECV
  uint64_t peer_dst_off;  // OXCCL_ZC_DIRECT_SEND
};

// The steps of one channel; one thread block runs one channel. Its steps to and from other
// ranks use the FIFOs of channel index `fifo` (send_conns/recv_conns row), the same index at
// both ends of a message.
struct OxcclDevChannel {
  const struct OxcclDevStep* steps;
  uint32_t nsteps;
  uint32_t fifo;
};

// A one-way FIFO of the Simple protocol between this rank and a peer, as seen from one side.
// buff holds nslots slots of slot_bytes bytes and lives on the receiver. head counts slots the
// receiver has freed, tail counts slots the sender has filled; both only grow, across launches,
// and each is written by one side only, so each side finds its position by reading its own counter.
// A message of n elements occupies ceil(n / (slot_bytes / elem_size)) consecutive slots.
struct OxcclConn {
  char* buff;
  volatile uint64_t* head;
  volatile uint64_t* tail;
  uint64_t slot_bytes;
  uint32_t nslots;
  uint32_t pad;
  // Send side, optional (null: unused), both in the sender's own memory: a copy of `tail`, so
  // the sender finds its position without a read across the link, and the last `head` it saw,
  // so it reads the receiver's counter only when the FIFO may really be full.
  volatile uint64_t* tail_mirror;
  volatile uint64_t* head_seen;
  // The LL (packet) FIFO of the same pair, used by steps with OXCCL_STEP_LL: ll_nslots slots
  // of ll_slot_bytes bytes of 16-byte packets {data 4 B, flag, data 4 B, flag} on the receiver,
  // so a packet carries 8 bytes of data and proves its own arrival (no fence, no tail counter).
  // ll_head counts slots the receiver has consumed (receiver memory). ll_pos counts slots this
  // side has used: on the send side a sender-local counter, on the receive side ll_head itself.
  // ll_head_seen (send side) caches the last ll_head read across the link.
  char* ll_buff;
  volatile uint64_t* ll_head;
  volatile uint64_t* ll_pos;
  volatile uint64_t* ll_head_seen;
  uint32_t ll_slot_bytes;
  uint32_t ll_nslots;
  // Send side of a NET connection (null otherwise): per-slot byte counts in host memory, written
  // before `tail` moves, so the network proxy sends only the bytes a slot holds. The LL slots'
  // records follow at sizes[nslots]: ((position + 1) << 32) | packet bytes, written once the
  // slot's packets are (the proxy checks their flags too).
  volatile uint64_t* sizes;
};

// Everything one launch needs, at the start of its argument block (kernels/abi/src/args_block.rs). The block is
// position independent: `channels`, `buffers`, `loopback_offs` and each channel's `steps` hold
// byte offsets from the block's start, which the kernel turns into addresses.
struct OxcclLaunchArgs {
  const struct OxcclDevChannel* channels;  // [nchannels]
  char* const* buffers;                    // [nbuffers], indexed by BufId
  const struct OxcclConn* send_conns;      // [nchannels * nranks], channel-major; unused: zeroed
  const struct OxcclConn* recv_conns;      // same shape
  char* loopback;                          // staging for messages a rank sends to itself
  const uint64_t* loopback_offs;           // [loopback messages], byte offset of each in loopback
  uint64_t* loopback_flags;                // [loopback messages], >= epoch once the message is in
  const void* pre_scale_ptr;               // device scalar (OXCCL_ARGS_PRE_SCALE_PTR)
  const volatile uint32_t* abort_flag;     // non-zero: every wait gives up and the kernel exits
  uint64_t pre_scale_bytes;                // immediate scalar, little-endian element bytes
  uint64_t epoch;                          // non-zero, larger for every launch sharing the flags
  uint32_t nchannels;
  uint32_t nranks;
  uint32_t rank;
  uint32_t nbuffers;
  uint32_t post_div;  // divisor for OXCCL_STEP_POST_OP; 0 or 1: none
  uint8_t dtype;      // ncclDataType_t, for debugging: the entry point fixes the type
  uint8_t redop;      // OXCCL_OP_*
  uint8_t flags;      // OXCCL_ARGS_*
  uint8_t pad;
};

// One-shot small collectives (kernels/common/one_shot.cuh): every rank pushes its packets straight
// into each peer's inbox and reduces what arrives, with no plan to interpret. Block b of every
// launch handles the same packets of a per-peer message (up to OXCCL_ONE_SHOT_MAX_ITERS per
// thread) and keeps its own epoch, so each inbox region has one writer per peer and alternates
// between two halves on the epoch's parity.
#define OXCCL_ONE_SHOT_MAX_RANKS 8
#define OXCCL_ONE_SHOT_THREADS 256
#define OXCCL_ONE_SHOT_MAX_BLOCKS 32
#define OXCCL_ONE_SHOT_MAX_ITERS 4
// The Simple variant: blocks of 512 threads, each copying a slice of every per-peer message and
// raising one flag per peer; per-peer messages up to 2 MiB.
#define OXCCL_ONE_SHOT_SIMPLE_THREADS 512
#define OXCCL_ONE_SHOT_SIMPLE_MAX_BLOCKS 128
#define OXCCL_ONE_SHOT_SIMPLE_BYTES (2ull << 20)
// OxcclOneShotParams::kind.
#define OXCCL_ONE_SHOT_ALL_REDUCE 0u
#define OXCCL_ONE_SHOT_ALL_GATHER 1u
#define OXCCL_ONE_SHOT_REDUCE_SCATTER 2u
#define OXCCL_ONE_SHOT_ALL_TO_ALL 3u

// The one-shot kernels' only parameter. count is the elements of one per-peer message: the
// whole vector (AllReduce), the send count (AllGather), the receive count (ReduceScatter) or the
// per-rank block (AlltoAll).
// inbox[p] is rank p's one-shot area as mapped in this process (inbox[rank]: our own): the LL
// inbox (2 halves x OXCCL_ONE_SHOT_MAX_BLOCKS x nranks senders x OXCCL_ONE_SHOT_MAX_ITERS x
// OXCCL_ONE_SHOT_THREADS 16-byte packets), the Simple flags (nranks senders x
// OXCCL_ONE_SHOT_SIMPLE_MAX_BLOCKS u64, padded to 4 KiB), the Simple data (2 halves x nranks
// senders x OXCCL_ONE_SHOT_SIMPLE_BYTES). epochs holds the LL path's per-block epochs, then the
// Simple path's epoch and its count of finished blocks.
struct OxcclOneShotParams {
  const void* send;
  void* recv;
  char* inbox[OXCCL_ONE_SHOT_MAX_RANKS];
  uint64_t* epochs;                     // [OXCCL_ONE_SHOT_MAX_BLOCKS + 2], this rank's
  const volatile uint32_t* abort_flag;  // non-zero: waits give up
  const void* pre_scale_ptr;            // device scalar (OXCCL_ARGS_PRE_SCALE_PTR)
  uint64_t pre_scale_bytes;             // immediate scalar (OXCCL_ARGS_PRE_SCALE)
  uint64_t count;
  uint32_t rank;
  uint32_t nranks;
  uint32_t post_div;  // 0 or 1: none
  uint8_t kind;       // OXCCL_ONE_SHOT_*
  uint8_t redop;      // OXCCL_OP_*
  uint8_t flags;      // OXCCL_ARGS_PRE_SCALE*
  uint8_t simple;     // 1: the Simple variant, 2: two-shot AllReduce, else LL
};

// Bytes of argument block a launch may carry inline in its parameters (args_block.rs has the
// same numbers). HIP always passes the block by address: taking the address of a large by-value
// kernel argument may copy it per thread there, and CUDA's __grid_constant__ has no HIP twin.
// nvcc builds with HIP's launch ABI too when OXCCL_HIP_LAUNCH_ABI is defined: the HIP backend
// then runs these kernels on an NVIDIA GPU through tests/hip-on-cuda (docs/hip.md), passing the
// same 32-byte parameters it passes on AMD.
#if defined(__HIPCC__) || defined(__HIP_PLATFORM_AMD__) || defined(__HIP__) || \
    defined(OXCCL_HIP_LAUNCH_ABI)
#define OXCCL_INLINE_ARGS_BYTES 16
#else
#define OXCCL_INLINE_ARGS_BYTES 4000
// Blocks too large for that go to the `_large` entry points, whose parameters carry this many
// bytes inline (CUDA 12.1+ accepts kernel parameters up to 32764 bytes on Volta and newer):
// copying a block to device memory before an eager kernel costs a copy-engine round trip.
#define OXCCL_LARGE_INLINE_ARGS_BYTES 16000
// And blocks of small launches go to the `_small` entry points, whose parameters are 1 KiB:
// the parameter struct's whole size travels with every launch. Blocks between 4000 and 8000
// bytes (a send/receive of 32 channels, an AlltoAll of 96 steps) take the `_medium` ones: the
// driver copies the whole parameter struct at every launch, 16 KB for a `_large` one.
#define OXCCL_SMALL_INLINE_ARGS_BYTES 1008
#define OXCCL_MEDIUM_INLINE_ARGS_BYTES 8000
#endif

// The kernels' only parameter: the argument block inline, or (indirect != 0) its address.
struct OxcclKernelParams {
  const char* indirect;
  uint64_t pad;
  unsigned char block[OXCCL_INLINE_ARGS_BYTES];
};

#ifdef OXCCL_LARGE_INLINE_ARGS_BYTES
// The `_large`, `_small` and `_medium` entry points' parameters: always inline.
struct OxcclKernelParamsLarge {
  const char* indirect;  // unused (null)
  uint64_t pad;
  unsigned char block[OXCCL_LARGE_INLINE_ARGS_BYTES];
};
struct OxcclKernelParamsSmall {
  const char* indirect;  // unused (null)
  uint64_t pad;
  unsigned char block[OXCCL_SMALL_INLINE_ARGS_BYTES];
};
struct OxcclKernelParamsMedium {
  const char* indirect;  // unused (null)
  uint64_t pad;
  unsigned char block[OXCCL_MEDIUM_INLINE_ARGS_BYTES];
};
#endif

#ifdef __cplusplus
#include <stddef.h>
// The Rust mirror asserts the same numbers with size_of/align_of/offset_of.
#define OXCCL_AT(T, F, N) static_assert(offsetof(T, F) == N, #T "." #F " offset is shared with Rust")
OXCCL_AT(OxcclDevChannel, nsteps, 8);
OXCCL_AT(OxcclDevChannel, fifo, 12);
OXCCL_AT(OxcclDevStep, count, 0);
OXCCL_AT(OxcclDevStep, tag, 8);
OXCCL_AT(OxcclDevStep, src_off, 16);
OXCCL_AT(OxcclDevStep, dst_off, 24);
OXCCL_AT(OxcclDevStep, recv_peer, 32);
OXCCL_AT(OxcclDevStep, send_peer, 36);
OXCCL_AT(OxcclDevStep, src_buf, 40);
OXCCL_AT(OxcclDevStep, dst_buf, 42);
OXCCL_AT(OxcclDevStep, flags, 44);
OXCCL_AT(OxcclDevStep, zc, 45);
OXCCL_AT(OxcclDevStep, peer_bufs, 46);
OXCCL_AT(OxcclDevStep, peer_src_off, 48);
OXCCL_AT(OxcclDevStep, peer_dst_off, 56);
OXCCL_AT(OxcclDevChannel, steps, 0);
OXCCL_AT(OxcclDevChannel, nsteps, 8);
OXCCL_AT(OxcclConn, buff, 0);
OXCCL_AT(OxcclConn, head, 8);
OXCCL_AT(OxcclConn, tail, 16);
OXCCL_AT(OxcclConn, slot_bytes, 24);
OXCCL_AT(OxcclConn, nslots, 32);
OXCCL_AT(OxcclConn, tail_mirror, 40);
OXCCL_AT(OxcclConn, head_seen, 48);
OXCCL_AT(OxcclConn, ll_buff, 56);
OXCCL_AT(OxcclConn, ll_head, 64);
OXCCL_AT(OxcclConn, ll_pos, 72);
OXCCL_AT(OxcclConn, ll_head_seen, 80);
OXCCL_AT(OxcclConn, ll_slot_bytes, 88);
OXCCL_AT(OxcclConn, ll_nslots, 92);
OXCCL_AT(OxcclConn, sizes, 96);
OXCCL_AT(OxcclLaunchArgs, channels, 0);
OXCCL_AT(OxcclLaunchArgs, buffers, 8);
OXCCL_AT(OxcclLaunchArgs, send_conns, 16);
OXCCL_AT(OxcclLaunchArgs, recv_conns, 24);
OXCCL_AT(OxcclLaunchArgs, loopback, 32);
OXCCL_AT(OxcclLaunchArgs, loopback_offs, 40);
OXCCL_AT(OxcclLaunchArgs, loopback_flags, 48);
OXCCL_AT(OxcclLaunchArgs, pre_scale_ptr, 56);
OXCCL_AT(OxcclLaunchArgs, abort_flag, 64);
OXCCL_AT(OxcclLaunchArgs, pre_scale_bytes, 72);
OXCCL_AT(OxcclLaunchArgs, epoch, 80);
OXCCL_AT(OxcclLaunchArgs, nchannels, 88);
OXCCL_AT(OxcclLaunchArgs, nranks, 92);
OXCCL_AT(OxcclLaunchArgs, rank, 96);
OXCCL_AT(OxcclLaunchArgs, nbuffers, 100);
OXCCL_AT(OxcclLaunchArgs, post_div, 104);
OXCCL_AT(OxcclLaunchArgs, dtype, 108);
OXCCL_AT(OxcclLaunchArgs, redop, 109);
OXCCL_AT(OxcclLaunchArgs, flags, 110);
OXCCL_AT(OxcclOneShotParams, send, 0);
OXCCL_AT(OxcclOneShotParams, recv, 8);
OXCCL_AT(OxcclOneShotParams, inbox, 16);
OXCCL_AT(OxcclOneShotParams, epochs, 80);
OXCCL_AT(OxcclOneShotParams, abort_flag, 88);
OXCCL_AT(OxcclOneShotParams, pre_scale_ptr, 96);
OXCCL_AT(OxcclOneShotParams, pre_scale_bytes, 104);
OXCCL_AT(OxcclOneShotParams, count, 112);
OXCCL_AT(OxcclOneShotParams, rank, 120);
OXCCL_AT(OxcclOneShotParams, nranks, 124);
OXCCL_AT(OxcclOneShotParams, post_div, 128);
OXCCL_AT(OxcclOneShotParams, kind, 132);
OXCCL_AT(OxcclOneShotParams, redop, 133);
OXCCL_AT(OxcclOneShotParams, flags, 134);
OXCCL_AT(OxcclOneShotParams, simple, 135);
#undef OXCCL_AT
static_assert(sizeof(OxcclDevStep) == 64, "OxcclDevStep layout is shared with Rust");
static_assert(alignof(OxcclDevStep) == 8, "OxcclDevStep layout is shared with Rust");
static_assert(sizeof(OxcclDevChannel) == 16, "OxcclDevChannel layout is shared with Rust");
static_assert(sizeof(OxcclConn) == 104, "OxcclConn layout is shared with Rust");
static_assert(sizeof(OxcclLaunchArgs) == 112, "OxcclLaunchArgs layout is shared with Rust");
static_assert(alignof(OxcclLaunchArgs) == 8, "OxcclLaunchArgs layout is shared with Rust");
static_assert(sizeof(OxcclOneShotParams) == 136, "OxcclOneShotParams layout is shared with Rust");
static_assert(offsetof(OxcclKernelParams, block) == 16, "params header is shared with Rust");
#ifdef OXCCL_LARGE_INLINE_ARGS_BYTES
static_assert(offsetof(OxcclKernelParamsLarge, block) == 16, "params header is shared with Rust");
static_assert(offsetof(OxcclKernelParamsSmall, block) == 16, "params header is shared with Rust");
static_assert(offsetof(OxcclKernelParamsMedium, block) == 16, "params header is shared with Rust");
#endif
#endif
