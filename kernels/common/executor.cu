// Kernel entry points: one per data type, each interpreting a launch's work description.
//
// Grid: one thread block per channel (gridDim.x == nchannels), any block size up to
// OXCCL_MAX_THREADS. A block runs its channel's steps in order; each step is the generic
// recv-reduce-copy-send primitive over:
// - no peer: a local copy/reduce from src to dst;
// - this rank (RECV_SELF/SEND_SELF): a staging area in `loopback`, one message per index, with a
//   ready flag per message so a receive in one channel may wait for a send in another;
// - another rank: an OxcclConn FIFO of the channel's `fifo` index (a send/receive plan may run
//   a FIFO's sends and its receives in different blocks), split into slot-sized chunks: Simple (copy, fence, publish
//   a counter) or, for steps with OXCCL_STEP_LL, LL (flagged 16-byte packets, no fence).
// - a peer's published buffer (zero-copy plans, OXCCL_ZC_DIRECT_*): read or written directly,
//   at the address the peer sent in its buffer table at the plan's start.
// Every wait polls the abort flag, so an aborted communicator never leaves a kernel spinning.
// Built with -DOXCCL_PROFILE, thread 0 of block 0 stores the SM clock at numbered points of each
// launch in oxccl_profile_marks (read with cuModuleGetGlobal); kernels/tests/gpu_exec_test.cu
// prints where a launch's time goes. Compiled out otherwise.
#ifdef OXCCL_PROFILE
__device__ unsigned long long oxccl_profile_marks[64];
#define OXCCL_MARK(i)                                                                    \
  do {                                                                                   \
    if (threadIdx.x == 0 && blockIdx.x == 0 && (i) < 64) oxccl_profile_marks[i] = clock64(); \
  } while (0)
#else
#define OXCCL_MARK(i) \
  do {                \
  } while (0)
#endif

#include "copy_reduce.cuh"

#ifndef OXCCL_MAX_THREADS
#define OXCCL_MAX_THREADS 512
#endif

// The abort word lives in mapped host memory, and every read of it crosses the bus that also
// carries the launches, argument copies and pushbuffer fetches of every GPU on the host. A
// waiting thread reads it once per this many polls (milliseconds, as NCCL's every 10000 spins):
// polled more often, thousands of waiting blocks on four GPUs slowed one another's launches by
// tens of microseconds. LL waits run in every thread of every channel at once and look at the
// block's shared flag in between.
#define OXCCL_ABORT_POLL_INTERVAL 8192
#define OXCCL_LL_SHARED_POLL_INTERVAL 256

// Most ranks a zero-copy plan may span: their buffer tables live in shared memory
// (oxccl_core::plan::zero_copy::MAX_RANKS).
#define OXCCL_ZC_MAX_RANKS 64

