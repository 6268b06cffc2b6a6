//! The events oxccl raises, and their descriptors in each ABI version: v5 as NCCL 2.28 fills
//! it, v4-v1 as NCCL 2.28.9's adapters translate v5 (task events hang under the launch's Group
//! event, API and kernel-launch events are not passed on, KernelCh events reach v3 without their
//! timer and v1-v2 not at all, ProxyOp and ProxyStep events reach every version unchanged,
//! NetPlugin events v3-v4 but not v1-v2, v1 names things by enum values).

use super::abi::{self, event as bit};
use super::abi_legacy::{self as legacy, Descr};
use super::names;
use crate::datatype::DataType;
use crate::plan::{Algorithm, CollKind, P2pDir, Protocol};
use std::ffi::{c_int, c_void};

/// An event handle (the plugin's pointer; 0 when the event was not raised).
pub type Handle = usize;

/// One event, before it is laid out for the plugin's ABI version.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Event {
    /// `ncclGroupStart` … `ncclGroupEnd`, or one call outside a group.
    GroupApi {
        /// Group nesting when the first call of the group was made, the call's own included.
        depth: u32,
        /// That call's stream was being captured.
        graph_captured: bool,
    },
    /// A collective call.
    CollApi {
        /// The operation.
        kind: CollKind,
        /// The call's count.
        count: u64,
        /// Element type.
        dtype: DataType,
        /// Root rank.
        root: u32,
        /// The caller's stream (its raw handle; the host backend's number).
        stream: usize,
        /// The stream was being captured.
        graph_captured: bool,
    },
    /// An `ncclSend` or `ncclRecv` call.
    P2pApi {
        /// Which.
        dir: P2pDir,
        /// Elements.
        count: u64,
        /// Element type.
        dtype: DataType,
        /// The caller's stream.
        stream: usize,
        /// The stream was being captured.
        graph_captured: bool,
    },
    /// A kernel launch (the host backend: the hand-off of a plan to its threads).
    KernelLaunch {
        /// The stream launched on.
        stream: usize,
    },
    /// The operations of one launch.
    Group,
    /// A collective as launched.
    Coll(CollTask),
    /// A send or receive as launched.
    P2p(P2pTask),
    /// One channel of a task's kernel, under the task's event.
    KernelCh {
        /// NCCL's channel id.
        channel: u32,
        /// When the channel started, in ns ([`super::channels::now_ns`]'s clock).
        start_ns: u64,
    },
    /// One channel's send or receive of a task over the network, under the task's event (the
    /// descriptor's pid is this process's, filled when laid out).
    ProxyOp {
        /// NCCL's channel id.
        channel: u32,
        /// The remote rank.
        peer: u32,
        /// Network transfers of the operation.
        n_steps: u32,
        /// Bytes per transfer.
        chunk_size: u32,
        /// A send (else a receive).
        is_send: bool,
    },
    /// One network transfer of a proxy operation, under the operation's event.
    ProxyStep {
        /// The transfer's number within the operation.
        step: u32,
    },
    /// An event the network plugin defines, under the step's event.
    NetPlugin {
        /// The network plugin's type and version (`NCCL_PROFILER_NET_TYPE_*` | version).
        id: i64,
        /// The network plugin's pointer, passed through.
        data: usize,
    },
}

/// A collective as launched (the task event [`Event::Coll`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CollTask {
    /// The communicator's collective sequence number.
    pub seq: u64,
    /// The operation.
    pub kind: CollKind,
    /// Input.
    pub send: u64,
    /// Output.
    pub recv: u64,
    /// The call's count.
    pub count: u64,
    /// Root rank.
    pub root: u32,
    /// Element type.
    pub dtype: DataType,
    /// Channels of the plan.
    pub n_channels: u32,
    /// The plan's algorithm.
    pub algo: Algorithm,
    /// The plan's protocol.
    pub proto: Protocol,
    /// The launch's Group event.
    pub group: Handle,
}

