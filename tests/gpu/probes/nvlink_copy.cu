// How fast SM copies move data between two NVLinked GPUs, by the shape of the copy loop: thread
// blocks, threads per block, 16-byte loads in flight per thread, and how the blocks divide the
// buffer (one contiguous part each, or chunks dealt round the grid). Pushes (the kernel runs on
// the source GPU and stores into the peer), pulls (it runs on the destination and loads from
// the peer), pushes both ways at once (what a send/receive pair does), and the copy engine
// (cudaMemcpyPeerAsync) beside them. Prints one line per shape: GB/s, best and median of REPS.
//
//   nvcc -O3 -std=c++17 -arch=sm_90 tests/gpu/probes/nvlink_copy.cu -o nvlink_copy
//   ./nvlink_copy [MIB [REPS [both]]]   (a third argument: the both-ways shapes only)
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "probe_check.h"

// Copies [begin, end) of 16-byte packs from s to d (and d2 when not null), U loads in flight.
template <int U>
__device__ void copy_range(const uint4* s, uint4* d, uint4* d2, size_t begin, size_t end) {
  const size_t t = blockDim.x;
  size_t p = begin + threadIdx.x;
  for (; p + (U - 1) * t < end; p += U * t) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = s[p + u * t];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      d[p + u * t] = v[u];
      if (d2) d2[p + u * t] = v[u];
    }
  }
  for (; p < end; p += t) {
    d[p] = s[p];
    if (d2) d2[p] = s[p];
  }
}

// chunk == 0: block b copies the b-th contiguous part; else chunks of `chunk` packs, dealt out
// to the blocks in turn.
template <int U>
__global__ void copy_kernel(const uint4* s, uint4* d, uint4* d2, size_t n, size_t chunk) {
  if (chunk == 0) {
    const size_t part = (n + gridDim.x - 1) / gridDim.x;
    const size_t b = blockIdx.x * part, e = b + part < n ? b + part : n;
    if (b < e) copy_range<U>(s, d, d2, b, e);
    return;
  }
  for (size_t b = blockIdx.x * chunk; b < n; b += (size_t)gridDim.x * chunk) {
    copy_range<U>(s, d, d2, b, b + chunk < n ? b + chunk : n);
  }
}

// The first half of the grid copies s to d as copy_kernel does, the second half l to l2: a
// send/receive pair through FIFOs, whose sending blocks store into the peer while its receiving
// blocks copy out of their own FIFO.
template <int U>
__global__ void split_kernel(const uint4* s, uint4* d, const uint4* l, uint4* l2, size_t n) {
  const unsigned half = gridDim.x / 2;
  const bool local = blockIdx.x >= half;
  const unsigned b = local ? blockIdx.x - half : blockIdx.x;
  const size_t part = (n + half - 1) / half;
  const size_t lo = b * part, hi = lo + part < n ? lo + part : n;
  if (lo < hi) copy_range<U>(local ? l : s, local ? l2 : d, nullptr, lo, hi);
}

typedef void (*Kernel)(const uint4*, uint4*, uint4*, size_t, size_t);
typedef void (*SplitKernel)(const uint4*, uint4*, const uint4*, uint4*, size_t);

// The instantiation for `u` loads in flight among those for 1, 2, 4 and 8.
template <class K>
static K by_unroll(int u, K k1, K k2, K k4, K k8) {
  return u == 1 ? k1 : u == 2 ? k2 : u == 4 ? k4 : k8;
}

static SplitKernel split_for(int u) {
  return by_unroll<SplitKernel>(u, split_kernel<1>, split_kernel<2>, split_kernel<4>,
                                split_kernel<8>);
}

static Kernel kernel_for(int u) {
  return by_unroll<Kernel>(u, copy_kernel<1>, copy_kernel<2>, copy_kernel<4>, copy_kernel<8>);
}

