//! This rank's symmetric windows as the GIN engine (`oxccl_net::gin`) sees them: a put's source
//! is read from, and a received payload written to, the window a handle names. Copies run on a
//! non-blocking stream of the engine's own and go through a pinned staging buffer, each waited
//! for: a kernel waiting for a signal on any stream (the legacy default one included) does not
//! hold them up, and neither does an application copy into pageable memory waiting for that
//! kernel (the driver stages every pageable copy of a context through one buffer, so a pageable
//! copy of the engine's would queue behind it). A handle is the one the window's descriptor
//! carries in `ginWins[]`; symmetric windows are registered collectively in one order, so a
//! handle names the same window on every rank.
//!
//! CUDA does not promise the engine's stream a hardware queue of its own: with more streams
//! than `CUDA_DEVICE_MAX_CONNECTIONS` (default 8) queues, streams share them, and a copy queued
//! behind a kernel that waits for that very copy never runs. So each copy is waited for with a
//! bound: after 5 s a warning names the cause and the remedy; after 60 s, or when the
//! communicator aborts, the copy fails and the engine aborts the communicator (reported by
//! `ncclCommGetAsyncError`) rather than hanging silently.
//!
//! When the context's signals are device words written on this same stream
//! ([`GinWindows::signals_on_stream`]), a payload write or a copy within the device is not
//! waited for by itself: the signal that follows is queued after it, and its own wait (the
//! signal starts from what the device holds) covers both.

use crate::api::{DeviceApi, Handle};
use oxccl_core::abort::AbortFlag;
use oxccl_core::error::{Error, Result};
use oxccl_core::lock::lock;
use oxccl_net::gin::{GinMemory, WindowRanges};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes of the pinned staging buffer: a larger copy goes through it in pieces.
const STAGING_BYTES: usize = 1 << 20;
/// A copy waiting this long is reported.
const STALL_WARNING: Duration = Duration::from_secs(5);
/// A copy waiting this long fails.
const STALL_LIMIT: Duration = Duration::from_secs(60);
/// A wait polls without pause this long, then every [`POLL`].
const SPIN: Duration = Duration::from_millis(1);
const POLL: Duration = Duration::from_micros(50);

/// The windows of one communicator on one device, by GIN handle.
pub struct GinWindows<A: DeviceApi> {
    api: A,
    device: i32,
    stream: Handle,
    ranges: Arc<WindowRanges>,
    /// Recorded after each copy, to wait for it with a bound.
    done: Handle,
    abort: AbortFlag,
    /// A copy was given up on and may still run: its stream and staging buffer are never freed.
    stalled: AtomicBool,
    /// Pinned (registered with the device) while `self` lives.
    staging: Mutex<Staging>,
    /// Signals follow writes on the stream: a write need not be waited for by itself.
    defer: bool,
}

/// The staging buffer, and whether a copy queued on the stream has not been waited for.
struct Staging {
    buf: Box<[u8]>,
    queued: bool,
}

impl<A: DeviceApi> GinWindows<A> {
    /// The windows `ranges` names (kept up to date by their owner), on `device`, of a
    /// communicator that `abort` aborts.
    pub fn new(
        api: A,
        device: i32,
        ranges: Arc<WindowRanges>,
        abort: AbortFlag,
    ) -> Result<GinWindows<A>> {
        let _bound = api.bind(device)?;
        let _relaxed = api.relaxed_capture()?;
        let mut staging = vec![0u8; STAGING_BYTES].into_boxed_slice();
        // SAFETY: the box stays allocated (and unmoved) until `drop` unregisters it.
        unsafe { api.host_register(staging.as_mut_ptr(), STAGING_BYTES) }?;
        let made = api
            .stream_create()
            .and_then(|stream| match api.event_create() {
                Ok(done) => Ok((stream, done)),
                Err(e) => {
                    // SAFETY: created above, unused.
                    unsafe { api.stream_destroy(stream) };
                    Err(e)
                }
            });
        let (stream, done) = match made {
            Ok(m) => m,
            Err(e) => {
                // SAFETY: registered above, not used yet.
                unsafe { api.host_unregister(staging.as_mut_ptr()) };
                return Err(e);
            }
        };
        Ok(GinWindows {
            api,
            device,
            stream,
            ranges,
            done,
            abort,
            stalled: AtomicBool::new(false),
            staging: Mutex::new(Staging {
                buf: staging,
                queued: false,
            }),
            defer: false,
        })
    }

