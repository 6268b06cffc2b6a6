//! Narrow binary floating-point formats (float16, bfloat16, fp8 e4m3 / e5m2) as bit codes.
//!
//! One parametrised encoder serves every narrow format because they differ only in field widths
//! and in what happens past the largest finite value. It is written here rather than taken from
//! `half`, because `half`'s `from_f64` is not correctly rounded: it drops the low 32 mantissa bits
//! before rounding (or, with F16C, rounds through f32 first), so values just above a tie round
//! the wrong way. No fp8 crate is used: the maintained ones follow other NaN/saturation
//! conventions than CUDA's `__NV_SATFINITE`, and the codec is small enough to test exhaustively.

/// Field layout and overflow behaviour of one narrow format.
#[derive(Debug)]
pub(crate) struct Format {
    /// Explicit mantissa (fraction) bits.
    man_bits: u32,
    /// Exponent bias.
    bias: i32,
    /// The sign bit.
    sign: u16,
    /// Code of the largest finite magnitude.
    max_finite: u16,
    /// Code of +infinity, or 0 when the format has none.
    inf: u16,
    /// What finite values beyond `max_finite` (and infinities) become: infinity for IEEE
    /// formats, `max_finite` for the saturating fp8 conversions NCCL uses.
    overflow: u16,
    /// The NaN code produced for every NaN input (sign added separately).
    nan: u16,
}

/// IEEE binary16.
pub(crate) const F16: Format = Format {
    man_bits: 10,
    bias: 15,
    sign: 0x8000,
    max_finite: 0x7bff,
    inf: 0x7c00,
    overflow: 0x7c00,
    nan: 0x7e00,
};

/// bfloat16 (the top half of a binary32).
pub(crate) const BF16: Format = Format {
    man_bits: 7,
    bias: 127,
    sign: 0x8000,
    max_finite: 0x7f7f,
    inf: 0x7f80,
    overflow: 0x7f80,
    nan: 0x7fc0,
};

/// OCP fp8 E4M3FN with CUDA's saturating conversion: no infinities, 0x7f is NaN, max 448.
pub(crate) const E4M3: Format = Format {
    man_bits: 3,
    bias: 7,
    sign: 0x80,
    max_finite: 0x7e,
    inf: 0,
    overflow: 0x7e,
    nan: 0x7f,
};

/// OCP fp8 E5M2 with CUDA's saturating conversion: infinities decode but never encode, max 57344.
pub(crate) const E5M2: Format = Format {
    man_bits: 2,
    bias: 15,
    sign: 0x80,
    max_finite: 0x7b,
    inf: 0x7c,
    overflow: 0x7b,
    nan: 0x7f,
};

const F64_SIGN: u64 = 1 << 63;
const F64_INF: u64 = 0x7ff0_0000_0000_0000;

/// `2^e` for exponents in f64's normal range, built from bits so it is exact and `const`.
const fn pow2(e: i32) -> f64 {
    f64::from_bits(((e + 1023) as u64) << 52)
}

impl Format {
    /// Rounds `x` to the nearest code (ties to even), with this format's overflow rule; NaN
    /// becomes the canonical NaN with `x`'s sign.
    #[inline]
    pub(crate) fn encode(&self, x: f64) -> u16 {
        let bits = x.to_bits();
        let sign = if bits & F64_SIGN != 0 { self.sign } else { 0 };
        let abs = bits & !F64_SIGN;
        if abs > F64_INF {
            return sign | self.nan;
        }
        let m = self.man_bits;
        let min_normal = ((1024 - self.bias) as u64) << 52;
        let code = if abs < min_normal {
            // Below the normal range the spacing is fixed, so count it in units of the smallest
            // subnormal (the power-of-two scaling is exact). Adding 2^52 makes the FPU round to
            // an integer, ties to even, without `round_ties_even`'s libm call on baseline x86.
            // A result of 2^m is the smallest normal code, which is exactly right.
            let units = f64::from_bits(abs) * pow2(self.bias - 1 + m as i32);
            ((units + pow2(52)) - pow2(52)) as u64
        } else {
            // Normal: drop the surplus mantissa bits with round-to-nearest-even on the integer
            // bits; a carry out of the mantissa correctly bumps the exponent.
            let shift = 52 - m;
            let lsb = (abs >> shift) & 1;
            let rounded = (abs + (1 << (shift - 1)) - 1 + lsb) >> shift;
            rounded - (((1023 - self.bias) as u64) << m)
        };
        let code = if code > self.max_finite as u64 {
            self.overflow
        } else {
            code as u16
        };
        sign | code
    }

    /// The exact value of `code` (NaN codes give a NaN with the code's sign).
    pub(crate) const fn decode(&self, code: u16) -> f64 {
        let negative = code & self.sign != 0;
        let mag = code & !self.sign;
        let m = self.man_bits;
        let v = if self.inf != 0 && mag == self.inf {
            f64::INFINITY
        } else if mag > self.max_finite {
            f64::NAN
        } else {
            let exp = (mag >> m) as i32;
            let frac = (mag & ((1 << m) - 1)) as u64;
            if exp == 0 {
                frac as f64 * pow2(1 - self.bias - m as i32)
            } else {
                f64::from_bits((((exp - self.bias + 1023) as u64) << 52) | (frac << (52 - m)))
            }
        };
        if negative { -v } else { v }
    }

