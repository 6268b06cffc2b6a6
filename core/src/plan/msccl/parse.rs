//! MSCCL algorithm files (XML) to a checked [`MscclAlgo`].
//!
//! The format: one `<algo>` with one `<gpu>` per rank, each with `<tb>` thread blocks holding
//! ordered `<step>`s. Everything that can be checked without a message size is checked here, so
//! a bad file fails at `mscclLoadAlgo` with the file, line and element named.

#![forbid(unsafe_code)]

use crate::plan::Protocol;
use crate::plan::tags::MAX_CHANNELS;
use crate::{Error, Result};
use roxmltree::{Document, Node};
use std::collections::HashMap;

/// One of the three buffers MSCCL addresses in chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Buf {
    /// The send buffer (`i`).
    Input,
    /// The receive buffer (`o`).
    Output,
    /// Scratch (`s`).
    Scratch,
}

/// A place in a buffer, in chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChunkRef {
    /// The buffer.
    pub buf: Buf,
    /// Offset in chunks.
    pub off: u64,
}

/// The MSCCL step types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StepType {
    /// `s`: send src.
    Send,
    /// `r`: receive into dst.
    Recv,
    /// `rcs`: receive into dst and forward.
    RecvCopySend,
    /// `rrc`: receive, reduce with src, store to dst.
    RecvReduceCopy,
    /// `rrs`: receive, reduce with src, send.
    RecvReduceSend,
    /// `rrcs`: receive, reduce with src, store to dst and send.
    RecvReduceCopySend,
    /// `cpy`: local copy src to dst.
    Copy,
    /// `re`: local reduce, dst = src ⊕ dst.
    Reduce,
    /// `nop`: nothing but its dependencies.
    Nop,
}

impl StepType {
    fn parse(s: &str) -> Option<StepType> {
        Some(match s {
            "s" => StepType::Send,
            "r" => StepType::Recv,
            "rcs" => StepType::RecvCopySend,
            "rrc" => StepType::RecvReduceCopy,
            "rrs" => StepType::RecvReduceSend,
            "rrcs" => StepType::RecvReduceCopySend,
            "cpy" => StepType::Copy,
            "re" => StepType::Reduce,
            "nop" => StepType::Nop,
            _ => return None,
        })
    }
    /// (receives, sends, reads src, writes dst).
    pub fn parts(self) -> (bool, bool, bool, bool) {
        match self {
            StepType::Send => (false, true, true, false),
            StepType::Recv => (true, false, false, true),
            StepType::RecvCopySend => (true, true, false, true),
            StepType::RecvReduceCopy => (true, false, true, true),
            StepType::RecvReduceSend => (true, true, true, false),
            StepType::RecvReduceCopySend => (true, true, true, true),
            StepType::Copy => (false, false, true, true),
            StepType::Reduce => (false, false, true, true),
            StepType::Nop => (false, false, false, false),
        }
    }
    /// Whether the step combines two values.
    pub fn reduces(self) -> bool {
        matches!(
            self,
            StepType::RecvReduceCopy
                | StepType::RecvReduceSend
                | StepType::RecvReduceCopySend
                | StepType::Reduce
        )
    }
}

/// One step of a thread block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MStep {
    /// What it does.
    pub ty: StepType,
    /// Local operand (types that read one).
    pub src: Option<ChunkRef>,
    /// Destination (types that store).
    pub dst: Option<ChunkRef>,
    /// Chunks moved.
    pub cnt: u64,
    /// Steps of other thread blocks of the same rank this one waits for: (tb index, step index).
    pub deps: Vec<(usize, usize)>,
    /// Line in the file (for messages).
    pub line: u32,
}

/// One thread block: a sequential lane with at most one send peer and one receive peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tb {
    /// Peer it sends to.
    pub send: Option<u32>,
    /// Peer it receives from.
    pub recv: Option<u32>,
    /// MSCCL channel: sends and receives pair up per (sender, receiver, channel).
    pub chan: u32,
    /// Steps in order.
    pub steps: Vec<MStep>,
    /// Line in the file.
    pub line: u32,
}