/// A send or receive as launched (the task event [`Event::P2p`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct P2pTask {
    /// Which.
    pub dir: P2pDir,
    /// The buffer.
    pub buff: u64,
    /// Elements.
    pub count: u64,
    /// Element type.
    pub dtype: DataType,
    /// The other rank.
    pub peer: u32,
    /// Channels of the plan.
    pub n_channels: u32,
    /// The launch's Group event.
    pub group: Handle,
}

/// The C values every version's Coll descriptor shares.
impl CollTask {
    fn func(&self) -> *const std::ffi::c_char {
        names::func_name(self.kind).as_ptr()
    }
    fn send_buff(&self) -> *const c_void {
        self.send as *const c_void
    }
    fn recv_buff(&self) -> *mut c_void {
        self.recv as *mut c_void
    }
    fn datatype(&self) -> *const std::ffi::c_char {
        names::type_name(self.dtype).as_ptr()
    }
    fn algo(&self) -> *const std::ffi::c_char {
        names::algo_name(self.algo).as_ptr()
    }
    fn proto(&self) -> *const std::ffi::c_char {
        names::proto_name(self.proto).as_ptr()
    }
}

/// The C values every version's P2p descriptor shares.
impl P2pTask {
    fn func(&self) -> *const std::ffi::c_char {
        names::p2p_name(self.dir).as_ptr()
    }
    fn buff(&self) -> *mut c_void {
        self.buff as *mut c_void
    }
    fn datatype(&self) -> *const std::ffi::c_char {
        names::type_name(self.dtype).as_ptr()
    }
}

/// Warps per block that Coll events report (oxccl's kernels do not vary it per plan).
const N_WARPS: u8 = 16;

impl Event {
    /// NCCL's type bit of the event.
    pub fn kind(&self) -> u64 {
        match self {
            Event::GroupApi { .. } => bit::GROUP_API,
            Event::CollApi { .. } => bit::COLL_API,
            Event::P2pApi { .. } => bit::P2P_API,
            Event::KernelLaunch { .. } => bit::KERNEL_LAUNCH,
            Event::Group => bit::GROUP,
            Event::Coll(_) => bit::COLL,
            Event::P2p(_) => bit::P2P,
            Event::KernelCh { .. } => bit::KERNEL_CH,
            Event::ProxyOp { .. } => bit::PROXY_OP,
            Event::ProxyStep { .. } => bit::PROXY_STEP,
            Event::NetPlugin { .. } => bit::NET_PLUGIN,
        }
    }

    /// The `proxyOp`, `proxyStep` or `netPlugin` member of a proxy event, which every version
    /// that has it lays out alike; `None` for other events.
    fn proxy_body(&self) -> Option<ProxyBody> {
        Some(match *self {
            Event::ProxyOp {
                channel,
                peer,
                n_steps,
                chunk_size,
                is_send,
            } => ProxyBody::Op(abi::ProxyOp {
                // NCCL's is the process that loaded the plugin: this one.
                pid: std::process::id() as libc::pid_t,
                channel_id: byte(channel),
                peer: clamp(peer),
                n_steps: clamp(n_steps),
                chunk_size: clamp(chunk_size),
                is_send: c_int::from(is_send),
            }),
            Event::ProxyStep { step } => ProxyBody::Step(abi::ProxyStep { step: clamp(step) }),
            Event::NetPlugin { id, data } => ProxyBody::Net(abi::NetPlugin {
                id,
                data: data as *mut c_void,
            }),
            _ => return None,
        })
    }

    /// A task event's Group event and channel count (`None`: not a task event).
    fn task_fields(&mut self) -> Option<(&mut Handle, &mut u32)> {
        match self {
            Event::Coll(c) => Some((&mut c.group, &mut c.n_channels)),
            Event::P2p(p) => Some((&mut p.group, &mut p.n_channels)),
            _ => None,
        }
    }

