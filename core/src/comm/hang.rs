//! Hang reports: the status message ranks exchange when an operation stops making progress,
//! and the sentence built from every rank's answer ("AllReduce #4182 (count 1048576 bf16 sum)
//! waiting 120 s: ranks 0-6, 8-15 entered it; rank 7 is at #4181 (Broadcast, root 0)").
//!
//! Ages travel instead of timestamps, because the ranks' clocks need not agree.

use super::flight::{OpKind, OpRecord, OpState};
use crate::bootstrap::wire::{Dec, Enc, rank_list, secs};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Version of the status messages (a rank ignores answers of another version).
const STATUS_VERSION: u32 = 1;

/// Most records one status answer carries.
pub(crate) const MAX_STATUS_RECORDS: usize = 16;

/// A status request: which exchange it belongs to and the operation the asker waits on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Request {
    pub id: u64,
    pub seq: u64,
}

impl Request {
    /// Wire form.
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        e.u32(STATUS_VERSION).u64(self.id).u64(self.seq);
        e.0
    }

    /// Parses a request; `Err` says why it is malformed.
    pub fn decode(b: &[u8]) -> Result<Request, String> {
        let mut d = Dec(b);
        let v = d.u32()?;
        if v != STATUS_VERSION {
            return Err(format!("status request version {v}"));
        }
        let r = Request {
            id: d.u64()?,
            seq: d.u64()?,
        };
        d.finish()?;
        Ok(r)
    }
}

/// One rank's answer: its most recent records, each with its age in milliseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Status {
    pub id: u64,
    /// `(record, milliseconds since it was issued)`, oldest first.
    pub records: Vec<(OpRecord, u64)>,
}

fn state_code(s: OpState) -> u8 {
    match s {
        OpState::Pending => 0,
        OpState::Done => 1,
        OpState::Failed => 2,
    }
}

impl Status {
    /// Wire form (at most [`MAX_STATUS_RECORDS`] records, the newest).
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        let skip = self.records.len().saturating_sub(MAX_STATUS_RECORDS);
        let recs = &self.records[skip..];
        e.u32(STATUS_VERSION).u64(self.id).u32(recs.len() as u32);
        for (r, age) in recs {
            e.u64(r.seq)
                .u8(r.kind.code())
                .u64(r.count)
                .u8(r.dtype)
                .u8(r.red)
                .u32(r.root_or_peer)
                .u64(r.stream)
                .u64(*age)
                .u8(state_code(r.state));
        }
        e.0
    }

    /// Parses an answer; `Err` says why it is malformed (never panics on any input).
    pub fn decode(b: &[u8]) -> Result<Status, String> {
        let mut d = Dec(b);
        let v = d.u32()?;
        if v != STATUS_VERSION {
            return Err(format!("status answer version {v}"));
        }
        let id = d.u64()?;
        let n = d.u32()? as usize;
        if n > MAX_STATUS_RECORDS {
            return Err(format!("status answer with {n} records"));
        }
        let mut records = Vec::with_capacity(n);
        for _ in 0..n {
            let seq = d.u64()?;
            let kind = OpKind::from_code(d.u8()?).ok_or("unknown operation code")?;
            let count = d.u64()?;
            let dtype = d.u8()?;
            let red = d.u8()?;
            let root_or_peer = d.u32()?;
            let stream = d.u64()?;
            let age = d.u64()?;
            let state = match d.u8()? {
                0 => OpState::Pending,
                1 => OpState::Done,
                2 => OpState::Failed,
                s => return Err(format!("unknown operation state {s}")),
            };
            records.push((
                OpRecord {
                    seq,
                    kind,
                    count,
                    dtype,
                    red,
                    root_or_peer,
                    stream,
                    issued_ms: 0,
                    ended_ms: 0,
                    state,
                },
                age,
            ));
        }
        d.finish()?;
        Ok(Status { id, records })
    }
}

/// What the asker learnt about one rank.
#[derive(Clone, Debug)]
pub(crate) enum View {
    /// It answered with its records.
    Answered(Vec<(OpRecord, u64)>),
    /// It did not answer; the wall-clock time the asker last heard from it (or asked it).
    Silent(SystemTime),
    /// Its bootstrap connection or process is gone.
    Dead(String),
    /// It closed its connections on purpose: its communicator was destroyed or aborted.
    Left,
}

/// "12:03:55 UTC".
pub(crate) fn clock(t: SystemTime) -> String {
    let s = t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() % 86400;
    format!("{:02}:{:02}:{:02} UTC", s / 3600, (s / 60) % 60, s % 60)
}

fn whole_secs(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        secs(Duration::from_secs(d.as_secs()))
    } else {
        secs(d)
    }
}

