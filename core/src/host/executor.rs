//! Runs a [`WorkDesc`] on CPU threads: one thread per channel, one generic primitive per step.

use super::mesh::SocketMesh;
use crate::abort::AbortFlag;
use crate::backend::DevicePtr;
use crate::datatype::{Reduction, Scalar, ScalarSource};
use crate::error::{Error, Result};
use crate::plan::{BufId, ChannelWork, Path, Region, Step, TABLE_BYTES, WorkDesc};
use crate::profiler_plugin::ChannelTimes;
use crate::reduce;

/// Executes `work` with `buffers` (indexed by [`BufId`]) over `mesh`, stamping each channel's
/// start and stop in `times` when given (a profiler's KernelCh events).
///
/// # Safety
/// Every buffer is valid host memory for every region the plan reads or writes, and no other
/// thread writes those regions while this runs.
pub unsafe fn execute(
    work: &WorkDesc,
    buffers: &[DevicePtr],
    mesh: &SocketMesh,
    abort: &AbortFlag,
    times: Option<&ChannelTimes>,
) -> Result<()> {
    let esize = work.dtype.size();
    let mut scratch = vec![0u8; work.scratch_elems as usize * esize];
    let mut table = buffers.to_vec();
    if table.len() <= BufId::SCRATCH.0 as usize {
        table.resize(BufId::SCRATCH.0 as usize + 1, 0);
    }
    table[BufId::SCRATCH.0 as usize] = scratch.as_mut_ptr() as DevicePtr;
    let ctx = StepContext {
        work,
        buffers: &table,
        mesh,
        abort,
        pre_scale: pre_scale_of(&work.reduction, esize),
    };
    // Empty channels only keep channel indices aligned between ranks (device FIFOs): they
    // start and stop at once.
    let (busy, empty): (Vec<_>, Vec<_>) = work
        .channels
        .iter()
        .enumerate()
        .partition(|(_, c)| !c.steps.is_empty());
    if let Some(t) = times {
        for (i, _) in empty {
            t.start(i);
            t.stop(i);
        }
    }
    let run = |(i, ch): (usize, &ChannelWork)| {
        if let Some(t) = times {
            t.start(i);
        }
        let r = ctx.run_channel(ch);
        if let Some(t) = times {
            t.stop(i);
        }
        r
    };
    let result = match busy.as_slice() {
        [] => Ok(()),
        [one] => run(*one),
        many => std::thread::scope(|s| {
            let handles: Vec<_> = many
                .iter()
                .map(|&ch| {
                    let run = &run;
                    s.spawn(move || run(ch))
                })
                .collect();
            let mut first = Ok(());
            for h in handles {
                let r = h
                    .join()
                    .unwrap_or_else(|_| Err(Error::Internal("channel thread panicked".into())));
                if first.is_ok() {
                    first = r;
                }
            }
            first
        }),
    };
    drop(scratch);
    result
}

/// The PreMulSum scalar, read once per operation (device-resident scalars at execution time).
fn pre_scale_of(red: &Reduction, esize: usize) -> Option<Scalar> {
    match red.pre_scale? {
        ScalarSource::Immediate(s) => Some(s),
        ScalarSource::Device(ptr) => {
            // SAFETY: `ncclRedOpCreatePreMulSum` with `ncclScalarDevice` requires the scalar to
            // stay valid while operations using the operator run; on the host backend "device"
            // memory is host memory.
            let bytes = unsafe { std::slice::from_raw_parts(ptr as *const u8, esize) };
            Some(Scalar::from_bytes(bytes))
        }
    }
}

struct StepContext<'a> {
    work: &'a WorkDesc,
    buffers: &'a [DevicePtr],
    mesh: &'a SocketMesh,
    abort: &'a AbortFlag,
    pre_scale: Option<Scalar>,
}

