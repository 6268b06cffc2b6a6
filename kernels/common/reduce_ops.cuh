// Element-wise arithmetic of the reductions, for the 12 NCCL data types.
//
// Semantics (the host backend must match them bit for bit):
// - integers wrap (sum and product are computed modulo 2^bits, signed types included);
// - min/max of floats ignore a NaN operand (IEEE minNum/maxNum, like fminf/fmaxf);
// - half, bfloat16 and fp8 compute in float and round once per combine, to nearest even (fp8:
//   saturating to the largest finite value); float and double compute natively;
// - pre-scale multiplies by a scalar of the element type, with the same rules as product;
// - post-division divides by the rank count: integers truncate toward zero, floats round once.
#pragma once

#include "oxccl/gpu_port.h"
#include "oxccl/work.h"

namespace oxccl {

// One tag per ncclDataType_t. `Bits` is what sits in memory; `kCode` the NCCL enum value.
template <class B, int CODE>
struct IntElem {
  typedef B Bits;
  static constexpr int kCode = CODE;
};

struct I8 : IntElem<int8_t, 0> {};
struct U8 : IntElem<uint8_t, 1> {};
struct I32 : IntElem<int32_t, 2> {};
struct U32 : IntElem<uint32_t, 3> {};
struct I64 : IntElem<int64_t, 4> {};
struct U64 : IntElem<uint64_t, 5> {};
struct F16 {
  typedef uint16_t Bits;
  static constexpr int kCode = 6;
  static OXCCL_HOST_DEVICE float to_f(Bits b) { return oxccl_f16_to_float(b); }
  static OXCCL_HOST_DEVICE Bits from_f(float f) { return oxccl_float_to_f16(f); }
};
struct F32 {
  typedef float Bits;
  static constexpr int kCode = 7;
};
struct F64 {
  typedef double Bits;
  static constexpr int kCode = 8;
};
struct BF16 {
  typedef uint16_t Bits;
  static constexpr int kCode = 9;
  static OXCCL_HOST_DEVICE float to_f(Bits b) { return oxccl_bf16_to_float(b); }
  static OXCCL_HOST_DEVICE Bits from_f(float f) { return oxccl_float_to_bf16(f); }
};
struct E4M3 {
  typedef uint8_t Bits;
  static constexpr int kCode = 10;
  static OXCCL_HOST_DEVICE float to_f(Bits b) { return oxccl_e4m3_to_float(b); }
  static OXCCL_HOST_DEVICE Bits from_f(float f) { return oxccl_float_to_e4m3(f); }
};
struct E5M2 {
  typedef uint8_t Bits;
  static constexpr int kCode = 11;
  static OXCCL_HOST_DEVICE float to_f(Bits b) { return oxccl_e5m2_to_float(b); }
  static OXCCL_HOST_DEVICE Bits from_f(float f) { return oxccl_float_to_e5m2(f); }
};

// Unsigned type of the same width, for wrapping arithmetic without signed-overflow UB.
template <class T>
struct Unsigned;
template <>
struct Unsigned<int8_t> {
  typedef uint32_t T;  // promoted; truncated back on return
};
template <>
struct Unsigned<uint8_t> {
  typedef uint32_t T;
};
template <>
struct Unsigned<int32_t> {
  typedef uint32_t T;
};
template <>
struct Unsigned<uint32_t> {
  typedef uint32_t T;
};
template <>
struct Unsigned<int64_t> {
  typedef uint64_t T;
};
template <>
struct Unsigned<uint64_t> {
  typedef uint64_t T;
};

// Arithmetic per element kind. The default handles integers.
template <class E>
struct Arith {
  typedef typename E::Bits T;
  typedef typename Unsigned<T>::T U;
  static OXCCL_HOST_DEVICE T sum(T a, T b) { return (T)(U)((U)a + (U)b); }
  static OXCCL_HOST_DEVICE T prod(T a, T b) { return (T)(U)((U)a * (U)b); }
  static OXCCL_HOST_DEVICE T max(T a, T b) { return a < b ? b : a; }
  static OXCCL_HOST_DEVICE T min(T a, T b) { return b < a ? b : a; }
  static OXCCL_HOST_DEVICE T div(T a, uint32_t n) {
    // |a / n| <= |a|, so dividing in 64 bits and narrowing is exact for every width.
    if (T(-1) < T(0)) {
      return (T)((int64_t)a / (int64_t)n);
    }
    return (T)((uint64_t)a / (uint64_t)n);
  }
};

// Native floating point.
template <>
struct Arith<F32> {
  static OXCCL_HOST_DEVICE float sum(float a, float b) { return a + b; }
  static OXCCL_HOST_DEVICE float prod(float a, float b) { return a * b; }
  static OXCCL_HOST_DEVICE float max(float a, float b) { return fmaxf(a, b); }
  static OXCCL_HOST_DEVICE float min(float a, float b) { return fminf(a, b); }
  static OXCCL_HOST_DEVICE float div(float a, uint32_t n) { return a / (float)n; }
};
template <>
struct Arith<F64> {
  static OXCCL_HOST_DEVICE double sum(double a, double b) { return a + b; }
  static OXCCL_HOST_DEVICE double prod(double a, double b) { return a * b; }
  static OXCCL_HOST_DEVICE double max(double a, double b) { return fmax(a, b); }
  static OXCCL_HOST_DEVICE double min(double a, double b) { return fmin(a, b); }
  static OXCCL_HOST_DEVICE double div(double a, uint32_t n) { return a / (double)n; }
};

// Narrow floats: widen to float, compute, round once. float's 24-bit significand is at least
// twice as wide as any of these plus two, so the result equals the correctly rounded one.
template <class E>
struct WidenedFloat {
  typedef typename E::Bits T;
  static OXCCL_HOST_DEVICE T sum(T a, T b) { return E::from_f(E::to_f(a) + E::to_f(b)); }
  static OXCCL_HOST_DEVICE T prod(T a, T b) { return E::from_f(E::to_f(a) * E::to_f(b)); }
  static OXCCL_HOST_DEVICE T max(T a, T b) { return E::from_f(fmaxf(E::to_f(a), E::to_f(b))); }
  static OXCCL_HOST_DEVICE T min(T a, T b) { return E::from_f(fminf(E::to_f(a), E::to_f(b))); }
  static OXCCL_HOST_DEVICE T div(T a, uint32_t n) { return E::from_f(E::to_f(a) / (float)n); }
};
template <>
struct Arith<F16> : WidenedFloat<F16> {};
template <>
struct Arith<BF16> : WidenedFloat<BF16> {};
template <>
struct Arith<E4M3> : WidenedFloat<E4M3> {};
template <>
struct Arith<E5M2> : WidenedFloat<E5M2> {};

// The combiner as a compile-time parameter, so the inner loops carry no per-element switch.
template <class E, unsigned OP>
struct Combine {
  typedef typename E::Bits T;
  static OXCCL_HOST_DEVICE T apply(T a, T b) {
    if (OP == OXCCL_OP_SUM) return Arith<E>::sum(a, b);
    if (OP == OXCCL_OP_PROD) return Arith<E>::prod(a, b);
    if (OP == OXCCL_OP_MAX) return Arith<E>::max(a, b);
    return Arith<E>::min(a, b);
  }
};

// Reads the pre-scale scalar once per launch.
template <class E>
OXCCL_DEVICE typename E::Bits load_pre_scale(const OxcclLaunchArgs& args) {
  typedef typename E::Bits T;
  union {
    uint64_t u;
    T t;
  } c;
  c.u = args.pre_scale_bytes;  // little-endian: the element is in the low bytes
  if (args.flags & OXCCL_ARGS_PRE_SCALE_PTR) {
    c.t = *reinterpret_cast<const T*>(args.pre_scale_ptr);
  }
  return c.t;
}

}  // namespace oxccl
