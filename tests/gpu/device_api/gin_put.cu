// A program written against NVIDIA's NCCL 2.28 device API (nccl_device.h from the
// nvidia-nccl-cu13 wheel) that uses device-initiated networking (GIN), run unchanged on
// whichever libnccl.so.2 is loaded: NRANKS ranks, one thread each, rank r on GPU r % GPUs.
// Each rank registers one symmetric window (its input, a slice per rank to receive into, and a
// word per rank for values) and creates a device communicator with a GIN signal and counter
// and a world barrier. Its kernel, ITERS times with new inputs: a world barrier (LSA, then
// GIN across the rail team), then a put of its input into every rank's slice for it (itself
// included; a thread per peer, each with a signal increment and a counter increment), a
// putValue of one word to the next rank, waits for the signal (every put and the value landed
// here), the counter (its sources consumed) and a flush, and a last world barrier; then its
// first thread checks that the signal and the counter grew by exactly that much and resets
// both to 0 (nothing is on its way to them until every rank's next barrier), so the next
// iteration starts from 0. Every received element is checked; the last line is
// `RESULT pass=P fail=F`.
//
// oxccl carries GIN over any network through its host proxy; NVIDIA's NCCL 2.28.9 needs an
// InfiniBand network or a GIN plugin for it.
//
// Usage: device-gin-check [NRANKS] [COUNT] [ITERS]
#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "check.h"

constexpr int kThreads = 128;

// Where each part of the window lies, in bytes.
struct Layout {
  size_t count;
  int nranks;
  __host__ __device__ size_t slice(int r) const { return (1 + (size_t)r) * count * sizeof(float); }
  __host__ __device__ size_t value(int r) const {
    return ((slice(nranks) + 7) & ~size_t(7)) + (size_t)r * sizeof(uint64_t);
  }
  __host__ __device__ size_t bytes() const { return value(nranks); }
};

__global__ void gin_put(ncclDevComm dc, ncclWindow_t win, Layout l, uint64_t token,
                        unsigned* wrongWords) {
  ncclGin gin(dc, 0);
  ncclTeam world = ncclTeamWorld(dc);
  uint64_t signal0 = gin.readSignal(0);
  uint64_t counter0 = gin.readCounter(0);
  {
    // Every rank's input and poisoned slices are in place before any put.
    ncclBarrierSession<ncclCoopCta> bar(ncclCoopCta(), ncclTeamTagWorld(), gin, 0);
    bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel, ncclGinFenceLevel::Relaxed);
  }
  for (int peer = threadIdx.x; peer < dc.nRanks; peer += blockDim.x) {
    gin.put(world, peer, win, l.slice(dc.rank), win, 0, l.count * sizeof(float),
            ncclGin_SignalInc{0}, ncclGin_CounterInc{0});
  }
  if (threadIdx.x == 0) {
    gin.putValue(world, (dc.rank + 1) % dc.nRanks, win, l.value(dc.rank), token,
                 ncclGin_SignalInc{0});
  }
  __syncthreads();
  gin.waitSignal(ncclCoopCta(), 0, signal0 + dc.nRanks + 1);
  gin.waitCounter(ncclCoopCta(), 0, counter0 + dc.nRanks);
  gin.flush(ncclCoopCta());
  {
    // Nobody writes its next input while a peer's put may still read this one.
    ncclBarrierSession<ncclCoopCta> bar(ncclCoopCta(), ncclTeamTagWorld(), gin, 0);
    bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel, ncclGinFenceLevel::Relaxed);
  }
  if (threadIdx.x == 0) {
    if (gin.readSignal(0) != signal0 + dc.nRanks + 1) atomicAdd(wrongWords, 1);
    if (gin.readCounter(0) != counter0 + dc.nRanks) atomicAdd(wrongWords, 1);
    gin.resetSignal(0);
    gin.resetCounter(0);
  }
}

static float input(int rank, int iter, size_t i) {
  return (float)((rank + 1) * 1000 + iter * 7 + (int)(i % 13));
}
static uint64_t token(int rank, int iter) { return (uint64_t(rank + 1) << 40) | (uint64_t)iter; }