namespace oxccl {

// One block's view of a zero-copy plan, in shared memory.
struct ZcState {
  uint64_t own[3];                        // this rank's table: input, output, exposed
  uint64_t tables[OXCCL_ZC_MAX_RANKS][3];  // the peers' tables, as learned
  int branch;                             // -1 undecided, 1 zero copy, 0 fallback
};

// One thread spins until *ctr >= target or the communicator aborts (then sets *shared_abort);
// returns the last value read.
OXCCL_DEVICE uint64_t spin_geq(const volatile uint64_t* ctr, uint64_t target,
                               const OxcclLaunchArgs& args, int* shared_abort) {
  uint32_t spins = 0;
  uint64_t v;
  while ((v = oxccl_load_acquire_sys(ctr)) < target) {
    if (++spins == OXCCL_ABORT_POLL_INTERVAL) {
      spins = 0;
      if (args.abort_flag != nullptr && oxccl_load_relaxed_sys(args.abort_flag) != 0) {
        *shared_abort = 1;
        break;
      }
    }
  }
  return v;
}

// Thread 0 waits until *ctr >= target, every thread learns whether the wait ended by abort.
// Must be called by the whole block (it contains a barrier).
OXCCL_DEVICE bool block_wait_geq(const volatile uint64_t* ctr, uint64_t target,
                                 const OxcclLaunchArgs& args, int* shared_abort) {
  if (threadIdx.x == 0) spin_geq(ctr, target, args, shared_abort);
  // The barrier also extends thread 0's acquire to the data the other threads read next.
  oxccl_block_sync();
  return *shared_abort == 0;
}

// Thread 0 publishes `value` after every thread's writes of this chunk. Whole block. The
// barrier makes the block's writes observed by thread 0, and its system fence is cumulative, so
// one fence orders them all before the counter; a fence in every thread made each of them wait
// for its own stores to cross the link.
OXCCL_DEVICE void block_publish(volatile uint64_t* ctr, uint64_t value) {
  oxccl_block_sync();
  if (threadIdx.x == 0) {
    oxccl_fence_system();
    oxccl_store_release_sys(ctr, value);
  }
}

// Thread 0 reads a counter only this block writes, and shares it. Whole block.
OXCCL_DEVICE uint64_t block_read_own(const volatile uint64_t* ctr, uint64_t* shared_slot) {
  if (threadIdx.x == 0) *shared_slot = *ctr;
  oxccl_block_sync();
  const uint64_t v = *shared_slot;
  // Nobody may overwrite the slot while a slower thread still reads it.
  oxccl_block_sync();
  return v;
}

// Waits until a send FIFO has freed slot position `target` (*head >= target). With a
// sender-local `head_seen`, the receiver's counter is read across the link only when the last
// value seen there is too small, and the new value is remembered. Whole block.
OXCCL_DEVICE bool block_wait_space(const volatile uint64_t* head, volatile uint64_t* head_seen,
                                   uint64_t target, const OxcclLaunchArgs& args, int* shared_abort) {
  if (head_seen == nullptr) return block_wait_geq(head, target, args, shared_abort);
  if (threadIdx.x == 0 && *head_seen < target) {
    const uint64_t h = spin_geq(head, target, args, shared_abort);
    if (*shared_abort == 0) *head_seen = h;
  }
  oxccl_block_sync();
  return *shared_abort == 0;
}

// ---------------------------------------------------------------------------------------------
// LL: a slot of ll_slot_bytes holds ll_slot_bytes / 16 packets of 8 data bytes each. The flag of
// slot position p is ll_flag(p), so a slot's previous contents (position p - nslots) never look
// valid. The sender writes packets without fence or counter; the receiver polls each packet,
// then returns the slot by advancing ll_head, which the sender reads only when it would
// overwrite a slot not yet returned.
// ---------------------------------------------------------------------------------------------

// Packets that carry `n` elements, `per` to a packet.
OXCCL_DEVICE uint64_t npackets_of(uint64_t n, uint32_t per) { return (n + per - 1) / per; }

// Flag of LL slot position `pos`: 1 to 2^32-1, never the 0 of fresh memory.
OXCCL_DEVICE uint32_t ll_flag(uint64_t pos) { return (uint32_t)(pos % 0xffffffffull) + 1u; }

// Elements of one packet's 8 bytes, as bits or as values.
template <class T>
union PacketElems {
  uint64_t u;
  T e[8 / sizeof(T)];
};

// The first `n` elements at `p` (at most one packet's worth), the rest zero.
template <class T>
OXCCL_DEVICE uint64_t load_packet(const T* p, uint32_t n) {
  constexpr uint32_t kPer = 8 / sizeof(T);
  if (n == kPer && ((uintptr_t)p & 7u) == 0) return *reinterpret_cast<const uint64_t*>(p);
  PacketElems<T> v;
  v.u = 0;
  for (uint32_t k = 0; k < n; ++k) v.e[k] = p[k];
  return v.u;
}

// Stores the first `n` elements of a packet's data at `p`.
template <class T>
OXCCL_DEVICE void store_packet(T* p, uint64_t bits, uint32_t n) {
  constexpr uint32_t kPer = 8 / sizeof(T);
  if (n == kPer && ((uintptr_t)p & 7u) == 0) {
    *reinterpret_cast<uint64_t*>(p) = bits;
    return;
  }
  PacketElems<T> v;
  v.u = bits;
  for (uint32_t k = 0; k < n; ++k) p[k] = v.e[k];
}

// Polls a packet until it carries `flag`; false when the communicator aborted first (seen
// here or by another thread of the block, which raises *shared_abort).
OXCCL_DEVICE bool ll_wait(const char* packet, uint32_t flag, const OxcclLaunchArgs& args,
                          uint64_t* data, volatile int* shared_abort) {
  uint32_t spins = 0;
  while (!oxccl_ll_try_load(packet, flag, data)) {
    ++spins;
    if (spins % OXCCL_LL_SHARED_POLL_INTERVAL == 0 && *shared_abort != 0) return false;
    if (spins == OXCCL_ABORT_POLL_INTERVAL) {
      spins = 0;
      if (args.abort_flag != nullptr && oxccl_load_relaxed_sys(args.abort_flag) != 0) {
        *shared_abort = 1;
        return false;
      }
    }
  }
  return true;
}

// The element function with the combiner chosen at run time: LL moves few bytes per thread, so
// one switch per packet costs nothing next to the link's latency, and one loop serves all ops.
template <class E>
OXCCL_DEVICE typename E::Bits element_rt(unsigned op, bool have_r, typename E::Bits r, bool have_s,
                                         typename E::Bits s,
                                         const StepMath<typename E::Bits>& m) {
  switch (op) {
    case OXCCL_OP_SUM:
      return element<E, OXCCL_OP_SUM>(have_r, r, have_s, s, m);
    case OXCCL_OP_PROD:
      return element<E, OXCCL_OP_PROD>(have_r, r, have_s, s, m);
    case OXCCL_OP_MAX:
      return element<E, OXCCL_OP_MAX>(have_r, r, have_s, s, m);
    default:
      return element<E, OXCCL_OP_MIN>(have_r, r, have_s, s, m);
  }
}

// One step flagged OXCCL_STEP_LL (see run_step for the primitive). Returns false on abort.
//
// Small messages are all prologue, so it is kept short: the connections' fields are read once
// into registers (through the structs, every store of the step would force a reload), and
// thread 0 reads both positions with independent loads before the one barrier that shares them
// through shared_pos[0] (receive) and [1] (send).
template <class E>
OXCCL_DEVICE bool run_step_ll(const OxcclLaunchArgs& args, const OxcclDevStep& st,
                              const StepMath<typename E::Bits>& math,
                              const typename E::Bits* src, typename E::Bits* dst, uint32_t fifo,
                              int* shared_abort, uint64_t* shared_pos) {
  typedef typename E::Bits T;
  constexpr uint32_t kPer = 8 / sizeof(T);  // elements per packet
  const uint32_t flags = st.flags;
  const uint64_t count = st.count;

  const T* rcv_whole = nullptr;
  const OxcclConn* rconn = nullptr;
  if (st.recv_peer >= 0) {
    if (flags & OXCCL_STEP_RECV_SELF) {
      const uint32_t msg = (uint32_t)st.recv_peer;
      if (!block_wait_geq(&args.loopback_flags[msg], args.epoch, args, shared_abort)) return false;
      rcv_whole = reinterpret_cast<const T*>(args.loopback + args.loopback_offs[msg]);
    } else {
      rconn = &args.recv_conns[(uint64_t)fifo * args.nranks + (uint32_t)st.recv_peer];
    }
  }
  T* snd_whole = nullptr;
  const OxcclConn* sconn = nullptr;
  if (st.send_peer >= 0) {
    if (flags & OXCCL_STEP_SEND_SELF) {
      snd_whole = reinterpret_cast<T*>(args.loopback + args.loopback_offs[(uint32_t)st.send_peer]);
    } else {
      sconn = &args.send_conns[(uint64_t)fifo * args.nranks + (uint32_t)st.send_peer];
    }
  }
  // Every LL FIFO of a communicator has the same geometry (checked at connect).
  const OxcclConn* geom = rconn ? rconn : sconn;
  const uint32_t slot_bytes = geom->ll_slot_bytes;
  const uint32_t nslots = geom->ll_nslots;
  const char* r_buff = rconn ? rconn->ll_buff : nullptr;
  volatile uint64_t* r_head = rconn ? rconn->ll_head : nullptr;
  char* s_buff = sconn ? sconn->ll_buff : nullptr;
  const volatile uint64_t* s_head = sconn ? sconn->ll_head : nullptr;
  volatile uint64_t* s_head_seen = sconn ? sconn->ll_head_seen : nullptr;
  volatile uint64_t* s_pos_at = sconn ? sconn->ll_pos : nullptr;
  // NET: the proxy learns of a filled LL slot from its record (OxcclConn::sizes).
  volatile uint64_t* s_records = (sconn && sconn->sizes) ? sconn->sizes + sconn->nslots : nullptr;
  // The receiver's position is its ll_head, or, where ll_head is in host memory (SHM, NET), a
  // device-local copy that saves a read across PCIe at every step.
  volatile uint64_t* r_pos_at = rconn ? rconn->ll_pos : nullptr;
  if (threadIdx.x == 0) {
    // Only this block moves these counters, so they are read without ordering.
    const uint64_t r = r_pos_at ? *r_pos_at : 0;
    const uint64_t t = s_pos_at ? *s_pos_at : 0;
    shared_pos[0] = r;
    shared_pos[1] = t;
  }
  oxccl_block_sync();
  uint64_t r_pos = shared_pos[0], s_pos = shared_pos[1];
  const uint64_t slot_elems = (uint64_t)(slot_bytes / 2) / sizeof(T);
  const bool have_r = rconn != nullptr || rcv_whole != nullptr;

  bool aborted = false;  // this thread saw the abort flag
  for (uint64_t done = 0; done < count;) {
    const uint64_t n = count - done < slot_elems ? count - done : slot_elems;
    if (sconn && s_pos + 1 > nslots &&
        !block_wait_space(s_head, s_head_seen, s_pos + 1 - nslots, args, shared_abort)) {
      return false;
    }
    const char* rslot = r_buff ? r_buff + (r_pos % nslots) * slot_bytes : nullptr;
    char* sslot = s_buff ? s_buff + (s_pos % nslots) * slot_bytes : nullptr;
    const uint32_t rflag = ll_flag(r_pos), sflag = ll_flag(s_pos);
    const uint64_t npackets = npackets_of(n, kPer);
    for (uint64_t k = threadIdx.x; k < npackets; k += blockDim.x) {
      const uint64_t at = done + k * kPer;
      const uint32_t m = count - at < kPer ? (uint32_t)(count - at) : kPer;
      PacketElems<T> a, b;
      a.u = 0;
      if (rslot) {
        if (!aborted) aborted = !ll_wait(rslot + k * 16, rflag, args, &a.u, shared_abort);
      } else if (rcv_whole) {
        a.u = load_packet(rcv_whole + at, m);
      }
      b.u = src ? load_packet(src + at, m) : 0;
#pragma unroll
      for (uint32_t e = 0; e < kPer; ++e) {
        a.e[e] = element_rt<E>(args.redop, have_r, a.e[e], src != nullptr, b.e[e], math);
      }
      if (dst) store_packet(dst + at, a.u, m);
      if (snd_whole) store_packet(snd_whole + at, a.u, m);
      if (sslot) oxccl_ll_store(sslot + k * 16, a.u, sflag);
    }
    // Every thread has read the slot before it is returned; everyone learns of an abort.
    oxccl_block_sync();
    if (*shared_abort != 0) return false;
    if (rconn) {
      // The barrier ordered every read of the slot before this store; nothing else needs to be
      // visible with it, so it skips the system-scope release (a fence over the link).
      if (threadIdx.x == 0) oxccl_store_relaxed_sys(r_head, r_pos + 1);
      ++r_pos;
    }
    if (s_records != nullptr && threadIdx.x == 0) {
      // After the barrier every packet of the slot is written, in whatever order they reach
      // host memory: the proxy checks their flags as well, so no fence is needed.
      s_records[s_pos % nslots] = ((s_pos + 1) << 32) | (npackets_of(n, kPer) * 16);
    }
    if (sconn) ++s_pos;
    done += n;
  }
  if (sconn && threadIdx.x == 0) *s_pos_at = s_pos;
  if (rconn && threadIdx.x == 0 && r_pos_at != r_head) *r_pos_at = r_pos;
  if (snd_whole) block_publish(&args.loopback_flags[(uint32_t)st.send_peer], args.epoch);
  // The next step may read what this one wrote (dst, loopback) with other threads; and no
  // thread may still read shared_pos when the next step's thread 0 writes it.
  oxccl_block_sync();
  return true;
}

// Returns false when the block must stop (abort).
// Address of published buffer `buf` (0 input, 1 output) of rank `peer`, from its table.
template <class T>
OXCCL_DEVICE T* published(const OxcclLaunchArgs& args, const ZcState& zs, int32_t peer,
                          uint32_t buf) {
  const uint64_t base =
      (uint32_t)peer == args.rank ? (uint64_t)args.buffers[buf] : zs.tables[peer][buf];
  return reinterpret_cast<T*>(base);
}

// A step that reads and/or writes the peers' buffers directly (no FIFO). Whole block.
template <class E>
OXCCL_DEVICE void run_step_direct(const OxcclLaunchArgs& args, const OxcclDevStep& st,
                                  const StepMath<typename E::Bits>& math, const ZcState& zs,
                                  const typename E::Bits* src, typename E::Bits* dst) {
  typedef typename E::Bits T;
  const T* rcv = nullptr;
  T* snd = nullptr;
  if (st.zc & OXCCL_ZC_DIRECT_RECV) {
    rcv = published<T>(args, zs, st.recv_peer, st.peer_bufs & 15u) + st.peer_src_off;
  }
  if (st.zc & OXCCL_ZC_DIRECT_SEND) {
    snd = published<T>(args, zs, st.send_peer, st.peer_bufs >> 4) + st.peer_dst_off;
  }
  if (st.flags & OXCCL_STEP_SWAP) {
    swap_copy(rcv, src, dst, snd, st.count);
  } else {
    reduce_copy<E>(args.redop, rcv, src, dst, snd, st.count, math);
  }
  // The next step may read what this one wrote with other threads.
  oxccl_block_sync();
}

template <class E>
OXCCL_DEVICE bool run_step(const OxcclLaunchArgs& args, const OxcclDevStep& st,
                           const StepMath<typename E::Bits>& math_in, ZcState& zs,
                           uint32_t fifo, int* shared_abort, uint64_t* shared_slot) {
  typedef typename E::Bits T;
  const uint64_t count = st.count;
  const uint32_t flags = st.flags;
  OXCCL_MARK(41);
  const bool has_value =
      st.recv_peer >= 0 || (flags & OXCCL_STEP_HAS_SRC) || (st.zc & OXCCL_ZC_PUBLISH);
  if (count == 0 || !has_value) return true;

  StepMath<T> math = math_in;
  math.pre = (flags & OXCCL_STEP_PRE_OP) && math_in.pre;
  math.pre_r = (st.zc & OXCCL_ZC_PRE_RECV) && math_in.pre;
  math.post = (flags & OXCCL_STEP_POST_OP) && math_in.post;

  const T* src = (flags & OXCCL_STEP_HAS_SRC)
                     ? reinterpret_cast<const T*>(args.buffers[st.src_buf]) + st.src_off
                     : nullptr;
  T* dst = (flags & OXCCL_STEP_HAS_DST) ? reinterpret_cast<T*>(args.buffers[st.dst_buf]) + st.dst_off
                                        : nullptr;
  if (st.zc & OXCCL_ZC_PUBLISH) src = reinterpret_cast<const T*>(zs.own);
  if (st.zc & OXCCL_ZC_LEARN) dst = reinterpret_cast<T*>(zs.tables[st.recv_peer]);
  if (st.pair) {
    // Both ranks of the pair decide alike, from the same two tables.
    const bool own = args.buffers[0] == args.buffers[1];
    const bool theirs = zs.tables[st.send_peer][0] == zs.tables[st.send_peer][1];
    if ((own || theirs) != (st.pair == OXCCL_PAIR_IN_PLACE)) return true;
  }
  if (st.zc & (OXCCL_ZC_DIRECT_RECV | OXCCL_ZC_DIRECT_SEND)) {
    run_step_direct<E>(args, st, math, zs, src, dst);
    return true;
  }
  if (st.recv_peer < 0 && st.send_peer < 0) {
    // A local copy or scaling: none of the connection logic below, whose instructions a small
    // step would otherwise pay for one by one.
    reduce_copy<E>(args.redop, nullptr, src, dst, nullptr, count, math);
    oxccl_block_sync();
    return true;
  }
  const bool peer_recv = st.recv_peer >= 0 && !(flags & OXCCL_STEP_RECV_SELF);
  const bool peer_send = st.send_peer >= 0 && !(flags & OXCCL_STEP_SEND_SELF);
  if ((flags & OXCCL_STEP_LL) && (peer_recv || peer_send)) {
    return run_step_ll<E>(args, st, math, src, dst, fifo, shared_abort, shared_slot + 1);
  }

  const uint64_t kWhole = ~0ull;  // slot size of a side that is not chunked

  // Receive side.
  const T* rcv_whole = nullptr;  // contiguous source (loopback)
  const OxcclConn* rconn = nullptr;
  uint64_t r_slot = kWhole, r_pos = 0;
  if (st.recv_peer >= 0) {
    if (flags & OXCCL_STEP_RECV_SELF) {
      const uint32_t msg = (uint32_t)st.recv_peer;
      if (!block_wait_geq(&args.loopback_flags[msg], args.epoch, args, shared_abort)) return false;
      rcv_whole = reinterpret_cast<const T*>(args.loopback + args.loopback_offs[msg]);
    } else {
      rconn = &args.recv_conns[(uint64_t)fifo * args.nranks + (uint32_t)st.recv_peer];
      r_slot = rconn->slot_bytes / sizeof(T);
      r_pos = block_read_own(rconn->head, shared_slot);
    }
  }

  // Send side.
  T* snd_whole = nullptr;
  const OxcclConn* sconn = nullptr;
  uint64_t s_slot = kWhole, s_pos = 0;
  if (st.send_peer >= 0) {
    if (flags & OXCCL_STEP_SEND_SELF) {
      snd_whole = reinterpret_cast<T*>(args.loopback + args.loopback_offs[(uint32_t)st.send_peer]);
    } else {
      sconn = &args.send_conns[(uint64_t)fifo * args.nranks + (uint32_t)st.send_peer];
      s_slot = sconn->slot_bytes / sizeof(T);
      s_pos = block_read_own(sconn->tail_mirror != nullptr ? sconn->tail_mirror : sconn->tail,
                             shared_slot);
    }
  }

  OXCCL_MARK(42);
  uint64_t done = 0;
  while (done < count) {
    const uint64_t r_in = rconn ? done % r_slot : 0;
    const uint64_t s_in = sconn ? done % s_slot : 0;
    // Entering a new slot: wait until the peer filled it (recv) or freed it (send).
    if (rconn && r_in == 0 && !block_wait_geq(rconn->tail, r_pos + 1, args, shared_abort)) return false;
    if (sconn && s_in == 0 && s_pos + 1 > sconn->nslots &&
        !block_wait_space(sconn->head, sconn->head_seen, s_pos + 1 - sconn->nslots, args,
                          shared_abort)) {
      return false;
    }
    uint64_t n = count - done;
    if (rconn && r_slot - r_in < n) n = r_slot - r_in;
    if (sconn && s_slot - s_in < n) n = s_slot - s_in;

    const T* rcv = nullptr;
    if (rconn) {
      rcv = reinterpret_cast<const T*>(rconn->buff + (r_pos % rconn->nslots) * rconn->slot_bytes) + r_in;
    } else if (rcv_whole) {
      rcv = rcv_whole + done;
    }
    T* snd = nullptr;
    if (sconn) {
      snd = reinterpret_cast<T*>(sconn->buff + (s_pos % sconn->nslots) * sconn->slot_bytes) + s_in;
    } else if (snd_whole) {
      snd = snd_whole + done;
    }

    reduce_copy<E>(args.redop, rcv, src ? src + done : nullptr, dst ? dst + done : nullptr, snd, n,
                   math);
    OXCCL_MARK(40);
    done += n;

    if (rconn && (r_in + n == r_slot || done == count)) {
      // Every thread has consumed the slot before the sender may refill it.
      oxccl_block_sync();
      if (threadIdx.x == 0) oxccl_store_release_sys(rconn->head, r_pos + 1);
      ++r_pos;
    }
    if (sconn && (s_in + n == s_slot || done == count)) {
      // block_publish's fence orders this count before the tail, for the network proxy.
      if (threadIdx.x == 0 && sconn->sizes != nullptr) {
        sconn->sizes[s_pos % sconn->nslots] = (s_in + n) * sizeof(T);
      }
      block_publish(sconn->tail, s_pos + 1);
      if (threadIdx.x == 0 && sconn->tail_mirror != nullptr) *sconn->tail_mirror = s_pos + 1;
      ++s_pos;
    }
  }
  if (snd_whole) block_publish(&args.loopback_flags[(uint32_t)st.send_peer], args.epoch);
  // The next step may read what this one wrote (dst, loopback) with other threads.
  oxccl_block_sync();
  OXCCL_MARK(43);
  return true;
}

// Runs this block's channel of the argument block at `base` (in the kernel parameters or in
// device memory). Not inlined: the small and the large entry points of a type share one copy.
//
// `copy_bytes` (a multiple of 8, or 0) of the block are first copied to shared memory by all
// threads at once: the arguments, channel table, steps and buffer table of a small launch then
// cost one round of parallel loads instead of a chain of dependent ones.
template <class E>
__device__ __noinline__ void run_channel(const char* base, uint32_t copy_bytes) {
  __shared__ int shared_abort;
  // [0]: block_read_own's slot; [1], [2]: the LL steps' positions.
  __shared__ uint64_t shared_slot[3];
  __shared__ OxcclLaunchArgs shared_args;
  __shared__ ZcState zs;
  OXCCL_MARK(0);
#ifdef OXCCL_SMALL_INLINE_ARGS_BYTES
  __shared__ uint64_t shared_block[OXCCL_SMALL_INLINE_ARGS_BYTES / 8];
  if (copy_bytes != 0) {
    const uint64_t* from = reinterpret_cast<const uint64_t*>(base);
    for (uint32_t i = threadIdx.x; i < copy_bytes / 8; i += blockDim.x) shared_block[i] = from[i];
    oxccl_block_sync();
    base = reinterpret_cast<const char*>(shared_block);
  }
#endif
  // Offsets are added as integers (wrapping), so a block may also point at tables outside it.
  const uintptr_t b = reinterpret_cast<uintptr_t>(base);
  if (threadIdx.x == 0) {
    OxcclLaunchArgs a = *reinterpret_cast<const OxcclLaunchArgs*>(base);
    a.channels = reinterpret_cast<const OxcclDevChannel*>(b + (uintptr_t)a.channels);
    a.buffers = reinterpret_cast<char* const*>(b + (uintptr_t)a.buffers);
    a.loopback_offs = reinterpret_cast<const uint64_t*>(b + (uintptr_t)a.loopback_offs);
    shared_args = a;
    shared_abort = 0;
    if (a.nbuffers >= 2) {
      zs.own[0] = (uint64_t)a.buffers[0];
      zs.own[1] = (uint64_t)a.buffers[1];
    }
    zs.own[2] = (a.flags & OXCCL_ARGS_EXPOSED) ? 1 : 0;
    zs.branch = -1;
  }
  oxccl_block_sync();
  // Up to here only the launch's own argument block was read; from here on, memory an earlier
  // launch may still use (FIFO positions, buffers, the PreMulSum scalar).
  oxccl_grid_dependency_wait();
  OXCCL_MARK(1);
  const OxcclLaunchArgs& args = shared_args;
  if (blockIdx.x >= args.nchannels) return;

  StepMath<typename E::Bits> math;
  math.pre = (args.flags & (OXCCL_ARGS_PRE_SCALE | OXCCL_ARGS_PRE_SCALE_PTR)) != 0;
  math.pre_r = false;
  math.scale = math.pre ? load_pre_scale<E>(args) : typename E::Bits(0);
  math.post = args.post_div > 1;
  math.div = args.post_div > 1 ? args.post_div : 1;

  const OxcclDevChannel& ch = args.channels[blockIdx.x];
  const OxcclDevStep* steps = reinterpret_cast<const OxcclDevStep*>(b + (uintptr_t)ch.steps);
  OXCCL_MARK(2);
  for (uint32_t i = 0; i < ch.nsteps; ++i) {
    OXCCL_MARK(3 + 2 * i);
    // A copy in registers: read through the reference, every field would be reloaded after each
    // store the compiler cannot prove unrelated (the block is in shared memory or the parameters).
    const OxcclDevStep st = steps[i];
    if (st.zc & (OXCCL_ZC_ONLY | OXCCL_ZC_FALLBACK)) {
      // Every thread decides from the same tables; the steps that learned them ended with a
      // barrier. All ranks decide alike, so they all take the same branch.
      if (zs.branch < 0) {
        bool all = zs.own[2] != 0;
        for (uint32_t p = 0; p < args.nranks; ++p) {
          if (p != args.rank && zs.tables[p][2] == 0) all = false;
        }
        oxccl_block_sync();
        if (threadIdx.x == 0) zs.branch = all ? 1 : 0;
        oxccl_block_sync();
      }
      if ((zs.branch == 1) != ((st.zc & OXCCL_ZC_ONLY) != 0)) continue;
    }
    if (st.zc & OXCCL_ZC_FENCE) {
      // The peer that receives this step's message then reads or leaves memory this block
      // touched. One cumulative fence after the barrier, as in block_publish; the token's one
      // packet is thread 0's.
      oxccl_block_sync();
      if (threadIdx.x == 0) oxccl_fence_system();
      oxccl_block_sync();
    }
    if (!run_step<E>(args, st, math, zs, ch.fifo, &shared_abort, shared_slot)) return;
    OXCCL_MARK(4 + 2 * i);
  }
  OXCCL_MARK(30);
}

}  // namespace oxccl

