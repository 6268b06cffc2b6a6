//! The flight recorder: a fixed ring of every communicator's recent operations (sequence number,
//! operation, count, type, reduction, root or peer, stream), written on the hot path without
//! allocating, and read by the watchdog when an operation stops making progress.

use crate::datatype::{DataType, RedOp};
use crate::plan::CollKind;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Operations one communicator remembers (older ones are overwritten).
pub(crate) const RING: usize = 128;

/// What an operation was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// A collective; its sequence number is the same on every rank.
    Coll(CollKind),
    /// A caller-built plan (MSCCL), numbered like collectives.
    Plan,
    /// `ncclSend`; its sequence number counts sends to that peer.
    Send,
    /// `ncclRecv`; its sequence number counts receives from that peer.
    Recv,
}

impl OpKind {
    /// True for operations whose sequence numbers all ranks share.
    pub fn is_collective(self) -> bool {
        matches!(self, OpKind::Coll(_) | OpKind::Plan)
    }

    /// "AllReduce", "Send", ... for reports.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Coll(k) => match k {
                CollKind::AllReduce => "AllReduce",
                CollKind::Broadcast => "Broadcast",
                CollKind::Reduce => "Reduce",
                CollKind::AllGather => "AllGather",
                CollKind::ReduceScatter => "ReduceScatter",
                CollKind::AllToAll => "AlltoAll",
                CollKind::AllToAllv => "AlltoAllv",
                CollKind::Gather => "Gather",
                CollKind::Scatter => "Scatter",
                CollKind::SendRecv => "SendRecv",
            },
            OpKind::Plan => "Plan",
            OpKind::Send => "Send",
            OpKind::Recv => "Recv",
        }
    }

    /// Wire code (see [`OpKind::from_code`]).
    pub(crate) fn code(self) -> u8 {
        match self {
            OpKind::Coll(k) => match k {
                CollKind::AllReduce => 0,
                CollKind::Broadcast => 1,
                CollKind::Reduce => 2,
                CollKind::AllGather => 3,
                CollKind::ReduceScatter => 4,
                CollKind::AllToAll => 5,
                CollKind::AllToAllv => 6,
                CollKind::Gather => 7,
                CollKind::Scatter => 8,
                CollKind::SendRecv => 9,
            },
            OpKind::Plan => 20,
            OpKind::Send => 21,
            OpKind::Recv => 22,
        }
    }

    /// Inverse of [`OpKind::code`]; `None` for codes no version wrote.
    pub(crate) fn from_code(c: u8) -> Option<OpKind> {
        use CollKind::*;
        let colls = [
            AllReduce,
            Broadcast,
            Reduce,
            AllGather,
            ReduceScatter,
            AllToAll,
            AllToAllv,
            Gather,
            Scatter,
            SendRecv,
        ];
        match c {
            0..=9 => Some(OpKind::Coll(colls[c as usize])),
            20 => Some(OpKind::Plan),
            21 => Some(OpKind::Send),
            22 => Some(OpKind::Recv),
            _ => None,
        }
    }

    /// Whether the operation has a root (reported with it).
    fn has_root(self) -> bool {
        matches!(
            self,
            OpKind::Coll(
                CollKind::Broadcast | CollKind::Reduce | CollKind::Gather | CollKind::Scatter
            )
        )
    }

    /// Whether the operation reduces (its operator is reported).
    fn reduces(self) -> bool {
        matches!(
            self,
            OpKind::Coll(CollKind::AllReduce | CollKind::Reduce | CollKind::ReduceScatter)
        )
    }
}

/// Reduction codes of records: the built-in operators, then "user-defined".
pub(crate) fn red_code(op: RedOp) -> u8 {
    match op {
        RedOp::Sum => 0,
        RedOp::Prod => 1,
        RedOp::Max => 2,
        RedOp::Min => 3,
        RedOp::Avg => 4,
        RedOp::PreMulSum(_) => 5,
    }
}

fn red_name(code: u8) -> &'static str {
    ["sum", "prod", "max", "min", "avg", "premulsum"]
        .get(code as usize)
        .copied()
        .unwrap_or("?")
}

