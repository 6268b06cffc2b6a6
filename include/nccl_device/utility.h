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

/* OXCCL_NCCL_DEVICE_CODE: a GPU compiler is compiling, so the device functions are declared.
 * OXCCL_NCCL_DEVICE_AMD: that compiler is HIP's clang for AMD GPUs (hipcc, HIP_PLATFORM=amd);
 * the functions whose CUDA form is PTX or NVIDIA-only intrinsics take a second form under it.
 * hipcc for NVIDIA runs nvcc, so it is the CUDA path. */
#if defined(__CUDACC__)
#define OXCCL_NCCL_DEVICE_CODE 1
#define NCCL_DEVICE_INLINE __device__ __forceinline__
#define NCCL_HOST_DEVICE_INLINE __host__ __device__ __forceinline__
#include <cuda/atomic>
#elif defined(__HIP__) || defined(__HIPCC__)
#define OXCCL_NCCL_DEVICE_CODE 1
#define OXCCL_NCCL_DEVICE_AMD 1
#include <hip/hip_runtime.h>
#define NCCL_DEVICE_INLINE __device__ __forceinline__
#define NCCL_HOST_DEVICE_INLINE __host__ __device__ __forceinline__
#if defined(__cplusplus) && __has_include(<hip/atomic>)
/* libhipcxx (ROCm's port of libcu++) spells the orders and scopes as CUDA does, in namespace
 * cuda; kernels that use it and these headers then agree on one type. */
#include <cuda/atomic>
#elif defined(__cplusplus)
/* Without libhipcxx (Debian's ROCm 5.2, for one) the API's signatures still take
 * cuda::memory_order and cuda::thread_scope, so that a kernel written for NVIDIA's header
 * compiles for AMD unchanged: the two enums, valued as the compiler's __ATOMIC_* orders. */
namespace cuda {
enum memory_order {
  memory_order_relaxed = __ATOMIC_RELAXED,
  memory_order_consume = __ATOMIC_CONSUME,
  memory_order_acquire = __ATOMIC_ACQUIRE,
  memory_order_release = __ATOMIC_RELEASE,
  memory_order_acq_rel = __ATOMIC_ACQ_REL,
  memory_order_seq_cst = __ATOMIC_SEQ_CST
};
enum thread_scope {
  thread_scope_system = 0,
  thread_scope_device = 1,
  thread_scope_block = 2,
  thread_scope_thread = 3
};
}  // namespace cuda
#endif
#else
/* Device-only functions are not declared outside a GPU compiler; this only keeps stray uses
 * compiling. */
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

/* For decltype only (as std::declval), so the headers need no <utility>. HIP's clang checks
 * host and device attributes in unevaluated operands too, so there it is both. */
template <typename T>
#if defined(OXCCL_NCCL_DEVICE_AMD)
__host__ __device__
#endif
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

#if defined(OXCCL_NCCL_DEVICE_CODE)
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

/* A set of lanes of the calling warp (CUDA, 32 lanes) or wavefront (AMD: 64 lanes on CDNA, 32
 * on RDNA), one bit per lane: a 32-bit mask cannot name the upper half of a wave64. */
#if defined(OXCCL_NCCL_DEVICE_AMD)
typedef uint64_t LaneMask;
#else
typedef uint32_t LaneMask;
#endif

/* The widest lane group the target runs in lockstep: the bound of ncclCoopTile. HIP's host
 * pass has no wavefront size, so it takes the widest, which every device pass narrows (clang
 * defines the macro per target in ROCm 5 and 6; later releases deprecate it). */
#if !defined(OXCCL_NCCL_DEVICE_AMD)
constexpr int kMaxTileLanes = 32;
#elif defined(__AMDGCN_WAVEFRONT_SIZE__)
constexpr int kMaxTileLanes = __AMDGCN_WAVEFRONT_SIZE__;
#elif defined(__AMDGCN_WAVEFRONT_SIZE)
constexpr int kMaxTileLanes = __AMDGCN_WAVEFRONT_SIZE;
#else
constexpr int kMaxTileLanes = 64;
#endif
/* Every lane of the calling warp or wavefront. */
constexpr LaneMask kAllLanes =
    kMaxTileLanes == 8 * sizeof(LaneMask) ? ~LaneMask(0) : (LaneMask(1) << kMaxTileLanes) - 1;

NCCL_DEVICE_INLINE int lane() {
#if defined(OXCCL_NCCL_DEVICE_AMD)
  return (int)__lane_id();
#else
  int id;
  asm("mov.u32 %0, %%laneid;" : "=r"(id));
  return id;
#endif
}
/* The lanes below the calling one. */
NCCL_DEVICE_INLINE LaneMask lanemask_lt() {
#if defined(OXCCL_NCCL_DEVICE_AMD)
  return ((LaneMask)1 << lane()) - 1;
#else
  unsigned int mask;
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(mask));
  return mask;
#endif
}

NCCL_DEVICE_INLINE int popcount(LaneMask m) {
#if defined(OXCCL_NCCL_DEVICE_AMD)
  return __popcll(m);
#else
  return __popc(m);
#endif
}

