//! Runs a [`WorkDesc`] on CPU threads: one thread per channel, one generic primitive per step.

use crate::abort::AbortFlag;
use crate::backend::DevicePtr;
use crate::datatype::{Reduction, Scalar, ScalarSource};
use crate::error::{Error, Result};
use crate::plan::{BufId, ChannelWork, Region, Step, WorkDesc};
use crate::reduce;
use crate::transport::socket::SocketMesh;

/// Executes `work` with `buffers` (indexed by [`BufId`]) over `mesh`.
///
/// # Safety
/// Every buffer is valid host memory for every region the plan reads or writes, and no other
/// thread writes those regions while this runs.
pub unsafe fn execute(
    work: &WorkDesc,
    buffers: &[DevicePtr],
    mesh: &SocketMesh,
    abort: &AbortFlag,
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
    // Empty channels only keep channel indices aligned between ranks (device FIFOs).
    let busy: Vec<&ChannelWork> = work
        .channels
        .iter()
        .filter(|c| !c.steps.is_empty())
        .collect();
    let result = match busy.as_slice() {
        [] => Ok(()),
        [one] => ctx.run_channel(one),
        many => std::thread::scope(|s| {
            let handles: Vec<_> = many
                .iter()
                .map(|&ch| {
                    let ctx = &ctx;
                    s.spawn(move || ctx.run_channel(ch))
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
    fn run_channel(&self, ch: &ChannelWork) -> Result<()> {
        for step in &ch.steps {
            self.abort.check()?;
            self.run_step(step)?;
        }
        Ok(())
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

    fn run_step(&self, s: &Step) -> Result<()> {
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
        if let Some(peer) = s.recv {
            self.mesh.recv(peer, s.tag, &mut value, self.abort)?;
            have = true;
        }
        if let Some(src) = s.src {
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
        if let Some(dst) = s.dst {
            let to = self.addr(dst)?;
            // SAFETY: the destination region holds `bytes` bytes (execute's contract), and
            // `value` is a separate allocation.
            unsafe { std::ptr::copy_nonoverlapping(value.as_ptr(), to, bytes) };
        }
        if let Some(peer) = s.send {
            self.mesh.send(peer, s.tag, &value)?;
        }
        Ok(())
    }
}
