//! Element types: the sealed [`Element`] trait for every NCCL data type.
//!
//! Sealed because device reductions write arbitrary bit patterns: only plain numbers without
//! padding and valid for every bit pattern may live in a [`crate::DeviceBuffer`], so a user type
//! (a `bool`, an enum, a struct with padding) must not become one.

use crate::fp8::{F8E4M3, F8E5M2};
use oxccl_core::datatype::{DataType, Scalar};

mod sealed {
    /// Keeps [`super::Element`] implemented only for the types listed here.
    pub trait Sealed {}
}

/// A type NCCL can move and reduce: `i8`, `u8`, `i32`, `u32`, `i64`, `u64`, [`half::f16`],
/// [`half::bf16`], `f32`, `f64`, [`F8E4M3`] and [`F8E5M2`].
///
/// The trait is sealed; user types cannot implement it:
///
/// ```compile_fail,E0277
/// #[derive(Clone, Copy, Debug, Default, PartialEq)]
/// struct Flag(bool);
/// impl oxccl::Element for Flag {
///     const NAME: &'static str = "flag";
/// }
/// ```
pub trait Element:
    sealed::Sealed + Copy + Default + PartialEq + std::fmt::Debug + Send + Sync + 'static
{
    /// NCCL's name of the type (`"ncclFloat32"`).
    const NAME: &'static str;
    /// The runtime's data type.
    #[doc(hidden)]
    const DTYPE: DataType;
    /// The value as a reduction scalar (PreMulSum's factor).
    #[doc(hidden)]
    fn scalar(self) -> Scalar;
}

macro_rules! elements {
    ($($t:ty => $dt:ident),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const NAME: &'static str = DataType::$dt.name();
            const DTYPE: DataType = DataType::$dt;
            fn scalar(self) -> Scalar {
                Scalar::from_bytes(&self.to_le_bytes())
            }
        }
    )*};
}

elements!(
    i8 => Int8,
    u8 => Uint8,
    i32 => Int32,
    u32 => Uint32,
    i64 => Int64,
    u64 => Uint64,
    half::f16 => Float16,
    f32 => Float32,
    f64 => Float64,
    half::bf16 => Bfloat16,
    F8E4M3 => Float8E4M3,
    F8E5M2 => Float8E5M2,
);

/// The bytes of `s`.
pub(crate) fn as_bytes<T: Element>(s: &[T]) -> &[u8] {
    // SAFETY: every `Element` is a plain number without padding (the trait is sealed), so its
    // bytes are initialized; the byte slice covers exactly `s` and borrows it.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast(), std::mem::size_of_val(s)) }
}

/// The bytes of `s`, writable.
pub(crate) fn as_bytes_mut<T: Element>(s: &mut [T]) -> &mut [u8] {
    // SAFETY: as in `as_bytes`; and every bit pattern is a valid `Element`, so any bytes written
    // through the view leave valid values.
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast(), std::mem::size_of_val(s)) }
}
