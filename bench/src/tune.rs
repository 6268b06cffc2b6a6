//! `oxccl-bench tune`: measures the tuner's alternatives on this machine and derives the
//! settings of one topology column of the tuner's table (`core/src/plan/heuristics.txt`).
//!
//! Each alternative is forced through the variable a user would set (`NCCL_PROTO`,
//! `NCCL_ALGO`, `NCCL_P2P_LL_THRESHOLD`, `OXCCL_ONE_SHOT`, `OXCCL_TWO_SHOT`, `OXCCL_ZERO_COPY`) in a child run of this benchmark with the
//! caller's options, so every run reads its configuration afresh. A setting "X up to S" is the
//! largest measured size up to which X is never more than [`TOLERANCE`] slower than the
//! alternative; "X from S" the smallest size from which it never is. `--apply FILE` writes the
//! derived values into the table; the measurements go to `--out`, and `--from DIR` derives from
//! the measurements of an earlier run (made on a GPU machine, applied here).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// How much slower than the alternative a choice may be at a size and still count as winning
/// there: run-to-run noise, not a preference.
pub const TOLERANCE: f64 = 1.02;

/// The tuner table's topology columns, in its order.
const COLUMNS: [&str; 4] = ["host", "pcie", "nvlink", "net"];

/// The table's operations, in its order (per-operation settings).
const TABLE_OPS: [&str; 10] = [
    "allreduce",
    "broadcast",
    "reduce",
    "allgather",
    "reducescatter",
    "alltoall",
    "alltoallv",
    "gather",
    "scatter",
    "sendrecv",
];

/// Operations that have one-shot kernels, and zero-copy plans.
const ONE_SHOT_OPS: &[&str] = &["allreduce", "allgather", "reducescatter", "alltoall"];
const ZERO_COPY_OPS: &[&str] = &[
    "allreduce",
    "broadcast",
    "reduce",
    "allgather",
    "reducescatter",
    "gather",
    "scatter",
];

/// The other paths held off, so that a variant measures only what it forces.
const PLAIN: [(&str, &str); 2] = [("OXCCL_ONE_SHOT", "0"), ("OXCCL_ZERO_COPY", "0")];

/// One forced alternative: its name (and JSON file), its variables, the operations it runs.
struct Variant {
    name: &'static str,
    env: Vec<(&'static str, &'static str)>,
    ops: &'static [&'static str],
}

fn variants() -> Vec<Variant> {
    let plain = |extra: (&'static str, &'static str)| {
        let mut env = PLAIN.to_vec();
        env.push(extra);
        env
    };
    let mut v = Vec::new();
    for (name, p) in [
        ("proto-LL", "LL"),
        ("proto-LL128", "LL128"),
        ("proto-Simple", "Simple"),
    ] {
        v.push(Variant {
            name,
            env: plain(("NCCL_PROTO", p)),
            ops: &["allreduce"],
        });
    }
    // Send/receive in LL at every size against Simple at every size.
    for (name, threshold) in [("p2p-LL", "18446744073709551615"), ("p2p-Simple", "0")] {
        v.push(Variant {
            name,
            env: plain(("NCCL_P2P_LL_THRESHOLD", threshold)),
            ops: &["sendrecv"],
        });
    }
    for (name, a) in [
        ("algo-ring", "ring"),
        ("algo-direct", "direct"),
        ("algo-tree", "tree"),
    ] {
        v.push(Variant {
            name,
            env: plain(("NCCL_ALGO", a)),
            ops: &["allreduce"],
        });
    }
    for (name, on) in [("oneshot-on", "1"), ("oneshot-off", "0")] {
        v.push(Variant {
            name,
            env: vec![
                ("OXCCL_ZERO_COPY", "0"),
                ("OXCCL_ONE_SHOT", on),
                ("OXCCL_TWO_SHOT", "0"),
            ],
            ops: ONE_SHOT_OPS,
        });
    }
    v.push(Variant {
        name: "twoshot-on",
        env: vec![("OXCCL_ZERO_COPY", "0"), ("OXCCL_TWO_SHOT", "1")],
        ops: &["allreduce"],
    });
    for (name, on) in [("zc-on", "1"), ("zc-off", "0")] {
        v.push(Variant {
            name,
            env: vec![("OXCCL_ONE_SHOT", "0"), ("OXCCL_ZERO_COPY", on)],
            ops: ZERO_COPY_OPS,
        });
    }
    v
}

