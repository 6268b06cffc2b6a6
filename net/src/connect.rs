//! Setting up a communicator's NET connections: which network, the handle exchange over the
//! bootstrap, and the proxy that drives them. Backends supply the FIFO memory (host-pinned and
//! mapped for their kernels); everything else is here, so every backend connects alike.

use super::gdr::GpuRegistration;
use super::ll::{LlFifo, LlLink, LlSide};
use super::nic_affinity::{self, PathKind};
use super::plugin::select;
use super::proxy::{HostFifo, Proxy, ProxyConn, ProxyLinks, Side, SlotMemory};
use super::proxy_cpus::{self, ProxyCpus};
use super::socket::{SocketConfig, SocketNet};
use super::{HANDLE_BYTES, Handle, Listen, Net, Properties, RecvComm, SendComm};
use oxccl_core::abort::{AbortFlag, Deadline};
use oxccl_core::bootstrap::Bootstrap;
use oxccl_core::bootstrap::iface::{Family, interfaces_matching, list_interfaces};
use oxccl_core::config::{self, vars};
use oxccl_core::error::{Error, Result};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

/// Bootstrap tag of the handle exchange (top bit clear: an ordinary tag of this communicator).
const TAG_NET_HANDLES: u64 = 0x4E45_5400_0000;

/// Bootstrap tag of the GIN engines' handle exchange ([`connect_gin`]).
const TAG_GIN_HANDLES: u64 = 0x4749_4E00_0000;

/// The connections to open with one peer, each way: per link its network device and whether
/// its messages are small (LL links: `listen_small`).
struct LinkPlan {
    peer: u32,
    links: Vec<(usize, bool)>,
}

/// The network a communicator's NET connections use: a network plugin (`NCCL_NET_PLUGIN`,
/// default `libnccl-net.so`) when one loads and initializes, else the built-in sockets;
/// `NCCL_NET` selects by name (see [`plugin::select`](super::plugin::select)).
pub fn choose_net(bootstrap: &Bootstrap) -> Result<Arc<dyn Net>> {
    let want = config::get(&vars::NCCL_NET);
    select::select(
        select::env_plugins(),
        want.as_deref(),
        bootstrap.session_key().nonce,
        || builtin_net(bootstrap),
    )
}

/// The built-in socket network: a device per interface `NCCL_SOCKET_IFNAME` matches, as NCCL's
/// (a GPU's channels then take the ones nearest it, [`NetDevices`]), else the bootstrap's
/// interface alone; on a crowded machine ([`proxy_cpus::crowded`]) without data sockets unless
/// the variables ask for them.
fn builtin_net(bootstrap: &Bootstrap) -> Arc<dyn Net> {
    let ifaces = list_interfaces();
    let ip = bootstrap.local_ip();
    let mut devices: Vec<(IpAddr, String)> = match config::get(&vars::NCCL_SOCKET_IFNAME) {
        Some(spec) => interfaces_matching(&spec, Family::from_env(), &ifaces)
            .into_iter()
            .map(|i| (i.addr, i.name))
            .collect(),
        None => Vec::new(),
    };
    if devices.is_empty() {
        let ifname = ifaces
            .into_iter()
            .find(|i| i.addr == ip)
            .map_or_else(|| ip.to_string(), |i| i.name);
        devices.push((ip, ifname));
    }
    let crowded = proxy_cpus::crowded_here(bootstrap);
    let config = SocketConfig::from_env_on(crowded);
    let names: Vec<String> = devices.iter().map(|(a, n)| format!("{n} {a}")).collect();
    tracing::info!(target: "oxccl::net",
        "rank {}: socket network on {}, {} data sockets per connection{}", bootstrap.rank(),
        names.join(", "), config.nsocks,
        if crowded { " (fewer than 3 CPUs per rank on this machine)" } else { "" });
    Arc::new(SocketNet::on_devices(
        devices,
        bootstrap.rank(),
        bootstrap.session_key(),
        bootstrap.handshake_timeout(),
        config,
    ))
}

