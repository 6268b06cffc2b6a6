//! Small helpers of the host-backend reliability tests and their worker processes: in-place
//! collectives on f32 buffers, unique ids through the command line, and `/proc` counts.

use oxccl_core::bootstrap::UniqueId;
use oxccl_core::comm::CollArgs;
use oxccl_core::datatype::{DataType, RedOp};
use oxccl_core::host::HostStream;
use oxccl_core::plan::CollKind;
use oxccl_core::{Communicator, HostBackend, Result};

/// Runs `kind` in place on `buf` (sum; `count` elements of `dtype`, `root` where it has one).
///
/// `buf` must hold at least `count` elements of `dtype` (the f32 buffer's bytes).
pub fn coll_in_place(
    comm: &Communicator<HostBackend>,
    stream: &HostStream,
    kind: CollKind,
    buf: &mut [f32],
    count: u64,
    dtype: DataType,
    root: u32,
) -> Result<()> {
    assert!(count as usize * dtype.size() <= std::mem::size_of_val(buf));
    let p = buf.as_mut_ptr() as u64;
    let args = CollArgs {
        kind,
        send: p,
        recv: p,
        count,
        dtype,
        op: RedOp::Sum,
        root,
        layout: None,
    };
    // SAFETY: `buf` holds the operation's bytes (asserted) and outlives the synchronous call.
    unsafe { comm.collective(args, stream) }
}

/// A float sum AllReduce of all of `buf`, in place.
pub fn all_reduce(
    comm: &Communicator<HostBackend>,
    stream: &HostStream,
    buf: &mut [f32],
) -> Result<()> {
    let n = buf.len() as u64;
    coll_in_place(
        comm,
        stream,
        CollKind::AllReduce,
        buf,
        n,
        DataType::Float32,
        0,
    )
}

/// The id as hex, for a worker's command line.
pub fn id_to_hex(id: &UniqueId) -> String {
    id.0.iter().map(|b| format!("{b:02x}")).collect()
}

/// The id from [`id_to_hex`]'s text.
pub fn id_from_hex(hex: &str) -> UniqueId {
    let mut id = [0u8; 128];
    for (k, b) in id.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * k..2 * k + 2], 16).expect("hex unique id");
    }
    UniqueId(id)
}

/// A number field of `/proc/self/status` ("Threads:", "VmRSS:"), 0 when absent.
pub fn proc_status(field: &str) -> usize {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// Open file descriptors of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// `(open fds, threads, RSS in KiB)` of this process.
pub fn usage() -> (usize, usize, usize) {
    (open_fds(), proc_status("Threads:"), proc_status("VmRSS:"))
}

/// [`usage`] once fds and threads are back at or below `base`'s, waiting up to 5 s for the
/// threads and sockets of torn-down communicators to be gone.
pub fn settle(base: (usize, usize, usize)) -> (usize, usize, usize) {
    let t = std::time::Instant::now();
    loop {
        let u = usage();
        if (u.0 <= base.0 && u.1 <= base.1) || t.elapsed() > std::time::Duration::from_secs(5) {
            return u;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

pub use oxccl_core::testing::on_host_ranks;