/* The lanes of this warp or wavefront that are running this code now. */
NCCL_DEVICE_INLINE LaneMask activeLanes() {
#if defined(OXCCL_NCCL_DEVICE_AMD)
  return __ballot(1);
#else
  return __activemask();
#endif
}

/* The lanes of `mask` (all of them running this code) whose `pred` holds. */
NCCL_DEVICE_INLINE LaneMask ballot(LaneMask mask, bool pred) {
#if defined(OXCCL_NCCL_DEVICE_AMD)
  /* A wavefront's lanes run in lockstep: the lanes of `mask` are here together without a
   * synchronising form (ROCm 5.2 has none), and lanes outside it are cut off. */
  return __ballot(pred) & mask;
#else
  return __ballot_sync(mask, pred);
#endif
}

/* 32 bits from lane `src` of the calling warp or wavefront (`width` > 1: src counts from the
 * start of the calling lane's aligned group of `width` lanes). */
NCCL_DEVICE_INLINE uint32_t shfl(LaneMask mask, uint32_t v, int src, int width) {
#if defined(OXCCL_NCCL_DEVICE_AMD)
  (void)mask;
  return (uint32_t)__shfl((int)v, src, width);
#else
  return __shfl_sync(mask, v, src, width);
#endif
}

/* The lane of the n-th (from 0) set bit of mask. */
NCCL_DEVICE_INLINE int nthLane(LaneMask mask, int n) {
#if defined(OXCCL_NCCL_DEVICE_AMD)
  for (int i = 0; i < n; i++) mask &= mask - 1;
  return __ffsll((unsigned long long)mask) - 1;
#else
  /* __ffs is the quick way to the first. */
  return n == 0 ? __ffs(mask) - 1 : (int)__fns(mask, 0, n + 1);
#endif
}

/* The lanes of `mask` wait for each other, and their memory operations before it are seen by
 * each other after it. */
NCCL_DEVICE_INLINE void syncLanes(LaneMask mask) {
#if defined(OXCCL_NCCL_DEVICE_AMD)
  /* Lanes of one wavefront already run in lockstep; what is left is to keep memory operations
   * from moving across (for the compiler and the memory model, at wavefront scope). */
  (void)mask;
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
#else
  __syncwarp(mask);
#endif
}

/* Stops the kernel: a code path oxccl cannot serve was reached. */
NCCL_DEVICE_INLINE void trap() {
#if defined(OXCCL_NCCL_DEVICE_AMD)
  __builtin_trap();
#else
  __trap();
#endif
}

#if defined(OXCCL_NCCL_DEVICE_AMD)
/* The orders pass to the compiler's atomic builtins as they are. */
static_assert((int)cuda::memory_order_relaxed == __ATOMIC_RELAXED &&
                  (int)cuda::memory_order_acquire == __ATOMIC_ACQUIRE &&
                  (int)cuda::memory_order_release == __ATOMIC_RELEASE &&
                  (int)cuda::memory_order_acq_rel == __ATOMIC_ACQ_REL &&
                  (int)cuda::memory_order_seq_cst == __ATOMIC_SEQ_CST,
              "cuda::memory_order is valued as __ATOMIC_*");
#endif

/* Atomic load and store of a 32-bit word that other GPUs (and the host) read and write, at
 * system scope: the barriers' words live in peers' memory. `order` is a load order (relaxed,
 * acquire, seq_cst) for the load and a store order (relaxed, release, seq_cst) for the store. */
NCCL_DEVICE_INLINE uint32_t loadSys(uint32_t *p, cuda::memory_order order) {
#if defined(OXCCL_NCCL_DEVICE_AMD)
  return __hip_atomic_load(p, (int)order, __HIP_MEMORY_SCOPE_SYSTEM);
#else
  return cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*p).load(order);
#endif
}
NCCL_DEVICE_INLINE void storeSys(uint32_t *p, uint32_t v, cuda::memory_order order) {
#if defined(OXCCL_NCCL_DEVICE_AMD)
  __hip_atomic_store(p, v, (int)order, __HIP_MEMORY_SCOPE_SYSTEM);
#else
  cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*p).store(v, order);
#endif
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
 * them runs, so their fields are read through the read-only data cache (CUDA). AMD GPUs have no
 * such path to ask for: a plain load, which the compiler makes scalar where it can. */
template <typename T>
NCCL_DEVICE_INLINE T loadConst(T const *p) {
#if defined(OXCCL_NCCL_DEVICE_AMD)
  return *p;
#else
  typedef typename detail::LoadWord<T>::Type Word;
  constexpr int n = (int)(sizeof(T) / sizeof(Word));
  Word w[n];
#pragma unroll
  for (int i = 0; i < n; i++) w[i] = __ldg((Word const *)p + i);
  T value;
  __builtin_memcpy(&value, w, sizeof(T));
  return value;
#endif
}
#endif /* OXCCL_NCCL_DEVICE_CODE */

}  // namespace utility
}  // namespace nccl
#endif /* __cplusplus */

#endif /* OXCCL_NCCL_DEVICE_UTILITY_H */
