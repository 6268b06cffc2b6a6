//! The times of a launch's channels, for its KernelCh events: NCCL reads each channel's start
//! and stop from the GPU's global timer; oxccl's host backend stamps them as each of its
//! channel threads starts and ends, and the GPU backends, whose kernels are not timed, leave
//! them to [`ChannelTimes::spans`]'s host-side stand-in (the launch to the moment the events
//! are raised).

use crate::plan::{BufId, WorkDesc};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch, never going back within the process (NCCL's GPU timer is
/// nanoseconds on a clock of that kind; plugins only subtract two of them).
pub fn now_ns() -> u64 {
    static BASE: OnceLock<(Instant, u64)> = OnceLock::new();
    let (at, epoch_ns) = BASE.get_or_init(|| {
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        (Instant::now(), since.as_nanos() as u64)
    });
    // Never 0: plugins take a zero timer for "not set".
    epoch_ns + at.elapsed().as_nanos() as u64 + 1
}

/// One executor channel of the plan: the channel id its events carry, the buffers it touches.
#[derive(Debug)]
struct Channel {
    /// NCCL's channel id: the channel's FIFO index (a send/receive plan runs a FIFO's sends and
    /// receives in two executor channels, which are one channel to NCCL).
    id: u32,
    /// The operation buffers (`BufId`) its steps read or write.
    buffers: Vec<u16>,
    /// Start and stop, 0 until stamped.
    times: [AtomicU64; 2],
}

/// The start and stop of every channel of one launch.
#[derive(Debug)]
pub struct ChannelTimes {
    channels: Vec<Channel>,
    /// When the launch was handed to the backend.
    launched: u64,
}

impl ChannelTimes {
    /// The channels of `work`, not yet stamped, launched now.
    pub fn of(work: &WorkDesc) -> ChannelTimes {
        let channels = work
            .channels
            .iter()
            .enumerate()
            .map(|(i, ch)| {
                let mut buffers: Vec<u16> = ch
                    .steps
                    .iter()
                    .flat_map(|s| [s.src, s.dst])
                    .flatten()
                    .map(|r| r.buf.0)
                    .collect();
                buffers.sort_unstable();
                buffers.dedup();
                Channel {
                    id: ch.fifo_index(i) as u32,
                    buffers,
                    times: [AtomicU64::new(0), AtomicU64::new(0)],
                }
            })
            .collect();
        ChannelTimes {
            channels,
            launched: now_ns(),
        }
    }

    /// One channel that nothing stamps (a GPU backend's one-shot kernel, which has no plan).
    pub fn single() -> ChannelTimes {
        ChannelTimes {
            channels: vec![Channel {
                id: 0,
                buffers: Vec::new(),
                times: [AtomicU64::new(0), AtomicU64::new(0)],
            }],
            launched: now_ns(),
        }
    }

    /// Executor channel `index` starts now.
    pub fn start(&self, index: usize) {
        if let Some(c) = self.channels.get(index) {
            c.times[0].store(now_ns(), Ordering::Relaxed);
        }
    }

    /// Executor channel `index` ends now.
    pub fn stop(&self, index: usize) {
        if let Some(c) = self.channels.get(index) {
            c.times[1].store(now_ns(), Ordering::Relaxed);
        }
    }

    /// The (channel id, start, stop) of each channel id, in order of id: every channel when
    /// `buffer` is `None` (a collective), else those that touch `buffer` (one send or receive of
    /// a group). An id's span runs from its first executor channel's start to its last one's
    /// stop; channels never stamped (the GPU backends) span the launch to now.
    pub fn spans(&self, buffer: Option<BufId>) -> Vec<(u32, u64, u64)> {
        let now = now_ns();
        let mut out: Vec<(u32, u64, u64)> = Vec::new();
        let channels = self
            .channels
            .iter()
            .filter(|c| buffer.is_none_or(|b| c.buffers.binary_search(&b.0).is_ok()));
        for c in channels {
            let start = c.times[0].load(Ordering::Relaxed);
            let stop = c.times[1].load(Ordering::Relaxed);
            let (start, stop) = if start == 0 || stop < start {
                (self.launched, now)
            } else {
                (start, stop)
            };
            match out.iter_mut().find(|s| s.0 == c.id) {
                Some(s) => {
                    s.1 = s.1.min(start);
                    s.2 = s.2.max(stop);
                }
                None => out.push((c.id, start, stop)),
            }
        }
        out.sort_unstable_by_key(|s| s.0);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datatype::{DataType, Reduction};
    use crate::plan::{Algorithm, ChannelWork, CollKind, Protocol, Region, Step};

    fn work(channels: Vec<ChannelWork>) -> WorkDesc {
        WorkDesc {
            kind: CollKind::SendRecv,
            algo: Algorithm::Ring,
            proto: Protocol::Simple,
            dtype: DataType::Uint8,
            reduction: Reduction::none(),
            scratch_elems: 0,
            exposed: false,
            channels,
        }
    }

    fn send(buf: u16) -> Step {
        let mut s = Step::new(4, 0).send(1);
        s.src = Some(Region {
            buf: BufId(buf),
            offset: 0,
        });
        s
    }

    #[test]
    fn spans_group_executor_channels_by_fifo_and_buffer() {
        let split = |steps, fifo| ChannelWork {
            steps,
            fifo: Some(fifo),
        };
        let t = ChannelTimes::of(&work(vec![
            split(vec![send(3)], 1),
            split(vec![send(4)], 0),
            split(vec![send(3)], 1),
            ChannelWork::new(Vec::new()),
        ]));
        for i in 0..4 {
            t.start(i);
            t.stop(i);
        }
        let all = t.spans(None);
        assert_eq!(
            all.iter().map(|s| s.0).collect::<Vec<_>>(),
            [0, 1, 3],
            "{all:?}"
        );
        let c0 = t.channels[0]
            .times
            .each_ref()
            .map(|a| a.load(Ordering::Relaxed));
        let c2 = t.channels[2]
            .times
            .each_ref()
            .map(|a| a.load(Ordering::Relaxed));
        // Channel 1 is executor channels 0 and 2: the first's start, the last's stop.
        assert_eq!((all[1].1, all[1].2), (c0[0], c2[1]));
        assert!(all.iter().all(|s| s.1 > 0 && s.1 <= s.2));
        assert_eq!(
            t.spans(Some(BufId(4)))
                .iter()
                .map(|s| s.0)
                .collect::<Vec<_>>(),
            [0]
        );
        assert_eq!(t.spans(Some(BufId(9))), []);
    }

    #[test]
    fn unstamped_channels_span_the_launch_to_now() {
        let t = ChannelTimes::of(&work(vec![ChannelWork::new(vec![send(3)])]));
        let before = now_ns();
        let [(id, start, stop)] = t.spans(None)[..] else {
            panic!("one channel")
        };
        assert_eq!(id, 0);
        assert!(start == t.launched && start <= before && before <= stop);
    }
}
