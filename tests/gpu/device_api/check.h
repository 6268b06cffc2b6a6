// What the device API programs (lsa_sum.cu, gin_put.cu) share: their ranks' threads and tally
// (runRanks), pinned host buffers (PinnedHost), and the error checks of a rank's body, where
// `rank` and `failed` are in scope: a failed call prints what failed and returns. Include it
// after nccl.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
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

/* Runs body(rank, id, failed, tally) for ranks 0..n-1 of one communicator (id: its unique id,
 * made here), a thread each; a body that sets `failed` counts one more failure. Prints
 * `RESULT pass=P fail=F` and returns the exit status (2: no unique id). */
template <typename Body>
int runRanks(int n, Body body) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 2;
  std::vector<RankTally> tally(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; r++) {
    threads.emplace_back([&, r] {
      bool failed = false;
      body(r, id, failed, tally[r]);
      if (failed) tally[r].fail++;
    });
  }
  for (auto& t : threads) t.join();
  long p = 0, f = 0;
  for (const RankTally& t : tally) p += t.pass, f += t.fail;
  printf("RESULT pass=%ld fail=%ld\n", p, f);
  return f ? 1 : 0;
}