impl StepContext<'_> {
    /// The error for a message of another length than this rank's plan expects: the ranks
    /// passed different counts (or called different operations).
    fn count_mismatch(&self, peer: u32, got: usize, want: usize) -> Error {
        let esize = self.work.dtype.size().max(1);
        let kind = self.work.kind;
        Error::InvalidUsage(format!(
            "{kind:?}: rank {peer} sent {} {:?} elements for a step where rank {} expected {}; \
             every rank must call {kind:?} with the same count and type",
            got / esize,
            self.work.dtype,
            self.mesh.rank(),
            want / esize
        ))
    }

    fn run_channel(&self, ch: &ChannelWork) -> Result<()> {
        let mut lane = Lane::new(self.mesh.nranks() as usize);
        for step in &ch.steps {
            self.abort.check()?;
            if !lane.runs(step, self.mesh.rank() as usize, self.work.exposed)? {
                continue;
            }
            self.run_step(step, &mut lane)?;
        }
        Ok(())
    }

    /// This rank's buffer table: input and output addresses and whether peers may use them.
    fn own_table(&self) -> [u8; TABLE_BYTES as usize] {
        let mut t = [0u8; TABLE_BYTES as usize];
        t[..8].copy_from_slice(&self.buffers[BufId::INPUT.0 as usize].to_le_bytes());
        t[8..16].copy_from_slice(&self.buffers[BufId::OUTPUT.0 as usize].to_le_bytes());
        t[16..].copy_from_slice(&u64::from(self.work.exposed).to_le_bytes());
        t
    }

    /// Address of region `r` of rank `peer`'s buffers (this rank's own, or learned from its table).
    fn peer_addr(&self, lane: &Lane, peer: u32, r: Region) -> Result<*mut u8> {
        if peer == self.mesh.rank() {
            return self.addr(r);
        }
        let table = lane.tables[peer as usize]
            .ok_or_else(|| Error::Internal(format!("no buffer table from rank {peer}")))?;
        let base = match r.buf {
            BufId::INPUT => table[0],
            BufId::OUTPUT => table[1],
            other => {
                return Err(Error::Internal(format!(
                    "zero-copy step names buffer {} of rank {peer}",
                    other.0
                )));
            }
        };
        Ok((base + r.offset * self.work.dtype.size() as u64) as *mut u8)
    }

    fn addr(&self, r: Region) -> Result<*mut u8> {
        let base = *self
            .buffers
            .get(r.buf.0 as usize)
            .ok_or_else(|| Error::Internal(format!("plan names missing buffer {}", r.buf.0)))?;
        if base == 0 {
            return Err(Error::Internal(format!(
                "plan touches buffer {} which is NULL",
                r.buf.0
            )));
        }
        Ok((base + r.offset * self.work.dtype.size() as u64) as *mut u8)
    }

    fn run_step(&self, s: &Step, lane: &mut Lane) -> Result<()> {
        if let (Some(want), Some(peer)) = (s.pair_in_place, s.send)
            && self.pair_in_place(lane, peer)? != want
        {
            return Ok(());
        }
        let dtype = self.work.dtype;
        let red = &self.work.reduction;
        let bytes = s.count as usize * dtype.size();
        let scale = if s.pre_op { self.pre_scale } else { None };
        let post = if s.post_op { red.post_div } else { None };
        // Pure copy: move bytes directly, no temporary.
        if s.recv.is_none()
            && s.send.is_none()
            && scale.is_none()
            && post.is_none()
            && let (Some(src), Some(dst)) = (s.src, s.dst)
        {
            let (from, to) = (self.addr(src)?, self.addr(dst)?);
            if from != to {
                // SAFETY: both regions hold `bytes` bytes (execute's contract); `copy`
                // tolerates overlap.
                unsafe { std::ptr::copy(from, to, bytes) };
            }
            return Ok(());
        }
        let mut value = vec![0u8; bytes];
        let mut have = false;
        if let (Some(peer), Some(r)) = (s.recv, s.peer_src) {
            let from = self.peer_addr(lane, peer, r)?;
            // SAFETY: the peer published this buffer for the operation and waits for this
            // rank's token before it returns, so the region is live and nobody writes it now.
            value.copy_from_slice(unsafe { std::slice::from_raw_parts(from, bytes) });
            if s.pre_recv
                && let Some(k) = self.pre_scale
            {
                reduce::pre_scale(dtype, &mut value, &k);
            }
            have = true;
        } else if let Some(peer) = s.recv {
            if let Some(got) = self.mesh.recv_sized(peer, s.tag, &mut value, self.abort)? {
                return Err(self.count_mismatch(peer, got, bytes));
            }
            if s.learn {
                lane.learn(peer, &value)?;
            }
            have = true;
        }
        if s.swap {
            // The peer's operand is in `value`; copy ours before either is written, as `src`
            // and `dst` may be one place.
            let src = s
                .src
                .ok_or_else(|| Error::Internal("a swap step has no source".into()))?;
            let from = self.addr(src)?;
            // SAFETY: the source region holds `bytes` bytes (execute's contract).
            let ours = unsafe { std::slice::from_raw_parts(from, bytes) }.to_vec();
            return self.store(lane, s, &value, &ours);
        }
        if s.publish {
            let table = self.own_table();
            value.copy_from_slice(&table[..bytes]);
            have = true;
        } else if let Some(src) = s.src {
            let from = self.addr(src)?;
            // SAFETY: the source region holds `bytes` bytes (execute's contract).
            let local = unsafe { std::slice::from_raw_parts(from, bytes) };
            if have {
                match scale {
                    Some(k) => {
                        let mut own = local.to_vec();
                        reduce::pre_scale(dtype, &mut own, &k);
                        reduce::accumulate(dtype, red.op, &mut value, &own);
                    }
                    None => reduce::accumulate(dtype, red.op, &mut value, local),
                }
            } else {
                value.copy_from_slice(local);
                if let Some(k) = scale {
                    reduce::pre_scale(dtype, &mut value, &k);
                }
            }
            have = true;
        }
        if !have {
            return Err(Error::Internal(
                "plan step has neither a receive nor a source".into(),
            ));
        }
        if let Some(n) = post {
            reduce::post_divide(dtype, &mut value, n);
        }
        self.store(lane, s, &value, &value)
    }

    /// Stores a step's result: `local` at `dst`, `to_peer` at the peer's `peer_dst` or sent to
    /// it (the same bytes but for a swap). Both are `bytes` long and their own allocations.
    fn store(&self, lane: &Lane, s: &Step, local: &[u8], to_peer: &[u8]) -> Result<()> {
        let bytes = local.len();
        if let Some(dst) = s.dst {
            let to = self.addr(dst)?;
            // SAFETY: the destination region holds `bytes` bytes (execute's contract), and
            // `local` is a separate allocation.
            unsafe { std::ptr::copy_nonoverlapping(local.as_ptr(), to, bytes) };
        }
        if let (Some(peer), Some(r)) = (s.send, s.peer_dst) {
            let to = self.peer_addr(lane, peer, r)?;
            // SAFETY: as for `peer_src`; `to_peer` is a separate allocation.
            unsafe { std::ptr::copy_nonoverlapping(to_peer.as_ptr(), to, bytes) };
        } else if let Some(peer) = s.send {
            self.mesh.send(peer, s.tag, to_peer)?;
        }
        Ok(())
    }

    /// Whether this rank's or `peer`'s AlltoAll runs in place (`Step::pair_in_place`).
    fn pair_in_place(&self, lane: &Lane, peer: u32) -> Result<bool> {
        let own = self.buffers.first() == self.buffers.get(1);
        let theirs = lane.tables[peer as usize]
            .ok_or_else(|| Error::Internal(format!("no buffer table from rank {peer}")))?;
        Ok(own || theirs[0] == theirs[1])
    }
}

