//! Host reduction arithmetic for every NCCL data type, with NCCL's device semantics.
//!
//! - Integers: sum and product wrap (two's complement); min/max compare by value.
//! - float32/float64: native IEEE arithmetic; min/max follow `fminf`/`fmaxf` (a NaN operand
//!   loses to a number), as NCCL's kernels do.
//! - float16, bfloat16, fp8: each combine widens to f32, operates, and rounds back once to
//!   nearest-even. For these formats that equals the correctly rounded result (f32 has more than
//!   twice their precision), which is also what NCCL's native half/bf16/fp8 kernels compute.
//! - fp8 results saturate to the largest finite value (CUDA's `__NV_SATFINITE`, which is how
//!   NCCL converts back), so e5m2 infinities become ±57344 after a combine; NaN stays NaN.
//!
//! Buffers are raw little-endian bytes holding whole elements. The hot loops go through
//! `<[u8]>::as_chunks_mut` into fixed-size arrays so that, after inlining, the compiler sees
//! plain typed loops without bounds checks and vectorises them.

mod minifloat;

use crate::datatype::{DataType, ReduceOp, Scalar};
use half::{f16, slice::HalfFloatSliceExt};
use minifloat::{BF16, E4M3, E4M3_TO_F32, E5M2, E5M2_TO_F32, F16};

/// A fixed-width little-endian element that computes in its own type.
trait Native<const N: usize>: Copy {
    fn load(b: [u8; N]) -> Self;
    fn store(self) -> [u8; N];
}

macro_rules! native {
    ($($t:ty => $n:literal),*) => {$(
        impl Native<$n> for $t {
            #[inline(always)]
            fn load(b: [u8; $n]) -> Self {
                <$t>::from_le_bytes(b)
            }
            #[inline(always)]
            fn store(self) -> [u8; $n] {
                self.to_le_bytes()
            }
        }
    )*};
}
native!(i8 => 1, u8 => 1, i32 => 4, u32 => 4, i64 => 8, u64 => 8, f32 => 4, f64 => 8);

/// `acc[i] = f(acc[i], other[i])` over native elements.
#[inline(always)]
fn zip_native<T: Native<N>, const N: usize>(acc: &mut [u8], other: &[u8], f: impl Fn(T, T) -> T) {
    let (acc, _) = acc.as_chunks_mut::<N>();
    let (other, _) = other.as_chunks::<N>();
    for (a, b) in acc.iter_mut().zip(other) {
        *a = f(T::load(*a), T::load(*b)).store();
    }
}

/// `buf[i] = f(buf[i])` over native elements.
#[inline(always)]
fn map_native<T: Native<N>, const N: usize>(buf: &mut [u8], f: impl Fn(T) -> T) {
    let (buf, _) = buf.as_chunks_mut::<N>();
    for a in buf {
        *a = f(T::load(*a)).store();
    }
}

/// A narrow float format that computes in f32 and converts a block at a time, so that `half`'s
/// vectorised F16C slice conversions can be used where the CPU has them.
trait Narrow<const N: usize> {
    fn decode(src: &[[u8; N]], dst: &mut [f32]);
    fn encode(src: &[f32], dst: &mut [[u8; N]]);
    /// Exact decode of one code, for scalars and test support.
    fn to_f64(b: [u8; N]) -> f64;
    /// Correctly rounded encode of one f64 (no double rounding through f32).
    fn from_f64(v: f64) -> [u8; N];
}

struct Float16;
struct Bfloat16;
struct Fp8E4M3;
struct Fp8E5M2;

/// Elements per conversion block: big enough to amortise the per-block dispatch, small enough
/// to keep the f32 scratch on the stack and in L1.
const BLOCK: usize = 256;

impl Narrow<2> for Float16 {
    #[inline]
    fn decode(src: &[[u8; 2]], dst: &mut [f32]) {
        let mut h = [f16::ZERO; BLOCK];
        let h = &mut h[..src.len()];
        for (h, b) in h.iter_mut().zip(src) {
            *h = f16::from_bits(u16::from_le_bytes(*b));
        }
        h.convert_to_f32_slice(dst);
    }
    #[inline]
    fn encode(src: &[f32], dst: &mut [[u8; 2]]) {
        let mut h = [f16::ZERO; BLOCK];
        let h = &mut h[..src.len()];
        h.convert_from_f32_slice(src);
        for (d, h) in dst.iter_mut().zip(h.iter()) {
            *d = h.to_bits().to_le_bytes();
        }
    }
    fn to_f64(b: [u8; 2]) -> f64 {
        f16::from_bits(u16::from_le_bytes(b)).to_f64()
    }
    fn from_f64(v: f64) -> [u8; 2] {
        F16.encode(v).to_le_bytes()
    }
}

/// bfloat16 → f32 is a shift, done inline so it vectorises.
#[inline(always)]
fn bf16_to_f32(b: [u8; 2]) -> f32 {
    f32::from_bits((u16::from_le_bytes(b) as u32) << 16)
}

/// f32 → bfloat16 with round-to-nearest-even, branch-free so it vectorises; NaN is quietened
/// rather than letting the rounding carry turn it into infinity.
#[inline(always)]
fn f32_to_bf16(x: f32) -> [u8; 2] {
    let bits = x.to_bits();
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) >> 16;
    let nan = (bits >> 16) | 0x40;
    let out = if x.is_nan() { nan } else { rounded };
    (out as u16).to_le_bytes()
}

impl Narrow<2> for Bfloat16 {
    #[inline]
    fn decode(src: &[[u8; 2]], dst: &mut [f32]) {
        for (d, b) in dst.iter_mut().zip(src) {
            *d = bf16_to_f32(*b);
        }
    }
    #[inline]
    fn encode(src: &[f32], dst: &mut [[u8; 2]]) {
        for (d, x) in dst.iter_mut().zip(src) {
            *d = f32_to_bf16(*x);
        }
    }
    fn to_f64(b: [u8; 2]) -> f64 {
        bf16_to_f32(b) as f64
    }
    fn from_f64(v: f64) -> [u8; 2] {
        BF16.encode(v).to_le_bytes()
    }
}

