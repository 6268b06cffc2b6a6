//! nccl-tests-style tables, the header, and the JSON file.

use super::ops::{allows_in_place, bus_factor, op_name};
use super::options::{Options, dtype_arg};
use super::sweep::{Point, Sweep};
use oxccl_core::plan::CollKind;
use std::fmt::Write as _;

/// What became of one library's run.
pub enum Outcome {
    /// Measured.
    Done(Sweep),
    /// Not run (a missing entry point the options need).
    Skipped(String),
    /// Failed.
    Failed(String),
}

/// One library of the invocation.
pub struct LibRun {
    /// "ours" or "theirs".
    pub label: &'static str,
    /// Library path.
    pub path: String,
    /// `ncclGetVersion` (0 when it could not be loaded).
    pub version: i32,
    /// Operations this library runs as grouped send/recv.
    pub p2p_ops: Vec<CollKind>,
    /// The result.
    pub outcome: Outcome,
}

impl LibRun {
    fn sweep(&self) -> Option<&Sweep> {
        match &self.outcome {
            Outcome::Done(s) => Some(s),
            _ => None,
        }
    }
}

/// GB/s for `bytes` in `us` microseconds.
pub fn gbps(bytes: usize, us: f64) -> f64 {
    if us > 0.0 {
        bytes as f64 / us / 1e3
    } else {
        0.0
    }
}

/// `NCCL_*` and `OXCCL_*` variables set in the environment, sorted.
pub fn tuning_env() -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| {
            (k.starts_with("NCCL_") || k.starts_with("OXCCL_")) && k != "OXCCL_BENCH_ID"
        })
        .collect();
    v.sort();
    v
}

fn human(bytes: usize) -> String {
    const UNITS: [(usize, &str); 4] = [
        (1 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ];
    for (u, name) in UNITS {
        if bytes >= u && bytes.is_multiple_of(u) {
            return format!("{} {name}", bytes / u);
        }
    }
    format!("{bytes} B")
}

/// The header: configuration, libraries, environment.
pub fn header(o: &Options, libs: &[(&str, &str, i32)]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# oxccl-bench: {} ranks, --mem {}, --launch {}, {}, {}, graph {}, --reg {}, check {}",
        o.ranks,
        o.mem.name(),
        o.launch.name(),
        dtype_arg(o.dtype),
        if o.inplace {
            "in place"
        } else {
            "out of place"
        },
        if o.graph { "on" } else { "off" },
        o.reg.name(),
        if o.check { "on" } else { "off" },
    );
    let _ = writeln!(
        s,
        "# sizes {} .. {} x{}, warmup {}, iters {}",
        human(o.min_bytes),
        human(o.max_bytes),
        o.factor,
        o.warmup,
        o.iters
    );
    for (label, path, version) in libs {
        let _ = writeln!(s, "# {label:<6} {path} (version code {version})");
    }
    let env = tuning_env();
    if env.is_empty() {
        let _ = writeln!(s, "# env: no NCCL_*/OXCCL_* variables set");
    } else {
        let list: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(s, "# env: {}", list.join(" "));
    }
    s
}

fn wrong_text(w: Option<usize>) -> String {
    w.map_or("N/A".into(), |w| w.to_string())
}

/// The tables of every operation: one library alone, or the first two side by side. Returns
/// the tables and the total of wrong elements.
pub fn tables(o: &Options, runs: &[LibRun]) -> (String, usize) {
    let mut s = String::new();
    let mut total = 0;
    for r in runs {
        match &r.outcome {
            Outcome::Skipped(m) => {
                let _ = writeln!(s, "# {} ({}): skipped: {m}", r.label, r.path);
            }
            Outcome::Failed(m) => {
                let _ = writeln!(s, "# {} ({}): FAILED: {m}", r.label, r.path);
            }
            Outcome::Done(_) => {}
        }
    }
    let done: Vec<&LibRun> = runs.iter().filter(|r| r.sweep().is_some()).collect();
    let Some(first) = done.first() else {
        return (s, 0);
    };
    let second = done.get(1);
    let n = o.ranks;
    for (i, (k, pts)) in first.sweep().expect("done").iter().enumerate() {
        let mut notes = vec![format!("busbw = algbw x {:.3}", bus_factor(*k, n))];
        if o.inplace {
            notes.push(
                if allows_in_place(*k) {
                    "in place"
                } else {
                    "out of place: no in-place form"
                }
                .into(),
            );
        }
        for r in &done {
            if r.p2p_ops.contains(k) {
                notes.push(format!("{}: grouped send/recv", r.label));
            }
        }
        let _ = writeln!(s, "#\n# {} ({})", op_name(*k), notes.join("; "));
        match second {
            None => {
                let _ = writeln!(
                    s,
                    "# {:>12} {:>12} {:>12} {:>10} {:>10} {:>8}",
                    "size(B)", "count", "time(us)", "algbw", "busbw", "#wrong"
                );
            }
            Some(t) => {
                let _ = writeln!(
                    s,
                    "# {:>12} {:>12} {:>12} {:>10} {:>10} {:>8} | {:>12} {:>10} {:>8} | {:>9}",
                    "size(B)",
                    "count",
                    "time(us)",
                    "algbw",
                    "busbw",
                    "#wrong",
                    format!("{}(us)", t.label),
                    format!("{} bus", t.label),
                    "#wrong",
                    format!("{}/{}", first.label, t.label)
                );
            }
        }
        for (j, p) in pts.iter().enumerate() {
            let alg = gbps(p.bytes, p.time_us);
            let bus = alg * bus_factor(*k, n);
            total += p.wrong.unwrap_or(0);
            let _ = write!(
                s,
                "  {:>12} {:>12} {:>12.2} {:>10.3} {:>10.3} {:>8}",
                p.bytes,
                p.count,
                p.time_us,
                alg,
                bus,
                wrong_text(p.wrong)
            );
            if let Some(t) = second {
                let q: Point = t.sweep().expect("done")[i].1[j];
                total += q.wrong.unwrap_or(0);
                let qbus = gbps(q.bytes, q.time_us) * bus_factor(*k, n);
                let ratio = if q.time_us > 0.0 {
                    format!("{:.2}", p.time_us / q.time_us)
                } else {
                    "-".into()
                };
                let _ = write!(
                    s,
                    " | {:>12.2} {:>10.3} {:>8} | {:>9}",
                    q.time_us,
                    qbus,
                    wrong_text(q.wrong),
                    ratio
                );
            }
            s.push('\n');
        }
    }
    for r in done.iter().skip(2) {
        let _ = writeln!(
            s,
            "# {}: measured but not shown (two libraries at most)",
            r.label
        );
    }
    let _ = writeln!(s, "# total #wrong: {total}");
    (s, total)
}