/// One channel's view of a zero-copy plan: the peers' buffer tables and the branch taken.
struct Lane {
    tables: Vec<Option<[u64; 3]>>,
    zero_copy: Option<bool>,
}

impl Lane {
    fn new(nranks: usize) -> Lane {
        Lane {
            tables: vec![None; nranks],
            zero_copy: None,
        }
    }

    fn learn(&mut self, peer: u32, bytes: &[u8]) -> Result<()> {
        if bytes.len() != TABLE_BYTES as usize {
            return Err(Error::Internal(format!(
                "buffer table of {} bytes from rank {peer}",
                bytes.len()
            )));
        }
        let word = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
        self.tables[peer as usize] = Some([word(0), word(1), word(2)]);
        self.zero_copy = None;
        Ok(())
    }

    /// Whether `step` runs on this lane; the branch is decided once every peer's table is in.
    fn runs(&mut self, step: &Step, rank: usize, exposed: bool) -> Result<bool> {
        if step.path == Path::Always {
            return Ok(true);
        }
        let zc = match self.zero_copy {
            Some(z) => z,
            None => {
                let mut all = exposed;
                for (p, t) in self.tables.iter().enumerate() {
                    if p == rank {
                        continue;
                    }
                    let t = t.ok_or_else(|| {
                        Error::Internal(format!(
                            "zero-copy branch chosen before rank {p}'s buffer table arrived"
                        ))
                    })?;
                    all &= t[2] != 0;
                }
                self.zero_copy = Some(all);
                all
            }
        };
        Ok(zc == (step.path == Path::ZeroCopy))
    }
}
