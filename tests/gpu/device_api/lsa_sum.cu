// A program written against NVIDIA's NCCL 2.28 device API (nccl_device.h from the
// nvidia-nccl-cu13 wheel), run unchanged on whichever libnccl.so.2 is loaded: NRANKS ranks, one
// thread each, rank r on GPU r % GPUs (several ranks may share a GPU). Each rank registers a
// symmetric window (in one group after a decoy window), creates a device communicator with LSA
// barriers, and its kernel sums every LSA peer's input through ncclGetLsaPointer between
// barriers, ITERS times with new inputs.
// Every output element is checked; the last line is `RESULT pass=P fail=F`.
//
// Usage: device-api-check [NRANKS] [COUNT] [ITERS]
#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "check.h"

constexpr int kBlocks = 4;
constexpr int kThreads = 256;

#include "lsa_sum_kernel.cuh"

static float input(int rank, int iter, size_t i) { return (float)((rank + 1) * (iter + 1) + (int)(i % 7)); }

int main(int argc, char** argv) {
  RankArgs a;
  if (!readRankArgs(argc, argv, 1048579, a)) return 2;
  const int gpus = a.gpus, n = a.n, iters = a.iters;
  const size_t count = a.count;
  return runRanks(n, argv, [&](const int rank, ncclUniqueId id, bool& failed, RankTally& tally) {
    CHECK_CUDA(cudaSetDevice(rank % gpus));
    ncclComm_t comm;
    CHECK_NCCL(ncclCommInitRank(&comm, n, id, rank));
    ncclTeam lsa = ncclTeamLsa(comm);
    if (lsa.nRanks != n || lsa.rank != rank) {
      fprintf(stderr, "rank %d: LSA team {%d, %d, %d}, expected all %d ranks\n", rank,
              lsa.nRanks, lsa.rank, lsa.stride, n);
      failed = true;
      return;
    }
    const size_t bytes = 2 * count * sizeof(float);
    float* buf = nullptr;
    CHECK_NCCL(ncclMemAlloc((void**)&buf, bytes));
    // A decoy window of the same size, registered in the same group first, full of a value
    // no sum contains: were a rank's window paired with a peer's decoy, the sums show it.
    float* decoy = nullptr;
    CHECK_NCCL(ncclMemAlloc((void**)&decoy, bytes));
    {
      std::vector<float> junk(2 * count, -1e6f);
      CHECK_CUDA(cudaMemcpy(decoy, junk.data(), bytes, cudaMemcpyHostToDevice));
    }
    ncclWindow_t win, decoy_win;
    CHECK_NCCL(ncclGroupStart());
    CHECK_NCCL(ncclCommWindowRegister(comm, decoy, bytes, &decoy_win, NCCL_WIN_COLL_SYMMETRIC));
    CHECK_NCCL(ncclCommWindowRegister(comm, buf, bytes, &win, NCCL_WIN_COLL_SYMMETRIC));
    CHECK_NCCL(ncclGroupEnd());
    ncclDevCommRequirements reqs = {};
    reqs.lsaBarrierCount = kBlocks;
    ncclDevComm dc;
    CHECK_NCCL(ncclDevCommCreate(comm, &reqs, &dc));
    int* bad = nullptr;
    CHECK_CUDA(cudaMalloc(&bad, sizeof(int)));
    CHECK_CUDA(cudaMemset(bad, 0, sizeof(int)));
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    PinnedHost<float> host(count);
    if (!host.p) {
      fprintf(stderr, "rank %d: no pinned host memory\n", rank);
      failed = true;
      return;
    }
    for (int it = 0; it < iters; it++) {
      for (size_t i = 0; i < count; i++) host[i] = input(rank, it, i);
      CHECK_CUDA(cudaMemcpyAsync(buf, host.data(), count * sizeof(float),
                                 cudaMemcpyHostToDevice, s));
      // Poison the output.
      CHECK_CUDA(cudaMemsetAsync(buf + count, 0xff, count * sizeof(float), s));
      lsa_sum<<<kBlocks, kThreads, 0, s>>>(dc, win, buf, count, bad);
      CHECK_CUDA(cudaGetLastError());
      CHECK_CUDA(cudaMemcpyAsync(host.data(), buf + count, count * sizeof(float),
                                 cudaMemcpyDeviceToHost, s));
      CHECK_CUDA(cudaStreamSynchronize(s));
      long wrong = 0;
      for (size_t i = 0; i < count; i++) {
        float want = 0;
        for (int p = 0; p < n; p++) want += input(p, it, i);
        if (host[i] != want && wrong++ < 3)
          fprintf(stderr, "rank %d iter %d: out[%zu] = %g, expected %g\n", rank, it, i,
                  host[i], want);
      }
      (wrong ? tally.fail : tally.pass)++;
    }
    int nbad = 0;
    CHECK_CUDA(cudaMemcpy(&nbad, bad, sizeof(int), cudaMemcpyDeviceToHost));
    if (nbad) {
      fprintf(stderr, "rank %d: %d wrong window pointers\n", rank, nbad);
      tally.fail++;
    } else {
      tally.pass++;
    }
    CHECK_NCCL(ncclDevCommDestroy(comm, &dc));
    CHECK_NCCL(ncclCommWindowDeregister(comm, win));
    CHECK_NCCL(ncclCommWindowDeregister(comm, decoy_win));
    CHECK_NCCL(ncclMemFree(buf));
    CHECK_NCCL(ncclMemFree(decoy));
    CHECK_CUDA(cudaFree(bad));
    CHECK_CUDA(cudaStreamDestroy(s));
    CHECK_NCCL(ncclCommDestroy(comm));
  });
}
