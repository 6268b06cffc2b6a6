//! The tuner's default table: crossover points and sizes kept as data (`heuristics.txt`, one
//! setting per line, read once), not as numbers typed into code; where each value comes from is
//! docs/perf/defaults.md's business.

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::LazyLock;

/// The table's text, compiled in.
const TABLE: &str = include_str!("heuristics.txt");

/// Crossover points and sizes of the default choice, in bytes as nccl-tests counts them. Arrays
/// of four are indexed by the tuner's topology index (host, PCIe, NVLink, several hosts), of
/// three by protocol (LL, LL128, Simple), of ten by operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Heuristics {
    /// Direct up to this size (latency-bound: one hop beats n-1 hops)...
    pub direct_max: u64,
    /// ...for at most this many ranks: a direct plan sends n-1 messages through each rank's
    /// proxy and needs a connection to every rank, where a tree takes log n hops.
    pub direct_max_ranks: [u32; 4],
    /// With two ranks, Direct up to this size: ring and direct then move the same bytes, and
    /// direct does it in one hop.
    pub direct_max_two_ranks: [u64; 4],
    /// Tree for AllReduce above this size (and above `direct_max`)...
    pub tree_min: [u64; 4],
    /// ...up to this size...
    pub tree_max: u64,
    /// ...when there are at least this many ranks (below, the ring's extra hops are cheap).
    pub tree_min_ranks: [u32; 4],
    /// LL up to this size.
    pub ll_max: [u64; 4],
    /// Send/receive messages to other ranks move as LL packets up to this size.
    pub p2p_ll_max: [u64; 4],
    /// A send/receive message is spread over a channel more for every this many bytes (Simple).
    pub p2p_bytes_per_channel: [u64; 4],
    /// The same for LL messages: an LL channel moves little, but adds no latency.
    pub p2p_ll_bytes_per_channel: [u64; 4],
    /// LL128 up to this size, Simple above.
    pub ll128_max: u64,
    /// Chunk bytes on the host backend.
    pub chunk_host: [u64; 3],
    /// Chunk bytes on GPUs.
    pub chunk_gpu: [u64; 3],
    /// Most channels.
    pub max_channels: [u32; 4],
    /// From this size on, Simple plans of two ranks may take up to `wide_channels` channels
    /// (`u64::MAX`: never): more blocks storing into the peer move more.
    pub wide_channels_min: [u64; 4],
    /// See `wide_channels_min`.
    pub wide_channels: u32,
    /// A channel is added only for every this many bytes, so small messages stay on few channels.
    pub bytes_per_channel: [u64; 4],
    /// The same for LL, whose per-channel rate is low but whose channels cost no extra latency.
    pub ll_bytes_per_channel: [u64; 4],
    /// Zero-copy plans from this size on, when the ranks share one address space (`u64::MAX`:
    /// never); on NVLink per operation (`zero_copy_min_nvlink`).
    pub zero_copy_min: [u64; 4],
    /// NVLink's zero-copy thresholds.
    pub zero_copy_min_nvlink: [u64; 10],
    /// The same with more than two ranks on NVLink.
    pub zero_copy_min_nvlink_many: [u64; 10],
    /// One-shot kernels up to this per-peer message size on GPUs over NVLink (0: never).
    pub one_shot_max_nvlink: [u64; 10],
    /// The same with more than two ranks on NVLink.
    pub one_shot_max_nvlink_many: [u64; 10],
    /// `ll_max` with more than two ranks on NVLink, per operation.
    pub ll_max_nvlink_many: [u64; 10],
    /// `p2p_ll_max` with more than two ranks on NVLink.
    pub p2p_ll_max_nvlink_many: u64,
    /// Their LL variant up to this per-peer size, the Simple one above it.
    pub one_shot_ll_max_nvlink: u64,
    /// AllReduce with more than two ranks on NVLink: the two-shot variant instead of the Simple
    /// one up to this vector size (0: never).
    pub two_shot_max_nvlink_many: u64,
    /// Send/receive groups and AlltoAll run each FIFO channel's sends and receives in blocks of
    /// their own from this message size on (largest message of a group; AlltoAll's per-peer
    /// block), `u64::MAX`: never.
    pub split_directions_min: [u64; 4],
    /// The same, for a group whose receive buffers overlap its send buffers (in place), where
    /// each run of receives waits for the sends before it.
    pub split_directions_min_in_place: [u64; 4],
    /// Scatter, Gather and AlltoAll run this rank's own block's copy in blocks of their own from
    /// this per-peer block size on, beside the sends and receives instead of between them
    /// (`u64::MAX`: never).
    pub copies_apart_min: [u64; 4],
}

