//! Every environment variable oxccl reads, declared once: name, type, default, scope, and a
//! line of documentation. Read them with [`config::get`](super::get) (`get(&NCCL_P2P_DISABLE)`)
//! or through an [`Env`](super::Env); `docs/environment.md` lists the same names (a test checks).

use super::env::{Entry, Flag, Scope::*, Var};
use std::path::PathBuf;
use std::time::Duration;

macro_rules! vars {
    ($($name:ident: $t:ty = $default:expr, $scope:ident, $doc:literal $(, $more:ident($($arg:expr),*))*;)*) => {
        $(
            #[doc = $doc]
            pub static $name: Var<$t> =
                Var::new(stringify!($name), $default, $scope, $doc)$(.$more($($arg),*))*;
        )*
        /// Every variable, in declaration order.
        pub static ALL: &[&dyn Entry] = &[$(&$name),*];
    };
}

/// A block size the kernels take: a multiple of 32 from 32 to 512 (`MAX_THREADS_PER_BLOCK`).
fn block_threads(t: &Option<u32>) -> bool {
    t.is_some_and(|t| (32..=512).contains(&t) && t % 32 == 0)
}

fn positive(n: &Option<u64>) -> bool {
    n.is_some_and(|n| n > 0)
}

fn fifo_channels(n: &Option<usize>) -> bool {
    n.is_some_and(|n| (1..=64).contains(&n))
}

fn fifo_slots(n: &u32) -> bool {
    (2..=64).contains(n)
}