/// Short type names for reports ("bf16", "f32").
fn type_name(code: u8) -> &'static str {
    [
        "i8", "u8", "i32", "u32", "i64", "u64", "f16", "f32", "f64", "bf16", "f8e4m3", "f8e5m2",
    ]
    .get(code as usize)
    .copied()
    .unwrap_or("?")
}

/// Where an operation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpState {
    /// Issued, not known complete.
    Pending,
    /// Completed (or, where the backend cannot tell, handed to the device).
    Done,
    /// Failed or was aborted.
    Failed,
}

/// One remembered operation. Plain data, so the ring never allocates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpRecord {
    /// Collective sequence number (shared by all ranks), or per-peer number of a send/receive.
    pub seq: u64,
    /// The operation.
    pub kind: OpKind,
    /// The API's count argument.
    pub count: u64,
    /// `ncclDataType_t` value.
    pub dtype: u8,
    /// Reduction code (see `red_code`).
    pub red: u8,
    /// Root of rooted collectives, peer of sends and receives, else `u32::MAX`.
    pub root_or_peer: u32,
    /// The backend's identifier of the stream (0 where it has none).
    pub stream: u64,
    /// Milliseconds since the recorder started when it was issued.
    pub issued_ms: u64,
    /// Milliseconds since the recorder started when it completed (0 while pending).
    pub ended_ms: u64,
    /// Where it is.
    pub state: OpState,
}

impl OpRecord {
    /// "AllReduce #4182 (count 1048576 bf16 sum)", "Broadcast #7 (count 8 f32, root 0)",
    /// "Send #3 to rank 2 (count 64 u8)".
    pub fn describe(&self) -> String {
        let mut s = format!("{} #{}", self.kind.name(), self.seq);
        match self.kind {
            OpKind::Send => s.push_str(&format!(" to rank {}", self.root_or_peer)),
            OpKind::Recv => s.push_str(&format!(" from rank {}", self.root_or_peer)),
            _ => {}
        }
        s.push_str(&format!(" (count {} {}", self.count, type_name(self.dtype)));
        if self.kind.reduces() {
            s.push_str(&format!(" {}", red_name(self.red)));
        }
        if self.kind.has_root() {
            s.push_str(&format!(", root {}", self.root_or_peer));
        }
        s.push(')');
        s
    }

    /// "(Broadcast, root 0)": what a rank behind is doing, short.
    pub fn brief(&self) -> String {
        match self.kind {
            OpKind::Send | OpKind::Recv => format!(
                "{} {} rank {}",
                self.kind.name(),
                if self.kind == OpKind::Send {
                    "to"
                } else {
                    "from"
                },
                self.root_or_peer
            ),
            k if k.has_root() => format!("{}, root {}", k.name(), self.root_or_peer),
            k => k.name().to_string(),
        }
    }

    /// True when `other` is the same call (operation, count, type, reduction, root).
    pub fn same_call(&self, other: &OpRecord) -> bool {
        self.kind == other.kind
            && self.count == other.count
            && self.dtype == other.dtype
            && (!self.kind.reduces() || self.red == other.red)
            && (!self.kind.has_root() || self.root_or_peer == other.root_or_peer)
    }
}

/// What a launch site knows about an operation when it issues it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Issue {
    pub seq: u64,
    pub kind: OpKind,
    pub count: u64,
    pub dtype: DataType,
    pub red: u8,
    pub root_or_peer: u32,
    pub stream: u64,
}

/// Names one issued operation so its completion can be recorded later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slot(u64);

impl Slot {
    /// The slot issued right after this one.
    pub fn next(self) -> Slot {
        Slot(self.0 + 1)
    }
}

struct Ring {
    records: [Option<(u64, OpRecord)>; RING],
    /// Operations ever recorded (the next slot number).
    next: u64,
}

/// The ring of one communicator.
pub(crate) struct FlightRecorder {
    ring: Mutex<Ring>,
    epoch: Instant,
}

impl Default for FlightRecorder {
    fn default() -> Self {
        FlightRecorder {
            ring: Mutex::new(Ring {
                records: [None; RING],
                next: 0,
            }),
            epoch: Instant::now(),
        }
    }
}

