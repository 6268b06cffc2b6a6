//! How a communicator's NET proxy shares the machine's CPUs: whether LL sends get a thread of
//! their own and whether an idle thread gives its CPU away between passes. Both follow the
//! ranks that share this machine (not the communicator's size, and not `NCCL_HOSTID`'s hosts:
//! ranks that name themselves different hosts on one machine still share its CPUs).

use oxccl_core::bootstrap::Bootstrap;

/// CPUs a rank needs for its LL sends to get a thread of their own: the proxy, the LL send
/// thread and the application's thread all poll. Where the ranks on a machine have fewer, the
/// extra polling threads crowd each other out (docs/perf/defaults.md, "Proxy threads and
/// CPUs").
pub const CPUS_PER_RANK: usize = 3;

/// CPUs a rank needs for its idle proxy threads to spin: besides the polling threads, a large
/// transfer keeps the socket network's helper threads copying. Where the ranks on a machine have
/// fewer, idle passes yield and leave those threads the CPU (docs/perf/defaults.md, "Proxy
/// threads and CPUs").
pub const SPIN_CPUS_PER_RANK: usize = 6;

/// What the proxy threads of one rank do with the CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyCpus {
    /// LL sends are driven by a thread of their own.
    ///
    /// With one thread, a rank's socket write for its own message and its read of the peer's
    /// take turns, so each message waits for the other's system calls. Apart, the peer's
    /// message is read while this rank's write is still in the kernel (docs/perf/defaults.md,
    /// "Proxy threads and CPUs").
    pub ll_send_thread: bool,
    /// A pass that moved nothing ends in `sched_yield` instead of a spin-loop hint, so that
    /// other ranks' polling threads get the CPU (NCCL's progress thread yields likewise).
    pub yield_when_idle: bool,
}

impl ProxyCpus {
    /// Everything on one thread that spins while idle (tests, and the proxy without LL links).
    pub const ONE_SPINNING_THREAD: ProxyCpus = ProxyCpus {
        ll_send_thread: false,
        yield_when_idle: false,
    };

    /// The choice for a rank that shares this machine with `ranks_here - 1` other ranks of the
    /// communicator: by default the LL send thread where the machine has [`CPUS_PER_RANK`]
    /// CPUs per rank, and yielding where it has fewer than [`SPIN_CPUS_PER_RANK`].
    pub fn for_machine(ranks_here: u32) -> ProxyCpus {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        ProxyCpus::decide(cpus, ranks_here)
    }

    /// [`ProxyCpus::for_machine`] given the machine's CPUs.
    fn decide(cpus: usize, ranks_here: u32) -> ProxyCpus {
        let ranks = ranks_here.max(1) as usize;
        ProxyCpus {
            ll_send_thread: !crowded(cpus, ranks_here),
            yield_when_idle: cpus < SPIN_CPUS_PER_RANK * ranks,
        }
    }

    /// "LL sends on their own proxy thread; idle passes spin", for the log.
    pub fn describe(self) -> String {
        let which = if self.ll_send_thread {
            "their own"
        } else {
            "the one"
        };
        let idle = if self.yield_when_idle {
            "yield"
        } else {
            "spin"
        };
        format!("LL sends on {which} proxy thread; idle passes {idle}")
    }
}

/// Whether `ranks_here` ranks share `cpus` CPUs with fewer than [`CPUS_PER_RANK`] each: then
/// a rank's NET side keeps to one proxy thread (no LL send thread), no helper threads for data
/// sockets (`SocketConfig`) and fewer channels (the transport's), as every extra thread takes
/// CPU time the others need.
pub fn crowded(cpus: usize, ranks_here: u32) -> bool {
    cpus < CPUS_PER_RANK * ranks_here.max(1) as usize
}

/// [`crowded`] for this machine's CPUs and the ranks of `bootstrap`'s communicator on it.
pub fn crowded_here(bootstrap: &Bootstrap) -> bool {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    crowded(cpus, ranks_here(bootstrap))
}

/// The ranks of `bootstrap`'s communicator on this machine (`NCCL_HOSTID` aside).
pub fn ranks_here(bootstrap: &Bootstrap) -> u32 {
    let peers = bootstrap.peers();
    let mine = peers[bootstrap.rank() as usize].machine_hash;
    ranks_on_machine(peers.iter().map(|p| p.machine_hash), mine)
}

/// How many of `machines` (one entry per rank) equal `mine`: the ranks on this machine.
pub fn ranks_on_machine(machines: impl IntoIterator<Item = u64>, mine: u64) -> u32 {
    machines.into_iter().filter(|&m| m == mine).count() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decide(cpus: usize, ranks: u32) -> (bool, bool) {
        let c = ProxyCpus::decide(cpus, ranks);
        (c.ll_send_thread, c.yield_when_idle)
    }

    #[test]
    fn the_ranks_on_the_machine_and_its_cpus_decide() {
        assert_eq!(decide(16, 2), (true, false), "8 CPUs per rank");
        assert_eq!(decide(12, 2), (true, false), "6 CPUs per rank");
        assert_eq!(
            decide(16, 4),
            (true, true),
            "4 CPUs per rank: the thread, and yielding"
        );
        assert_eq!(decide(15, 5), (true, true));
        assert_eq!(decide(16, 6), (false, true), "6 ranks crowd 16 CPUs");
        assert_eq!(decide(1, 0), (false, true), "no rank counts as one");
    }

    #[test]
    fn fewer_than_three_cpus_a_rank_is_crowded() {
        assert!(!crowded(16, 4));
        assert!(!crowded(18, 6));
        assert!(crowded(16, 6));
        assert!(crowded(16, 8));
        assert!(!crowded(3, 0), "no rank counts as one");
        assert!(crowded(2, 0));
    }

    #[test]
    fn ranks_on_machine_counts_equal_hashes() {
        assert_eq!(ranks_on_machine([7, 9, 7, 7], 7), 3);
        assert_eq!(ranks_on_machine([9], 7), 0);
    }

    #[test]
    fn describe_names_both_choices() {
        let c = ProxyCpus {
            ll_send_thread: true,
            yield_when_idle: false,
        };
        assert_eq!(
            c.describe(),
            "LL sends on their own proxy thread; idle passes spin"
        );
    }
}
