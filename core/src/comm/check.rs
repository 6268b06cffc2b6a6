//! Check mode (`OXCCL_CHECK=1`): before each collective the ranks exchange its signature
//! (sequence number, operation, count, type, reduction, root) over the bootstrap, and a mismatch
//! fails the call on every rank with `ncclInvalidUsage` naming the ranks and values, instead of
//! corrupting data or hanging in the data path.

use super::flight::{OpKind, OpRecord, OpState, red_code};
use super::ops::CollArgs;
use crate::bootstrap::Bootstrap;
use crate::bootstrap::wire::{Dec, Enc, rank_list};
use crate::error::{Error, Result};
use crate::plan::CollKind;

/// Bytes of a signature on the wire.
const SIG_BYTES: usize = 8 + 1 + 8 + 1 + 1 + 4;

/// The signature of collective `seq` with `a`'s arguments: the parts every rank must pass alike.
pub(crate) fn signature(seq: u64, a: &CollArgs) -> OpRecord {
    OpRecord {
        seq,
        kind: OpKind::Coll(a.kind),
        // AlltoAllv's counts are per rank by design.
        count: if a.kind == CollKind::AllToAllv {
            0
        } else {
            a.count
        },
        dtype: a.dtype as u8,
        red: red_code(a.op),
        root_or_peer: a.root,
        stream: 0,
        issued_ms: 0,
        ended_ms: 0,
        state: OpState::Pending,
    }
}

/// Wire form of a signature.
pub(crate) fn encode(s: &OpRecord) -> Vec<u8> {
    let mut e = Enc::default();
    e.u64(s.seq)
        .u8(s.kind.code())
        .u64(s.count)
        .u8(s.dtype)
        .u8(s.red)
        .u32(s.root_or_peer);
    e.0
}

/// Parses a signature; `Err` says why it is malformed.
pub(crate) fn decode(b: &[u8]) -> Result<OpRecord, String> {
    if b.len() != SIG_BYTES {
        return Err(format!("signature of {} bytes", b.len()));
    }
    let mut d = Dec(b);
    let seq = d.u64()?;
    let kind = OpKind::from_code(d.u8()?).ok_or("unknown operation code")?;
    let rec = OpRecord {
        seq,
        kind,
        count: d.u64()?,
        dtype: d.u8()?,
        red: d.u8()?,
        root_or_peer: d.u32()?,
        stream: 0,
        issued_ms: 0,
        ended_ms: 0,
        state: OpState::Pending,
    };
    d.finish()?;
    Ok(rec)
}

fn alike(a: &OpRecord, b: &OpRecord) -> bool {
    a.seq == b.seq && a.same_call(b)
}

/// The verdict on every rank's signature: `Ok` when all agree, else the sentence naming the
/// groups of ranks and what each passed (identical on every rank, which sees the same list).
pub(crate) fn verdict(all: &[Vec<u8>]) -> Result<(), String> {
    let mut groups: Vec<(Option<OpRecord>, Vec<u32>)> = Vec::new();
    for (r, bytes) in all.iter().enumerate() {
        let sig = decode(bytes).ok();
        let slot = groups.iter_mut().find(|(s, _)| match (s, &sig) {
            (Some(a), Some(b)) => alike(a, b),
            (None, None) => true,
            _ => false,
        });
        match slot {
            Some((_, v)) => v.push(r as u32),
            None => groups.push((sig, vec![r as u32])),
        }
    }
    if groups.len() <= 1 {
        return Ok(());
    }
    // The largest group first: it is most likely what the program meant.
    groups.sort_by_key(|(_, v)| std::cmp::Reverse(v.len()));
    let parts: Vec<String> = groups
        .iter()
        .map(|(s, ranks)| match s {
            Some(s) => format!("{} called {}", rank_list(ranks), s.describe()),
            None => format!("{} sent a malformed signature", rank_list(ranks)),
        })
        .collect();
    Err(format!(
        "check mode (OXCCL_CHECK=1): the ranks called different collectives: {}",
        parts.join("; ")
    ))
}

/// Exchanges collective `seq`'s signature with every rank and fails on a mismatch.
pub(crate) fn run(bootstrap: &Bootstrap, seq: u64, a: &CollArgs) -> Result<()> {
    let all = bootstrap.exchange_signatures(&encode(&signature(seq, a)))?;
    verdict(&all).map_err(Error::InvalidUsage)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datatype::{DataType, RedOp};

    fn args(kind: CollKind, count: u64, dtype: DataType, root: u32) -> CollArgs {
        CollArgs {
            kind,
            send: 1,
            recv: 2,
            count,
            dtype,
            op: RedOp::Sum,
            root,
            layout: None,
        }
    }

    #[test]
    fn matching_signatures_pass_and_roots_only_count_where_they_exist() {
        let a = encode(&signature(
            4,
            &args(CollKind::AllReduce, 10, DataType::Float32, 0),
        ));
        let b = encode(&signature(
            4,
            &args(CollKind::AllReduce, 10, DataType::Float32, 3),
        ));
        assert!(verdict(&[a.clone(), b, a]).is_ok());
    }

    #[test]
    fn mismatches_name_the_ranks_and_values() {
        let ok = encode(&signature(
            7,
            &args(CollKind::AllReduce, 1024, DataType::Float32, 0),
        ));
        let count = encode(&signature(
            7,
            &args(CollKind::AllReduce, 512, DataType::Float32, 0),
        ));
        let e = verdict(&[ok.clone(), count, ok.clone(), ok.clone()]).unwrap_err();
        assert_eq!(
            e,
            "check mode (OXCCL_CHECK=1): the ranks called different collectives: ranks 0, 2, 3 \
             called AllReduce #7 (count 1024 f32 sum); rank 1 called AllReduce #7 (count 512 f32 sum)"
        );
        let root = encode(&signature(
            7,
            &args(CollKind::Broadcast, 8, DataType::Int8, 1),
        ));
        let root0 = encode(&signature(
            7,
            &args(CollKind::Broadcast, 8, DataType::Int8, 0),
        ));
        let e = verdict(&[root0.clone(), root0, root]).unwrap_err();
        assert!(
            e.contains("rank 2 called Broadcast #7 (count 8 i8, root 1)"),
            "{e}"
        );
        let e = verdict(&[ok.clone(), vec![1, 2, 3]]).unwrap_err();
        assert!(e.contains("rank 1 sent a malformed signature"), "{e}");
    }

    #[test]
    fn fuzz_signature_decoder_and_verdict() {
        let mut rng = crate::testing::Rng::new(12);
        let good = encode(&signature(
            9,
            &args(CollKind::Gather, 5, DataType::Float16, 2),
        ));
        for _ in 0..20_000 {
            let len = rng.below(2 * SIG_BYTES as u64) as usize;
            let noise = rng.bytes(len);
            let _ = decode(&noise);
            let mut m = good.clone();
            let i = rng.below(m.len() as u64) as usize;
            m[i] ^= 1 + rng.below(255) as u8;
            // Any change to a checked byte is a mismatch; the pad-free layout checks them all
            // except the reduction of a non-reducing operation.
            let r = verdict(&[good.clone(), m]);
            assert_eq!(r.is_err(), i != 18, "byte {i}");
        }
    }
}
