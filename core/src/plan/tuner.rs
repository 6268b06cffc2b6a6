//! The tuner: which algorithm, protocol, channel count and chunk size an operation runs with.
//!
//! Defaults come from one table of crossover points (`heuristics.txt`); users restrict the choice
//! with NCCL's variables `NCCL_ALGO` and `NCCL_PROTO` and force sizes with `OXCCL_NCHANNELS` and
//! `OXCCL_CHUNK_BYTES`. A restriction never makes an operation unplannable: when none of the
//! allowed algorithms implements the operation, the default is used, as NCCL does. Across hosts
//! the crossovers follow the network's speed and latency ([`NetLink`], `scale_to_link`).

#![forbid(unsafe_code)]

use super::heuristics::HEURISTICS;
use super::net_link::NetLink;
use super::one_shot::Variant;
use super::tags::MAX_CHANNELS;
use super::{Algorithm, CollKind, P2pLl, P2pShape, Protocol, algorithms_for};
use crate::config::{Env, vars};
use crate::datatype::DataType;

/// Coarse description of what connects the ranks (refined once topology detection exists).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Topology {
    /// All ranks are host (CPU) ranks on one machine.
    Host,
    /// GPUs of one node, joined by NVLink/xGMI or only by PCIe.
    SingleNodeGpu {
        /// Whether the GPUs are joined by NVLink (or xGMI).
        nvlink: bool,
    },
    /// Ranks on several nodes (or pairs of one node that meet through host memory).
    MultiNode {
        /// The network between the nodes, the same on every rank.
        link: NetLink,
    },
}

/// What the tuner decided for one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Choice {
    /// Algorithm (always one that implements the operation).
    pub algo: Algorithm,
    /// Protocol.
    pub proto: Protocol,
    /// Channels, 1 to [`MAX_CHANNELS`].
    pub nchannels: u32,
    /// Elements per pipeline chunk, at least 1.
    pub chunk_elems: u64,
}

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;

/// What one network hop costs in oxccl's proxies on top of the link's own latency, in ns:
/// `oxccl-net`'s `latency_probe` measured about 10 us one way through two proxies and the
/// sockets on loopback, against about 5 over plain loopback TCP (docs/perf/defaults.md,
/// "Network hop").
const PROXY_HOP_NS: u64 = 5_000;

/// How far a link may move a measured crossover from its table value, either way: the model
/// rests on one calibration point, so it is trusted for direction and rough size only.
const LINK_SCALE_LIMIT: u64 = 16;

/// One network hop's latency in ns as a plan meets it: the link's own (the socket assumption
/// when it reports none) and what the proxies at both ends add.
fn hop_latency_ns(link: NetLink) -> u64 {
    u64::from(link.latency_ns()) + PROXY_HOP_NS
}

/// The bytes `link` holds in flight during one hop (bandwidth x hop latency), in Mbit/s x ns
/// (8000 of them make a byte): only ratios of it are used.
fn in_flight(link: NetLink) -> u128 {
    u128::from(link.speed_mbps()) * u128::from(hop_latency_ns(link))
}

/// `measured`, a crossover measured on [`NetLink::SOCKETS_ON_LOOPBACK`], moved to `link`.
///
/// The several-host crossovers each trade latency against wire time. With a hop costing
/// L + m/B for m bytes (L: hop latency, B: bandwidth), a choice that saves some latencies but
/// puts m/B more (or a fixed fraction more) on the wire breaks even where the two are equal, at
/// an m proportional to L x B: the bytes in flight. So the crossover scales with them, exactly
/// 1 on the calibration link, and within [`LINK_SCALE_LIMIT`] of `measured` either way.
fn scale_to_link(measured: u64, link: NetLink) -> u64 {
    let scaled = u128::from(measured) * in_flight(link) / in_flight(NetLink::SOCKETS_ON_LOOPBACK);
    u64::try_from(scaled).unwrap_or(u64::MAX).clamp(
        measured / LINK_SCALE_LIMIT,
        measured.saturating_mul(LINK_SCALE_LIMIT),
    )
}

/// The size thresholds of one topology, as its network link leaves them ([`crossovers`]: the
/// LL and two-rank direct limits move with it, the channel thresholds do not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Crossovers {
    /// LL up to this size.
    ll_max: u64,
    /// Send/receive messages as LL packets up to this size.
    p2p_ll_max: u64,
    /// With two ranks, Direct up to this size.
    direct_max_two_ranks: u64,
    /// A channel for every this many bytes (LL128, Simple).
    bytes_per_channel: u64,
    /// A channel for every this many bytes with LL.
    ll_bytes_per_channel: u64,
}

impl Crossovers {
    /// Column `ti` of [`HEURISTICS`], as measured.
    fn table(ti: usize) -> Crossovers {
        let h = &HEURISTICS;
        Crossovers {
            ll_max: h.ll_max[ti],
            p2p_ll_max: h.p2p_ll_max[ti],
            direct_max_two_ranks: h.direct_max_two_ranks[ti],
            bytes_per_channel: h.bytes_per_channel[ti],
            ll_bytes_per_channel: h.ll_bytes_per_channel[ti],
        }
    }

    /// These thresholds, measured on the calibration link, moved to `link` by
    /// [`scale_to_link`] where they trade latency against wire time:
    /// - LL sends 16 bytes per 8 of data to spare the fence and the counter round trip before
    ///   the data may be read: it pays until the extra wire time exceeds the latency saved.
    /// - Two ranks run direct in one hop where the ring takes two that wait on each other; the
    ///   saved hop stops mattering once the wire time dwarfs it (where the measurements tied).
    ///
    /// The channel thresholds stay as measured: a channel is one more network connection,
    /// worth its setup per message once its share keeps that connection busy for longer, which
    /// depends on what one connection moves (a socket and its helper thread, a NIC queue), not
    /// on the link's total speed. A faster link needs more channels to fill, which is
    /// `max_channels`, not this threshold (not tuned per link yet).
    fn on_link(self, link: NetLink) -> Crossovers {
        Crossovers {
            ll_max: scale_to_link(self.ll_max, link),
            p2p_ll_max: scale_to_link(self.p2p_ll_max, link),
            direct_max_two_ranks: scale_to_link(self.direct_max_two_ranks, link),
            ..self
        }
    }
}

/// The thresholds `topo` runs with: its column of the table, moved to the network link across
/// hosts.
fn crossovers(topo: Topology) -> Crossovers {
    let c = Crossovers::table(topo_index(topo));
    match topo {
        Topology::MultiNode { link } => c.on_link(link),
        _ => c,
    }
}

/// `bytes` for a log line: whole MiB or KiB when it is one, else bytes.
fn size_name(bytes: u64) -> String {
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= KIB && bytes.is_multiple_of(KIB) {
        format!("{} KiB", bytes / KIB)
    } else {
        format!("{bytes} B")
    }
}

/// What the tuner makes of `link` across hosts, for the log at init.
pub fn link_summary(link: NetLink) -> String {
    let c = crossovers(Topology::MultiNode { link });
    format!(
        "tuner: network {link}, {} us per hop with the proxies: LL up to {}, two ranks direct up \
         to {}, a channel per {} (crossovers calibrated on sockets over loopback only)",
        hop_latency_ns(link) as f64 / 1000.0,
        size_name(c.ll_max),
        size_name(c.direct_max_two_ranks),
        size_name(c.bytes_per_channel),
    )
}

const PROTOS: [Protocol; 3] = [Protocol::Ll, Protocol::Ll128, Protocol::Simple];
const ALGOS: [Algorithm; 3] = [Algorithm::Ring, Algorithm::Tree, Algorithm::Direct];
/// Every collective kind, in [`kind_index`] order.
pub(crate) const KINDS: [CollKind; 10] = [
    CollKind::AllReduce,
    CollKind::Broadcast,
    CollKind::Reduce,
    CollKind::AllGather,
    CollKind::ReduceScatter,
    CollKind::AllToAll,
    CollKind::AllToAllv,
    CollKind::Gather,
    CollKind::Scatter,
    CollKind::SendRecv,
];

fn proto_index(p: Protocol) -> usize {
    match p {
        Protocol::Ll => 0,
        Protocol::Ll128 => 1,
        Protocol::Simple => 2,
    }
}

