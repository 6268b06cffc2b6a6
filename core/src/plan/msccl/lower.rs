//! An [`MscclAlgo`] to our plan format for one rank: one channel per thread block, one generic
//! step per MSCCL step (two for `re`), loopback messages for cross-thread-block dependencies.

#![forbid(unsafe_code)]

use super::parse::{Buf, ChunkRef, MscclAlgo, StepType};
use crate::datatype::{DataType, Reduction};
use crate::plan::tags::CHANNEL_BITS;
use crate::plan::{Algorithm, ChannelWork, CollKind, Region, Step, WorkDesc, coll_tag};
use crate::{Error, Result};
use std::collections::HashMap;

/// Element counts of one run of an algorithm on every rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    /// Elements of the send buffer.
    pub input: u64,
    /// Elements of the receive buffer.
    pub output: u64,
    /// Elements per chunk.
    pub chunk: u64,
}

impl MscclAlgo {
    /// The collective the file declares, for the work description.
    pub fn kind(&self) -> CollKind {
        match self.coll.as_str() {
            "allgather" => CollKind::AllGather,
            "reduce_scatter" | "reducescatter" => CollKind::ReduceScatter,
            "alltoall" => CollKind::AllToAll,
            "broadcast" => CollKind::Broadcast,
            "reduce" => CollKind::Reduce,
            _ => CollKind::AllReduce,
        }
    }

    /// Buffer sizes and chunk size for `mscclRunAlgo`'s `count` on `nranks` ranks.
    ///
    /// `count` means what NCCL's API means for the declared collective: AllReduce, Broadcast,
    /// Reduce and custom: elements of each buffer; AllGather: send count (receive buffer holds
    /// `count * nranks`); ReduceScatter: receive count (send buffer holds `count * nranks`);
    /// AllToAll: elements per peer (both buffers hold `count * nranks`). The larger buffer is
    /// divided into `nchunksperloop` chunks, and is run as one loop.
    pub fn sizes(&self, count: u64, nranks: usize) -> Result<Sizes> {
        if nranks != self.ngpus() {
            return Err(Error::arg(format!(
                "MSCCL algorithm {} is for {} GPUs but the communicator has {nranks} ranks",
                self.source,
                self.ngpus()
            )));
        }
        let n = nranks as u64;
        let times = |c: u64| {
            c.checked_mul(n)
                .ok_or_else(|| Error::arg(format!("count {count} times {n} ranks overflows")))
        };
        let (input, output) = match self.kind() {
            CollKind::AllGather => (count, times(count)?),
            CollKind::ReduceScatter => (times(count)?, count),
            CollKind::AllToAll => (times(count)?, times(count)?),
            _ => (count, count),
        };
        let total = input.max(output);
        if total % self.nchunksperloop != 0 {
            return Err(Error::arg(format!(
                "MSCCL algorithm {}: count {count} ({total} elements for {}) does not divide into its \
                 nchunksperloop={} chunks",
                self.source, self.coll, self.nchunksperloop
            )));
        }
        let chunk = total / self.nchunksperloop;
        for (r, g) in self.gpus.iter().enumerate() {
            for (what, chunks, elems) in [("i", g.i_chunks, input), ("o", g.o_chunks, output)] {
                if chunks.saturating_mul(chunk) > elems {
                    return Err(Error::arg(format!(
                        "MSCCL algorithm {}: gpu {r} uses {chunks} chunks of {chunk} elements of buffer \
                         {what}, which holds {elems} for count {count}",
                        self.source
                    )));
                }
            }
        }
        Ok(Sizes {
            input,
            output,
            chunk,
        })
    }

    /// The work description of `rank` for chunks of `chunk` elements, collective number `seq`.
    ///
    /// The reduction applies where steps combine; each step reading the input buffer is marked
    /// as the rank's own contribution, so PreMulSum scales it (see docs/msccl.md).
    pub fn lower(
        &self,
        rank: u32,
        chunk: u64,
        dtype: DataType,
        reduction: Reduction,
        seq: u64,
    ) -> Result<WorkDesc> {
        let reduces = self.reduces();
        let steps = self.lower_steps(rank, chunk, seq, reduces)?;
        Ok(WorkDesc {
            kind: self.kind(),
            algo: Algorithm::Direct,
            proto: self.proto,
            dtype,
            reduction: if reduces {
                reduction
            } else {
                Reduction::none()
            },
            scratch_elems: self.scratch_elems(rank, chunk),
            exposed: false,
            channels: steps.into_iter().map(ChannelWork::new).collect(),
        })
    }