/// Times (us) by operation and total message bytes, of one variant.
type Times = BTreeMap<String, BTreeMap<u64, f64>>;

/// The ranks the rows of a `--json` file ran with (the benchmark's default depends on the
/// machine, so the tuner reads what was used).
fn rows_ranks(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|row| field(row, "ranks").and_then(|r| r.parse().ok()))
}

/// The value of `key` in one row of the benchmark's own `--json` output (one object per line,
/// flat, keys unique): the raw token, quotes removed from strings.
fn field<'a>(row: &'a str, key: &str) -> Option<&'a str> {
    let at = row.find(&format!("\"{key}\":"))? + key.len() + 3;
    let rest = &row[at..];
    if let Some(s) = rest.strip_prefix('"') {
        return s.find('"').map(|end| &s[..end]);
    }
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(rest[..end].trim())
}

/// The library's rows of a `--json` file as [`Times`]; an error names a row with wrong
/// elements (a variant that computes wrong results must not tune anything).
fn parse_rows(text: &str, variant: &str) -> Result<Times, String> {
    let mut t = Times::new();
    for row in text.lines().filter(|l| l.contains("\"op\":")) {
        if field(row, "lib") != Some("ours") {
            continue;
        }
        let op = field(row, "op").ok_or("a row without op")?;
        let bytes: u64 = field(row, "bytes")
            .and_then(|b| b.parse().ok())
            .ok_or("a row without bytes")?;
        if let Some(w) = field(row, "wrong").filter(|w| *w != "null" && *w != "0") {
            return Err(format!(
                "{variant}: {op} at {bytes} bytes had {w} wrong elements"
            ));
        }
        // A call that moves nothing says nothing about where one alternative overtakes another.
        if bytes == 0 {
            continue;
        }
        if let Some(us) = field(row, "time_us").and_then(|v| v.parse::<f64>().ok()) {
            t.entry(op.to_string()).or_default().insert(bytes, us);
        }
    }
    Ok(t)
}

/// The largest size up to which `a` is never more than [`TOLERANCE`] slower than `b` (sizes
/// both measured, ascending); 0 when it loses at the smallest, `u64::MAX` when it never loses.
fn wins_up_to(a: &BTreeMap<u64, f64>, b: &BTreeMap<u64, f64>) -> u64 {
    let mut last = 0;
    for (&s, &ta) in a {
        let Some(&tb) = b.get(&s) else { continue };
        if ta > tb * TOLERANCE {
            return last;
        }
        last = s;
    }
    u64::MAX
}

/// The smallest size from which `a` is never more than [`TOLERANCE`] slower than `b`;
/// `u64::MAX` when it loses at the largest size, 0 when it never loses.
fn wins_from(a: &BTreeMap<u64, f64>, b: &BTreeMap<u64, f64>) -> u64 {
    let mut first = u64::MAX;
    for (&s, &ta) in a.iter().rev() {
        let Some(&tb) = b.get(&s) else { continue };
        if ta > tb * TOLERANCE {
            return first;
        }
        first = s;
    }
    0
}

/// Pointwise minimum of two series (the better of two alternatives at each size both have).
fn best_of(a: &BTreeMap<u64, f64>, b: &BTreeMap<u64, f64>) -> BTreeMap<u64, f64> {
    a.iter()
        .filter_map(|(s, &t)| b.get(s).map(|&u| (*s, t.min(u))))
        .collect()
}

