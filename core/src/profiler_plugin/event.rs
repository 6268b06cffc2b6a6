//! The events oxccl raises, and their descriptors in each ABI version: v5 as NCCL 2.28 fills
//! it, v4-v1 as NCCL 2.28.9's adapters translate v5 (task events hang under the launch's Group
//! event, API and kernel-launch events are not passed on, KernelCh events reach v3 without their
//! timer and v1-v2 not at all, v1 names things by enum values).

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
        }
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
