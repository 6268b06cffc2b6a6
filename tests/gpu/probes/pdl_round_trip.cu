// What programmatic dependent launch saves per launch: one kernel per round, launched back to
// back on one stream; each writes a flag to pinned host memory and waits for a CPU thread's
// answer, the way a small NET or SHM message's kernel waits on the host. Prints microseconds per
// round for plain launches and for launches with the programmatic-serialization attribute
// (waiting in `griddepcontrol.wait`, triggering the next launch early or late), then the same
// with an event recorded after each launch (as the transport records its tail event).
//
//   nvcc -O2 -arch=sm_90 tests/gpu/probes/pdl_round_trip.cu -o pdl_round_trip && ./pdl_round_trip
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <thread>

__global__ void round_trip(volatile unsigned* d2h, volatile unsigned* h2d, unsigned i, int mode) {
#if __CUDA_ARCH__ >= 900
  if (mode >= 1) asm volatile("griddepcontrol.wait;" ::: "memory");
  if (mode == 2) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    *d2h = i;
    __threadfence_system();
    while (*h2d != i) {
    }
  }
#if __CUDA_ARCH__ >= 900
  if (mode == 3) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

int main() {
  unsigned *d2h, *h2d;
  cudaHostAlloc(&d2h, 64, cudaHostAllocMapped);
  cudaHostAlloc(&h2d, 64, cudaHostAllocMapped);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaEvent_t ev;
  cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  const char* names[] = {"plain", "pdl-wait", "pdl-trigger-early", "pdl-trigger-late"};
  const unsigned rounds = 20000;
  for (int with_event = 0; with_event < 2; with_event++) {
    for (int mode = 0; mode < 4; mode++) {
      *d2h = 0;
      *h2d = 0;
      std::thread answer([&] {
        for (unsigned i = 1; i <= rounds; i++) {
          while (((volatile unsigned*)d2h)[0] != i) {
          }
          ((volatile unsigned*)h2d)[0] = i;
        }
      });
      auto t0 = std::chrono::steady_clock::now();
      for (unsigned i = 1; i <= rounds; i++) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(1);
        cfg.blockDim = dim3(32);
        cfg.stream = s;
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = at;
        cfg.numAttrs = mode >= 1 ? 1 : 0;
        cudaError_t e = cudaLaunchKernelEx(&cfg, round_trip, (volatile unsigned*)d2h,
                                           (volatile unsigned*)h2d, i, mode);
        if (e != cudaSuccess) {
          printf("launch: %s\n", cudaGetErrorString(e));
          return 1;
        }
        if (with_event) cudaEventRecord(ev, s);
      }
      cudaStreamSynchronize(s);
      auto t1 = std::chrono::steady_clock::now();
      answer.join();
      printf("%-18s%-7s %.2f us per round\n", names[mode], with_event ? " +event" : "",
             std::chrono::duration<double, std::micro>(t1 - t0).count() / rounds);
    }
  }
  return 0;
}
