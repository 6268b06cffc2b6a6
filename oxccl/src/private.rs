//! What seals the public traits: a supertrait and a type users can neither name nor build, so
//! only this crate implements [`crate::Collectives`], [`crate::DeviceInput`] and
//! [`crate::DeviceOutput`]. The soundness rule depends on their implementations: they decide
//! which borrows an operation keeps.

use crate::{Communicator, Stream};

/// Implemented only inside this crate.
pub trait Sealed {}

/// Where an operation goes: a communicator, a stream, and whether a [`crate::Group`] records
/// it.
pub struct Target<'a> {
    pub(crate) comm: &'a Communicator,
    pub(crate) stream: &'a Stream,
    pub(crate) grouped: bool,
}

/// The target of a sealed operations type.
pub trait Targeted: Sealed {
    /// Where its operations go.
    fn target(&self) -> Target<'_>;
}