fn json_str(v: &str) -> String {
    let mut out = String::from("\"");
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_num(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.4}")
    } else {
        "null".into()
    }
}

/// Every row of every measured library as a JSON array.
pub fn json(o: &Options, runs: &[LibRun]) -> String {
    let n = o.ranks;
    let mut rows = Vec::new();
    for r in runs {
        let Some(sweep) = r.sweep() else { continue };
        for (k, pts) in sweep {
            for p in pts {
                let alg = gbps(p.bytes, p.time_us);
                rows.push(format!(
                    "{{\"lib\":{},\"path\":{},\"version\":{},\"op\":\"{}\",\"bytes\":{},\"count\":{},\
                     \"time_us\":{},\"algbw\":{},\"busbw\":{},\"wrong\":{},\"ranks\":{n},\
                     \"dtype\":\"{}\",\"mem\":\"{}\",\"launch\":\"{}\",\"inplace\":{},\"graph\":{},\
                     \"reg\":\"{}\",\"impl\":\"{}\"}}",
                    json_str(r.label),
                    json_str(&r.path),
                    r.version,
                    op_name(*k),
                    p.bytes,
                    p.count,
                    json_num(p.time_us),
                    json_num(alg),
                    json_num(alg * bus_factor(*k, n)),
                    p.wrong.map_or("null".into(), |w| w.to_string()),
                    dtype_arg(o.dtype),
                    o.mem.name(),
                    o.launch.name(),
                    o.inplace && allows_in_place(*k),
                    o.graph,
                    o.reg.name(),
                    if r.p2p_ops.contains(k) { "p2p" } else { "native" },
                ));
            }
        }
    }
    format!("[\n{}\n]\n", rows.join(",\n"))
}

/// "RESULT pass=P fail=F", as the GPU checks print it (`tests/gpu/lib.sh` counts it): a pass
/// per size checked without a wrong element, a failure per size with one and per library that
/// failed.
pub fn result_line(runs: &[LibRun]) -> String {
    let (mut pass, mut fail) = (0, 0);
    for r in runs {
        match &r.outcome {
            Outcome::Done(sweep) => {
                for p in sweep.iter().flat_map(|(_, pts)| pts) {
                    match p.wrong {
                        Some(0) => pass += 1,
                        Some(_) => fail += 1,
                        None => {}
                    }
                }
            }
            Outcome::Failed(_) => fail += 1,
            Outcome::Skipped(_) => {}
        }
    }
    format!("RESULT pass={pass} fail={fail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_result_line_counts_checked_sizes_and_failed_libraries() {
        let point = |wrong| Point {
            wrong,
            ..Point::default()
        };
        let run = |outcome| LibRun {
            label: "ours",
            path: String::new(),
            version: 0,
            p2p_ops: Vec::new(),
            outcome,
        };
        let sweep = vec![(
            CollKind::AllReduce,
            vec![point(Some(0)), point(Some(3)), point(None), point(Some(0))],
        )];
        let runs = [
            run(Outcome::Done(sweep)),
            run(Outcome::Failed("x".into())),
            run(Outcome::Skipped("y".into())),
        ];
        assert_eq!(result_line(&runs), "RESULT pass=2 fail=2");
    }

    #[test]
    fn json_escapes_and_sizes_print() {
        assert_eq!(json_str("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
        assert_eq!(human(8 << 30), "8 GiB");
        assert_eq!(human(1000), "1000 B");
        assert_eq!(json_num(f64::INFINITY), "null");
    }
}
