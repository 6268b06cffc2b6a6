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
  bool pre_r;     // apply pre-scale to the received operand (zero copy: a peer's raw input)
  bool post;      // apply post-division to the result
};

// MATH false: the caller knows m asks for no scaling and no division (the common case, which
// the compiler then reduces to one combine).
template <class E, unsigned OP, bool MATH = true>
OXCCL_DEVICE typename E::Bits element(bool have_r, typename E::Bits r, bool have_s, typename E::Bits s,
                                      const StepMath<typename E::Bits>& m) {
  typedef typename E::Bits T;
  T v = (MATH && have_r && m.pre_r) ? Arith<E>::prod(r, m.scale) : r;
  if (have_s) {
    const T own = (MATH && m.pre) ? Arith<E>::prod(s, m.scale) : s;
    v = have_r ? Combine<E, OP>::apply(v, own) : own;
  }
  if (MATH && m.post) v = Arith<E>::div(v, m.div);
  return v;
}

OXCCL_DEVICE bool aligned16(const void* p) { return ((uintptr_t)p & 15u) == 0; }

// Runs body.run<U>(p, stride) over this thread's packs p, p + stride, ... (stride = block size),
// U packs per call while U fit, then one at a time. U independent 16-byte loads in flight per
// thread: one block per channel cannot reach memory bandwidth with one outstanding load.
template <int U, class Body>
OXCCL_DEVICE void for_each_pack(uint64_t npacks, const Body& body) {
  const uint64_t stride = blockDim.x;
  uint64_t p = threadIdx.x;
  for (; p + (U - 1) * stride < npacks; p += U * stride) body.template run<U>(p, stride);
  for (; p < npacks; p += stride) body.template run<1>(p, stride);
}

// Pure moves, type-independent: one copy of this loop serves all 12 entry points' copies (most
// of what collectives move).
struct CopyPacks {
  const OxcclPack16* s;
  OxcclPack16* d1;
  OxcclPack16* d2;
  template <int U>
  OXCCL_DEVICE void run(uint64_t p, uint64_t stride) const {
    OxcclPack16 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = oxccl_load16(s + p + u * stride);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (d1) oxccl_store16(d1 + p + u * stride, v[u]);
      if (d2) oxccl_store16(d2 + p + u * stride, v[u]);
    }
  }
};

// A swap's packs: each thread loads both before it stores either, so either side may be in
// place.
struct SwapPacks {
  const OxcclPack16* mine;
  const OxcclPack16* theirs;
  OxcclPack16* mine_out;    // receives theirs
  OxcclPack16* theirs_out;  // receives mine
  template <int U>
  OXCCL_DEVICE void run(uint64_t p, uint64_t stride) const {
    OxcclPack16 m[U], t[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      m[u] = oxccl_load16(mine + p + u * stride);
      t[u] = oxccl_load16(theirs + p + u * stride);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      oxccl_store16(mine_out + p + u * stride, t[u]);
      oxccl_store16(theirs_out + p + u * stride, m[u]);
    }
  }
};

// A zero-copy exchange of n elements: theirs (a peer's) to mine_out, mine to theirs_out.
template <class T>
OXCCL_DEVICE void swap_copy(const T* theirs, const T* mine, T* mine_out, T* theirs_out, uint64_t n) {
  uint64_t done = 0;
  if (aligned16(theirs) && aligned16(mine) && aligned16(mine_out) && aligned16(theirs_out)) {
    constexpr uint64_t kPer = 16 / sizeof(T);
    const SwapPacks body{reinterpret_cast<const OxcclPack16*>(mine),
                         reinterpret_cast<const OxcclPack16*>(theirs),
                         reinterpret_cast<OxcclPack16*>(mine_out),
                         reinterpret_cast<OxcclPack16*>(theirs_out)};
    for_each_pack<4>(n / kPer, body);
    done = n / kPer * kPer;
  }
  for (uint64_t i = done + threadIdx.x; i < n; i += blockDim.x) {
    const T x = mine[i];
    const T y = theirs[i];
    mine_out[i] = y;
    theirs_out[i] = x;
  }
}