    /// The event, a task event under the launch's Group event `group`.
    pub fn under_group(mut self, group: Handle) -> Event {
        if let Some((g, _)) = self.task_fields() {
            *g = group;
        }
        self
    }

    /// The event, a task event counting `n` channels.
    pub fn with_channels(mut self, n: u32) -> Event {
        if let Some((_, channels)) = self.task_fields() {
            *channels = n;
        }
        self
    }

    /// The v5 descriptor of the event under `parent`, raised by `rank`.
    pub fn v5(&self, parent: Handle, rank: c_int) -> abi::EventDescr {
        let mut body = abi::Body { zeroed: [0; 11] };
        match *self {
            Event::GroupApi {
                depth,
                graph_captured,
            } => {
                body.group_api = abi::GroupApi {
                    graph_captured,
                    group_depth: clamp(depth),
                };
            }
            Event::CollApi {
                kind,
                count,
                dtype,
                root,
                stream,
                graph_captured,
            } => {
                body.coll_api = abi::CollApi {
                    func: names::func_name(kind).as_ptr(),
                    count: count as usize,
                    datatype: names::type_name(dtype).as_ptr(),
                    root: clamp(root),
                    stream: stream as *mut c_void,
                    graph_captured,
                };
            }
            Event::P2pApi {
                dir,
                count,
                dtype,
                stream,
                graph_captured,
            } => {
                body.p2p_api = abi::P2pApi {
                    func: names::p2p_name(dir).as_ptr(),
                    count: count as usize,
                    datatype: names::type_name(dtype).as_ptr(),
                    stream: stream as *mut c_void,
                    graph_captured,
                };
            }
            Event::KernelLaunch { stream } => {
                body.kernel_launch = abi::KernelLaunch {
                    stream: stream as *mut c_void,
                };
            }
            Event::Group => {}
            Event::Coll(c) => {
                body.coll = abi::Coll {
                    seq_number: c.seq,
                    func: c.func(),
                    send_buff: c.send_buff(),
                    recv_buff: c.recv_buff(),
                    count: c.count as usize,
                    root: clamp(c.root),
                    datatype: c.datatype(),
                    n_channels: byte(c.n_channels),
                    n_warps: N_WARPS,
                    algo: c.algo(),
                    proto: c.proto(),
                    parent_group: c.group as *mut c_void,
                };
            }
            Event::P2p(p) => {
                body.p2p = abi::P2p {
                    func: p.func(),
                    buff: p.buff(),
                    datatype: p.datatype(),
                    count: p.count as usize,
                    peer: clamp(p.peer),
                    n_channels: byte(p.n_channels),
                    parent_group: p.group as *mut c_void,
                };
            }
            Event::KernelCh { channel, start_ns } => {
                body.kernel_ch = abi::KernelCh {
                    channel_id: byte(channel),
                    p_timer: start_ns,
                };
            }
            Event::ProxyOp { .. } | Event::ProxyStep { .. } | Event::NetPlugin { .. } => {
                if let Some(p) = self.proxy_body() {
                    body.set_proxy(p);
                }
            }
        }
        abi::EventDescr {
            kind: self.kind(),
            parent_obj: parent as *mut c_void,
            rank,
            body,
        }
    }

