//! How the socket network cuts and carries messages ([`SocketConfig`]), read from the environment.

use crate::socket_workers::MAX_WORKERS;

/// Largest data socket count (`NCCL_SOCKET_NTHREADS` x `NCCL_NSOCKS_PERTHREAD`, as NCCL caps it).
pub const MAX_SOCKS: usize = 64;

/// How the socket network cuts and carries messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketConfig {
    /// Data sockets per connection; 0 sends everything on the control socket.
    pub nsocks: usize,
    /// Messages up to this size travel inline on the control socket.
    pub inline_max: usize,
    /// Smallest part a data socket carries.
    pub min_task: usize,
    /// Control sockets ask for delayed ACKs after each read with data (`set_quickack`);
    /// local to each side, unlike the fields above, which the connecting side adopts.
    pub delay_acks: bool,
    /// Both directions of a link may share one control socket
    /// ([`Net::pair`](crate::Net::pair)); they do where both ends allow it (each handle says
    /// whether its side does).
    pub duplex: bool,
    /// Most helper threads serving the network's data sockets (local to each side).
    pub workers: usize,
}

impl SocketConfig {
    /// Defaults, changed by `NCCL_SOCKET_NTHREADS` x `NCCL_NSOCKS_PERTHREAD` (data sockets; at
    /// most 64), `NCCL_SOCKET_INLINE`, `NCCL_SOCKET_MIN_TASKSIZE` and `OXCCL_SOCKET_WORKERS`
    /// (most helper threads); delayed ACKs and duplex control sockets always.
    pub fn from_env() -> SocketConfig {
        SocketConfig::from_env_on(false)
    }

    /// [`SocketConfig::from_env`] on a machine whose ranks have few CPUs each (`crowded`):
    /// there no data sockets by default, as NCCL on a NIC it does not know: the proxy thread
    /// moves everything on the control socket, and no helper thread takes CPU time from the
    /// other ranks' (docs/perf/defaults.md, "Crowded machines").
    pub fn from_env_on(crowded: bool) -> SocketConfig {
        use oxccl_core::config::{get, vars};
        let d = SocketConfig {
            nsocks: if crowded { 0 } else { DEFAULT_NSOCKS },
            ..SocketConfig::default()
        };
        let threads = get(&vars::NCCL_SOCKET_NTHREADS);
        let per = get(&vars::NCCL_NSOCKS_PERTHREAD);
        let nsocks = match (threads, per) {
            (None, None) => d.nsocks,
            (t, p) => t.unwrap_or(1).min(16) * p.unwrap_or(1),
        };
        SocketConfig {
            nsocks: nsocks.min(MAX_SOCKS),
            inline_max: get(&vars::NCCL_SOCKET_INLINE).unwrap_or(d.inline_max),
            min_task: get(&vars::NCCL_SOCKET_MIN_TASKSIZE)
                .unwrap_or(d.min_task)
                .max(1),
            delay_acks: true,
            duplex: true,
            workers: get(&vars::OXCCL_SOCKET_WORKERS)
                .filter(|&n| n > 0)
                .unwrap_or(d.workers)
                .min(MAX_WORKERS),
        }
    }
}

/// Most helper threads by default: the data sockets a rank keeps busy in a ring collective (8
/// channels x 2 sockets, to the next rank and from the previous one), so that up to that many
/// every data socket has a thread of its own, blocking in its reads and writes as a thread per
/// socket did. Beyond it sockets share threads, with non-blocking calls, which moved less
/// through loopback TCP, whose copies are the CPU work (docs/perf/defaults.md, "Socket helper
/// threads").
pub const DEFAULT_WORKERS: usize = 32;

/// Data sockets per connection by default (see [`SocketConfig::default`]).
const DEFAULT_NSOCKS: usize = 2;

impl Default for SocketConfig {
    /// Two data sockets: with 4 channels, 8 streams each way per peer, which measured best
    /// (`transport/src/net.rs`, NET_CHANNELS); more sockets only added threads. Parts of at
    /// least 128 KiB (NCCL: 64 KiB): each part wakes a helper thread on both sides, and with
    /// NCCL's tuned 4 threads x 4 sockets, 64 KiB parts made ours slower than NCCL between 512 KiB
    /// and 2 MiB (docs/perf/defaults.md, "Socket parts"). With 2 sockets and 256 KiB slots the
    /// parts are 128 KiB either way.
    fn default() -> SocketConfig {
        SocketConfig {
            nsocks: DEFAULT_NSOCKS,
            inline_max: 64 << 10,
            min_task: 128 << 10,
            delay_acks: true,
            duplex: true,
            workers: DEFAULT_WORKERS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A crowded machine's default is no data sockets, NCCL's on a NIC it does not know;
    /// elsewhere two (unless the variables, which the test environment leaves unset, say).
    #[test]
    fn a_crowded_machine_defaults_to_no_data_sockets() {
        use oxccl_core::config::{is_set, vars};
        if is_set(&vars::NCCL_SOCKET_NTHREADS) || is_set(&vars::NCCL_NSOCKS_PERTHREAD) {
            return;
        }
        assert_eq!(SocketConfig::from_env_on(true).nsocks, 0);
        assert_eq!(SocketConfig::from_env_on(false).nsocks, DEFAULT_NSOCKS);
        assert_eq!(SocketConfig::from_env(), SocketConfig::from_env_on(false));
    }
}
