//! oxccl-net: the NET transport between hosts, on top of oxccl-core: the built-in socket
//! network, NCCL's network plugins, and the host proxy that moves the device's FIFO slots over
//! them (Simple and LL). The device side of these connections is `oxccl-device-transport`'s.
//!
//! Every network is behind one interface shaped like NCCL's net-plugin ABI (v11). A [`Net`] is
//! what a `libnccl-net.so` plugin exports, in Rust: devices with properties, listen / connect /
//! accept that never block (a `None` comm means "call again"), memory registration, and asynchronous `isend` / `irecv` whose requests are polled with `test`. The
//! built-in socket network ([`socket::SocketNet`]) implements it, so the host proxy
//! ([`proxy::Proxy`]) that moves FIFO slots between the device and the network has one path for
//! every network. Opaque objects are boxed values the network downcasts, as a plugin casts its
//! `void*`s.

pub mod connect;
mod epoll;
pub mod gdr;
pub mod gin;
#[cfg(any(test, feature = "probes"))]
pub mod latency_probe;
pub mod ll;
mod ll_trace;
pub mod nic_affinity;
pub mod open_files;
pub mod plugin;

/// Where this crate's build put oxccl's C test network plugins (`tests/c/net_plugin/`), for the
/// tests of the crates above that load them by path.
#[doc(hidden)]
pub const TEST_NET_PLUGIN_DIR: &str = env!("OXCCL_TEST_NET_PLUGIN_DIR");
pub mod proxy;
pub mod proxy_cpus;
mod proxy_drain;
pub mod proxy_events;
mod readiness;
#[cfg(test)]
mod reset_tests;
pub mod socket;
mod socket_workers;

use oxccl_core::error::{Error, Result};
use oxccl_core::plan::NetLink;
use std::any::Any;
use std::os::fd::BorrowedFd;

/// Bytes of a connection handle (`NCCL_NET_HANDLE_MAXSIZE`), exchanged through the bootstrap.
pub const HANDLE_BYTES: usize = 128;
/// A listener's connection handle, which the connecting side receives out of band.
pub type Handle = [u8; HANDLE_BYTES];

/// `NCCL_PTR_HOST`: the network reads and writes host memory.
pub const PTR_HOST: u32 = 0x1;
/// `NCCL_PTR_CUDA`: the network reads and writes GPU memory (GPUDirect RDMA).
pub const PTR_CUDA: u32 = 0x2;
/// `NCCL_PTR_DMABUF`: GPU memory registered through a dma-buf file descriptor.
pub const PTR_DMABUF: u32 = 0x4;

/// What a network device is (the plugin ABI's properties struct, as far as oxccl reads it).
#[derive(Debug, Clone, PartialEq)]
pub struct Properties {
    /// Device name (the interface for sockets).
    pub name: String,
    /// `/sys` PCI path, when the device has one.
    pub pci_path: Option<String>,
    /// Equal for ports of one ASIC.
    pub guid: u64,
    /// `PTR_*` bits: which memory the device can send from and receive into.
    pub ptr_support: u32,
    /// Link speed in Mbit/s.
    pub speed_mbps: i32,
    /// Port number.
    pub port: i32,
    /// Latency in microseconds, for the tuner (0: unknown).
    pub latency_us: f32,
    /// Most connections the device takes.
    pub max_comms: i32,
    /// Largest number of buffers one `irecv` takes.
    pub max_recvs: i32,
    /// Largest message one `isend` takes.
    pub max_p2p_bytes: u64,
}

impl Properties {
    /// The link the tuner weighs for this device (its speed and latency, made sane).
    pub fn link(&self) -> NetLink {
        NetLink::reported(self.speed_mbps, self.latency_us)
    }
}

/// A listening endpoint (a plugin's `listenComm`).
pub struct Listen(pub Box<dyn Any + Send>);
/// The sending side of a connection (`sendComm`).
pub struct SendComm(pub Box<dyn Any + Send>);
/// The receiving side of a connection (`recvComm`).
pub struct RecvComm(pub Box<dyn Any + Send>);
/// A registered memory region (`mhandle`).
pub struct MemHandle(pub Box<dyn Any + Send>);
/// An operation in flight (`request`), polled with [`Net::test`] until done.
pub struct Request(pub Box<dyn Any + Send>);

