//! NCCL tuner plugins (`NCCL_TUNER_PLUGIN`): a library that adjusts, per collective, the cost
//! table NCCL's choice of algorithm and protocol is read from, and the channel count.
//!
//! Found as NCCL 2.28 finds it: `NCCL_TUNER_PLUGIN` unset means `libnccl-tuner.so`, `none` no
//! plugin; a value is `dlopen`ed as given and, when that fails and it is a bare name, as
//! `libnccl-tuner-<value>.so`; the newest of `ncclTunerPlugin_v6` … `v2` it exports is used
//! (v6, of NCCL 2.30, through its v5 members).
//! Without a tuner library, the network plugin's library (`NCCL_NET_PLUGIN`) is searched for
//! the same symbols, as NCCL does. The library stays loaded for the life of the process; each
//! communicator gets its own plugin context ([`TunerContext`]).
//!
//! oxccl's own tuner ([`crate::plan::tuner`]) decides first. The table handed to the plugin
//! holds a latency-bandwidth estimate for every ring and tree protocol the operation has, with
//! oxccl's choice the cheapest (where it is a ring or tree one); what the plugin makes cheapest
//! instead, and a channel count it sets, then replace oxccl's choice.

pub mod abi;

use crate::error::{Error, Result};
use crate::plan::{Algorithm, CollKind, Protocol};
use abi::{NUM_ALGORITHMS, NUM_PROTOCOLS};
use libloading::os::unix::Library;
use std::ffi::{c_float, c_int, c_void};
use std::sync::{Mutex, OnceLock};

/// The library NCCL looks for when `NCCL_TUNER_PLUGIN` is unset.
pub const DEFAULT_LIBRARY: &str = "libnccl-tuner.so";