    /// The context's signals are device words written on this stream (`add_word64`), so a
    /// write need not wait for itself: the next wait covers it.
    pub fn signals_on_stream(mut self) -> Self {
        self.defer = true;
        self
    }

    /// Waits for a copy left queued, before the staging buffer is written again.
    fn settle(&self, staging: &mut Staging) -> Result<()> {
        if staging.queued {
            self.wait()?;
            staging.queued = false;
        }
        Ok(())
    }

    /// Waits for the copies queued on the stream, within [`STALL_LIMIT`] and while the
    /// communicator lives.
    fn wait(&self) -> Result<()> {
        self.api.event_record(self.done, self.stream)?;
        let start = Instant::now();
        let mut warned = false;
        loop {
            match self.api.event_query(self.done)? {
                Some(true) => return Ok(()),
                Some(false) => {}
                // The runtime cannot tell without blocking.
                None => return self.api.stream_sync(self.stream),
            }
            let waited = start.elapsed();
            if self.abort.is_aborted() {
                self.stalled.store(true, Ordering::Relaxed);
                return Err(Error::Internal(
                    "a GIN window copy was cut short: the communicator aborted".into(),
                ));
            }
            if !warned && waited >= STALL_WARNING {
                warned = true;
                tracing::warn!(target: "oxccl::net", "{}", stall_message(self.device, waited));
            }
            if waited >= STALL_LIMIT {
                self.stalled.store(true, Ordering::Relaxed);
                return Err(Error::Internal(stall_message(self.device, waited)));
            }
            if waited < SPIN {
                std::thread::yield_now();
            } else {
                // A copy this slow is queued behind other work: poll without taking a core.
                std::thread::sleep(POLL);
            }
        }
    }
}

/// Why a window copy on `device` has waited `waited`, and what to do.
fn stall_message(device: i32, waited: Duration) -> String {
    format!(
        "a GIN window copy on GPU {device} has waited {} s: a kernel that waits for this put probably shares its hardware queue (a process with more streams than CUDA_DEVICE_MAX_CONNECTIONS, 8 by default); set CUDA_DEVICE_MAX_CONNECTIONS=32 before the process first uses CUDA",
        waited.as_secs()
    )
}

impl<A: DeviceApi> GinMemory for GinWindows<A> {
    fn read(&self, handle: u64, offset: u64, dst: &mut [u8]) -> Result<()> {
        self.read_many(&[(handle, offset, 0, dst.len())], dst)
    }

    fn write(&self, handle: u64, offset: u64, src: &[u8]) -> Result<()> {
        self.write_many(&[(handle, offset, src)])
    }

