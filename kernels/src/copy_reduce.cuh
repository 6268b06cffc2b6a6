// The block-wide inner loop of every step: up to two sources, up to two destinations.
//
// v = recv[i] (+) pre(src[i]); v = post(v); dst[i] = v; send[i] = v. Any pointer may be null
// (at least one source is not). When every pointer is 16-byte aligned the body moves 16-byte
// packs and finishes with a scalar tail; otherwise it stays scalar (plans produce aligned
// offsets for large transfers, and the fallback keeps odd offsets correct).
#pragma once

#include "reduce_ops.cuh"

namespace oxccl {

// Per-step parameters of the element function, uniform across the block.
template <class T>
struct StepMath {
  T scale;        // pre-scale scalar
  uint32_t div;   // post-division
  bool pre;       // apply pre-scale to src
  bool post;      // apply post-division to the result
};

template <class E, unsigned OP>
OXCCL_DEVICE typename E::Bits element(bool have_r, typename E::Bits r, bool have_s, typename E::Bits s,
                                      const StepMath<typename E::Bits>& m) {
  typedef typename E::Bits T;
  T v = r;
  if (have_s) {
    const T own = m.pre ? Arith<E>::prod(s, m.scale) : s;
    v = have_r ? Combine<E, OP>::apply(v, own) : own;
  }
  if (m.post) v = Arith<E>::div(v, m.div);
  return v;
}

OXCCL_DEVICE bool aligned16(const void* p) { return ((uintptr_t)p & 15u) == 0; }

template <class E, unsigned OP>
OXCCL_DEVICE void reduce_copy_op(const typename E::Bits* rcv, const typename E::Bits* src,
                                 typename E::Bits* dst, typename E::Bits* snd, uint64_t n,
                                 const StepMath<typename E::Bits>& m) {
  typedef typename E::Bits T;
  constexpr int kPer = 16 / sizeof(T);
  // Two packs per source in flight per thread; pure moves take copy_packs (deeper unroll).
  constexpr int kUnroll = sizeof(T) == 1 ? 1 : 2;
  union Pack {
    OxcclPack16 p;
    T e[kPer];
  };
  const bool have_r = rcv != nullptr;
  const bool have_s = src != nullptr;
  const uint64_t tid = threadIdx.x;
  const uint64_t nthreads = blockDim.x;
  uint64_t done = 0;
  if (aligned16(rcv) && aligned16(src) && aligned16(dst) && aligned16(snd)) {
    const uint64_t npacks = n / kPer;
    uint64_t p = tid;
    // Several independent 16-byte loads in flight per thread: one block per channel cannot
    // reach memory bandwidth with one outstanding load per thread.
    for (; p + (kUnroll - 1) * nthreads < npacks; p += kUnroll * nthreads) {
      Pack a[kUnroll], b[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        a[u].p.lo = a[u].p.hi = b[u].p.lo = b[u].p.hi = 0;
        if (have_r) a[u].p = oxccl_load16(rcv + (p + u * nthreads) * kPer);
        if (have_s) b[u].p = oxccl_load16(src + (p + u * nthreads) * kPer);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int k = 0; k < kPer; ++k) a[u].e[k] = element<E, OP>(have_r, a[u].e[k], have_s, b[u].e[k], m);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (dst) oxccl_store16(dst + (p + u * nthreads) * kPer, a[u].p);
        if (snd) oxccl_store16(snd + (p + u * nthreads) * kPer, a[u].p);
      }
    }
    for (; p < npacks; p += nthreads) {
      Pack a, b;
      a.p.lo = a.p.hi = b.p.lo = b.p.hi = 0;
      if (have_r) a.p = oxccl_load16(rcv + p * kPer);
      if (have_s) b.p = oxccl_load16(src + p * kPer);
#pragma unroll
      for (int k = 0; k < kPer; ++k) a.e[k] = element<E, OP>(have_r, a.e[k], have_s, b.e[k], m);
      if (dst) oxccl_store16(dst + p * kPer, a.p);
      if (snd) oxccl_store16(snd + p * kPer, a.p);
    }
    done = npacks * kPer;
  }
  for (uint64_t i = done + tid; i < n; i += nthreads) {
    const T r = have_r ? rcv[i] : T(0);
    const T s = have_s ? src[i] : T(0);
    const T v = element<E, OP>(have_r, r, have_s, s, m);
    if (dst) dst[i] = v;
    if (snd) snd[i] = v;
  }
}

// Moves npacks 16-byte packs from s to d1 and/or d2 unchanged. Type-independent, so one copy of
// this loop serves all 12 entry points' pure copies (most of what collectives move).
OXCCL_DEVICE void copy_packs(const OxcclPack16* s, OxcclPack16* d1, OxcclPack16* d2, uint64_t npacks) {
  constexpr int kUnroll = 4;
  const uint64_t tid = threadIdx.x;
  const uint64_t nthreads = blockDim.x;
  uint64_t p = tid;
  for (; p + (kUnroll - 1) * nthreads < npacks; p += kUnroll * nthreads) {
    OxcclPack16 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = oxccl_load16(s + p + u * nthreads);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (d1) oxccl_store16(d1 + p + u * nthreads, v[u]);
      if (d2) oxccl_store16(d2 + p + u * nthreads, v[u]);
    }
  }
  for (; p < npacks; p += nthreads) {
    const OxcclPack16 v = oxccl_load16(s + p);
    if (d1) oxccl_store16(d1 + p, v);
    if (d2) oxccl_store16(d2 + p, v);
  }
}

// The combiner is a run-time value of the launch; dispatch once per chunk, not per element.
template <class E>
OXCCL_DEVICE void reduce_copy(unsigned op, const typename E::Bits* rcv, const typename E::Bits* src,
                              typename E::Bits* dst, typename E::Bits* snd, uint64_t n,
                              const StepMath<typename E::Bits>& m) {
  typedef typename E::Bits T;
  const bool one_source = (rcv == nullptr) != (src == nullptr);
  if (one_source && !(src && m.pre) && !m.post) {
    // A pure move: the element function is the identity.
    const T* from = rcv ? rcv : src;
    uint64_t done = 0;
    if (aligned16(from) && aligned16(dst) && aligned16(snd)) {
      constexpr uint64_t kPer = 16 / sizeof(T);
      copy_packs(reinterpret_cast<const OxcclPack16*>(from), reinterpret_cast<OxcclPack16*>(dst),
                 reinterpret_cast<OxcclPack16*>(snd), n / kPer);
      done = n / kPer * kPer;
    }
    for (uint64_t i = done + threadIdx.x; i < n; i += blockDim.x) {
      const T v = from[i];
      if (dst) dst[i] = v;
      if (snd) snd[i] = v;
    }
    return;
  }
  if (rcv == nullptr || src == nullptr) {
    // Nothing is combined, so the combiner is irrelevant: one instantiation serves all ops.
    reduce_copy_op<E, OXCCL_OP_SUM>(rcv, src, dst, snd, n, m);
    return;
  }
  switch (op) {
    case OXCCL_OP_SUM:
      reduce_copy_op<E, OXCCL_OP_SUM>(rcv, src, dst, snd, n, m);
      break;
    case OXCCL_OP_PROD:
      reduce_copy_op<E, OXCCL_OP_PROD>(rcv, src, dst, snd, n, m);
      break;
    case OXCCL_OP_MAX:
      reduce_copy_op<E, OXCCL_OP_MAX>(rcv, src, dst, snd, n, m);
      break;
    default:
      reduce_copy_op<E, OXCCL_OP_MIN>(rcv, src, dst, snd, n, m);
      break;
  }
}

}  // namespace oxccl