    /// The v4 descriptor; `None` for events v4 has no type for.
    pub fn v4(&self, parent: Handle, rank: c_int) -> Option<legacy::DescrV4> {
        let mut body = legacy::BodyV4 { zeroed: [0; 10] };
        if let Some(p) = self.proxy_body() {
            // The adapter keeps a proxy event's parent.
            return body.set_proxy(p).then(|| self.legacy(parent, rank, body));
        }
        let parent = match *self {
            Event::Group => parent,
            Event::Coll(c) => {
                body.coll = legacy::CollV4 {
                    seq_number: c.seq,
                    func: c.func(),
                    send_buff: c.send_buff(),
                    recv_buff: c.recv_buff(),
                    count: c.count as usize,
                    root: clamp(c.root),
                    datatype: c.datatype(),
                    n_channels: byte(c.n_channels),
                    n_warps: N_WARPS,
                    algo: c.algo(),
                    proto: c.proto(),
                };
                c.group
            }
            Event::P2p(p) => {
                body.p2p = legacy::P2pV4 {
                    func: p.func(),
                    buff: p.buff(),
                    datatype: p.datatype(),
                    count: p.count as usize,
                    peer: clamp(p.peer),
                    n_channels: byte(p.n_channels),
                };
                p.group
            }
            Event::KernelCh { channel, start_ns } => {
                body.kernel_ch = abi::KernelCh {
                    channel_id: byte(channel),
                    p_timer: start_ns,
                };
                parent
            }
            _ => return None,
        };
        Some(self.legacy(parent, rank, body))
    }

    /// The v3 descriptor; `None` for events v3 has no type for.
    pub fn v3(&self, parent: Handle, rank: c_int) -> Option<legacy::DescrV3> {
        let mut body = legacy::BodyV3 { zeroed: [0; 12] };
        if let Some(p) = self.proxy_body() {
            // The adapter keeps a proxy event's parent.
            return body.set_proxy(p).then(|| self.legacy(parent, rank, body));
        }
        let parent = match *self {
            Event::Group => parent,
            Event::Coll(c) => {
                body.coll = legacy::CollV3 {
                    name: std::ptr::null(),
                    comm_hash: 0,
                    seq_number: c.seq,
                    func: c.func(),
                    send_buff: c.send_buff(),
                    recv_buff: c.recv_buff(),
                    count: c.count as usize,
                    root: clamp(c.root),
                    datatype: c.datatype(),
                    n_max_channels: byte(c.n_channels),
                    n_warps: N_WARPS,
                    algo: c.algo(),
                    proto: c.proto(),
                };
                c.group
            }
            Event::P2p(p) => {
                body.p2p = p2p_v2(&p);
                p.group
            }
            Event::KernelCh { channel, .. } => {
                body.kernel_ch = legacy::KernelChV3 {
                    channel_id: byte(channel),
                };
                parent
            }
            _ => return None,
        };
        Some(self.legacy(parent, rank, body))
    }

    /// The v2 descriptor; `None` for events v2 has no type for.
    pub fn v2(&self, parent: Handle, rank: c_int) -> Option<legacy::DescrV2> {
        let mut body = legacy::BodyV2 { zeroed: [0; 13] };
        if let Some(p) = self.proxy_body() {
            // The adapter keeps a proxy event's parent.
            return body.set_proxy(p).then(|| self.legacy(parent, rank, body));
        }
        let parent = match *self {
            Event::Group => parent,
            Event::Coll(c) => {
                body.coll = legacy::CollV2 {
                    name: std::ptr::null(),
                    comm_hash: 0,
                    seq_number: c.seq,
                    func: c.func(),
                    send_buff: c.send_buff(),
                    recv_buff: c.recv_buff(),
                    count: c.count as usize,
                    root: clamp(c.root),
                    datatype: c.datatype(),
                    traffic_bytes: 0,
                    n_max_channels: byte(c.n_channels),
                    n_warps: N_WARPS,
                    algo: c.algo(),
                    proto: c.proto(),
                };
                c.group
            }
            Event::P2p(p) => {
                body.p2p = p2p_v2(&p);
                p.group
            }
            _ => return None,
        };
        Some(self.legacy(parent, rank, body))
    }

