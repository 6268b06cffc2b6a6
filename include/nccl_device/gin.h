/*
 * nccl_device/gin.h for oxccl's libnccl.so.2: NCCL's device-initiated networking (GIN) through
 * the host proxy (NCCL's proxy GIN type, the only one oxccl's device communicators have).
 *
 * A context (ncclDevComm::ginHandles[i]) names a ring of 64-byte descriptors per destination
 * rank in host-mapped memory, the rings' producer and consumer indices, counters and signals.
 * A put, putValue or signal claims a slot with the producer index, waits for the proxy to have
 * consumed the slot's previous lap (consumer index), and writes the descriptor's eight qwords,
 * each with a valid flag in bit 0; the proxy carries it and applies the destination's signal
 * after the payload. Counters count this rank's descriptors whose source was consumed; flush
 * waits until every descriptor posted so far was. Signal and counter ids are the device
 * communicator's (its ginSignalBase and ginCounterBase are added here).
 *
 * A device communicator without GIN (ginContextCount 0) traps on any of these calls.
 *
 * Written for oxccl from the published NCCL 2.28.9 device-API facts (names, signatures, the
 * proxy context's and descriptor's layouts); see nccl_device.h.
 */
#ifndef OXCCL_NCCL_DEVICE_GIN_H
#define OXCCL_NCCL_DEVICE_GIN_H

#include "coop.h"
#include "core.h"
#include "ptr.h"
#include "team.h"

#if defined(OXCCL_NCCL_DEVICE_CODE)
/* What a put does at the destination (signals) or at the source (counters) once it lands.
 * SignalInc adds 1; a signal takes either only SignalInc or only other operations between two
 * resets. */
struct ncclGin_None {};
struct ncclGin_SignalAdd {
  ncclGinSignal_t signal;
  uint64_t value;
};
struct ncclGin_SignalInc {
  ncclGinSignal_t signal;
};
struct ncclGin_CounterInc {
  ncclGinCounter_t counter;
};
/* 64 bytes of shared memory a caller may lend for building descriptors. */
struct alignas(16) ncclGinDescriptorSmem {
  uint64_t qword[8];
};
struct ncclGin_DescriptorSmem {
  ncclGinDescriptorSmem *descriptor;
};