    /// Decoded value of every 8-bit code, as f32 (exact: fp8 values all fit).
    pub(crate) const fn table8(&self) -> [f32; 256] {
        let mut t = [0f32; 256];
        let mut i = 0;
        while i < 256 {
            t[i] = self.decode(i as u16) as f32;
            i += 1;
        }
        t
    }
}

/// fp8 e4m3 code → f32, by lookup because decoding is on every element of every combine.
pub(crate) static E4M3_TO_F32: [f32; 256] = E4M3.table8();
/// fp8 e5m2 code → f32.
pub(crate) static E5M2_TO_F32: [f32; 256] = E5M2.table8();

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of `code` from the textbook formula, independent of `decode`'s bit tricks.
    fn formula(fmt: &Format, code: u16) -> f64 {
        let m = fmt.man_bits as i32;
        let mag = code & !fmt.sign;
        let e = (mag >> m) as i32;
        let f = (mag & ((1 << m) - 1)) as f64 / (1u32 << m) as f64;
        let v = if e == 0 {
            f * 2f64.powi(1 - fmt.bias)
        } else {
            (1.0 + f) * 2f64.powi(e - fmt.bias)
        };
        if code & fmt.sign != 0 { -v } else { v }
    }

    fn is_nan_code(fmt: &Format, code: u16) -> bool {
        let mag = code & !fmt.sign;
        mag > fmt.max_finite && mag != fmt.inf
    }

    fn all_codes(fmt: &Format) -> impl Iterator<Item = u16> {
        0..=(fmt.sign as u32 * 2 - 1) as u16
    }

    const FORMATS: [(&str, &Format); 4] = [
        ("f16", &F16),
        ("bf16", &BF16),
        ("e4m3", &E4M3),
        ("e5m2", &E5M2),
    ];

    #[test]
    fn decode_matches_formula_for_every_code() {
        for (name, fmt) in FORMATS {
            for c in all_codes(fmt) {
                let v = fmt.decode(c);
                if is_nan_code(fmt, c) {
                    assert!(v.is_nan(), "{name} {c:#x}");
                    assert_eq!(v.is_sign_negative(), c & fmt.sign != 0, "{name} {c:#x}");
                } else if fmt.inf != 0 && c & !fmt.sign == fmt.inf {
                    assert!(v.is_infinite(), "{name} {c:#x}");
                } else {
                    let f = formula(fmt, c);
                    assert_eq!(v.to_bits(), f.to_bits(), "{name} {c:#x}: {v} vs {f}");
                }
            }
        }
    }

    #[test]
    fn known_values() {
        let cases: &[(&Format, u16, f64)] = &[
            (&E4M3, 0x7e, 448.0),
            (&E4M3, 0xfe, -448.0),
            (&E4M3, 0x38, 1.0),
            (&E4M3, 0x08, 2f64.powi(-6)),
            (&E4M3, 0x07, 7.0 * 2f64.powi(-9)),
            (&E4M3, 0x01, 2f64.powi(-9)),
            (&E4M3, 0x80, -0.0),
            (&E5M2, 0x7b, 57344.0),
            (&E5M2, 0x3c, 1.0),
            (&E5M2, 0x04, 2f64.powi(-14)),
            (&E5M2, 0x01, 2f64.powi(-16)),
            (&E5M2, 0x7c, f64::INFINITY),
            (&E5M2, 0xfc, f64::NEG_INFINITY),
            (&F16, 0x7bff, 65504.0),
            (&F16, 0x0001, 2f64.powi(-24)),
            (&F16, 0x3c00, 1.0),
            (&BF16, 0x3f80, 1.0),
            (&BF16, 0x0001, 2f64.powi(-133)),
        ];
        for &(fmt, code, v) in cases {
            assert_eq!(fmt.decode(code).to_bits(), v.to_bits(), "{code:#x}");
            assert_eq!(
                fmt.encode(v),
                if fmt.overflow != fmt.inf && v.is_infinite() {
                    fmt.max_finite | (code & fmt.sign)
                } else {
                    code
                }
            );
        }
        assert!(E4M3.decode(0x7f).is_nan() && E4M3.decode(0xff).is_nan());
        assert!(E5M2.decode(0x7d).is_nan() && E5M2.decode(0xfe).is_nan());
    }

    #[test]
    fn every_code_round_trips() {
        for (name, fmt) in FORMATS {
            for c in all_codes(fmt) {
                let sign = c & fmt.sign;
                let back = fmt.encode(fmt.decode(c));
                let want = if is_nan_code(fmt, c) {
                    sign | fmt.nan
                } else if fmt.inf != 0 && c & !fmt.sign == fmt.inf {
                    sign | fmt.overflow
                } else {
                    c
                };
                assert_eq!(back, want, "{name} {c:#x}");
            }
        }
    }

    #[test]
    fn positive_codes_increase() {
        for (name, fmt) in FORMATS {
            for c in 0..fmt.max_finite {
                assert!(fmt.decode(c) < fmt.decode(c + 1), "{name} {c:#x}");
            }
        }
    }

    /// Around every midpoint between neighbouring finite codes (subnormals included): the exact
    /// midpoint goes to the even code, anything off it to the nearer one.
    #[test]
    fn rounds_to_nearest_even_at_every_midpoint() {
        for (name, fmt) in FORMATS {
            for c in 0..fmt.max_finite {
                let (lo, hi) = (fmt.decode(c), fmt.decode(c + 1));
                let mid = (lo + hi) / 2.0;
                let even = if c % 2 == 0 { c } else { c + 1 };
                for (s, sv) in [(0, 1.0), (fmt.sign, -1.0)] {
                    assert_eq!(fmt.encode(sv * mid), s | even, "{name} mid {c:#x}");
                    assert_eq!(fmt.encode(sv * mid.next_up()), s | (c + 1), "{name} {c:#x}");
                    assert_eq!(fmt.encode(sv * mid.next_down()), s | c, "{name} {c:#x}");
                    assert_eq!(fmt.encode(sv * lo), s | c, "{name} {c:#x}");
                }
            }
        }
    }

    #[test]
    fn overflow_saturates_or_goes_infinite() {
        for (name, fmt) in FORMATS {
            let max = fmt.decode(fmt.max_finite);
            // One ulp of the top binade past max: the would-be next code.
            let ulp = max - fmt.decode(fmt.max_finite - 1);
            let beyond = [max + ulp / 2.0, max + ulp, 1e300, f64::INFINITY];
            for v in beyond {
                assert_eq!(fmt.encode(v), fmt.overflow, "{name} {v}");
                assert_eq!(fmt.encode(-v), fmt.sign | fmt.overflow, "{name} {v}");
            }
            let below = (max + ulp / 2.0).next_down();
            assert_eq!(fmt.encode(below), fmt.max_finite, "{name}");
        }
        assert_eq!(E4M3.encode(449.0), 0x7e);
        assert_eq!(E4M3.encode(464.0), 0x7e);
        assert_eq!(E4M3.encode(1e6), 0x7e);
        assert_eq!(E5M2.encode(61440.0), 0x7b);
        assert_eq!(E5M2.encode(-f64::INFINITY), 0xfb);
        assert_eq!(F16.encode(65520.0), 0x7c00);
        assert_eq!(F16.encode(65519.99), 0x7bff);
    }

    #[test]
    fn underflow_and_signed_zero() {
        for (name, fmt) in FORMATS {
            let tiny = fmt.decode(1);
            assert_eq!(fmt.encode(0.0), 0, "{name}");
            assert_eq!(fmt.encode(-0.0), fmt.sign, "{name}");
            assert_eq!(fmt.encode(tiny / 2.0), 0, "{name}");
            assert_eq!(fmt.encode(-tiny / 2.0), fmt.sign, "{name}");
            assert_eq!(fmt.encode((tiny / 2.0).next_up()), 1, "{name}");
            assert_eq!(fmt.encode(f64::MIN_POSITIVE / 4.0), 0, "{name}");
            assert_eq!(fmt.encode(tiny * 1.5), 2, "{name}");
        }
    }

    #[test]
    fn nan_keeps_sign() {
        for (name, fmt) in FORMATS {
            assert_eq!(fmt.encode(f64::NAN), fmt.nan, "{name}");
            assert_eq!(fmt.encode(-f64::NAN), fmt.sign | fmt.nan, "{name}");
            assert!(is_nan_code(fmt, fmt.nan));
        }
    }

    #[test]
    fn tables_match_decode() {
        for c in 0..=255u16 {
            for (fmt, table) in [(&E4M3, &E4M3_TO_F32), (&E5M2, &E5M2_TO_F32)] {
                let (t, d) = (table[c as usize] as f64, fmt.decode(c));
                assert!(
                    t.to_bits() == d.to_bits() || (t.is_nan() && d.is_nan()),
                    "{c:#x}"
                );
            }
        }
    }

    /// `half`'s f32 conversions (used on the hot path) agree with this encoder on f32 inputs.
    #[test]
    fn agrees_with_half_on_f32() {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..200_000u32 {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let x = f32::from_bits((s >> 32) as u32 ^ i);
            let h = half::f16::from_f32(x).to_bits();
            let b = half::bf16::from_f32(x).to_bits();
            if x.is_nan() {
                assert!(F16.decode(h).is_nan() && BF16.decode(b).is_nan());
                continue;
            }
            assert_eq!(F16.encode(x as f64), h, "{x:e}");
            assert_eq!(BF16.encode(x as f64), b, "{x:e}");
        }
    }
}