    /// The v1 descriptor; `None` for events v1 has no type for.
    pub fn v1(&self, parent: Handle, rank: c_int) -> Option<legacy::DescrV1> {
        let mut body = legacy::BodyV1 { zeroed: [0; 12] };
        if let Some(p) = self.proxy_body() {
            // The adapter keeps a proxy event's parent.
            return body.set_proxy(p).then(|| self.legacy(parent, rank, body));
        }
        let parent = match *self {
            Event::Group => parent,
            Event::Coll(c) => {
                body.coll = legacy::CollV1 {
                    name: std::ptr::null(),
                    comm_hash: 0,
                    seq_number: c.seq,
                    func: names::func_id(c.kind),
                    send_buff: c.send_buff(),
                    recv_buff: c.recv_buff(),
                    count: c.count as usize,
                    root: clamp(c.root),
                    datatype: c.dtype as u8,
                    op: 0,
                    traffic_bytes: 0,
                    n_max_channels: byte(c.n_channels),
                    n_warps: N_WARPS,
                    algo: names::algo_id(c.algo),
                    proto: names::proto_id(c.proto),
                    is_collnet: 0,
                    is_nvls: 0,
                };
                c.group
            }
            Event::P2p(p) => {
                body.p2p = legacy::P2pV1 {
                    name: std::ptr::null(),
                    comm_hash: 0,
                    func: names::p2p_id(p.dir),
                    buff: p.buff(),
                    datatype: p.dtype as u8,
                    count: p.count as usize,
                    peer: clamp(p.peer),
                };
                p.group
            }
            _ => return None,
        };
        Some(self.legacy(parent, rank, body))
    }

    /// A v1-v4 descriptor of this event's type (below 256 for every event that has one).
    fn legacy<B: Copy>(&self, parent: Handle, rank: c_int, body: B) -> Descr<B> {
        Descr {
            kind: self.kind() as u8,
            parent_obj: parent as *mut c_void,
            rank,
            body,
        }
    }
}

/// The member of a proxy event's descriptor (every version that has it lays it out alike).
#[derive(Clone, Copy)]
enum ProxyBody {
    /// `proxyOp`.
    Op(abi::ProxyOp),
    /// `proxyStep`.
    Step(abi::ProxyStep),
    /// `netPlugin`.
    Net(abi::NetPlugin),
}

/// A version's descriptor union, as far as proxy events go.
trait ProxyMembers {
    /// Writes `p` into its member; false when the version has none (its adapter drops the
    /// event).
    fn set_proxy(&mut self, p: ProxyBody) -> bool;
}

/// Versions with a member for each proxy event.
macro_rules! all_proxy_members {
    ($($body:ty),*) => {$(
        impl ProxyMembers for $body {
            fn set_proxy(&mut self, p: ProxyBody) -> bool {
                match p {
                    ProxyBody::Op(op) => self.proxy_op = op,
                    ProxyBody::Step(step) => self.proxy_step = step,
                    ProxyBody::Net(net) => self.net_plugin = net,
                }
                true
            }
        }
    )*};
}
all_proxy_members!(abi::Body, legacy::BodyV4, legacy::BodyV3);

/// v1 and v2, which have no NetPlugin events (NCCL's adapters drop them).
macro_rules! op_and_step_members {
    ($($body:ty),*) => {$(
        impl ProxyMembers for $body {
            fn set_proxy(&mut self, p: ProxyBody) -> bool {
                match p {
                    ProxyBody::Op(op) => self.proxy_op = op,
                    ProxyBody::Step(step) => self.proxy_step = step,
                    ProxyBody::Net(_) => return false,
                }
                true
            }
        }
    )*};
}
op_and_step_members!(legacy::BodyV2, legacy::BodyV1);

/// The `p2p` member of v2 and v3.
fn p2p_v2(p: &P2pTask) -> legacy::P2pV2 {
    legacy::P2pV2 {
        name: std::ptr::null(),
        comm_hash: 0,
        func: p.func(),
        buff: p.buff(),
        datatype: p.datatype(),
        count: p.count as usize,
        peer: clamp(p.peer),
    }
}

/// A rank or depth as C's `int` (ranks are below 2^24).
fn clamp(v: u32) -> c_int {
    c_int::try_from(v).unwrap_or(c_int::MAX)
}

