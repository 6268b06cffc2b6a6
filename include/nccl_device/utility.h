/*
 * nccl_device/utility.h for oxccl's libnccl.so.2: the inline-function macros every device header
 * uses, and the few integer, pointer and memory-order helpers (namespace nccl::utility) that
 * the device API is built from.
 *
 * Written for oxccl from the published NCCL 2.28.9 device-API facts (names, signatures, struct
 * layouts, the layout of state in the resource buffer); see nccl_device.h.
 */
#ifndef OXCCL_NCCL_DEVICE_UTILITY_H
#define OXCCL_NCCL_DEVICE_UTILITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define NCCL_DEVICE_INLINE __device__ __forceinline__
#define NCCL_HOST_DEVICE_INLINE __host__ __device__ __forceinline__
#include <cuda/atomic>
#else
/* Device-only functions are not declared outside nvcc; this only keeps stray uses compiling. */
#define NCCL_DEVICE_INLINE
#if defined(__cplusplus)
#define NCCL_HOST_DEVICE_INLINE inline __attribute__((always_inline))
#else
/* static: a C translation unit never needs (or emits) an out-of-line copy. */
#define NCCL_HOST_DEVICE_INLINE static inline __attribute__((always_inline))
#endif
#endif

#if defined(__cplusplus)
#define NCCL_EXTERN_C extern "C"
#else
#define NCCL_EXTERN_C
#endif