template <class E, unsigned OP, bool MATH>
struct ReducePacks {
  typedef typename E::Bits T;
  static constexpr int kPer = 16 / sizeof(T);
  union Pack {
    OxcclPack16 p;
    T e[kPer];
  };
  const T* rcv;
  const T* src;
  T* dst;
  T* snd;
  StepMath<T> m;
  template <int U>
  OXCCL_DEVICE void run(uint64_t p, uint64_t stride) const {
    Pack a[U], b[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      a[u].p.lo = a[u].p.hi = b[u].p.lo = b[u].p.hi = 0;
      if (rcv) a[u].p = oxccl_load16(rcv + (p + u * stride) * kPer);
      if (src) b[u].p = oxccl_load16(src + (p + u * stride) * kPer);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        a[u].e[k] = element<E, OP, MATH>(rcv != nullptr, a[u].e[k], src != nullptr, b[u].e[k], m);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (dst) oxccl_store16(dst + (p + u * stride) * kPer, a[u].p);
      if (snd) oxccl_store16(snd + (p + u * stride) * kPer, a[u].p);
    }
  }
};

// Packs of each operand in flight per thread in a plain combine. A zero-copy step reads one
// operand across the link, and a block of 512 threads reads it at 227 GB/s with one pack in
// flight, 363 with two, 371 with four (tests/gpu/probes/nvlink_copy.cu, 32 blocks). 1-byte
// types hold 16 elements per pack and stop at two.
template <class E>
struct PlainPacks {
  static constexpr int kUnroll = sizeof(typename E::Bits) == 1 ? 2 : 4;
};
#if defined(OXCCL_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
// Turing has no bfloat16 instructions: the emulated rounding spills registers at four.
template <>
struct PlainPacks<BF16> {
  static constexpr int kUnroll = 2;
};
#endif

template <class E, unsigned OP>
OXCCL_DEVICE void reduce_copy_op(const typename E::Bits* rcv, const typename E::Bits* src,
                                 typename E::Bits* dst, typename E::Bits* snd, uint64_t n,
                                 const StepMath<typename E::Bits>& m) {
  typedef typename E::Bits T;
  uint64_t done = 0;
  if (aligned16(rcv) && aligned16(src) && aligned16(dst) && aligned16(snd)) {
    const uint64_t npacks = n / ReducePacks<E, OP, true>::kPer;
    if (m.pre || m.pre_r || m.post) {
      // Scaling and division (integer division above all) take registers per element: two
      // packs in flight (one for 1-byte types, whose pack holds 16 elements) stay clear of
      // spills (backend-cuda's no_register_spills test).
      constexpr int kUnroll = sizeof(T) == 1 ? 1 : 2;
      for_each_pack<kUnroll>(npacks, ReducePacks<E, OP, true>{rcv, src, dst, snd, m});
    } else {
      for_each_pack<PlainPacks<E>::kUnroll>(npacks, ReducePacks<E, OP, false>{rcv, src, dst, snd, m});
    }
    done = npacks * ReducePacks<E, OP, true>::kPer;
  }
  for (uint64_t i = done + threadIdx.x; i < n; i += blockDim.x) {
    const T r = rcv ? rcv[i] : T(0);
    const T s = src ? src[i] : T(0);
    const T v = element<E, OP>(rcv != nullptr, r, src != nullptr, s, m);
    if (dst) dst[i] = v;
    if (snd) snd[i] = v;
  }
}

// The combiner is a run-time value of the launch; dispatch once per chunk, not per element.
template <class E>
OXCCL_DEVICE void reduce_copy(unsigned op, const typename E::Bits* rcv, const typename E::Bits* src,
                              typename E::Bits* dst, typename E::Bits* snd, uint64_t n,
                              const StepMath<typename E::Bits>& m) {
  typedef typename E::Bits T;
  const bool one_source = (rcv == nullptr) != (src == nullptr);
  if (one_source && !(src && m.pre) && !(rcv && m.pre_r) && !m.post) {
    // A pure move: the element function is the identity.
    const T* from = rcv ? rcv : src;
    // In place (a broadcast root's own output, say): the data is already there.
    if (dst == from) dst = nullptr;
    if (dst == nullptr && snd == nullptr) return;
    uint64_t done = 0;
    OXCCL_MARK(44);
    if (aligned16(from) && aligned16(dst) && aligned16(snd)) {
      constexpr uint64_t kPer = 16 / sizeof(T);
      const CopyPacks body{reinterpret_cast<const OxcclPack16*>(from),
                           reinterpret_cast<OxcclPack16*>(dst), reinterpret_cast<OxcclPack16*>(snd)};
      for_each_pack<4>(n / kPer, body);
      done = n / kPer * kPer;
    }
    OXCCL_MARK(45);
    for (uint64_t i = done + threadIdx.x; i < n; i += blockDim.x) {
      const T v = from[i];
      if (dst) dst[i] = v;
      if (snd) snd[i] = v;
      OXCCL_MARK(47);
    }
    OXCCL_MARK(46);
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
