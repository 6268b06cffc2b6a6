// What an eager operation costs the calling thread, by operation and size: one thread drives
// every GPU (as nccl-tests -g N does) through ncclCommInitAll, issues ITERS operations on all
// communicators without waiting, and prints the host time per issue beside the time per
// operation once the GPUs are done. Where the first approaches the second, the host, not the
// GPU, sets the pace of eager loops. Runs against whichever libnccl.so.2 the loader finds.
//
//   nvcc -O2 -std=c++17 -arch=sm_90 -Iinclude tests/gpu/probes/launch_host_cost.cu \
//     -o launch_host_cost -L<dir of libnccl.so.2> -l:libnccl.so.2
//   ./launch_host_cost [GPUS [ITERS [OP [BYTES [vary]]]]]
// OP, BYTES: only that operation, at that size (any size up to 4 MiB). With `vary`, operation i
// moves BYTES + 16 * (i mod 101) bytes: no two operations in a row look alike, so a library that
// keeps plans for repeated operations builds every one (what nccl-tests' first iterations of a
// size cost it). With `loops`, nccl-tests' timing pattern instead: from 8 B doubling to BYTES,
// ITERS operations out of place then ITERS in place, each loop timed on its own and its slowest
// issue named (where a loop's time goes when it is not the steady state).
#include <cuda_runtime.h>
#include <nccl.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "probe_check.h"

enum Op { SendRecv, Broadcast, AllReduce, AllGather, Gather };
static const char* kNames[] = {"sendrecv", "broadcast", "allreduce", "allgather", "gather"};

struct Rank {
  ncclComm_t comm;
  cudaStream_t stream;
  char* send;
  char* recv;
};

// Issues `op` of `bytes` (per rank, as nccl-tests counts them) on every rank in one group.
static void issue(Op op, std::vector<Rank>& ranks, size_t bytes, bool in_place = false) {
  const int n = (int)ranks.size();
  CHECK(ncclGroupStart());
  for (int r = 0; r < n; r++) {
    Rank k = ranks[r];
    if (in_place) k.send = k.recv;
    switch (op) {
      case SendRecv:
        CHECK(ncclSend(k.send, bytes, ncclInt8, (r + 1) % n, k.comm, k.stream));
        CHECK(ncclRecv(k.recv, bytes, ncclInt8, (r + n - 1) % n, k.comm, k.stream));
        break;
      case Broadcast:
        CHECK(ncclBroadcast(k.send, k.recv, bytes, ncclInt8, 0, k.comm, k.stream));
        break;
      case AllReduce:
        CHECK(ncclAllReduce(k.send, k.recv, bytes / 4, ncclFloat, ncclSum, k.comm, k.stream));
        break;
      case AllGather:
        CHECK(ncclAllGather(k.send, k.recv, bytes / n, ncclInt8, k.comm, k.stream));
        break;
      case Gather:
        CHECK(ncclGather(k.send, k.recv, bytes / n, ncclInt8, 0, k.comm, k.stream));
        break;
    }
  }
  CHECK(ncclGroupEnd());
}

static void sync_all(std::vector<Rank>& ranks) {
  for (size_t r = 0; r < ranks.size(); r++) {
    CHECK(cudaSetDevice((int)r));
    CHECK(cudaStreamSynchronize(ranks[r].stream));
  }
}

