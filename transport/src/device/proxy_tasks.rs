//! What a launch tells its NET proxy for the profiler's proxy events
//! (`oxccl_net::proxy_events`): per NET connection its plan uses, how many FIFO slots each of
//! its tasks moves there, in the order the kernel moves them.

#[cfg(doc)]
use oxccl_core::backend::ProxyParents;
use oxccl_core::plan::{BufId, Path, WorkDesc};
use oxccl_core::profiler_plugin::Handle;
use oxccl_net::proxy_events::{ConnKey, ProxyTask};

/// How many data bytes one FIFO slot carries, per protocol.
#[derive(Debug, Clone, Copy)]
pub(super) struct SlotData {
    /// A Simple slot: its size.
    pub simple: u64,
    /// An LL slot: half its size (each 16-byte packet carries 8 data bytes).
    pub ll: u64,
}

/// The messages of `work` to and from the peers `reaches` says are over the network, as FIFO
/// slots per connection (Simple or LL) and task: a message of `n` elements takes
/// `ceil(n / (slot data bytes / element size))` slots, as the kernel cuts it. `task_of` names
/// the task event of a step by the buffer that is its own ([`ProxyParents::task_of`]).
/// Zero-copy branches never reach the network.
pub(super) fn net_tasks(
    work: &WorkDesc,
    task_of: impl Fn(Option<BufId>) -> Handle,
    rank: u32,
    slot: SlotData,
    reaches: impl Fn(u32) -> bool,
) -> Vec<ProxyTask> {
    let esize = work.dtype.size() as u64;
    let elems = |ll: bool| (if ll { slot.ll } else { slot.simple } / esize).max(1);
    let mut out: Vec<ProxyTask> = Vec::new();
    let mut add = |conn: ConnKey, parent, count: u64| {
        let slot_elems = elems(conn.ll);
        let slots = count.div_ceil(slot_elems);
        if slots == 0 {
            return;
        }
        // Consecutive messages of one task on one connection make one ProxyOp.
        if let Some(t) = (out.iter_mut().rev())
            .find(|t| t.conn == conn)
            .filter(|t| t.parent == parent)
        {
            t.slots += slots;
        } else {
            out.push(ProxyTask {
                conn,
                parent,
                slots,
                chunk_bytes: slot_elems * esize,
            });
        }
    };
    for (i, ch) in work.channels.iter().enumerate() {
        let channel = ch.fifo_index(i) as u32;
        for st in ch.steps.iter().filter(|s| s.path != Path::ZeroCopy) {
            let conn = |peer, send| ConnKey {
                channel,
                peer,
                send,
                ll: st.ll,
            };
            let send = st.send.filter(|&p| p != rank && st.peer_dst.is_none());
            if let Some(peer) = send.filter(|&p| reaches(p)) {
                add(conn(peer, true), task_of(st.src.map(|r| r.buf)), st.count);
            }
            let recv = st.recv.filter(|&p| p != rank && st.peer_src.is_none());
            if let Some(peer) = recv.filter(|&p| reaches(p)) {
                add(conn(peer, false), task_of(st.dst.map(|r| r.buf)), st.count);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxccl_core::datatype::{DataType, Reduction};
    use oxccl_core::plan::{Algorithm, ChannelWork, CollKind, Protocol, Region, Step};

    fn region(buf: u16) -> Option<Region> {
        Some(Region {
            buf: BufId(buf),
            offset: 0,
        })
    }

    /// A grouped plan on rank 0 (f32; Simple slots of 1 KiB, 256 elements; LL slots of 256
    /// data bytes, 64 elements): sends of two buffers to the NET peer 1, an LL message to it, a
    /// receive from it, a message to the P2P peer 2, a loopback step and an empty message;
    /// channel 1 runs on FIFO 5.
    #[test]
    fn slots_are_counted_per_connection_and_task_in_kernel_order() {
        let mut to1a = Step::new(1000, 0).send(1);
        to1a.src = region(3);
        let mut to1b = Step::new(256, 0).send(1);
        to1b.src = region(4);
        let mut to1a_again = Step::new(1, 0).send(1);
        to1a_again.src = region(3);
        let mut from1 = Step::new(257, 0).recv(1);
        from1.dst = region(5);
        let mut ll = Step::new(999, 0).send(1).ll();
        ll.src = region(3);
        let mut to2 = Step::new(999, 0).send(2);
        to2.src = region(3);
        let mut own = Step::new(999, 0).send(0);
        own.src = region(3);
        let empty = Step::new(0, 0).send(1);
        let work = WorkDesc {
            kind: CollKind::SendRecv,
            algo: Algorithm::Ring,
            proto: Protocol::Simple,
            dtype: DataType::Float32,
            reduction: Reduction::none(),
            scratch_elems: 0,
            exposed: false,
            channels: vec![
                ChannelWork::new(vec![to1a, to1b, to1a_again, ll, to2, own, empty]),
                ChannelWork {
                    steps: vec![from1],
                    fifo: Some(5),
                },
            ],
        };
        let task_of = |b: Option<BufId>| b.map_or(0, |b| 100 + b.0 as Handle);
        let slot = SlotData {
            simple: 1024,
            ll: 256,
        };
        let got = net_tasks(&work, task_of, 0, slot, |p| p == 1);
        let conn = |channel, send, ll| ConnKey {
            channel,
            peer: 1,
            send,
            ll,
        };
        let t = |conn, parent, slots, chunk_bytes| ProxyTask {
            conn,
            parent,
            slots,
            chunk_bytes,
        };
        assert_eq!(
            got,
            [
                t(conn(0, true, false), 103, 4, 1024),
                t(conn(0, true, false), 104, 1, 1024),
                t(conn(0, true, false), 103, 1, 1024),
                // 999 elements of 64 per LL slot.
                t(conn(0, true, true), 103, 16, 256),
                t(conn(5, false, false), 105, 2, 1024),
            ]
        );
    }
}
