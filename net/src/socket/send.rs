//! The sending side of a connection: its queue of control bytes, written as the socket takes them.

use super::SocketConfig;
use crate::ll_trace::{Syscall, time_syscall};
use crate::socket_workers::{Lane, ReqState};
use oxccl_core::error::{Error, Result};
use std::collections::VecDeque;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};

/// The sending side of a socket connection.
pub(super) struct SendSide {
    pub(super) peer: SocketAddr,
    pub(super) ctrl: TcpStream,
    /// Control bytes not written yet (sizes and inline payloads).
    pub(super) out: VecDeque<u8>,
    pub(super) lanes: Vec<Lane>,
    pub(super) config: SocketConfig,
    pub(super) failed: Option<String>,
    /// The receiving end allows a shared control socket (its handle said so).
    pub(super) peer_duplex: bool,
    /// `ctrl` also carries the other direction ([`Net::pair`](crate::Net::pair)): closing
    /// shuts down writes only.
    pub(super) shared: bool,
}

impl SendSide {
    /// Writes as much of `out` as the socket takes now.
    pub(super) fn flush(&mut self) -> Result<()> {
        if let Some(why) = &self.failed {
            return Err(Error::Remote(why.clone()));
        }
        while !self.out.is_empty() {
            // One write for a header and its inline payload, even where the queue wraps.
            let a = self.out.make_contiguous();
            let wrote = time_syscall(|| (&self.ctrl).write(a), |_| Syscall::Write);
            match wrote {
                Ok(0) => {
                    return Err(self.fail("the connection closed".into()));
                }
                Ok(n) => {
                    self.out.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.fail(e.to_string())),
            }
        }
        Ok(())
    }

    fn fail(&mut self, why: String) -> Error {
        let msg = format!("network send to {} failed: {why}", self.peer);
        self.failed = Some(msg.clone());
        Error::Remote(msg)
    }
}

/// A send request: done once its control bytes are written and its parts are through.
pub(super) struct SendReq {
    pub(super) side: Arc<Mutex<SendSide>>,
    pub(super) state: Arc<ReqState>,
    pub(super) size: usize,
}

/// What a [`SendComm`](crate::SendComm) of the socket network holds.
pub(super) struct SocketSendComm {
    pub(super) side: Arc<Mutex<SendSide>>,
}
