// One-shot AllReduce, AllGather and ReduceScatter for small messages (OxcclOneShotParams).
//
// A plan-interpreting launch pays about 1.35 us before its first step and 0.4-0.5 us of
// instructions per step (docs/perf/h200x2.md, "Launch cost"); a small collective is nothing
// but that. Here each thread owns up to OXCCL_ONE_SHOT_MAX_ITERS 8-byte packets of every
// per-peer message (packet k belongs to block (k / THREADS) % MAX_BLOCKS, round k / (THREADS *
// MAX_BLOCKS)):
// - it first stores all of them as LL packets {data, flag} straight into each peer's inbox
//   (one store over the link each, no fence, no counter);
// - then it polls its own inbox for the peers' packets of the same indices, combines them
//   with its own in rank order (so every rank computes bit-identical results), and stores the
//   output.
//
// Epochs instead of FIFO positions: block b of every launch handles the same packet indices,
// and epochs[b] counts the launches block b ran (the same on every rank, since every rank makes
// the same calls). The flag of a launch is derived from that count and its parity picks the
// inbox half, so nothing is ever cleared and graph replays stay consistent. A half is reused
// two launches later; by then this rank has received the peer's packets of the launch in
// between, which the peer sent only after its launch before had read everything. In place is
// safe: a thread reads its own input element before writing the output element of the same
// index, and peers read only the inbox.
#pragma once

#include "copy_reduce.cuh"

namespace oxccl {

// Reads the pre-scale scalar of a one-shot launch.
template <class E>
OXCCL_DEVICE typename E::Bits one_shot_scale(const OxcclOneShotParams& p) {
  typedef typename E::Bits T;
  union {
    uint64_t u;
    T t;
  } c;
  c.u = p.pre_scale_bytes;  // little-endian: the element is in the low bytes
  if (p.flags & OXCCL_ARGS_PRE_SCALE_PTR) c.t = *reinterpret_cast<const T*>(p.pre_scale_ptr);
  return c.t;
}

// Polls an inbox packet until it carries `flag`; false when the communicator aborted first.
OXCCL_DEVICE bool one_shot_wait(const char* packet, uint32_t flag,
                                const volatile uint32_t* abort_flag, uint64_t* data) {
  uint32_t spins = 0;
  while (!oxccl_ll_try_load(packet, flag, data)) {
    if (++spins == OXCCL_LL_ABORT_POLL_INTERVAL) {
      spins = 0;
      if (abort_flag != nullptr && oxccl_load_relaxed_sys(abort_flag) != 0) return false;
    }
  }
  return true;
}

// One launch's per-thread context.
template <class E>
struct OneShot {
  typedef typename E::Bits T;
  static constexpr uint32_t kPer = 8 / sizeof(T);  // elements per packet

  const OxcclOneShotParams& p;
  uint32_t flag;
  uint64_t region;  // byte offset of this block's half in every inbox, sender 0
  uint32_t round;   // which of this thread's packets
  uint64_t at;      // its first element in a per-peer message
  uint32_t m;       // its elements (kPer, or fewer in the last packet)
  T scale;
  bool pre;

  // Moves to this thread's packet of round `i`; false when the message has no such packet.
  OXCCL_DEVICE bool select(uint32_t i) {
    round = i;
    const uint64_t k = ((uint64_t)i * OXCCL_ONE_SHOT_MAX_BLOCKS + blockIdx.x) * OXCCL_ONE_SHOT_THREADS +
                       threadIdx.x;
    at = k * kPer;
    if (at >= p.count) return false;
    m = p.count - at < kPer ? (uint32_t)(p.count - at) : kPer;
    return true;
  }

  // Where sender `from`'s packet of this thread's round lies in `inbox`.
  OXCCL_DEVICE char* slot(char* inbox, uint32_t from) const {
    const uint64_t packet =
        ((uint64_t)from * OXCCL_ONE_SHOT_MAX_ITERS + round) * OXCCL_ONE_SHOT_THREADS + threadIdx.x;
    return inbox + region + packet * 16;
  }

  // The packet of elements [at, at + m) of `v`, pre-scaled when the reduction asks for it.
  OXCCL_DEVICE uint64_t own(const T* v) const {
    PacketElems<T> a;
    a.u = load_packet(v + at, m);
    if (pre) {
#pragma unroll
      for (uint32_t e = 0; e < kPer; ++e) a.e[e] = Arith<E>::prod(a.e[e], scale);
    }
    return a.u;
  }

  OXCCL_DEVICE void send(uint32_t to, uint64_t data) const {
    oxccl_ll_store(slot(p.inbox[to], p.rank), data, flag);
  }