/// A size as the table writes it: `max`, or bytes with a K, M or G suffix where exact.
fn size_word(v: u64) -> String {
    if v == u64::MAX {
        return "max".into();
    }
    for (unit, n) in [("G", 1u64 << 30), ("M", 1 << 20), ("K", 1 << 10)] {
        if v >= n && v.is_multiple_of(n) {
            return format!("{}{unit}", v / n);
        }
    }
    v.to_string()
}

/// Bytes a one-shot setting counts for a message of `total` bytes as the benchmark sizes it
/// (all ranks' blocks for AllGather and AlltoAll): the per-peer message.
fn per_peer(op: &str, total: u64, ranks: u64) -> u64 {
    match op {
        "allgather" | "reducescatter" | "alltoall" if total != u64::MAX => total / ranks.max(1),
        _ => total,
    }
}

/// One derived value: the table's setting, the value's position in its row, the value, and
/// the measurements it rests on.
#[derive(Debug, Clone, PartialEq)]
struct Derived {
    setting: &'static str,
    index: usize,
    value: u64,
    why: String,
}

/// The settings the measurements decide for `column` (one of [`COLUMNS`]) with `ranks` ranks.
/// NVLink with more than two ranks writes the `_nvlink_many` rows (and only those): the
/// column's own values are those of two GPUs.
fn derive(runs: &BTreeMap<&str, Times>, column: usize, ranks: u64) -> Vec<Derived> {
    let get = |v: &str, op: &str| runs.get(v).and_then(|t| t.get(op));
    let mut out = Vec::new();
    let nvlink = COLUMNS[column] == "nvlink";
    let many = nvlink && ranks > 2;
    if let (Some(ll), Some(l128), Some(simple)) = (
        get("proto-LL", "allreduce"),
        get("proto-LL128", "allreduce"),
        get("proto-Simple", "allreduce"),
    ) {
        let v = wins_up_to(ll, &best_of(l128, simple));
        let (setting, index) = if many {
            ("ll_max_nvlink_many", 0)
        } else {
            ("ll_max", column)
        };
        out.push(Derived {
            setting,
            index,
            value: v,
            why: "AllReduce: LL against the better of LL128 and Simple".into(),
        });
    }
    if let (Some(ll), Some(simple)) = (get("p2p-LL", "sendrecv"), get("p2p-Simple", "sendrecv")) {
        let (setting, index) = if many {
            ("p2p_ll_max_nvlink_many", 0)
        } else {
            ("p2p_ll_max", column)
        };
        out.push(Derived {
            setting,
            index,
            value: wins_up_to(ll, simple),
            why: "SendRecv: LL against Simple".into(),
        });
    }
    if many {
        derive_nvlink_ops(&get, ranks, true, &mut out);
        return out;
    }
    if let (Some(direct), Some(ring)) = (
        get("algo-direct", "allreduce"),
        get("algo-ring", "allreduce"),
    ) && ranks == 2
    {
        out.push(Derived {
            setting: "direct_max_two_ranks",
            index: column,
            value: wins_up_to(direct, ring),
            why: "AllReduce, 2 ranks: direct against ring".into(),
        });
    }
    if let (Some(tree), Some(ring)) = (get("algo-tree", "allreduce"), get("algo-ring", "allreduce"))
    {
        out.push(Derived {
            setting: "tree_min",
            index: column,
            value: wins_from(tree, ring),
            why: "AllReduce: tree against ring".into(),
        });
    }
    if nvlink {
        derive_nvlink_ops(&get, ranks, false, &mut out);
        return out;
    }
    if let (Some(on), Some(off)) = (get("zc-on", "allreduce"), get("zc-off", "allreduce")) {
        out.push(Derived {
            setting: "zero_copy_min",
            index: column,
            value: wins_from(on, off),
            why: "allreduce: zero copy against the FIFOs".into(),
        });
    }
    out
}

