// Host-side checks of the portability header and the reduction arithmetic, compiled by nvcc or
// hipcc and run on the CPU (no GPU needed).
//
// The HIP build converts bfloat16 and fp8 with oxccl's own bit arithmetic, which no AMD GPU here
// can run; the CUDA build uses NVIDIA's conversions. Both are __host__ __device__, so comparing
// them on the host proves the two flavours produce the same bits. The arithmetic checks pin the
// semantics documented in reduce_ops.cuh.
//
// The backends' cargo tests build and run it with the compiler their build script used:
//   nvcc -std=c++17 -O2 -L<cuda>/lib -Ikernels/common kernels/tests/host_codec_test.cu
//   HIP_PLATFORM=amd hipcc -std=c++17 -O2 -x hip --offload-arch=gfx90a -Ikernels/common \
//     kernels/tests/host_codec_test.cu
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "reduce_ops.cuh"

static int failures = 0;

#define CHECK(cond, ...)                     \
  do {                                       \
    if (!(cond)) {                           \
      if (++failures <= 20) {                \
        fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
        fprintf(stderr, __VA_ARGS__);        \
        fprintf(stderr, "\n");               \
      }                                      \
    }                                        \
  } while (0)

static bool same_float(float a, float b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
  return oxccl_float_bits(a) == oxccl_float_bits(b);
}

static bool is_nan_e4m3(uint8_t v) { return (v & 0x7f) == 0x7f; }
static bool is_nan_e5m2(uint8_t v) { return (v & 0x7f) > 0x7c; }

// Floats whose rounding is interesting: every combination of sign, exponent and top mantissa
// bits, with the bits below the narrow format's last kept bit set to each rounding case.
template <class F>
static void for_interesting_floats(int keep_bits, F f) {
  const int drop = 23 - keep_bits;
  const uint32_t half = 1u << (drop - 1);
  const uint32_t lows[] = {0u, 1u, half - 1u, half, half + 1u, (1u << drop) - 1u};
  for (uint32_t hi = 0; hi < (1u << (9 + keep_bits)); ++hi) {
    for (uint32_t low : lows) f((hi << drop) | low);
  }
  // Plus arbitrary bit patterns (a fixed LCG, so failures reproduce).
  uint32_t x = 12345u;
  for (int i = 0; i < (1 << 22); ++i) {
    x = x * 1664525u + 1013904223u;
    f(x);
  }
}

#if defined(OXCCL_CUDA)
static void test_bf16() {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    CHECK(same_float(oxccl_sw_bf16_to_float((uint16_t)b), oxccl_bf16_to_float((uint16_t)b)),
          "bf16 decode %04x", b);
  }
  for_interesting_floats(7, [](uint32_t u) {
    const float f = oxccl_bits_float(u);
    const uint16_t sw = oxccl_sw_float_to_bf16(f);
    const uint16_t nv = oxccl_float_to_bf16(f);
    if (isnan(f)) {
      CHECK(isnan(oxccl_sw_bf16_to_float(sw)) && isnan(oxccl_bf16_to_float(nv)), "bf16 NaN %08x", u);
    } else {
      CHECK(sw == nv, "bf16 encode %08x: ours %04x nvidia %04x", u, sw, nv);
    }
  });
}

template <int MAN, int BIAS, uint32_t MAX_CODE, bool IEEE>
static void test_fp8(const char* name, __nv_fp8_interpretation_t kind, bool (*is_nan)(uint8_t)) {
  for (uint32_t v = 0; v < 256; ++v) {
    const float ours = oxccl_fp8_decode<MAN, BIAS, MAX_CODE, IEEE>((uint8_t)v);
    const float nv = __half2float(__half(__nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)v, kind)));
    CHECK(same_float(ours, nv), "%s decode %02x: ours %g nvidia %g", name, v, ours, nv);
  }
  for_interesting_floats(MAN, [&](uint32_t u) {
    const float f = oxccl_bits_float(u);
    const uint8_t ours = oxccl_fp8_encode_satfinite<MAN, BIAS, MAX_CODE>(f);
    const uint8_t nv = (uint8_t)__nv_cvt_float_to_fp8(f, __NV_SATFINITE, kind);
    if (isnan(f)) {
      CHECK(is_nan(ours) && is_nan(nv), "%s NaN %08x: ours %02x nvidia %02x", name, u, ours, nv);
    } else {
      CHECK(ours == nv, "%s encode %08x (%g): ours %02x nvidia %02x", name, u, f, ours, nv);
    }
  });
}

#endif  // OXCCL_CUDA