  OXCCL_DEVICE bool recv(uint32_t from, uint64_t* data) const {
    return one_shot_wait(slot(p.inbox[p.rank], from), flag, p.abort_flag, data);
  }

  // Combines every rank's packet in rank order (`mine` is this rank's), post-divides, stores
  // the result at `out + at`. False on abort.
  OXCCL_DEVICE bool reduce_into(T* out, uint64_t mine) const {
    StepMath<T> plain;
    plain.pre = plain.pre_r = plain.post = false;
    PacketElems<T> acc, v;
    for (uint32_t q = 0; q < p.nranks; ++q) {
      if (q == p.rank) {
        v.u = mine;
      } else if (!recv(q, &v.u)) {
        return false;
      }
      if (q == 0) {
        acc.u = v.u;
        continue;
      }
#pragma unroll
      for (uint32_t e = 0; e < kPer; ++e) {
        acc.e[e] = element_rt<E>(p.redop, true, acc.e[e], true, v.e[e], plain);
      }
    }
    if (p.post_div > 1) {
#pragma unroll
      for (uint32_t e = 0; e < kPer; ++e) acc.e[e] = Arith<E>::div(acc.e[e], p.post_div);
    }
    store_packet(out + at, acc.u, m);
    return true;
  }

  // Phase 1 of the selected packet: send it to every peer (AllGather: and keep our own block).
  OXCCL_DEVICE void push() const {
    const T* in = reinterpret_cast<const T*>(p.send);
    if (p.kind == OXCCL_ONE_SHOT_REDUCE_SCATTER) {
      for (uint32_t q = 0; q < p.nranks; ++q) {
        if (q != p.rank) send(q, own(in + (uint64_t)q * p.count));
      }
      return;
    }
    const uint64_t mine =
        p.kind == OXCCL_ONE_SHOT_ALL_GATHER ? load_packet(in + at, m) : own(in);
    for (uint32_t q = 0; q < p.nranks; ++q) {
      if (q != p.rank) send(q, mine);
    }
    if (p.kind == OXCCL_ONE_SHOT_ALL_GATHER) {
      store_packet(reinterpret_cast<T*>(p.recv) + (uint64_t)p.rank * p.count + at, mine, m);
    }
  }

  // Phase 2: receive the peers' packets and store the result. False on abort.
  OXCCL_DEVICE bool finish() const {
    const T* in = reinterpret_cast<const T*>(p.send);
    T* out = reinterpret_cast<T*>(p.recv);
    switch (p.kind) {
      case OXCCL_ONE_SHOT_ALL_GATHER:
        for (uint32_t q = 0; q < p.nranks; ++q) {
          if (q == p.rank) continue;
          uint64_t v;
          if (!recv(q, &v)) return false;
          store_packet(out + (uint64_t)q * p.count + at, v, m);
        }
        return true;
      case OXCCL_ONE_SHOT_REDUCE_SCATTER:
        return reduce_into(out, own(in + (uint64_t)p.rank * p.count));
      default:
        return reduce_into(out, own(in));
    }
  }
};

template <class E>
OXCCL_DEVICE void one_shot(const OxcclOneShotParams& p) {
  const uint32_t b = blockIdx.x;
  const uint64_t launches = p.epochs[b];
  const uint64_t half = launches & 1;
  OneShot<E> s{p,
               ll_flag(launches),
               (half * OXCCL_ONE_SHOT_MAX_BLOCKS + b) * p.nranks * OXCCL_ONE_SHOT_MAX_ITERS *
                   OXCCL_ONE_SHOT_THREADS * 16,
               0,
               0,
               0,
               one_shot_scale<E>(p),
               (p.flags & (OXCCL_ARGS_PRE_SCALE | OXCCL_ARGS_PRE_SCALE_PTR)) != 0};
  // Every packet goes out before the first wait, so the link carries them all at once.
  for (uint32_t i = 0; i < OXCCL_ONE_SHOT_MAX_ITERS && s.select(i); ++i) s.push();
  bool ok = true;
  for (uint32_t i = 0; ok && i < OXCCL_ONE_SHOT_MAX_ITERS && s.select(i); ++i) ok = s.finish();
  // Every thread has read the epoch before it moves. An aborted launch leaves it: its
  // communicator is unusable anyway.
  oxccl_block_sync();
  if (threadIdx.x == 0 && ok) p.epochs[b] = launches + 1;
}

}  // namespace oxccl

#define OXCCL_ONE_SHOT_ENTRY(NAME, ELEM)                                          \
  extern "C" __global__ void OXCCL_LAUNCH_BOUNDS(OXCCL_ONE_SHOT_THREADS)          \
      NAME(const OXCCL_GRID_CONSTANT OxcclOneShotParams params) {                 \
    oxccl::one_shot<oxccl::ELEM>(params);                                         \
  }