/// One rank's part of the algorithm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// Chunks of the input buffer.
    pub i_chunks: u64,
    /// Chunks of the output buffer.
    pub o_chunks: u64,
    /// Chunks of scratch.
    pub s_chunks: u64,
    /// Thread blocks, by id.
    pub tbs: Vec<Tb>,
}

/// A parsed and checked MSCCL algorithm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MscclAlgo {
    /// Where it came from (file path or caller-given name), for messages.
    pub source: String,
    /// `name` attribute.
    pub name: String,
    /// `coll` attribute, lower case.
    pub coll: String,
    /// `proto` attribute.
    pub proto: Protocol,
    /// `nchunksperloop`: the message divides into this many chunks.
    pub nchunksperloop: u64,
    /// Valid when the send and receive buffers alias.
    pub inplace: bool,
    /// Valid when they do not.
    pub outofplace: bool,
    /// One entry per rank.
    pub gpus: Vec<Gpu>,
}

struct Ctx<'a> {
    source: &'a str,
    doc: &'a Document<'a>,
}

impl Ctx<'_> {
    fn line(&self, n: Node) -> u32 {
        self.doc.text_pos_at(n.range().start).row
    }
    fn err(&self, n: Node, what: impl std::fmt::Display) -> Error {
        Error::arg(format!(
            "MSCCL algorithm file {}, line {}, <{}>: {what}",
            self.source,
            self.line(n),
            n.tag_name().name()
        ))
    }
    fn raw<'n>(&self, n: Node<'n, 'n>, name: &str) -> Result<&'n str> {
        n.attribute(name)
            .ok_or_else(|| self.err(n, format!("attribute {name} is missing")))
    }
    fn int(&self, n: Node, name: &str) -> Result<i64> {
        let v = self.raw(n, name)?;
        v.trim()
            .parse::<i64>()
            .map_err(|_| self.err(n, format!("attribute {name}=\"{v}\" is not an integer")))
    }
    fn int_or(&self, n: Node, name: &str, default: i64) -> Result<i64> {
        if n.attribute(name).is_some() {
            self.int(n, name)
        } else {
            Ok(default)
        }
    }
    fn uint(&self, n: Node, name: &str) -> Result<u64> {
        let v = self.int(n, name)?;
        u64::try_from(v).map_err(|_| self.err(n, format!("attribute {name}={v} is negative")))
    }
    /// A peer attribute: -1 (or absent) is none; otherwise a rank of `ngpus`, not `me`.
    fn peer(&self, n: Node, name: &str, me: u32, ngpus: u32) -> Result<Option<u32>> {
        let v = self.int_or(n, name, -1)?;
        if v == -1 {
            return Ok(None);
        }
        match u32::try_from(v) {
            Ok(p) if p < ngpus && p != me => Ok(Some(p)),
            Ok(p) if p == me => Err(self.err(
                n,
                format!(
                    "{name}={v} is the thread block's own rank (self-messages are not supported)"
                ),
            )),
            _ => Err(self.err(
                n,
                format!("{name}={v} is not a rank of this {ngpus}-GPU algorithm"),
            )),
        }
    }
    fn elements<'n>(&self, n: Node<'n, 'n>, tag: &str) -> Result<Vec<Node<'n, 'n>>> {
        let mut v = Vec::new();
        for c in n.children().filter(|c| c.is_element()) {
            if c.tag_name().name() != tag {
                return Err(self.err(
                    c,
                    format!(
                        "unexpected element inside <{}> (expected <{tag}>)",
                        n.tag_name().name()
                    ),
                ));
            }
            v.push(c);
        }
        Ok(v)
    }
    /// `id`-like attribute of each of `nodes` must be 0..len, each once; returns them in id order.
    fn by_id<'n>(&self, nodes: Vec<Node<'n, 'n>>, attr: &str) -> Result<Vec<Node<'n, 'n>>> {
        let mut slots: Vec<Option<Node>> = vec![None; nodes.len()];
        for n in nodes {
            let id = self.uint(n, attr)?;
            let Some(slot) = slots.get_mut(id as usize) else {
                return Err(self.err(
                    n,
                    format!("{attr}={id} is out of range: ids must be consecutive from 0"),
                ));
            };
            if slot.is_some() {
                return Err(self.err(n, format!("{attr}={id} appears twice")));
            }
            *slot = Some(n);
        }
        Ok(slots.into_iter().flatten().collect())
    }
}