macro_rules! fp8 {
    ($ty:ident, $fmt:ident, $table:ident) => {
        impl Narrow<1> for $ty {
            #[inline]
            fn decode(src: &[[u8; 1]], dst: &mut [f32]) {
                for (d, b) in dst.iter_mut().zip(src) {
                    *d = $table[b[0] as usize];
                }
            }
            #[inline]
            fn encode(src: &[f32], dst: &mut [[u8; 1]]) {
                for (d, x) in dst.iter_mut().zip(src) {
                    // Widening to f64 is exact, so this is still a single rounding.
                    *d = [$fmt.encode(*x as f64) as u8];
                }
            }
            fn to_f64(b: [u8; 1]) -> f64 {
                $table[b[0] as usize] as f64
            }
            fn from_f64(v: f64) -> [u8; 1] {
                [$fmt.encode(v) as u8]
            }
        }
    };
}
fp8!(Fp8E4M3, E4M3, E4M3_TO_F32);
fp8!(Fp8E5M2, E5M2, E5M2_TO_F32);

/// `acc[i] = f(acc[i], other[i])` computed in f32, one rounding back per element.
#[inline(always)]
fn zip_narrow<C: Narrow<N>, const N: usize>(
    acc: &mut [u8],
    other: &[u8],
    f: impl Fn(f32, f32) -> f32,
) {
    let (acc, _) = acc.as_chunks_mut::<N>();
    let (other, _) = other.as_chunks::<N>();
    let (mut x, mut y) = ([0f32; BLOCK], [0f32; BLOCK]);
    for (a, b) in acc.chunks_mut(BLOCK).zip(other.chunks(BLOCK)) {
        let n = a.len().min(b.len());
        let (a, b, x, y) = (&mut a[..n], &b[..n], &mut x[..n], &mut y[..n]);
        C::decode(a, x);
        C::decode(b, y);
        for (x, y) in x.iter_mut().zip(y.iter()) {
            *x = f(*x, *y);
        }
        C::encode(x, a);
    }
}

/// `buf[i] = f(buf[i])` computed in f32.
#[inline(always)]
fn map_narrow<C: Narrow<N>, const N: usize>(buf: &mut [u8], f: impl Fn(f32) -> f32) {
    let (buf, _) = buf.as_chunks_mut::<N>();
    let mut x = [0f32; BLOCK];
    for a in buf.chunks_mut(BLOCK) {
        let x = &mut x[..a.len()];
        C::decode(a, x);
        for x in x.iter_mut() {
            *x = f(*x);
        }
        C::encode(x, a);
    }
}

fn accumulate_narrow<C: Narrow<N>, const N: usize>(op: ReduceOp, acc: &mut [u8], other: &[u8]) {
    match op {
        ReduceOp::Sum => zip_narrow::<C, N>(acc, other, |a, b| a + b),
        ReduceOp::Prod => zip_narrow::<C, N>(acc, other, |a, b| a * b),
        ReduceOp::Max => zip_narrow::<C, N>(acc, other, f32::max),
        ReduceOp::Min => zip_narrow::<C, N>(acc, other, f32::min),
    }
}

/// The first `N` bytes of a scalar, as one element.
fn scalar_bytes<const N: usize>(s: &Scalar) -> [u8; N] {
    let mut b = [0u8; N];
    b.copy_from_slice(&s.bytes[..N]);
    b
}

fn pre_scale_narrow<C: Narrow<N>, const N: usize>(buf: &mut [u8], s: &Scalar) {
    // Every narrow value is exact in f32, so the scalar loses nothing here.
    let s = C::to_f64(scalar_bytes::<N>(s)) as f32;
    map_narrow::<C, N>(buf, |x| x * s);
}

fn post_divide_narrow<C: Narrow<N>, const N: usize>(buf: &mut [u8], n: u32) {
    // In f64 and rounded straight to the narrow format: the f64 quotient of an 11-bit value by
    // a 32-bit integer can never sit on a narrow midpoint unless it is exactly one, so this is
    // correctly rounded for every `n`. Avg runs once per operation, so speed matters less here.
    let n = n as f64;
    let (buf, _) = buf.as_chunks_mut::<N>();
    for a in buf {
        *a = C::from_f64(C::to_f64(*a) / n);
    }
}

macro_rules! int_accumulate {
    ($t:ty, $n:literal, $op:expr, $acc:expr, $other:expr) => {
        match $op {
            ReduceOp::Sum => zip_native::<$t, $n>($acc, $other, <$t>::wrapping_add),
            ReduceOp::Prod => zip_native::<$t, $n>($acc, $other, <$t>::wrapping_mul),
            ReduceOp::Max => zip_native::<$t, $n>($acc, $other, <$t as Ord>::max),
            ReduceOp::Min => zip_native::<$t, $n>($acc, $other, <$t as Ord>::min),
        }
    };
}

macro_rules! float_accumulate {
    ($t:ty, $n:literal, $op:expr, $acc:expr, $other:expr) => {
        match $op {
            ReduceOp::Sum => zip_native::<$t, $n>($acc, $other, |a, b| a + b),
            ReduceOp::Prod => zip_native::<$t, $n>($acc, $other, |a, b| a * b),
            ReduceOp::Max => zip_native::<$t, $n>($acc, $other, <$t>::max),
            ReduceOp::Min => zip_native::<$t, $n>($acc, $other, <$t>::min),
        }
    };
}