vars! {
    // Backend choice and loading.
    OXCCL_BACKEND: Option<String> = None, Comm,
        "the backend: host, cuda, hip or auto (unset: auto, the first device backend that loads, else the host)";
    OXCCL_HIP_RUNTIME: Option<PathBuf> = None, Process,
        "the HIP runtime library to open instead of ROCm's";
    OXCCL_HIP_CODE_OBJECT: Option<PathBuf> = None, Process,
        "a code object file with the HIP kernels, instead of the built-in ones";
    ROCM_PATH: Option<PathBuf> = None, Process,
        "ROCm's root: $ROCM_PATH/lib/libamdhip64.so is the first HIP runtime tried";
    NCCL_CUMEM_ENABLE: bool = true, Process,
        "CUDA: 0 allocates with cuMemAlloc and shares with legacy cuIpc* instead of VMM";
    OXCCL_PDL: bool = true, Process,
        "CUDA: 0 launches kernels without programmatic dependent launch (sm_90 and newer)";

    // Launchers (Communicator::from_env).
    RANK: Option<String> = None, Comm, "torchrun's rank of this process (Communicator::from_env; required)";
    WORLD_SIZE: Option<String> = None, Comm, "torchrun's number of processes (Communicator::from_env; required)";
    LOCAL_RANK: Option<String> = None, Comm, "torchrun's rank on this host, which picks the device (default RANK)";
    MASTER_ADDR: Option<String> = None, Comm, "torchrun's rendezvous host";
    MASTER_PORT: Option<String> = None, Comm, "torchrun's store port; the rendezvous uses the next one";
    OXCCL_PORT: Option<u16> = None, Comm, "the rendezvous port of Communicator::from_env (default MASTER_PORT + 1)";
    OXCCL_UNIQUE_ID: Option<String> = None, Comm, "an id's hex text, replacing MASTER_ADDR and the port";
    NCCL_COMM_ID: Option<String> = None, Comm, "host:port of an external bootstrap root";

    // Logging.
    NCCL_DEBUG: Option<String> = None, Process, "log level: VERSION, WARN, INFO or TRACE (unset: no log)";
    NCCL_DEBUG_SUBSYS: Option<String> = None, Process, "subsystems logged (default INIT,BOOTSTRAP,ENV; ^ excludes, ALL)";
    NCCL_DEBUG_FILE: Option<String> = None, Process, "log file instead of stderr (%h host, %p pid)";

    // Communicator options (ncclConfig_t overrides).
    NCCL_COMM_BLOCKING: i64 = 1, Comm, "0: init and operations do not block";
    NCCL_MIN_CTAS: i64 = 1, Comm, "minimum channels (1-64)";
    NCCL_MIN_NCHANNELS: i64 = 1, Comm, "older name of NCCL_MIN_CTAS";
    NCCL_MAX_CTAS: i64 = 64, Comm, "maximum channels (1-64)";
    NCCL_MAX_NCHANNELS: i64 = 64, Comm, "older name of NCCL_MAX_CTAS";
    NCCL_CTA_POLICY: i64 = 0, Comm, "CTA policy (ncclConfig_t's CTAPolicy)";
    OXCCL_INIT_TIMEOUT: Duration = Duration::from_secs(300), Comm, "seconds init waits for every rank";

    // Bootstrap and host identity.
    NCCL_HOSTID: Option<String> = None, Process, "this process's host identity (different values: different hosts)";
    HOSTNAME: Option<String> = None, Process, "host name for messages when /proc and /etc/hostname have none";
    NCCL_SOCKET_IFNAME: Option<String> = None, Comm, "interfaces to use (NCCL syntax: eth, ^docker, =eth0)";
    NCCL_SOCKET_FAMILY: Option<String> = None, Comm, "AF_INET or AF_INET6: only interfaces of that family";

    // Tuning.
    NCCL_ALGO: Option<String> = None, Comm, "algorithms allowed (ring, tree, direct; ^ excludes; per operation with op:list;...)";
    NCCL_PROTO: Option<String> = None, Comm, "protocols allowed (LL, LL128, Simple; ^ excludes)";
    NCCL_P2P_LL_THRESHOLD: Option<u64> = None, Comm, "send/receive messages up to this many bytes move as LL packets (unset: by topology)";
    OXCCL_NCHANNELS: Option<u64> = None, Comm, "channel count for every plan (positive; at most 32 are used)",
        valid(positive, "a positive integer");
    OXCCL_CHUNK_BYTES: Option<u64> = None, Comm, "chunk size for every plan (positive)",
        valid(positive, "a positive integer");
    OXCCL_ONE_SHOT: Option<bool> = None, Comm, "one-shot kernels: 0 off, 1 wherever they take the message (unset: by size)";
    OXCCL_TWO_SHOT: Option<bool> = None, Comm, "two-shot AllReduce kernel: 0 off, 1 wherever it takes the vector (unset: by size)";
    OXCCL_PLAN_CACHE: bool = true, Comm, "0: build every launch's plan afresh (GPU backends keep a communicator's 64 most recent)";
    OXCCL_ZERO_COPY: Option<bool> = None, Comm, "zero-copy plans: 0 off, 1 at every size (unset: by size)";
    OXCCL_SPLIT_DIRECTIONS: Option<bool> = None, Comm, "send/receive groups and AlltoAll send and receive in blocks of their own: 0 never, 1 at every size (unset: by size; equal on every rank)";

    // GPU transports.
    OXCCL_FIFO_CHANNELS: Option<usize> = None, Process, "GPU FIFO channels per peer (1-64; unset: 64 with two ranks, 32 with more; equal on every rank)",
        valid(fifo_channels, "an integer from 1 to 64");
    OXCCL_FIFO_SLOTS: u32 = 8, Process, "Simple slots per FIFO channel (2-64; equal on every rank)",
        valid(fifo_slots, "an integer from 2 to 64");
    OXCCL_FIFO_SLOT_BYTES: u64 = 256 << 10, Process, "bytes per Simple slot (4 KiB-16 MiB, a multiple of 16; equal on every rank)",
        valid(|n| (4 << 10..=16 << 20).contains(n) && n % 16 == 0, "a multiple of 16 from 4096 to 16777216");
    OXCCL_FIFO_LL_SLOTS: u32 = 8, Process, "LL slots per FIFO channel (2-64; equal on every rank)",
        valid(fifo_slots, "an integer from 2 to 64");
    OXCCL_FIFO_LL_SLOT_BYTES: u64 = 16 << 10, Process, "bytes per LL slot (1 KiB-1 MiB, a multiple of 16; equal on every rank)",
        valid(|n| (1 << 10..=1 << 20).contains(n) && n % 16 == 0, "a multiple of 16 from 1024 to 1048576");
    OXCCL_BLOCK_THREADS: Option<u32> = None, Comm, "threads per kernel block for every launch (unset: sized per launch)",
        valid(block_threads, "a multiple of 32 from 32 to 512");
    NCCL_P2P_DISABLE: bool = false, Comm, "1: no P2P between GPUs (SHM, or NET)";
    NCCL_P2P_LEVEL: Option<String> = None, Comm, "LOC or 0: no P2P between GPUs; other levels change nothing";
    NCCL_SHM_DISABLE: bool = false, Comm, "1: no SHM transport between GPUs of one host";
    NCCL_RUNTIME_CONNECT: bool = true, Comm, "0: connect every NET peer at init, not on first use";
    OXCCL_PEER_DEATH_GRACE: Duration = Duration::from_secs(1), Comm,
        "seconds between finding a dead peer and aborting the GPU communicator";

    // The NET transport.
    NCCL_NET: Option<String> = None, Comm, "the network by name (a plugin's, or Socket)";
    NCCL_NET_PLUGIN: Option<String> = None, Process, "network plugin libraries to try (default libnccl-net.so)";
    NCCL_TUNER_PLUGIN: Option<String> = None, Process, "tuner plugin library to load (default: the network plugin's library)";
    NCCL_PROFILER_PLUGIN: Option<String> = None, Process, "profiler plugin library to load (default: the network plugin's library)";
    NCCL_PROFILE_EVENT_MASK: u32 = 0, Process, "event types a profiler plugin starts with (NCCL's bits; the plugin's init may change them)";
    NCCL_ENV_PLUGIN: Option<String> = None, Process, "environment plugin library answering for the environment (read directly, before the registry: default libnccl-env.so)";
    OXCCL_NET_DEVICE: Option<usize> = None, Comm, "the one network device every NET connection uses";
    OXCCL_NET_CHANNELS: Option<u32> = None, Comm, "NET channels per peer (unset: by transport and machine)";
    NCCL_NCHANNELS_PER_NET_PEER: u32 = 2, Comm, "channels of a NET pair no ring or tree joins";
    NCCL_NET_GDR_LEVEL: Option<String> = None, Comm, "farthest GPU-NIC path for GPUDirect RDMA (LOC, PIX, PXB, PHB, SYS; default PXB)";
    NCCL_NET_GDR_READ: bool = true, Comm, "0: no GPUDirect RDMA for send FIFOs";
    NCCL_DMABUF_ENABLE: bool = true, Comm, "0: register GPU memory without dma-buf";
    NCCL_NET_FORCE_FLUSH: bool = false, Comm, "1: flush every GPUDirect RDMA receive";
    NCCL_SOCKET_NTHREADS: Option<usize> = None, Comm, "socket helper threads per connection (with NCCL_NSOCKS_PERTHREAD: data sockets)";
    NCCL_NSOCKS_PERTHREAD: Option<usize> = None, Comm, "data sockets per helper thread";
    NCCL_SOCKET_INLINE: Option<usize> = None, Comm, "largest message sent inline on the control socket";
    NCCL_SOCKET_MIN_TASKSIZE: Option<usize> = None, Comm, "smallest part a message is cut into across data sockets";
    OXCCL_SOCKET_WORKERS: Option<usize> = None, Comm, "most socket helper threads of a communicator";
    OXCCL_NET_TRACE: Option<String> = None, Process, "directory the socket network writes traces of its transfers to";

    // Device-initiated networking (GIN) of the device API.
    NCCL_GIN_ENABLE: bool = true, Comm, "0: device communicators that ask for GIN are refused, and ones spanning hosts do without it";
    NCCL_GIN_NCONTEXTS: u32 = 4, Comm, "GIN contexts of a communicator",
        valid(|n| (1..=4).contains(n), "1 to 4");
    NCCL_GIN_SIGNAL_POOL_SIZE: u32 = 65536, Comm, "GIN signals a communicator's device communicators share",
        valid(|n| (1..=65536).contains(n), "1 to 65536");
    NCCL_GIN_COUNTER_POOL_SIZE: u32 = 65536, Comm, "GIN counters a communicator's device communicators share",
        valid(|n| (1..=65536).contains(n), "1 to 65536");
    NCCL_GIN_PROXY_QUEUE_SIZE: u32 = 256, Comm, "descriptor slots per peer of a GIN context",
        valid(|n| n.is_power_of_two() && *n <= 65536, "a power of two up to 65536");
    NCCL_GIN_TYPE: Option<i64> = None, Comm, "the GIN type: 2 (proxy) is oxccl's only one; -1 or unset: any";
    CUDA_DEVICE_MAX_CONNECTIONS: u32 = 8, Process, "CUDA's hardware queues per device, which streams share (CUDA reads it; oxccl only warns when GIN on a GPU, or ranks of one process sharing a GPU, may stall with fewer than 32)",
        valid(|n| (1..=32).contains(n), "an integer from 1 to 32");
    OXCCL_GIN_PLUGIN: Flag = Flag(true), Comm, "0: GIN over oxccl's own messages even when the network plugin has a GIN plugin of the proxy type";
    OXCCL_GIN_HOST_WORDS: Flag = Flag(false), Comm, "1: GIN's consumer indices, counters and signals in mapped host memory on GPUs too (default: in device memory, which kernels poll faster, where the runtime can write device words from a stream)";

    // Host backend, reliability.
    OXCCL_OP_TIMEOUT: Duration = Duration::ZERO, Comm, "seconds a host-backend receive waits before failing (0: no limit)";
    OXCCL_WATCHDOG_SECONDS: Duration = Duration::from_secs(120), Comm, "an operation incomplete this long starts a hang report (0: off)";
    OXCCL_WATCHDOG_ABORT: Flag = Flag(false), Comm, "1: abort the communicator after a hang report";
    OXCCL_CHECK: Flag = Flag(false), Comm, "1: ranks compare every collective's signature before running it";

    // Test launchers.
    OXCCL_TEST_HOSTS: Option<String> = None, Process,
        "test launchers give their workers this many host ids", hook();
}