/// A channel count in the descriptors' byte.
fn byte(v: u32) -> u8 {
    u8::try_from(v).unwrap_or(u8::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn coll() -> Event {
        Event::Coll(CollTask {
            seq: 7,
            kind: CollKind::ReduceScatter,
            send: 0x1000,
            recv: 0x2000,
            count: 300,
            root: 2,
            dtype: DataType::Bfloat16,
            n_channels: 3,
            algo: Algorithm::Ring,
            proto: Protocol::Ll128,
            group: 0x77,
        })
    }

    fn p2p() -> Event {
        Event::P2p(P2pTask {
            dir: P2pDir::Recv,
            buff: 0x3000,
            count: 12,
            dtype: DataType::Int64,
            peer: 5,
            n_channels: 2,
            group: 0x88,
        })
    }

    fn text(p: *const std::ffi::c_char) -> &'static str {
        // SAFETY: the tests pass pointers of `names`' static strings only.
        unsafe { CStr::from_ptr(p) }.to_str().unwrap()
    }

    #[test]
    fn v5_keeps_the_api_parent_and_names_the_group() {
        let d = coll().v5(0x55, 3);
        assert_eq!(
            (d.kind, d.parent_obj as usize, d.rank),
            (bit::COLL, 0x55, 3)
        );
        // SAFETY: a Coll descriptor carries `coll`.
        let c = unsafe { d.body.coll };
        assert_eq!(c.seq_number, 7);
        assert_eq!(text(c.func), "ReduceScatter");
        assert_eq!(
            (c.send_buff as usize, c.recv_buff as usize),
            (0x1000, 0x2000)
        );
        assert_eq!((c.count, c.root, c.n_channels, c.n_warps), (300, 2, 3, 16));
        assert_eq!(text(c.datatype), "ncclBfloat16");
        assert_eq!((text(c.algo), text(c.proto)), ("RING", "LL128"));
        assert_eq!(c.parent_group as usize, 0x77);
        let d = p2p().v5(0x66, 1);
        assert_eq!((d.kind, d.parent_obj as usize), (bit::P2P, 0x66));
        // SAFETY: a P2p descriptor carries `p2p`.
        let p = unsafe { d.body.p2p };
        assert_eq!((text(p.func), text(p.datatype)), ("Recv", "ncclInt64"));
        assert_eq!(
            (p.buff as usize, p.count, p.peer, p.n_channels),
            (0x3000, 12, 5, 2)
        );
        assert_eq!(p.parent_group as usize, 0x88);
        let api = Event::P2pApi {
            dir: P2pDir::Send,
            count: 9,
            dtype: DataType::Uint8,
            stream: 0x99,
            graph_captured: true,
        }
        .v5(0x11, 0);
        // SAFETY: a P2pApi descriptor carries `p2pApi`.
        let a = unsafe { api.body.p2p_api };
        assert_eq!(
            (text(a.func), a.count, text(a.datatype)),
            ("Send", 9, "ncclUint8")
        );
        assert_eq!((a.stream as usize, a.graph_captured), (0x99, true));
        assert_eq!(api.parent_obj as usize, 0x11);
    }

    #[test]
    fn older_versions_hang_tasks_under_the_group_and_drop_api_events() {
        let d = coll().v4(0x55, 3).unwrap();
        assert_eq!((d.kind, d.parent_obj as usize, d.rank), (2, 0x77, 3));
        // SAFETY: a Coll descriptor carries `coll`.
        let c = unsafe { d.body.coll };
        assert_eq!(
            (c.seq_number, c.count, c.root, c.n_channels),
            (7, 300, 2, 3)
        );
        assert_eq!((text(c.algo), text(c.proto)), ("RING", "LL128"));
        let d = p2p().v3(0x66, 1).unwrap();
        assert_eq!((d.kind, d.parent_obj as usize), (4, 0x88));
        // SAFETY: a P2p descriptor carries `p2p`.
        let p = unsafe { d.body.p2p };
        assert_eq!((text(p.func), p.count, p.peer), ("Recv", 12, 5));
        assert!(p.name.is_null());
        let d = coll().v2(0, 0).unwrap();
        // SAFETY: as above.
        let c = unsafe { d.body.coll };
        assert_eq!((c.n_max_channels, c.traffic_bytes, c.seq_number), (3, 0, 7));
        let g = Event::Group.v4(0, 4).unwrap();
        assert_eq!((g.kind, g.parent_obj as usize, g.rank), (1, 0, 4));
        for e in [
            Event::GroupApi {
                depth: 1,
                graph_captured: false,
            },
            Event::KernelLaunch { stream: 1 },
        ] {
            assert!(e.v4(0, 0).is_none() && e.v3(0, 0).is_none());
            assert!(e.v2(0, 0).is_none() && e.v1(0, 0).is_none());
        }
    }

    #[test]
    fn kernel_channels_keep_the_task_parent_and_lose_their_timer_in_v3() {
        let k = Event::KernelCh {
            channel: 5,
            start_ns: 1234,
        };
        let d = k.v5(0x55, 2);
        assert_eq!(
            (d.kind, d.parent_obj as usize, d.rank),
            (bit::KERNEL_CH, 0x55, 2)
        );
        // SAFETY: a KernelCh descriptor carries `kernelCh`.
        let c = unsafe { d.body.kernel_ch };
        assert_eq!((c.channel_id, c.p_timer), (5, 1234));
        let d = k.v4(0x55, 2).unwrap();
        assert_eq!((d.kind, d.parent_obj as usize), (64, 0x55));
        // SAFETY: as above.
        let c = unsafe { d.body.kernel_ch };
        assert_eq!((c.channel_id, c.p_timer), (5, 1234));
        let d = k.v3(0x55, 2).unwrap();
        // SAFETY: as above.
        assert_eq!(unsafe { d.body.kernel_ch }.channel_id, 5);
        assert!(k.v2(0x55, 2).is_none() && k.v1(0x55, 2).is_none());
    }

    /// The value of type `T` at byte `offset` of a descriptor.
    fn at<T: Copy, D>(d: &D, offset: usize) -> T {
        assert!(offset + size_of::<T>() <= size_of::<D>());
        // SAFETY: in bounds (checked); the tests read fields only (no padding), of plain data,
        // and the read does not assume alignment.
        unsafe { std::ptr::read_unaligned((d as *const D).cast::<u8>().add(offset).cast::<T>()) }
    }

    /// The type byte (v5: word), parent and rank of a descriptor, at NCCL's offsets.
    fn head<D>(d: &D, wide: bool) -> (u64, usize, c_int) {
        let kind = if wide {
            at::<u64, D>(d, 0)
        } else {
            u64::from(at::<u8, D>(d, 0))
        };
        (kind, at(d, 8), at(d, 16))
    }

    /// A ProxyOp descriptor of `version` at NCCL's offsets: proxyOp {pid 24, channelId 28,
    /// peer 32, nSteps 36, chunkSize 40, isSend 44} (every version alike).
    fn check_op<D>(d: &D, version: u32) {
        let v = format!("v{version}");
        assert_eq!(head(d, version == 5), (bit::PROXY_OP, 0x42, 1), "{v}");
        assert_eq!(at::<i32, _>(d, 24), std::process::id() as i32, "{v}");
        assert_eq!(at::<u8, _>(d, 28), 7, "{v}");
        assert_eq!(at::<i32, _>(d, 32), 3, "{v}");
        assert_eq!(at::<i32, _>(d, 36), 12, "{v}");
        assert_eq!(at::<i32, _>(d, 40), 1 << 19, "{v}");
        assert_eq!(at::<i32, _>(d, 44), 1, "{v}");
    }

    /// A ProxyStep descriptor: proxyStep {step 24}.
    fn check_step<D>(d: &D, version: u32) {
        assert_eq!(head(d, version == 5), (bit::PROXY_STEP, 0x43, 1));
        assert_eq!(at::<i32, _>(d, 24), 9, "v{version}");
    }

    /// A NetPlugin descriptor: netPlugin {id 24, data 32}.
    fn check_net<D>(d: &D, version: u32) {
        assert_eq!(head(d, version == 5), (bit::NET_PLUGIN, 0x44, 1));
        assert_eq!(at::<i64, _>(d, 24), 0x1_0001, "v{version}");
        assert_eq!(at::<usize, _>(d, 32), 0x0dea_dbee_f000, "v{version}");
    }

    /// The proxy events at the byte offsets of NCCL 2.28.9's headers (compiled with offsetof),
    /// parents kept, in every version that gets them.
    #[test]
    fn proxy_events_sit_at_nccls_offsets_in_every_version() {
        let op = Event::ProxyOp {
            channel: 7,
            peer: 3,
            n_steps: 12,
            chunk_size: 1 << 19,
            is_send: true,
        };
        let step = Event::ProxyStep { step: 9 };
        let net = Event::NetPlugin {
            id: 0x1_0001,
            data: 0x0dea_dbee_f000,
        };
        check_op(&op.v5(0x42, 1), 5);
        check_op(&op.v4(0x42, 1).unwrap(), 4);
        check_op(&op.v3(0x42, 1).unwrap(), 3);
        check_op(&op.v2(0x42, 1).unwrap(), 2);
        check_op(&op.v1(0x42, 1).unwrap(), 1);
        check_step(&step.v5(0x43, 1), 5);
        check_step(&step.v4(0x43, 1).unwrap(), 4);
        check_step(&step.v3(0x43, 1).unwrap(), 3);
        check_step(&step.v2(0x43, 1).unwrap(), 2);
        check_step(&step.v1(0x43, 1).unwrap(), 1);
        check_net(&net.v5(0x44, 1), 5);
        check_net(&net.v4(0x44, 1).unwrap(), 4);
        check_net(&net.v3(0x44, 1).unwrap(), 3);
        // v1 and v2 have no NetPlugin events: their adapters drop them.
        assert!(net.v2(0x44, 1).is_none() && net.v1(0x44, 1).is_none());
        // A receive, and values beyond C's int and byte saturate.
        let recv = Event::ProxyOp {
            channel: 300,
            peer: u32::MAX,
            n_steps: 0,
            chunk_size: u32::MAX,
            is_send: false,
        };
        let d = recv.v4(0, 0).unwrap();
        assert_eq!(at::<u8, _>(&d, 28), 255);
        assert_eq!(at::<i32, _>(&d, 32), i32::MAX);
        assert_eq!((at::<i32, _>(&d, 40), at::<i32, _>(&d, 44)), (i32::MAX, 0));
        assert_eq!(recv.kind(), bit::PROXY_OP);
        assert_eq!(
            (step.kind(), net.kind()),
            (bit::PROXY_STEP, bit::NET_PLUGIN)
        );
    }

    #[test]
    fn v1_names_by_nccl_enum_values() {
        let d = coll().v1(0, 0).unwrap();
        // SAFETY: a Coll descriptor carries `coll`.
        let c = unsafe { d.body.coll };
        assert_eq!((c.func, c.datatype, c.algo, c.proto), (3, 9, 1, 1));
        assert_eq!((c.seq_number, c.count, c.n_max_channels), (7, 300, 3));
        assert_eq!(d.parent_obj as usize, 0x77);
        let d = p2p().v1(0, 0).unwrap();
        // SAFETY: a P2p descriptor carries `p2p`.
        let p = unsafe { d.body.p2p };
        assert_eq!((p.func, p.datatype, p.count, p.peer), (7, 4, 12, 5));
        assert_eq!(names::algo_id(Algorithm::Tree), 0);
        assert_eq!(names::proto_id(Protocol::Simple), 2);
        assert_eq!(names::func_id(CollKind::AllReduce), 4);
        assert_eq!(names::p2p_id(P2pDir::Send), 6);
    }
}