/// One of the exported structs, by version.
#[derive(Clone, Copy)]
enum VTable {
    V5(&'static abi::TunerV5),
    V4(&'static abi::TunerV4),
    V3(&'static abi::TunerV3),
    V2(&'static abi::TunerV2),
}

/// A loaded tuner plugin.
pub struct TunerPlugin {
    name: String,
    path: String,
    version: u32,
    vtable: VTable,
    _lib: Library,
}

// SAFETY: the vtable points into the library, which stays mapped while `_lib` lives; plugin
// calls go through a `TunerContext`, which serialises them per communicator.
unsafe impl Send for TunerPlugin {}
// SAFETY: as for Send; nothing in it changes after loading.
unsafe impl Sync for TunerPlugin {}

impl std::fmt::Debug for TunerPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (v{}, {})", self.name, self.version, self.path)
    }
}

pub use crate::plugin_lib::file_names;

/// The newest tuner struct `lib` exports.
fn find_vtable(lib: &Library) -> Option<(VTable, u32)> {
    for (sym, version) in abi::SYMBOLS {
        // SAFETY: only the symbol's address is taken.
        let Ok(p) = (unsafe { lib.get::<*mut c_void>(sym) }).map(|s| s.into_raw()) else {
            continue;
        };
        if p.is_null() {
            continue;
        }
        // SAFETY: the library exports this symbol as the struct of this version (the ABI's
        // contract); it stays mapped as long as the library (for the process: never closed).
        let vt = unsafe {
            match version {
                // v6 begins with v5's members (`abi::TunerV6`).
                6 => VTable::V5(&(*(p as *const abi::TunerV6)).v5),
                5 => VTable::V5(&*(p as *const abi::TunerV5)),
                4 => VTable::V4(&*(p as *const abi::TunerV4)),
                3 => VTable::V3(&*(p as *const abi::TunerV3)),
                _ => VTable::V2(&*(p as *const abi::TunerV2)),
            }
        };
        return Some((vt, version));
    }
    None
}

impl TunerPlugin {
    /// Loads the plugin `tuner` names (`NCCL_TUNER_PLUGIN`'s value, `None` when unset), else
    /// the tuner symbols of the network plugin `net` names; `None` when there is none.
    pub fn load(tuner: Option<&str>, net: Option<&str>) -> Option<TunerPlugin> {
        let tuner = tuner.map(str::trim);
        let candidates = crate::plugin_lib::candidates("tuner", tuner, Some(net))?;
        for names in candidates {
            let Some((lib, path)) = crate::plugin_lib::open_first(&names) else {
                continue;
            };
            let Some((vtable, version)) = find_vtable(&lib) else {
                tracing::debug!(target: "oxccl::tuning", "{path} exports no ncclTunerPlugin_v6..v2");
                continue;
            };
            let name_ptr = match vtable {
                VTable::V5(t) => t.name,
                VTable::V4(t) => t.name,
                VTable::V3(t) => t.name,
                VTable::V2(t) => t.name,
            };
            // SAFETY: the plugin's name is NULL or a C string in its library, which stays loaded.
            let name = unsafe { crate::plugin_lib::name_or_path(name_ptr, &path) };
            tracing::info!(target: "oxccl::tuning", "TUNER/Plugin: Using {name} (v{version}) from {path}");
            return Some(TunerPlugin {
                name,
                path,
                version,
                vtable,
                _lib: lib,
            });
        }
        if tuner.is_some() {
            tracing::warn!(
                target: "oxccl::tuning",
                "NCCL_TUNER_PLUGIN={}: no tuner plugin could be loaded; using oxccl's own tuning",
                tuner.unwrap_or_default()
            );
        }
        None
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The ABI version in use (2 to 6).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// A context for one communicator of `nranks` ranks on `nnodes` hosts (`init`).
    pub fn context(
        &'static self,
        comm_id: u64,
        nranks: usize,
        nnodes: usize,
        ranks_per_node: (usize, usize),
    ) -> Result<TunerContext> {
        let log = crate::plugin_abi::logger();
        let mut ctx: *mut c_void = std::ptr::null_mut();
        let mut nvl = abi::NvlDomainInfo {
            n_nvl_domains: nnodes as c_int,
            min_ranks_per_nvl_domain: ranks_per_node.0 as c_int,
            max_ranks_per_nvl_domain: ranks_per_node.1 as c_int,
        };
        let mut constants = abi::TunerConstants::default();
        // SAFETY: every pointer is valid for the call; the plugin stores its context in `ctx`.
        let rc = unsafe {
            match self.vtable {
                VTable::V5(t) => t.init.map(|f| {
                    f(
                        &mut ctx,
                        comm_id,
                        nranks,
                        nnodes,
                        log,
                        &mut nvl,
                        &mut constants,
                    )
                }),
                VTable::V4(t) => t.init.map(|f| f(nranks, nnodes, log, &mut ctx)),
                VTable::V3(t) => t.init.map(|f| f(nranks, nnodes, log, &mut ctx)),
                VTable::V2(t) => t.init.map(|f| f(nranks, nnodes, log, &mut ctx)),
            }
        };
        match rc {
            Some(0) => Ok(TunerContext {
                plugin: self,
                ctx: Mutex::new(ctx as usize),
            }),
            Some(rc) => Err(Error::InvalidUsage(format!(
                "tuner plugin {}: init returned {rc}",
                self.name
            ))),
            None => Err(Error::InvalidUsage(format!(
                "tuner plugin {}: no init function",
                self.name
            ))),
        }
    }
}

/// The process's tuner plugin, loaded on first use from `tuner` and `net` (the values of
/// `NCCL_TUNER_PLUGIN` and `NCCL_NET_PLUGIN`).
pub fn process_plugin(tuner: Option<&str>, net: Option<&str>) -> Option<&'static TunerPlugin> {
    static PLUGIN: OnceLock<Option<TunerPlugin>> = OnceLock::new();
    PLUGIN
        .get_or_init(|| TunerPlugin::load(tuner, net))
        .as_ref()
}

/// A communicator's id for plugins (NCCL's commId): a hash of its unique id, the same on every
/// rank.
pub fn comm_id(id: &[u8]) -> u64 {
    id.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The tuner-plugin context of a communicator of `nranks` ranks on `hosts` (`None`: one host),
/// where `NCCL_TUNER_PLUGIN` (or the network plugin's library) gives a plugin; its `init`
/// failing is a warning, and the communicator tunes itself.
pub fn for_communicator(
    id: &[u8],
    nranks: u32,
    hosts: Option<&crate::plan::hosts::HostLayout>,
    rank: u32,
) -> Option<TunerContext> {
    use crate::config::{get, vars};
    let tuner = get(&vars::NCCL_TUNER_PLUGIN);
    let net = get(&vars::NCCL_NET_PLUGIN);
    let plugin = process_plugin(tuner.as_deref(), net.as_deref())?;
    let (nnodes, (min, max)) =
        hosts.map_or((1, (nranks, nranks)), |h| (h.hosts(), h.ranks_per_host()));
    let comm_id = comm_id(id);
    match plugin.context(
        comm_id,
        nranks as usize,
        nnodes as usize,
        (min as usize, max as usize),
    ) {
        Ok(ctx) => Some(ctx),
        Err(e) => {
            tracing::warn!(target: "oxccl::tuning", "rank {rank}: {e}; oxccl's own tuning is used");
            None
        }
    }
}

/// What a plugin changed for one collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Steer {
    /// The algorithm and protocol it made cheapest (or named), when it changed oxccl's choice.
    pub algo_proto: Option<(Algorithm, Protocol)>,
    /// The channel count it set, when it changed it.
    pub nchannels: Option<u32>,
}

impl Steer {
    /// Whether the plugin changed anything.
    pub fn any(&self) -> bool {
        self.algo_proto.is_some() || self.nchannels.is_some()
    }
}

/// One communicator's plugin context; dropping it calls the plugin's `finalize`.
pub struct TunerContext {
    plugin: &'static TunerPlugin,
    /// The plugin's context pointer, behind a lock: calls of one communicator are serialised.
    ctx: Mutex<usize>,
}

impl std::fmt::Debug for TunerContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TunerContext({:?})", self.plugin)
    }
}