/// Where a rank stands relative to the stuck operation, as text grouping ranks alike.
fn place(stuck: &OpRecord, me: u32, recs: &[(OpRecord, u64)]) -> String {
    if stuck.kind.is_collective() {
        let colls: Vec<&(OpRecord, u64)> = recs
            .iter()
            .filter(|(r, _)| r.kind.is_collective())
            .collect();
        if let Some((r, _)) = colls.iter().find(|(r, _)| r.seq == stuck.seq) {
            if !r.same_call(stuck) {
                return format!("entered #{} as {}", r.seq, r.describe_call());
            }
            return match r.state {
                OpState::Pending => "entered it".into(),
                OpState::Done => "completed it".into(),
                OpState::Failed => "gave up on it (aborted or failed)".into(),
            };
        }
        match colls.iter().max_by_key(|(r, _)| r.seq) {
            None => match recs.last() {
                None => "issued no operation yet".into(),
                Some((r, age)) => format!(
                    "issued no collective yet (last: {} {} ago)",
                    r.describe(),
                    whole_secs(Duration::from_millis(*age))
                ),
            },
            Some((r, _)) if r.seq > stuck.seq => "completed it".into(),
            Some((r, age)) => {
                let mut s = format!("is at #{} ({}", r.seq, r.brief());
                match r.state {
                    OpState::Pending => s.push_str(&format!(
                        ", waiting {}",
                        whole_secs(Duration::from_millis(*age))
                    )),
                    OpState::Done => s.push_str(", done"),
                    OpState::Failed => s.push_str(", failed"),
                }
                s.push(')');
                s
            }
        }
    } else {
        // A send or receive: what the peer did with the matching receive or send.
        let want = if stuck.kind == OpKind::Send {
            OpKind::Recv
        } else {
            OpKind::Send
        };
        let mine: Vec<&(OpRecord, u64)> = recs
            .iter()
            .filter(|(r, _)| r.kind == want && r.root_or_peer == me)
            .collect();
        if let Some((r, _)) = mine.iter().find(|(r, _)| r.seq == stuck.seq) {
            return match r.state {
                OpState::Pending => format!("posted the matching {} #{}", want.name(), r.seq),
                OpState::Done => format!("completed the matching {} #{}", want.name(), r.seq),
                OpState::Failed => format!("failed the matching {} #{}", want.name(), r.seq),
            };
        }
        let last = recs
            .last()
            .map(|(r, _)| format!("; its latest operation is {}", r.describe()))
            .unwrap_or_default();
        format!(
            "has not posted the matching {} #{} with rank {me}{last}",
            want.name(),
            stuck.seq
        )
    }
}

impl OpRecord {
    /// "AllReduce (count 512 bf16 sum)": the call without its number.
    fn describe_call(&self) -> String {
        let d = self.describe();
        match d.find(" (") {
            Some(i) => format!("{}{}", self.kind.name(), &d[i..]),
            None => d,
        }
    }
}

