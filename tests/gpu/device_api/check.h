// What the device API programs (lsa_sum.cu, gin_put.cu) share: their ranks' threads and tally
// (runRanks), pinned host buffers (PinnedHost), and the error checks of a rank's body, where
// `rank` and `failed` are in scope: a failed call prints what failed and returns. Include it
// after nccl.h.
#pragma once

#include <cuda_runtime.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#define CHECK_CUDA(x)                                                                   \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      fprintf(stderr, "rank %d: %s: %s\n", rank, #x, cudaGetErrorString(e_));           \
      failed = true;                                                                    \
      return;                                                                           \
    }                                                                                   \
  } while (0)
#define CHECK_NCCL(x)                                                                   \
  do {                                                                                  \
    ncclResult_t r_ = (x);                                                              \
    if (r_ != ncclSuccess) {                                                            \
      fprintf(stderr, "rank %d: %s: %s (%s)\n", rank, #x, ncclGetErrorString(r_),       \
              ncclGetLastError(nullptr));                                               \
      failed = true;                                                                    \
      return;                                                                           \
    }                                                                                   \
  } while (0)

/* What both programs take on their command line, [NRANKS] [COUNT] [ITERS], and the GPUs the
 * ranks share (rank r on GPU r % gpus). */
struct RankArgs {
  int gpus = 0;
  int n = 0;
  size_t count = 0;
  int iters = 0;
};

/* Reads the command line into `a` (defaults: a rank per GPU and at least 2, `count`
 * elements, 3 iterations); false, having said so, when there is no GPU. */
inline bool readRankArgs(int argc, char** argv, size_t count, RankArgs& a) {
  if (cudaGetDeviceCount(&a.gpus) != cudaSuccess || a.gpus == 0) {
    fprintf(stderr, "no GPU\n");
    return false;
  }
  a.n = argc > 1 ? atoi(argv[1]) : (a.gpus > 1 ? a.gpus : 2);
  a.count = argc > 2 ? strtoull(argv[2], nullptr, 10) : count;
  a.iters = argc > 3 ? atoi(argv[3]) : 3;
  return true;
}

/* Pinned host memory for a rank's copies (nullptr in `p` when it could not be had). Ranks that
 * share a GPU must not copy through pageable memory: the driver stages a context's pageable
 * copies through one buffer, so a rank's copy waiting for its kernel (itself waiting for a
 * peer) would hold back the copy that peer needs before it can launch its own. */
template <typename T>
struct PinnedHost {
  T* p = nullptr;
  explicit PinnedHost(size_t n) {
    if (cudaMallocHost((void**)&p, n * sizeof(T)) != cudaSuccess) p = nullptr;
  }
  PinnedHost(const PinnedHost&) = delete;
  PinnedHost& operator=(const PinnedHost&) = delete;
  ~PinnedHost() {
    if (p) cudaFreeHost(p);
  }
  T& operator[](size_t i) { return p[i]; }
  T* data() { return p; }
};

/* Checks one rank's body passed and failed. */
struct RankTally {
  long pass = 0, fail = 0;
};

/* A process rank's part (DEVICE_CHECK_CHILD="rank:fd:id in hex"): runs the body and writes
 * "pass fail" to fd for the launcher. */
template <typename Body>
int runChild(const char* spec, Body body) {
  int rank = -1, fd = -1, at = 0;
  ncclUniqueId id;
  if (sscanf(spec, "%d:%d:%n", &rank, &fd, &at) != 2 || strlen(spec + at) != 2 * sizeof(id)) {
    fprintf(stderr, "bad DEVICE_CHECK_CHILD %s\n", spec);
    return 2;
  }
  for (size_t i = 0; i < sizeof(id); i++) {
    unsigned v = 0;
    sscanf(spec + at + 2 * i, "%2x", &v);
    id.internal[i] = (char)v;
  }
  RankTally t;
  bool failed = false;
  body(rank, id, failed, t);
  if (failed) t.fail++;
  dprintf(fd, "%ld %ld", t.pass, t.fail);
  close(fd);
  return t.fail ? 1 : 0;
}

/* Starts rank r of n as this program again on host r*hosts/n (see runRanks) and collects each
 * process's tally; a process that died without one counts one failure. */
inline void runProcesses(int n, int hosts, char** argv, const ncclUniqueId& id,
                         std::vector<RankTally>& tally) {
  char hex[2 * sizeof(id) + 1];
  for (size_t i = 0; i < sizeof(id); i++) sprintf(hex + 2 * i, "%02x", (unsigned char)id.internal[i]);
  std::vector<pid_t> pids(n, -1);
  std::vector<int> reads(n, -1);
  for (int r = 0; r < n; r++) {
    int fds[2];
    if (pipe(fds) != 0) break;
    // Everything the child needs is made before fork: it only closes, asks for SIGKILL with its
    // parent, and execs.
    std::string spec = "DEVICE_CHECK_CHILD=" + std::to_string(r) + ":" + std::to_string(fds[1]) +
                       ":" + hex;
    std::string host = "NCCL_HOSTID=device-check-host-" +
                       std::to_string(hosts > 0 ? r * hosts / n : r);
    std::vector<char*> env;
    for (char** e = environ; *e; e++)
      if (strncmp(*e, "NCCL_HOSTID=", 12) != 0) env.push_back(*e);
    env.push_back(spec.data());
    env.push_back(host.data());
    env.push_back(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      execve("/proc/self/exe", argv, env.data());
      _exit(127);
    }
    close(fds[1]);
    pids[r] = pid;
    reads[r] = fds[0];
  }
  for (int r = 0; r < n; r++) {
    char buf[64] = {0};
    if (reads[r] >= 0) {
      ssize_t got = read(reads[r], buf, sizeof(buf) - 1);
      close(reads[r]);
      if (got <= 0 || sscanf(buf, "%ld %ld", &tally[r].pass, &tally[r].fail) != 2) tally[r].fail++;
    } else {
      tally[r].fail++;
    }
    if (pids[r] > 0) waitpid(pids[r], nullptr, 0);
  }
}

/* Runs body(rank, id, failed, tally) for ranks 0..n-1 of one communicator (id: its unique id,
 * made here), a thread each; a body that sets `failed` counts one more failure. Prints
 * `RESULT pass=P fail=F` and returns the exit status (2: no unique id).
 *
 * With DEVICE_CHECK_HOSTS=H each rank is a process of its own instead (this program again,
 * `argv` as given, rank r with NCCL_HOSTID naming host r*H/n): ranks on different "hosts"
 * reach each other through the network. Processes share a GPU concurrently under MPS. */
template <typename Body>
int runRanks(int n, char** argv, Body body) {
  if (const char* child = getenv("DEVICE_CHECK_CHILD")) return runChild(child, body);
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 2;
  std::vector<RankTally> tally(n);
  if (const char* hosts = getenv("DEVICE_CHECK_HOSTS")) {
    runProcesses(n, atoi(hosts), argv, id, tally);
  } else {
    std::vector<std::thread> threads;
    for (int r = 0; r < n; r++) {
      threads.emplace_back([&, r] {
        bool failed = false;
        body(r, id, failed, tally[r]);
        if (failed) tally[r].fail++;
      });
    }
    for (auto& t : threads) t.join();
  }
  long p = 0, f = 0;
  for (const RankTally& t : tally) p += t.pass, f += t.fail;
  printf("RESULT pass=%ld fail=%ld\n", p, f);
  return f ? 1 : 0;
}