/// NVLink's per-operation rows: one-shot kernels and zero copy against the plans (`many`: the
/// rows for more than two ranks).
fn derive_nvlink_ops<'a>(
    get: &impl Fn(&str, &str) -> Option<&'a BTreeMap<u64, f64>>,
    ranks: u64,
    many: bool,
    out: &mut Vec<Derived>,
) {
    let (one_shot, zero_copy) = if many {
        ("one_shot_max_nvlink_many", "zero_copy_min_nvlink_many")
    } else {
        ("one_shot_max_nvlink", "zero_copy_min_nvlink")
    };
    let index = |op: &str| TABLE_OPS.iter().position(|o| *o == op).expect("a table op");
    for op in ONE_SHOT_OPS {
        if let (Some(on), Some(off)) = (get("oneshot-on", op), get("oneshot-off", op)) {
            out.push(Derived {
                setting: one_shot,
                index: index(op),
                value: per_peer(op, wins_up_to(on, off), ranks),
                why: format!("{op}: one-shot kernels against the plans (per-peer bytes)"),
            });
        }
    }
    if let (true, Some(two), Some(one)) = (
        many,
        get("twoshot-on", "allreduce"),
        get("oneshot-on", "allreduce"),
    ) {
        // Where the Simple variant would run: beyond LL's range, within the two-shot kernel's
        // (beyond it the variable falls back to the plans).
        let ll_max = oxccl_core::plan::tuner::one_shot_ll_max_nvlink();
        let two_shot_max = oxccl_kernel_abi::one_shot_max_bytes(
            oxccl_core::plan::one_shot::Variant::TwoShot,
            u32::try_from(ranks).unwrap_or(u32::MAX),
            oxccl_kernel_abi::ONE_SHOT_SIMPLE_MAX_BLOCKS,
        );
        let kept = |t: &BTreeMap<u64, f64>| -> BTreeMap<u64, f64> {
            t.range(ll_max + 1..=two_shot_max)
                .map(|(&s, &v)| (s, v))
                .collect()
        };
        out.push(Derived {
            setting: "two_shot_max_nvlink_many",
            index: 0,
            value: wins_up_to(&kept(two), &kept(one)),
            why: "allreduce: the two-shot kernel against the Simple one-shot (vector bytes)".into(),
        });
    }
    for op in ZERO_COPY_OPS {
        if let (Some(on), Some(off)) = (get("zc-on", op), get("zc-off", op)) {
            out.push(Derived {
                setting: zero_copy,
                index: index(op),
                value: wins_from(on, off),
                why: format!("{op}: zero copy against the FIFOs"),
            });
        }
    }
}

/// `table` (heuristics.txt's text) with each derived value written into its row and position;
/// names a setting the table lacks or a position beyond its row.
fn apply(table: &str, derived: &[Derived]) -> Result<String, String> {
    let mut lines: Vec<String> = table.lines().map(str::to_string).collect();
    for d in derived {
        let line = lines
            .iter_mut()
            .find(|l| l.split_whitespace().next() == Some(d.setting))
            .ok_or_else(|| format!("the table has no {}", d.setting))?;
        let mut words: Vec<String> = line.split_whitespace().map(str::to_string).collect();
        if d.index + 1 >= words.len() {
            return Err(format!("{} has no value {}", d.setting, d.index));
        }
        words[d.index + 1] = size_word(d.value);
        let values: String = words[1..].iter().map(|w| format!("{w:<6}")).collect();
        *line = format!("{:<26}{}", words[0], values.trim_end());
    }
    Ok(lines.join("\n") + "\n")
}

/// Runs `oxccl-bench tune`; returns the exit status.
pub fn main(args: &[String]) -> i32 {
    match run(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("oxccl-bench tune: {e}\n{}", crate::options::TUNE_USAGE);
            2
        }
    }
}

