// One-shot AllReduce, AllGather, ReduceScatter and AlltoAll for small messages
// (OxcclOneShotParams).
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
// safe: a thread reads its input elements (every round's) before writing the output elements of
// the same indices, and peers read only the inbox.
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
    if (++spins == OXCCL_ABORT_POLL_INTERVAL) {
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

  // Phase 1 of the selected packet: send it to every peer (AllGather, AlltoAll: and keep our
  // own block).
  OXCCL_DEVICE void push() const {
    const T* in = reinterpret_cast<const T*>(p.send);
    if (p.kind == OXCCL_ONE_SHOT_REDUCE_SCATTER) {
      for (uint32_t q = 0; q < p.nranks; ++q) {
        if (q != p.rank) send(q, own(in + (uint64_t)q * p.count));
      }
      return;
    }
    if (p.kind == OXCCL_ONE_SHOT_ALL_TO_ALL) {
      for (uint32_t q = 0; q < p.nranks; ++q) {
        if (q != p.rank) send(q, load_packet(in + (uint64_t)q * p.count + at, m));
      }
      const uint64_t self = (uint64_t)p.rank * p.count + at;
      store_packet(reinterpret_cast<T*>(p.recv) + self, load_packet(in + self, m), m);
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
      case OXCCL_ONE_SHOT_ALL_TO_ALL:
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


// ---------------------------------------------------------------------------------------------
// Simple one-shot (`OxcclOneShotParams::simple`): for messages where LL's halved payload costs
// more than a flag's round trip. Every block copies its slice of each per-peer message into the
// peer's inbox with 16-byte stores, fences, and raises one flag per (sender, block) to the
// launch's epoch; the receiving block waits for the flags of its slice and combines from its
// own inbox. Slices depend on the message size, so the inbox half follows one epoch for the
// whole launch (the last block to finish moves it), not the LL path's per-block epochs.
//
// Flags only grow: launch g raises them to 2g + 2 (the two-shot variant below first to 2g + 1,
// after its first phase), so a wait for 2g + 1 or 2g + 2 never mistakes an older launch's flag
// of either variant for this one's.
// ---------------------------------------------------------------------------------------------

// Offsets inside a rank's one-shot area: the LL inbox, the Simple flags, the Simple data.
OXCCL_DEVICE uint64_t one_shot_ll_bytes(uint32_t nranks) {
  return 2ull * OXCCL_ONE_SHOT_MAX_BLOCKS * nranks * OXCCL_ONE_SHOT_MAX_ITERS *
         OXCCL_ONE_SHOT_THREADS * 16;
}
OXCCL_DEVICE uint64_t one_shot_flags_bytes(uint32_t nranks) {
  return ((uint64_t)nranks * OXCCL_ONE_SHOT_SIMPLE_MAX_BLOCKS * 8 + 4095) / 4096 * 4096;
}

// Rank `sender`'s Simple flag of block `b` inside the area at `base`.
OXCCL_DEVICE volatile uint64_t* simple_flag(char* base, uint32_t nranks, uint32_t sender,
                                           uint32_t b) {
  return reinterpret_cast<volatile uint64_t*>(base + one_shot_ll_bytes(nranks)) +
         (uint64_t)sender * OXCCL_ONE_SHOT_SIMPLE_MAX_BLOCKS + b;
}

// Rank `sender`'s Simple data of inbox half `half` inside the area at `base`.
template <class T>
OXCCL_DEVICE T* simple_data(char* base, uint32_t nranks, uint64_t half, uint32_t sender) {
  return reinterpret_cast<T*>(base + one_shot_ll_bytes(nranks) + one_shot_flags_bytes(nranks) +
                              (half * nranks + sender) * OXCCL_ONE_SHOT_SIMPLE_BYTES);
}

// After every thread of block `b` has stored what its peers read: one system fence, by the
// thread that raises the flags, after the barrier that ordered every thread's stores before it
// (a system fence is cumulative, as NCCL's Simple protocol relies on; a fence in each of 512
// threads costs microseconds). Then raises this block's flag on every peer to `value` and waits
// until every peer's flag here reaches it. The closing barrier extends thread 0's acquires to
// every thread's reads after it. False when the communicator aborted first.
OXCCL_DEVICE bool simple_exchange_flags(const OxcclOneShotParams& p, uint32_t b, uint64_t value) {
  __shared__ int stop;
  const uint32_t me = p.rank, n = p.nranks;
  oxccl_block_sync();
  if (threadIdx.x == 0) {
    stop = 0;
    oxccl_fence_system();
    for (uint32_t q = 0; q < n; ++q) {
      if (q != me) oxccl_store_release_sys(simple_flag(p.inbox[q], n, me, b), value);
    }
    for (uint32_t q = 0; q < n && !stop; ++q) {
      if (q == me) continue;
      const volatile uint64_t* f = simple_flag(p.inbox[me], n, q, b);
      uint32_t spins = 0;
      while (oxccl_load_acquire_sys(f) < value) {
        if (++spins == OXCCL_ABORT_POLL_INTERVAL) {
          spins = 0;
          if (p.abort_flag != nullptr && oxccl_load_relaxed_sys(p.abort_flag) != 0) {
            stop = 1;
            break;
          }
        }
      }
    }
  }
  oxccl_block_sync();
  return stop == 0;
}

// The element math of a Simple or two-shot launch's copies: `plain` moves elements as they are,
// `push` pre-scales a rank's own operand where the reduction asks for it (`scales`: an
// operation that reduces).
template <class E>
struct SimpleMath {
  typedef typename E::Bits T;
  StepMath<T> plain, push;
  OXCCL_DEVICE SimpleMath(const OxcclOneShotParams& p, bool scales) {
    plain.pre = plain.pre_r = plain.post = false;
    plain.scale = T(0);
    plain.div = 1;
    push = plain;
    push.pre = scales && (p.flags & (OXCCL_ARGS_PRE_SCALE | OXCCL_ARGS_PRE_SCALE_PTR)) != 0;
    push.scale = one_shot_scale<E>(p);
  }
};

// The last block to finish a Simple or two-shot launch moves the epoch for the next launch;
// every block read it at its start.
OXCCL_DEVICE void simple_finish_launch(const OxcclOneShotParams& p, uint64_t g) {
  volatile uint64_t* epoch = p.epochs + OXCCL_ONE_SHOT_MAX_BLOCKS;
  unsigned int* finished = reinterpret_cast<unsigned int*>(p.epochs + OXCCL_ONE_SHOT_MAX_BLOCKS + 1);
  oxccl_block_sync();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(finished, 1u) == gridDim.x - 1) {
      *finished = 0;
      *epoch = g + 1;
    }
  }
}

// Combines every rank's operand at element `off` of its slot in our inbox half `half` into `dst`
// (`len` elements) in rank order, the reduction's post-division on the last step, so that every
// rank gets the same bits. At two ranks our own operand `own` (not yet pre-scaled) stands in for
// our slot, which was not written: two operands combine alike in either order.
template <class E>
OXCCL_DEVICE void simple_combine(const OxcclOneShotParams& p, const SimpleMath<E>& math,
                                 uint64_t half, uint64_t off, const typename E::Bits* own,
                                 typename E::Bits* dst, uint64_t len) {
  typedef typename E::Bits T;
  const uint32_t me = p.rank, n = p.nranks;
  if (n == 2) {
    StepMath<T> last = math.push;
    last.post = p.post_div > 1;
    last.div = p.post_div > 1 ? p.post_div : 1;
    reduce_copy<E>(p.redop, simple_data<T>(p.inbox[me], n, half, 1 - me) + off, own, dst, nullptr,
                   len, last);
    return;
  }
  for (uint32_t q = 1; q < n; ++q) {
    StepMath<T> m = math.plain;
    m.post = q == n - 1 && p.post_div > 1;
    m.div = m.post ? p.post_div : 1;
    const T* acc = q == 1 ? simple_data<T>(p.inbox[me], n, half, 0) + off : dst;
    reduce_copy<E>(p.redop, acc, simple_data<T>(p.inbox[me], n, half, q) + off, dst, nullptr, len,
                   m);
  }
}

template <class E>
OXCCL_DEVICE void one_shot_simple(const OxcclOneShotParams& p) {
  typedef typename E::Bits T;
  const uint64_t g = p.epochs[OXCCL_ONE_SHOT_MAX_BLOCKS];
  const uint64_t half = g & 1;
  const uint32_t nb = gridDim.x, b = blockIdx.x, me = p.rank, n = p.nranks;
  // This block's slice of every per-peer message, in whole 16-byte packs but the last.
  constexpr uint64_t kGrain = 16 / sizeof(T);
  const uint64_t per = ((p.count + nb - 1) / nb + kGrain - 1) / kGrain * kGrain;
  const uint64_t start = (uint64_t)b * per < p.count ? (uint64_t)b * per : p.count;
  const uint64_t len = p.count - start < per ? p.count - start : per;
  const T* in = reinterpret_cast<const T*>(p.send);
  T* out = reinterpret_cast<T*>(p.recv);
  const bool gather = p.kind == OXCCL_ONE_SHOT_ALL_GATHER;
  const bool all_to_all = p.kind == OXCCL_ONE_SHOT_ALL_TO_ALL;
  // Pure moves: each received slice lands in the output as it is.
  const bool moves = gather || all_to_all;
  // Each peer gets its own block of the input.
  const bool blocks = p.kind == OXCCL_ONE_SHOT_REDUCE_SCATTER || all_to_all;
  const SimpleMath<E> math(p, !moves);
  const StepMath<T>& push = math.push;
  const StepMath<T>& plain = math.plain;

  // Push: our slice for each peer (and, past two ranks, our own operand into our own inbox, so
  // the rank-ordered chain below never reads an input that an in-place output overwrote).
  const T* own_src = blocks ? in + (uint64_t)me * p.count : in;
  for (uint32_t q = 0; q < n; ++q) {
    if (q == me && (moves || n == 2)) continue;
    const T* from = blocks ? in + (uint64_t)q * p.count : in;
    T* to = simple_data<T>(p.inbox[q], n, half, me) + start;
    reduce_copy<E>(p.redop, nullptr, from + start, nullptr, to, len, push);
  }
  if (moves && out + (uint64_t)me * p.count != own_src) {
    reduce_copy<E>(p.redop, nullptr, own_src + start, out + (uint64_t)me * p.count + start, nullptr,
                   len, plain);
  }
  if (!simple_exchange_flags(p, b, 2 * g + 2)) return;

  if (moves) {
    for (uint32_t q = 0; q < n; ++q) {
      if (q == me) continue;
      reduce_copy<E>(p.redop, simple_data<T>(p.inbox[me], n, half, q) + start, nullptr,
                     out + (uint64_t)q * p.count + start, nullptr, len, plain);
    }
  } else {
    simple_combine<E>(p, math, half, start, own_src + start, out + start, len);
  }

  simple_finish_launch(p, g);
}

// ---------------------------------------------------------------------------------------------
// Two-shot AllReduce (`OxcclOneShotParams::simple == 2`): past two ranks, the Simple variant
// sends the whole vector to every peer, n - 1 vectors over each rank's links. Here rank q owns
// the q-th of n parts: every rank first sends each owner its part (as the Simple variant does,
// into the owner's inbox), each owner reduces its part in rank order, stores it, and sends the
// result to every peer's inbox (the second half of the sender's slot there), from which the
// peers copy it out: 2 (n - 1) / n of a vector over each rank's links, and every rank holds the
// same bits. Block b handles the b-th slice of every part; its flags are raised to 2g + 1 after
// the first phase and 2g + 2 after the second.
// ---------------------------------------------------------------------------------------------

template <class E>
OXCCL_DEVICE void two_shot_all_reduce(const OxcclOneShotParams& p) {
  typedef typename E::Bits T;
  const uint64_t g = p.epochs[OXCCL_ONE_SHOT_MAX_BLOCKS];
  const uint64_t half = g & 1;
  const uint32_t nb = gridDim.x, b = blockIdx.x, me = p.rank, n = p.nranks;
  constexpr uint64_t kGrain = 16 / sizeof(T);
  // Where a sender's results start in its slot of an inbox half, in elements.
  constexpr uint64_t kResults = OXCCL_ONE_SHOT_SIMPLE_BYTES / 2 / sizeof(T);
  // Elements of a part (the last may be shorter), and of a block's slice of one.
  const uint64_t part = ((p.count + n - 1) / n + kGrain - 1) / kGrain * kGrain;
  const uint64_t per = ((part + nb - 1) / nb + kGrain - 1) / kGrain * kGrain;
  // This block's slice of rank q's part: its first element in the vector, its offset in the
  // part (and in an inbox slot), its length.
  struct Slice {
    uint64_t first, off, len;
  };
  const auto slice = [&](uint32_t q) {
    const uint64_t lo = (uint64_t)q * part < p.count ? (uint64_t)q * part : p.count;
    const uint64_t hi = p.count - lo < part ? p.count : lo + part;
    const uint64_t s = hi - lo < (uint64_t)b * per ? hi : lo + (uint64_t)b * per;
    const uint64_t e = hi - s < per ? hi : s + per;
    return Slice{s, s - lo, e - s};
  };
  const T* in = reinterpret_cast<const T*>(p.send);
  T* out = reinterpret_cast<T*>(p.recv);
  const SimpleMath<E> math(p, true);
  const StepMath<T>& push = math.push;
  const StepMath<T>& plain = math.plain;

  // Each owner's part of our input (past two ranks ours too, into our own inbox, so that the
  // rank-ordered chain below never reads an input an in-place output overwrote).
  for (uint32_t q = 0; q < n; ++q) {
    if (q == me && n == 2) continue;
    const Slice s = slice(q);
    reduce_copy<E>(p.redop, nullptr, in + s.first, nullptr,
                   simple_data<T>(p.inbox[q], n, half, me) + s.off, s.len, push);
  }
  if (!simple_exchange_flags(p, b, 2 * g + 1)) return;

  const Slice mine = slice(me);
  T* result = out + mine.first;
  simple_combine<E>(p, math, half, mine.off, in + mine.first, result, mine.len);
  // Threads copy elements other threads reduced.
  oxccl_block_sync();
  for (uint32_t q = 0; q < n; ++q) {
    if (q == me) continue;
    reduce_copy<E>(p.redop, nullptr, result, nullptr,
                   simple_data<T>(p.inbox[q], n, half, me) + kResults + mine.off, mine.len, plain);
  }
  if (!simple_exchange_flags(p, b, 2 * g + 2)) return;

  for (uint32_t q = 0; q < n; ++q) {
    if (q == me) continue;
    const Slice s = slice(q);
    reduce_copy<E>(p.redop, simple_data<T>(p.inbox[me], n, half, q) + kResults + s.off, nullptr,
                   out + s.first, nullptr, s.len, plain);
  }
  simple_finish_launch(p, g);
}

}  // namespace oxccl

#define OXCCL_ONE_SHOT_ENTRY(NAME, ELEM)                                          \
  extern "C" __global__ void OXCCL_LAUNCH_BOUNDS(OXCCL_ONE_SHOT_SIMPLE_THREADS)   \
      NAME(const OXCCL_GRID_CONSTANT OxcclOneShotParams params) {                 \
    oxccl_grid_dependency_wait();                                                 \
    if (params.simple == 2) {                                                     \
      oxccl::two_shot_all_reduce<oxccl::ELEM>(params);                            \
    } else if (params.simple) {                                                   \
      oxccl::one_shot_simple<oxccl::ELEM>(params);                                \
    } else {                                                                      \
      oxccl::one_shot<oxccl::ELEM>(params);                                       \
    }                                                                             \
  }