/// `acc[i] = acc[i] ⊕ other[i]` for every element (slices hold whole elements, little-endian).
pub fn accumulate(dtype: DataType, op: ReduceOp, acc: &mut [u8], other: &[u8]) {
    debug_assert_eq!(acc.len(), other.len());
    debug_assert_eq!(acc.len() % dtype.size(), 0);
    match dtype {
        DataType::Int8 => int_accumulate!(i8, 1, op, acc, other),
        DataType::Uint8 => int_accumulate!(u8, 1, op, acc, other),
        DataType::Int32 => int_accumulate!(i32, 4, op, acc, other),
        DataType::Uint32 => int_accumulate!(u32, 4, op, acc, other),
        DataType::Int64 => int_accumulate!(i64, 8, op, acc, other),
        DataType::Uint64 => int_accumulate!(u64, 8, op, acc, other),
        DataType::Float32 => float_accumulate!(f32, 4, op, acc, other),
        DataType::Float64 => float_accumulate!(f64, 8, op, acc, other),
        DataType::Float16 => accumulate_narrow::<Float16, 2>(op, acc, other),
        DataType::Bfloat16 => accumulate_narrow::<Bfloat16, 2>(op, acc, other),
        DataType::Float8E4M3 => accumulate_narrow::<Fp8E4M3, 1>(op, acc, other),
        DataType::Float8E5M2 => accumulate_narrow::<Fp8E5M2, 1>(op, acc, other),
    }
}

/// `buf[i] *= scalar` (PreMulSum), scalar is one element of `dtype` in `scalar.bytes`.
pub fn pre_scale(dtype: DataType, buf: &mut [u8], scalar: &Scalar) {
    debug_assert_eq!(buf.len() % dtype.size(), 0);
    macro_rules! int {
        ($t:ty, $n:literal) => {{
            let s = <$t>::from_le_bytes(scalar_bytes::<$n>(scalar));
            map_native::<$t, $n>(buf, |x| x.wrapping_mul(s))
        }};
    }
    macro_rules! float {
        ($t:ty, $n:literal) => {{
            let s = <$t>::from_le_bytes(scalar_bytes::<$n>(scalar));
            map_native::<$t, $n>(buf, |x| x * s)
        }};
    }
    match dtype {
        DataType::Int8 => int!(i8, 1),
        DataType::Uint8 => int!(u8, 1),
        DataType::Int32 => int!(i32, 4),
        DataType::Uint32 => int!(u32, 4),
        DataType::Int64 => int!(i64, 8),
        DataType::Uint64 => int!(u64, 8),
        DataType::Float32 => float!(f32, 4),
        DataType::Float64 => float!(f64, 8),
        DataType::Float16 => pre_scale_narrow::<Float16, 2>(buf, scalar),
        DataType::Bfloat16 => pre_scale_narrow::<Bfloat16, 2>(buf, scalar),
        DataType::Float8E4M3 => pre_scale_narrow::<Fp8E4M3, 1>(buf, scalar),
        DataType::Float8E5M2 => pre_scale_narrow::<Fp8E5M2, 1>(buf, scalar),
    }
}

/// `buf[i] /= n` (Avg): integer division truncating toward zero for integer types, true division for floats.
///
/// `n == 0` leaves `buf` unchanged: a communicator always has a rank, and dividing integers by
/// zero would panic inside a collective.
pub fn post_divide(dtype: DataType, buf: &mut [u8], n: u32) {
    debug_assert_eq!(buf.len() % dtype.size(), 0);
    if n == 0 {
        return;
    }
    // Narrow integers divide in i64, where `n` always fits and `MIN / n` cannot overflow; the
    // quotient is never larger in magnitude than the dividend, so narrowing back is exact.
    macro_rules! int {
        ($t:ty, $n:literal) => {
            map_native::<$t, $n>(buf, |x: $t| (x as i64 / n as i64) as $t)
        };
    }
    match dtype {
        DataType::Int8 => int!(i8, 1),
        DataType::Uint8 => int!(u8, 1),
        DataType::Int32 => int!(i32, 4),
        DataType::Uint32 => int!(u32, 4),
        DataType::Int64 => map_native::<i64, 8>(buf, |x| x / n as i64),
        DataType::Uint64 => map_native::<u64, 8>(buf, |x| x / n as u64),
        DataType::Float32 if n <= 1 << 24 => {
            // `n` is exact in f32, so the IEEE quotient is correctly rounded.
            let d = n as f32;
            map_native::<f32, 4>(buf, |x| x / d)
        }
        // Beyond 2^24 ranks `n` is not an f32; f64 keeps the quotient within one rounding.
        DataType::Float32 => map_native::<f32, 4>(buf, |x| (x as f64 / n as f64) as f32),
        DataType::Float64 => {
            let d = n as f64;
            map_native::<f64, 8>(buf, |x| x / d)
        }
        DataType::Float16 => post_divide_narrow::<Float16, 2>(buf, n),
        DataType::Bfloat16 => post_divide_narrow::<Bfloat16, 2>(buf, n),
        DataType::Float8E4M3 => post_divide_narrow::<Fp8E4M3, 1>(buf, n),
        DataType::Float8E5M2 => post_divide_narrow::<Fp8E5M2, 1>(buf, n),
    }
}

/// The bytes of element `i`, as an array.
fn elem<const N: usize>(bytes: &[u8], i: usize) -> [u8; N] {
    let mut b = [0u8; N];
    b.copy_from_slice(&bytes[i * N..(i + 1) * N]);
    b
}

/// Element `i` of `bytes` as f64 (exact for every type except 64-bit integers beyond 2^53).
pub fn load_f64(dtype: DataType, bytes: &[u8], i: usize) -> f64 {
    match dtype {
        DataType::Int8 => i8::from_le_bytes(elem(bytes, i)) as f64,
        DataType::Uint8 => u8::from_le_bytes(elem(bytes, i)) as f64,
        DataType::Int32 => i32::from_le_bytes(elem(bytes, i)) as f64,
        DataType::Uint32 => u32::from_le_bytes(elem(bytes, i)) as f64,
        DataType::Int64 => i64::from_le_bytes(elem(bytes, i)) as f64,
        DataType::Uint64 => u64::from_le_bytes(elem(bytes, i)) as f64,
        DataType::Float32 => f32::from_le_bytes(elem(bytes, i)) as f64,
        DataType::Float64 => f64::from_le_bytes(elem(bytes, i)),
        DataType::Float16 => Float16::to_f64(elem(bytes, i)),
        DataType::Bfloat16 => Bfloat16::to_f64(elem(bytes, i)),
        DataType::Float8E4M3 => Fp8E4M3::to_f64(elem(bytes, i)),
        DataType::Float8E5M2 => Fp8E5M2::to_f64(elem(bytes, i)),
    }
}

