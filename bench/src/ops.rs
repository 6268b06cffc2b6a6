//! The operations: names, nccl-tests' sizes and bandwidth factors, buffer layouts (in and out
//! of place), and one rank's call.

use oxccl_core::plan::CollKind;
use oxccl_tests::cudart::Stream;
use oxccl_tests::nccl_lib::{NcclLib, RawComm};
use std::ffi::c_void;

/// Every operation the benchmark runs, in `--op all` order.
pub const ALL_OPS: [CollKind; 9] = [
    CollKind::AllReduce,
    CollKind::AllGather,
    CollKind::ReduceScatter,
    CollKind::Broadcast,
    CollKind::Reduce,
    CollKind::AllToAll,
    CollKind::Gather,
    CollKind::Scatter,
    CollKind::SendRecv,
];

/// Root of the rooted operations.
pub const ROOT: usize = 0;

/// The operation's `--op` spelling.
pub fn op_name(k: CollKind) -> &'static str {
    match k {
        CollKind::AllReduce => "allreduce",
        CollKind::Broadcast => "broadcast",
        CollKind::Reduce => "reduce",
        CollKind::AllGather => "allgather",
        CollKind::ReduceScatter => "reducescatter",
        CollKind::AllToAll => "alltoall",
        CollKind::Gather => "gather",
        CollKind::Scatter => "scatter",
        CollKind::SendRecv => "sendrecv",
        CollKind::AllToAllv => "alltoallv",
    }
}

/// nccl-tests' bus bandwidth factor for `n` ranks.
pub fn bus_factor(k: CollKind, n: usize) -> f64 {
    let n = n as f64;
    match k {
        CollKind::AllReduce => 2.0 * (n - 1.0) / n,
        CollKind::AllGather
        | CollKind::ReduceScatter
        | CollKind::AllToAll
        | CollKind::Gather
        | CollKind::Scatter => (n - 1.0) / n,
        CollKind::Broadcast | CollKind::Reduce | CollKind::SendRecv | CollKind::AllToAllv => 1.0,
    }
}

/// True for the operations whose message is every rank's block together.
fn per_rank_blocks(k: CollKind) -> bool {
    matches!(
        k,
        CollKind::AllGather
            | CollKind::ReduceScatter
            | CollKind::AllToAll
            | CollKind::Gather
            | CollKind::Scatter
    )
}

/// The API's count for a message of `bytes`, as nccl-tests sizes it.
pub fn count_for(k: CollKind, bytes: usize, es: usize, n: usize) -> usize {
    if per_rank_blocks(k) {
        bytes / es / n
    } else {
        bytes / es
    }
}

/// The message size nccl-tests reports for `count`.
pub fn message_bytes(k: CollKind, count: usize, es: usize, n: usize) -> usize {
    if per_rank_blocks(k) {
        count * es * n
    } else {
        count * es
    }
}

/// True for the reducing operations (they run with ncclSum).
pub fn reducing(k: CollKind) -> bool {
    matches!(
        k,
        CollKind::AllReduce | CollKind::Reduce | CollKind::ReduceScatter
    )
}

/// True when the operation has an in-place form (alltoall and sendrecv have none, as in
/// nccl-tests, which does not check them in place).
pub fn allows_in_place(k: CollKind) -> bool {
    !matches!(
        k,
        CollKind::AllToAll | CollKind::SendRecv | CollKind::AllToAllv
    )
}

/// Elements of the send and receive buffers of one rank, out of place.
pub fn elems(k: CollKind, c: usize, n: usize) -> (usize, usize) {
    match k {
        CollKind::AllReduce | CollKind::Broadcast | CollKind::Reduce | CollKind::SendRecv => (c, c),
        CollKind::AllGather | CollKind::Gather => (c, c * n),
        CollKind::ReduceScatter | CollKind::Scatter => (c * n, c),
        CollKind::AllToAll | CollKind::AllToAllv => (c * n, c * n),
    }
}

/// Which allocated buffer a region lies in.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Buf {
    /// The send buffer.
    Send,
    /// The receive buffer.
    Recv,
}

/// Where one rank's call reads and writes, in elements from the start of a buffer.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Layout {
    /// The call's sendbuff.
    pub send: (Buf, usize),
    /// The call's recvbuff.
    pub recv: (Buf, usize),
    /// The rank's input: buffer, first element, elements.
    pub input: (Buf, usize, usize),
    /// The output to check, in the receive buffer: first element, elements.
    pub output: (usize, usize),
    /// Elements of the receive buffer the call touches (poisoned before each run).
    pub recv_extent: usize,
}

