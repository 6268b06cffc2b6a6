//! The two 8-bit float formats NCCL reduces (OCP FP8), as bit-exact newtypes with conversions
//! to and from `f32`. Small enough to write here rather than add a crate for.

/// FP8 E4M3 ("fn" variant, NCCL's `ncclFloat8e4m3`): 4 exponent bits (bias 7), 3 mantissa bits,
/// no infinities, largest finite 448. Conversion from `f32` rounds to nearest even and
/// saturates to ±448.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct F8E4M3(u8);

/// FP8 E5M2 (NCCL's `ncclFloat8e5m2`): 5 exponent bits (bias 15), 2 mantissa bits, with
/// infinities, largest finite 57344. Conversion from `f32` rounds to nearest even; values past
/// the largest finite become infinite, as in IEEE formats.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct F8E5M2(u8);

/// One FP8 layout: mantissa bits, exponent bias, special codes.
struct Format {
    mant: u32,
    bias: i32,
    /// Largest finite magnitude code.
    max: u8,
    /// Magnitude code for values past `max`.
    overflow: u8,
    /// Magnitude code of NaN.
    nan: u8,
}

const E4M3: Format = Format {
    mant: 3,
    bias: 7,
    max: 0x7e,
    overflow: 0x7e,
    nan: 0x7f,
};

const E5M2: Format = Format {
    mant: 2,
    bias: 15,
    max: 0x7b,
    overflow: 0x7c,
    nan: 0x7f,
};

impl Format {
    fn encode(&self, x: f32) -> u8 {
        let sign = if x.is_sign_negative() { 0x80 } else { 0 };
        if x.is_nan() {
            return sign | self.nan;
        }
        let a = x.abs();
        if a.is_infinite() {
            return sign | self.overflow;
        }
        let min_normal_exp = 1 - self.bias;
        let magnitude = if a < 2f32.powi(min_normal_exp) {
            // Subnormal: multiples of the smallest step; rounding up to the smallest normal
            // gives its code too.
            (a * 2f32.powi(self.mant as i32 - min_normal_exp)).round_ties_even() as u32
        } else {
            let mut e = ((a.to_bits() >> 23) & 0xff) as i32 - 127;
            let one = 1u32 << self.mant;
            let mut r = (a * 2f32.powi(self.mant as i32 - e)).round_ties_even() as u32;
            if r == 2 * one {
                e += 1;
                r = one;
            }
            let code = ((e + self.bias) as u32) << self.mant | (r - one);
            code.min(0xff)
        };
        if magnitude > u32::from(self.max) {
            sign | self.overflow
        } else {
            sign | magnitude as u8
        }
    }

    fn decode(&self, code: u8, special: impl Fn(u8) -> Option<f32>) -> f32 {
        let sign = if code & 0x80 != 0 { -1.0 } else { 1.0 };
        let c = code & 0x7f;
        if let Some(v) = special(c) {
            return sign * v;
        }
        let e = i32::from(c >> self.mant);
        let m = i32::from(c & ((1 << self.mant) - 1));
        let step = self.mant as i32;
        let v = if e == 0 {
            m as f32 * 2f32.powi(1 - self.bias - step)
        } else {
            ((1 << step) + m) as f32 * 2f32.powi(e - self.bias - step)
        };
        sign * v
    }
}

impl F8E4M3 {
    /// The value with these bits.
    pub const fn from_bits(bits: u8) -> F8E4M3 {
        F8E4M3(bits)
    }
    /// The bits of the value.
    pub const fn to_bits(self) -> u8 {
        self.0
    }
    /// The nearest value to `x` (ties to even, saturating).
    pub fn from_f32(x: f32) -> F8E4M3 {
        F8E4M3(E4M3.encode(x))
    }
    /// The value as `f32` (exact).
    pub fn to_f32(self) -> f32 {
        E4M3.decode(self.0, |c| (c == 0x7f).then_some(f32::NAN))
    }
    /// Little-endian bytes (one).
    pub const fn to_le_bytes(self) -> [u8; 1] {
        [self.0]
    }
}

impl F8E5M2 {
    /// The value with these bits.
    pub const fn from_bits(bits: u8) -> F8E5M2 {
        F8E5M2(bits)
    }
    /// The bits of the value.
    pub const fn to_bits(self) -> u8 {
        self.0
    }
    /// The nearest value to `x` (ties to even).
    pub fn from_f32(x: f32) -> F8E5M2 {
        F8E5M2(E5M2.encode(x))
    }
    /// The value as `f32` (exact).
    pub fn to_f32(self) -> f32 {
        E5M2.decode(self.0, |c| match c {
            0x7c => Some(f32::INFINITY),
            0x7d..=0x7f => Some(f32::NAN),
            _ => None,
        })
    }
    /// Little-endian bytes (one).
    pub const fn to_le_bytes(self) -> [u8; 1] {
        [self.0]
    }
}

impl std::fmt::Debug for F8E4M3 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.to_f32())
    }
}

impl std::fmt::Debug for F8E5M2 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.to_f32())
    }
}

impl From<F8E4M3> for f32 {
    fn from(v: F8E4M3) -> f32 {
        v.to_f32()
    }
}

impl From<F8E5M2> for f32 {
    fn from(v: F8E5M2) -> f32 {
        v.to_f32()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_finite_code_round_trips() {
        for b in 0..=255u8 {
            let v = F8E4M3::from_bits(b);
            if !v.to_f32().is_nan() {
                assert_eq!(F8E4M3::from_f32(v.to_f32()).to_bits(), b, "e4m3 {b:#x}");
            }
            let v = F8E5M2::from_bits(b);
            if !v.to_f32().is_nan() {
                assert_eq!(F8E5M2::from_f32(v.to_f32()).to_bits(), b, "e5m2 {b:#x}");
            }
        }
    }

    #[test]
    fn known_values_rounding_and_limits() {
        assert_eq!(F8E4M3::from_bits(0x7e).to_f32(), 448.0);
        assert_eq!(F8E4M3::from_bits(0x01).to_f32(), 2f32.powi(-9));
        assert_eq!(F8E4M3::from_f32(1000.0).to_f32(), 448.0);
        assert_eq!(F8E4M3::from_f32(f32::NEG_INFINITY).to_f32(), -448.0);
        assert!(F8E4M3::from_f32(f32::NAN).to_f32().is_nan());
        // 1.0625 lies halfway between 1.0 and 1.125: ties go to the even mantissa.
        assert_eq!(F8E4M3::from_f32(1.0625).to_f32(), 1.0);
        assert_eq!(F8E4M3::from_f32(1.1875).to_f32(), 1.25);
        assert_eq!(F8E5M2::from_bits(0x7b).to_f32(), 57344.0);
        assert_eq!(F8E5M2::from_f32(1e6).to_f32(), f32::INFINITY);
        assert_eq!(F8E5M2::from_f32(-3.0).to_f32(), -3.0);
        assert_eq!(F8E5M2::from_bits(0x01).to_f32(), 2f32.powi(-16));
    }
}
