//! What the tuner-plugin tests share.

use oxccl_core::plan::{Algorithm, Protocol};

/// Every ring and tree protocol: what oxccl offers a tuner plugin for AllReduce.
pub const RING_AND_TREE: [(Algorithm, Protocol); 6] = [
    (Algorithm::Ring, Protocol::Ll),
    (Algorithm::Ring, Protocol::Ll128),
    (Algorithm::Ring, Protocol::Simple),
    (Algorithm::Tree, Protocol::Ll),
    (Algorithm::Tree, Protocol::Ll128),
    (Algorithm::Tree, Protocol::Simple),
];