namespace nccl {
namespace gin_detail {
/* The proxy context's struct, as the library lays it out (48 bytes). */
struct ProxyContext {
  int nranks;
  uint32_t queueSize;
  uint64_t *queues;
  uint32_t *pis;
  uint32_t *cis;
  uint64_t *counters;
  uint64_t *signals;
};

/* ncclDevComm::ginTypes of a proxy context. */
constexpr uint8_t kTypeProxy = 2;

/* Descriptor op bits: every descriptor is a put; the rest say what comes with it. */
constexpr uint64_t kOpPut = 1, kOpInline = 2, kOpCounter = 4, kOpSignalInc = 8,
                   kOpSignalAdd = 16;

NCCL_DEVICE_INLINE uint64_t load64(uint64_t *p, cuda::memory_order order) {
#if defined(OXCCL_NCCL_DEVICE_AMD)
  return __hip_atomic_load(p, (int)order, __HIP_MEMORY_SCOPE_SYSTEM);
#else
  return cuda::atomic_ref<uint64_t, cuda::thread_scope_system>(*p).load(order);
#endif
}
NCCL_DEVICE_INLINE void store64(uint64_t *p, uint64_t v, cuda::memory_order order) {
#if defined(OXCCL_NCCL_DEVICE_AMD)
  __hip_atomic_store(p, v, (int)order, __HIP_MEMORY_SCOPE_SYSTEM);
#else
  cuda::atomic_ref<uint64_t, cuda::thread_scope_system>(*p).store(v, order);
#endif
}
/* Claims the next slot of a ring: only this GPU touches its producer indices. */
NCCL_DEVICE_INLINE uint32_t claim(uint32_t *pi) {
#if defined(OXCCL_NCCL_DEVICE_AMD)
  return __hip_atomic_fetch_add(pi, 1u, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
#else
  return cuda::atomic_ref<uint32_t, cuda::thread_scope_device>(*pi).fetch_add(
      1u, cuda::memory_order_relaxed);
#endif
}
/* A ring's producer index, which only this GPU writes. */
NCCL_DEVICE_INLINE uint32_t posted(uint32_t *pi) {
#if defined(OXCCL_NCCL_DEVICE_AMD)
  return __hip_atomic_load(pi, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
#else
  return cuda::atomic_ref<uint32_t, cuda::thread_scope_device>(*pi).load(
      cuda::memory_order_relaxed);
#endif
}
/* Makes this thread's earlier writes visible to the host before what it posts next. */
NCCL_DEVICE_INLINE void releaseToSystem() {
#if defined(OXCCL_NCCL_DEVICE_AMD)
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "");
#else
  cuda::atomic_thread_fence(cuda::memory_order_release, cuda::thread_scope_system);
#endif
}
NCCL_DEVICE_INLINE void addInBlock(uint64_t *p, uint64_t delta) {
#if defined(OXCCL_NCCL_DEVICE_AMD)
  __hip_atomic_fetch_add(p, delta, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WORKGROUP);
#else
  cuda::atomic_ref<uint64_t, cuda::thread_scope_block>(*p).fetch_add(delta,
                                                                    cuda::memory_order_relaxed);
#endif
}
NCCL_DEVICE_INLINE uint64_t flag(uint64_t field) { return (field << 1) | 1; }

/* What a remote action asks of the destination's signal. */
NCCL_DEVICE_INLINE uint64_t signalOp(ncclGin_None) { return 0; }
NCCL_DEVICE_INLINE uint64_t signalOp(ncclGin_SignalInc) { return kOpSignalInc; }
NCCL_DEVICE_INLINE uint64_t signalOp(ncclGin_SignalAdd) { return kOpSignalAdd; }
NCCL_DEVICE_INLINE uint32_t signalId(ncclGin_None) { return 0; }
NCCL_DEVICE_INLINE uint32_t signalId(ncclGin_SignalInc a) { return a.signal; }
NCCL_DEVICE_INLINE uint32_t signalId(ncclGin_SignalAdd a) { return a.signal; }
NCCL_DEVICE_INLINE uint64_t signalValue(ncclGin_None) { return 0; }
NCCL_DEVICE_INLINE uint64_t signalValue(ncclGin_SignalInc) { return 1; }
NCCL_DEVICE_INLINE uint64_t signalValue(ncclGin_SignalAdd a) { return a.value; }
NCCL_DEVICE_INLINE bool hasCounter(ncclGin_None) { return false; }
NCCL_DEVICE_INLINE bool hasCounter(ncclGin_CounterInc) { return true; }
NCCL_DEVICE_INLINE uint32_t counterId(ncclGin_None) { return 0; }
NCCL_DEVICE_INLINE uint32_t counterId(ncclGin_CounterInc a) { return a.counter; }
NCCL_DEVICE_INLINE uint64_t *scratch(ncclGin_None, uint64_t *own) { return own; }
NCCL_DEVICE_INLINE uint64_t *scratch(ncclGin_DescriptorSmem d, uint64_t *) {
  return d.descriptor->qword;
}

/* The fields of one descriptor, before encoding. */
struct Request {
  uint64_t op, size, srcOffset, srcHandle, dstOffset, dstHandle;
  uint32_t counter, signal;
  uint64_t signalValue;
};

/* Encodes `r` into `q`: qword 0 op and size; 1-4 the source and destination offsets and
 * handles (an inline value instead of the source: bits 0-47 in qword 1 from bit 8, 48-63 in
 * qword 2); 5 the 16-bit counter and signal ids and the signal value's bits 0-15; 6 its bits
 * 16-63; 7 the flag alone. */
NCCL_DEVICE_INLINE void encode(uint64_t *q, Request const &r, bool inlined, uint64_t value) {
  q[0] = 1 | (r.op << 1) | (r.size << 7);
  if (inlined) {
    q[1] = 1 | ((value & 0xffffffffull) << 8) | (((value >> 32) & 0xffff) << 40);
    q[2] = 1 | ((value >> 48) << 8);
  } else {
    q[1] = flag(r.srcOffset);
    q[2] = flag(r.srcHandle);
  }
  q[3] = flag(r.dstOffset);
  q[4] = flag(r.dstHandle);
  q[5] = 1 | ((uint64_t)(r.counter & 0xffff) << 8) | ((uint64_t)(r.signal & 0xffff) << 24) |
         ((r.signalValue & 0xffff) << 40);
  q[6] = 1 | (((r.signalValue >> 16) & 0xffff) << 8) | ((r.signalValue >> 32) << 24);
  q[7] = 1;
}

/* Posts the descriptor in `q` to world rank `peer`'s ring of context `c`. */
NCCL_DEVICE_INLINE void post(ProxyContext const &c, int peer, uint64_t const *q) {
  uint32_t idx = claim(c.pis + peer);
  /* The slot is free once the proxy consumed its previous lap. */
  while (c.queueSize <= idx - nccl::utility::loadSys(c.cis + peer, cuda::memory_order_relaxed)) {
  }
  uint64_t *slot = c.queues + ((size_t)peer * c.queueSize + (idx & (c.queueSize - 1))) * 8;
#pragma unroll
  for (int i = 0; i < 8; i++) store64(slot + i, q[i], cuda::memory_order_relaxed);
}
}  // namespace gin_detail
}  // namespace nccl

/* A GIN context of a device communicator (contextIndex modulo its ginContextCount). */
struct ncclGin {
  static constexpr cuda::memory_order kAcquire = cuda::memory_order_acquire;

