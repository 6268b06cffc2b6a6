//! Types public traits mention but users cannot build, which seals those traits.

use crate::{Communicator, Stream};

/// Where an operation goes: a communicator, a stream, and whether a [`crate::Group`] records
/// it. Its fields are private to the crate, so only this crate implements
/// [`crate::Collectives`].
pub struct Target<'a> {
    pub(crate) comm: &'a Communicator,
    pub(crate) stream: &'a Stream,
    pub(crate) grouped: bool,
}