// Properties that hold in both flavours (the HIP build has no NVIDIA reference to compare with).
static void test_codec_properties() {
  for (uint32_t v = 0; v < 256; ++v) {
    const float e4 = oxccl_e4m3_to_float((uint8_t)v);
    const float e5 = oxccl_e5m2_to_float((uint8_t)v);
    if (is_nan_e4m3((uint8_t)v)) {
      CHECK(isnan(e4), "e4m3 %02x is NaN", v);
    } else {
      CHECK(oxccl_float_to_e4m3(e4) == v || (v == 0x80 && e4 == 0.0f), "e4m3 round trip %02x", v);
    }
    if (is_nan_e5m2((uint8_t)v)) {
      CHECK(isnan(e5), "e5m2 %02x is NaN", v);
    } else if ((v & 0x7f) == 0x7c) {
      // Saturating encode maps infinity to the largest finite value.
      CHECK(isinf(e5) && oxccl_float_to_e5m2(e5) == (v & 0x80) + 0x7b, "e5m2 inf %02x", v);
    } else {
      CHECK(oxccl_float_to_e5m2(e5) == v, "e5m2 round trip %02x", v);
    }
  }
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = oxccl_bf16_to_float((uint16_t)b);
    CHECK(isnan(f) || oxccl_float_to_bf16(f) == b, "bf16 round trip %04x", b);
    const float h = oxccl_f16_to_float((uint16_t)b);
    CHECK(isnan(h) || oxccl_float_to_f16(h) == b, "f16 round trip %04x", b);
  }
  CHECK(oxccl_e4m3_to_float(0x7e) == 448.0f && oxccl_e5m2_to_float(0x7b) == 57344.0f, "fp8 max");
  CHECK(oxccl_e4m3_to_float(0x01) == 0.001953125f, "e4m3 min subnormal");
  CHECK(oxccl_e5m2_to_float(0x01) == 1.52587890625e-05f, "e5m2 min subnormal");
  CHECK(oxccl_float_to_e4m3(1e9f) == 0x7e && oxccl_float_to_e4m3(-INFINITY) == 0xfe, "e4m3 sat");
  CHECK(oxccl_float_to_e4m3(0.0009765625f) == 0x00, "e4m3 half of min subnormal ties to even");
  CHECK(oxccl_float_to_e4m3(0.0029296875f) == 0x02, "e4m3 1.5 subnormal steps ties to even");
  CHECK(oxccl_float_to_bf16(1.00390625f) == 0x3f80, "bf16 tie to even");
  CHECK(oxccl_float_to_bf16(1.01171875f) == 0x3f82, "bf16 tie to even (odd)");
}

static void test_arith() {
  using namespace oxccl;
  // Integers wrap, signed included.
  CHECK(Arith<I8>::sum(127, 1) == -128, "i8 sum wraps");
  CHECK(Arith<I8>::prod(-128, -1) == -128, "i8 prod wraps");
  CHECK(Arith<U8>::sum(255, 2) == 1, "u8 sum wraps");
  CHECK(Arith<I32>::sum(2147483647, 1) == (-2147483647 - 1), "i32 sum wraps");
  CHECK(Arith<I64>::prod(INT64_MIN, -1) == INT64_MIN, "i64 prod wraps");
  CHECK(Arith<U64>::sum(~0ull, 1) == 0, "u64 sum wraps");
  CHECK(Arith<I32>::max(-5, 3) == 3 && Arith<I32>::min(-5, 3) == -5, "i32 min/max");
  CHECK(Arith<U32>::max(0xffffffffu, 1) == 0xffffffffu, "u32 max is unsigned");
  // Post-division truncates toward zero, in the element's width.
  CHECK(Arith<I8>::div(-7, 2) == -3, "i8 div");
  CHECK(Arith<I8>::div(-128, 3000000000u) == 0, "i8 div by a large n");
  CHECK(Arith<U64>::div(~0ull, 3) == 0x5555555555555555ull, "u64 div");
  CHECK(Arith<I64>::div(INT64_MIN, 1) == INT64_MIN, "i64 div by 1");
  // Float min/max drop a NaN operand.
  CHECK(Arith<F32>::max(NAN, 1.0f) == 1.0f && Arith<F32>::min(2.0f, NAN) == 2.0f, "f32 NaN min/max");
  CHECK(Arith<F64>::max(NAN, -1.0) == -1.0, "f64 NaN max");
  // Narrow floats round once, fp8 saturates.
  CHECK(Arith<E4M3>::sum(oxccl_float_to_e4m3(448.0f), oxccl_float_to_e4m3(448.0f)) == 0x7e,
        "e4m3 sum saturates");
  CHECK(Arith<E5M2>::sum(oxccl_float_to_e5m2(57344.0f), oxccl_float_to_e5m2(57344.0f)) == 0x7b,
        "e5m2 sum saturates");
  CHECK(Arith<F16>::sum(oxccl_float_to_f16(1.0f), oxccl_float_to_f16(0.00048828125f)) == 0x3c00,
        "f16 tie rounds to even");
  CHECK(Arith<BF16>::div(oxccl_float_to_bf16(3.0f), 2) == oxccl_float_to_bf16(1.5f), "bf16 div");
  CHECK(Arith<F16>::max(0x7e00, oxccl_float_to_f16(2.0f)) == oxccl_float_to_f16(2.0f), "f16 NaN max");
  // Combine dispatches on the compile-time op.
  CHECK((Combine<I32, OXCCL_OP_SUM>::apply(2, 3) == 5), "combine sum");
  CHECK((Combine<I32, OXCCL_OP_PROD>::apply(2, 3) == 6), "combine prod");
  CHECK((Combine<I32, OXCCL_OP_MAX>::apply(2, 3) == 3), "combine max");
  CHECK((Combine<I32, OXCCL_OP_MIN>::apply(2, 3) == 2), "combine min");
}

int main() {
#if defined(OXCCL_CUDA)
  test_bf16();
  test_fp8<3, 7, 0x7eu, false>("e4m3", __NV_E4M3, is_nan_e4m3);
  test_fp8<2, 15, 0x7bu, true>("e5m2", __NV_E5M2, is_nan_e5m2);
#endif
  test_codec_properties();
  test_arith();
  if (failures) {
    fprintf(stderr, "host_codec_test: %d failures\n", failures);
    return 1;
  }
  printf("host_codec_test: ok\n");
  return 0;
}