/// The layout of `rank`'s call with count `c` (in place: nccl-tests' offsets, so that
/// allgather/gather send from `recv + rank*c` and reducescatter/scatter receive at it).
pub fn layout(k: CollKind, c: usize, n: usize, rank: usize, in_place: bool) -> Layout {
    let (se, re) = elems(k, c, n);
    if !in_place || !allows_in_place(k) {
        return Layout {
            send: (Buf::Send, 0),
            recv: (Buf::Recv, 0),
            input: (Buf::Send, 0, se),
            output: (0, re),
            recv_extent: re,
        };
    }
    match k {
        CollKind::AllGather | CollKind::Gather => Layout {
            send: (Buf::Recv, rank * c),
            recv: (Buf::Recv, 0),
            input: (Buf::Recv, rank * c, c),
            output: (0, re),
            recv_extent: re,
        },
        CollKind::ReduceScatter | CollKind::Scatter => Layout {
            send: (Buf::Recv, 0),
            recv: (Buf::Recv, rank * c),
            input: (Buf::Recv, 0, se),
            output: (rank * c, c),
            recv_extent: se,
        },
        _ => Layout {
            send: (Buf::Recv, 0),
            recv: (Buf::Recv, 0),
            input: (Buf::Recv, 0, c),
            output: (0, c),
            recv_extent: c,
        },
    }
}

/// Bytes the send and receive buffers need for every operation and size of a sweep.
pub fn buffer_bytes(
    ops: &[CollKind],
    sizes: &[usize],
    es: usize,
    n: usize,
    in_place: bool,
) -> (usize, usize) {
    let (mut send, mut recv) = (0usize, 0usize);
    for &k in ops {
        for &bytes in sizes {
            let c = count_for(k, bytes, es, n);
            let ip = in_place && allows_in_place(k);
            for rank in [0, n - 1] {
                let l = layout(k, c, n, rank, ip);
                let input_end = l.input.1 + l.input.2;
                if l.input.0 == Buf::Send {
                    send = send.max(input_end * es);
                }
                recv = recv.max(l.recv_extent * es).max(input_end * es);
            }
        }
    }
    (send, recv)
}

/// One rank's fixed call parameters.
#[derive(Clone, Copy)]
pub struct RankCall {
    /// The communicator.
    pub comm: RawComm,
    /// This rank.
    pub rank: usize,
    /// Ranks in the communicator.
    pub n: usize,
    /// `ncclDataType_t`.
    pub dt: i32,
    /// Element size in bytes.
    pub es: usize,
    /// The stream (NULL on the host backend).
    pub stream: Stream,
}

/// True when `k` runs as grouped ncclSend/ncclRecv with this library (alltoall always, like
/// nccl-tests; gather and scatter when the library lacks ncclGather/ncclScatter).
pub fn via_p2p(lib: &NcclLib, k: CollKind) -> bool {
    match k {
        CollKind::AllToAll => true,
        CollKind::Gather => lib.gather.is_none(),
        CollKind::Scatter => lib.scatter.is_none(),
        _ => false,
    }
}

/// Runs one operation on one rank with ncclSum and root [`ROOT`].
///
/// # Safety
/// `send` and `recv` are valid for the regions [`layout`] gives for `count` (device memory for
/// a CUDA library, host memory on the host backend), and stay so until the call completes.
pub unsafe fn call(
    lib: &NcclLib,
    k: CollKind,
    ctx: RankCall,
    send: *const u8,
    recv: *mut u8,
    count: usize,
) -> Result<(), String> {
    let RankCall {
        comm,
        rank,
        n,
        dt,
        es,
        stream,
    } = ctx;
    let (s, r) = (send as *const c_void, recv as *mut c_void);
    let root = ROOT as i32;
    let name = op_name(k);
    let block = count * es;
    // Point-to-point pieces of the grouped forms; offsets stay inside `count * n` elements,
    // which the caller guarantees the buffers hold for these operations.
    let send_to = |p: usize, peer: usize| -> i32 {
        // SAFETY: `s + p*block` starts a block of `count` elements inside the send region.
        unsafe {
            (lib.send)(
                s.wrapping_byte_add(p * block),
                count,
                dt,
                peer as i32,
                comm,
                stream,
            )
        }
    };
    let recv_from = |p: usize, peer: usize| -> i32 {
        // SAFETY: `r + p*block` starts a block of `count` elements inside the receive region.
        unsafe {
            (lib.recv)(
                r.wrapping_byte_add(p * block),
                count,
                dt,
                peer as i32,
                comm,
                stream,
            )
        }
    };
    // A group is always closed, and the first error wins.
    let grouped = |body: &dyn Fn() -> i32| -> Result<(), String> {
        // SAFETY: group calls take no pointers.
        lib.check("ncclGroupStart", unsafe { (lib.group_start)() })?;
        let a = body();
        // SAFETY: as above.
        let b = unsafe { (lib.group_end)() };
        lib.check(name, a)?;
        lib.check("ncclGroupEnd", b)
    };
    match k {
        // SAFETY: the caller guarantees both buffers cover `count` elements.
        CollKind::AllReduce => lib.check(name, unsafe {
            (lib.all_reduce)(s, r, count, dt, 0, comm, stream)
        }),
        // SAFETY: as above.
        CollKind::Broadcast => lib.check(name, unsafe {
            (lib.broadcast)(s, r, count, dt, root, comm, stream)
        }),
        // SAFETY: as above.
        CollKind::Reduce => lib.check(name, unsafe {
            (lib.reduce)(s, r, count, dt, 0, root, comm, stream)
        }),
        // SAFETY: the caller guarantees `count` elements to send and `count * n` to receive.
        CollKind::AllGather => lib.check(name, unsafe {
            (lib.all_gather)(s, r, count, dt, comm, stream)
        }),
        // SAFETY: the caller guarantees `count * n` elements to send and `count` to receive.
        CollKind::ReduceScatter => lib.check(name, unsafe {
            (lib.reduce_scatter)(s, r, count, dt, 0, comm, stream)
        }),
        CollKind::Gather if !via_p2p(lib, k) => {
            let f = lib.gather.expect("checked by via_p2p");
            // SAFETY: as for AllGather.
            lib.check(name, unsafe { f(s, r, count, dt, root, comm, stream) })
        }
        CollKind::Scatter if !via_p2p(lib, k) => {
            let f = lib.scatter.expect("checked by via_p2p");
            // SAFETY: as for ReduceScatter.
            lib.check(name, unsafe { f(s, r, count, dt, root, comm, stream) })
        }
        // nccl-tests skips empty grouped collectives.
        _ if count == 0 && k != CollKind::SendRecv => Ok(()),
        CollKind::AllToAll => grouped(&|| {
            (0..n).fold(0, |rc, p| {
                first_error(first_error(rc, send_to(p, p)), recv_from(p, p))
            })
        }),
        CollKind::Gather => grouped(&|| {
            let rc = send_to(0, ROOT);
            if rank != ROOT {
                return rc;
            }
            (0..n).fold(rc, |rc, p| first_error(rc, recv_from(p, p)))
        }),
        CollKind::Scatter => grouped(&|| {
            let rc = if rank == ROOT {
                (0..n).fold(0, |rc, p| first_error(rc, send_to(p, p)))
            } else {
                0
            };
            first_error(rc, recv_from(0, ROOT))
        }),
        CollKind::SendRecv => grouped(&|| {
            let (next, prev) = ((rank + 1) % n, (rank + n - 1) % n);
            first_error(send_to(0, next), recv_from(0, prev))
        }),
        CollKind::AllToAllv => Err("alltoallv is not benchmarked".into()),
    }
}