#include "one_shot.cuh"

// The argument block: inline in the parameters, or in device memory when `indirect` is set.
// A block in device memory was copied there by an earlier operation of the stream, so it is
// read only after the dependency wait.
OXCCL_DEVICE const char* oxccl_args_base(const char* indirect, const char* inline_block) {
  if (indirect == nullptr) return inline_block;
  oxccl_grid_dependency_wait();
  return indirect;
}
#define OXCCL_ARGS_BASE(params) \
  oxccl_args_base((params).indirect, reinterpret_cast<const char*>((params).block))

// CUDA's entry points with 16000-byte (_large), 1008-byte (_small) and 8000-byte (_medium)
// parameters, around the same body; the transport picks the smallest that holds a launch's
// argument block.
#ifdef OXCCL_LARGE_INLINE_ARGS_BYTES
#define OXCCL_SIZED_ENTRIES(NAME, ELEM)                                                 \
  extern "C" __global__ void OXCCL_LAUNCH_BOUNDS(OXCCL_MAX_THREADS)                     \
      NAME##_large(const OXCCL_GRID_CONSTANT OxcclKernelParamsLarge params) {           \
    oxccl::run_channel<oxccl::ELEM>(OXCCL_ARGS_BASE(params), 0);                        \
  }                                                                                     \
  extern "C" __global__ void OXCCL_LAUNCH_BOUNDS(OXCCL_MAX_THREADS)                     \
      NAME##_small(const OXCCL_GRID_CONSTANT OxcclKernelParamsSmall params) {           \
    oxccl::run_channel<oxccl::ELEM>((const char*)params.block, OXCCL_SMALL_INLINE_ARGS_BYTES); \
  }                                                                                     \
  extern "C" __global__ void OXCCL_LAUNCH_BOUNDS(OXCCL_MAX_THREADS)                     \
      NAME##_medium(const OXCCL_GRID_CONSTANT OxcclKernelParamsMedium params) {         \
    oxccl::run_channel<oxccl::ELEM>((const char*)params.block, 0);                      \
  }