  ncclDevComm const &comm;
  uint32_t nContexts : 8, contextId : 8, _ginBackend : 8;
  void *_ginHandle;
  uint64_t *_signalShadows;

  NCCL_DEVICE_INLINE ncclGin(ncclDevComm const &c, int contextIndex) : comm(c) {
    nContexts = c.ginContextCount;
    contextId = nContexts == 0 ? 0 : (uint32_t)contextIndex % nContexts;
    _ginBackend = c.ginTypes[contextId];
    _ginHandle = c.ginHandles[contextId];
    _signalShadows = c.ginSignalShadows + (size_t)contextId * c.ginSignalCount;
  }

  template <typename RemoteAction = ncclGin_None, typename LocalAction = ncclGin_None,
            typename Coop = ncclCoopThread, typename DescriptorSmem = ncclGin_None>
  NCCL_DEVICE_INLINE void put(ncclTeam team, int peer, ncclWindow_t dstWnd, size_t dstOffset,
                              ncclWindow_t srcWnd, size_t srcOffset, size_t bytes,
                              RemoteAction remoteAction = ncclGin_None{},
                              LocalAction localAction = ncclGin_None{}, Coop coop = Coop{},
                              DescriptorSmem descriptor = ncclGin_None{},
                              cuda::thread_scope alreadyReleased = cuda::thread_scope_thread,
                              cuda::thread_scope = cuda::thread_scope_device) const {
    coop.sync();
    if (coop.thread_rank() == 0) {
      nccl::gin_detail::Request r = {};
      r.size = bytes;
      r.dstHandle = (uint64_t)nccl::utility::loadConst(&dstWnd->ginWins[contextId]);
      r.dstOffset = 4096 * (uint64_t)nccl::utility::loadConst(&dstWnd->ginOffset4K) + dstOffset;
      r.srcHandle = (uint64_t)nccl::utility::loadConst(&srcWnd->ginWins[contextId]);
      r.srcOffset = 4096 * (uint64_t)nccl::utility::loadConst(&srcWnd->ginOffset4K) + srcOffset;
      send(team, peer, r, false, 0, remoteAction, localAction, descriptor, alreadyReleased);
    }
    coop.sync();
  }

  template <typename T, typename RemoteAction = ncclGin_None,
            typename LocalAction = ncclGin_None, typename Coop = ncclCoopThread,
            typename DescriptorSmem = ncclGin_None>
  NCCL_DEVICE_INLINE void put(ncclTeam team, int peer, ncclSymPtr<T> dst, ncclSymPtr<T> src,
                              size_t nElts, RemoteAction remoteAction = ncclGin_None{},
                              LocalAction localAction = ncclGin_None{}, Coop coop = Coop{},
                              DescriptorSmem descriptor = ncclGin_None{},
                              cuda::thread_scope alreadyReleased = cuda::thread_scope_thread,
                              cuda::thread_scope expected = cuda::thread_scope_device) const {
    put(team, peer, dst.window, dst.offset, src.window, src.offset, nElts * sizeof(T),
        remoteAction, localAction, coop, descriptor, alreadyReleased, expected);
  }

  template <typename T, typename RemoteAction = ncclGin_None, typename Coop = ncclCoopThread,
            typename DescriptorSmem = ncclGin_None>
  NCCL_DEVICE_INLINE void putValue(ncclTeam team, int peer, ncclWindow_t dstWnd,
                                   size_t dstOffset, T value,
                                   RemoteAction remoteAction = ncclGin_None{},
                                   Coop coop = Coop{}, DescriptorSmem descriptor = ncclGin_None{},
                                   cuda::thread_scope alreadyReleased = cuda::thread_scope_thread,
                                   cuda::thread_scope = cuda::thread_scope_device) const {
    static_assert(sizeof(T) <= 8, "putValue carries at most 8 bytes");
    coop.sync();
    if (coop.thread_rank() == 0) {
      uint64_t bits = 0;
      __builtin_memcpy(&bits, &value, sizeof(T));
      nccl::gin_detail::Request r = {};
      r.op = nccl::gin_detail::kOpInline;
      r.size = sizeof(T);
      r.dstHandle = (uint64_t)nccl::utility::loadConst(&dstWnd->ginWins[contextId]);
      r.dstOffset = 4096 * (uint64_t)nccl::utility::loadConst(&dstWnd->ginOffset4K) + dstOffset;
      send(team, peer, r, true, bits, remoteAction, ncclGin_None{}, descriptor, alreadyReleased);
    }
    coop.sync();
  }

