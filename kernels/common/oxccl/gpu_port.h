// Portability layer between nvcc (CUDA) and hipcc (HIP, which compiles the same .cu files).
//
// Everything vendor specific that device code needs lives here: the flavour macros, warp width,
// shuffles, system-scope acquire/release, fences, a 16-byte vector type and the 8/16-bit float
// conversions. Inline assembly is allowed only inside this header's #if branches, so the kernels
// themselves stay one source.
#pragma once

#if defined(__HIPCC__) || defined(__HIP_PLATFORM_AMD__) || defined(__HIP__)
#define OXCCL_HIP 1
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#if __has_include(<hip/hip_bf16.h>)
// ROCm >= 6 ships a native bfloat16; 5.2 (Debian's) does not, so we fall back to bit arithmetic.
#include <hip/hip_bf16.h>
#define OXCCL_HIP_NATIVE_BF16 1
#endif
#elif defined(__CUDACC__)
#define OXCCL_CUDA 1
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#else
#error "oxccl device code must be compiled by nvcc or hipcc"
#endif

#include <stdint.h>

#define OXCCL_DEVICE __device__ __forceinline__
#define OXCCL_HOST_DEVICE __host__ __device__ __forceinline__

// Kernel register budget. CUDA: one resident block of `threads` is enough; without the explicit
// 1, ptxas 13.0 aims for more residency, caps registers at 64 at 512 threads and spills. HIP's
// second argument means something else (minimum waves per EU), so it is left out there.
#if defined(OXCCL_CUDA)
#define OXCCL_LAUNCH_BOUNDS(threads) __launch_bounds__(threads, 1)
#else
#define OXCCL_LAUNCH_BOUNDS(threads) __launch_bounds__(threads)
#endif

// A by-value kernel parameter whose address the kernel takes without a per-thread copy (CUDA
// 11.7+, sm_70+). HIP has no equivalent; its launches pass the argument block by address.
#if defined(OXCCL_CUDA)
#define OXCCL_GRID_CONSTANT __grid_constant__
#else
#define OXCCL_GRID_CONSTANT
#endif