fn buf(s: &str) -> Option<Buf> {
    match s {
        "i" => Some(Buf::Input),
        "o" => Some(Buf::Output),
        "s" => Some(Buf::Scratch),
        _ => None,
    }
}

impl MscclAlgo {
    /// Reads and parses the file at `path`.
    pub fn load(path: &str) -> Result<MscclAlgo> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::arg(format!("cannot read MSCCL algorithm file {path}: {e}")))?;
        MscclAlgo::parse(&text, path)
    }

    /// Parses algorithm text; `source` names it in error messages.
    pub fn parse(text: &str, source: &str) -> Result<MscclAlgo> {
        let doc = Document::parse(text).map_err(|e| {
            Error::arg(format!(
                "MSCCL algorithm file {source} is not well-formed XML: {e}"
            ))
        })?;
        let cx = Ctx { source, doc: &doc };
        let root = doc.root_element();
        if root.tag_name().name() != "algo" {
            return Err(cx.err(root, "the root element must be <algo>"));
        }
        let ngpus = cx.uint(root, "ngpus")?;
        if ngpus == 0 || ngpus > 1 << 16 {
            return Err(cx.err(root, format!("ngpus={ngpus} is out of range")));
        }
        let ngpus = ngpus as u32;
        let nchannels = cx.int_or(root, "nchannels", i64::from(MAX_CHANNELS))?;
        if !(1..=i64::from(MAX_CHANNELS)).contains(&nchannels) {
            return Err(cx.err(
                root,
                format!("nchannels={nchannels} is out of range 1..={MAX_CHANNELS}"),
            ));
        }
        let nchunksperloop = cx.uint(root, "nchunksperloop")?;
        if nchunksperloop == 0 {
            return Err(cx.err(root, "nchunksperloop must be at least 1"));
        }
        let proto = match cx.raw(root, "proto").unwrap_or("Simple") {
            "Simple" | "simple" => Protocol::Simple,
            "LL" | "ll" => Protocol::Ll,
            "LL128" | "ll128" => Protocol::Ll128,
            p => return Err(cx.err(root, format!("unknown proto \"{p}\" (Simple, LL or LL128)"))),
        };
        let coll = cx.raw(root, "coll")?.trim().to_ascii_lowercase();
        const COLLS: [&str; 8] = [
            "allreduce",
            "allgather",
            "reduce_scatter",
            "reducescatter",
            "alltoall",
            "broadcast",
            "reduce",
            "custom",
        ];
        if !COLLS.contains(&coll.as_str()) {
            return Err(cx.err(
                root,
                format!(
                    "coll=\"{coll}\" is not supported (one of {})",
                    COLLS.join(", ")
                ),
            ));
        }
        let inplace = cx.int_or(root, "inplace", 0)? != 0;
        let outofplace = cx.int_or(root, "outofplace", 1)? != 0;

        let gpu_nodes = cx.by_id(cx.elements(root, "gpu")?, "id")?;
        if gpu_nodes.len() != ngpus as usize {
            return Err(cx.err(
                root,
                format!(
                    "ngpus={ngpus} but the file has {} <gpu> elements",
                    gpu_nodes.len()
                ),
            ));
        }
        let mut gpus = Vec::with_capacity(gpu_nodes.len());
        for (rank, g) in gpu_nodes.into_iter().enumerate() {
            let rank = rank as u32;
            let chunks = [
                cx.int_or(g, "i_chunks", 0)?,
                cx.int_or(g, "o_chunks", 0)?,
                cx.int_or(g, "s_chunks", 0)?,
            ];
            if let Some(c) = chunks.iter().find(|&&c| c < 0) {
                return Err(cx.err(g, format!("negative chunk count {c}")));
            }
            let [i_chunks, o_chunks, s_chunks] = chunks.map(|c| c as u64);
            let tb_nodes = cx.by_id(cx.elements(g, "tb")?, "id")?;
            if tb_nodes.len() > MAX_CHANNELS as usize {
                return Err(cx.err(
                    g,
                    format!(
                        "{} thread blocks: at most {MAX_CHANNELS} are supported",
                        tb_nodes.len()
                    ),
                ));
            }
            let ntbs = tb_nodes.len();
            let mut tbs = Vec::with_capacity(ntbs);
            let mut pairs: HashMap<(bool, u32, u32), usize> = HashMap::new();
            // Steps per tb, to check dependencies after all tbs are read.
            let mut dep_nodes = Vec::new();
            for (tbi, t) in tb_nodes.iter().enumerate() {
                let send = cx.peer(*t, "send", rank, ngpus)?;
                let recv = cx.peer(*t, "recv", rank, ngpus)?;
                let chan = cx.int_or(*t, "chan", 0)?;
                if !(0..nchannels).contains(&chan) {
                    return Err(cx.err(*t, format!("chan={chan} is out of range 0..{nchannels}")));
                }
                let chan = chan as u32;
                for (is_send, p) in [(true, send), (false, recv)] {
                    if let Some(p) = p
                        && let Some(other) = pairs.insert((is_send, p, chan), tbi)
                    {
                        return Err(cx.err(
                            *t,
                            format!(
                                "thread blocks {other} and {tbi} of gpu {rank} both {} rank {p} on chan {chan}",
                                if is_send { "send to" } else { "receive from" }
                            ),
                        ));
                    }
                }
                let step_nodes = cx.by_id(cx.elements(*t, "step")?, "s")?;
                let mut steps = Vec::with_capacity(step_nodes.len());
                for s in step_nodes {
                    let tyname = cx.raw(s, "type")?;
                    let ty = StepType::parse(tyname).ok_or_else(|| {
                        cx.err(
                            s,
                            format!(
                                "unknown step type \"{tyname}\" (s, r, rcs, rrc, rrs, rrcs, cpy, re or nop)"
                            ),
                        )
                    })?;
                    let (r, snd, reads, writes) = ty.parts();
                    if r && recv.is_none() {
                        return Err(cx.err(
                            s,
                            format!("step type {tyname} receives but its thread block has recv=-1"),
                        ));
                    }
                    if snd && send.is_none() {
                        return Err(cx.err(
                            s,
                            format!("step type {tyname} sends but its thread block has send=-1"),
                        ));
                    }
                    let cnt = if ty == StepType::Nop {
                        cx.int_or(s, "cnt", 0)?.max(0) as u64
                    } else {
                        let c = cx.uint(s, "cnt")?;
                        if c == 0 {
                            return Err(cx.err(s, "cnt must be at least 1"));
                        }
                        c
                    };
                    let chunk_ref = |b: &str, o: &str| -> Result<ChunkRef> {
                        let bname = cx.raw(s, b)?;
                        let bf = buf(bname).ok_or_else(|| {
                            cx.err(s, format!("{b}=\"{bname}\" is not one of i, o, s"))
                        })?;
                        let off = cx.uint(s, o)?;
                        let have = match bf {
                            Buf::Input => i_chunks,
                            Buf::Output => o_chunks,
                            Buf::Scratch => s_chunks,
                        };
                        if off.checked_add(cnt).is_none_or(|e| e > have) {
                            return Err(cx.err(
                                s,
                                format!(
                                    "{b}=\"{bname}\" {o}={off} cnt={cnt} is outside the buffer's {have} chunks"
                                ),
                            ));
                        }
                        Ok(ChunkRef { buf: bf, off })
                    };
                    let src = if reads {
                        Some(chunk_ref("srcbuf", "srcoff")?)
                    } else {
                        None
                    };
                    let dst = if writes {
                        Some(chunk_ref("dstbuf", "dstoff")?)
                    } else {
                        None
                    };
                    let depid = cx.raw(s, "depid").unwrap_or("-1");
                    let depst = cx.raw(s, "deps").unwrap_or("-1");
                    dep_nodes.push((tbi, steps.len(), s, depid, depst));
                    steps.push(MStep {
                        ty,
                        src,
                        dst,
                        cnt,
                        deps: Vec::new(),
                        line: cx.line(s),
                    });
                }
                tbs.push(Tb {
                    send,
                    recv,
                    chan,
                    steps,
                    line: cx.line(*t),
                });
            }
            for (tbi, si, node, depid, depst) in dep_nodes {
                let ids: Vec<&str> = depid.split(',').map(str::trim).collect();
                let sts: Vec<&str> = depst.split(',').map(str::trim).collect();
                if ids.len() != sts.len() {
                    return Err(cx.err(node, "depid and deps list different numbers of entries"));
                }
                let mut deps = Vec::new();
                for (d, st) in ids.into_iter().zip(sts) {
                    let bad = || {
                        cx.err(
                            node,
                            format!("depid=\"{d}\" deps=\"{st}\" are not integers"),
                        )
                    };
                    let d: i64 = d.parse().map_err(|_| bad())?;
                    let st: i64 = st.parse().map_err(|_| bad())?;
                    if d == -1 || st == -1 {
                        continue;
                    }
                    let target = usize::try_from(d)
                        .ok()
                        .and_then(|d| tbs.get(d).map(|t| (d, t)));
                    let Some((d, t)) = target else {
                        return Err(cx.err(
                            node,
                            format!("depid={d} is not a thread block of gpu {rank}"),
                        ));
                    };
                    let Some(st) = usize::try_from(st).ok().filter(|&st| st < t.steps.len()) else {
                        return Err(cx.err(
                            node,
                            format!(
                                "deps={st} is not a step of thread block {d} ({} steps)",
                                t.steps.len()
                            ),
                        ));
                    };
                    if d == tbi {
                        if st >= si {
                            return Err(cx.err(node, format!("depends on its own later step {st}")));
                        }
                        continue; // Same thread block: already ordered.
                    }
                    deps.push((d, st));
                }
                tbs[tbi].steps[si].deps = deps;
            }
            gpus.push(Gpu {
                i_chunks,
                o_chunks,
                s_chunks,
                tbs,
            });
        }
        let algo = MscclAlgo {
            source: source.to_string(),
            name: cx.raw(root, "name").unwrap_or("").to_string(),
            coll,
            proto,
            nchunksperloop,
            inplace,
            outofplace,
            gpus,
        };
        algo.check_matching()?;
        algo.check_progress()?;
        Ok(algo)
    }

    /// Number of ranks.
    pub fn ngpus(&self) -> usize {
        self.gpus.len()
    }

    /// Whether any step combines values (the operator matters).
    pub fn reduces(&self) -> bool {
        self.gpus
            .iter()
            .flat_map(|g| &g.tbs)
            .flat_map(|t| &t.steps)
            .any(|s| s.ty.reduces())
    }

    /// Every send of rank r to peer p on a channel has a receive of the same size on p, in order.
    fn check_matching(&self) -> Result<()> {
        type Key = (u32, u32, u32);
        let mut sends: HashMap<Key, (Vec<u64>, u32)> = HashMap::new();
        let mut recvs: HashMap<Key, (Vec<u64>, u32)> = HashMap::new();
        for (r, g) in self.gpus.iter().enumerate() {
            for t in &g.tbs {
                for s in &t.steps {
                    let (rv, sd, _, _) = s.ty.parts();
                    if let (true, Some(p)) = (sd, t.send) {
                        let e = sends
                            .entry((r as u32, p, t.chan))
                            .or_insert((Vec::new(), t.line));
                        e.0.push(s.cnt);
                    }
                    if let (true, Some(p)) = (rv, t.recv) {
                        let e = recvs
                            .entry((p, r as u32, t.chan))
                            .or_insert((Vec::new(), t.line));
                        e.0.push(s.cnt);
                    }
                }
            }
        }
        let mut keys: Vec<Key> = sends.keys().chain(recvs.keys()).copied().collect();
        keys.sort_unstable();
        keys.dedup();
        for k @ (from, to, chan) in keys {
            let (s, sl) = sends.get(&k).cloned().unwrap_or((Vec::new(), 0));
            let (r, rl) = recvs.get(&k).cloned().unwrap_or((Vec::new(), 0));
            if s != r {
                return Err(Error::arg(format!(
                    "MSCCL algorithm file {}: messages from gpu {from} to gpu {to} on chan {chan} do not pair up: \
                     the sender (thread block at line {sl}) sends {} messages of {s:?} chunks, the receiver \
                     (thread block at line {rl}) receives {} of {r:?} chunks",
                    self.source,
                    s.len(),
                    r.len()
                )));
            }
        }
        Ok(())
    }

    /// Runs the lowered plans of all ranks on tokens: every message is received and nothing
    /// waits forever, whatever the interleaving (sends never block, receives are FIFO).
    fn check_progress(&self) -> Result<()> {
        let n = self.ngpus() as u32;
        let plans = (0..n)
            .map(|r| self.lower_steps(r, 1, 0, false))
            .collect::<Result<Vec<_>>>()?;
        let mut pos: Vec<Vec<usize>> = plans.iter().map(|p| vec![0; p.len()]).collect();
        let mut fifo: HashMap<(u32, u32, u64), std::collections::VecDeque<u64>> = HashMap::new();
        loop {
            let mut progress = false;
            let mut done = true;
            for (r, chans) in plans.iter().enumerate() {
                for (c, steps) in chans.iter().enumerate() {
                    while let Some(s) = steps.get(pos[r][c]) {
                        if let Some(p) = s.recv {
                            let q = fifo.entry((p, r as u32, s.tag)).or_default();
                            match q.pop_front() {
                                Some(cnt) if cnt == s.count => {}
                                Some(cnt) => {
                                    return Err(Error::arg(format!(
                                        "MSCCL algorithm file {}: gpu {r} receives {} elements where gpu {p} sent {cnt}",
                                        self.source, s.count
                                    )));
                                }
                                None => break,
                            }
                        }
                        if let Some(p) = s.send {
                            fifo.entry((r as u32, p, s.tag))
                                .or_default()
                                .push_back(s.count);
                        }
                        pos[r][c] += 1;
                        progress = true;
                    }
                    if pos[r][c] < steps.len() {
                        done = false;
                    }
                }
            }
            if done {
                return Ok(());
            }
            if !progress {
                let stuck: Vec<String> = plans
                    .iter()
                    .enumerate()
                    .flat_map(|(r, chans)| {
                        let pos = &pos;
                        chans
                            .iter()
                            .enumerate()
                            .filter(move |&(c, st)| pos[r][c] < st.len())
                            .map(move |(c, _)| format!("gpu {r} thread block {c}"))
                    })
                    .take(8)
                    .collect();
                return Err(Error::arg(format!(
                    "MSCCL algorithm file {}: the algorithm deadlocks (its dependencies and receives form a cycle); \
                     stuck: {}",
                    self.source,
                    stuck.join(", ")
                )));
            }
        }
    }
}
