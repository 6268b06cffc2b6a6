// How long one GIN call takes after the host has left the GPU idle for a while: one rank puts
// 0 bytes to itself with a signal, waits for the signal and flushes (what every GIN call
// needs from the library's proxy thread), launched after the host slept GAP ms; the kernel's
// time from CUDA events, by gap, beside an empty kernel's after the same gaps (what the GPU
// and driver themselves take to wake). Shows whether the proxy thread still answers at once
// after an idle spell (NVIDIA's proxy thread spins while GIN is on).
//
// Built against oxccl's include/ (ABI-identical to NVIDIA's 2.28.9 header) and run on
// whichever libnccl.so.2 is loaded:
//   nvcc -O2 -std=c++17 -arch=sm_90 -Iinclude tests/gpu/probes/gin_idle_latency.cu \
//     -L<lib dir> -l:libnccl.so.2 -o gin_idle_latency && ./gin_idle_latency
#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#define CHECK(call, ok)                                                    \
  do {                                                                     \
    if (!(call == ok)) {                                                   \
      fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #call);    \
      return 1;                                                            \
    }                                                                      \
  } while (0)

__global__ void empty() {}

__global__ void self_put(ncclDevComm dc, ncclWindow_t win) {
  ncclGin gin(dc, 0);
  uint64_t before = gin.readSignal(0);
  if (threadIdx.x == 0) {
    gin.put(ncclTeamWorld(dc), dc.rank, win, 0, win, 0, 0, ncclGin_SignalInc{0});
  }
  gin.waitSignal(ncclCoopCta(), 0, before + 1);
  gin.flush(ncclCoopCta());
}

int main() {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  int dev = 0;
  ncclComm_t comm;
  CHECK(ncclCommInitAll(&comm, 1, &dev), ncclSuccess);
  void* buf = nullptr;
  CHECK(ncclMemAlloc(&buf, 1 << 20), ncclSuccess);
  ncclWindow_t win;
  CHECK(ncclCommWindowRegister(comm, buf, 1 << 20, &win, NCCL_WIN_COLL_SYMMETRIC), ncclSuccess);
  ncclDevCommRequirements reqs = {};
  reqs.ginForceEnable = true;
  reqs.ginSignalCount = 1;
  ncclDevComm dc;
  CHECK(ncclDevCommCreate(comm, &reqs, &dc), ncclSuccess);
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a), cudaSuccess);
  CHECK(cudaEventCreate(&b), cudaSuccess);
  for (int warm = 0; warm < 20; warm++) self_put<<<1, 32, 0, s>>>(dc, win);
  CHECK(cudaStreamSynchronize(s), cudaSuccess);
  printf("# us per call after the host slept GAP ms: a GIN call (one put to itself, signal,\n");
  printf("# flush) and an empty kernel; median (min-max) of 21\n");
  printf("%8s %24s %24s\n", "gap ms", "GIN call", "empty kernel");
  for (int gap : {0, 1, 4, 10, 50}) {
    printf("%8d", gap);
    for (bool gin : {true, false}) {
      std::vector<float> us;
      for (int rep = 0; rep < 21; rep++) {
        if (gap) std::this_thread::sleep_for(std::chrono::milliseconds(gap));
        cudaEventRecord(a, s);
        if (gin) {
          self_put<<<1, 32, 0, s>>>(dc, win);
        } else {
          empty<<<1, 32, 0, s>>>();
        }
        cudaEventRecord(b, s);
        CHECK(cudaEventSynchronize(b), cudaSuccess);
        float ms = 0;
        cudaEventElapsedTime(&ms, a, b);
        us.push_back(ms * 1000);
      }
      std::sort(us.begin(), us.end());
      printf(" %10.1f (%5.1f-%5.1f)", us[us.size() / 2], us.front(), us.back());
    }
    printf("\n");
  }
  CHECK(cudaGetLastError(), cudaSuccess);
  CHECK(ncclDevCommDestroy(comm, &dc), ncclSuccess);
  CHECK(ncclCommWindowDeregister(comm, win), ncclSuccess);
  CHECK(ncclMemFree(buf), ncclSuccess);
  CHECK(ncclCommDestroy(comm), ncclSuccess);
  return 0;
}
