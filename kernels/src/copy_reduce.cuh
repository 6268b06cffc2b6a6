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
    for (uint64_t p = tid; p < npacks; p += nthreads) {
      Pack a, b;
      a.p.lo = a.p.hi = 0;
      b.p.lo = b.p.hi = 0;
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

// The combiner is a run-time value of the launch; dispatch once per chunk, not per element.
template <class E>
OXCCL_DEVICE void reduce_copy(unsigned op, const typename E::Bits* rcv, const typename E::Bits* src,
                              typename E::Bits* dst, typename E::Bits* snd, uint64_t n,
                              const StepMath<typename E::Bits>& m) {
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