/// NCCL's id of a collective a 2.28 tuner is asked about (the others are not).
fn func_id(kind: CollKind) -> Option<c_int> {
    Some(match kind {
        CollKind::Broadcast => abi::func::BROADCAST,
        CollKind::Reduce => abi::func::REDUCE,
        CollKind::AllGather => abi::func::ALL_GATHER,
        CollKind::ReduceScatter => abi::func::REDUCE_SCATTER,
        CollKind::AllReduce => abi::func::ALL_REDUCE,
        _ => return None,
    })
}

/// NCCL's row of an algorithm oxccl runs.
fn algo_row(a: Algorithm) -> Option<usize> {
    match a {
        Algorithm::Tree => Some(abi::ALGO_TREE as usize),
        Algorithm::Ring => Some(abi::ALGO_RING as usize),
        Algorithm::Direct => None,
    }
}

/// NCCL's column of a protocol.
fn proto_col(p: Protocol) -> usize {
    (match p {
        Protocol::Ll => abi::PROTO_LL,
        Protocol::Ll128 => abi::PROTO_LL128,
        Protocol::Simple => abi::PROTO_SIMPLE,
    }) as usize
}

/// The algorithm and protocol at NCCL's `(row, col)`, where oxccl runs it.
fn from_cell(row: c_int, col: c_int) -> Option<(Algorithm, Protocol)> {
    let a = match row {
        abi::ALGO_TREE => Algorithm::Tree,
        abi::ALGO_RING => Algorithm::Ring,
        _ => return None,
    };
    let p = match col {
        abi::PROTO_LL => Protocol::Ll,
        abi::PROTO_LL128 => Protocol::Ll128,
        abi::PROTO_SIMPLE => Protocol::Simple,
        _ => return None,
    };
    Some((a, p))
}

/// A rough time in us of `algo`/`proto` moving `bytes` over `nranks` ranks: magnitudes like
/// NCCL's table's, so that plugins that compare or rescale entries see sensible values.
fn estimate_us(algo: Algorithm, proto: Protocol, bytes: u64, nranks: u32) -> f32 {
    let (latency, gbps) = match proto {
        Protocol::Ll => (5.0, 40.0),
        Protocol::Ll128 => (8.0, 150.0),
        Protocol::Simple => (12.0, 250.0),
    };
    let hops = match algo {
        Algorithm::Tree => 2.0 * f64::from(nranks.max(2)).log2(),
        _ => f64::from(nranks.max(2) - 1),
    };
    (latency * hops + bytes as f64 / (gbps * 1e3)) as f32
}

/// Cells either side of the cost table that a plugin may write by mistake: aws-ofi-nccl's
/// model tuner (v1.21.1) writes `table[-1][-1]` when it models none of the algorithms of a
/// collective, which under NCCL lands on another variable of its stack frame.
const TABLE_GUARD: usize = NUM_PROTOCOLS + 1;

/// The cost table handed to `getCollInfo` (NCCL's contiguous `[algo][proto]` layout), between
/// guard cells that stray writes of the plugin land on instead of oxccl's stack.
#[repr(C)]
struct GuardedTable {
    before: [c_float; TABLE_GUARD],
    cells: [[c_float; NUM_PROTOCOLS]; NUM_ALGORITHMS],
    after: [c_float; TABLE_GUARD],
}

const _: () = assert!(
    std::mem::offset_of!(GuardedTable, cells) == TABLE_GUARD * size_of::<c_float>()
        && size_of::<GuardedTable>()
            == (2 * TABLE_GUARD + NUM_ALGORITHMS * NUM_PROTOCOLS) * size_of::<c_float>()
);

