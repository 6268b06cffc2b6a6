//! The receiving side of a connection: posted receives matched with the messages that arrive.

use super::SocketConfig;
use super::parts::parts;
use crate::ll_trace::{Syscall, time_syscall};
use crate::readiness::Readiness;
use crate::socket_workers::{Job, Lane, ReqState, Span};
use oxccl_core::error::{Error, Result};
use oxccl_core::lock::lock;
use std::collections::VecDeque;
use std::io::{self, Read};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Asks the kernel to ACK what `s` receives at once (`on`) or to delay the ACKs.
///
/// Each direction of a connection is a TCP connection of its own, so a receiving control
/// socket never sends data an ACK could ride on, and the kernel ACKs small messages at once,
/// inside the `read` that takes them. Delayed, the ACK rides along every few messages (Linux
/// acknowledges once more than a segment's worth is unacknowledged) or on the delayed-ACK
/// timer. The kernel leaves delayed-ACK mode on its own (that timer, an idle period), hence the
/// call after every read; small reads and 2-rank AllReduce at 512 B-2 KiB got faster with it
/// (docs/perf/defaults.md, "Delayed ACKs"). Errors are ignored: the ACKs are then merely
/// early.
pub(crate) fn set_quickack(s: &TcpStream, on: bool) {
    let v = libc::c_int::from(on);
    // SAFETY: a valid socket, and an option value of the size given, for the call's duration.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_QUICKACK,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// The receiving side of a socket connection.
pub(super) struct RecvSide {
    pub(super) peer: SocketAddr,
    pub(super) ctrl: TcpStream,
    pub(super) lanes: Vec<Lane>,
    pub(super) config: SocketConfig,
    /// Receives posted and not yet matched with a message's size.
    pub(super) posted: VecDeque<Arc<RecvState>>,
    /// The message being read inline on the control socket.
    pub(super) inline: Option<(Arc<RecvState>, usize)>,
    /// Size-header bytes read so far.
    pub(super) hdr: [u8; 8],
    pub(super) hdr_got: usize,
    /// The peer closed between messages.
    pub(super) closed: bool,
    pub(super) failed: Option<String>,
    /// Set when the control socket may have data (see [`Readiness`]).
    pub(super) ready: Arc<AtomicBool>,
    pub(super) readiness: Arc<Readiness>,
    /// The readiness generation this side last looked at.
    pub(super) seen: u64,
    /// Control bytes read ahead: one read takes a size header with the inline payload behind
    /// it (and whatever follows), instead of a read for each. `STAGE_BYTES` long.
    pub(super) stage: Box<[u8]>,
    /// The unconsumed bytes of `stage`: `stage_at..stage_len`.
    pub(super) stage_at: usize,
    pub(super) stage_len: usize,
    /// A read took data since delayed ACKs were last asked for (`set_quickack`).
    pub(super) ack_mode_due: bool,
    /// `ctrl` also carries the other direction ([`Net::pair`](crate::Net::pair)): closing
    /// shuts down reads only.
    pub(super) shared: bool,
}

/// Bytes one read-ahead of the control socket takes at most.
pub(super) const STAGE_BYTES: usize = 16 << 10;

/// One posted receive.
pub(super) struct RecvState {
    pub(super) span: Span,
    /// The message's size once known.
    pub(super) size: Mutex<Option<usize>>,
    /// Set once every byte is in place.
    pub(super) done: AtomicBool,
    pub(super) parts: Arc<ReqState>,
}

pub(super) struct RecvReq {
    pub(super) side: Arc<Mutex<RecvSide>>,
    pub(super) state: Arc<RecvState>,
}

impl RecvSide {
    fn fail(&mut self, why: String) -> Error {
        let msg = format!("network receive from {} failed: {why}", self.peer);
        self.failed = Some(msg.clone());
        Error::Remote(msg)
    }

    /// Reads into `buf` what the control socket has now: `Ok(n)`, 0 at a clean EOF. Bytes read
    /// ahead come first; a short `buf` (a size header) is filled through the read-ahead buffer,
    /// a long one (an inline payload) straight from the socket.
    fn read_ctrl(&mut self, buf: &mut [u8]) -> Result<Option<usize>> {
        if self.stage_at < self.stage_len {
            let n = buf.len().min(self.stage_len - self.stage_at);
            buf[..n].copy_from_slice(&self.stage[self.stage_at..self.stage_at + n]);
            self.stage_at += n;
            return Ok(Some(n));
        }
        if buf.len() >= STAGE_BYTES / 4 {
            return self.read_socket(buf);
        }
        let mut stage = std::mem::take(&mut self.stage);
        let got = self.read_socket(&mut stage);
        self.stage = stage;
        match got? {
            Some(0) => Ok(Some(0)),
            Some(n) => {
                (self.stage_at, self.stage_len) = (0, n);
                self.read_ctrl(buf)
            }
            None => Ok(None),
        }
    }

    /// One non-blocking read of the control socket, if the readiness set says it may have data.
    fn read_socket(&mut self, buf: &mut [u8]) -> Result<Option<usize>> {
        if !self.ready.load(Ordering::Acquire) {
            // One epoll_wait per proxy pass: the first side to look again after its last look
            // asks the kernel; the others of the same pass take what that call found.
            if self.readiness.generation() == self.seen {
                time_syscall(|| self.readiness.refresh(), |_| Syscall::Refresh);
            }
            self.seen = self.readiness.generation();
            if !self.ready.load(Ordering::Acquire) {
                return Ok(None);
            }
        }
        loop {
            let got = time_syscall(
                || (&self.ctrl).read(buf),
                |r| match r {
                    Ok(_) => Syscall::Read,
                    Err(_) => Syscall::ReadNothing,
                },
            );
            if matches!(got, Ok(n) if n > 0) && self.config.delay_acks {
                self.ack_mode_due = true;
            }
            match got {
                Ok(n) if n < buf.len() => {
                    // A short read drained the socket: without this, the next look would read
                    // again only to learn that, a system call on every message's path.
                    self.ready.store(false, Ordering::Release);
                    return Ok(Some(n));
                }
                Ok(n) => return Ok(Some(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Bytes arriving after this read are reported by a later refresh (the set
                    // is level triggered), so clearing the flag loses nothing.
                    self.ready.store(false, Ordering::Release);
                    return Ok(None);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.fail(e.to_string())),
            }
        }
    }

    /// Matches arriving messages with posted receives, in order, as far as the data allows.
    pub(super) fn progress(&mut self) -> Result<()> {
        let placed = self.place();
        // After the data is in place, not between the read and the copy: the system call would
        // delay the message it follows by its own cost, and only later reads need the mode.
        if std::mem::take(&mut self.ack_mode_due) {
            time_syscall(|| set_quickack(&self.ctrl, false), |_| Syscall::AckMode);
        }
        placed
    }

    /// [`RecvSide::progress`]'s matching, reading and copying.
    fn place(&mut self) -> Result<()> {
        if let Some(why) = &self.failed {
            return Err(Error::Remote(why.clone()));
        }
        loop {
            if let Some((st, got)) = self.inline.take() {
                let size = lock(&st.size).unwrap_or(0);
                // SAFETY: irecv's contract: the posted span is ours until the request is done;
                // `size` was checked against it.
                let buf = unsafe {
                    std::slice::from_raw_parts_mut((st.span.addr + got) as *mut u8, size - got)
                };
                match self.read_ctrl(buf)? {
                    Some(0) => {
                        return Err(self.fail("the peer closed the connection mid-message".into()));
                    }
                    Some(n) if got + n == size => st.done.store(true, Ordering::Release),
                    Some(n) => {
                        self.inline = Some((st, got + n));
                        continue;
                    }
                    None => {
                        self.inline = Some((st, got));
                        return Ok(());
                    }
                }
                continue;
            }
            if self.closed || self.posted.is_empty() {
                return Ok(());
            }
            let mut hdr = self.hdr;
            let at = self.hdr_got;
            match self.read_ctrl(&mut hdr[at..])? {
                Some(0) if at == 0 => {
                    self.closed = true;
                    return Ok(());
                }
                Some(0) => {
                    return Err(self.fail("the peer closed the connection mid-message".into()));
                }
                Some(n) => {
                    self.hdr = hdr;
                    self.hdr_got += n;
                }
                None => return Ok(()),
            }
            if self.hdr_got < 8 {
                continue;
            }
            self.hdr_got = 0;
            let size = u64::from_le_bytes(self.hdr) as usize;
            let st = self.posted.pop_front().expect("a posted receive");
            if size > st.span.len {
                return Err(self.fail(format!(
                    "message truncated: {size} bytes sent, {} posted",
                    st.span.len
                )));
            }
            *lock(&st.size) = Some(size);
            if size == 0 {
                st.done.store(true, Ordering::Release);
            } else if size <= self.config.inline_max || self.lanes.is_empty() {
                self.inline = Some((st, 0));
            } else {
                let ps = parts(size, self.lanes.len(), self.config.min_task);
                st.parts.parts.store(ps.len(), Ordering::Release);
                for (off, len, lane) in ps {
                    let job = Job::new(
                        Span {
                            addr: st.span.addr + off,
                            len,
                        },
                        st.parts.clone(),
                    );
                    self.lanes[lane].submit(job);
                }
                st.done.store(true, Ordering::Release);
            }
        }
    }
}
