//! The work description: what every executor (host threads, CUDA and HIP kernels) runs.
//!
//! A plan is a list of channels; a channel is an ordered list of [`Step`]s that runs concurrently
//! with the other channels. Every step is one generic primitive, NCCL's
//! recv-reduce-copy-send: `v = recv(peer) ⊕ pre(src)`, then `v = post(v)`, then `dst = v` and/or
//! `send(peer, v)`, where any of the four parts may be absent.

use crate::datatype::{DataType, Reduction};

/// Which of the operation's buffers a [`Region`] points into: an index into the launch's buffer
/// table. Collectives use the first three; grouped send/recv adds one buffer per operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BufId(pub u16);

impl BufId {
    /// The user's send buffer.
    pub const INPUT: BufId = BufId(0);
    /// The user's receive buffer.
    pub const OUTPUT: BufId = BufId(1);
    /// Executor-owned scratch of `WorkDesc::scratch_elems` elements.
    pub const SCRATCH: BufId = BufId(2);
    /// The first user buffer of a grouped send/recv (operation `i` uses `BufId(FIRST_P2P.0 + i)`).
    pub const FIRST_P2P: BufId = BufId(3);
}

/// A place in one of the operation's buffers, in elements of the operation's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Region {
    /// The buffer.
    pub buf: BufId,
    /// Offset from the buffer's start, in elements.
    pub offset: u64,
}

impl Region {
    /// A region of the input buffer.
    pub const fn input(offset: u64) -> Region {
        Region {
            buf: BufId::INPUT,
            offset,
        }
    }
    /// A region of the output buffer.
    pub const fn output(offset: u64) -> Region {
        Region {
            buf: BufId::OUTPUT,
            offset,
        }
    }
    /// A region of the scratch buffer.
    pub const fn scratch(offset: u64) -> Region {
        Region {
            buf: BufId::SCRATCH,
            offset,
        }
    }
}

/// One primitive of a channel: receive, reduce with a local source, post-process, store, send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Step {
    /// Number of elements this step moves.
    pub count: u64,
    /// Message tag shared by the sending and the receiving step (FIFO per peer and tag).
    pub tag: u64,
    /// Receive `count` elements from this peer.
    pub recv: Option<u32>,
    /// Local operand: combined with the received data, or the value itself when nothing is received.
    pub src: Option<Region>,
    /// `src` is this rank's original contribution: apply the reduction's pre-scale to it.
    pub pre_op: bool,
    /// The value is final: apply the reduction's post-division before storing or sending.
    pub post_op: bool,
    /// Store the value here.
    pub dst: Option<Region>,
    /// Send the value to this peer.
    pub send: Option<u32>,
    /// Move this step's messages between ranks as LL packets (the sending and the receiving
    /// step of a message must agree); otherwise with the Simple protocol.
    pub ll: bool,
    /// Zero-copy: instead of receiving a message, read this region of rank `recv`'s buffers
    /// (located through the buffer tables exchanged at the plan's start; see `plan::zero_copy`).
    pub peer_src: Option<Region>,
    /// Zero-copy: instead of sending a message, write the value to this region of rank `send`'s
    /// buffers.
    pub peer_dst: Option<Region>,
    /// The operand read through `peer_src` is that rank's own contribution: pre-scale it too.
    pub pre_recv: bool,
    /// Before this step, make every earlier write of this channel visible to the other ranks.
    pub fence: bool,
    /// The step's source is this rank's buffer table (sent to the peers of a zero-copy plan).
    pub publish: bool,
    /// The received message is the sender's buffer table: keep it for `peer_src`/`peer_dst`.
    pub learn: bool,
    /// Zero-copy exchange: store the operand read through `peer_src` at `dst` and write `src`
    /// through `peer_dst`, both read before either is written (so either side may be in
    /// place), instead of combining them.
    pub swap: bool,
    /// Zero-copy AlltoAll: run only when this rank's or rank `send`'s AlltoAll is in place (its
    /// input is its output; `Some(true)`), or only when neither is (`Some(false)`); both ranks
    /// of the pair see it alike from their buffer tables.
    pub pair_in_place: Option<bool>,
    /// Which branch of a zero-copy plan the step belongs to.
    pub path: Path,
}

/// Which branch of a zero-copy plan a step runs in: after the ranks have exchanged their buffer
/// tables, every rank takes the same branch (zero copy only if every rank can expose its buffers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Path {
    /// Every plan that is not zero-copy, and the table exchange itself.
    #[default]
    Always,
    /// Only when every rank published usable buffers.
    ZeroCopy,
    /// Only when some rank could not expose its buffers: the plan the tuner would have run.
    Fallback,
}

/// Bytes of a published buffer table: the input and output addresses and a usable flag.
pub const TABLE_BYTES: u64 = 24;
/// Bytes of the token that ends a zero-copy plan.
pub const TOKEN_BYTES: u64 = 8;

