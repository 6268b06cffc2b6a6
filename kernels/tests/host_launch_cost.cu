// Host cost of the driver calls an eager launch makes, per call, on this machine.
//
// Eager small collectives are bound by host time (docs/perf/h200x2.md): this prints what each
// call of our launch path costs on its own, so a change to that path can be judged before it is
// built. Each row enqueues N launches of an empty kernel that takes a 136-byte parameter (the
// one-shot kernels' size) and divides the host wall time by N; the kernels themselves run in
// about 2 us, so the stream never runs dry and the host side is what is measured.
//
// Build and run (on a GPU machine):
//   nvcc -O2 -arch=sm_90 -o /tmp/hlc kernels/tests/host_launch_cost.cu -lcuda && /tmp/hlc
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <chrono>

struct Params {
  unsigned char bytes[136];
};

__global__ void empty_kernel(const __grid_constant__ Params p) {
  if (p.bytes[0] == 255 && threadIdx.x == 1000) printf("never\n");
}

// The executor's parameter sizes: inline argument blocks of up to 1008 and 16000 bytes
// (kernels/common/oxccl/work.h), and blocks in between.
template <int B>
struct Sized {
  unsigned char bytes[B];
};
template <int B>
__global__ void sized_kernel(const __grid_constant__ Sized<B> p) {
  if (p.bytes[0] == 255 && threadIdx.x == 1000) printf("never\n");
}

#define CHECK(x)                                                          \
  do {                                                                    \
    cudaError_t e = (x);                                                  \
    if (e != cudaSuccess) {                                               \
      fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
      exit(1);                                                            \
    }                                                                     \
  } while (0)

static const int N = 20000;

template <class F>
static double per_call_us(int devices, F body) {
  for (int d = 0; d < devices; ++d) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaDeviceSynchronize());
  }
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < N; ++i) body(i);
  auto t1 = std::chrono::steady_clock::now();
  for (int d = 0; d < devices; ++d) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaDeviceSynchronize());
  }
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / N;
}

int main() {
  int ndev = 0;
  CHECK(cudaGetDeviceCount(&ndev));
  const int nd = ndev >= 2 ? 2 : 1;
  cudaStream_t s[2], other[2];
  cudaEvent_t ev[2];
  for (int d = 0; d < nd; ++d) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaStreamCreateWithFlags(&s[d], cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&other[d], cudaStreamNonBlocking));
    CHECK(cudaEventCreateWithFlags(&ev[d], cudaEventDisableTiming));
  }
  CHECK(cudaSetDevice(0));
  Params p = {};
  void* args[] = {&p};
  auto launch = [&](int d) {
    CHECK(cudaLaunchKernel((const void*)empty_kernel, dim3(1), dim3(32), args, 0, s[d]));
  };
  CUcontext ctx[2];
  for (int d = 0; d < nd; ++d) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaFree(0));
    cuCtxGetCurrent(&ctx[d]);
  }
  CHECK(cudaSetDevice(0));
  printf("host us per call, %d iterations, %d GPU(s)\n", N, nd);
  printf("  launch                               %6.2f\n", per_call_us(nd, [&](int) { launch(0); }));
  printf("  launch + event record                %6.2f\n", per_call_us(nd, [&](int) {
           launch(0);
           CHECK(cudaEventRecord(ev[0], s[0]));
         }));
  printf("  capture query + launch               %6.2f\n", per_call_us(nd, [&](int) {
           cudaStreamCaptureStatus st;
           CHECK(cudaStreamIsCapturing(s[0], &st));
           launch(0);
         }));
  printf("  cuCtxSetCurrent (same) + launch      %6.2f\n", per_call_us(nd, [&](int) {
           cuCtxSetCurrent(ctx[0]);
           launch(0);
         }));
  // A launch's cost by the size of its inline parameters, against a block passed by address
  // (a pinned staging copy to device memory, then a 16-byte parameter).
  auto sized = [&](auto tag, const char* name) {
    using S = decltype(tag);
    static S big = {};
    void* a[] = {&big};
    printf("  launch, %-28s %6.2f\n", name, per_call_us(nd, [&](int) {
             CHECK(cudaLaunchKernel((const void*)sized_kernel<sizeof(S)>, dim3(1), dim3(32), a, 0,
                                    s[0]));
           }));
  };
  sized(Sized<1008>{}, "1008-byte parameters");
  sized(Sized<4096>{}, "4096-byte parameters");
  sized(Sized<8192>{}, "8192-byte parameters");
  sized(Sized<16000>{}, "16000-byte parameters");
  {
    const size_t block = 8192;
    void *host, *dev;
    CHECK(cudaMallocHost(&host, block));
    CHECK(cudaMalloc(&dev, block));
    Sized<16> ptr = {};
    memcpy(ptr.bytes, &dev, sizeof(dev));
    void* a[] = {&ptr};
    printf("  8 KiB copied to device + launch      %6.2f\n", per_call_us(nd, [&](int) {
             CHECK(cudaMemcpyAsync(dev, host, block, cudaMemcpyHostToDevice, s[0]));
             CHECK(cudaLaunchKernel((const void*)sized_kernel<16>, dim3(1), dim3(32), a, 0, s[0]));
           }));
  }
  printf("  event record alone                   %6.2f\n",
         per_call_us(nd, [&](int) { CHECK(cudaEventRecord(ev[0], s[0])); }));
  printf("  stream wait event alone              %6.2f\n",
         per_call_us(nd, [&](int) { CHECK(cudaStreamWaitEvent(other[0], ev[0], 0)); }));
  if (nd == 2) {
    printf("  2 GPUs: switch + launch, each        %6.2f\n", per_call_us(nd, [&](int i) {
             cuCtxSetCurrent(ctx[i & 1]);
             launch(i & 1);
           }));
    printf("  2 GPUs: switch + launch + record     %6.2f\n", per_call_us(nd, [&](int i) {
             cuCtxSetCurrent(ctx[i & 1]);
             launch(i & 1);
             CHECK(cudaEventRecord(ev[i & 1], s[i & 1]));
           }));
  }
  return 0;
}