  template <typename T, typename RemoteAction = ncclGin_None, typename Coop = ncclCoopThread,
            typename DescriptorSmem = ncclGin_None>
  NCCL_DEVICE_INLINE void putValue(ncclTeam team, int peer, ncclSymPtr<T> dst, T value,
                                   RemoteAction remoteAction = ncclGin_None{},
                                   Coop coop = Coop{}, DescriptorSmem descriptor = ncclGin_None{},
                                   cuda::thread_scope alreadyReleased = cuda::thread_scope_thread,
                                   cuda::thread_scope expected = cuda::thread_scope_device) const {
    putValue(team, peer, dst.window, dst.offset, value, remoteAction, coop, descriptor,
             alreadyReleased, expected);
  }

  template <typename RemoteAction, typename Coop = ncclCoopThread,
            typename DescriptorSmem = ncclGin_None>
  NCCL_DEVICE_INLINE void signal(ncclTeam team, int peer, RemoteAction remoteAction,
                                 Coop coop = Coop{}, DescriptorSmem descriptor = ncclGin_None{},
                                 cuda::thread_scope alreadyReleased = cuda::thread_scope_thread,
                                 cuda::thread_scope = cuda::thread_scope_device) const {
    coop.sync();
    if (coop.thread_rank() == 0) {
      nccl::gin_detail::Request r = {};
      send(team, peer, r, false, 0, remoteAction, ncclGin_None{}, descriptor, alreadyReleased);
    }
    coop.sync();
  }

  /* Every source of a put posted so far by coop may be reused (the data need not have
   * landed). */
  template <typename Coop>
  NCCL_DEVICE_INLINE void flush(Coop coop, cuda::memory_order order = kAcquire) const {
    coop.sync();
    nccl::gin_detail::ProxyContext c = context();
    for (int pe = coop.thread_rank(); pe < c.nranks; pe += coop.size()) {
      uint32_t upTo = nccl::gin_detail::posted(c.pis + pe);
      while (!nccl::utility::rollingLessEq(upTo, nccl::utility::loadSys(c.cis + pe, order))) {
      }
    }
    coop.sync();
  }

  NCCL_DEVICE_INLINE uint64_t readCounter(ncclGinCounter_t counter, int bits = 56,
                                          cuda::memory_order order = kAcquire) const {
    return mask(bits) & nccl::gin_detail::load64(counterPtr(counter), order);
  }

  template <typename Coop>
  NCCL_DEVICE_INLINE void waitCounter(Coop coop, ncclGinCounter_t counter, uint64_t least,
                                      int = 56,
                                      cuda::memory_order order = kAcquire) const {
    coop.sync();
    if (coop.thread_rank() == 0) {
      uint64_t *p = counterPtr(counter);
      while (!nccl::utility::rollingLessEq(least, nccl::gin_detail::load64(p, order))) {
      }
    }
    coop.sync();
  }

  /* Each signal's shadow belongs to the caller; only increaseSignalShadow and resetSignal
   * change it. */
  NCCL_DEVICE_INLINE uint64_t *getSignalShadowPtr(ncclGinSignal_t signal) const {
    return _signalShadows + signal;
  }
  NCCL_DEVICE_INLINE void increaseSignalShadow(ncclGinSignal_t signal, uint64_t delta) const {
    nccl::gin_detail::addInBlock(_signalShadows + signal, delta);
  }

  NCCL_DEVICE_INLINE uint64_t readSignal(ncclGinSignal_t signal, int bits = 64,
                                         cuda::memory_order order = kAcquire) const {
    return mask(bits) & nccl::gin_detail::load64(signalPtr(signal), order);
  }

  template <typename Coop>
  NCCL_DEVICE_INLINE void waitSignal(Coop coop, ncclGinSignal_t signal, uint64_t least,
                                     int bits = 64,
                                     cuda::memory_order order = kAcquire) const {
    coop.sync();
    if (coop.thread_rank() == 0) waitAtLeast(signal, least, bits, order);
    coop.sync();
  }

