//! `--launch procs`: one process per rank. The parent takes the unique id from the library,
//! re-executes this program with `--worker RANK` (the id in `OXCCL_BENCH_ID`, hex), and
//! reads each worker's points from its stdout as JSON lines; it reports the slowest rank's
//! time and every rank's wrong elements. A worker that fails ends the others.

use super::mem::Device;
use super::ops::op_name;
use super::options::{Mem, Options};
use super::progress::Progress;
use super::sweep::{Allocated, Init, Point, Runner, Sweep, merge, unique_id};
use oxccl_core::plan::CollKind;
use oxccl_tests::cudart::Cudart;
use oxccl_tests::nccl_lib::{NcclLib, RawUniqueId};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

/// Environment variable carrying the unique id to workers.
const ID_VAR: &str = "OXCCL_BENCH_ID";
/// Starts a worker's point line (libraries may print on the same stdout, e.g. NCCL_DEBUG).
const MARK: &str = "@oxccl-bench-point ";

fn to_hex(id: &RawUniqueId) -> String {
    id.0.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(s: &str) -> Result<RawUniqueId, String> {
    let s = s.trim();
    if s.len() != 256 || !s.is_ascii() {
        return Err(format!("{ID_VAR} must be 256 hex digits"));
    }
    let mut id = [0u8; 128];
    for (k, b) in id.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * k..2 * k + 2], 16)
            .map_err(|_| format!("{ID_VAR}: bad hex"))?;
    }
    Ok(RawUniqueId(id))
}

/// The worker's line for one point.
fn point_line(k: CollKind, p: &Point) -> String {
    let wrong = p.wrong.map_or("null".to_string(), |w| w.to_string());
    format!(
        "{MARK}{{\"op\":\"{}\",\"bytes\":{},\"count\":{},\"time_us\":{},\"wrong\":{}}}",
        op_name(k),
        p.bytes,
        p.count,
        p.time_us,
        wrong
    )
}

/// The raw text of `key`'s value in one of our flat JSON lines.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!("\"{key}\":");
    let start = line.find(&pat)? + pat.len();
    let rest = &line[start..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    Some(rest[..end].trim().trim_matches('"'))
}

fn parse_point(line: &str) -> Option<(String, Point)> {
    let line = &line[line.find(MARK)? + MARK.len()..];
    let op = field(line, "op")?.to_string();
    let wrong = field(line, "wrong")?;
    Some((
        op,
        Point {
            bytes: field(line, "bytes")?.parse().ok()?,
            count: field(line, "count")?.parse().ok()?,
            time_us: field(line, "time_us")?.parse().ok()?,
            wrong: if wrong == "null" {
                None
            } else {
                Some(wrong.parse().ok()?)
            },
        },
    ))
}

/// A worker process: rank `rank` of `o.ranks`, on GPU `rank` in cuda mode. Returns the exit
/// status.
pub fn worker_main(o: &Options, rank: usize) -> i32 {
    let run = || -> Result<(), String> {
        let id = from_hex(&std::env::var(ID_VAR).map_err(|_| format!("{ID_VAR} is not set"))?)?;
        let lib = NcclLib::load(&o.lib)?;
        let rt = match o.mem {
            Mem::Cuda => Some(Cudart::load()?),
            Mem::Host => None,
        };
        let dev = rt.as_ref().map_or(Device::Host, Device::Cuda);
        let alloc = Allocated::new(&lib, dev, o, &[(rank, rank)])?;
        let runner = Runner::start(&lib, dev, o, alloc, Init::Rank(id), None)?;
        let mut out = std::io::stdout().lock();
        let sweep = runner.sweep(&mut |k, p| {
            let _ = writeln!(out, "{}", point_line(k, p));
            let _ = out.flush();
        });
        let fin = runner.finish();
        sweep?;
        fin?;
        // The library stays loaded until exit: its threads may outlive the communicators.
        std::mem::forget(lib);
        Ok(())
    };
    match run() {
        Ok(()) => 0,
        Err(e) => {
            // One write, so that workers failing together do not interleave.
            let _ = std::io::stderr()
                .write_all(format!("oxccl-bench: worker rank {rank}: {e}\n").as_bytes());
            1
        }
    }
}

enum Msg {
    Line(usize, String),
    Eof(usize),
}

