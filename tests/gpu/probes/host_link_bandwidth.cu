// Device <-> pinned host bandwidth, 64 MiB: SM loads and stores (what the SHM transport's
// kernels do) against the copy engines (cudaMemcpyAsync), one direction and both at once (SHM
// between two processes on one GPU moves both ways over the same link).
//
//   nvcc -O2 -std=c++17 -arch=sm_90 tests/gpu/probes/host_link_bandwidth.cu -o host_link_bandwidth
#include <cuda_runtime.h>
#include <cstdio>
__global__ void copy16(const int4* __restrict__ src, int4* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) dst[i] = src[i];
}
int main() {
  const size_t bytes = 64ull << 20, n = bytes / 16;
  void *d0, *d1, *h0, *h1;
  cudaMalloc(&d0, bytes); cudaMalloc(&d1, bytes);
  cudaHostAlloc(&h0, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
  cudaHostAlloc(&h1, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
  cudaStream_t s0, s1; cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking); cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  auto time = [&](const char* name, double moved, auto f) {
    for (int w = 0; w < 2; w++) f();
    cudaDeviceSynchronize();
    cudaEventRecord(a, 0);
    const int it = 10;
    for (int i = 0; i < it; i++) f();
    cudaDeviceSynchronize();
    cudaEventRecord(b, 0); cudaEventSynchronize(b);
    float ms; cudaEventElapsedTime(&ms, a, b);
    printf("%-44s %7.1f GB/s\n", name, moved * it / (ms * 1e6));
  };
  for (int blocks : {8, 32, 132}) {
    char nm[64];
    snprintf(nm, 64, "SM stores device->host, %d blocks", blocks);
    time(nm, bytes, [&] { copy16<<<blocks, 512, 0, s0>>>((int4*)d0, (int4*)h0, n); });
    snprintf(nm, 64, "SM loads host->device, %d blocks", blocks);
    time(nm, bytes, [&] { copy16<<<blocks, 512, 0, s0>>>((int4*)h1, (int4*)d1, n); });
    snprintf(nm, 64, "SM both directions, %d+%d blocks", blocks, blocks);
    time(nm, 2.0 * bytes, [&] { copy16<<<blocks, 512, 0, s0>>>((int4*)d0, (int4*)h0, n); copy16<<<blocks, 512, 0, s1>>>((int4*)h1, (int4*)d1, n); });
  }
  time("copy engine device->host", bytes, [&] { cudaMemcpyAsync(h0, d0, bytes, cudaMemcpyDeviceToHost, s0); });
  time("copy engine host->device", bytes, [&] { cudaMemcpyAsync(d1, h1, bytes, cudaMemcpyHostToDevice, s0); });
  time("copy engines both directions", 2.0 * bytes, [&] { cudaMemcpyAsync(h0, d0, bytes, cudaMemcpyDeviceToHost, s0); cudaMemcpyAsync(d1, h1, bytes, cudaMemcpyHostToDevice, s1); });
  printf("%s\n", cudaGetErrorString(cudaGetLastError()));
}
