//! The correctness matrix through the safe `oxccl` API: the cases and references of
//! [`crate::suite`], run on typed [`DeviceBuffer`]s with the typed methods, in and out of place.

use crate::{Case, POISON, TestOp, alltoallv_layout, count_wrong, fill_input};
use oxccl::{AllToAllv, Collectives, Communicator, DeviceBuffer, Element, ReduceOp};
use oxccl_core::datatype::DataType;
use oxccl_core::plan::CollKind;

/// An element read from and written to little-endian bytes (the references work on bytes).
trait LeBytes: Element {
    fn read(b: &[u8]) -> Self;
    fn write(self, out: &mut [u8]);
}

macro_rules! le_bytes {
    ($($t:ty),*) => {$(
        impl LeBytes for $t {
            fn read(b: &[u8]) -> Self {
                <$t>::from_le_bytes(b.try_into().expect("one element"))
            }
            fn write(self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}
le_bytes!(
    i8,
    u8,
    i32,
    u32,
    i64,
    u64,
    f32,
    f64,
    oxccl::f16,
    oxccl::bf16
);

impl LeBytes for oxccl::F8E4M3 {
    fn read(b: &[u8]) -> Self {
        oxccl::F8E4M3::from_bits(b[0])
    }
    fn write(self, out: &mut [u8]) {
        out[0] = self.to_bits();
    }
}

impl LeBytes for oxccl::F8E5M2 {
    fn read(b: &[u8]) -> Self {
        oxccl::F8E5M2::from_bits(b[0])
    }
    fn write(self, out: &mut [u8]) {
        out[0] = self.to_bits();
    }
}

fn elems<T: LeBytes>(b: &[u8]) -> Vec<T> {
    b.chunks_exact(size_of::<T>()).map(T::read).collect()
}

fn bytes<T: LeBytes>(v: &[T]) -> Vec<u8> {
    let mut out = vec![0u8; std::mem::size_of_val(v)];
    for (x, o) in v.iter().zip(out.chunks_exact_mut(size_of::<T>())) {
        x.write(o);
    }
    out
}

/// Runs one case on this rank through the safe API; returns the number of wrong elements.
pub fn run_safe_case(comm: &Communicator, case: &Case) -> oxccl::Result<usize> {
    match case.dtype {
        DataType::Int8 => typed::<i8>(comm, case),
        DataType::Uint8 => typed::<u8>(comm, case),
        DataType::Int32 => typed::<i32>(comm, case),
        DataType::Uint32 => typed::<u32>(comm, case),
        DataType::Int64 => typed::<i64>(comm, case),
        DataType::Uint64 => typed::<u64>(comm, case),
        DataType::Float16 => typed::<oxccl::f16>(comm, case),
        DataType::Float32 => typed::<f32>(comm, case),
        DataType::Float64 => typed::<f64>(comm, case),
        DataType::Bfloat16 => typed::<oxccl::bf16>(comm, case),
        DataType::Float8E4M3 => typed::<oxccl::F8E4M3>(comm, case),
        DataType::Float8E5M2 => typed::<oxccl::F8E5M2>(comm, case),
    }
}

/// Runs every case; returns descriptions of the failed ones.
pub fn run_safe_cases(comm: &Communicator, cases: &[Case]) -> Vec<String> {
    let rank = comm.rank();
    cases
        .iter()
        .filter_map(|case| match run_safe_case(comm, case) {
            Ok(0) => None,
            Ok(w) => Some(format!("rank {rank}: {case:?}: {w} wrong elements")),
            Err(e) => Some(format!("rank {rank}: {case:?}: error {e}")),
        })
        .collect()
}

/// The typed operator of a test operator.
fn op_of<T: LeBytes>(op: Option<TestOp>) -> ReduceOp<T> {
    match op {
        None | Some(TestOp::Sum) => ReduceOp::Sum,
        Some(TestOp::Prod) => ReduceOp::Prod,
        Some(TestOp::Max) => ReduceOp::Max,
        Some(TestOp::Min) => ReduceOp::Min,
        Some(TestOp::Avg) => ReduceOp::Avg,
        Some(TestOp::PreMulSum) => {
            ReduceOp::PreMulSum(T::read(&TestOp::scalar(T::DTYPE).bytes[..size_of::<T>()]))
        }
    }
}

fn typed<T: LeBytes>(comm: &Communicator, case: &Case) -> oxccl::Result<usize> {
    let (n, me, c, root) = (comm.size(), comm.rank(), case.count, case.root);
    let es = size_of::<T>();
    let (send_elems, recv_elems) = case.sizes(n, me);
    let mut input = vec![POISON; send_elems * es];
    fill_input(case.dtype, case.op, me, 0, &mut input);
    let input: Vec<T> = elems(&input);
    let poison = |len: usize| elems::<T>(&vec![POISON; len * es]);
    let dev = comm.device();
    let op = op_of::<T>(case.op);
    let is_root = me == root;
    // The output bytes to compare with the reference.
    let got: Vec<T> = if case.in_place {
        match case.kind {
            CollKind::AllReduce | CollKind::Broadcast | CollKind::Reduce => {
                let mut buf = dev.buffer_from(&input)?;
                match case.kind {
                    CollKind::AllReduce => comm.all_reduce_in_place(&mut buf, op)?,
                    CollKind::Broadcast => comm.broadcast_in_place(&mut buf, root)?,
                    _ => comm.reduce_in_place(&mut buf, op, root)?,
                }
                buf.to_vec()?
            }
            CollKind::AllGather | CollKind::Gather => {
                let mut all = poison(c * n);
                all[me * c..(me + 1) * c].copy_from_slice(&input);
                let mut buf = dev.buffer_from(&all)?;
                if case.kind == CollKind::AllGather {
                    comm.all_gather_in_place(&mut buf)?;
                } else {
                    comm.gather_in_place(&mut buf, root)?;
                }
                buf.to_vec()?
            }
            CollKind::ReduceScatter | CollKind::Scatter => {
                let start = if case.kind == CollKind::Scatter && !is_root {
                    poison(c * n)
                } else {
                    input.clone()
                };
                let mut buf = dev.buffer_from(&start)?;
                if case.kind == CollKind::ReduceScatter {
                    comm.reduce_scatter_in_place(&mut buf, op)?;
                } else {
                    comm.scatter_in_place(&mut buf, root)?;
                }
                buf.to_vec()?[me * c..(me + 1) * c].to_vec()
            }
            other => unreachable!("no in-place {other:?} in the matrix"),
        }
    } else {
        let send = dev.buffer_from(&input)?;
        let mut recv = dev.buffer_from(&poison(recv_elems))?;
        match case.kind {
            CollKind::AllReduce => comm.all_reduce(&send, &mut recv, op)?,
            CollKind::Broadcast => {
                comm.broadcast(Some(send.as_slice()).filter(|_| is_root), &mut recv, root)?
            }
            CollKind::Reduce => comm.reduce(
                &send,
                Some(recv.as_mut_slice()).filter(|_| is_root),
                op,
                root,
            )?,
            CollKind::AllGather => comm.all_gather(&send, &mut recv)?,
            CollKind::ReduceScatter => comm.reduce_scatter(&send, &mut recv, op)?,
            CollKind::AllToAll => comm.all_to_all(&send, &mut recv)?,
            CollKind::Gather => {
                comm.gather(&send, Some(recv.as_mut_slice()).filter(|_| is_root), root)?
            }
            CollKind::Scatter => {
                comm.scatter(Some(send.as_slice()).filter(|_| is_root), &mut recv, root)?
            }
            CollKind::AllToAllv => {
                let l = alltoallv_layout(c, n, me);
                let v = |x: &[u64]| x.iter().map(|&e| e as usize).collect::<Vec<_>>();
                let (sc, so, rc, ro) = (
                    v(&l.send_counts),
                    v(&l.send_displs),
                    v(&l.recv_counts),
                    v(&l.recv_displs),
                );
                let layout = AllToAllv {
                    send_counts: &sc,
                    send_offsets: &so,
                    recv_counts: &rc,
                    recv_offsets: &ro,
                };
                comm.all_to_allv(&send, &mut recv, layout)?
            }
            CollKind::SendRecv => unreachable!("send/receive cases are not collectives"),
        }
        recv.to_vec()?
    };
    let Some(want) = case.expected(n, me) else {
        return Ok(0);
    };
    Ok(count_wrong(case.dtype, case.op, &bytes(&got), &want))
}

/// Runs the pairwise exchange every rank does with its neighbours through `send`/`recv` in one
/// group; returns the number of wrong elements received.
pub fn ring_exchange(comm: &Communicator, count: usize) -> oxccl::Result<usize> {
    let (n, me) = (comm.size(), comm.rank());
    let dev = comm.device();
    let mine: Vec<i32> = (0..count).map(|i| (me * 1000 + i) as i32).collect();
    let out = dev.buffer_from(&mine)?;
    let mut inbox: DeviceBuffer<i32> = dev.alloc(count)?;
    let group = oxccl::Group::start()?;
    group.on(comm).send(&out, (me + 1) % n)?;
    group.on(comm).recv(&mut inbox, (me + n - 1) % n)?;
    group.end()?;
    let from = (me + n - 1) % n;
    Ok(inbox
        .to_vec()?
        .iter()
        .enumerate()
        .filter(|&(i, &v)| v != (from * 1000 + i) as i32)
        .count())
}

/// Runs `f` on every rank of a fresh `n`-rank host communicator, one thread per rank.
pub fn on_ranks<R: Send>(n: usize, f: impl Fn(&Communicator) -> R + Sync) -> Vec<R> {
    on_ranks_of(&oxccl::Runtime::host(), n, f)
}

/// Runs `f` on every rank of a fresh `n`-rank communicator of `rt`, one thread per rank, rank
/// `r` on device `r % devices`.
pub fn on_ranks_of<R: Send>(
    rt: &oxccl::Runtime,
    n: usize,
    f: impl Fn(&Communicator) -> R + Sync,
) -> Vec<R> {
    let id = oxccl::UniqueId::new().unwrap();
    let devices = rt.device_count().unwrap();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|rank| {
                let (rt, f) = (rt.clone(), &f);
                s.spawn(move || {
                    let dev = rt.device(rank % devices).unwrap();
                    let comm = Communicator::init(&id, rank, n, &dev).unwrap();
                    f(&comm)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}