#else
#define OXCCL_SIZED_ENTRIES(NAME, ELEM)
#endif

#define OXCCL_ENTRY(NAME, ELEM)                                                       \
  extern "C" __global__ void OXCCL_LAUNCH_BOUNDS(OXCCL_MAX_THREADS)                     \
      NAME(const OXCCL_GRID_CONSTANT OxcclKernelParams params) {                        \
    oxccl::run_channel<oxccl::ELEM>(OXCCL_ARGS_BASE(params), 0);                        \
  }                                                                                     \
  OXCCL_SIZED_ENTRIES(NAME, ELEM)

// Names are part of the ABI with the Rust side: KERNEL_NAMES in kernels/abi/src/work.rs
// (CUDA adds NAME_large, NAME_small and NAME_medium for each).
OXCCL_ENTRY(oxccl_exec_i8, I8)
OXCCL_ENTRY(oxccl_exec_u8, U8)
OXCCL_ENTRY(oxccl_exec_i32, I32)
OXCCL_ENTRY(oxccl_exec_u32, U32)
OXCCL_ENTRY(oxccl_exec_i64, I64)
OXCCL_ENTRY(oxccl_exec_u64, U64)
OXCCL_ENTRY(oxccl_exec_f16, F16)
OXCCL_ENTRY(oxccl_exec_f32, F32)
OXCCL_ENTRY(oxccl_exec_f64, F64)
OXCCL_ENTRY(oxccl_exec_bf16, BF16)
OXCCL_ENTRY(oxccl_exec_f8e4m3, E4M3)
OXCCL_ENTRY(oxccl_exec_f8e5m2, E5M2)

// ONE_SHOT_KERNEL_NAMES in kernels/abi/src/one_shot.rs.
OXCCL_ONE_SHOT_ENTRY(oxccl_one_shot_i8, I8)
OXCCL_ONE_SHOT_ENTRY(oxccl_one_shot_u8, U8)
OXCCL_ONE_SHOT_ENTRY(oxccl_one_shot_i32, I32)
OXCCL_ONE_SHOT_ENTRY(oxccl_one_shot_u32, U32)
OXCCL_ONE_SHOT_ENTRY(oxccl_one_shot_i64, I64)
OXCCL_ONE_SHOT_ENTRY(oxccl_one_shot_u64, U64)
OXCCL_ONE_SHOT_ENTRY(oxccl_one_shot_f16, F16)
OXCCL_ONE_SHOT_ENTRY(oxccl_one_shot_f32, F32)
OXCCL_ONE_SHOT_ENTRY(oxccl_one_shot_f64, F64)
OXCCL_ONE_SHOT_ENTRY(oxccl_one_shot_bf16, BF16)
OXCCL_ONE_SHOT_ENTRY(oxccl_one_shot_f8e4m3, E4M3)
OXCCL_ONE_SHOT_ENTRY(oxccl_one_shot_f8e5m2, E5M2)