    /// Every read's copy queued, one wait for them all, in rounds of the staging buffer (a read
    /// larger than it goes in pieces).
    fn read_many(&self, reads: &[(u64, u64, usize, usize)], out: &mut [u8]) -> Result<()> {
        let from = reads
            .iter()
            .map(|&(h, o, _, len)| self.ranges.at(h, o, len, "reads"))
            .collect::<Result<Vec<u64>>>()?;
        // (device address, offset in `out`, bytes), each at most the staging buffer.
        let pieces: Vec<(u64, usize, usize)> = (reads.iter().zip(&from))
            .flat_map(|(&(_, _, at, len), &src)| {
                (0..len)
                    .step_by(STAGING_BYTES)
                    .map(move |k| (src + k as u64, at + k, (len - k).min(STAGING_BYTES)))
            })
            .collect();
        let lens: Vec<usize> = pieces.iter().map(|p| p.2).collect();
        let _bound = self.api.bind(self.device)?;
        // The engine's thread copies beside whatever the application captures.
        let _relaxed = self.api.relaxed_capture()?;
        let mut staging = lock(&self.staging);
        for round in staging_rounds(&lens) {
            let mut at = 0;
            for &(src, _, len) in &pieces[round.clone()] {
                // SAFETY: `src` and the `len` bytes after it lie in a registered window; the
                // staging buffer holds the round and is ours until the copies, waited for
                // below, are done (after any write still reading it, queued before them).
                unsafe {
                    (self.api).copy_d2h_async(
                        staging.buf.as_mut_ptr().add(at),
                        src,
                        len,
                        self.stream,
                    )
                }?;
                at += len;
            }
            self.wait()?;
            staging.queued = false;
            let mut at = 0;
            for &(_, to, len) in &pieces[round] {
                out[to..to + len].copy_from_slice(&staging.buf[at..at + len]);
                at += len;
            }
        }
        Ok(())
    }

    /// Every write's copy queued from the staging buffer without a wait between them, in
    /// rounds of the staging buffer (a write larger than it goes in pieces).
    fn write_many(&self, writes: &[(u64, u64, &[u8])]) -> Result<()> {
        let to = writes
            .iter()
            .map(|&(h, o, b)| self.ranges.at(h, o, b.len(), "writes"))
            .collect::<Result<Vec<u64>>>()?;
        // (device address, bytes), each at most the staging buffer.
        let pieces: Vec<(u64, &[u8])> = (writes.iter().zip(&to))
            .flat_map(|(&(_, _, bytes), &dst)| {
                (bytes.chunks(STAGING_BYTES).enumerate())
                    .map(move |(i, piece)| (dst + (i * STAGING_BYTES) as u64, piece))
            })
            .collect();
        let lens: Vec<usize> = pieces.iter().map(|p| p.1.len()).collect();
        let _bound = self.api.bind(self.device)?;
        let _relaxed = self.api.relaxed_capture()?;
        let mut staging = lock(&self.staging);
        for round in staging_rounds(&lens) {
            self.settle(&mut staging)?;
            let mut at = 0;
            for &(dst, bytes) in &pieces[round] {
                staging.buf[at..at + bytes.len()].copy_from_slice(bytes);
                // SAFETY: `dst` and the bytes after it lie in a registered window; the staging
                // buffer stays untouched until the copy has landed: waited for by `settle` or
                // the signal's wait (`defer`) before anything writes it again.
                unsafe {
                    (self.api).copy_h2d_async(
                        dst,
                        staging.buf.as_ptr().add(at),
                        bytes.len(),
                        self.stream,
                    )
                }?;
                staging.queued = true;
                at += bytes.len();
            }
        }
        if !self.defer {
            self.settle(&mut staging)?;
        }
        Ok(())
    }

    fn set_word32(&self, addr: u64, value: u32) -> Result<()> {
        let _bound = self.api.bind(self.device)?;
        let _relaxed = self.api.relaxed_capture()?;
        // SAFETY: `addr` is a consumer index of a context of this device, which outlives its
        // engine; the write is queued after the stream's copies.
        unsafe { (self.api).write_word_async(addr, u64::from(value), false, self.stream) }
    }

    /// Reads the word on the stream (after the writes queued before), then queues the sum:
    /// one wait, as the engine is the only writer but for a kernel's reset.
    fn add_word64(&self, addr: u64, value: u64) -> Result<()> {
        self.add_words64(&[(addr, value)])
    }

