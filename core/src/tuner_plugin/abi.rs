//! The tuner-plugin ABI NCCL 2.28 loads, and v6 of NCCL 2.30: the exported `ncclTunerPlugin_v6`
//! … `v2` structs of function pointers, their arguments, and NCCL's ids for collectives,
//! algorithms and protocols.
//!
//! The cost table (`float** collCostTable` of v3-v6) is not an array of row pointers: NCCL's
//! core passes the address of its contiguous `float[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS]`
//! cast to `float**`, and plugins cast it back (aws-ofi-nccl's tuner, NCCL's own basic and
//! 2.30 example tuners). NCCL's 2.27-2.29 example tuner indexes it as `float**` instead, which
//! reads two costs as a pointer, under NCCL as under oxccl.

use crate::plugin_abi::{Logger, NcclResult};
use std::ffi::{c_char, c_float, c_int, c_void};

/// Symbols tried, newest first, with their versions.
pub const SYMBOLS: [(&[u8], u32); 5] = [
    (b"ncclTunerPlugin_v6\0", 6),
    (b"ncclTunerPlugin_v5\0", 5),
    (b"ncclTunerPlugin_v4\0", 4),
    (b"ncclTunerPlugin_v3\0", 3),
    (b"ncclTunerPlugin_v2\0", 2),
];

/// Rows of the cost table: NCCL's algorithms (tree, ring, two CollNet, two NVLS, PAT).
pub const NUM_ALGORITHMS: usize = 7;
/// Columns of the cost table: LL, LL128, Simple.
pub const NUM_PROTOCOLS: usize = 3;
/// A cost-table entry that must not be chosen (`NCCL_ALGO_PROTO_IGNORE`).
pub const IGNORE: c_float = -1.0;
/// NCCL's algorithm ids that oxccl runs.
pub const ALGO_TREE: c_int = 0;
/// See [`ALGO_TREE`].
pub const ALGO_RING: c_int = 1;
/// NCCL's protocol ids.
pub const PROTO_LL: c_int = 0;
/// See [`PROTO_LL`].
pub const PROTO_LL128: c_int = 1;
/// See [`PROTO_LL`].
pub const PROTO_SIMPLE: c_int = 2;

/// NCCL's `ncclFunc_t` values a 2.28 tuner is asked about.
pub mod func {
    use std::ffi::c_int;
    /// `ncclFuncBroadcast`.
    pub const BROADCAST: c_int = 0;
    /// `ncclFuncReduce`.
    pub const REDUCE: c_int = 1;
    /// `ncclFuncAllGather`.
    pub const ALL_GATHER: c_int = 2;
    /// `ncclFuncReduceScatter`.
    pub const REDUCE_SCATTER: c_int = 3;
    /// `ncclFuncAllReduce`.
    pub const ALL_REDUCE: c_int = 4;
}

/// `ncclNvlDomainInfo_v5_t`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct NvlDomainInfo {
    /// NVLink domains (oxccl: one per host).
    pub n_nvl_domains: c_int,
    /// Fewest ranks of a domain.
    pub min_ranks_per_nvl_domain: c_int,
    /// Most ranks of a domain.
    pub max_ranks_per_nvl_domain: c_int,
}

/// `ncclTunerConstants_v5_t`: NCCL's latency and bandwidth constants, which a plugin may read
/// and change. oxccl's tuner does not use NCCL's model, so they are passed as zeros.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct TunerConstants {
    /// `baseLatencies[algo][proto]`.
    pub base_latencies: [[f64; NUM_PROTOCOLS]; NUM_ALGORITHMS],
    /// `hwLatencies[link][algo][proto]` (NVLink, PCI, network).
    pub hw_latencies: [[[f64; NUM_PROTOCOLS]; NUM_ALGORITHMS]; 3],
    /// `llMaxBws[compcap][scale]`.
    pub ll_max_bws: [[f64; 3]; 4],
    /// `perChMaxRingLL128Bws[compcap][scale]`.
    pub per_ch_max_ring_ll128_bws: [[f64; 3]; 4],
    /// `perChMaxTreeLL128Bws[compcap][scale]`.
    pub per_ch_max_tree_ll128_bws: [[f64; 3]; 4],
    /// `perChMaxTreeBws[compcap][scale]`.
    pub per_ch_max_tree_bws: [[f64; 3]; 4],
}

impl Default for TunerConstants {
    fn default() -> Self {
        TunerConstants {
            base_latencies: [[0.0; NUM_PROTOCOLS]; NUM_ALGORITHMS],
            hw_latencies: [[[0.0; NUM_PROTOCOLS]; NUM_ALGORITHMS]; 3],
            ll_max_bws: [[0.0; 3]; 4],
            per_ch_max_ring_ll128_bws: [[0.0; 3]; 4],
            per_ch_max_tree_ll128_bws: [[0.0; 3]; 4],
            per_ch_max_tree_bws: [[0.0; 3]; 4],
        }
    }
}