struct Side {
  int dev;
  cudaStream_t st;
  cudaEvent_t a, b;
};

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1024;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  const size_t bytes = mib << 20, n = bytes / 16;
  int ndev = 0;
  CHECK(cudaGetDeviceCount(&ndev));
  if (ndev < 2) {
    std::fprintf(stderr, "needs 2 GPUs\n");
    return 1;
  }
  uint4 *buf[2], *loc[2], *fifo[2];
  Side side[2];
  for (int g = 0; g < 2; ++g) {
    CHECK(cudaSetDevice(g));
    CHECK(cudaDeviceEnablePeerAccess(1 - g, 0));
    CHECK(cudaMalloc(&buf[g], bytes));
    CHECK(cudaMalloc(&loc[g], bytes));
    CHECK(cudaMalloc(&fifo[g], bytes));
    CHECK(cudaMemset(buf[g], g + 1, bytes));
    side[g].dev = g;
    CHECK(cudaStreamCreateWithFlags(&side[g].st, cudaStreamNonBlocking));
    CHECK(cudaEventCreate(&side[g].a));
    CHECK(cudaEventCreate(&side[g].b));
  }
  std::printf("# %zu MiB per copy, %d reps; GB/s best median\n", mib, reps);
  // mode: 0 push 0->1, 1 pull (kernel on 1 reads 0), 2 push both ways, 3 push 0->1 with a second
  // local destination (an out-of-place broadcast root), 4 copy engine 0->1, 5 copy engine both,
  // 6 pull both ways, 7 both ways through FIFOs (split_kernel: `blocks` push, as many copy out).
  const char* names[] = {"push", "pull", "push-both", "push+local", "ce", "ce-both", "pull-both",
                         "fifo-both"};
  auto run = [&](int mode, int blocks, int threads, int u, size_t chunk_kib) {
    std::vector<double> gbs;
    Kernel k = kernel_for(u);
    const size_t chunk = chunk_kib * 1024 / 16;
    for (int r = 0; r < reps + 1; ++r) {
      const int nsides = (mode == 2 || mode == 5 || mode == 6 || mode == 7) ? 2 : 1;
      for (int i = 0; i < nsides; ++i) {
        const int g = mode == 1 ? 1 : i;
        Side& sd = side[g];
        CHECK(cudaSetDevice(g));
        CHECK(cudaEventRecord(sd.a, sd.st));
        if (mode == 7) {
          split_for(u)<<<2 * blocks, threads, 0, sd.st>>>(buf[g], fifo[1 - g], fifo[g], loc[g], n);
        } else if (mode == 6) {
          k<<<blocks, threads, 0, sd.st>>>(buf[1 - g], loc[g], nullptr, n, chunk);
        } else if (mode >= 4) {
          CHECK(cudaMemcpyPeerAsync(buf[1 - g], 1 - g, buf[g], g, bytes, sd.st));
        } else if (mode == 1) {
          k<<<blocks, threads, 0, sd.st>>>(buf[0], loc[1], nullptr, n, chunk);
        } else {
          k<<<blocks, threads, 0, sd.st>>>(buf[g], buf[1 - g], mode == 3 ? loc[g] : nullptr, n,
                                           chunk);
        }
        CHECK(cudaGetLastError());
        CHECK(cudaEventRecord(sd.b, sd.st));
      }
      float worst = 0;
      for (int i = 0; i < nsides; ++i) {
        const int g = mode == 1 ? 1 : i;
        CHECK(cudaSetDevice(g));
        CHECK(cudaEventSynchronize(side[g].b));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, side[g].a, side[g].b));
        worst = std::max(worst, ms);
      }
      if (r > 0) gbs.push_back(bytes / (worst * 1e-3) / 1e9);
    }
    std::sort(gbs.begin(), gbs.end());
    std::printf("%-10s blocks %3d threads %4d unroll %d chunk %5zu KiB  %6.1f %6.1f\n", names[mode],
                blocks, threads, u, chunk_kib, gbs.back(), gbs[gbs.size() / 2]);
    std::fflush(stdout);
  };
  run(4, 0, 0, 0, 0);
  run(5, 0, 0, 0, 0);
  // Both ways at once, as send/receive pairs move data: reading, writing, through FIFOs.
  for (int mode : {6, 2, 7}) {
    for (int blocks : {16, 32, 64}) {
      for (int threads : {256, 512, 1024}) {
        for (int u : {4, 8}) run(mode, blocks, threads, u, 0);
      }
    }
  }
  if (argc > 3) return 0;
  for (int mode : {0, 1, 2, 3}) {
    for (int blocks : {16, 24, 32, 48, 64}) {
      for (int threads : {256, 512, 1024}) {
        for (int u : {1, 2, 4, 8}) {
          for (size_t chunk : {0, 64, 512}) run(mode, blocks, threads, u, chunk);
        }
      }
    }
  }
  return 0;
}