impl Step {
    /// An empty step moving `count` elements under `tag`; fill the parts with the builders below.
    pub const fn new(count: u64, tag: u64) -> Step {
        Step {
            count,
            tag,
            recv: None,
            src: None,
            pre_op: false,
            post_op: false,
            dst: None,
            send: None,
            ll: false,
            peer_src: None,
            peer_dst: None,
            pre_recv: false,
            fence: false,
            publish: false,
            learn: false,
            swap: false,
            pair_in_place: None,
            path: Path::Always,
        }
    }
    /// Receive from `peer`.
    pub const fn recv(mut self, peer: u32) -> Step {
        self.recv = Some(peer);
        self
    }
    /// Read a local operand from `r`.
    pub const fn src(mut self, r: Region) -> Step {
        self.src = Some(r);
        self
    }
    /// Read this rank's own contribution from `r` (pre-scale applies).
    pub const fn own(mut self, r: Region) -> Step {
        self.src = Some(r);
        self.pre_op = true;
        self
    }
    /// Mark the value final (post-division applies).
    pub const fn last(mut self) -> Step {
        self.post_op = true;
        self
    }
    /// Store to `r`.
    pub const fn dst(mut self, r: Region) -> Step {
        self.dst = Some(r);
        self
    }
    /// Send to `peer`.
    pub const fn send(mut self, peer: u32) -> Step {
        self.send = Some(peer);
        self
    }
    /// Move the messages as LL packets.
    pub const fn ll(mut self) -> Step {
        self.ll = true;
        self
    }
    /// Read rank `peer`'s own contribution at `r` directly (pre-scale applies to it).
    pub const fn read_peer(mut self, peer: u32, r: Region) -> Step {
        self.recv = Some(peer);
        self.peer_src = Some(r);
        self.pre_recv = true;
        self
    }
    /// Write the value to `r` of rank `peer` directly.
    pub const fn write_peer(mut self, peer: u32, r: Region) -> Step {
        self.send = Some(peer);
        self.peer_dst = Some(r);
        self
    }
    /// Exchange `src` with rank `peer`'s region `theirs` of its input, storing theirs at `dst`
    /// and ours at its region `theirs_out` (see [`Step::swap`]).
    pub const fn swap_with(mut self, peer: u32, theirs: Region, theirs_out: Region) -> Step {
        self = self.read_peer(peer, theirs).write_peer(peer, theirs_out);
        self.pre_recv = false;
        self.swap = true;
        self
    }
    /// Run only when the pair of this rank and rank `send` is (`true`) or is not (`false`) in
    /// place (see [`Step::pair_in_place`]).
    pub const fn if_pair_in_place(mut self, in_place: bool) -> Step {
        self.pair_in_place = Some(in_place);
        self
    }
    /// Run only on the given branch of a zero-copy plan.
    pub const fn on(mut self, path: Path) -> Step {
        self.path = path;
        self
    }
}

/// The ordered steps of one channel.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChannelWork {
    /// Steps in execution order.
    pub steps: Vec<Step>,
    /// The FIFO channel its steps to and from other ranks use, when not its own index: a
    /// send/receive plan runs a FIFO's sends and its receives in two channels, so that neither
    /// waits for the other.
    pub fifo: Option<u32>,
}

impl ChannelWork {
    /// A channel of `steps` on its own FIFO index.
    pub fn new(steps: Vec<Step>) -> ChannelWork {
        ChannelWork { steps, fifo: None }
    }

    /// The FIFO channel index of this channel when it is channel `index` of its plan.
    pub fn fifo_index(&self, index: usize) -> usize {
        self.fifo.map_or(index, |f| f as usize)
    }
}

/// The operation a work description implements (for logs, tuning and executors' fast paths).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CollKind {
    /// `ncclAllReduce`.
    AllReduce,
    /// `ncclBroadcast`.
    Broadcast,
    /// `ncclReduce`.
    Reduce,
    /// `ncclAllGather`.
    AllGather,
    /// `ncclReduceScatter`.
    ReduceScatter,
    /// `ncclAlltoAll`.
    AllToAll,
    /// `ncclAlltoAllv`.
    AllToAllv,
    /// `ncclGather`.
    Gather,
    /// `ncclScatter`.
    Scatter,
    /// Grouped `ncclSend`/`ncclRecv`.
    SendRecv,
}

/// How data flows between ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Pipelined ring.
    Ring,
    /// Pipelined binary tree (reduce up, broadcast down).
    Tree,
    /// Every rank exchanges with every other rank directly (one-shot; small messages, all-to-all).
    Direct,
}

/// How data is packed on the wire between ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// Bulk copies with separate flags; for large messages.
    Simple,
    /// Low-latency packets: data and flag in one 8-byte store.
    Ll,
    /// Low-latency packets of 128 bytes, one flag per 128-byte line.
    Ll128,
}

/// Everything an executor needs to run one operation on one rank (buffers are bound at launch).
#[derive(Debug, Clone, PartialEq)]
pub struct WorkDesc {
    /// The operation.
    pub kind: CollKind,
    /// The algorithm the plan uses.
    pub algo: Algorithm,
    /// The protocol the plan was chunked for.
    pub proto: Protocol,
    /// Element type.
    pub dtype: DataType,
    /// Reduction applied where steps combine data.
    pub reduction: Reduction,
    /// Elements of scratch the executor must provide.
    pub scratch_elems: u64,
    /// This rank's buffers may be read and written by the other ranks (zero-copy plans publish
    /// it with the buffer table; set per launch by the communicator).
    pub exposed: bool,
    /// Channels, run concurrently.
    pub channels: Vec<ChannelWork>,
}

impl WorkDesc {
    /// Total number of steps over all channels.
    pub fn step_count(&self) -> usize {
        self.channels.iter().map(|c| c.steps.len()).sum()
    }
}