/// `getCollInfo` of v4-v6: `cost_table` is the address of a contiguous `[numAlgo][numProto]`
/// table of `f32` (see the module's note).
pub type GetCollInfoV4 = unsafe extern "C" fn(
    ctx: *mut c_void,
    coll: c_int,
    bytes: usize,
    num_pipe_ops: c_int,
    cost_table: *mut *mut c_float,
    num_algo: c_int,
    num_proto: c_int,
    reg_buff: c_int,
    nchannels: *mut c_int,
) -> NcclResult;

/// `ncclTuner_v5_t`.
#[repr(C)]
pub struct TunerV5 {
    /// The plugin's name.
    pub name: *const c_char,
    /// Per-communicator init.
    pub init: Option<
        unsafe extern "C" fn(
            ctx: *mut *mut c_void,
            comm_id: u64,
            nranks: usize,
            nnodes: usize,
            log: Logger,
            nvl: *mut NvlDomainInfo,
            constants: *mut TunerConstants,
        ) -> NcclResult,
    >,
    /// Adjusts the cost table and the channel count of one collective.
    pub get_coll_info: Option<GetCollInfoV4>,
    /// Per-communicator teardown.
    pub finalize: Option<unsafe extern "C" fn(ctx: *mut c_void) -> NcclResult>,
}

/// `ncclTuner_v6_t` (NCCL 2.30): v5's members, then `getChunkSize`. The first four are v5's, so
/// oxccl calls a v6 plugin through them; it sizes its own chunks and does not ask the plugin.
#[repr(C)]
pub struct TunerV6 {
    /// v5's name, init, getCollInfo and finalize.
    pub v5: TunerV5,
    /// Sets the chunk size of one collective's algorithm/protocol (unused by oxccl).
    pub get_chunk_size: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            coll: c_int,
            bytes: usize,
            algo: c_int,
            proto: c_int,
            nchannels: c_int,
            chunk_size: *mut usize,
        ) -> NcclResult,
    >,
}

/// `init` of v2-v4.
pub type InitOld = unsafe extern "C" fn(
    nranks: usize,
    nnodes: usize,
    log: Logger,
    ctx: *mut *mut c_void,
) -> NcclResult;

/// `ncclTuner_v4_t`.
#[repr(C)]
pub struct TunerV4 {
    /// The plugin's name.
    pub name: *const c_char,
    /// Per-communicator init.
    pub init: Option<InitOld>,
    /// As v5's.
    pub get_coll_info: Option<GetCollInfoV4>,
    /// Per-communicator teardown.
    pub destroy: Option<unsafe extern "C" fn(ctx: *mut c_void) -> NcclResult>,
}

/// `ncclTuner_v3_t`: v4 without `regBuff`.
#[repr(C)]
pub struct TunerV3 {
    /// The plugin's name.
    pub name: *const c_char,
    /// Per-communicator init.
    pub init: Option<InitOld>,
    /// Adjusts the cost table and the channel count of one collective.
    pub get_coll_info: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            coll: c_int,
            bytes: usize,
            num_pipe_ops: c_int,
            cost_table: *mut *mut c_float,
            num_algo: c_int,
            num_proto: c_int,
            nchannels: *mut c_int,
        ) -> NcclResult,
    >,
    /// Per-communicator teardown.
    pub destroy: Option<unsafe extern "C" fn(ctx: *mut c_void) -> NcclResult>,
}

/// `ncclTuner_v2_t`: the plugin names an algorithm and a protocol instead of a cost table.
#[repr(C)]
pub struct TunerV2 {
    /// The plugin's name.
    pub name: *const c_char,
    /// Per-communicator init.
    pub init: Option<InitOld>,
    /// Sets the algorithm, protocol and channels of one collective (left alone: NCCL's own).
    pub get_coll_info: Option<
        unsafe extern "C" fn(
            ctx: *mut c_void,
            coll: c_int,
            bytes: usize,
            coll_net_support: c_int,
            nvls_support: c_int,
            num_pipe_ops: c_int,
            algorithm: *mut c_int,
            protocol: *mut c_int,
            nchannels: *mut c_int,
        ) -> NcclResult,
    >,
    /// Per-communicator teardown.
    pub destroy: Option<unsafe extern "C" fn(ctx: *mut c_void) -> NcclResult>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layouts NCCL 2.28.9's tuner header gives (x86-64).
    #[test]
    fn layouts_match_nccl() {
        assert_eq!(size_of::<NvlDomainInfo>(), 12);
        assert_eq!(size_of::<TunerConstants>(), 132 * 8);
        assert_eq!(size_of::<TunerV5>(), 32);
        assert_eq!(size_of::<TunerV6>(), 40);
        assert_eq!(std::mem::offset_of!(TunerV6, get_chunk_size), 32);
        assert_eq!(size_of::<TunerV2>(), 32);
    }
}
