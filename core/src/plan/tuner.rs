//! STUB until the tuner lands.

use super::{Algorithm, CollKind, Protocol};
use crate::datatype::DataType;

/// Coarse topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// Host backend.
    Host,
    /// GPUs of one node.
    SingleNodeGpu {
        /// Joined by NVLink.
        nvlink: bool,
    },
    /// Several nodes.
    MultiNode,
}

/// Tuner decision.
pub struct Choice {
    /// Algorithm.
    pub algo: Algorithm,
    /// Protocol.
    pub proto: Protocol,
    /// Channels.
    pub nchannels: u32,
    /// Chunk elements.
    pub chunk_elems: u64,
}

/// Tuner.
pub struct Tuner;

impl Tuner {
    /// From env.
    pub fn from_env() -> Tuner {
        Tuner
    }
    /// Choose.
    pub fn choose(&self, _k: CollKind, _b: u64, _d: DataType, _n: u32, _t: Topology) -> Choice {
        Choice {
            algo: Algorithm::Ring,
            proto: Protocol::Simple,
            nchannels: 1,
            chunk_elems: 1 << 16,
        }
    }
}