    /// Reads every word back with one wait (a copy per run of nearby words), then queues each
    /// sum: a pass's signals cost one round trip, not one each.
    fn add_words64(&self, adds: &[(u64, u64)]) -> Result<()> {
        let words = summed_by_address(adds);
        let _bound = self.api.bind(self.device)?;
        let _relaxed = self.api.relaxed_capture()?;
        let mut staging = lock(&self.staging);
        for round in read_back_rounds(&words) {
            for run in &round {
                // SAFETY: each run spans counters or signals of a context of this device (they
                // lie in one allocation, which outlives the engine); the staging buffer holds
                // the round and is ours until the copies, waited for below, are done; a write
                // still reading it is queued before them.
                unsafe {
                    (self.api).copy_d2h_async(
                        staging.buf.as_mut_ptr().add(run.at),
                        run.from,
                        run.bytes,
                        self.stream,
                    )
                }?;
            }
            self.wait()?;
            staging.queued = false;
            for run in &round {
                for &(addr, value) in &words[run.words.clone()] {
                    let at = run.at + (addr - run.from) as usize;
                    let now = u64::from_le_bytes(staging.buf[at..at + 8].try_into().expect("8"));
                    // SAFETY: as above; the value travels in the command itself.
                    unsafe {
                        (self.api).write_word_async(
                            addr,
                            now.wrapping_add(value),
                            true,
                            self.stream,
                        )
                    }?;
                }
            }
        }
        Ok(())
    }

    /// One device-side copy, waited for: a put to the rank itself needs no trip through the
    /// host.
    fn copy_within(&self, src: (u64, u64), dst: (u64, u64), len: usize) -> Result<()> {
        let from = self.ranges.at(src.0, src.1, len, "reads")?;
        let to = self.ranges.at(dst.0, dst.1, len, "writes")?;
        let _bound = self.api.bind(self.device)?;
        let _relaxed = self.api.relaxed_capture()?;
        let mut staging = lock(&self.staging);
        // SAFETY: both ranges lie in registered windows of this device; the copy is waited for
        // now, or by the signal's wait (`defer`).
        unsafe {
            self.api
                .memcpy_async(self.device, to, from, len, self.stream)
        }?;
        staging.queued = true;
        if !self.defer {
            self.settle(&mut staging)?;
        }
        Ok(())
    }
}

impl<A: DeviceApi> Drop for GinWindows<A> {
    fn drop(&mut self) {
        let queued = self.staging.get_mut().is_ok_and(|s| s.queued);
        if queued && !*self.stalled.get_mut() && self.wait().is_err() {
            self.stalled.store(true, Ordering::Relaxed);
        }
        let staging = self.staging.get_mut().unwrap_or_else(|e| e.into_inner());
        if *self.stalled.get_mut() {
            // The device may still write the staging buffer: it stays, leaked, as the stream.
            std::mem::forget(std::mem::take(&mut staging.buf));
            return;
        }
        if let Ok(_bound) = self.api.bind(self.device) {
            let _relaxed = self.api.relaxed_capture();
            // SAFETY: every copy on the stream was waited for; nothing uses them any more.
            unsafe {
                self.api.event_destroy(self.done);
                self.api.stream_destroy(self.stream);
                self.api.host_unregister(staging.buf.as_mut_ptr());
            }
        }
    }
}

/// Consecutive copies of `lens` bytes (each at most [`STAGING_BYTES`]) as rounds that each fit
/// the staging buffer together.
fn staging_rounds(lens: &[usize]) -> Vec<std::ops::Range<usize>> {
    let mut rounds = Vec::new();
    let (mut start, mut used) = (0, 0);
    for (i, &len) in lens.iter().enumerate() {
        if i > start && used + len > STAGING_BYTES {
            rounds.push(start..i);
            (start, used) = (i, 0);
        }
        used += len;
    }
    if start < lens.len() {
        rounds.push(start..lens.len());
    }
    rounds
}

/// `adds` by address, each address once with the sum of its values.
fn summed_by_address(adds: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut words = adds.to_vec();
    words.sort_unstable_by_key(|&(a, _)| a);
    words.dedup_by(|later, kept| {
        let same = later.0 == kept.0;
        if same {
            kept.1 = kept.1.wrapping_add(later.1);
        }
        same
    });
    words
}