#if defined(__cplusplus)
namespace nccl {
namespace utility {

/* For decltype only (as std::declval), so the headers need no <utility>. */
template <typename T>
T&& declval() noexcept;

template <typename Int>
NCCL_HOST_DEVICE_INLINE constexpr bool isPow2(Int x) {
  return (x & (x - 1)) == 0;
}

template <typename X, typename Y, typename Z = decltype(X() + Y())>
NCCL_HOST_DEVICE_INLINE constexpr Z divUp(X x, Y y) {
  return (x + y - 1) / y;
}
template <typename X, typename Y, typename Z = decltype(X() + Y())>
NCCL_HOST_DEVICE_INLINE constexpr Z roundUp(X x, Y y) {
  return divUp(x, y) * y;
}
template <typename X, typename Y, typename Z = decltype(X() + Y())>
NCCL_HOST_DEVICE_INLINE constexpr Z roundDown(X x, Y y) {
  return x - x % y;
}
/* a must be a power of two. */
template <typename X, typename Y, typename Z = decltype(X() + Y())>
NCCL_HOST_DEVICE_INLINE constexpr Z alignUp(X x, Y a) {
  return (x + a - 1) & -Z(a);
}
template <typename X, typename Y, typename Z = decltype(X() + Y())>
NCCL_HOST_DEVICE_INLINE constexpr Z alignDown(X x, Y a) {
  return x & -Z(a);
}

/* Symmetric windows give LSA rank i the address of rank 0 plus i * stride4G * 4 GiB, so moving
 * between ranks only changes the high 32 bits: one 32-bit add instead of a 64-bit multiply. */
template <typename T>
NCCL_HOST_DEVICE_INLINE T add4G(T base, int delta4G) {
  static_assert(sizeof(T) == sizeof(uint64_t), "add4G moves a 64-bit pointer or integer");
  uint64_t bits;
  __builtin_memcpy(&bits, &base, sizeof bits);
  bits += uint64_t(uint32_t(delta4G)) << 32;
  __builtin_memcpy(&base, &bits, sizeof bits);
  return base;
}

/* a <= b on a counter that wraps after nBits bits: b is at most half the range ahead of a. */
template <typename Uint>
NCCL_HOST_DEVICE_INLINE bool rollingLessEq(Uint a, Uint b, int nBits = 8 * sizeof(Uint)) {
  static_assert(Uint(-1) > Uint(0), "rolling comparisons need an unsigned type");
  Uint mask = Uint(-1) >> (8 * sizeof(Uint) - nBits);
  return ((b - a) & mask) <= (mask >> 1);
}
template <typename Uint>
NCCL_HOST_DEVICE_INLINE bool rollingLessThan(Uint a, Uint b, int nBits = 8 * sizeof(Uint)) {
  return !rollingLessEq(b, a, nBits);
}

/* Division by a divisor fixed at setup time (team sizes) without a divide instruction on the
 * device: x / y is the high word of x * idivRcp32(y), corrected by at most one. A power of two
 * gets the exact reciprocal 2^32 / y, which for y = 1 wraps to 0 (handled as "no division"). */
NCCL_HOST_DEVICE_INLINE constexpr uint32_t idivRcp32(uint32_t x) {
  return UINT32_MAX / x + (isPow2(x) ? 1u : 0u);
}

NCCL_HOST_DEVICE_INLINE uint32_t mul32hi(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return uint32_t((uint64_t(a) * b) >> 32);
#endif
}

NCCL_HOST_DEVICE_INLINE void idivmodFast32(uint32_t *quo, uint32_t *rem, uint32_t x, uint32_t y,
                                           uint32_t yrcp) {
  uint32_t q = yrcp == 0 ? x : mul32hi(x, yrcp);
  uint32_t r = x - q * y;
  if (r >= y) {
    q += 1;
    r -= y;
  }
  *quo = q;
  *rem = r;
}
NCCL_HOST_DEVICE_INLINE uint32_t idivFast32(uint32_t x, uint32_t y, uint32_t yrcp) {
  uint32_t q, r;
  idivmodFast32(&q, &r, x, y, yrcp);
  return q;
}
NCCL_HOST_DEVICE_INLINE uint32_t imodFast32(uint32_t x, uint32_t y, uint32_t yrcp) {
  uint32_t q, r;
  idivmodFast32(&q, &r, x, y, yrcp);
  return r;
}

#if defined(__CUDACC__)
/* The acquire (or release) half of an order, for the load (or store) side of a barrier. */
NCCL_DEVICE_INLINE cuda::memory_order acquireOrderOf(cuda::memory_order order) {
  if (order == cuda::memory_order_release) return cuda::memory_order_relaxed;
  if (order == cuda::memory_order_acq_rel) return cuda::memory_order_acquire;
  return order;
}
NCCL_DEVICE_INLINE cuda::memory_order releaseOrderOf(cuda::memory_order order) {
  if (order == cuda::memory_order_acquire) return cuda::memory_order_relaxed;
  if (order == cuda::memory_order_acq_rel) return cuda::memory_order_release;
  return order;
}

NCCL_DEVICE_INLINE int lane() {
  int id;
  asm("mov.u32 %0, %%laneid;" : "=r"(id));
  return id;
}
NCCL_DEVICE_INLINE unsigned int lanemask_lt() {
  unsigned int mask;
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(mask));
  return mask;
}

namespace detail {
template <int Bytes>
struct WordOfSize;
template <>
struct WordOfSize<8> {
  typedef unsigned long long Type;
};
template <>
struct WordOfSize<4> {
  typedef unsigned int Type;
};
template <>
struct WordOfSize<1> {
  typedef unsigned char Type;
};
/* The widest word a T can be read in. */
template <typename T>
struct LoadWord {
  static constexpr int bytes = alignof(T) % 8 == 0 && sizeof(T) % 8 == 0   ? 8
                               : alignof(T) % 4 == 0 && sizeof(T) % 4 == 0 ? 4
                                                                           : 1;
  typedef typename WordOfSize<bytes>::Type Type;
};
}  // namespace detail

/* Windows, the window table and the device communicator do not change while a kernel using
 * them runs, so their fields are read through the read-only data cache. */
template <typename T>
NCCL_DEVICE_INLINE T loadConst(T const *p) {
  typedef typename detail::LoadWord<T>::Type Word;
  constexpr int n = (int)(sizeof(T) / sizeof(Word));
  Word w[n];
#pragma unroll
  for (int i = 0; i < n; i++) w[i] = __ldg((Word const *)p + i);
  T value;
  __builtin_memcpy(&value, w, sizeof(T));
  return value;
}
#endif /* __CUDACC__ */

}  // namespace utility
}  // namespace nccl
#endif /* __cplusplus */

#endif /* OXCCL_NCCL_DEVICE_UTILITY_H */