/// The report of rank `me` about `stuck`, which has waited `waited`, from every rank's view
/// (its own included). Ranks in the same place are grouped.
pub(crate) fn report(
    me: u32,
    stuck: &OpRecord,
    waited: Duration,
    views: &BTreeMap<u32, View>,
) -> String {
    let mut groups: Vec<(String, Vec<u32>)> = Vec::new();
    let mut add = |what: String, r: u32| match groups.iter_mut().find(|(w, _)| *w == what) {
        Some((_, v)) => v.push(r),
        None => groups.push((what, vec![r])),
    };
    let relevant = |r: u32| stuck.kind.is_collective() || r == me || r == stuck.root_or_peer;
    for (&r, view) in views {
        if !relevant(r) {
            continue;
        }
        match view {
            // A sender's or receiver's own rank waits in the operation by definition.
            View::Answered(_) if r == me && !stuck.kind.is_collective() => {
                add("entered it".into(), r)
            }
            View::Answered(recs) => add(place(stuck, me, recs), r),
            View::Silent(since) => add(format!("unreachable since {}", clock(*since)), r),
            View::Dead(why) => add(format!("died ({why})"), r),
            View::Left => add("left (communicator destroyed or aborted)".into(), r),
        }
    }
    // Ranks waiting in the operation first, as the context for the others.
    groups.sort_by_key(|(w, _)| w != "entered it");
    let parts: Vec<String> = groups
        .into_iter()
        .map(|(what, ranks)| format!("{} {what}", rank_list(&ranks)))
        .collect();
    format!(
        "rank {me}: {} waiting {}: {}",
        stuck.describe(),
        whole_secs(waited),
        parts.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::CollKind;

    fn rec(seq: u64, kind: OpKind, count: u64, root: u32, state: OpState) -> OpRecord {
        OpRecord {
            seq,
            kind,
            count,
            dtype: 9,
            red: 0,
            root_or_peer: root,
            stream: 0,
            issued_ms: 0,
            ended_ms: 0,
            state,
        }
    }

    const AR: OpKind = OpKind::Coll(CollKind::AllReduce);
    const BC: OpKind = OpKind::Coll(CollKind::Broadcast);

    #[test]
    fn report_names_the_rank_behind_and_the_silent_one() {
        let stuck = rec(4182, AR, 1048576, 0, OpState::Pending);
        let mut views = BTreeMap::new();
        for r in 0..16u32 {
            let v = match r {
                7 => vec![(rec(4181, BC, 8, 0, OpState::Pending), 120_000)],
                _ => vec![
                    (rec(4181, BC, 8, 0, OpState::Done), 121_000),
                    (stuck, 120_000),
                ],
            };
            views.insert(r, View::Answered(v));
        }
        let s = report(0, &stuck, Duration::from_millis(120_400), &views);
        assert_eq!(
            s,
            "rank 0: AllReduce #4182 (count 1048576 bf16 sum) waiting 120 s: ranks 0-6, 8-15 \
             entered it; rank 7 is at #4181 (Broadcast, root 0, waiting 120 s)"
        );
        views.insert(
            7,
            View::Silent(UNIX_EPOCH + Duration::from_secs(12 * 3600 + 3 * 60 + 55)),
        );
        let mut odd = stuck;
        odd.count = 512;
        views.insert(3, View::Answered(vec![(odd, 5)]));
        let s = report(0, &stuck, Duration::from_secs(120), &views);
        assert!(s.contains("rank 7 unreachable since 12:03:55 UTC"), "{s}");
        assert!(
            s.contains("rank 3 entered #4182 as AllReduce (count 512 bf16 sum)"),
            "{s}"
        );
        assert!(s.contains("ranks 0-2, 4-6, 8-15 entered it"), "{s}");
    }

    #[test]
    fn report_for_a_send_looks_at_the_peer_only() {
        let stuck = rec(3, OpKind::Send, 64, 2, OpState::Pending);
        let mut views = BTreeMap::new();
        views.insert(0, View::Answered(vec![(stuck, 10)]));
        views.insert(1, View::Answered(vec![]));
        views.insert(
            2,
            View::Answered(vec![(rec(2, OpKind::Recv, 64, 0, OpState::Done), 50)]),
        );
        let s = report(0, &stuck, Duration::from_secs(3), &views);
        assert_eq!(
            s,
            "rank 0: Send #3 to rank 2 (count 64 bf16) waiting 3 s: rank 0 entered it; rank 2 \
             has not posted the matching Recv #3 with rank 0; its latest operation is Recv #2 \
             from rank 0 (count 64 bf16)"
        );
    }

    #[test]
    fn status_roundtrip_and_truncation() {
        let recs: Vec<(OpRecord, u64)> = (0..20)
            .map(|i| (rec(i, AR, i * 10, 0, OpState::Done), i))
            .collect();
        let s = Status {
            id: 9,
            records: recs.clone(),
        };
        let back = Status::decode(&s.encode()).unwrap();
        assert_eq!(back.id, 9);
        assert_eq!(back.records.len(), MAX_STATUS_RECORDS);
        assert_eq!(back.records[0].0.seq, 4);
        let q = Request { id: 1, seq: 2 };
        assert_eq!(Request::decode(&q.encode()).unwrap(), q);
        assert!(Request::decode(&[1, 0, 0]).is_err());
    }

    #[test]
    fn fuzz_status_and_request_decoders() {
        let mut rng = crate::testing::Rng::new(11);
        let recs: Vec<(OpRecord, u64)> = (0..5)
            .map(|i| (rec(i, AR, i, 0, OpState::Pending), i))
            .collect();
        let good = Status {
            id: 3,
            records: recs,
        }
        .encode();
        for _ in 0..20_000 {
            let len = rng.below(600) as usize;
            let noise = rng.bytes(len);
            let _ = Status::decode(&noise);
            let _ = Request::decode(&noise);
            let cut = rng.below(good.len() as u64) as usize;
            assert!(Status::decode(&good[..cut]).is_err());
            let mut m = good.clone();
            let i = rng.below(m.len() as u64) as usize;
            m[i] = rng.below(256) as u8;
            if let Ok(st) = Status::decode(&m) {
                // Whatever decodes can be reported on without panicking.
                let mut views = BTreeMap::new();
                views.insert(1, View::Answered(st.records));
                let _ = report(
                    0,
                    &rec(4, AR, 4, 0, OpState::Pending),
                    Duration::ZERO,
                    &views,
                );
            }
        }
    }
}