fn run(args: &[String]) -> Result<(), String> {
    let (mut column, mut apply_to, mut out) = (None, None::<PathBuf>, PathBuf::from("tune-out"));
    let mut from = None::<PathBuf>;
    let mut it = args.iter();
    let mut bench: Vec<String> = Vec::new();
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--column" => {
                let c = val()?;
                column = Some(
                    COLUMNS
                        .iter()
                        .position(|&x| x == c)
                        .ok_or(format!("--column {c:?}: host, pcie, nvlink or net"))?,
                );
            }
            "--apply" => apply_to = Some(val()?.into()),
            "--out" => out = val()?.into(),
            "--from" => from = Some(val()?.into()),
            "--" => bench.extend(it.by_ref().cloned()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let column = column.ok_or("--column is required")?;
    if let Some(bad) = bench
        .iter()
        .find(|a| ["--op", "--json", "--compare", "--worker"].contains(&a.as_str()))
    {
        return Err(format!("{bad} is the tuner's to set"));
    }
    if from.is_some() && !bench.is_empty() {
        return Err("--from derives from earlier measurements: no benchmark options".into());
    }
    let dir = from.clone().unwrap_or_else(|| out.clone());
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut runs: BTreeMap<&str, Times> = BTreeMap::new();
    let mut ranks = None;
    for v in variants() {
        let json = dir.join(format!("{}.json", v.name));
        if from.is_none() {
            let mut cmd = Command::new(&exe);
            cmd.args(&bench)
                .args(["--op", &v.ops.join(","), "--json"])
                .arg(&json)
                .envs(v.env.iter().copied());
            eprintln!("tune: {} ({})", v.name, describe(&v.env));
            let status = cmd.status().map_err(|e| format!("{}: {e}", v.name))?;
            if !status.success() {
                return Err(format!("{}: the benchmark exited with {status}", v.name));
            }
        }
        let text =
            std::fs::read_to_string(&json).map_err(|e| format!("{}: {e}", json.display()))?;
        runs.insert(v.name, parse_rows(&text, v.name)?);
        ranks = ranks.or(rows_ranks(&text));
    }
    let ranks = ranks.ok_or("the benchmark wrote no rows")?;
    let derived = derive(&runs, column, ranks);
    let report = report(&derived, COLUMNS[column], ranks, &bench);
    print!("{report}");
    std::fs::write(dir.join("tune.md"), &report).map_err(|e| e.to_string())?;
    if let Some(path) = apply_to {
        write_table(&path, &derived)?;
    }
    Ok(())
}

fn describe(env: &[(&str, &str)]) -> String {
    env.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn report(derived: &[Derived], column: &str, ranks: u64, bench: &[String]) -> String {
    let mut s = format!(
        "# oxccl-bench tune: column {column}, {ranks} ranks, benchmark options {:?}\n\n| setting | position | value | from |\n|---|---:|---:|---|\n",
        bench.join(" ")
    );
    for d in derived {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} |",
            d.setting,
            d.index,
            size_word(d.value),
            d.why
        );
    }
    s
}

