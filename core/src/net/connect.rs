//! Setting up a communicator's NET connections: which network, the handle exchange over the
//! bootstrap, and the proxy that drives them. Backends supply the FIFO memory (host-pinned and
//! mapped for their kernels); everything else is here, so every backend connects alike.

use super::plugin::select;
use super::proxy::{HostFifo, Proxy, ProxyConn, Side};
use super::socket::{SocketConfig, SocketNet};
use super::{HANDLE_BYTES, Handle, Net};
use crate::abort::{AbortFlag, Deadline};
use crate::bootstrap::Bootstrap;
use crate::bootstrap::iface::list_interfaces;
use crate::error::{Error, Result};
use std::sync::Arc;
use std::time::Duration;

/// Bootstrap tag of the handle exchange (top bit clear: an ordinary tag of this communicator).
const TAG_NET_HANDLES: u64 = 0x4E45_5400_0000;

/// The network a communicator's NET connections use: a network plugin (`NCCL_NET_PLUGIN`,
/// default `libnccl-net.so`) when one loads and initializes, else the built-in sockets;
/// `NCCL_NET` selects by name (see [`plugin::select`](super::plugin::select)).
pub fn choose_net(bootstrap: &Bootstrap) -> Result<Arc<dyn Net>> {
    let want = std::env::var("NCCL_NET").ok();
    select::select(
        select::env_plugins(),
        want.as_deref(),
        bootstrap.session_key().nonce,
        || builtin_net(bootstrap),
    )
}

/// The built-in socket network on the bootstrap's interface.
fn builtin_net(bootstrap: &Bootstrap) -> Arc<dyn Net> {
    let ip = bootstrap.local_ip();
    let ifname = list_interfaces()
        .into_iter()
        .find(|i| i.addr == ip)
        .map_or_else(|| ip.to_string(), |i| i.name);
    Arc::new(SocketNet::new(
        ip,
        &ifname,
        bootstrap.rank(),
        bootstrap.session_key(),
        bootstrap.handshake_timeout(),
        SocketConfig::from_env(),
    ))
}

/// Calls `step` (a never-blocking connect or accept) until it yields, the communicator aborts,
/// or `deadline` passes (a timeout saying `what`).
fn poll_until<T>(
    abort: &AbortFlag,
    deadline: Deadline,
    mut step: impl FnMut() -> Result<Option<T>>,
    what: impl Fn() -> String,
) -> Result<T> {
    loop {
        abort.check()?;
        if let Some(v) = step()? {
            return Ok(v);
        }
        if deadline.expired() {
            return Err(Error::Timeout(what()));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// The FIFOs of one NET peer: the send and the receive FIFO of each channel.
pub struct PeerFifos {
    /// The peer rank.
    pub peer: u32,
    /// Per channel: (FIFO this rank's kernels fill for the peer, FIFO the peer's messages land in).
    pub channels: Vec<(HostFifo, HostFifo)>,
}

/// Connects every channel of every peer in `fifos` over `net` (each peer runs this with us in
/// its list) and starts the proxy that drives them.
pub fn connect(
    bootstrap: &Bootstrap,
    abort: &AbortFlag,
    net: Arc<dyn Net>,
    fifos: Vec<PeerFifos>,
    timeout: Duration,
) -> Result<Proxy> {
    let rank = bootstrap.rank();
    let dev = 0;
    let props = net.properties(dev)?;
    // Listen for every receive first and tell each peer where, so that nobody waits for a
    // handle while holding one back.
    let mut listens = Vec::new();
    for pf in &fifos {
        let mut msg = Vec::with_capacity(pf.channels.len() * HANDLE_BYTES);
        let mut mine = Vec::new();
        for _ in &pf.channels {
            let mut h: Handle = [0; HANDLE_BYTES];
            mine.push(net.listen(dev, &mut h)?);
            msg.extend_from_slice(&h);
        }
        bootstrap.send(pf.peer, TAG_NET_HANDLES, &msg)?;
        listens.push(mine);
    }
    let deadline = Deadline::after(timeout);
    let mut conns = Vec::new();
    let mut sends = Vec::new();
    for pf in &fifos {
        let msg = bootstrap.recv(pf.peer, TAG_NET_HANDLES)?;
        if msg.len() != pf.channels.len() * HANDLE_BYTES {
            return Err(Error::Internal(format!(
                "rank {} sent {} bytes of network handles for {} channels",
                pf.peer,
                msg.len(),
                pf.channels.len()
            )));
        }
        let mut per = Vec::new();
        for chunk in msg.chunks_exact(HANDLE_BYTES) {
            let mut h: Handle = chunk.try_into().expect("a handle");
            let comm = poll_until(
                abort,
                deadline,
                || net.connect(dev, &mut h),
                || format!("connecting to rank {} over the network timed out", pf.peer),
            )?;
            per.push(comm);
        }
        sends.push(per);
    }
    for ((pf, mine), per) in fifos.into_iter().zip(listens).zip(sends) {
        for (c, ((mut l, comm), &(send_fifo, recv_fifo))) in
            mine.into_iter().zip(per).zip(&pf.channels).enumerate()
        {
            let recv = poll_until(
                abort,
                deadline,
                || net.accept(&mut l),
                || format!("rank {} did not connect over the network in time", pf.peer),
            )?;
            net.close_listen(l)?;
            tracing::info!(target: "oxccl::init",
                "Channel {c:02} : {rank} -> {peer} via NET/{name}/{dev} ({iface})",
                peer = pf.peer, name = net.name(), iface = props.name);
            tracing::info!(target: "oxccl::init",
                "Channel {c:02} : {peer} -> {rank} via NET/{name}/{dev} ({iface})",
                peer = pf.peer, name = net.name(), iface = props.name);
            conns.push(ProxyConn {
                peer: pf.peer,
                channel: c as u32,
                fifo: send_fifo,
                side: Side::Send(comm),
            });
            conns.push(ProxyConn {
                peer: pf.peer,
                channel: c as u32,
                fifo: recv_fifo,
                side: Side::Recv(recv),
            });
        }
    }
    Proxy::start(net, rank, conns, abort.clone())
}
