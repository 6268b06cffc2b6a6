//! Transports that move bytes between ranks.

pub mod socket;