fn write_table(path: &Path, derived: &[Derived]) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let new = apply(&text, derived)?;
    std::fs::write(path, new).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(points: &[(u64, f64)]) -> BTreeMap<u64, f64> {
        points.iter().copied().collect()
    }

    #[test]
    fn crossovers_follow_the_first_loss_from_each_end() {
        let a = series(&[(8, 1.0), (64, 2.0), (512, 5.0), (4096, 9.0)]);
        let b = series(&[(8, 2.0), (64, 2.03), (512, 4.0), (4096, 10.0)]);
        // a wins at 8, ties within the tolerance at 64, loses at 512: up to 64.
        assert_eq!(wins_up_to(&a, &b), 64);
        // From the top: wins at 4096, loses at 512.
        assert_eq!(wins_from(&a, &b), 4096);
        assert_eq!(wins_up_to(&a, &a), u64::MAX);
        assert_eq!(wins_from(&a, &a), 0);
        let slow = series(&[(8, 9.0), (64, 9.0), (512, 9.0), (4096, 99.0)]);
        assert_eq!(wins_up_to(&slow, &b), 0);
        assert_eq!(wins_from(&slow, &b), u64::MAX);
        // Sizes only one side has are skipped.
        assert_eq!(wins_up_to(&series(&[(1, 100.0), (8, 1.0)]), &b), u64::MAX);
        assert_eq!(
            best_of(&a, &b),
            series(&[(8, 1.0), (64, 2.0), (512, 4.0), (4096, 9.0)])
        );
    }

    #[test]
    fn rows_are_read_from_the_benchmarks_own_json() {
        let text = "[\n{\"lib\":\"ours\",\"path\":\"a,b\",\"version\":22809,\"op\":\"allreduce\",\"bytes\":64,\"count\":16,\"time_us\":3.5000,\"algbw\":0.1,\"busbw\":0.1,\"wrong\":0,\"ranks\":2}\n,\
{\"lib\":\"theirs\",\"path\":\"x\",\"op\":\"allreduce\",\"bytes\":64,\"time_us\":1.0,\"wrong\":0}\n,\
{\"lib\":\"ours\",\"op\":\"allgather\",\"bytes\":128,\"time_us\":null,\"wrong\":null}\n]\n";
        let t = parse_rows(text, "v").unwrap();
        assert_eq!(t["allreduce"], series(&[(64, 3.5)]));
        assert!(t.get("allgather").is_none_or(BTreeMap::is_empty));
        let bad = text.replace("\"wrong\":0,\"ranks\"", "\"wrong\":3,\"ranks\"");
        assert!(parse_rows(&bad, "v").unwrap_err().contains("3 wrong"));
        assert_eq!(field("{\"k\":\"v\",\"n\":7}", "n"), Some("7"));
        assert_eq!(rows_ranks(text), Some(2));
        assert_eq!(rows_ranks("[\n]\n"), None);
        assert_eq!(field("{\"k\":\"v\"}", "missing"), None);
    }

    #[test]
    fn sizes_and_per_peer_bytes() {
        assert_eq!(size_word(u64::MAX), "max");
        assert_eq!(size_word(0), "0");
        assert_eq!(size_word(64 << 10), "64K");
        assert_eq!(size_word(3 << 20), "3M");
        assert_eq!(size_word(1 << 30), "1G");
        assert_eq!(size_word(1000), "1000");
        assert_eq!(per_peer("allgather", 1 << 20, 4), 256 << 10);
        assert_eq!(per_peer("allreduce", 1 << 20, 4), 1 << 20);
        assert_eq!(per_peer("alltoall", u64::MAX, 4), u64::MAX);
    }

    /// The two-shot kernel's limit compares it with the Simple one-shot only where that runs
    /// (beyond LL's range) and the kernel takes the vector (below 1 MiB per rank's part).
    #[test]
    fn two_shot_is_weighed_where_the_simple_one_shot_runs() {
        let ar = |pts: &[(u64, f64)]| Times::from([("allreduce".to_string(), series(pts))]);
        let mut runs: BTreeMap<&str, Times> = BTreeMap::new();
        let (k, m) = (1u64 << 10, 1u64 << 20);
        runs.insert(
            "twoshot-on",
            ar(&[
                (128 * k, 9.0),
                (512 * k, 5.0),
                (m, 6.0),
                (2 * m, 20.0),
                (4 * m, 1.0),
            ]),
        );
        runs.insert(
            "oneshot-on",
            ar(&[
                (128 * k, 1.0),
                (512 * k, 6.0),
                (m, 8.0),
                (2 * m, 10.0),
                (4 * m, 9.0),
            ]),
        );
        let nvlink = COLUMNS.iter().position(|&c| c == "nvlink").unwrap();
        let two = |ranks| {
            derive(&runs, nvlink, ranks)
                .into_iter()
                .find(|d| d.setting == "two_shot_max_nvlink_many")
                .map(|d| d.value)
        };
        assert!(oxccl_core::plan::tuner::one_shot_ll_max_nvlink() < 512 * k);
        assert_eq!(two(4), Some(m));
        // Two ranks have no such row.
        assert_eq!(two(2), None);
    }

    /// Derived values land in their rows and positions of the real table; rows keep their
    /// value counts and every other line stays as it was.
    #[test]
    fn derived_values_are_written_into_the_table() {
        let table = include_str!("../../core/src/plan/heuristics.txt");
        let mut runs: BTreeMap<&str, Times> = BTreeMap::new();
        let ar = |pts: &[(u64, f64)]| Times::from([("allreduce".to_string(), series(pts))]);
        runs.insert("proto-LL", ar(&[(8, 1.0), (1 << 20, 9.0)]));
        runs.insert("proto-LL128", ar(&[(8, 2.0), (1 << 20, 8.0)]));
        runs.insert("proto-Simple", ar(&[(8, 3.0), (1 << 20, 7.0)]));
        runs.insert("zc-on", ar(&[(8, 9.0), (1 << 20, 1.0)]));
        let sr = |pts: &[(u64, f64)]| Times::from([("sendrecv".to_string(), series(pts))]);
        runs.insert("p2p-LL", sr(&[(8, 1.0), (16 << 10, 2.0), (64 << 10, 9.0)]));
        runs.insert(
            "p2p-Simple",
            sr(&[(8, 3.0), (16 << 10, 3.0), (64 << 10, 5.0)]),
        );
        runs.insert("zc-off", ar(&[(8, 1.0), (1 << 20, 2.0)]));
        let nvlink = COLUMNS.iter().position(|&c| c == "nvlink").unwrap();
        let d = derive(&runs, nvlink, 2);
        assert!(d.contains(&Derived {
            setting: "ll_max",
            index: nvlink,
            value: 8,
            why: "AllReduce: LL against the better of LL128 and Simple".into(),
        }));
        let new = apply(table, &d).unwrap();
        let row = |t: &str, name: &str| -> Vec<String> {
            t.lines()
                .find(|l| l.split_whitespace().next() == Some(name))
                .unwrap()
                .split_whitespace()
                .map(str::to_string)
                .collect()
        };
        assert_eq!(row(&new, "ll_max")[nvlink + 1], "8");
        assert_eq!(row(&new, "zero_copy_min_nvlink")[1], "1M");
        assert_eq!(row(&new, "p2p_ll_max")[nvlink + 1], "16K");
        for name in ["ll_max", "p2p_ll_max", "zero_copy_min_nvlink", "chunk_gpu"] {
            assert_eq!(row(&new, name).len(), row(table, name).len(), "{name}");
        }
        // Every other line is unchanged.
        let changed = table
            .lines()
            .zip(new.lines())
            .filter(|(a, b)| a != b)
            .count();
        assert_eq!(changed, 3);
        // More than two GPUs on NVLink: only the rows for many ranks change.
        let d4 = derive(&runs, nvlink, 4);
        assert!(
            d4.iter().all(|d| d.setting.ends_with("_nvlink_many")),
            "{d4:?}"
        );
        let new4 = apply(table, &d4).unwrap();
        assert_eq!(row(&new4, "ll_max_nvlink_many")[1], "8");
        assert_eq!(row(&new4, "zero_copy_min_nvlink_many")[1], "1M");
        assert_eq!(row(&new4, "p2p_ll_max_nvlink_many")[1], "16K");
        assert_eq!(row(&new4, "ll_max"), row(table, "ll_max"));
        assert_eq!(row(&new4, "p2p_ll_max"), row(table, "p2p_ll_max"));
        assert!(
            apply(
                table,
                &[Derived {
                    setting: "nope",
                    index: 0,
                    value: 1,
                    why: String::new()
                }]
            )
            .is_err()
        );
    }
}