/// The connection a registration belongs to.
pub enum CommRef<'a> {
    /// A sending side.
    Send(&'a SendComm),
    /// A receiving side.
    Recv(&'a RecvComm),
}

/// A network, as NCCL's net-plugin ABI v11 describes one (see the module docs).
pub trait Net: Send + Sync {
    /// The name `NCCL_NET` selects and logs print ("Socket", "Libfabric", ...).
    fn name(&self) -> &str;
    /// Number of devices.
    fn devices(&self) -> Result<usize>;
    /// The plugin library behind this network, for a network plugin (where GIN looks for the
    /// library's GIN plugin); `None` for the built-in one.
    fn plugin_lib(&self) -> Option<&std::sync::Arc<plugin::PluginLib>> {
        None
    }
    /// Properties of device `dev`.
    fn properties(&self, dev: usize) -> Result<Properties>;
    /// Starts listening on `dev`; fills `handle` for the connecting side. Never blocks.
    fn listen(&self, dev: usize, handle: &mut Handle) -> Result<Listen>;
    /// As [`Net::listen`], for a connection that only carries small messages (LL slots): a
    /// network may open less for it. The socket network then opens no data sockets and no
    /// helper threads, and every message travels on the control socket. By default `listen`.
    fn listen_small(&self, dev: usize, handle: &mut Handle) -> Result<Listen> {
        self.listen(dev, handle)
    }
    /// Connects to the listener behind `handle`; `None` until the connection is complete (call
    /// again with the same `handle`, which the network may use to keep its progress).
    fn connect(&self, dev: usize, handle: &mut Handle) -> Result<Option<SendComm>>;
    /// Accepts the connection announced to `listen`; `None` until it has arrived.
    fn accept(&self, listen: &mut Listen) -> Result<Option<RecvComm>>;
    /// Registers `size` bytes at `data` (`ptr_type`: one `PTR_*` bit) for use with `comm`.
    fn reg_mr(
        &self,
        comm: CommRef<'_>,
        data: *mut u8,
        size: usize,
        ptr_type: u32,
    ) -> Result<MemHandle>;
    /// Registers `size` bytes of GPU memory at `data` through the dma-buf `fd` (exported by the
    /// GPU driver; `offset` into it), for use with `comm`. Networks without dma-buf support
    /// (no `PTR_DMABUF` bit) keep the default, an error.
    fn reg_mr_dma_buf(
        &self,
        comm: CommRef<'_>,
        data: *mut u8,
        size: usize,
        ptr_type: u32,
        offset: u64,
        fd: BorrowedFd<'_>,
    ) -> Result<MemHandle> {
        let _ = (comm, data, size, ptr_type, offset, fd);
        Err(Error::Internal(format!(
            "the network {} has no dma-buf registration",
            self.name()
        )))
    }
    /// Whether device `dev` asks for every receive into GPU memory to be flushed (the plugin
    /// ABI's `forceFlush`, v9+).
    fn force_flush(&self, dev: usize) -> Result<bool> {
        let _ = dev;
        Ok(false)
    }
    /// Releases a registration.
    fn dereg_mr(&self, comm: CommRef<'_>, mh: MemHandle) -> Result<()>;
    /// Starts sending `size` bytes at `data`; `None` means "busy, try again later".
    ///
    /// # Safety
    /// `data` is readable for `size` bytes and registered as `mh`, until [`Net::test`] reports
    /// the request done (or the comm is closed).
    unsafe fn isend(
        &self,
        comm: &mut SendComm,
        data: *const u8,
        size: usize,
        tag: i32,
        mh: &MemHandle,
    ) -> Result<Option<Request>>;
    /// Posts a receive of at most `size` bytes into `data`; `None` means "busy, try again".
    /// Messages match receives in posting order.
    ///
    /// # Safety
    /// `data` is writable for `size` bytes and registered as `mh`, until [`Net::test`] reports
    /// the request done (or the comm is closed).
    unsafe fn irecv(
        &self,
        comm: &mut RecvComm,
        data: *mut u8,
        size: usize,
        tag: i32,
        mh: &MemHandle,
    ) -> Result<Option<Request>>;
    /// [`Net::isend`] with the profiler handle a v10+ net plugin passes back to its profiler
    /// callback (`phandle`: a [`proxy_events::NetStepRef`], or null); networks without such a
    /// callback ignore it.
    ///
    /// # Safety
    /// As for [`Net::isend`]; `phandle` is null or stays valid until the request is done.
    unsafe fn isend_profiled(
        &self,
        comm: &mut SendComm,
        data: *const u8,
        size: usize,
        tag: i32,
        mh: &MemHandle,
        phandle: *mut std::ffi::c_void,
    ) -> Result<Option<Request>> {
        let _ = phandle;
        // SAFETY: forwarded from the caller.
        unsafe { self.isend(comm, data, size, tag, mh) }
    }
    /// [`Net::irecv`] with a profiler handle, as [`Net::isend_profiled`].
    ///
    /// # Safety
    /// As for [`Net::irecv`]; `phandle` is null or stays valid until the request is done.
    unsafe fn irecv_profiled(
        &self,
        comm: &mut RecvComm,
        data: *mut u8,
        size: usize,
        tag: i32,
        mh: &MemHandle,
        phandle: *mut std::ffi::c_void,
    ) -> Result<Option<Request>> {
        let _ = phandle;
        // SAFETY: forwarded from the caller.
        unsafe { self.irecv(comm, data, size, tag, mh) }
    }
    /// Makes the `size` bytes a completed receive wrote into GPU memory at `data` visible to
    /// the GPU; `None` when there is nothing to wait for (the default: networks that never
    /// write GPU memory), else a request to poll with [`Net::test`].
    ///
    /// # Safety
    /// `data` lies in the registration `mh` of `comm`, and stays so until the request is done.
    unsafe fn iflush(
        &self,
        comm: &mut RecvComm,
        data: *mut u8,
        size: usize,
        mh: &MemHandle,
    ) -> Result<Option<Request>> {
        let _ = (comm, data, size, mh);
        Ok(None)
    }
    /// Says that `send` and `recv` are the two directions of one link with rank `peer`; both
    /// ranks call it for the same links, after connecting and before any transfer. A network may
    /// then carry both on one connection (the socket network does); by default they stay apart.
    fn pair(&self, peer: u32, send: &mut SendComm, recv: &mut RecvComm) -> Result<()> {
        let _ = (peer, send, recv);
        Ok(())
    }
    /// Polls `req`: `Some(bytes)` once done (bytes sent or received), `None` while in flight.
    /// A done request is never tested again.
    fn test(&self, req: &mut Request) -> Result<Option<usize>>;
    /// Closes a sending side.
    fn close_send(&self, comm: SendComm) -> Result<()>;
    /// Closes a receiving side.
    fn close_recv(&self, comm: RecvComm) -> Result<()>;
    /// Stops a listener.
    fn close_listen(&self, listen: Listen) -> Result<()>;
}