// Programmatic dependent launch (CUDA, sm_90 and newer): a kernel launched with the
// programmatic-serialization attribute may start while the kernel before it in the stream is
// still finishing; this waits until that kernel has completed and its memory is visible. Every
// entry point calls it before it reads or writes anything an earlier launch may touch. A no-op
// when the launch did not ask for it, before sm_90, and on HIP.
OXCCL_DEVICE void oxccl_grid_dependency_wait() {
#if defined(OXCCL_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Warp (CUDA) or wavefront (AMD) width. Kept symbolic: CDNA is wave64, RDNA is wave32.
#if defined(OXCCL_CUDA)
#define OXCCL_WARP_SIZE 32
#else
#define OXCCL_WARP_SIZE warpSize
#endif

// ---------------------------------------------------------------------------------------------
// Shuffles (whole warp participates).
// ---------------------------------------------------------------------------------------------

OXCCL_DEVICE int oxccl_shfl(int v, int src_lane) {
#if defined(OXCCL_CUDA)
  return __shfl_sync(0xffffffffu, v, src_lane);
#else
  return __shfl(v, src_lane);
#endif
}

OXCCL_DEVICE int oxccl_shfl_xor(int v, int lane_mask) {
#if defined(OXCCL_CUDA)
  return __shfl_xor_sync(0xffffffffu, v, lane_mask);
#else
  return __shfl_xor(v, lane_mask);
#endif
}

// ---------------------------------------------------------------------------------------------
// Memory ordering. Connection counters and flags are shared with other GPUs and with the host,
// so every synchronising access is at system scope.
// ---------------------------------------------------------------------------------------------

OXCCL_DEVICE uint64_t oxccl_load_acquire_sys(const volatile uint64_t* p) {
#if defined(OXCCL_CUDA)
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
#else
  return __atomic_load_n(const_cast<const uint64_t*>(p), __ATOMIC_ACQUIRE);
#endif
}

OXCCL_DEVICE void oxccl_store_release_sys(volatile uint64_t* p, uint64_t v) {
#if defined(OXCCL_CUDA)
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#else
  __atomic_store_n(const_cast<uint64_t*>(p), v, __ATOMIC_RELEASE);
#endif
}

// Relaxed store of a counter another agent reads; orders nothing before it.
OXCCL_DEVICE void oxccl_store_relaxed_sys(volatile uint64_t* p, uint64_t v) {
#if defined(OXCCL_CUDA)
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
#else
  __atomic_store_n(const_cast<uint64_t*>(p), v, __ATOMIC_RELAXED);
#endif
}

// Relaxed read of a flag another agent (the host) may write at any time.
OXCCL_DEVICE uint32_t oxccl_load_relaxed_sys(const volatile uint32_t* p) {
#if defined(OXCCL_CUDA)
  uint32_t v;
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
#else
  return __atomic_load_n(const_cast<const uint32_t*>(p), __ATOMIC_RELAXED);
#endif
}

// Orders this thread's earlier writes before its later ones for every observer (GPUs and host).
OXCCL_DEVICE void oxccl_fence_system() { __threadfence_system(); }

// Block-wide barrier.
OXCCL_DEVICE void oxccl_block_sync() { __syncthreads(); }

// ---------------------------------------------------------------------------------------------
// 16-byte vectors: the unit of the vectorised copy and reduce loops.
// ---------------------------------------------------------------------------------------------

struct alignas(16) OxcclPack16 {
  uint64_t lo;
  uint64_t hi;
};

OXCCL_DEVICE OxcclPack16 oxccl_load16(const void* p) {
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  OxcclPack16 r;
  r.lo = (uint64_t)v.x | ((uint64_t)v.y << 32);
  r.hi = (uint64_t)v.z | ((uint64_t)v.w << 32);
  return r;
}

OXCCL_DEVICE void oxccl_store16(void* p, OxcclPack16 v) {
  uint4 u;
  u.x = (uint32_t)v.lo;
  u.y = (uint32_t)(v.lo >> 32);
  u.z = (uint32_t)v.hi;
  u.w = (uint32_t)(v.hi >> 32);
  *reinterpret_cast<uint4*>(p) = u;
}

// ---------------------------------------------------------------------------------------------
// LL packets: 16 bytes {data lo 4 B, flag, data hi 4 B, flag}. Each 8-byte half carries its own
// flag, so a packet is valid once both halves show the expected flag, whatever order or
// granularity the link delivers them in; no fence is needed between data and signal.
// ---------------------------------------------------------------------------------------------

// Stores one packet of `data` with `flag` into a peer's (or our own) LL slot.
OXCCL_DEVICE void oxccl_ll_store(void* p, uint64_t data, uint32_t flag) {
#if defined(OXCCL_CUDA)
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"((uint32_t)data),
               "r"(flag), "r"((uint32_t)(data >> 32)), "r"(flag)
               : "memory");
#else
  volatile uint64_t* q = reinterpret_cast<volatile uint64_t*>(p);
  q[0] = (uint64_t)(uint32_t)data | ((uint64_t)flag << 32);
  q[1] = (data >> 32) | ((uint64_t)flag << 32);
#endif
}

// Reads one packet; true (and its data in *data) when both halves carry `flag`.
OXCCL_DEVICE bool oxccl_ll_try_load(const void* p, uint32_t flag, uint64_t* data) {
#if defined(OXCCL_CUDA)
  uint32_t d0, f0, d1, f1;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(d0), "=r"(f0), "=r"(d1), "=r"(f1)
               : "l"(p)
               : "memory");
#else
  const volatile uint64_t* q = reinterpret_cast<const volatile uint64_t*>(p);
  const uint64_t lo = q[0], hi = q[1];
  const uint32_t d0 = (uint32_t)lo, f0 = (uint32_t)(lo >> 32);
  const uint32_t d1 = (uint32_t)hi, f1 = (uint32_t)(hi >> 32);
#endif
  *data = (uint64_t)d0 | ((uint64_t)d1 << 32);
  return f0 == flag && f1 == flag;
}