/// The table, parsed on first use.
pub(crate) static HEURISTICS: LazyLock<Heuristics> =
    LazyLock::new(|| Heuristics::parse(TABLE).unwrap_or_else(|e| panic!("heuristics.txt: {e}")));

/// One value: a number with an optional K, M or G, or `max`.
fn value(word: &str) -> Result<u64, String> {
    if word == "max" {
        return Ok(u64::MAX);
    }
    let (digits, unit) = match word.as_bytes().last() {
        Some(b'K') => (&word[..word.len() - 1], 1 << 10),
        Some(b'M') => (&word[..word.len() - 1], 1 << 20),
        Some(b'G') => (&word[..word.len() - 1], 1 << 30),
        _ => (word, 1),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| format!("{word:?} is not a size"))
}

impl Heuristics {
    /// Parses the table's text; names every missing, unknown or malformed setting.
    fn parse(text: &str) -> Result<Heuristics, String> {
        let mut rows: HashMap<&str, Vec<u64>> = HashMap::new();
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            let name = words.next().expect("a line with text has a first word");
            let values = words.map(value).collect::<Result<Vec<_>, _>>()?;
            if rows.insert(name, values).is_some() {
                return Err(format!("{name} is set twice"));
            }
        }
        let mut take = |name: &str| {
            rows.remove(name)
                .ok_or_else(|| format!("{name} is missing"))
        };
        fn fixed<const N: usize>(name: &str, v: Vec<u64>) -> Result<[u64; N], String> {
            <[u64; N]>::try_from(v).map_err(|v| format!("{name} has {} values, not {N}", v.len()))
        }
        fn one(name: &str, v: Vec<u64>) -> Result<u64, String> {
            fixed::<1>(name, v).map(|[x]| x)
        }
        fn counts(name: &str, v: Vec<u64>) -> Result<[u32; 4], String> {
            let v = fixed::<4>(name, v)?;
            Ok(v.map(|x| u32::try_from(x).unwrap_or(u32::MAX)))
        }
        let mut get = |name: &'static str| take(name).map(|v| (name, v));
        let h = Heuristics {
            direct_max: get("direct_max").and_then(|(n, v)| one(n, v))?,
            direct_max_ranks: get("direct_max_ranks").and_then(|(n, v)| counts(n, v))?,
            direct_max_two_ranks: get("direct_max_two_ranks").and_then(|(n, v)| fixed(n, v))?,
            tree_min: get("tree_min").and_then(|(n, v)| fixed(n, v))?,
            tree_max: get("tree_max").and_then(|(n, v)| one(n, v))?,
            tree_min_ranks: get("tree_min_ranks").and_then(|(n, v)| counts(n, v))?,
            ll_max: get("ll_max").and_then(|(n, v)| fixed(n, v))?,
            p2p_ll_max: get("p2p_ll_max").and_then(|(n, v)| fixed(n, v))?,
            p2p_bytes_per_channel: get("p2p_bytes_per_channel").and_then(|(n, v)| fixed(n, v))?,
            p2p_ll_bytes_per_channel: get("p2p_ll_bytes_per_channel")
                .and_then(|(n, v)| fixed(n, v))?,
            ll128_max: get("ll128_max").and_then(|(n, v)| one(n, v))?,
            chunk_host: get("chunk_host").and_then(|(n, v)| fixed(n, v))?,
            chunk_gpu: get("chunk_gpu").and_then(|(n, v)| fixed(n, v))?,
            max_channels: get("max_channels").and_then(|(n, v)| counts(n, v))?,
            wide_channels_min: get("wide_channels_min").and_then(|(n, v)| fixed(n, v))?,
            wide_channels: get("wide_channels")
                .and_then(|(n, v)| one(n, v))
                .map(|v| u32::try_from(v).unwrap_or(u32::MAX))?,
            bytes_per_channel: get("bytes_per_channel").and_then(|(n, v)| fixed(n, v))?,
            ll_bytes_per_channel: get("ll_bytes_per_channel").and_then(|(n, v)| fixed(n, v))?,
            zero_copy_min: get("zero_copy_min").and_then(|(n, v)| fixed(n, v))?,
            zero_copy_min_nvlink: get("zero_copy_min_nvlink").and_then(|(n, v)| fixed(n, v))?,
            zero_copy_min_nvlink_many: get("zero_copy_min_nvlink_many")
                .and_then(|(n, v)| fixed(n, v))?,
            one_shot_max_nvlink_many: get("one_shot_max_nvlink_many")
                .and_then(|(n, v)| fixed(n, v))?,
            ll_max_nvlink_many: get("ll_max_nvlink_many").and_then(|(n, v)| fixed(n, v))?,
            p2p_ll_max_nvlink_many: get("p2p_ll_max_nvlink_many").and_then(|(n, v)| one(n, v))?,
            one_shot_max_nvlink: get("one_shot_max_nvlink").and_then(|(n, v)| fixed(n, v))?,
            one_shot_ll_max_nvlink: get("one_shot_ll_max_nvlink").and_then(|(n, v)| one(n, v))?,
            two_shot_max_nvlink_many: get("two_shot_max_nvlink_many")
                .and_then(|(n, v)| one(n, v))?,
            split_directions_min: get("split_directions_min").and_then(|(n, v)| fixed(n, v))?,
            split_directions_min_in_place: get("split_directions_min_in_place")
                .and_then(|(n, v)| fixed(n, v))?,
            copies_apart_min: get("copies_apart_min").and_then(|(n, v)| fixed(n, v))?,
        };
        match rows.keys().next() {
            Some(extra) => Err(format!("{extra} is not a setting")),
            None => Ok(h),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1 << 10;
    const MIB: u64 = 1 << 20;

    #[test]
    fn the_table_parses_into_the_values_the_tuner_was_tuned_with() {
        let h = &*HEURISTICS;
        assert_eq!(h.direct_max, 64 * KIB);
        assert_eq!(h.direct_max_ranks, [u32::MAX, u32::MAX, u32::MAX, 16]);
        assert_eq!(
            h.direct_max_two_ranks,
            [64 * KIB, 64 * KIB, 4 * MIB, 8 * MIB]
        );
        assert_eq!(h.ll_max, [64 * KIB, 64 * KIB, 512 * KIB, 8 * KIB]);
        assert_eq!(h.p2p_ll_max, [64 * KIB, 64 * KIB, 512 * KIB, 8 * KIB]);
        assert_eq!(h.p2p_bytes_per_channel, [64 * KIB; 4]);
        assert_eq!(h.p2p_ll_bytes_per_channel, [4 * KIB; 4]);
        assert_eq!(h.chunk_gpu, [128 * KIB, 512 * KIB, MIB]);
        assert_eq!(h.max_channels, [2, 4, 32, 8]);
        assert_eq!(h.zero_copy_min_nvlink[0], 32 * MIB);
        assert_eq!(h.zero_copy_min_nvlink[1], 32 * MIB);
        assert_eq!(h.zero_copy_min_nvlink[5], 128 * MIB);
        assert_eq!(h.zero_copy_min_nvlink[7], 512 * MIB);
        assert_eq!(h.zero_copy_min_nvlink[8], 256 * MIB);
        assert_eq!(h.zero_copy_min_nvlink[9], u64::MAX);
        assert_eq!(h.split_directions_min[2], 256 * KIB);
        assert_eq!(h.split_directions_min_in_place[2], 64 * MIB);
        assert_eq!(
            h.one_shot_max_nvlink,
            [2 * MIB, 0, 0, 2 * MIB, 2 * MIB, 256 * KIB, 0, 0, 0, 0]
        );
    }

    #[test]
    fn a_bad_table_names_what_is_wrong() {
        let err = |text: &str| Heuristics::parse(text).unwrap_err();
        assert!(err("").contains("is missing"));
        let good: String = TABLE.to_string();
        assert!(err(&format!("{good}\nll128_max 1M")).contains("ll128_max is set twice"));
        assert!(err(&format!("{good}\nbogus 1")).contains("bogus is not a setting"));
        let short = good.replace(
            "max_channels              2     4     32    8",
            "max_channels 2 4",
        );
        assert!(err(&short).contains("max_channels has 2 values, not 4"));
        let bad = good.replace("tree_max                  4M", "tree_max 4X");
        assert!(err(&bad).contains("\"4X\" is not a size"));
    }
}