fn algo_bit(a: Algorithm) -> u8 {
    match a {
        Algorithm::Ring => 1,
        Algorithm::Tree => 2,
        Algorithm::Direct => 4,
    }
}

fn proto_bit(p: Protocol) -> u8 {
    1 << proto_index(p)
}

fn kind_index(k: CollKind) -> usize {
    KINDS
        .iter()
        .position(|&x| x == k)
        .expect("every kind is listed")
}

/// The table's largest per-peer message for the LL one-shot variant on NVLink (the Simple and
/// two-shot variants take larger ones).
pub fn one_shot_ll_max_nvlink() -> u64 {
    HEURISTICS.one_shot_ll_max_nvlink
}

/// Whether the table's `_nvlink_many` rows apply: more than two ranks over NVLink (the NVLink
/// column's own values are those of two GPUs).
fn many_on_nvlink(nranks: u32, topo: Topology) -> bool {
    nranks > 2 && topo == (Topology::SingleNodeGpu { nvlink: true })
}

/// Smallest Simple message that may take `wide_channels` channels with `nranks` ranks on
/// topology `ti` (`u64::MAX`: none); only two ranks are measured wide.
fn wide_channels_min(nranks: u32, ti: usize) -> u64 {
    if nranks == 2 {
        HEURISTICS.wide_channels_min[ti]
    } else {
        u64::MAX
    }
}

fn topo_index(t: Topology) -> usize {
    match t {
        Topology::Host => 0,
        Topology::SingleNodeGpu { nvlink: false } => 1,
        Topology::SingleNodeGpu { nvlink: true } => 2,
        Topology::MultiNode { .. } => 3,
    }
}

/// The outcome of looking up one name of an `NCCL_ALGO` / `NCCL_PROTO` list.
enum Name {
    /// A name we implement, as its bit.
    Known(u8),
    /// A name NCCL knows but oxccl does not implement.
    NotImplemented,
    /// Not a name at all.
    Unknown,
}

fn algo_name(s: &str) -> Name {
    match s {
        "ring" => Name::Known(algo_bit(Algorithm::Ring)),
        "tree" => Name::Known(algo_bit(Algorithm::Tree)),
        // oxccl's own name; NCCL has no one-shot algorithm of this name.
        "direct" => Name::Known(algo_bit(Algorithm::Direct)),
        "collnetdirect" | "collnetchain" | "collnet" | "nvls" | "nvlstree" | "pat" => {
            Name::NotImplemented
        }
        _ => Name::Unknown,
    }
}

fn proto_name(s: &str) -> Name {
    match s {
        "ll" => Name::Known(proto_bit(Protocol::Ll)),
        "ll128" => Name::Known(proto_bit(Protocol::Ll128)),
        "simple" => Name::Known(proto_bit(Protocol::Simple)),
        _ => Name::Unknown,
    }
}

fn kind_name(s: &str) -> Option<&'static [CollKind]> {
    Some(match s {
        "allreduce" => &[CollKind::AllReduce],
        "broadcast" => &[CollKind::Broadcast],
        "reduce" => &[CollKind::Reduce],
        "allgather" => &[CollKind::AllGather],
        "reducescatter" => &[CollKind::ReduceScatter],
        "alltoall" => &[CollKind::AllToAll],
        "alltoallv" => &[CollKind::AllToAllv],
        "gather" => &[CollKind::Gather],
        "scatter" => &[CollKind::Scatter],
        "sendrecv" | "send" | "recv" => &[CollKind::SendRecv],
        _ => return None,
    })
}

fn normalize(s: &str) -> String {
    s.trim()
        .chars()
        .filter(|c| !matches!(c, '_' | '-' | ' '))
        .flat_map(char::to_lowercase)
        .collect()
}

/// One list, `a,b,c` or `^a,b` (everything but), as a bit set over `all`.
fn parse_list(var: &str, list: &str, all: u8, lookup: fn(&str) -> Name) -> u8 {
    let list = list.trim();
    let (exclude, body) = match list.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, list),
    };
    let mut mask = 0;
    for raw in body.split(',') {
        let name = normalize(raw);
        if name.is_empty() {
            continue;
        }
        match lookup(&name) {
            Name::Known(bit) => mask |= bit,
            Name::NotImplemented => {
                tracing::info!("{var}: {} is not implemented by oxccl; ignored", raw.trim());
            }
            Name::Unknown => crate::config::bad_value(
                var,
                raw.trim(),
                "a known algorithm or protocol name",
                "the other entries",
            ),
        }
    }
    if exclude { all & !mask } else { mask }
}

/// A whole variable: `;`-separated entries, each a list for every operation or `op:list` for one.
fn parse_filter(var: &str, spec: &str, all: u8, lookup: fn(&str) -> Name) -> [Option<u8>; 10] {
    let mut out = [None; 10];
    for entry in spec.split(';') {
        if entry.trim().is_empty() {
            continue;
        }
        match entry.split_once(':') {
            Some((op, list)) => match kind_name(&normalize(op)) {
                Some(kinds) => {
                    let m = parse_list(var, list, all, lookup);
                    for &k in kinds {
                        out[kind_index(k)] = Some(m);
                    }
                }
                None => crate::config::bad_value(
                    var,
                    entry.trim(),
                    "`op:list` with a known operation",
                    "the other entries",
                ),
            },
            None => {
                let m = parse_list(var, entry, all, lookup);
                out = [Some(m); 10];
            }
        }
    }
    out
}

/// Chooses algorithm, protocol, channels and chunk size; holds the user's overrides.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tuner {
    /// Allowed algorithms per operation (bits of [`algo_bit`]); `None`: no restriction.
    algos: [Option<u8>; 10],
    /// Allowed protocols per operation (bits of [`proto_bit`]); `None`: no restriction.
    protos: [Option<u8>; 10],
    /// Forced channel count.
    nchannels: Option<u32>,
    /// `NCCL_P2P_LL_THRESHOLD`: send/receive LL up to this size on every topology.
    p2p_ll_threshold: Option<u64>,
    /// Forced chunk size in bytes.
    chunk_bytes: Option<u64>,
    /// `OXCCL_ZERO_COPY`: `Some(false)` never, `Some(true)` at every size; `None`: the table.
    zero_copy: Option<bool>,
    /// `OXCCL_ONE_SHOT`: `Some(false)` never, `Some(true)` whenever the kernels take the
    /// message; `None`: the table.
    one_shot: Option<bool>,
    /// `OXCCL_TWO_SHOT`: `Some(false)` never, `Some(true)` for every AllReduce the kernel takes;
    /// `None`: the table.
    two_shot: Option<bool>,
    /// `OXCCL_SPLIT_DIRECTIONS`: `Some(false)` never, `Some(true)` at every size; `None`: the
    /// table.
    split_directions: Option<bool>,
}

impl Tuner {
    /// Reads `NCCL_ALGO`, `NCCL_PROTO`, `OXCCL_NCHANNELS` and `OXCCL_CHUNK_BYTES`.
    pub fn from_env() -> Tuner {
        Tuner::from(Env::PROCESS)
    }