/// Runs `path` with one process per rank (`lib` is the same library, loaded here for the id;
/// it must stay loaded while the workers initialise).
pub fn run_procs(
    lib: &NcclLib,
    path: &str,
    o: &Options,
    progress: &Progress,
) -> Result<Sweep, String> {
    let n = o.ranks;
    let id = to_hex(&unique_id(lib)?);
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let (tx, rx) = mpsc::channel();
    let mut children: Vec<Option<Child>> = Vec::new();
    let mut readers = Vec::new();
    let kill_all = |children: &mut Vec<Option<Child>>| {
        for c in children.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    };
    for rank in 0..n {
        let mut cmd = Command::new(&exe);
        cmd.args(o.worker_args(path, rank))
            .env(ID_VAR, &id)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        oxccl_tests::apply_test_host(&mut cmd, rank, n);
        let spawned = cmd.spawn();
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                kill_all(&mut children);
                return Err(format!("cannot start worker {rank}: {e}"));
            }
        };
        let stdout = child.stdout.take().expect("piped stdout");
        let tx = tx.clone();
        readers.push(std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(Msg::Line(rank, line));
            }
            let _ = tx.send(Msg::Eof(rank));
        }));
        children.push(Some(child));
    }
    drop(tx);
    let mut points: Vec<Vec<(String, Point)>> = vec![Vec::new(); n];
    let mut failure = None;
    let mut left = n;
    while left > 0 {
        let Ok(msg) = rx.recv() else { break };
        match msg {
            Msg::Line(rank, line) => match parse_point(&line) {
                Some((op, p)) => {
                    if rank == 0
                        && let Some(k) = o.ops.iter().find(|k| op_name(**k) == op)
                    {
                        progress.point(*k, p.bytes);
                    }
                    points[rank].push((op, p));
                }
                // Anything else a library prints on stdout passes through.
                None => println!("{line}"),
            },
            Msg::Eof(rank) => {
                left -= 1;
                let status = children[rank].take().map(|mut c| c.wait());
                let ok = matches!(&status, Some(Ok(s)) if s.success());
                if !ok && failure.is_none() {
                    let how = match status {
                        Some(Ok(s)) => s.to_string(),
                        Some(Err(e)) => e.to_string(),
                        None => "vanished".into(),
                    };
                    failure = Some(format!("worker rank {rank} {how}"));
                    // The others would wait for it forever.
                    kill_all(&mut children);
                }
            }
        }
    }
    for r in readers {
        let _ = r.join();
    }
    if let Some(f) = failure {
        return Err(f);
    }
    let sizes = o.sizes().len();
    let mut merged: Option<Sweep> = None;
    for (rank, pts) in points.into_iter().enumerate() {
        if pts.len() != o.ops.len() * sizes {
            return Err(format!(
                "worker rank {rank} reported {} of {} points",
                pts.len(),
                o.ops.len() * sizes
            ));
        }
        let mut it = pts.into_iter().map(|(_, p)| p);
        let sweep: Sweep = o
            .ops
            .iter()
            .map(|&k| (k, it.by_ref().take(sizes).collect()))
            .collect();
        match &mut merged {
            None => merged = Some(sweep),
            Some(m) => merge(m, &sweep),
        }
    }
    Ok(merged.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_ids_round_trip() {
        let p = Point {
            bytes: 1 << 33,
            count: 1 << 31,
            time_us: 12.25,
            wrong: Some(3),
        };
        let (op, q) = parse_point(&point_line(CollKind::ReduceScatter, &p)).unwrap();
        assert_eq!((op.as_str(), q), ("reducescatter", p));
        let p = Point { wrong: None, ..p };
        assert_eq!(
            parse_point(&point_line(CollKind::AllReduce, &p)).unwrap().1,
            p
        );
        assert!(parse_point("NCCL INFO something").is_none());
        let noisy = format!(
            "host:1:2 NCCL INFO x{}",
            point_line(CollKind::AllReduce, &p)
        );
        assert_eq!(parse_point(&noisy).unwrap().1, p);
        let mut id = RawUniqueId([0; 128]);
        id.0[0] = 0xab;
        id.0[127] = 7;
        assert_eq!(from_hex(&to_hex(&id)).unwrap().0, id.0);
        assert!(from_hex("abc").is_err());
    }
}