impl FlightRecorder {
    fn lock(&self) -> MutexGuard<'_, Ring> {
        self.ring.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Milliseconds since the recorder started.
    pub fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Remembers an operation as pending.
    pub fn issue(&self, i: Issue) -> Slot {
        let rec = OpRecord {
            seq: i.seq,
            kind: i.kind,
            count: i.count,
            dtype: i.dtype as u8,
            red: i.red,
            root_or_peer: i.root_or_peer,
            stream: i.stream,
            issued_ms: self.now_ms(),
            ended_ms: 0,
            state: OpState::Pending,
        };
        let mut r = self.lock();
        let n = r.next;
        r.records[(n % RING as u64) as usize] = Some((n, rec));
        r.next += 1;
        Slot(n)
    }

    /// Records that the operation in `slot` ended (unless the ring has moved past it).
    pub fn finish(&self, slot: Slot, ok: bool) {
        let now = self.now_ms();
        let mut r = self.lock();
        if let Some((n, rec)) = &mut r.records[(slot.0 % RING as u64) as usize]
            && *n == slot.0
            && rec.state == OpState::Pending
        {
            rec.state = if ok { OpState::Done } else { OpState::Failed };
            rec.ended_ms = now;
        }
    }

    /// The oldest pending operation and how long it has waited.
    pub fn oldest_pending(&self) -> Option<(OpRecord, Duration)> {
        let now = self.now_ms();
        let r = self.lock();
        r.records
            .iter()
            .flatten()
            .filter(|(_, rec)| rec.state == OpState::Pending)
            .min_by_key(|(n, _)| *n)
            .map(|(_, rec)| {
                (
                    *rec,
                    Duration::from_millis(now.saturating_sub(rec.issued_ms)),
                )
            })
    }

    /// Up to `max` most recent records, oldest first.
    pub fn recent(&self, max: usize) -> Vec<OpRecord> {
        let r = self.lock();
        let mut v: Vec<(u64, OpRecord)> = r.records.iter().flatten().copied().collect();
        v.sort_by_key(|(n, _)| *n);
        let skip = v.len().saturating_sub(max);
        v.into_iter().skip(skip).map(|(_, rec)| rec).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issue(seq: u64, kind: OpKind) -> Issue {
        Issue {
            seq,
            kind,
            count: 1048576,
            dtype: DataType::Bfloat16,
            red: 0,
            root_or_peer: 0,
            stream: 7,
        }
    }

    #[test]
    fn ring_keeps_the_newest_and_finishes_only_live_slots() {
        let f = FlightRecorder::default();
        let first = f.issue(issue(0, OpKind::Coll(CollKind::AllReduce)));
        for s in 1..(RING as u64 + 10) {
            let slot = f.issue(issue(s, OpKind::Coll(CollKind::AllReduce)));
            f.finish(slot, true);
        }
        // The first slot was overwritten: finishing it must not touch its successor.
        f.finish(first, false);
        let recent = f.recent(RING);
        assert_eq!(recent.len(), RING);
        assert_eq!(recent[0].seq, 10);
        assert!(recent.iter().all(|r| r.state == OpState::Done));
        assert!(f.oldest_pending().is_none());
        let p = f.issue(issue(500, OpKind::Send));
        assert_eq!(f.oldest_pending().unwrap().0.seq, 500);
        f.finish(p, false);
        assert_eq!(f.recent(1)[0].state, OpState::Failed);
    }

    #[test]
    fn descriptions_name_operation_count_type_and_root() {
        let f = FlightRecorder::default();
        f.issue(issue(4182, OpKind::Coll(CollKind::AllReduce)));
        let mut b = issue(4181, OpKind::Coll(CollKind::Broadcast));
        b.dtype = DataType::Float32;
        b.count = 8;
        f.issue(b);
        let mut s = issue(3, OpKind::Send);
        s.root_or_peer = 2;
        s.dtype = DataType::Uint8;
        s.count = 64;
        f.issue(s);
        let r = f.recent(3);
        assert_eq!(r[0].describe(), "AllReduce #4182 (count 1048576 bf16 sum)");
        assert_eq!(r[1].describe(), "Broadcast #4181 (count 8 f32, root 0)");
        assert_eq!(r[1].brief(), "Broadcast, root 0");
        assert_eq!(r[2].describe(), "Send #3 to rank 2 (count 64 u8)");
        for c in 0..=30u8 {
            if let Some(k) = OpKind::from_code(c) {
                assert_eq!(k.code(), c);
            }
        }
    }
}