    /// Scratch of `rank`: the file's chunks, one signal source element, one signal landing
    /// element per thread block.
    pub fn scratch_elems(&self, rank: u32, chunk: u64) -> u64 {
        let g = &self.gpus[rank as usize];
        g.s_chunks * chunk + 1 + g.tbs.len() as u64
    }

    /// The steps of each channel of `rank` (`own`: mark input reads as own contributions).
    pub(super) fn lower_steps(
        &self,
        rank: u32,
        chunk: u64,
        seq: u64,
        own: bool,
    ) -> Result<Vec<Vec<Step>>> {
        let g = &self.gpus[rank as usize];
        let data_scratch = g.s_chunks * chunk;
        let signal_src = Region::scratch(data_scratch);
        let landing = |tb: usize| Region::scratch(data_scratch + 1 + tb as u64);

        // Loopback streams of this rank, one tag per (from tb, to tb): dependencies and `re`.
        let mut self_tags: HashMap<(usize, usize), u64> = HashMap::new();
        let mut self_tag = |from: usize, to: usize| -> Result<u64> {
            let next = self_tags.len() as u64;
            let idx = *self_tags.entry((from, to)).or_insert(next);
            if idx >= 1 << CHANNEL_BITS {
                return Err(Error::arg(format!(
                    "MSCCL algorithm {}: gpu {rank} needs more than {} distinct cross-thread-block \
                     dependency streams",
                    self.source,
                    1u32 << CHANNEL_BITS
                )));
            }
            // Data messages never go from a rank to itself (the parser refuses self peers), so
            // loopback tags only need to differ from each other.
            Ok(coll_tag(seq, idx as u32))
        };

        // Keep each dependency only if an earlier one on the same thread block does not imply
        // it; then the signals of every (from, to) pair are sent and awaited in the same order.
        let ntb = g.tbs.len();
        let mut waits: Vec<Vec<Vec<usize>>> = g
            .tbs
            .iter()
            .map(|t| vec![Vec::new(); t.steps.len()])
            .collect();
        let mut signals: Vec<Vec<Vec<usize>>> = waits.clone();
        let mut seen: HashMap<(usize, usize), usize> = HashMap::new();
        for (b, t) in g.tbs.iter().enumerate() {
            for (si, st) in t.steps.iter().enumerate() {
                for &(a, sa) in &st.deps {
                    if seen.get(&(a, b)).is_some_and(|&m| m >= sa) {
                        continue;
                    }
                    seen.insert((a, b), sa);
                    waits[b][si].push(a);
                    signals[a][sa].push(b);
                }
            }
        }

        let region = |c: ChunkRef| {
            let off = c.off * chunk;
            match c.buf {
                Buf::Input => Region::input(off),
                Buf::Output => Region::output(off),
                Buf::Scratch => Region::scratch(off),
            }
        };
        let mut out = Vec::with_capacity(ntb);
        for (b, t) in g.tbs.iter().enumerate() {
            let tag = coll_tag(seq, t.chan);
            let mut steps = Vec::new();
            for (si, st) in t.steps.iter().enumerate() {
                for &a in &waits[b][si] {
                    steps.push(Step::new(1, self_tag(a, b)?).recv(rank).dst(landing(b)));
                }
                let n = st.cnt * chunk;
                let local = |s: Step| match st.src {
                    Some(c) if own && c.buf == Buf::Input => s.own(region(c)),
                    Some(c) => s.src(region(c)),
                    None => s,
                };
                let mut base = Step::new(n, tag);
                if let (true, Some(p)) = (st.ty.parts().0, t.recv) {
                    base = base.recv(p);
                }
                match st.ty {
                    StepType::Nop => {}
                    StepType::Reduce => {
                        // dst = src ⊕ dst: send src to ourselves, then receive it ⊕ dst into dst.
                        let dst = region(st.dst.expect("re has a dst"));
                        let t2 = self_tag(b, b)?;
                        steps.push(local(Step::new(n, t2)).send(rank));
                        steps.push(Step::new(n, t2).recv(rank).src(dst).dst(dst));
                    }
                    ty => {
                        let (_, sends, _, writes) = ty.parts();
                        let mut s = local(base);
                        if writes {
                            s = s.dst(region(st.dst.expect("step type writes")));
                        }
                        if sends {
                            s = s.send(t.send.expect("checked at parse"));
                        }
                        if n > 0 {
                            steps.push(s);
                        }
                    }
                }
                for &to in &signals[b][si] {
                    steps.push(Step::new(1, self_tag(b, to)?).src(signal_src).send(rank));
                }
            }
            out.push(steps);
        }
        Ok(out)
    }
}