/// Words this close together are read back by one copy.
const RUN_BYTES: u64 = 4096;

/// One copy of a read-back: `bytes` from device address `from` into the staging buffer at
/// `at`, covering `words` (indices into the sorted words).
struct ReadRun {
    from: u64,
    bytes: usize,
    at: usize,
    words: std::ops::Range<usize>,
}

/// The sorted, distinct `words` as runs of copies, in rounds that each fit the staging buffer.
fn read_back_rounds(words: &[(u64, u64)]) -> Vec<Vec<ReadRun>> {
    let mut rounds: Vec<Vec<ReadRun>> = Vec::new();
    let mut round: Vec<ReadRun> = Vec::new();
    let mut used = 0;
    let mut i = 0;
    while i < words.len() {
        let from = words[i].0;
        let mut j = i + 1;
        while j < words.len() && words[j].0 + 8 - from <= RUN_BYTES {
            j += 1;
        }
        let bytes = (words[j - 1].0 + 8 - from) as usize;
        if used + bytes > STAGING_BYTES {
            rounds.push(std::mem::take(&mut round));
            used = 0;
        }
        round.push(ReadRun {
            from,
            bytes,
            at: used,
            words: i..j,
        });
        used += bytes.next_multiple_of(8);
        i = j;
    }
    if !round.is_empty() {
        rounds.push(round);
    }
    rounds
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_api::FakeApi;

    /// Windows on device 0 whose signals are written on their stream, the runtime's log
    /// emptied.
    fn on_stream() -> (FakeApi, Arc<WindowRanges>, GinWindows<FakeApi>) {
        let api = FakeApi::default();
        let ranges = Arc::new(WindowRanges::default());
        let w = GinWindows::new(api.clone(), 0, ranges.clone(), AbortFlag::new())
            .unwrap()
            .signals_on_stream();
        api.calls();
        (api, ranges, w)
    }

    /// Copies go to the named window on the windows' own stream, each waited for.
    #[test]
    fn copies_go_to_the_named_window_and_stay_inside_it() {
        let api = FakeApi::default();
        let ranges = Arc::new(WindowRanges::default());
        let w = GinWindows::new(api.clone(), 3, ranges.clone(), AbortFlag::new()).unwrap();
        assert_eq!(api.calls(), ["stream_create", "event_create"]);
        ranges.add(7, 0x1000, 256);
        let mut buf = [0u8; 16];
        w.read(7, 240, &mut buf).unwrap();
        w.write(7, 0, &buf[..8]).unwrap();
        let (s, e) = (w.stream, w.done);
        assert_eq!(
            api.calls(),
            [
                format!("copy_d2h_async 0x10f0 16 on {s}"),
                format!("event_record {e:#x} on {s}"),
                format!("event_query {e:#x}"),
                format!("copy_h2d_async 0x1000 8 on {s}"),
                format!("event_record {e:#x} on {s}"),
                format!("event_query {e:#x}"),
            ]
        );
        assert!(w.read(7, 241, &mut buf).is_err(), "one byte past the end");
        assert!(
            w.write(7, u64::MAX, &buf).is_err(),
            "an offset that overflows"
        );
        assert!(w.read(8, 0, &mut buf).is_err(), "an unknown window");
        ranges.remove(7);
        assert!(w.read(7, 0, &mut buf).is_err(), "a removed window");
        assert!(api.calls().is_empty(), "refused copies reach no device");
    }

    /// A copy larger than the staging buffer goes through it in pieces, in order.
    #[test]
    fn a_large_copy_goes_through_staging_in_pieces() {
        let api = FakeApi::default();
        let ranges = Arc::new(WindowRanges::default());
        let w = GinWindows::new(api.clone(), 0, ranges.clone(), AbortFlag::new()).unwrap();
        let (s, e) = (w.stream, w.done);
        api.calls();
        ranges.add(1, 0x10_0000, 4 * STAGING_BYTES as u64);
        let mut buf = vec![0u8; STAGING_BYTES + 3];
        w.read(1, 8, &mut buf).unwrap();
        let second = 0x10_0008 + STAGING_BYTES;
        assert_eq!(
            api.calls(),
            [
                format!("copy_d2h_async 0x100008 {STAGING_BYTES} on {s}"),
                format!("event_record {e:#x} on {s}"),
                format!("event_query {e:#x}"),
                format!("copy_d2h_async {second:#x} 3 on {s}"),
                format!("event_record {e:#x} on {s}"),
                format!("event_query {e:#x}"),
            ]
        );
    }

    /// A copy the device never runs does not hold the engine once the communicator aborts;
    /// the stream and staging buffer it may still use are then never freed.
    #[test]
    fn a_copy_that_never_runs_ends_with_the_communicator() {
        let api = FakeApi::default();
        let ranges = Arc::new(WindowRanges::default());
        let abort = AbortFlag::new();
        let w = GinWindows::new(api.clone(), 0, ranges.clone(), abort.clone()).unwrap();
        ranges.add(1, 0x10_0000, 64);
        api.hold_events();
        let aborter = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            abort.abort();
        });
        let e = w.write(1, 0, &[1, 2, 3]).unwrap_err();
        assert!(e.to_string().contains("communicator aborted"), "{e}");
        aborter.join().unwrap();
        api.calls();
        drop(w);
        assert!(api.calls().is_empty(), "nothing freed: {:?}", api.calls());
    }

    /// A put to the rank itself is one copy on the device, inside both windows.
    #[test]
    fn a_put_to_self_is_one_device_copy() {
        let api = FakeApi::default();
        let ranges = Arc::new(WindowRanges::default());
        let w = GinWindows::new(api.clone(), 0, ranges.clone(), AbortFlag::new()).unwrap();
        let (s, e) = (w.stream, w.done);
        api.calls();
        ranges.add(1, 0x10_0000, 4096);
        ranges.add(2, 0x20_0000, 64);
        w.copy_within((1, 4000), (2, 0), 64).unwrap();
        assert_eq!(
            api.calls(),
            [
                format!("memcpy_async 0x100fa0 -> 0x200000 64 on {s}"),
                format!("event_record {e:#x} on {s}"),
                format!("event_query {e:#x}"),
            ]
        );
        assert!(
            w.copy_within((1, 4000), (2, 1), 64).is_err(),
            "past the destination"
        );
        assert!(
            w.copy_within((1, 4040), (2, 0), 64).is_err(),
            "past the source"
        );
        assert!(api.calls().is_empty(), "refused copies reach no device");
    }

    /// With the signals on the stream, a payload write and the signal after it wait once: the
    /// signal is read back after the write, then written; a consumer index is only queued. A
    /// write left queued is waited for before the staging buffer is filled again, and before
    /// the windows go.
    #[test]
    fn signals_on_the_stream_wait_once_for_their_payload() {
        let (api, ranges, w) = on_stream();
        let (s, e) = (w.stream, w.done);
        ranges.add(1, 0x10_0000, 64);
        w.write(1, 8, &[0; 4]).unwrap();
        w.add_word64(0x9000, 2).unwrap();
        w.set_word32(0x8004, 5).unwrap();
        assert_eq!(
            api.calls(),
            [
                format!("copy_h2d_async 0x100008 4 on {s}"),
                format!("copy_d2h_async 0x9000 8 on {s}"),
                format!("event_record {e:#x} on {s}"),
                format!("event_query {e:#x}"),
                format!("write_word64 0x9000 = 2 on {s}"),
                format!("write_word32 0x8004 = 5 on {s}"),
            ]
        );
        w.write(1, 0, &[1]).unwrap();
        w.write(1, 1, &[2]).unwrap();
        let waited = [
            format!("event_record {e:#x} on {s}"),
            format!("event_query {e:#x}"),
        ];
        let calls = api.calls();
        assert_eq!(calls[1..3], waited, "the second write waits for the first");
        drop(w);
        assert_eq!(
            api.calls()[..2],
            waited,
            "dropped after the last write landed"
        );
    }

    /// A pass's signals wait once: nearby words are read back by one copy, far ones by their
    /// own, a word named twice gets both values, and every sum is queued after the wait.
    #[test]
    fn signals_of_one_pass_are_read_back_together() {
        let (api, _, w) = on_stream();
        let (s, e) = (w.stream, w.done);
        w.add_words64(&[(0x9010, 1), (0x9000, 2), (0x20000, 4), (0x9010, 3)])
            .unwrap();
        assert_eq!(
            api.calls(),
            [
                format!("copy_d2h_async 0x9000 24 on {s}"),
                format!("copy_d2h_async 0x20000 8 on {s}"),
                format!("event_record {e:#x} on {s}"),
                format!("event_query {e:#x}"),
                format!("write_word64 0x9000 = 2 on {s}"),
                format!("write_word64 0x9010 = 4 on {s}"),
                format!("write_word64 0x20000 = 4 on {s}"),
            ]
        );
    }

    /// A message's payloads wait once: every read queued, then one wait; every write queued
    /// without a wait between them, the first only after what was left queued.
    #[test]
    fn payloads_of_one_message_wait_once() {
        let (api, ranges, w) = on_stream();
        let (s, e) = (w.stream, w.done);
        ranges.add(1, 0x10_0000, 4096);
        api.calls();
        let mut out = [0u8; 64];
        w.read_many(&[(1, 0, 8, 16), (1, 100, 40, 8)], &mut out)
            .unwrap();
        w.write_many(&[(1, 0, &out[..4]), (1, 8, &out[..2])])
            .unwrap();
        w.write_many(&[(1, 16, &out[..1])]).unwrap();
        assert_eq!(
            api.calls(),
            [
                format!("copy_d2h_async 0x100000 16 on {s}"),
                format!("copy_d2h_async 0x100064 8 on {s}"),
                format!("event_record {e:#x} on {s}"),
                format!("event_query {e:#x}"),
                format!("copy_h2d_async 0x100000 4 on {s}"),
                format!("copy_h2d_async 0x100008 2 on {s}"),
                format!("event_record {e:#x} on {s}"),
                format!("event_query {e:#x}"),
                format!("copy_h2d_async 0x100010 1 on {s}"),
            ]
        );
        assert!(
            w.read_many(&[(1, 4090, 0, 8)], &mut out).is_err(),
            "past the window"
        );
        assert_eq!(
            staging_rounds(&[STAGING_BYTES / 2, STAGING_BYTES / 2, 1, STAGING_BYTES]),
            [0..2, 2..3, 3..4]
        );
    }

    /// Runs that do not fit the staging buffer together go in rounds of their own.
    #[test]
    fn read_backs_beyond_the_staging_buffer_take_rounds() {
        let far = RUN_BYTES * 2;
        let n = STAGING_BYTES / RUN_BYTES as usize + 1;
        let words: Vec<(u64, u64)> = (0..n as u64)
            .flat_map(|i| [(i * far, 1), (i * far + RUN_BYTES - 8, 1)])
            .collect();
        let rounds = read_back_rounds(&words);
        assert_eq!(rounds.len(), 2);
        assert_eq!(rounds[0].len(), n - 1);
        assert!(
            rounds
                .iter()
                .flatten()
                .all(|r| r.bytes == RUN_BYTES as usize)
        );
        assert_eq!(rounds[1][0].at, 0);
        assert_eq!(rounds[1][0].words, 2 * (n - 1)..2 * n);
    }

    #[test]
    fn a_stall_names_the_cause_and_the_remedy() {
        let m = stall_message(2, Duration::from_secs(61));
        assert!(m.contains("GPU 2 has waited 61 s"), "{m}");
        assert!(m.contains("CUDA_DEVICE_MAX_CONNECTIONS=32"), "{m}");
    }
}