using Clock = std::chrono::steady_clock;
static double us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// nccl-tests' pattern (no warm-up per size): per size and placement, `iters` operations, then a
// wait; prints the loop's time per operation, the host's, and its slowest issue.
static void time_loops(Op op, std::vector<Rank>& ranks, int iters, size_t max) {
  std::printf("%-10s %8s %6s %10s %10s %10s %6s\n", "op", "bytes", "place", "op_us", "host_us",
              "worst_us", "at");
  for (size_t bytes = 8; bytes <= max; bytes *= 2) {
    for (int in_place = 0; in_place < 2; in_place++) {
      std::vector<double> each(iters);
      const auto t0 = Clock::now();
      for (int i = 0; i < iters; i++) {
        const auto a = Clock::now();
        issue(op, ranks, bytes, in_place);
        each[i] = us(a, Clock::now());
      }
      const auto t1 = Clock::now();
      sync_all(ranks);
      const auto t2 = Clock::now();
      const auto worst = std::max_element(each.begin(), each.end());
      std::printf("%-10s %8zu %6s %10.2f %10.2f %10.2f %6d\n", kNames[op], bytes,
                  in_place ? "in" : "out", us(t0, t2) / iters, us(t0, t1) / iters, *worst,
                  int(worst - each.begin()));
    }
  }
}

int main(int argc, char** argv) {
  int n = 0;
  CHECK(cudaGetDeviceCount(&n));
  if (argc > 1) n = std::atoi(argv[1]);
  const int iters = argc > 2 ? std::atoi(argv[2]) : 200;
  const char* only_op = argc > 3 ? argv[3] : nullptr;
  const size_t only_bytes = argc > 4 ? std::strtoull(argv[4], nullptr, 0) : 0;
  const bool vary = argc > 5 && std::strcmp(argv[5], "vary") == 0;
  const bool loops = argc > 5 && std::strcmp(argv[5], "loops") == 0;
  const size_t max_bytes = 4 << 20;
  std::vector<int> devs(n);
  for (int i = 0; i < n; i++) devs[i] = i;
  std::vector<ncclComm_t> comms(n);
  CHECK(ncclCommInitAll(comms.data(), n, devs.data()));
  std::vector<Rank> ranks(n);
  for (int r = 0; r < n; r++) {
    CHECK(cudaSetDevice(r));
    ranks[r].comm = comms[r];
    CHECK(cudaStreamCreateWithFlags(&ranks[r].stream, cudaStreamNonBlocking));
    CHECK(cudaMalloc(&ranks[r].send, max_bytes));
    CHECK(cudaMalloc(&ranks[r].recv, max_bytes * n));
    CHECK(cudaMemset(ranks[r].send, 1, max_bytes));
  }
  std::printf("# %d GPUs, one thread, %d operations per point: host us per issue / us per op\n",
              n, iters);
  std::printf("%-10s %8s %10s %10s\n", "op", "bytes", "host_us", "op_us");
  for (Op op : {SendRecv, Broadcast, AllReduce, AllGather, Gather}) {
    if (only_op != nullptr && std::strcmp(only_op, kNames[op]) != 0) continue;
    if (loops) {
      time_loops(op, ranks, iters, std::max(only_bytes, size_t(8)));
      continue;
    }
    std::vector<size_t> sizes = {size_t(16) << 10, size_t(128) << 10, size_t(512) << 10,
                                 size_t(1) << 20,  size_t(2) << 20,   size_t(4) << 20};
    if (only_bytes != 0) sizes = {std::min(only_bytes, max_bytes - 16 * 101)};
    for (size_t bytes : sizes) {
      auto size_of = [&](int i) { return vary ? bytes + 16 * size_t(i % 101) : bytes; };
      for (int i = 0; i < 20; i++) issue(op, ranks, size_of(i));
      sync_all(ranks);
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; i++) issue(op, ranks, size_of(i + 20));
      const auto t1 = std::chrono::steady_clock::now();
      sync_all(ranks);
      const auto t2 = std::chrono::steady_clock::now();
      const double host = std::chrono::duration<double, std::micro>(t1 - t0).count() / iters;
      const double all = std::chrono::duration<double, std::micro>(t2 - t0).count() / iters;
      std::printf("%-10s %8zu %10.2f %10.2f\n", kNames[op], bytes, host, all);
    }
  }
  for (int r = 0; r < n; r++) CHECK(ncclCommDestroy(comms[r]));
  return 0;
}