/// Per peer, per channel: the sending and the receiving side of each connection.
type Connected = (Vec<Vec<SendComm>>, Vec<Vec<RecvComm>>);

/// What ends [`connect_all`] early: an abort of the communicator, `stop` (raised when a
/// communicator goes while a connection made on first use is still under way), or the deadline.
#[derive(Clone, Copy)]
struct Until<'a> {
    abort: &'a AbortFlag,
    stop: Option<&'a AbortFlag>,
    deadline: Deadline,
}

/// Drives every connect (with the peers' `handles`) and every accept (on `listens`) together
/// until all are done, the communicator aborts, or `deadline` passes. Together, because a
/// network may complete a connect only once the peer's accept has run (aws-ofi-nccl does): a
/// rank finishing its connects before its accepts would wait for a peer doing the same.
fn connect_all(
    until: Until<'_>,
    net: &dyn Net,
    plans: &[LinkPlan],
    mut handles: Vec<Vec<Handle>>,
    listens: Vec<Vec<Listen>>,
) -> Result<Connected> {
    let mut sends: Vec<Vec<Option<SendComm>>> = handles
        .iter()
        .map(|h| h.iter().map(|_| None).collect())
        .collect();
    let mut recvs: Vec<Vec<Option<RecvComm>>> = listens
        .iter()
        .map(|l| l.iter().map(|_| None).collect())
        .collect();
    let mut listens: Vec<Vec<Option<Listen>>> = listens
        .into_iter()
        .map(|l| l.into_iter().map(Some).collect())
        .collect();
    loop {
        until.abort.check()?;
        until.stop.map_or(Ok(()), AbortFlag::check)?;
        let (mut connecting, mut accepting) = (Vec::new(), Vec::new());
        for (p, plan) in plans.iter().enumerate() {
            for (c, &(dev, _)) in plan.links.iter().enumerate() {
                if sends[p][c].is_none() {
                    sends[p][c] = net.connect(dev, &mut handles[p][c])?;
                    if sends[p][c].is_none() {
                        connecting.push(plan.peer);
                    }
                }
                if let Some(l) = listens[p][c].as_mut() {
                    match net.accept(l)? {
                        Some(r) => {
                            recvs[p][c] = Some(r);
                            net.close_listen(listens[p][c].take().expect("listening"))?;
                        }
                        None => accepting.push(plan.peer),
                    }
                }
            }
        }
        if connecting.is_empty() && accepting.is_empty() {
            break;
        }
        if until.deadline.expired() {
            connecting.dedup();
            accepting.dedup();
            return Err(Error::Timeout(format!(
                "connections over the network {} timed out: still connecting to ranks {connecting:?}, \
                 still waiting for ranks {accepting:?} to connect",
                net.name()
            )));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok((all_done(sends), all_done(recvs)))
}

/// Unwraps connections that [`connect_all`] saw complete.
fn all_done<T>(v: Vec<Vec<Option<T>>>) -> Vec<Vec<T>> {
    v.into_iter()
        .map(|per| per.into_iter().map(|x| x.expect("connected")).collect())
        .collect()
}

/// The network devices a rank's connections use: channel `c` (Simple and LL alike) takes
/// `devices[c % len]`, on both the listening and the connecting side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetDevices {
    devices: Vec<usize>,
    /// How far they are from the GPU (all alike: the nearest); `None` when the GPU's place is
    /// unknown.
    path: Option<PathKind>,
}

impl NetDevices {
    /// Device `OXCCL_NET_DEVICE` alone when set; else the devices nearest the GPU at `gpu_pci`
    /// (its `/sys/devices/...` path), taken in turn from the rank's place among the ranks of
    /// its machine ([`nic_affinity::local_devices`]).
    pub fn choose(
        net: &dyn Net,
        gpu_pci: Option<&str>,
        bootstrap: &Bootstrap,
    ) -> Result<NetDevices> {
        let numa = &nic_affinity::sysfs_numa_node;
        let path_to = |dev: &Properties| gpu_pci.map(|g| nic_affinity::path_kind(g, dev, numa));
        if config::get(&vars::OXCCL_NET_DEVICE).is_some() {
            let dev = net_device(net)?;
            let path = path_to(&net.properties(dev)?);
            return Ok(NetDevices {
                devices: vec![dev],
                path,
            });
        }
        let props = (0..net.devices()?)
            .map(|d| net.properties(d))
            .collect::<Result<Vec<_>>>()?;
        let chosen =
            nic_affinity::local_devices(gpu_pci, &props, index_on_machine(bootstrap), numa);
        if chosen.is_empty() {
            return Err(Error::InvalidUsage(format!(
                "the network {} has no device the proxy can drive (host memory and a receive \
                 buffer) among its {}",
                net.name(),
                props.len()
            )));
        }
        if props.len() > 1 {
            let names: Vec<&str> = chosen.iter().map(|&d| props[d].name.as_str()).collect();
            tracing::info!(target: "oxccl::net",
                "rank {}: NET/{} devices {chosen:?} ({}) of {}, nearest the GPU at {}",
                bootstrap.rank(), net.name(), names.join(", "), props.len(),
                gpu_pci.unwrap_or("an unknown PCI path"));
        }
        // The chosen ones are equally near: the first one's path is every one's.
        let path = path_to(&props[chosen[0]]);
        Ok(NetDevices {
            devices: chosen,
            path,
        })
    }

    /// The given devices, in the order channels take them (not empty), at an unknown distance.
    pub fn of(devices: Vec<usize>) -> NetDevices {
        assert!(!devices.is_empty(), "at least one network device");
        NetDevices {
            devices,
            path: None,
        }
    }

    /// The device channel `c` uses.
    pub fn for_channel(&self, c: usize) -> usize {
        self.devices[c % self.devices.len()]
    }

    /// Every device, in the order channels take them.
    pub fn all(&self) -> &[usize] {
        &self.devices
    }

    /// How far the devices are from the GPU on the PCI tree; `None` when its place is unknown.
    pub fn path(&self) -> Option<PathKind> {
        self.path
    }
}

/// This rank's place among the ranks of its machine (same machine hash, lower ranks first).
fn index_on_machine(bootstrap: &Bootstrap) -> usize {
    let peers = bootstrap.peers();
    let mine = peers[bootstrap.rank() as usize].machine_hash;
    peers[..bootstrap.rank() as usize]
        .iter()
        .filter(|p| p.machine_hash == mine)
        .count()
}

/// The FIFOs of one NET peer: the send and the receive FIFO of each channel, Simple and LL.
pub struct PeerFifos {
    /// The peer rank.
    pub peer: u32,
    /// The network devices its channels use.
    pub devices: NetDevices,
    /// Per channel: (FIFO this rank's kernels fill for the peer, FIFO the peer's messages land in).
    pub channels: Vec<(HostFifo, HostFifo)>,
    /// Per channel, the same for LL (empty: no LL connections). Each is a connection of its own:
    /// an arriving message cannot say which FIFO it belongs to.
    pub ll: Vec<(LlFifo, LlFifo)>,
}

impl PeerFifos {
    /// Connections each way: one per channel, and one per LL channel.
    fn links(&self) -> usize {
        self.channels.len() + self.ll.len()
    }

    /// The device of link `l` (Simple links first, then LL links, each by channel).
    fn device_of_link(&self, l: usize) -> usize {
        let c = if l < self.channels.len() {
            l
        } else {
            l - self.channels.len()
        };
        self.devices.for_channel(c)
    }
}

/// The one network device `OXCCL_NET_DEVICE` makes every connection use (an index below the
/// network's device count), else 0.
pub fn net_device(net: &dyn Net) -> Result<usize> {
    let Some(v) = config::get(&vars::OXCCL_NET_DEVICE) else {
        return Ok(0);
    };
    let n = net.devices()?;
    match v {
        d if d < n => Ok(d),
        _ => Err(Error::arg(format!(
            "OXCCL_NET_DEVICE={v:?}: the network has devices 0 to {}",
            n.saturating_sub(1)
        ))),
    }
}

/// How a channel's connection is named in the log: `NET/<network>/<device>`, with `/GDRDMA`
/// when its FIFO's slots are in GPU memory (as NCCL names GPUDirect RDMA connections).
fn via(net: &str, dev: usize, fifo: &HostFifo) -> String {
    let gdr = if fifo.mem == SlotMemory::Gpu {
        "/GDRDMA"
    } else {
        ""
    };
    format!("NET/{net}/{dev}{gdr}")
}

/// Connects every channel of every peer in `fifos` over `net` (each peer runs this with us in
/// its list) and starts the proxy that drives them, registering and flushing FIFOs with GPU
/// slots as `gpu` says.
pub fn connect(
    bootstrap: &Bootstrap,
    abort: &AbortFlag,
    net: Arc<dyn Net>,
    fifos: Vec<PeerFifos>,
    timeout: Duration,
    gpu: GpuRegistration<'_>,
) -> Result<Proxy> {
    let rank = bootstrap.rank();
    let (conns, ll) = connect_links(bootstrap, abort, &net, fifos, timeout, HandleWait::Bounded)?;
    let ranks_here = proxy_cpus::ranks_here(bootstrap);
    let cpus = ProxyCpus::for_machine(ranks_here);
    tracing::info!(target: "oxccl::net",
        "rank {rank}: {} ({ranks_here} ranks on this machine)", cpus.describe());
    let links = ProxyLinks { conns, ll };
    Proxy::start_with(net, rank, links, cpus, timeout, abort.clone(), gpu)
}

/// Connects the peers in `fifos` after init, when an operation first reaches them (each peer
/// runs this with us in its list when its matching operation does), and hands the connections
/// to `proxy` (over its network). The peers' handles may come much later than ours go out: only an abort of the
/// communicator or `stop`, or a peer's death, ends that wait; connecting then has `timeout`.
pub fn connect_later(
    bootstrap: &Bootstrap,
    abort: &AbortFlag,
    stop: &AbortFlag,
    proxy: &Proxy,
    fifos: Vec<PeerFifos>,
    timeout: Duration,
    gpu: GpuRegistration<'_>,
) -> Result<()> {
    let peers: Vec<u32> = fifos.iter().map(|f| f.peer).collect();
    let (conns, ll) = connect_links(
        bootstrap,
        abort,
        proxy.net(),
        fifos,
        timeout,
        HandleWait::UntilStopped(stop),
    )?;
    proxy.add(conns, ll, gpu)?;
    tracing::info!(target: "oxccl::net",
        "rank {}: connected on first use to ranks {peers:?}", bootstrap.rank());
    Ok(())
}

/// How long [`connect_links`] waits for a peer's handles.
#[derive(Clone, Copy)]
enum HandleWait<'a> {
    /// The bootstrap's timeout: at init every peer is connecting at the same time.
    Bounded,
    /// Until the communicator aborts, this flag is raised or the peer dies.
    UntilStopped(&'a AbortFlag),
}

/// Opens the connections of `plans` both ways: listens for every receive first and tells each
/// peer where (over the bootstrap, under `tag`), so that nobody waits for a handle while
/// holding one back, then connects and accepts them all together ([`connect_all`]).
fn open_links(
    bootstrap: &Bootstrap,
    abort: &AbortFlag,
    net: &Arc<dyn Net>,
    plans: &[LinkPlan],
    tag: u64,
    timeout: Duration,
    wait: HandleWait<'_>,
) -> Result<Connected> {
    super::open_files::raise_to_hard_limit();
    let mut listens = Vec::new();
    for plan in plans {
        let mut msg = Vec::with_capacity(plan.links.len() * HANDLE_BYTES);
        let mut mine = Vec::new();
        for &(dev, small) in &plan.links {
            let mut h: Handle = [0; HANDLE_BYTES];
            mine.push(if small {
                net.listen_small(dev, &mut h)?
            } else {
                net.listen(dev, &mut h)?
            });
            msg.extend_from_slice(&h);
        }
        bootstrap.send(plan.peer, tag, &msg)?;
        listens.push(mine);
    }
    let mut handles: Vec<Vec<Handle>> = Vec::new();
    for plan in plans {
        let msg = match wait {
            HandleWait::Bounded => bootstrap.recv(plan.peer, tag)?,
            HandleWait::UntilStopped(stop) => bootstrap.recv_until_stopped(plan.peer, tag, stop)?,
        };
        if msg.len() != plan.links.len() * HANDLE_BYTES {
            return Err(Error::Internal(format!(
                "rank {} sent {} bytes of network handles for {} connections",
                plan.peer,
                msg.len(),
                plan.links.len()
            )));
        }
        handles.push(
            msg.chunks_exact(HANDLE_BYTES)
                .map(|c| c.try_into().expect("a handle"))
                .collect(),
        );
    }
    let stop = match wait {
        HandleWait::Bounded => None,
        HandleWait::UntilStopped(stop) => Some(stop),
    };
    let until = Until {
        abort,
        stop,
        deadline: Deadline::after(timeout),
    };
    connect_all(until, net.as_ref(), plans, handles, listens)
}

/// One connection each way with every rank of `peers` over `net`, on network device `device`,
/// for the GIN engines (each peer runs this with us in its list); in the order of `peers`.
pub fn connect_gin(
    bootstrap: &Bootstrap,
    abort: &AbortFlag,
    net: &Arc<dyn Net>,
    peers: &[u32],
    device: usize,
    timeout: Duration,
) -> Result<Vec<(SendComm, RecvComm)>> {
    let plans: Vec<LinkPlan> = (peers.iter())
        .map(|&peer| LinkPlan {
            peer,
            links: vec![(device, false)],
        })
        .collect();
    let (sends, recvs) = open_links(
        bootstrap,
        abort,
        net,
        &plans,
        TAG_GIN_HANDLES,
        timeout,
        HandleWait::Bounded,
    )?;
    Ok(sends
        .into_iter()
        .zip(recvs)
        .filter_map(|(mut s, mut r)| Some((s.pop()?, r.pop()?)))
        .collect())
}

/// The connections of every channel of every peer in `fifos`, Simple and LL, ready for a
/// proxy; logs each channel as NCCL does.
fn connect_links(
    bootstrap: &Bootstrap,
    abort: &AbortFlag,
    net: &Arc<dyn Net>,
    fifos: Vec<PeerFifos>,
    timeout: Duration,
    wait: HandleWait<'_>,
) -> Result<(Vec<ProxyConn>, Vec<LlLink>)> {
    let rank = bootstrap.rank();
    let plans: Vec<LinkPlan> = (fifos.iter())
        .map(|pf| LinkPlan {
            peer: pf.peer,
            // Simple links first, then LL links, whose messages are small.
            links: (0..pf.links())
                .map(|l| (pf.device_of_link(l), l >= pf.channels.len()))
                .collect(),
        })
        .collect();
    let (mut sends, mut recvs) = open_links(
        bootstrap,
        abort,
        net,
        &plans,
        TAG_NET_HANDLES,
        timeout,
        wait,
    )?;
    // Link c of a peer is c both ways (the handles went in the same order). Only Simple links
    // share a socket: LL sends may have a proxy thread of their own, and on a shared socket the
    // kernel's socket lock makes the receiving thread's read wait for the sending thread's
    // write. (Both ends must pair alike, so this depends on nothing local.)
    for ((pf, per_send), per_recv) in fifos.iter().zip(&mut sends).zip(&mut recvs) {
        let simple = per_send.iter_mut().zip(per_recv.iter_mut());
        for (s, r) in simple.take(pf.channels.len()) {
            net.pair(pf.peer, s, r)?;
        }
    }
    // Interface names for the log, read once (the socket network reads `/sys` for them).
    let names = (0..net.devices()?)
        .map(|d| net.properties(d).map(|p| p.name))
        .collect::<Result<Vec<_>>>()?;
    let mut conns = Vec::new();
    let mut ll = Vec::new();
    for ((pf, mut per_send), mut per_recv) in fifos.into_iter().zip(sends).zip(recvs) {
        let ll_send = per_send.split_off(pf.channels.len());
        let ll_recv = per_recv.split_off(pf.channels.len());
        for (c, ((comm, recv), &(send_fifo, recv_fifo))) in
            ll_send.into_iter().zip(ll_recv).zip(&pf.ll).enumerate()
        {
            ll.push(LlLink {
                peer: pf.peer,
                channel: c as u32,
                fifo: send_fifo,
                side: LlSide::Send(comm),
            });
            ll.push(LlLink {
                peer: pf.peer,
                channel: c as u32,
                fifo: recv_fifo,
                side: LlSide::Recv(recv),
            });
        }
        for (c, ((comm, recv), &(send_fifo, recv_fifo))) in per_send
            .into_iter()
            .zip(per_recv)
            .zip(&pf.channels)
            .enumerate()
        {
            let dev = pf.devices.for_channel(c);
            tracing::info!(target: "oxccl::init",
                "Channel {c:02} : {rank} -> {peer} via {via} ({iface})",
                peer = pf.peer, via = via(net.name(), dev, &send_fifo), iface = names[dev]);
            tracing::info!(target: "oxccl::init",
                "Channel {c:02} : {peer} -> {rank} via {via} ({iface})",
                peer = pf.peer, via = via(net.name(), dev, &recv_fifo), iface = names[dev]);
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
    Ok((conns, ll))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::{PluginLib, PluginNet};
    use crate::proxy::FifoLayout;
    use crate::proxy::testkit::Mem;
    use oxccl_core::testing::run_ranks;

    /// Connects this rank of two with the other over `net`: `channels` Simple and `ll` LL
    /// channels each way, on `devices`, in fresh host memory standing in for the FIFOs.
    fn connect_two(
        b: &Bootstrap,
        net: Arc<dyn Net>,
        devices: NetDevices,
        channels: usize,
        ll: usize,
    ) -> std::result::Result<(), String> {
        let layout = FifoLayout {
            nslots: 2,
            slot_bytes: 4096,
        };
        let mems: Vec<Mem> = (0..2 * (channels + ll))
            .map(|_| Mem::new(layout.bytes() as usize))
            .collect();
        let fifo = |m: &Mem| HostFifo::in_host(m.ptr, layout);
        let ll_fifo = |m: &Mem, send: bool| LlFifo {
            head: m.ptr,
            records: if send {
                m.ptr.wrapping_add(64)
            } else {
                std::ptr::null_mut()
            },
            slots: m.ptr.wrapping_add(4096),
            nslots: 2,
            slot_bytes: 1024,
        };
        let (simple, lls) = mems.split_at(2 * channels);
        let fifos = vec![PeerFifos {
            peer: 1 - b.rank(),
            devices,
            channels: simple
                .chunks(2)
                .map(|m| (fifo(&m[0]), fifo(&m[1])))
                .collect(),
            ll: lls
                .chunks(2)
                .map(|m| (ll_fifo(&m[0], true), ll_fifo(&m[1], false)))
                .collect(),
        }];
        let abort = AbortFlag::new();
        let proxy = connect(
            b,
            &abort,
            net,
            fifos,
            Duration::from_secs(10),
            GpuRegistration::default(),
        )
        .map_err(|e| e.to_string())?;
        // The proxy goes before the memory it drives.
        drop(proxy);
        drop(mems);
        Ok(())
    }

    /// Two ranks connect two channels and an LL channel each way over the test plugin, whose
    /// connects complete only after the peer's accept answered: connects and accepts must
    /// progress together.
    #[test]
    fn connects_and_accepts_progress_together() {
        let path = format!(
            "{}/libnccl-net-oxtest.so",
            env!("OXCCL_TEST_NET_PLUGIN_DIR")
        );
        let lib = PluginLib::load(&path).expect("test plugin");
        let results = run_ranks(2, move |b| {
            let net: Arc<dyn Net> =
                Arc::new(PluginNet::new(lib.clone(), u64::from(b.rank())).expect("plugin net"));
            // Two channels and an LL channel: six connections each way.
            connect_two(&b, net, NetDevices::of(vec![0]), 2, 1)
        });
        for (r, res) in results.into_iter().enumerate() {
            assert_eq!(res, Ok(()), "rank {r}");
        }
    }

    /// Over a network of four devices (far, without a PCI path, and two beside the GPU), each
    /// rank's channels take the two beside its GPU in turn, the second rank of the machine
    /// starting on the other one; listens and connects happen on those devices only.
    #[test]
    fn channels_take_the_devices_nearest_the_gpu() {
        let path = format!(
            "{}/libnccl-net-oxtest-devs.so",
            env!("OXCCL_TEST_NET_PLUGIN_DIR")
        );
        let lib = PluginLib::load(&path).expect("test plugin");
        let gpu = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:03:00.0";
        let results = run_ranks(2, move |b| {
            let net: Arc<dyn Net> =
                Arc::new(PluginNet::new(lib.clone(), u64::from(b.rank())).expect("plugin net"));
            let devices =
                NetDevices::choose(net.as_ref(), Some(gpu), &b).map_err(|e| e.to_string())?;
            // Beside the GPU under its switch's port: the distance GDR is then judged by.
            if devices.path() != Some(PathKind::Pix) {
                return Err(format!("chosen at {:?}", devices.path()));
            }
            // Two channels and two LL channels: eight connections each way.
            connect_two(&b, net, devices.clone(), 2, 2)?;
            Ok::<_, String>(devices.all().to_vec())
        });
        let picked: Vec<_> = results.into_iter().map(|r| r.expect("rank")).collect();
        assert_eq!(picked, [vec![2, 3], vec![3, 2]]);
        // SAFETY: the test plugin, loaded above (no initialisers run again).
        let lib = unsafe { libloading::Library::new(&path) }.unwrap();
        let count = |name: &str, dev: i32| {
            // SAFETY: the test plugin exports these as `int f(int)`.
            let f = unsafe { lib.get::<unsafe extern "C" fn(i32) -> i32>(name.as_bytes()) };
            // SAFETY: as above.
            unsafe { f.unwrap()(dev) }
        };
        for name in ["oxtest_listen_count", "oxtest_connect_count"] {
            let per_dev: Vec<i32> = (0..4).map(|d| count(name, d)).collect();
            // Each rank: a Simple and an LL link per channel, one channel per device.
            assert_eq!(per_dev, [0, 0, 4, 4], "{name}");
        }
    }

    /// Peers connected after init (on first use): rank 0 connects to rank 2 while rank 2 is
    /// still busy, a slot rank 0's "kernel" published before the connection existed reaches
    /// rank 2, and a wait for a peer that never comes ends when `stop` is raised.
    #[test]
    fn later_connections_join_a_running_proxy_and_stop_ends_their_wait() {
        use crate::proxy::testkit::{Kernel, socket_net};
        use crate::socket::SocketConfig;
        use std::sync::atomic::Ordering;
        let layout = FifoLayout {
            nslots: 2,
            slot_bytes: 4096,
        };
        let results = run_ranks(3, move |b| {
            let rank = b.rank();
            let net = socket_net(rank, SocketConfig::default());
            let abort = AbortFlag::new();
            // Before the proxy, so that it stops before they are freed.
            let (send, recv) = (
                Mem::new(layout.bytes() as usize),
                Mem::new(layout.bytes() as usize),
            );
            let proxy = Proxy::start(net, rank, Vec::new(), abort.clone()).expect("proxy");
            let fifos = |peer| {
                vec![PeerFifos {
                    peer,
                    devices: NetDevices::of(vec![0]),
                    channels: vec![(
                        HostFifo::in_host(send.ptr, layout),
                        HostFifo::in_host(recv.ptr, layout),
                    )],
                    ll: Vec::new(),
                }]
            };
            let later = |peer| {
                let stop = AbortFlag::new();
                let gpu = GpuRegistration::default();
                connect_later(
                    &b,
                    &abort,
                    &stop,
                    &proxy,
                    fifos(peer),
                    Duration::from_secs(10),
                    gpu,
                )
                .map_err(|e| e.to_string())
            };
            match rank {
                0 => {
                    let k = Kernel(HostFifo::in_host(send.ptr, layout));
                    // SAFETY: slot 0 of our send FIFO, free.
                    unsafe {
                        std::ptr::write_bytes(
                            send.ptr.add(layout.slots_offset() as usize),
                            0x5a,
                            100,
                        )
                    };
                    k.ctr(FifoLayout::SIZES).store(100, Ordering::Release);
                    k.ctr(FifoLayout::TAIL).store(1, Ordering::Release);
                    later(2)?;
                    Ok(k.wait_geq(FifoLayout::HEAD, 1, &abort).to_string())
                }
                2 => {
                    std::thread::sleep(Duration::from_millis(700));
                    later(0)?;
                    let k = Kernel(HostFifo::in_host(recv.ptr, layout));
                    if !k.wait_geq(FifoLayout::TAIL, 1, &abort) {
                        return Err("nothing arrived".into());
                    }
                    // SAFETY: slot 0 of our receive FIFO, filled (tail).
                    let got = unsafe {
                        std::slice::from_raw_parts(
                            recv.ptr.add(layout.slots_offset() as usize),
                            100,
                        )
                    };
                    Ok(format!("{}", got.iter().all(|&x| x == 0x5a)))
                }
                _ => {
                    // Rank 0 never connects to rank 1: only `stop` ends this wait.
                    let stop = AbortFlag::new();
                    let raise = stop.clone();
                    let t0 = std::time::Instant::now();
                    let t = std::thread::spawn(move || {
                        std::thread::sleep(Duration::from_millis(300));
                        raise.abort();
                    });
                    let gpu = GpuRegistration::default();
                    let r = connect_later(
                        &b,
                        &abort,
                        &stop,
                        &proxy,
                        fifos(0),
                        Duration::from_secs(10),
                        gpu,
                    );
                    t.join().expect("stopper");
                    match r {
                        Err(Error::Aborted) if t0.elapsed() < Duration::from_secs(5) => {
                            Ok("stopped".to_string())
                        }
                        other => Err(format!("{other:?} after {:?}", t0.elapsed())),
                    }
                }
            }
        });
        assert_eq!(
            results,
            vec![
                Ok("true".to_string()),
                Ok("stopped".to_string()),
                Ok("true".to_string())
            ]
        );
    }

    /// A connection whose FIFO has GPU slots is named as NCCL names GPUDirect RDMA ones.
    #[test]
    fn gdr_connections_log_gdrdma() {
        let layout = FifoLayout {
            nslots: 1,
            slot_bytes: 64,
        };
        let m = Mem::new(layout.bytes() as usize);
        let host = HostFifo::in_host(m.ptr, layout);
        assert_eq!(via("OxTest", 0, &host), "NET/OxTest/0");
        let gpu = HostFifo::with_gpu_slots(m.ptr, 0x7000 as *mut u8, layout);
        assert_eq!(via("OxTest", 2, &gpu), "NET/OxTest/2/GDRDMA");
    }
}