/// Stores `v` as element `i`, rounding to nearest-even for floating types (fp8: saturate to max finite, NaN stays NaN), wrapping/truncating toward zero for integers (saturating `as` casts are fine).
///
/// Integers use Rust's saturating `as` casts (NaN becomes 0).
pub fn store_f64(dtype: DataType, bytes: &mut [u8], i: usize, v: f64) {
    let size = dtype.size();
    let dst = &mut bytes[i * size..(i + 1) * size];
    match dtype {
        DataType::Int8 => dst.copy_from_slice(&(v as i8).to_le_bytes()),
        DataType::Uint8 => dst.copy_from_slice(&(v as u8).to_le_bytes()),
        DataType::Int32 => dst.copy_from_slice(&(v as i32).to_le_bytes()),
        DataType::Uint32 => dst.copy_from_slice(&(v as u32).to_le_bytes()),
        DataType::Int64 => dst.copy_from_slice(&(v as i64).to_le_bytes()),
        DataType::Uint64 => dst.copy_from_slice(&(v as u64).to_le_bytes()),
        DataType::Float32 => dst.copy_from_slice(&(v as f32).to_le_bytes()),
        DataType::Float64 => dst.copy_from_slice(&v.to_le_bytes()),
        DataType::Float16 => dst.copy_from_slice(&Float16::from_f64(v)),
        DataType::Bfloat16 => dst.copy_from_slice(&Bfloat16::from_f64(v)),
        DataType::Float8E4M3 => dst.copy_from_slice(&Fp8E4M3::from_f64(v)),
        DataType::Float8E5M2 => dst.copy_from_slice(&Fp8E5M2::from_f64(v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// splitmix64: deterministic, dependency-free test data.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
    }

    const OPS: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min];

    fn int_types() -> [(DataType, bool); 6] {
        [
            (DataType::Int8, true),
            (DataType::Uint8, false),
            (DataType::Int32, true),
            (DataType::Uint32, false),
            (DataType::Int64, true),
            (DataType::Uint64, false),
        ]
    }

    /// Element `i` as i128, sign- or zero-extended by hand from the raw bytes.
    fn int_at(dtype: DataType, signed: bool, bytes: &[u8], i: usize) -> i128 {
        let n = dtype.size();
        let mut b = [0u8; 16];
        b[..n].copy_from_slice(&bytes[i * n..(i + 1) * n]);
        let v = u128::from_le_bytes(b) as i128;
        let bits = 8 * n as u32;
        if signed && v >> (bits - 1) & 1 == 1 {
            v - (1i128 << bits)
        } else {
            v
        }
    }

    /// The low bytes of `v`: reduction modulo 2^bits, i.e. two's-complement wrap.
    fn int_bytes(dtype: DataType, v: i128) -> Vec<u8> {
        v.to_le_bytes()[..dtype.size()].to_vec()
    }

    /// Interesting values of an integer type, plus random ones, as raw element bytes.
    fn int_values(dtype: DataType, signed: bool, rng: &mut Rng, random: usize) -> Vec<u8> {
        let bits = 8 * dtype.size() as u32;
        let (min, max) = if signed {
            (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
        } else {
            (0, (1i128 << bits) - 1)
        };
        let mut out = Vec::new();
        for v in [
            0,
            1,
            2,
            3,
            -1,
            -2,
            -7,
            7,
            100,
            -100,
            min,
            min + 1,
            max,
            max - 1,
            max / 2,
        ] {
            out.extend(int_bytes(dtype, v));
        }
        for _ in 0..random {
            out.extend(int_bytes(dtype, rng.next() as i128));
        }
        out
    }

    /// Every pair (x, y) of `values`, as two parallel buffers.
    fn all_pairs(size: usize, values: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for x in values.chunks(size) {
            for y in values.chunks(size) {
                a.extend_from_slice(x);
                b.extend_from_slice(y);
            }
        }
        (a, b)
    }

    #[test]
    fn integers_match_i128_reference() {
        let mut rng = Rng(1);
        for (dtype, signed) in int_types() {
            let values = int_values(dtype, signed, &mut rng, 40);
            let (a, b) = all_pairs(dtype.size(), &values);
            for op in OPS {
                let mut got = a.clone();
                accumulate(dtype, op, &mut got, &b);
                for i in 0..a.len() / dtype.size() {
                    let (x, y) = (int_at(dtype, signed, &a, i), int_at(dtype, signed, &b, i));
                    let want = match op {
                        ReduceOp::Sum => x + y,
                        // The low 128 bits of the product are exact, which is all we keep.
                        ReduceOp::Prod => x.wrapping_mul(y),
                        ReduceOp::Max => x.max(y),
                        ReduceOp::Min => x.min(y),
                    };
                    let got_i = &got[i * dtype.size()..(i + 1) * dtype.size()];
                    assert_eq!(got_i, int_bytes(dtype, want), "{dtype:?} {op:?} {x} {y}");
                }
            }
        }
    }

    #[test]
    fn integer_pre_scale_and_post_divide() {
        let mut rng = Rng(2);
        for (dtype, signed) in int_types() {
            let size = dtype.size();
            let values = int_values(dtype, signed, &mut rng, 40);
            for s in values.chunks(size).take(20) {
                let scalar = Scalar::from_bytes(s);
                let sv = int_at(dtype, signed, s, 0);
                let mut got = values.clone();
                pre_scale(dtype, &mut got, &scalar);
                for i in 0..values.len() / size {
                    let want = int_at(dtype, signed, &values, i).wrapping_mul(sv);
                    assert_eq!(&got[i * size..(i + 1) * size], int_bytes(dtype, want));
                }
            }
            for n in [
                1u32,
                2,
                3,
                7,
                8,
                100,
                255,
                256,
                65537,
                i32::MAX as u32,
                u32::MAX,
            ] {
                let mut got = values.clone();
                post_divide(dtype, &mut got, n);
                for i in 0..values.len() / size {
                    let x = int_at(dtype, signed, &values, i);
                    // i128 `/` truncates toward zero, as NCCL's SumPostDiv does.
                    let want = x / n as i128;
                    let at = &got[i * size..(i + 1) * size];
                    assert_eq!(at, int_bytes(dtype, want), "{dtype:?} {x} / {n}");
                }
            }
        }
    }

    /// A float type's reference model: an exact decoder from the textbook formula and a
    /// brute-force correctly rounding encoder (nearest finite code, ties to the even code),
    /// sharing no code with the implementation.
    struct Model {
        dtype: DataType,
        e_bits: u32,
        m_bits: u32,
        /// E4M3FN: no infinities, only S.1111.111 is NaN.
        fn_style: bool,
        /// Positive finite values, indexed by code.
        finite: Vec<f64>,
    }

    impl Model {
        fn new(dtype: DataType) -> Model {
            let (e_bits, m_bits, fn_style) = match dtype {
                DataType::Float16 => (5, 10, false),
                DataType::Bfloat16 => (8, 7, false),
                DataType::Float8E4M3 => (4, 3, true),
                DataType::Float8E5M2 => (5, 2, false),
                _ => unreachable!(),
            };
            let mut m = Model {
                dtype,
                e_bits,
                m_bits,
                fn_style,
                finite: Vec::new(),
            };
            let top = if fn_style {
                (1u32 << (e_bits + m_bits)) - 2
            } else {
                (((1u32 << e_bits) - 1) << m_bits) - 1
            };
            m.finite = (0..=top).map(|c| m.decode(c)).collect();
            m
        }

        fn sign_bit(&self) -> u32 {
            1 << (self.e_bits + self.m_bits)
        }

        fn saturating(&self) -> bool {
            matches!(self.dtype, DataType::Float8E4M3 | DataType::Float8E5M2)
        }

        fn decode(&self, code: u32) -> f64 {
            let (eb, mb) = (self.e_bits, self.m_bits);
            let e = (code >> mb) & ((1 << eb) - 1);
            let m = code & ((1 << mb) - 1);
            let bias = (1i32 << (eb - 1)) - 1;
            let all_ones = (1 << eb) - 1;
            let v = if self.fn_style && e == all_ones && m == (1 << mb) - 1 {
                f64::NAN
            } else if !self.fn_style && e == all_ones {
                if m == 0 { f64::INFINITY } else { f64::NAN }
            } else if e == 0 {
                m as f64 * 2f64.powi(1 - bias - mb as i32)
            } else {
                (1.0 + m as f64 / (1u32 << mb) as f64) * 2f64.powi(e as i32 - bias)
            };
            if code & self.sign_bit() != 0 { -v } else { v }
        }

        /// The correctly rounded code of `v`, or None for NaN.
        fn round(&self, v: f64) -> Option<u32> {
            if v.is_nan() {
                return None;
            }
            let sign = if v.is_sign_negative() {
                self.sign_bit()
            } else {
                0
            };
            let a = v.abs();
            let max_code = self.finite.len() as u32 - 1;
            let max = self.finite[max_code as usize];
            let code = if a > max {
                let ulp = max - self.finite[max_code as usize - 1];
                if self.saturating() || a < max + ulp / 2.0 {
                    max_code
                } else {
                    max_code + 1 // infinity
                }
            } else {
                let lo = self.finite.partition_point(|&x| x <= a) - 1;
                if self.finite[lo] == a {
                    lo as u32
                } else {
                    let mid = (self.finite[lo] + self.finite[lo + 1]) / 2.0;
                    if a < mid || (a == mid && lo % 2 == 0) {
                        lo as u32
                    } else {
                        lo as u32 + 1
                    }
                }
            };
            Some(sign | code)
        }
    }

    /// Reference semantics of every float type: decode, then correctly rounded encode.
    enum FloatRef {
        F32,
        F64,
        Narrow(Model),
    }

    impl FloatRef {
        fn new(dtype: DataType) -> FloatRef {
            match dtype {
                DataType::Float32 => FloatRef::F32,
                DataType::Float64 => FloatRef::F64,
                _ => FloatRef::Narrow(Model::new(dtype)),
            }
        }
        fn size(&self) -> usize {
            match self {
                FloatRef::F32 => 4,
                FloatRef::F64 => 8,
                FloatRef::Narrow(m) => m.dtype.size(),
            }
        }
        fn code(&self, bytes: &[u8], i: usize) -> u64 {
            let n = self.size();
            let mut b = [0u8; 8];
            b[..n].copy_from_slice(&bytes[i * n..(i + 1) * n]);
            u64::from_le_bytes(b)
        }
        fn value(&self, bytes: &[u8], i: usize) -> f64 {
            let c = self.code(bytes, i);
            match self {
                FloatRef::F32 => f32::from_bits(c as u32) as f64,
                FloatRef::F64 => f64::from_bits(c),
                FloatRef::Narrow(m) => m.decode(c as u32),
            }
        }
        /// Expected code of `v` (f64 double rounding to f32 is harmless for one +, *, / of
        /// f32 operands since 53 >= 2*24+2), or None for NaN.
        fn round(&self, v: f64) -> Option<u64> {
            if v.is_nan() {
                return None;
            }
            match self {
                FloatRef::F32 => Some((v as f32).to_bits() as u64),
                FloatRef::F64 => Some(v.to_bits()),
                FloatRef::Narrow(m) => m.round(v).map(u64::from),
            }
        }
        /// Checks element `i` of `got` against the exact value `want`; `any_zero` accepts
        /// either signed zero (min/max of ±0 are not pinned down).
        fn check(&self, got: &[u8], i: usize, want: f64, any_zero: bool, what: &str) {
            let g = self.value(got, i);
            match self.round(want) {
                None => assert!(g.is_nan(), "{what}: want NaN, got {g:e}"),
                Some(_) if any_zero && want == 0.0 => assert_eq!(g, 0.0, "{what}"),
                Some(code) => assert_eq!(
                    self.code(got, i),
                    code,
                    "{what}: want {want:e}, got {g:e} ({:#x})",
                    self.code(got, i)
                ),
            }
        }
    }

    fn raw_bytes(size: usize, code: u64) -> Vec<u8> {
        code.to_le_bytes()[..size].to_vec()
    }

    /// Edge codes of each float type plus random codes (random bit patterns include NaNs,
    /// infinities and subnormals); fp8 gets all 256 codes.
    fn float_values(dtype: DataType, rng: &mut Rng, random: usize) -> Vec<u8> {
        let size = dtype.size();
        let edges: Vec<u64> = match dtype {
            DataType::Float8E4M3 | DataType::Float8E5M2 => (0..256).collect(),
            DataType::Float16 => vec![
                0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x3c00, 0xbc00, 0x3c01, 0x1400,
                0x1000, 0x7bff, 0xfbff, 0x7bfe, 0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x4000, 0xc200,
                0x3555, 0x5640, 0x0200, 0x7800,
            ],
            DataType::Bfloat16 => vec![
                0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x0080, 0x3f80, 0xbf80, 0x3f81, 0x3b80,
                0x3b00, 0x7f7f, 0xff7f, 0x7f7e, 0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x4000, 0xc040,
                0x3eab, 0x5f00, 0x1f80, 0x7f00,
            ],
            DataType::Float32 => [
                0.0f32,
                -0.0,
                1.0,
                -1.0,
                1.0 + f32::EPSILON,
                f32::EPSILON / 2.0,
                f32::MAX,
                f32::MIN,
                f32::MIN_POSITIVE,
                1e-45,
                -1e-45,
                f32::INFINITY,
                f32::NEG_INFINITY,
                f32::NAN,
                1.0 / 3.0,
                16777216.0,
                3.0e38,
            ]
            .iter()
            .map(|v| v.to_bits() as u64)
            .collect(),
            DataType::Float64 => [
                0.0f64,
                -0.0,
                1.0,
                -1.0,
                1.0 + f64::EPSILON,
                f64::EPSILON / 2.0,
                f64::MAX,
                f64::MIN,
                f64::MIN_POSITIVE,
                5e-324,
                f64::INFINITY,
                f64::NEG_INFINITY,
                f64::NAN,
                1.0 / 3.0,
                9007199254740992.0,
            ]
            .iter()
            .map(|v| v.to_bits())
            .collect(),
            _ => unreachable!(),
        };
        let mut out = Vec::new();
        for c in edges {
            out.extend(raw_bytes(size, c));
        }
        for _ in 0..random {
            out.extend(raw_bytes(size, rng.next()));
        }
        out
    }

    const FLOATS: [DataType; 6] = [
        DataType::Float16,
        DataType::Float32,
        DataType::Float64,
        DataType::Bfloat16,
        DataType::Float8E4M3,
        DataType::Float8E5M2,
    ];

    /// fmaxf/fminf: a NaN operand loses to a number.
    fn max_num(x: f64, y: f64) -> f64 {
        if x.is_nan() || y > x { y } else { x }
    }
    fn min_num(x: f64, y: f64) -> f64 {
        if x.is_nan() || y < x { y } else { x }
    }

    /// Every type and op on all pairs of edge values (all 65536 pairs for fp8) and on random
    /// pairs, against the exact f64 result rounded by the brute-force model.
    #[test]
    fn floats_match_correctly_rounded_reference() {
        let mut rng = Rng(3);
        for dtype in FLOATS {
            let r = FloatRef::new(dtype);
            let size = dtype.size();
            let edges = float_values(dtype, &mut rng, 0);
            let (mut a, mut b) = all_pairs(size, &edges);
            for _ in 0..20_000 {
                a.extend(raw_bytes(size, rng.next()));
                b.extend(raw_bytes(size, rng.next()));
            }
            for op in OPS {
                let mut got = a.clone();
                accumulate(dtype, op, &mut got, &b);
                for i in 0..a.len() / size {
                    let (x, y) = (r.value(&a, i), r.value(&b, i));
                    // Exact in f64 for every narrow type (their products and sums need at
                    // most 40 significant bits), and one f64 rounding for f32.
                    let want = match op {
                        ReduceOp::Sum => x + y,
                        ReduceOp::Prod => x * y,
                        ReduceOp::Max => max_num(x, y),
                        ReduceOp::Min => min_num(x, y),
                    };
                    let minmax = matches!(op, ReduceOp::Max | ReduceOp::Min);
                    let what = format!("{dtype:?} {op:?} {x:e} {y:e}");
                    r.check(&got, i, want, minmax, &what);
                }
            }
        }
    }

    #[test]
    fn float_pre_scale_and_post_divide() {
        let mut rng = Rng(4);
        for dtype in FLOATS {
            let r = FloatRef::new(dtype);
            let size = dtype.size();
            let values = float_values(dtype, &mut rng, 500);
            let scalars = float_values(dtype, &mut rng, 10);
            let step = if size == 1 { 7 } else { 1 };
            for s in scalars.chunks(size).step_by(step) {
                let sv = r.value(s, 0);
                let mut got = values.clone();
                pre_scale(dtype, &mut got, &Scalar::from_bytes(s));
                for i in 0..values.len() / size {
                    let x = r.value(&values, i);
                    r.check(&got, i, x * sv, false, &format!("{dtype:?} {x:e} * {sv:e}"));
                }
            }
            for n in [
                1u32,
                2,
                3,
                5,
                7,
                8,
                10,
                100,
                255,
                1 << 24,
                (1 << 24) + 1,
                u32::MAX,
            ] {
                let mut got = values.clone();
                post_divide(dtype, &mut got, n);
                for i in 0..values.len() / size {
                    let x = r.value(&values, i);
                    let what = format!("{dtype:?} {x:e} / {n}");
                    r.check(&got, i, x / n as f64, false, &what);
                }
            }
        }
    }

    fn run(dtype: DataType, op: ReduceOp, a: &[u8], b: &[u8]) -> Vec<u8> {
        let mut acc = a.to_vec();
        accumulate(dtype, op, &mut acc, b);
        acc
    }

    fn le<T: Copy, const N: usize>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
        v.iter().flat_map(|&x| f(x)).collect()
    }

    /// Hand-checked bit patterns, so a wrong shared assumption in the models above would
    /// still be caught.
    #[test]
    fn exact_edge_cases() {
        use DataType as D;
        use ReduceOp as O;
        let i8s = |v: &[i8]| le(v, i8::to_le_bytes);
        assert_eq!(
            run(
                D::Int8,
                O::Sum,
                &i8s(&[127, -128, -1, 100]),
                &i8s(&[1, -1, -1, 100])
            ),
            i8s(&[-128, 127, -2, -56])
        );
        assert_eq!(run(D::Uint8, O::Prod, &[16, 255], &[16, 255]), [0, 1]);
        assert_eq!(run(D::Uint8, O::Max, &[200, 1], &[100, 2]), [200, 2]);
        assert_eq!(
            run(D::Int8, O::Max, &i8s(&[-128, -1]), &i8s(&[-1, 0])),
            i8s(&[-1, 0])
        );
        let i32s = |v: &[i32]| le(v, i32::to_le_bytes);
        assert_eq!(
            run(D::Int32, O::Min, &i32s(&[-5, 3]), &i32s(&[2, -7])),
            i32s(&[-5, -7])
        );
        let u32s = |v: &[u32]| le(v, u32::to_le_bytes);
        let got = run(D::Uint32, O::Max, &u32s(&[u32::MAX, 1]), &u32s(&[0, 2]));
        assert_eq!(got, u32s(&[u32::MAX, 2]));
        let i64s = |v: &[i64]| le(v, i64::to_le_bytes);
        let got = run(D::Int64, O::Prod, &i64s(&[i64::MIN, -3]), &i64s(&[-1, 5]));
        assert_eq!(got, i64s(&[i64::MIN, -15]));
        let u64s = |v: &[u64]| le(v, u64::to_le_bytes);
        assert_eq!(
            run(D::Uint64, O::Sum, &u64s(&[u64::MAX]), &u64s(&[1])),
            u64s(&[0])
        );

        let f32s = |v: &[f32]| le(v, f32::to_le_bytes);
        let got = run(
            D::Float32,
            O::Max,
            &f32s(&[f32::NAN, 2.0]),
            &f32s(&[1.0, f32::NAN]),
        );
        assert_eq!(got, f32s(&[1.0, 2.0]));
        let got = run(
            D::Float32,
            O::Sum,
            &f32s(&[f32::INFINITY]),
            &f32s(&[f32::NEG_INFINITY]),
        );
        assert!(f32::from_le_bytes(got[..4].try_into().unwrap()).is_nan());
        let f64s = |v: &[f64]| le(v, f64::to_le_bytes);
        let got = run(
            D::Float64,
            O::Min,
            &f64s(&[f64::NAN, -0.5]),
            &f64s(&[3.0, 0.5]),
        );
        assert_eq!(got, f64s(&[3.0, -0.5]));

        let u16s = |v: &[u16]| le(v, u16::to_le_bytes);
        // 1 + half an ulp ties to 1; one ulp up ties upward to the even neighbour.
        let got = run(
            D::Float16,
            O::Sum,
            &u16s(&[0x3c00, 0x3c01]),
            &u16s(&[0x1000, 0x1000]),
        );
        assert_eq!(got, u16s(&[0x3c00, 0x3c02]));
        // 65504 + 16 is the midpoint to the would-be next value: ties to even, i.e. infinity.
        let got = run(
            D::Float16,
            O::Sum,
            &u16s(&[0x7bff, 0x7bff]),
            &u16s(&[0x4c00, 0x4bff]),
        );
        assert_eq!(got, u16s(&[0x7c00, 0x7bff]));
        let got = run(
            D::Float16,
            O::Prod,
            &u16s(&[0x0001, 0x3800]),
            &u16s(&[0x3800, 0x0003]),
        );
        assert_eq!(got, u16s(&[0x0000, 0x0002]));
        let got = run(
            D::Bfloat16,
            O::Sum,
            &u16s(&[0x3f80, 0x3f81]),
            &u16s(&[0x3b80, 0x3b80]),
        );
        assert_eq!(got, u16s(&[0x3f80, 0x3f82]));
        let got = run(D::Bfloat16, O::Sum, &u16s(&[0x7f7f]), &u16s(&[0x7f7f]));
        assert_eq!(got, u16s(&[0x7f80]));
        let got = run(
            D::Bfloat16,
            O::Max,
            &u16s(&[0x7fc0, 0xbf80]),
            &u16s(&[0xc000, 0x7fc0]),
        );
        assert_eq!(got, u16s(&[0xc000, 0xbf80]));

        // e4m3: 448+32 and 448+448 saturate; NaN survives; subnormals add and round to even.
        let e4 = |a: &[u8], b: &[u8], op| run(D::Float8E4M3, op, a, b);
        assert_eq!(
            e4(&[0x7e, 0x7e, 0xfe], &[0x3c, 0x7e, 0xfe], O::Sum),
            [0x7e, 0x7e, 0xfe]
        );
        // NaN's sign is not kept by x86 or CUDA arithmetic, so only NaN-ness is checked.
        assert!(
            e4(&[0x7f, 0xff], &[0x38, 0x38], O::Sum)
                .iter()
                .all(|c| c & 0x7f == 0x7f)
        );
        assert_eq!(e4(&[0x01, 0x07], &[0x01, 0x01], O::Sum), [0x02, 0x08]);
        // 0.5 * {1, 3, -1} subnormal units = {0.5 -> 0, 1.5 -> 2, -0.5 -> -0}.
        assert_eq!(
            e4(&[0x01, 0x03, 0x81], &[0x30, 0x30, 0x30], O::Prod),
            [0x00, 0x02, 0x80]
        );
        assert_eq!(e4(&[0x38, 0xb8], &[0x7f, 0x40], O::Max), [0x38, 0x40]);
        assert_eq!(e4(&[0x38, 0xb8], &[0x7f, 0x40], O::Min), [0x38, 0xb8]);
        // e5m2: infinities saturate after any combine; inf - inf is NaN.
        let e5 = |a: &[u8], b: &[u8], op| run(D::Float8E5M2, op, a, b);
        assert_eq!(
            e5(&[0x7b, 0x7c, 0xfc], &[0x7b, 0x3c, 0x3c], O::Sum),
            [0x7b, 0x7b, 0xfb]
        );
        assert_eq!(e5(&[0x7c], &[0xfc], O::Sum)[0] & 0x7f, 0x7f);
        assert_eq!(e5(&[0x7c, 0x01], &[0x3c, 0x01], O::Max), [0x7b, 0x01]);
        assert_eq!(e5(&[0x7b, 0x01], &[0x7b, 0x01], O::Prod), [0x7b, 0x00]);

        // Avg and PreMulSum.
        let mut v = i8s(&[-7, 7, -128, 127]);
        post_divide(D::Int8, &mut v, 2);
        assert_eq!(v, i8s(&[-3, 3, -64, 63]));
        let mut v = vec![255u8, 3];
        post_divide(D::Uint8, &mut v, 2);
        assert_eq!(v, [127, 1]);
        let mut v = i32s(&[-1, i32::MIN]);
        post_divide(D::Int32, &mut v, 3);
        assert_eq!(v, i32s(&[0, -715827882]));
        let mut v = i64s(&[i64::MIN, 5]);
        post_divide(D::Int64, &mut v, u32::MAX);
        assert_eq!(v, i64s(&[-2147483648, 0]));
        let mut v = f32s(&[1.0, -6.0]);
        post_divide(D::Float32, &mut v, 3);
        assert_eq!(v, f32s(&[1.0 / 3.0, -2.0]));
        let mut v = vec![0x7e, 0x09];
        post_divide(D::Float8E4M3, &mut v, 3);
        // 448/3 = 149.33 -> 144; (9/8 * 2^-6)/3 = 0.375 * 2^-6 = 3 subnormal units.
        assert_eq!(v, [0x71, 0x03]);
        let mut v = u16s(&[0x3c00]);
        post_divide(D::Bfloat16, &mut v, 0);
        assert_eq!(v, u16s(&[0x3c00]));
        let mut v = i8s(&[100, -3]);
        pre_scale(D::Int8, &mut v, &Scalar::from_bytes(&[3]));
        assert_eq!(v, i8s(&[44, -9]));
        let mut v = vec![0x7e, 0x38];
        pre_scale(D::Float8E4M3, &mut v, &Scalar::from_bytes(&[0x40]));
        assert_eq!(v, [0x7e, 0x40]);
        let mut v = u16s(&[0x3c00, 0x7bff]);
        pre_scale(
            D::Float16,
            &mut v,
            &Scalar::from_bytes(&0x4000u16.to_le_bytes()),
        );
        assert_eq!(v, u16s(&[0x4000, 0x7c00]));
    }

    /// Long buffers cross the narrow types' block boundary and exercise the vector loops'
    /// tails; every element must still be combined.
    #[test]
    fn long_buffers_combine_every_element() {
        for dtype in DataType::ALL {
            let n = 3 * BLOCK + 5;
            let (mut a, mut b) = (vec![0u8; n * dtype.size()], vec![0u8; n * dtype.size()]);
            for i in 0..n {
                store_f64(dtype, &mut a, i, (i % 7) as f64);
                store_f64(dtype, &mut b, i, 1.0);
            }
            accumulate(dtype, ReduceOp::Sum, &mut a, &b);
            for i in 0..n {
                assert_eq!(load_f64(dtype, &a, i), (i % 7 + 1) as f64, "{dtype:?} {i}");
            }
        }
    }

    #[test]
    fn load_store_round_trip_and_rounding() {
        for dtype in DataType::ALL {
            let mut buf = vec![0u8; 4 * dtype.size()];
            let vals = [0.0, 1.0, if dtype.is_float() { -2.5 } else { 5.0 }, 96.0];
            for (i, v) in vals.iter().enumerate() {
                store_f64(dtype, &mut buf, i, *v);
            }
            for (i, v) in vals.iter().enumerate() {
                assert_eq!(load_f64(dtype, &buf, i), *v, "{dtype:?}");
            }
        }
        let mut b = [0u8; 2];
        store_f64(DataType::Int8, &mut b, 0, -3.9);
        store_f64(DataType::Int8, &mut b, 1, 300.0);
        assert_eq!(b, [(-3i8) as u8, 127]);
        let mut b = [0u8; 8];
        store_f64(DataType::Int64, &mut b, 0, -(2f64.powi(62)));
        assert_eq!(i64::from_le_bytes(b), -(1 << 62));
        let mut b = [0u8; 2];
        // 1 + 2^-11 + 2^-40 is just above the midpoint: must round up, not tie to even
        // (`half::f16::from_f64` gets this wrong).
        store_f64(
            DataType::Float16,
            &mut b,
            0,
            1.0 + 2f64.powi(-11) + 2f64.powi(-40),
        );
        assert_eq!(u16::from_le_bytes(b), 0x3c01);
        store_f64(
            DataType::Bfloat16,
            &mut b,
            0,
            1.0 + 2f64.powi(-8) + 2f64.powi(-40),
        );
        assert_eq!(u16::from_le_bytes(b), 0x3f81);
        let mut b = [0u8; 3];
        store_f64(DataType::Float8E4M3, &mut b, 0, 1e9);
        store_f64(DataType::Float8E5M2, &mut b, 1, f64::NEG_INFINITY);
        store_f64(DataType::Float8E4M3, &mut b, 2, f64::NAN);
        assert_eq!(b, [0x7e, 0xfb, 0x7f]);
        let mut b = [0u8; 4];
        store_f64(
            DataType::Float32,
            &mut b,
            0,
            1.0 + 2f64.powi(-24) + 2f64.powi(-50),
        );
        assert_eq!(f32::from_le_bytes(b), 1.0 + f32::EPSILON);
        assert_eq!(load_f64(DataType::Float8E5M2, &[0x7c], 0), f64::INFINITY);
        assert_eq!(
            load_f64(DataType::Uint64, &u64::MAX.to_le_bytes(), 0),
            2f64.powi(64)
        );
    }
}