/// The cheapest entry of `table` that may be chosen.
fn cheapest(table: &[[c_float; NUM_PROTOCOLS]; NUM_ALGORITHMS]) -> Option<(c_int, c_int)> {
    let mut best: Option<(c_int, c_int, c_float)> = None;
    for (r, row) in table.iter().enumerate() {
        for (c, &v) in row.iter().enumerate() {
            if v >= 0.0 && best.is_none_or(|b| v < b.2) {
                best = Some((r as c_int, c as c_int, v));
            }
        }
    }
    best.map(|(r, c, _)| (r, c))
}

impl TunerContext {
    /// Asks the plugin about `kind` moving `bytes` (per rank, as nccl-tests counts them) over
    /// `nranks` ranks, where oxccl chose `chosen` on `nchannels` channels and `candidates` are
    /// the algorithm/protocol pairs that may run it. A failing plugin call changes nothing (as
    /// under NCCL).
    pub fn steer(
        &self,
        kind: CollKind,
        bytes: u64,
        nranks: u32,
        chosen: (Algorithm, Protocol),
        nchannels: u32,
        candidates: &[(Algorithm, Protocol)],
    ) -> Steer {
        let Some(func) = func_id(kind) else {
            return Steer::default();
        };
        let ctx = self.ctx.lock().unwrap_or_else(|p| p.into_inner());
        let ctx_ptr = *ctx as *mut c_void;
        let mut nch = nchannels as c_int;
        let mut table = [[abi::IGNORE; NUM_PROTOCOLS]; NUM_ALGORITHMS];
        for &(a, p) in candidates {
            if let Some(r) = algo_row(a) {
                table[r][proto_col(p)] = estimate_us(a, p, bytes, nranks);
            }
        }
        if let Some(r) = algo_row(chosen.0) {
            let floor = cheapest(&table).map_or(0.0, |(r2, c2)| table[r2 as usize][c2 as usize]);
            table[r][proto_col(chosen.1)] = (floor * 0.99).max(0.0);
        }
        let before = cheapest(&table);
        let mut guarded = GuardedTable {
            before: [abi::IGNORE; TABLE_GUARD],
            cells: table,
            after: [abi::IGNORE; TABLE_GUARD],
        };
        // NCCL passes its contiguous table cast to `float**` (see `abi`), not row pointers. The
        // pointer is taken from the whole struct, so that writes to the guards stay within it.
        let base: *mut GuardedTable = &mut guarded;
        let cost_table = base
            .cast::<c_float>()
            .wrapping_add(TABLE_GUARD)
            .cast::<*mut c_float>();
        let mut algo: c_int = -1;
        let mut proto: c_int = -1;
        // SAFETY: the context came from this plugin's init; the table holds NUM_ALGORITHMS rows
        // of NUM_PROTOCOLS floats, as NCCL's, and lives across the call, as do the outputs.
        let rc = unsafe {
            match self.plugin.vtable {
                // v4, v5 and v6 share `getCollInfo`.
                VTable::V5(&abi::TunerV5 { get_coll_info, .. })
                | VTable::V4(&abi::TunerV4 { get_coll_info, .. }) => get_coll_info.map(|f| {
                    f(
                        ctx_ptr,
                        func,
                        bytes as usize,
                        1,
                        cost_table,
                        NUM_ALGORITHMS as c_int,
                        NUM_PROTOCOLS as c_int,
                        0,
                        &mut nch,
                    )
                }),
                VTable::V3(t) => t.get_coll_info.map(|f| {
                    f(
                        ctx_ptr,
                        func,
                        bytes as usize,
                        1,
                        cost_table,
                        NUM_ALGORITHMS as c_int,
                        NUM_PROTOCOLS as c_int,
                        &mut nch,
                    )
                }),
                VTable::V2(t) => t.get_coll_info.map(|f| {
                    f(
                        ctx_ptr,
                        func,
                        bytes as usize,
                        0,
                        0,
                        1,
                        &mut algo,
                        &mut proto,
                        &mut nch,
                    )
                }),
            }
        };
        drop(ctx);
        if guarded
            .before
            .iter()
            .chain(&guarded.after)
            .any(|&v| v != abi::IGNORE)
        {
            tracing::debug!(target: "oxccl::tuning", "tuner plugin {}: getCollInfo wrote outside the cost table (ignored)", self.plugin.name);
        }
        if rc != Some(0) {
            tracing::debug!(target: "oxccl::tuning", "tuner plugin {}: getCollInfo returned {rc:?}; oxccl's choice stands", self.plugin.name);
            return Steer::default();
        }
        let after = match self.plugin.vtable {
            VTable::V2(_) => (algo >= 0 && proto >= 0).then_some((algo, proto)),
            _ => cheapest(&guarded.cells).filter(|&cell| Some(cell) != before),
        };
        let algo_proto = after
            .and_then(|(r, c)| from_cell(r, c))
            .filter(|ap| candidates.contains(ap) && *ap != chosen);
        let nchannels = (nch > 0 && nch as u32 != nchannels).then_some(nch as u32);
        Steer {
            algo_proto,
            nchannels,
        }
    }
}