int main(int argc, char** argv) {
  RankArgs a;
  if (!readRankArgs(argc, argv, 65537, a)) return 2;
  const int gpus = a.gpus, n = a.n, iters = a.iters;
  const size_t count = a.count;
  return runRanks(n, argv, [&](const int rank, ncclUniqueId id, bool& failed, RankTally& tally) {
    CHECK_CUDA(cudaSetDevice(rank % gpus));
    ncclComm_t comm;
    CHECK_NCCL(ncclCommInitRank(&comm, n, id, rank));
    const Layout l = {count, n};
    char* buf = nullptr;
    CHECK_NCCL(ncclMemAlloc((void**)&buf, l.bytes()));
    ncclWindow_t win;
    CHECK_NCCL(ncclCommWindowRegister(comm, buf, l.bytes(), &win, NCCL_WIN_COLL_SYMMETRIC));
    ncclDevCommRequirements reqs = {};
    reqs.barrierCount = 1;
    reqs.ginSignalCount = 1;
    reqs.ginCounterCount = 1;
    ncclDevComm dc;
    CHECK_NCCL(ncclDevCommCreate(comm, &reqs, &dc));
    cudaStream_t s;
    CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    PinnedHost<float> host(count), got((size_t)n * count);
    PinnedHost<uint64_t> values(n);
    PinnedHost<unsigned> wrongWords(1);
    unsigned* devWrongWords = nullptr;
    CHECK_CUDA(cudaMalloc((void**)&devWrongWords, sizeof(unsigned)));
    if (!host.p || !got.p || !values.p || !wrongWords.p) {
      fprintf(stderr, "rank %d: no pinned host memory\n", rank);
      failed = true;
      return;
    }
    for (int it = 0; it < iters; it++) {
      for (size_t i = 0; i < count; i++) host[i] = input(rank, it, i);
      CHECK_CUDA(cudaMemcpyAsync(buf, host.data(), count * sizeof(float),
                                 cudaMemcpyHostToDevice, s));
      // Poison what the peers write.
      CHECK_CUDA(cudaMemsetAsync(buf + l.slice(0), 0xff, l.bytes() - l.slice(0), s));
      CHECK_CUDA(cudaMemsetAsync(devWrongWords, 0, sizeof(unsigned), s));
      gin_put<<<1, kThreads, 0, s>>>(dc, win, l, token(rank, it), devWrongWords);
      CHECK_CUDA(cudaGetLastError());
      CHECK_CUDA(cudaMemcpyAsync(got.data(), buf + l.slice(0), (size_t)n * count * sizeof(float),
                                 cudaMemcpyDeviceToHost, s));
      CHECK_CUDA(cudaMemcpyAsync(values.data(), buf + l.value(0), n * sizeof(uint64_t),
                                 cudaMemcpyDeviceToHost, s));
      CHECK_CUDA(cudaMemcpyAsync(wrongWords.data(), devWrongWords, sizeof(unsigned),
                                 cudaMemcpyDeviceToHost, s));
      CHECK_CUDA(cudaStreamSynchronize(s));
      long wrong = 0;
      if (wrongWords[0] != 0 && wrong++ < 1)
        fprintf(stderr, "rank %d iter %d: the signal or counter did not grow by exactly its puts\n",
                rank, it);
      for (int p = 0; p < n; p++) {
        for (size_t i = 0; i < count; i++) {
          float want = input(p, it, i);
          if (got[(size_t)p * count + i] != want && wrong++ < 3)
            fprintf(stderr, "rank %d iter %d: from rank %d [%zu] = %g, expected %g\n", rank,
                    it, p, i, got[(size_t)p * count + i], want);
        }
      }
      const int prev = (rank + n - 1) % n;
      if (values[prev] != token(prev, it) && wrong++ < 4)
        fprintf(stderr, "rank %d iter %d: value from rank %d = %#llx, expected %#llx\n", rank,
                it, prev, (unsigned long long)values[prev],
                (unsigned long long)token(prev, it));
      (wrong ? tally.fail : tally.pass)++;
    }
    CHECK_CUDA(cudaFree(devWrongWords));
    CHECK_NCCL(ncclDevCommDestroy(comm, &dc));
    CHECK_NCCL(ncclCommWindowDeregister(comm, win));
    CHECK_NCCL(ncclMemFree(buf));
    CHECK_CUDA(cudaStreamDestroy(s));
    CHECK_NCCL(ncclCommDestroy(comm));
  });
}