    /// Like [`Tuner::from_env`], reading variables through `get` (tests, configuration files).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Tuner {
        Tuner::from(Env::from_fn(&get))
    }

    fn from(env: Env<'_>) -> Tuner {
        let mut t = Tuner::default();
        let all_algos = ALGOS.iter().fold(0, |m, &a| m | algo_bit(a));
        let all_protos = PROTOS.iter().fold(0, |m, &p| m | proto_bit(p));
        if let Some(v) = env.get(&vars::NCCL_ALGO).filter(|v| !v.trim().is_empty()) {
            t.algos = parse_filter("NCCL_ALGO", &v, all_algos, algo_name);
        }
        if let Some(v) = env.get(&vars::NCCL_PROTO).filter(|v| !v.trim().is_empty()) {
            t.protos = parse_filter("NCCL_PROTO", &v, all_protos, proto_name);
        }
        t.nchannels = env.get(&vars::OXCCL_NCHANNELS).map(|n| {
            if n > u64::from(MAX_CHANNELS) {
                crate::config::bad_value(
                    "OXCCL_NCHANNELS",
                    &n.to_string(),
                    &format!("at most {MAX_CHANNELS}"),
                    &MAX_CHANNELS.to_string(),
                );
            }
            n.min(u64::from(MAX_CHANNELS)) as u32
        });
        t.chunk_bytes = env.get(&vars::OXCCL_CHUNK_BYTES);
        t.p2p_ll_threshold = env.get(&vars::NCCL_P2P_LL_THRESHOLD);
        t.zero_copy = env.get(&vars::OXCCL_ZERO_COPY);
        t.one_shot = env.get(&vars::OXCCL_ONE_SHOT);
        t.two_shot = env.get(&vars::OXCCL_TWO_SHOT);
        t.split_directions = env.get(&vars::OXCCL_SPLIT_DIRECTIONS);
        t
    }

    /// Whether a `kind` collective whose per-peer message is `message_bytes` runs on the
    /// one-shot kernels, and on which variant, provided the backend has them and they take that
    /// size. A forced algorithm turns them off, as it does zero copy, and so does a forced
    /// protocol unless `OXCCL_ONE_SHOT=1`, which uses them wherever they fit (in the forced
    /// protocol, if any); `=0` never. AllReduce runs on the two-shot variant where the Simple
    /// one would and the table says so, or wherever `OXCCL_TWO_SHOT=1` (unless a forced protocol
    /// excludes Simple); `OXCCL_TWO_SHOT=0` never.
    pub fn one_shot(
        &self,
        kind: CollKind,
        message_bytes: u64,
        nranks: u32,
        topo: Topology,
    ) -> Option<Variant> {
        let k = kind_index(kind);
        let simple_allowed = self.protos[k].is_none_or(|m| m & proto_bit(Protocol::Simple) != 0);
        if kind == CollKind::AllReduce && self.two_shot == Some(true) && simple_allowed {
            return Some(Variant::TwoShot);
        }
        let proto = self.one_shot_proto(kind, message_bytes, nranks, topo)?;
        let two_shot = kind == CollKind::AllReduce
            && proto == Protocol::Simple
            && self.two_shot.is_none()
            && many_on_nvlink(nranks, topo)
            && message_bytes <= HEURISTICS.two_shot_max_nvlink_many;
        Some(match proto {
            _ if two_shot => Variant::TwoShot,
            Protocol::Ll => Variant::Ll,
            _ => Variant::Simple,
        })
    }

    /// The LL or Simple one-shot variant, as [`Tuner::one_shot`] describes.
    fn one_shot_proto(
        &self,
        kind: CollKind,
        message_bytes: u64,
        nranks: u32,
        topo: Topology,
    ) -> Option<Protocol> {
        if !super::one_shot::supports(kind) {
            return None;
        }
        let k = kind_index(kind);
        let max = if many_on_nvlink(nranks, topo) {
            HEURISTICS.one_shot_max_nvlink_many[k]
        } else {
            HEURISTICS.one_shot_max_nvlink[k]
        };
        let by_size = if message_bytes <= HEURISTICS.one_shot_ll_max_nvlink {
            Protocol::Ll
        } else {
            Protocol::Simple
        };
        match self.one_shot {
            Some(false) => None,
            Some(true) => match self.protos[k] {
                None => Some(by_size),
                Some(mask) if mask & proto_bit(by_size) != 0 => Some(by_size),
                Some(mask) => [Protocol::Ll, Protocol::Simple]
                    .into_iter()
                    .find(|&p| mask & proto_bit(p) != 0),
            },
            None => (topo == (Topology::SingleNodeGpu { nvlink: true })
                && self.algos[k].is_none()
                && self.protos[k].is_none()
                && message_bytes <= max)
                .then_some(by_size),
        }
    }

    /// Whether `kind` moving `bytes` over `nranks` uses a zero-copy plan when the ranks share an
    /// address space. By default only where the table says so and `NCCL_ALGO`/`NCCL_PROTO`
    /// leave the operation unrestricted (a forced algorithm is what the user wants to run);
    /// `OXCCL_ZERO_COPY=1` forces it at every size, `=0` turns it off.
    pub fn zero_copy(&self, kind: CollKind, bytes: u64, nranks: u32, topo: Topology) -> bool {
        if !super::zero_copy::supports(kind) {
            return false;
        }
        match self.zero_copy {
            Some(forced) => forced,
            None => {
                let k = kind_index(kind);
                let min = match topo {
                    _ if many_on_nvlink(nranks, topo) => HEURISTICS.zero_copy_min_nvlink_many[k],
                    Topology::SingleNodeGpu { nvlink: true } => HEURISTICS.zero_copy_min_nvlink[k],
                    // AlltoAll's zero-copy plan has been measured on NVLink only.
                    _ if kind == CollKind::AllToAll => u64::MAX,
                    _ => HEURISTICS.zero_copy_min[topo_index(topo)],
                };
                self.algos[k].is_none() && self.protos[k].is_none() && bytes >= min
            }
        }
    }

    /// A tuner that forces `algo` and/or `proto` for every operation (tests).
    pub fn with(algo: Option<Algorithm>, proto: Option<Protocol>) -> Tuner {
        Tuner {
            algos: [algo.map(algo_bit); 10],
            protos: [proto.map(proto_bit); 10],
            ..Tuner::default()
        }
    }

    /// Largest send/receive message on `topo` that moves as LL packets: `NCCL_P2P_LL_THRESHOLD`
    /// if set, else the table's `p2p_ll_max` (moved with the link across hosts as `ll_max` is;
    /// `p2p_ll_max_nvlink_many` for more than two ranks on NVLink); 0 when `NCCL_PROTO`
    /// excludes LL for send/receive. Both ends of a message must see the same value.
    pub fn p2p_ll_max(&self, nranks: u32, topo: Topology) -> u64 {
        match self.protos[kind_index(CollKind::SendRecv)] {
            Some(mask) if mask & proto_bit(Protocol::Ll) == 0 => 0,
            _ => self.p2p_ll_threshold.unwrap_or_else(|| {
                if many_on_nvlink(nranks, topo) {
                    HEURISTICS.p2p_ll_max_nvlink_many
                } else {
                    crossovers(topo).p2p_ll_max
                }
            }),
        }
    }

    /// How send/receive messages among `nranks` ranks on `topo` are cut and spread: `choice`'s
    /// channels and Simple chunk, a channel more for every `p2p_bytes_per_channel` (LL:
    /// `p2p_ll_bytes_per_channel`) of a message, and LL up to [`Tuner::p2p_ll_max`] in chunks
    /// of `ll_chunk_bytes` (what one LL FIFO holds; `None`: the backend has no LL, so none).
    /// Both ends of a message must get the same shape.
    pub fn p2p_shape(
        &self,
        nranks: u32,
        topo: Topology,
        choice: &Choice,
        ll_chunk_bytes: Option<u64>,
    ) -> P2pShape {
        let t = topo_index(topo);
        P2pShape {
            nchannels: choice.nchannels,
            chunk_elems: choice.chunk_elems,
            bytes_per_channel: HEURISTICS.p2p_bytes_per_channel[t],
            ll: ll_chunk_bytes.map_or_else(P2pLl::default, |fits| P2pLl {
                max_bytes: self.p2p_ll_max(nranks, topo),
                chunk_bytes: fits,
                bytes_per_channel: HEURISTICS.p2p_ll_bytes_per_channel[t],
            }),
            narrow_channels: HEURISTICS.max_channels[t],
            wide_min_bytes: wide_channels_min(nranks, t),
        }
    }

    /// Whether a send/receive group whose largest message is `bytes` (an AlltoAll whose
    /// per-peer block is) runs its sends and receives in blocks of their own; `in_place`: its
    /// receive buffers overlap its send buffers (`OXCCL_SPLIT_DIRECTIONS` forces either way).
    pub fn split_directions(&self, bytes: u64, in_place: bool, topo: Topology) -> bool {
        let h = &HEURISTICS;
        let min = if in_place {
            h.split_directions_min_in_place
        } else {
            h.split_directions_min
        };
        self.split_directions
            .unwrap_or_else(|| bytes >= min[topo_index(topo)])
    }

    /// Whether a Scatter, Gather or AlltoAll whose per-peer block is `bytes` copies this rank's
    /// own block in channels of its own ([`super::local_copies_apart`]).
    pub fn copies_apart(&self, bytes: u64, topo: Topology) -> bool {
        bytes >= HEURISTICS.copies_apart_min[topo_index(topo)]
    }

    /// Picks algorithm, protocol, channel count and chunk size for `kind` moving `bytes` (total
    /// message bytes per rank as nccl-tests counts them) over `nranks` ranks.
    pub fn choose(
        &self,
        kind: CollKind,
        bytes: u64,
        dtype: DataType,
        nranks: u32,
        topo: Topology,
    ) -> Choice {
        let h = &HEURISTICS;
        let ki = kind_index(kind);
        let supported = algorithms_for(kind);
        let ti = topo_index(topo);
        let cross = crossovers(topo);
        let default_algo = default_algo(kind, bytes, nranks, ti, cross.direct_max_two_ranks);
        let algo = match self.algos[ki] {
            None => default_algo,
            Some(mask) => std::iter::once(default_algo)
                .chain(supported.iter().copied())
                .find(|&a| mask & algo_bit(a) != 0 && supported.contains(&a))
                .unwrap_or_else(|| {
                    tracing::debug!(
                        "NCCL_ALGO allows no algorithm that implements {kind:?}; using {default_algo:?}"
                    );
                    default_algo
                }),
        };
        let ll_max = if many_on_nvlink(nranks, topo) {
            h.ll_max_nvlink_many[ki]
        } else {
            cross.ll_max
        };
        let order: [Protocol; 3] = if bytes <= ll_max {
            [Protocol::Ll, Protocol::Ll128, Protocol::Simple]
        } else if bytes <= h.ll128_max {
            [Protocol::Ll128, Protocol::Simple, Protocol::Ll]
        } else {
            [Protocol::Simple, Protocol::Ll128, Protocol::Ll]
        };
        let proto = match self.protos[ki] {
            None => order[0],
            Some(mask) => order
                .into_iter()
                .find(|&p| mask & proto_bit(p) != 0)
                .unwrap_or_else(|| {
                    tracing::debug!("NCCL_PROTO allows no protocol; using {:?}", order[0]);
                    order[0]
                }),
        };
        let table = if topo == Topology::Host {
            &h.chunk_host
        } else {
            &h.chunk_gpu
        };
        let chunk_bytes = self.chunk_bytes.unwrap_or(table[proto_index(proto)]);
        let chunk_elems = (chunk_bytes / dtype.size() as u64).max(1);
        let nchannels = self.nchannels.unwrap_or_else(|| {
            let per = if proto == Protocol::Ll {
                cross.ll_bytes_per_channel
            } else {
                cross.bytes_per_channel
            };
            let wanted = (bytes / per.max(1)).max(1);
            let wide_min = wide_channels_min(nranks, ti);
            let wide = proto != Protocol::Ll && wide_min != u64::MAX && bytes >= wide_min;
            let most = if wide {
                h.wide_channels
            } else {
                h.max_channels[ti]
            };
            wanted.min(u64::from(most)) as u32
        });
        Choice {
            algo,
            proto,
            nchannels,
            chunk_elems,
        }
    }
}