  template <typename Coop>
  NCCL_DEVICE_INLINE void waitSignalMeetShadow(Coop coop, ncclGinSignal_t signal, int bits = 64,
                                               cuda::memory_order order = kAcquire) const {
    coop.sync();
    if (coop.thread_rank() == 0) waitAtLeast(signal, _signalShadows[signal], bits, order);
    coop.sync();
  }

  /* Waits until the signal passes its shadow by leastDelta; `before` gets the shadow and
   * `delta` how far the signal is past it (both to `bits` bits). */
  template <typename Coop, typename Uint>
  NCCL_DEVICE_INLINE void waitSignalFollowShadow(Coop coop, ncclGinSignal_t signal,
                                                 Uint leastDelta, Uint *before, Uint *delta,
                                                 int bits = 64,
                                                 cuda::memory_order order = kAcquire) const {
    coop.sync();
    uint64_t shadow = _signalShadows[signal];
    uint64_t now = 0;
    if (coop.thread_rank() == 0) now = waitAtLeast(signal, shadow + leastDelta, bits, order);
    now = ncclCoopBcast(coop, now, 0, /*entrySync=*/false);
    *before = (Uint)(mask(bits) & shadow);
    *delta = (Uint)(mask(bits) & (now - shadow));
  }

  /* These may not race with anything that changes the counter or signal. */
  NCCL_DEVICE_INLINE void resetCounter(ncclGinCounter_t counter) const {
    nccl::gin_detail::store64(counterPtr(counter), 0, cuda::memory_order_relaxed);
  }
  NCCL_DEVICE_INLINE void resetSignal(ncclGinSignal_t signal) const {
    nccl::gin_detail::store64(signalPtr(signal), 0, cuda::memory_order_relaxed);
    _signalShadows[signal] = 0;
  }

 private:
  static NCCL_DEVICE_INLINE uint64_t mask(int bits) { return ~0ull >> (64 - bits); }

  /* The proxy context; a device communicator without one traps. */
  NCCL_DEVICE_INLINE nccl::gin_detail::ProxyContext context() const {
    if (_ginHandle == nullptr || _ginBackend != nccl::gin_detail::kTypeProxy) {
      nccl::utility::trap();
    }
    return nccl::utility::loadConst((nccl::gin_detail::ProxyContext const *)_ginHandle);
  }
  NCCL_DEVICE_INLINE uint64_t *counterPtr(ncclGinCounter_t counter) const {
    return context().counters + comm.ginCounterBase + counter;
  }
  NCCL_DEVICE_INLINE uint64_t *signalPtr(ncclGinSignal_t signal) const {
    return context().signals + comm.ginSignalBase + signal;
  }
  NCCL_DEVICE_INLINE uint64_t waitAtLeast(ncclGinSignal_t signal, uint64_t least, int bits,
                                          cuda::memory_order order) const {
    uint64_t *p = signalPtr(signal);
    uint64_t now;
    do now = nccl::gin_detail::load64(p, order);
    while (!nccl::utility::rollingLessEq(least, now, bits));
    return now;
  }

  /* One thread: completes `r` with the actions, encodes it and posts it to `peer` of `team`. */
  template <typename RemoteAction, typename LocalAction, typename DescriptorSmem>
  NCCL_DEVICE_INLINE void send(ncclTeam team, int peer, nccl::gin_detail::Request r,
                               bool inlined, uint64_t value, RemoteAction remoteAction,
                               LocalAction localAction, DescriptorSmem descriptor,
                               cuda::thread_scope alreadyReleased) const {
    using namespace nccl::gin_detail;
    ProxyContext c = context();
    r.op |= kOpPut | signalOp(remoteAction) | (hasCounter(localAction) ? kOpCounter : 0);
    if (signalOp(remoteAction) != 0) {
      r.signal = comm.ginSignalBase + signalId(remoteAction);
      r.signalValue = signalValue(remoteAction);
    }
    if (hasCounter(localAction)) r.counter = comm.ginCounterBase + counterId(localAction);
    /* The proxy reads the source and the host sees the descriptor: what this thread (and
     * whoever it synchronized with) wrote must be visible to the system first. */
    if (alreadyReleased != cuda::thread_scope_system) releaseToSystem();
    uint64_t own[8];
    uint64_t *q = scratch(descriptor, own);
    encode(q, r, inlined, value);
    post(c, ncclTeamRankToWorld(comm, team, peer), q);
  }
};
#endif /* OXCCL_NCCL_DEVICE_CODE */

#endif /* OXCCL_NCCL_DEVICE_GIN_H */