fn first_error(a: i32, b: i32) -> i32 {
    if a != 0 { a } else { b }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_factors_match_nccl_tests() {
        assert_eq!(bus_factor(CollKind::AllReduce, 8), 1.75);
        assert_eq!(bus_factor(CollKind::AllGather, 4), 0.75);
        assert_eq!(bus_factor(CollKind::AllToAll, 2), 0.5);
        assert_eq!(bus_factor(CollKind::Gather, 2), 0.5);
        assert_eq!(bus_factor(CollKind::Broadcast, 8), 1.0);
        assert_eq!(bus_factor(CollKind::SendRecv, 8), 1.0);
    }

    #[test]
    fn buffers_hold_max_bytes_even_for_8_gib() {
        let sizes = crate::options::sweep_sizes(8, 8 << 30, 2);
        for ip in [false, true] {
            let (s, r) = buffer_bytes(&ALL_OPS, &sizes, 4, 8, ip);
            assert!(s <= 8 << 30 && r <= 8 << 30, "{s} {r}");
            assert_eq!(r, 8 << 30);
        }
        // Every layout stays inside the buffers computed for it.
        for k in ALL_OPS {
            for n in [1, 3, 8] {
                for ip in [false, true] {
                    let (s, r) = buffer_bytes(&[k], &[1000], 4, n, ip);
                    let c = count_for(k, 1000, 4, n);
                    for rank in 0..n {
                        let l = layout(k, c, n, rank, ip);
                        let (se, re) = elems(k, c, n);
                        let end = |b: Buf, off: usize, len: usize| {
                            let cap = if b == Buf::Send { s } else { r };
                            assert!((off + len) * 4 <= cap, "{k:?} n {n} rank {rank} ip {ip}");
                        };
                        end(l.send.0, l.send.1, if ip { 0 } else { se });
                        end(l.recv.0, l.recv.1, if ip { 0 } else { re });
                        end(l.input.0, l.input.1, l.input.2);
                        end(Buf::Recv, l.output.0, l.output.1);
                    }
                }
            }
        }
    }

    #[test]
    fn in_place_offsets_are_nccl_tests() {
        let l = layout(CollKind::AllGather, 10, 4, 2, true);
        assert_eq!((l.send, l.recv), ((Buf::Recv, 20), (Buf::Recv, 0)));
        let l = layout(CollKind::ReduceScatter, 10, 4, 2, true);
        assert_eq!(
            (l.send, l.recv, l.output),
            ((Buf::Recv, 0), (Buf::Recv, 20), (20, 10))
        );
        let l = layout(CollKind::AllToAll, 10, 4, 2, true);
        assert_eq!((l.send, l.recv), ((Buf::Send, 0), (Buf::Recv, 0)));
    }
}