// ---------------------------------------------------------------------------------------------
// 8- and 16-bit floating-point element types. Kernels move them as raw bits (uint16_t/uint8_t)
// and only convert to float to compute, so the native types appear in exactly these functions.
// All float -> narrow conversions round to nearest even; fp8 saturates to the largest finite
// value and keeps NaN (NVIDIA's __NV_SATFINITE), so both flavours produce identical bits.
// ---------------------------------------------------------------------------------------------

#if defined(OXCCL_CUDA)
typedef __half oxccl_half;
typedef __nv_bfloat16 oxccl_bf16;
typedef __nv_fp8_e4m3 oxccl_fp8e4m3;
typedef __nv_fp8_e5m2 oxccl_fp8e5m2;
#else
typedef __half oxccl_half;
#if defined(OXCCL_HIP_NATIVE_BF16)
typedef __hip_bfloat16 oxccl_bf16;
#else
struct oxccl_bf16 {
  uint16_t bits;
};
#endif
struct oxccl_fp8e4m3 {
  uint8_t bits;
};
struct oxccl_fp8e5m2 {
  uint8_t bits;
};
#endif

OXCCL_HOST_DEVICE uint32_t oxccl_float_bits(float f) {
  union {
    float f;
    uint32_t u;
  } c;
  c.f = f;
  return c.u;
}

OXCCL_HOST_DEVICE float oxccl_bits_float(uint32_t u) {
  union {
    float f;
    uint32_t u;
  } c;
  c.u = u;
  return c.f;
}

// Software bfloat16 codec: HIP 5.2 has no native type; CUDA builds use it only in host tests.
OXCCL_HOST_DEVICE float oxccl_sw_bf16_to_float(uint16_t b) {
  // bf16 is the top half of a binary32, so widening is exact.
  return oxccl_bits_float((uint32_t)b << 16);
}

OXCCL_HOST_DEVICE uint16_t oxccl_sw_float_to_bf16(float f) {
  const uint32_t u = oxccl_float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    // Keep sign and payload top bits, force quiet so truncation cannot turn NaN into Inf.
    return (uint16_t)((u >> 16) | 0x0040u);
  }
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)((u + rounding) >> 16);
}

// Through __half_raw, whose conversions are host+device in both toolkits (HIP 5.2's
// __ushort_as_half is device-only, and the host tests call these).
OXCCL_HOST_DEVICE float oxccl_f16_to_float(uint16_t h) {
  __half_raw r;
  r.x = h;
  return __half2float(__half(r));
}

OXCCL_HOST_DEVICE uint16_t oxccl_float_to_f16(float f) {
  const __half_raw r = __float2half_rn(f);
  return r.x;
}

OXCCL_HOST_DEVICE float oxccl_bf16_to_float(uint16_t b) {
#if defined(OXCCL_CUDA)
  return __bfloat162float(__ushort_as_bfloat16(b));
#else
  return oxccl_sw_bf16_to_float(b);
#endif
}

OXCCL_HOST_DEVICE uint16_t oxccl_float_to_bf16(float f) {
#if defined(OXCCL_CUDA)
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
#else
  return oxccl_sw_float_to_bf16(f);
#endif
}

// Out of line: inlined into the unrolled loops of every instantiation, the software codec
// dominated compile time (sm_75/sm_80 and HIP) for types rarely reduced on those GPUs.
#define OXCCL_SW_CODEC __host__ __device__ __noinline__

