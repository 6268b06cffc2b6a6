//! An accept loop that never lets one client stall the others.
//!
//! Each accepted connection is handed to its own short-lived thread, which does the handshake
//! under a deadline; the accept loop itself never reads. Port scanners, silent clients and
//! garbage senders therefore cost one thread for at most the handshake timeout (NCCL's bootstrap
//! hung or crashed on such traffic: NVIDIA/nccl#1612, #1871).

use super::handshakes::Handshakes;
use crate::error::{Error, Result};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A listening socket served by a background accept thread; stops (and closes the port) on drop.
pub struct AuthListener {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl AuthListener {
    /// Serves `listener`: `handler(stream, peer)` runs on a fresh thread per connection and must
    /// bound its own reads (see [`super::wire::read_exact_watched`]).
    pub fn spawn<H>(listener: TcpListener, name: &str, handler: H) -> Result<AuthListener>
    where
        H: Fn(TcpStream, SocketAddr) + Send + Sync + 'static,
    {
        let addr = listener
            .local_addr()
            .map_err(|e| Error::io("listener address", e))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let handler = Arc::new(handler);
        let active = Handshakes::default();
        let tname = format!("oxccl-{name}-accept");
        let name = name.to_string();
        std::thread::Builder::new()
            .name(tname)
            .spawn(move || {
                loop {
                    let accepted = listener.accept();
                    if stop2.load(Ordering::Acquire) {
                        break;
                    }
                    let (stream, peer) = match accepted {
                        Ok(c) => c,
                        Err(e) => {
                            tracing::warn!(target: "oxccl::bootstrap", "{name} listener {addr}: accept failed: {e}");
                            // Back off so fd exhaustion does not turn into a busy loop.
                            std::thread::sleep(Duration::from_millis(100));
                            continue;
                        }
                    };
                    let (guard, evicted) = active.admit(&stream);
                    if let Some(old) = evicted {
                        tracing::warn!(target: "oxccl::bootstrap", "{name} listener {addr}: cut off the oldest handshake (from {old}): too many in flight");
                    }
                    let h = handler.clone();
                    let spawned = std::thread::Builder::new()
                        .name(format!("oxccl-{name}-hs"))
                        .spawn(move || {
                            let _guard = guard;
                            // Linux does not inherit O_NONBLOCK on accept, but be explicit.
                            let _ = stream.set_nonblocking(false);
                            h(stream, peer);
                        });
                    if let Err(e) = spawned {
                        tracing::warn!(target: "oxccl::bootstrap", "{name} listener {addr}: dropped connection from {peer}: cannot spawn a thread: {e}");
                    }
                }
                tracing::debug!(target: "oxccl::bootstrap", "{name} listener {addr} closed");
            })
            .map_err(|e| Error::io("spawning the accept thread", e))?;
        Ok(AuthListener { addr, stop })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and closes the port; idempotent.
    pub fn stop(&self) {
        if self.stop.swap(true, Ordering::AcqRel) {
            return;
        }
        // std has no accept timeout: wake the blocked accept with a connection of our own.
        let wake = match self.addr {
            SocketAddr::V4(a) if a.ip().is_unspecified() => (Ipv4Addr::LOCALHOST, a.port()).into(),
            SocketAddr::V6(a) if a.ip().is_unspecified() => (Ipv6Addr::LOCALHOST, a.port()).into(),
            a => a,
        };
        if let Err(e) = TcpStream::connect_timeout(&wake, Duration::from_secs(1)) {
            tracing::debug!(target: "oxccl::bootstrap", "waking the listener on {wake} failed: {e}; it closes on its next connection");
        }
    }
}

impl Drop for AuthListener {
    fn drop(&mut self) {
        self.stop();
    }
}