impl Drop for TunerContext {
    fn drop(&mut self) {
        let ctx = *self.ctx.get_mut().unwrap_or_else(|p| p.into_inner()) as *mut c_void;
        // SAFETY: the context came from this plugin's init and is finalized once, here.
        let rc = unsafe {
            match self.plugin.vtable {
                VTable::V5(t) => t.finalize.map(|f| f(ctx)),
                VTable::V4(t) => t.destroy.map(|f| f(ctx)),
                VTable::V3(t) => t.destroy.map(|f| f(ctx)),
                VTable::V2(t) => t.destroy.map(|f| f(ctx)),
            }
        };
        if rc.is_some_and(|rc| rc != 0) {
            tracing::warn!(target: "oxccl::tuning", "tuner plugin {}: finalize returned {rc:?}", self.plugin.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin_abi::{Logger, NcclResult};

    /// What NCCL's tuners do with the table: cast it back to `float (*)[NCCL_NUM_PROTOCOLS]`.
    unsafe extern "C" fn contiguous_info(
        _ctx: *mut c_void,
        _coll: c_int,
        _bytes: usize,
        _pipe: c_int,
        table: *mut *mut c_float,
        num_algo: c_int,
        num_proto: c_int,
        _reg: c_int,
        nch: *mut c_int,
    ) -> NcclResult {
        assert_eq!((num_algo, num_proto), (7, 3));
        let t = table.cast::<[c_float; NUM_PROTOCOLS]>();
        // SAFETY: NCCL's layout: 7 rows of 3 floats from `table`; the write at [-1][-1] is the
        // stray one of aws-ofi-nccl's model tuner, which the guard cells take.
        unsafe {
            assert!((*t.add(abi::ALGO_TREE as usize))[abi::PROTO_LL128 as usize] >= 0.0);
            (*t.add(abi::ALGO_TREE as usize))[abi::PROTO_LL128 as usize] = 0.0;
            t.cast::<c_float>()
                .wrapping_sub(NUM_PROTOCOLS + 1)
                .write(0.0);
            *nch = 5;
        }
        0
    }

    unsafe extern "C" fn init(
        ctx: *mut *mut c_void,
        _comm_id: u64,
        _nranks: usize,
        _nnodes: usize,
        _log: Logger,
        _nvl: *mut abi::NvlDomainInfo,
        _constants: *mut abi::TunerConstants,
    ) -> NcclResult {
        // SAFETY: `ctx` is valid for the call (the loader's contract).
        unsafe { *ctx = std::ptr::null_mut() };
        0
    }

    /// A plugin that indexes the table as NCCL lays it out (contiguous rows, as aws-ofi-nccl's
    /// tuner does) steers oxccl, and its stray write before the table harms nothing.
    #[test]
    fn cost_table_is_contiguous_as_nccls() {
        let vtable: &'static abi::TunerV6 = Box::leak(Box::new(abi::TunerV6 {
            v5: abi::TunerV5 {
                name: c"contiguous".as_ptr(),
                init: Some(init),
                get_coll_info: Some(contiguous_info),
                finalize: None,
            },
            get_chunk_size: None,
        }));
        let plugin: &'static TunerPlugin = Box::leak(Box::new(TunerPlugin {
            name: "contiguous".into(),
            path: "test".into(),
            version: 6,
            vtable: VTable::V5(&vtable.v5),
            _lib: Library::this(),
        }));
        let ctx = plugin.context(1, 8, 4, (2, 2)).unwrap();
        let all = [Algorithm::Ring, Algorithm::Tree]
            .into_iter()
            .flat_map(|a| [Protocol::Ll, Protocol::Ll128, Protocol::Simple].map(|p| (a, p)))
            .collect::<Vec<_>>();
        let s = ctx.steer(
            CollKind::AllReduce,
            1 << 20,
            8,
            (Algorithm::Ring, Protocol::Simple),
            2,
            &all,
        );
        assert_eq!(
            s,
            Steer {
                algo_proto: Some((Algorithm::Tree, Protocol::Ll128)),
                nchannels: Some(5),
            }
        );
    }
}