// Generic software fp8 codec, used by HIP (no native fp8 in ROCm 5.2) and by CUDA below sm_89,
// which has no fp8 conversion instructions: cuda_fp8.h's own emulation goes through double and
// multiplies compile time for those targets about tenfold. Host tests check it bit for bit
// against NVIDIA's implementation. MAN: mantissa bits, BIAS: exponent bias, MAX_CODE: encoding of the largest finite value,
// IEEE_SPECIALS: the format has Inf (e5m2) instead of a single NaN pattern per sign (e4m3).
template <int MAN, int BIAS, uint32_t MAX_CODE, bool IEEE_SPECIALS>
OXCCL_SW_CODEC float oxccl_fp8_decode(uint8_t v) {
  const uint32_t sign = (uint32_t)(v & 0x80u) << 24;
  const uint32_t exp = (v & 0x7fu) >> MAN;
  const uint32_t man = v & ((1u << MAN) - 1u);
  const uint32_t exp_all = (1u << (7 - MAN)) - 1u;
  if (IEEE_SPECIALS && exp == exp_all) {
    return oxccl_bits_float(sign | 0x7f800000u | (man ? 0x00400000u : 0u));
  }
  if (!IEEE_SPECIALS && (v & 0x7fu) == 0x7fu) {
    return oxccl_bits_float(sign | 0x7fc00000u);
  }
  if (exp == 0) {
    // Subnormal: man * 2^(1 - BIAS - MAN); exact in binary32.
    const float mag = (float)man * oxccl_bits_float((uint32_t)(127 + 1 - BIAS - MAN) << 23);
    return sign ? -mag : mag;
  }
  return oxccl_bits_float(sign | ((exp - BIAS + 127u) << 23) | (man << (23 - MAN)));
}

template <int MAN, int BIAS, uint32_t MAX_CODE>
OXCCL_SW_CODEC uint8_t oxccl_fp8_encode_satfinite(float f) {
  const uint32_t u = oxccl_float_bits(f);
  const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) {
    return (uint8_t)(sign | 0x7fu);
  }
  // Largest finite fp8 value as binary32 bits. Rounding never carries a value below it above it,
  // and every value at or above it (Inf included) saturates, so one compare handles overflow.
  const uint32_t max_bits = ((((MAX_CODE >> MAN) & 0x1fu) - BIAS + 127u) << 23) |
                            ((MAX_CODE & ((1u << MAN) - 1u)) << (23 - MAN));
  if (a >= max_bits) {
    return (uint8_t)(sign | MAX_CODE);
  }
  const uint32_t min_normal_bits = (uint32_t)(127 + 1 - BIAS) << 23;
  if (a < min_normal_bits) {
    // Scale so one fp8 subnormal step is 1.0 (exact: a power of two), then round half to even.
    // A result of 2^MAN is the smallest normal, whose encoding is the same integer.
    const float scaled = oxccl_bits_float(a) * oxccl_bits_float((uint32_t)(127 + BIAS - 1 + MAN) << 23);
    return (uint8_t)(sign | (uint8_t)rintf(scaled));
  }
  const uint32_t drop = 23 - MAN;
  const uint32_t rounded = (a + ((1u << (drop - 1)) - 1u) + ((a >> drop) & 1u)) >> drop;
  return (uint8_t)(sign | (uint8_t)(rounded - ((uint32_t)(127 - BIAS) << MAN)));
}

OXCCL_HOST_DEVICE float oxccl_e4m3_to_float(uint8_t v) {
#if defined(OXCCL_CUDA) && (!defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 890)
  return __half2float(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)v, __NV_E4M3)));
#else
  return oxccl_fp8_decode<3, 7, 0x7eu, false>(v);
#endif
}

OXCCL_HOST_DEVICE uint8_t oxccl_float_to_e4m3(float f) {
#if defined(OXCCL_CUDA) && (!defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 890)
  return (uint8_t)__nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3);
#else
  return oxccl_fp8_encode_satfinite<3, 7, 0x7eu>(f);
#endif
}

OXCCL_HOST_DEVICE float oxccl_e5m2_to_float(uint8_t v) {
#if defined(OXCCL_CUDA) && (!defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 890)
  return __half2float(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)v, __NV_E5M2)));
#else
  return oxccl_fp8_decode<2, 15, 0x7bu, true>(v);
#endif
}

OXCCL_HOST_DEVICE uint8_t oxccl_float_to_e5m2(float f) {
#if defined(OXCCL_CUDA) && (!defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 890)
  return (uint8_t)__nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E5M2);
#else
  return oxccl_fp8_encode_satfinite<2, 15, 0x7bu>(f);
#endif
}