/// The algorithm [`HEURISTICS`] picks when nothing is forced (always one that implements `kind`);
/// two ranks run direct up to `direct_max_two_ranks` ([`crossovers`]).
fn default_algo(
    kind: CollKind,
    bytes: u64,
    nranks: u32,
    ti: usize,
    direct_max_two_ranks: u64,
) -> Algorithm {
    let h = &HEURISTICS;
    match kind {
        CollKind::AllToAll
        | CollKind::AllToAllv
        | CollKind::Gather
        | CollKind::Scatter
        | CollKind::SendRecv => Algorithm::Direct,
        _ if bytes <= h.direct_max && nranks <= h.direct_max_ranks[ti] => Algorithm::Direct,
        _ if nranks <= 2 && bytes <= direct_max_two_ranks => Algorithm::Direct,
        // Too many ranks for direct: the tree's log n hops (the ring's 2(n-1) would cost more).
        CollKind::AllReduce if bytes <= h.direct_max && nranks >= h.tree_min_ranks[ti] => {
            Algorithm::Tree
        }
        CollKind::AllReduce
            if bytes > h.tree_min[ti] && bytes <= h.tree_max && nranks >= h.tree_min_ranks[ti] =>
        {
            Algorithm::Tree
        }
        _ => Algorithm::Ring,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::net_link::SOCKET_LATENCY_NS;
    use std::collections::HashMap;

    /// Several hosts over the calibration link (today's measured table).
    const SOCKETS: Topology = Topology::MultiNode {
        link: NetLink::SOCKETS_ON_LOOPBACK,
    };

    fn tuner(vars: &[(&str, &str)]) -> Tuner {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Tuner::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn split_directions_from_the_table_size_on_nvlink_only() {
        let t = tuner(&[]);
        let nvl = Topology::SingleNodeGpu { nvlink: true };
        assert!(!t.split_directions(256 * KIB - 1, false, nvl));
        assert!(t.split_directions(256 * KIB, false, nvl));
        assert!(!t.split_directions(64 * MIB - 1, true, nvl));
        assert!(t.split_directions(64 * MIB, true, nvl));
        assert!(!t.copies_apart(MIB - 1, nvl));
        assert!(t.copies_apart(MIB, nvl));
        assert!(!t.copies_apart(u64::MAX - 1, Topology::Host));
        for topo in [
            Topology::Host,
            Topology::SingleNodeGpu { nvlink: false },
            Topology::MultiNode {
                link: NetLink::SOCKETS_ON_LOOPBACK,
            },
        ] {
            assert!(!t.split_directions(1 << 40, false, topo), "{topo:?}");
            assert!(!t.split_directions(1 << 40, true, topo), "{topo:?}");
        }
        assert!(tuner(&[("OXCCL_SPLIT_DIRECTIONS", "1")]).split_directions(8, true, nvl));
        assert!(!tuner(&[("OXCCL_SPLIT_DIRECTIONS", "0")]).split_directions(1 << 40, false, nvl));
    }

    #[test]
    fn zero_copy_follows_the_table_and_the_variables() {
        let nvl = Topology::SingleNodeGpu { nvlink: true };
        let t = tuner(&[]);
        assert!(!t.zero_copy(CollKind::AllReduce, 16 * MIB, 2, nvl));
        assert!(t.zero_copy(CollKind::AllReduce, 32 * MIB, 2, nvl));
        assert!(!t.zero_copy(CollKind::Scatter, 128 * MIB, 2, nvl));
        assert!(t.zero_copy(CollKind::Scatter, 256 * MIB, 2, nvl));
        assert!(!t.zero_copy(CollKind::Broadcast, 16 * MIB, 2, nvl));
        assert!(t.zero_copy(CollKind::Broadcast, 32 * MIB, 2, nvl));
        assert!(!t.zero_copy(CollKind::AllToAll, 64 * MIB, 2, nvl));
        assert!(t.zero_copy(CollKind::AllToAll, 128 * MIB, 2, nvl));
        assert!(!t.zero_copy(CollKind::AllToAll, 1 << 40, 4, nvl));
        assert!(!t.zero_copy(CollKind::AllToAll, 1 << 40, 2, Topology::Host));
        assert!(!t.zero_copy(CollKind::AllToAllv, 1 << 40, 2, nvl));
        assert!(t.zero_copy(CollKind::AllGather, 64 * KIB, 2, Topology::Host));
        assert!(!t.zero_copy(CollKind::AllGather, 1 << 40, 2, SOCKETS));
        // More than two GPUs: their own row (a root read by every peer shares its links).
        assert!(t.zero_copy(CollKind::Broadcast, 1 << 30, 2, nvl));
        assert!(!t.zero_copy(CollKind::Broadcast, 1 << 30, 4, nvl));
        assert!(!t.zero_copy(CollKind::Reduce, 1 << 30, 3, nvl));
        assert!(!t.zero_copy(CollKind::AllReduce, 64 * MIB, 4, nvl));
        assert!(t.zero_copy(CollKind::AllReduce, 128 * MIB, 4, nvl));
        assert!(t.zero_copy(CollKind::Broadcast, 1 << 30, 4, Topology::Host));
        // A forced algorithm or protocol is what the user wants to run.
        assert!(!tuner(&[("NCCL_ALGO", "ring")]).zero_copy(CollKind::AllReduce, 1 << 30, 2, nvl));
        assert!(!tuner(&[("NCCL_PROTO", "simple")]).zero_copy(
            CollKind::AllReduce,
            1 << 30,
            2,
            nvl
        ));
        let on = tuner(&[("OXCCL_ZERO_COPY", "1"), ("NCCL_ALGO", "ring")]);
        assert!(on.zero_copy(CollKind::Scatter, 8, 2, nvl));
        assert!(!on.zero_copy(CollKind::SendRecv, 1 << 30, 2, nvl));
        assert!(!tuner(&[("OXCCL_ZERO_COPY", "0")]).zero_copy(
            CollKind::AllReduce,
            1 << 40,
            2,
            nvl
        ));
    }

    #[test]
    fn one_shot_follows_the_table_and_the_variables() {
        let nvl = Topology::SingleNodeGpu { nvlink: true };
        let t = tuner(&[]);
        let (ll, simple) = (Some(Variant::Ll), Some(Variant::Simple));
        assert_eq!(t.one_shot(CollKind::AllReduce, 8, 2, nvl), ll);
        assert_eq!(t.one_shot(CollKind::ReduceScatter, 256 * KIB, 2, nvl), ll);
        assert_eq!(
            t.one_shot(CollKind::ReduceScatter, 256 * KIB + 1, 2, nvl),
            simple
        );
        assert_eq!(t.one_shot(CollKind::AllGather, 2 * MIB, 2, nvl), simple);
        assert_eq!(t.one_shot(CollKind::AllGather, 2 * MIB + 1, 2, nvl), None);
        assert_eq!(t.one_shot(CollKind::AllToAll, 256 * KIB + 1, 2, nvl), None);
        assert_eq!(t.one_shot(CollKind::Broadcast, 8, 2, nvl), None);
        // More than two GPUs: their own row.
        assert_eq!(t.one_shot(CollKind::AllReduce, 4 * MIB, 2, nvl), None);
        assert_eq!(t.one_shot(CollKind::AllReduce, 2 * MIB, 4, nvl), simple);
        assert_eq!(t.one_shot(CollKind::ReduceScatter, 4 * MIB, 4, nvl), None);
        assert_eq!(t.one_shot(CollKind::AllReduce, 8, 2, Topology::Host), None);
        // LL's range with more than two GPUs is per operation; two keep the NVLink column's.
        let proto =
            |kind, bytes, nranks| t.choose(kind, bytes, DataType::Float32, nranks, nvl).proto;
        assert_eq!(proto(CollKind::Broadcast, 64 * KIB, 4), Protocol::Ll);
        assert_ne!(proto(CollKind::Broadcast, 64 * KIB + 1, 4), Protocol::Ll);
        assert_eq!(proto(CollKind::Gather, 32 * KIB, 4), Protocol::Ll);
        assert_ne!(proto(CollKind::Gather, 64 * KIB, 4), Protocol::Ll);
        assert_ne!(proto(CollKind::AllReduce, 16 * KIB, 4), Protocol::Ll);
        assert_eq!(proto(CollKind::AllReduce, 16 * KIB, 2), Protocol::Ll);
        assert_eq!(
            tuner(&[("NCCL_PROTO", "ll")]).one_shot(CollKind::AllReduce, 8, 2, nvl),
            None
        );
        let on = tuner(&[("OXCCL_ONE_SHOT", "1"), ("NCCL_ALGO", "ring")]);
        assert_eq!(on.one_shot(CollKind::AllGather, 1 << 30, 2, nvl), simple);
        assert_eq!(on.one_shot(CollKind::AllToAll, 8, 2, nvl), ll);
        assert_eq!(on.one_shot(CollKind::AllToAllv, 8, 2, nvl), None);
        // Forced on, a forced protocol picks the variant.
        let on_simple = tuner(&[("OXCCL_ONE_SHOT", "1"), ("NCCL_PROTO", "simple")]);
        assert_eq!(on_simple.one_shot(CollKind::AllReduce, 8, 2, nvl), simple);
        let on_ll = tuner(&[("OXCCL_ONE_SHOT", "1"), ("NCCL_PROTO", "ll")]);
        assert_eq!(on_ll.one_shot(CollKind::AllReduce, 1 << 20, 2, nvl), ll);
        let on_ll128 = tuner(&[("OXCCL_ONE_SHOT", "1"), ("NCCL_PROTO", "ll128")]);
        assert_eq!(on_ll128.one_shot(CollKind::AllReduce, 8, 2, nvl), None);
        let off = tuner(&[("OXCCL_ONE_SHOT", "0")]);
        assert_eq!(off.one_shot(CollKind::AllReduce, 8, 2, nvl), None);
        assert_eq!(
            tuner(&[("OXCCL_ONE_SHOT", "x")]).one_shot(CollKind::AllReduce, 8, 2, nvl),
            ll
        );
    }

    #[test]
    fn two_shot_follows_the_table_and_its_variable() {
        let nvl = Topology::SingleNodeGpu { nvlink: true };
        let two = Some(Variant::TwoShot);
        let t = tuner(&[]);
        let limit = HEURISTICS.two_shot_max_nvlink_many;
        if limit > HEURISTICS.one_shot_ll_max_nvlink {
            assert_eq!(t.one_shot(CollKind::AllReduce, limit, 4, nvl), two);
        }
        // Never at two ranks by default, nor for other operations.
        assert_ne!(t.one_shot(CollKind::AllReduce, 2 * MIB, 2, nvl), two);
        assert_ne!(t.one_shot(CollKind::AllGather, 2 * MIB, 4, nvl), two);
        let on = tuner(&[("OXCCL_TWO_SHOT", "1"), ("OXCCL_ONE_SHOT", "0")]);
        assert_eq!(on.one_shot(CollKind::AllReduce, 8, 2, nvl), two);
        assert_eq!(
            on.one_shot(CollKind::AllReduce, 1 << 30, 8, Topology::Host),
            two
        );
        assert_eq!(on.one_shot(CollKind::ReduceScatter, 8, 4, nvl), None);
        let on_ll = tuner(&[("OXCCL_TWO_SHOT", "1"), ("NCCL_PROTO", "ll")]);
        assert_eq!(on_ll.one_shot(CollKind::AllReduce, 8, 4, nvl), None);
        let off = tuner(&[("OXCCL_TWO_SHOT", "0"), ("OXCCL_ONE_SHOT", "1")]);
        assert_eq!(
            off.one_shot(CollKind::AllReduce, 2 * MIB, 4, nvl),
            Some(Variant::Simple)
        );
    }

    fn pick(t: &Tuner, kind: CollKind, bytes: u64, nranks: u32) -> Choice {
        t.choose(kind, bytes, DataType::Float32, nranks, Topology::Host)
    }

    #[test]
    fn defaults_follow_the_table() {
        let t = Tuner::default();
        assert_eq!(
            pick(&t, CollKind::AllReduce, 1024, 2).algo,
            Algorithm::Direct
        );
        assert_eq!(pick(&t, CollKind::AllReduce, 1024, 2).proto, Protocol::Ll);
        assert_eq!(pick(&t, CollKind::AllReduce, MIB, 16).algo, Algorithm::Tree);
        assert_eq!(
            pick(&t, CollKind::AllReduce, MIB, 16).proto,
            Protocol::Ll128
        );
        assert_eq!(pick(&t, CollKind::AllReduce, MIB, 2).algo, Algorithm::Ring);
        assert_eq!(pick(&t, CollKind::AllReduce, MIB, 4).algo, Algorithm::Ring);
        let multi = |bytes, n| {
            t.choose(CollKind::AllReduce, bytes, DataType::Float32, n, SOCKETS)
                .algo
        };
        assert_eq!(multi(MIB, 4), Algorithm::Tree, "hosts: tree from 4 ranks");
        assert_eq!(
            multi(256 * KIB, 4),
            Algorithm::Ring,
            "hosts: ring up to 256 KiB"
        );
        assert_eq!(multi(256 * KIB + 1, 8), Algorithm::Tree);
        assert_eq!(multi(MIB, 3), Algorithm::Ring);
        assert_eq!(multi(8, 4), Algorithm::Direct);
        // Beyond 16 ranks across hosts small messages leave direct plans: tree for AllReduce,
        // ring for the rest; AlltoAll stays direct.
        assert_eq!(multi(8, 16), Algorithm::Direct);
        assert_eq!(multi(64 * KIB, 17), Algorithm::Tree);
        assert_eq!(multi(64 * KIB + 1, 17), Algorithm::Ring);
        let kind_at = |kind, n| t.choose(kind, 8, DataType::Float32, n, SOCKETS).algo;
        assert_eq!(kind_at(CollKind::AllGather, 64), Algorithm::Ring);
        assert_eq!(kind_at(CollKind::Broadcast, 17), Algorithm::Ring);
        assert_eq!(kind_at(CollKind::AllToAll, 64), Algorithm::Direct);
        assert_eq!(kind_at(CollKind::Gather, 64), Algorithm::Direct);
        assert_eq!(multi(8 * MIB, 4), Algorithm::Ring);
        // Two ranks over the network: direct (one hop, the same bytes as a ring) to 8 MiB, on a
        // channel per 512 KiB.
        assert_eq!(multi(8 * MIB, 2), Algorithm::Direct);
        assert_eq!(multi(8 * MIB + 1, 2), Algorithm::Ring);
        let channels = |bytes| {
            t.choose(CollKind::AllReduce, bytes, DataType::Float32, 2, SOCKETS)
                .nchannels
        };
        assert_eq!(
            [channels(8), channels(MIB), channels(2 * MIB), channels(GIB)],
            [1, 2, 4, 8]
        );
        assert_eq!(
            pick(&t, CollKind::AllReduce, 64 * MIB, 16).algo,
            Algorithm::Ring
        );
        assert_eq!(
            pick(&t, CollKind::AllReduce, 64 * MIB, 16).proto,
            Protocol::Simple
        );
        assert_eq!(
            pick(&t, CollKind::AllGather, 64 * MIB, 4).algo,
            Algorithm::Ring
        );
        assert_eq!(
            pick(&t, CollKind::AllToAll, 64 * MIB, 4).algo,
            Algorithm::Direct
        );
        let big = pick(&t, CollKind::AllReduce, 64 * MIB, 4);
        assert_eq!(big.chunk_elems, 512 * KIB / 4);
        assert_eq!(big.nchannels, 2);
        assert_eq!(pick(&t, CollKind::AllReduce, 1024, 4).nchannels, 1);
        let gpu = t.choose(
            CollKind::AllReduce,
            GIB,
            DataType::Float32,
            2,
            Topology::SingleNodeGpu { nvlink: true },
        );
        assert_eq!(gpu.nchannels, 64);
        assert_eq!(gpu.chunk_elems, MIB / 4);
        // Wide from 8 MiB (Simple, two ranks); 32 below and with more ranks.
        let nvl = Topology::SingleNodeGpu { nvlink: true };
        let ar = |bytes, nranks| {
            t.choose(CollKind::AllReduce, bytes, DataType::Float32, nranks, nvl)
                .nchannels
        };
        assert_eq!(
            (ar(8 * MIB - 4, 2), ar(8 * MIB, 2), ar(GIB, 4)),
            (32, 64, 32)
        );
        assert_eq!(gpu.algo, Algorithm::Ring);
        let nvlink = |kind, bytes, nranks| {
            t.choose(
                kind,
                bytes,
                DataType::Float32,
                nranks,
                Topology::SingleNodeGpu { nvlink: true },
            )
        };
        // LL spreads over a channel per 4 KiB up to 512 KiB; two ranks stay direct to 4 MiB.
        let c = nvlink(CollKind::AllReduce, 64 * KIB, 2);
        assert_eq!(
            (c.algo, c.proto, c.nchannels),
            (Algorithm::Direct, Protocol::Ll, 16)
        );
        assert_eq!(nvlink(CollKind::AllReduce, 1024, 2).nchannels, 1);
        let c = nvlink(CollKind::AllGather, 512 * KIB, 2);
        assert_eq!(
            (c.algo, c.proto, c.nchannels),
            (Algorithm::Direct, Protocol::Ll, 32)
        );
        let c = nvlink(CollKind::AllReduce, 2 * MIB, 2);
        assert_eq!(
            (c.algo, c.proto, c.nchannels),
            (Algorithm::Direct, Protocol::Ll128, 32)
        );
        assert_eq!(
            nvlink(CollKind::AllReduce, 2 * MIB, 4).algo,
            Algorithm::Ring
        );
        assert_eq!(
            nvlink(CollKind::AllReduce, 4 * MIB, 2).algo,
            Algorithm::Direct
        );
        assert_eq!(
            nvlink(CollKind::AllReduce, 8 * MIB, 2).algo,
            Algorithm::Ring
        );
    }

    const GIB: u64 = 1 << 30;

    fn across(link: NetLink) -> Topology {
        Topology::MultiNode { link }
    }

    fn all_reduce(topo: Topology, bytes: u64, nranks: u32) -> Choice {
        Tuner::default().choose(CollKind::AllReduce, bytes, DataType::Float32, nranks, topo)
    }

    #[test]
    fn sockets_on_loopback_reproduce_the_measured_table() {
        // What the socket network (net/socket) reports for `lo` (no speed in /sys: 10 Gb/s; latency 0: unknown).
        assert_eq!(NetLink::reported(10_000, 0.0), NetLink::SOCKETS_ON_LOOPBACK);
        let c = crossovers(SOCKETS);
        assert_eq!(c, Crossovers::table(3));
        assert_eq!(
            (
                c.ll_max,
                c.direct_max_two_ranks,
                c.bytes_per_channel,
                c.ll_bytes_per_channel
            ),
            (8 * KIB, 8 * MIB, 512 * KIB, 256 * KIB)
        );
        // The socket assumption stated as a report is the same link in effect.
        let stated = NetLink::reported(10_000, SOCKET_LATENCY_NS as f32 / 1000.0);
        assert_eq!(crossovers(across(stated)), c);
        assert_eq!(all_reduce(SOCKETS, 8 * KIB, 2).proto, Protocol::Ll);
        assert_eq!(all_reduce(SOCKETS, 8 * KIB + 1, 2).proto, Protocol::Ll128);
        assert_eq!(all_reduce(SOCKETS, 8 * MIB, 2).algo, Algorithm::Direct);
        assert_eq!(all_reduce(SOCKETS, 8 * MIB + 1, 2).algo, Algorithm::Ring);
        assert_eq!(tuner(&[]).p2p_ll_max(2, SOCKETS), 8 * KIB);
        // Other topologies do not look at a link.
        for ti in 0..3 {
            let topo = [
                Topology::Host,
                Topology::SingleNodeGpu { nvlink: false },
                Topology::SingleNodeGpu { nvlink: true },
            ][ti];
            assert_eq!(crossovers(topo), Crossovers::table(ti));
        }
        assert_eq!(
            link_summary(NetLink::SOCKETS_ON_LOOPBACK),
            "tuner: network 10 Gb/s, latency unknown (5 us assumed), 10 us per hop with the \
             proxies: LL up to 8 KiB, two ranks direct up to 8 MiB, a channel per 512 KiB \
             (crossovers calibrated on sockets over loopback only)"
        );
    }

    #[test]
    fn a_link_with_more_bytes_in_flight_moves_the_crossovers_up() {
        // 100 Gb/s, 2 us (+5 in the proxies): 10 x 7/10 = 7 times the calibration link's.
        let fast = across(NetLink::reported(100_000, 2.0));
        let c = crossovers(fast);
        assert_eq!(
            (c.ll_max, c.direct_max_two_ranks, c.bytes_per_channel),
            (56 * KIB, 56 * MIB, 512 * KIB)
        );
        // LL pays longer and direct pays longer; channels are spread as on sockets.
        assert_eq!(all_reduce(SOCKETS, 32 * KIB, 2).proto, Protocol::Ll128);
        assert_eq!(all_reduce(fast, 32 * KIB, 2).proto, Protocol::Ll);
        assert_eq!(all_reduce(SOCKETS, 32 * MIB, 2).algo, Algorithm::Ring);
        assert_eq!(all_reduce(fast, 32 * MIB, 2).algo, Algorithm::Direct);
        assert_eq!(all_reduce(SOCKETS, 2 * MIB, 2).nchannels, 4);
        assert_eq!(all_reduce(fast, 2 * MIB, 2).nchannels, 4);
        assert_eq!(tuner(&[]).p2p_ll_max(2, fast), 56 * KIB);
        // 400 Gb/s, 2 us: 28 times, held at the limit of 16.
        let c = crossovers(across(NetLink::reported(400_000, 2.0)));
        assert_eq!(
            (c.ll_max, c.direct_max_two_ranks, c.bytes_per_channel),
            (128 * KIB, 128 * MIB, 512 * KIB)
        );
        // Latency alone: the same speed 45 us away holds 5 times the bytes in flight.
        let far = crossovers(across(NetLink::reported(10_000, 45.0)));
        assert_eq!((far.ll_max, far.direct_max_two_ranks), (40 * KIB, 40 * MIB));
    }

    #[test]
    fn a_link_with_fewer_bytes_in_flight_moves_the_crossovers_down() {
        // 1 Gb/s, 20 us (+5): 1/10 x 25/10 = a quarter of the calibration link's.
        let slow = across(NetLink::reported(1_000, 20.0));
        let c = crossovers(slow);
        assert_eq!(
            (
                c.ll_max,
                c.direct_max_two_ranks,
                c.bytes_per_channel,
                c.ll_bytes_per_channel
            ),
            (2 * KIB, 2 * MIB, 512 * KIB, 256 * KIB)
        );
        assert_eq!(all_reduce(SOCKETS, 4 * KIB, 2).proto, Protocol::Ll);
        assert_eq!(all_reduce(slow, 4 * KIB, 2).proto, Protocol::Ll128);
        assert_eq!(all_reduce(SOCKETS, 4 * MIB, 2).algo, Algorithm::Direct);
        assert_eq!(all_reduce(slow, 4 * MIB, 2).algo, Algorithm::Ring);
        assert_eq!(all_reduce(SOCKETS, MIB, 2).nchannels, 2);
        assert_eq!(all_reduce(slow, MIB, 2).nchannels, 2);
        // A faster device can hold fewer bytes in flight when its latency is lower: 12.5 Gb/s at
        // 0.1 us (+5) holds 1.25 x 5.1/10 = 0.6375 times the calibration link's.
        assert_eq!(
            crossovers(across(NetLink::reported(12_500, 0.1))).ll_max,
            8 * KIB * 6375 / 10_000
        );
    }

    #[test]
    fn garbage_links_stay_within_the_limits() {
        let table = Crossovers::table(3);
        for (speed, latency) in [
            (1, 0.0),
            (1_000_000_000, 0.0),
            (i32::MAX, 1e9),
            (i32::MIN, f32::NAN),
            (0, f32::INFINITY),
            (-1, -3.0),
            (1, f32::MAX),
            (i32::MAX, f32::MIN_POSITIVE),
        ] {
            let link = NetLink::reported(speed, latency);
            let c = crossovers(across(link));
            for (got, measured) in [
                (c.ll_max, table.ll_max),
                (c.direct_max_two_ranks, table.direct_max_two_ranks),
                (c.bytes_per_channel, table.bytes_per_channel),
                (c.ll_bytes_per_channel, table.ll_bytes_per_channel),
            ] {
                assert!(
                    (measured / 16..=measured * 16).contains(&got),
                    "{speed} Mb/s {latency} us: {got} against {measured}"
                );
            }
            for bytes in [0, 8, MIB, GIB, u64::MAX] {
                let ch = all_reduce(across(link), bytes, 2);
                assert!((1..=8).contains(&ch.nchannels), "{link}: {ch:?}");
            }
        }
        // 1 Mb/s counts as 1 Gb/s, unknown latency as the sockets': a tenth of the calibration.
        let c = crossovers(across(NetLink::reported(1, f32::NAN)));
        assert_eq!(c.ll_max, 8 * KIB / 10);
        // 1e9 Mb/s counts as 3.2 Tb/s: 320 times, held at 16.
        let c = crossovers(across(NetLink::reported(1_000_000_000, 0.0)));
        assert_eq!(c.ll_max, 128 * KIB);
    }

    #[test]
    fn forced_choices_win_over_the_link() {
        let fast = across(NetLink::reported(400_000, 2.0));
        let slow = across(NetLink::reported(1_000, 20.0));
        for topo in [fast, slow] {
            let t = tuner(&[("NCCL_ALGO", "ring")]);
            let c = t.choose(CollKind::AllReduce, 8, DataType::Float32, 2, topo);
            assert_eq!(c.algo, Algorithm::Ring);
            let t = tuner(&[("NCCL_PROTO", "simple")]);
            let c = t.choose(CollKind::AllReduce, 8, DataType::Float32, 2, topo);
            assert_eq!(c.proto, Protocol::Simple);
            assert_eq!(t.p2p_ll_max(2, topo), 0);
            let t = tuner(&[("NCCL_PROTO", "ll")]);
            let c = t.choose(CollKind::AllReduce, GIB, DataType::Float32, 2, topo);
            assert_eq!(c.proto, Protocol::Ll);
            let t = tuner(&[("OXCCL_NCHANNELS", "3")]);
            for bytes in [8, GIB] {
                let c = t.choose(CollKind::AllReduce, bytes, DataType::Float32, 2, topo);
                assert_eq!(c.nchannels, 3);
            }
        }
    }

    #[test]
    fn every_default_choice_is_plannable() {
        let t = Tuner::default();
        let topos = [
            Topology::Host,
            Topology::SingleNodeGpu { nvlink: false },
            Topology::SingleNodeGpu { nvlink: true },
            SOCKETS,
            across(NetLink::reported(3_200_000, 0.1)),
            across(NetLink::reported(1, f32::NAN)),
        ];
        for kind in KINDS {
            for bytes in [
                0,
                1,
                8,
                KIB,
                64 * KIB,
                64 * KIB + 1,
                MIB,
                5 * MIB,
                GIB,
                u64::MAX,
            ] {
                for nranks in [1, 2, 3, 8, 16, 1024] {
                    for topo in topos {
                        for dtype in DataType::ALL {
                            let c = t.choose(kind, bytes, dtype, nranks, topo);
                            assert!(algorithms_for(kind).contains(&c.algo), "{kind:?} {c:?}");
                            assert!((1..=MAX_CHANNELS).contains(&c.nchannels));
                            assert!(c.chunk_elems >= 1);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn algo_lists_and_exclusions() {
        let t = tuner(&[("NCCL_ALGO", "Ring")]);
        assert_eq!(pick(&t, CollKind::AllReduce, 8, 2).algo, Algorithm::Ring);
        assert_eq!(pick(&t, CollKind::AllReduce, MIB, 16).algo, Algorithm::Ring);
        let t = tuner(&[("NCCL_ALGO", "TREE")]);
        assert_eq!(pick(&t, CollKind::AllReduce, 8, 2).algo, Algorithm::Tree);
        let t = tuner(&[("NCCL_ALGO", "ring,direct")]);
        assert_eq!(pick(&t, CollKind::AllReduce, 8, 2).algo, Algorithm::Direct);
        assert_eq!(pick(&t, CollKind::AllReduce, MIB, 16).algo, Algorithm::Ring);
        let t = tuner(&[("NCCL_ALGO", "^tree")]);
        assert_eq!(pick(&t, CollKind::AllReduce, MIB, 16).algo, Algorithm::Ring);
        assert_eq!(pick(&t, CollKind::AllReduce, 8, 16).algo, Algorithm::Direct);
        let t = tuner(&[("NCCL_ALGO", "^ring, direct")]);
        assert_eq!(
            pick(&t, CollKind::AllReduce, 64 * MIB, 2).algo,
            Algorithm::Tree
        );
    }

    #[test]
    fn forced_algorithm_falls_back_where_it_does_not_apply() {
        let t = tuner(&[("NCCL_ALGO", "tree")]);
        assert_eq!(
            pick(&t, CollKind::AllGather, 64 * MIB, 4).algo,
            Algorithm::Ring
        );
        assert_eq!(pick(&t, CollKind::AllGather, 8, 4).algo, Algorithm::Direct);
        assert_eq!(
            pick(&t, CollKind::AllToAll, 64 * MIB, 4).algo,
            Algorithm::Direct
        );
        let t = Tuner::with(Some(Algorithm::Ring), None);
        assert_eq!(pick(&t, CollKind::Broadcast, 8, 4).algo, Algorithm::Ring);
        assert_eq!(pick(&t, CollKind::Scatter, 8, 4).algo, Algorithm::Direct);
        let t = Tuner::with(Some(Algorithm::Tree), Some(Protocol::Simple));
        let c = pick(&t, CollKind::AllReduce, 8, 2);
        assert_eq!((c.algo, c.proto), (Algorithm::Tree, Protocol::Simple));
        assert_eq!(pick(&t, CollKind::Reduce, 8, 2).algo, Algorithm::Direct);
    }

    #[test]
    fn unknown_and_unimplemented_names_are_ignored() {
        let t = tuner(&[("NCCL_ALGO", "NVLS,bogus,Ring")]);
        assert_eq!(pick(&t, CollKind::AllReduce, 8, 2).algo, Algorithm::Ring);
        // Nothing usable left: the default applies.
        let t = tuner(&[("NCCL_ALGO", "nvls")]);
        assert_eq!(pick(&t, CollKind::AllReduce, 8, 2).algo, Algorithm::Direct);
        let t = tuner(&[("NCCL_ALGO", "^nvls,pat")]);
        assert_eq!(t.algos, [Some(7); 10]);
        let t = tuner(&[("NCCL_ALGO", ""), ("NCCL_PROTO", "  ")]);
        assert_eq!(t, Tuner::default());
    }

    #[test]
    fn per_operation_syntax() {
        let t = tuner(&[("NCCL_ALGO", "allreduce:tree;AllGather:^direct;bogus:ring")]);
        assert_eq!(pick(&t, CollKind::AllReduce, 8, 2).algo, Algorithm::Tree);
        assert_eq!(pick(&t, CollKind::AllGather, 8, 2).algo, Algorithm::Ring);
        assert_eq!(pick(&t, CollKind::Broadcast, 8, 2).algo, Algorithm::Direct);
        let t = tuner(&[("NCCL_ALGO", "ring;reduce_scatter:direct")]);
        assert_eq!(
            pick(&t, CollKind::ReduceScatter, 64 * MIB, 2).algo,
            Algorithm::Direct
        );
        assert_eq!(pick(&t, CollKind::Reduce, 8, 2).algo, Algorithm::Ring);
    }

    #[test]
    fn protocols() {
        let nvlink = Topology::SingleNodeGpu { nvlink: true };
        assert_eq!(tuner(&[]).p2p_ll_max(2, nvlink), 512 * KIB);
        assert_eq!(
            tuner(&[("NCCL_PROTO", "LL")]).p2p_ll_max(2, nvlink),
            512 * KIB
        );
        assert_eq!(
            tuner(&[("NCCL_PROTO", "allreduce:LL")]).p2p_ll_max(2, nvlink),
            512 * KIB
        );
        assert_eq!(tuner(&[("NCCL_PROTO", "Simple")]).p2p_ll_max(2, nvlink), 0);
        assert_eq!(tuner(&[]).p2p_ll_max(2, Topology::Host), 64 * KIB);
        // More than two GPUs on NVLink take their own row; other topologies keep theirs.
        assert_eq!(tuner(&[]).p2p_ll_max(4, nvlink), 8 * KIB);
        assert_eq!(tuner(&[]).p2p_ll_max(4, Topology::Host), 64 * KIB);
        let c4 = pick(&tuner(&[]), CollKind::SendRecv, 1 << 30, 4);
        assert_eq!(
            tuner(&[])
                .p2p_shape(4, nvlink, &c4, Some(56 * KIB))
                .ll
                .max_bytes,
            8 * KIB
        );
        // A send/receive shape takes the choice, the table's spreads and the LL limit; a
        // backend without LL gets none.
        let c = pick(&tuner(&[]), CollKind::SendRecv, 1 << 30, 2);
        let shape = tuner(&[]).p2p_shape(2, nvlink, &c, Some(56 * KIB));
        assert_eq!(
            (
                shape.nchannels,
                shape.bytes_per_channel,
                shape.ll.bytes_per_channel
            ),
            (c.nchannels, 64 * KIB, 4 * KIB)
        );
        assert_eq!(
            (shape.ll.max_bytes, shape.ll.chunk_bytes),
            (512 * KIB, 56 * KIB)
        );
        assert_eq!(
            tuner(&[]).p2p_shape(2, nvlink, &c, None).ll,
            P2pLl::default()
        );
        // NCCL's own threshold variable sets it on every topology; NCCL_PROTO still excludes.
        let t = tuner(&[("NCCL_P2P_LL_THRESHOLD", "16384")]);
        assert_eq!(t.p2p_ll_max(2, nvlink), 16 * KIB);
        assert_eq!(t.p2p_ll_max(2, Topology::Host), 16 * KIB);
        assert_eq!(t.p2p_ll_max(4, nvlink), 16 * KIB);
        let t = tuner(&[("NCCL_P2P_LL_THRESHOLD", "0")]);
        assert_eq!(t.p2p_ll_max(2, nvlink), 0);
        let t = tuner(&[
            ("NCCL_P2P_LL_THRESHOLD", "1073741824"),
            ("NCCL_PROTO", "^LL"),
        ]);
        assert_eq!(t.p2p_ll_max(2, nvlink), 0);
        let t = tuner(&[("NCCL_PROTO", "Simple")]);
        let c = pick(&t, CollKind::AllReduce, 8, 2);
        assert_eq!(c.proto, Protocol::Simple);
        assert_eq!(c.chunk_elems, 512 * KIB / 4);
        let t = tuner(&[("NCCL_PROTO", "^LL")]);
        assert_eq!(pick(&t, CollKind::AllReduce, 8, 2).proto, Protocol::Ll128);
        assert_eq!(
            pick(&t, CollKind::AllReduce, 8, 2).chunk_elems,
            120 * KIB / 4
        );
        let t = tuner(&[("NCCL_PROTO", "ll")]);
        assert_eq!(pick(&t, CollKind::AllReduce, GIB, 2).proto, Protocol::Ll);
        assert_eq!(
            pick(&t, CollKind::AllReduce, GIB, 2).chunk_elems,
            16 * KIB / 4
        );
        let t = tuner(&[("NCCL_PROTO", "^ll,ll128,simple")]);
        assert_eq!(
            pick(&t, CollKind::AllReduce, GIB, 2).proto,
            Protocol::Simple
        );
        let t = tuner(&[("NCCL_PROTO", "allreduce:LL128")]);
        assert_eq!(pick(&t, CollKind::AllReduce, GIB, 2).proto, Protocol::Ll128);
        assert_eq!(
            pick(&t, CollKind::Broadcast, GIB, 2).proto,
            Protocol::Simple
        );
    }

    #[test]
    fn size_overrides() {
        let t = tuner(&[("OXCCL_NCHANNELS", "3"), ("OXCCL_CHUNK_BYTES", "100")]);
        let c = pick(&t, CollKind::AllReduce, 8, 2);
        assert_eq!((c.nchannels, c.chunk_elems), (3, 25));
        let c = t.choose(CollKind::AllReduce, 8, DataType::Float64, 2, Topology::Host);
        assert_eq!(c.chunk_elems, 12);
        let t = tuner(&[("OXCCL_NCHANNELS", "1000"), ("OXCCL_CHUNK_BYTES", "1")]);
        let c = t.choose(CollKind::AllReduce, 8, DataType::Float64, 2, Topology::Host);
        assert_eq!((c.nchannels, c.chunk_elems), (MAX_CHANNELS, 1));
        let t = tuner(&[("OXCCL_NCHANNELS", "0"), ("OXCCL_CHUNK_BYTES", "lots")]);
        assert_eq!(t, Tuner::default());
    }
}
