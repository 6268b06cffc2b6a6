// What GIN's proxy kernels pay for reading words in mapped host memory, by how many blocks
// read at once: each block's first thread does a chain of system-scope acquire loads (what
// NVIDIA's device code does for GIN signals, consumer indices and counters) of one word, in
// pinned mapped host memory and in device memory, relaxed and acquire; then the blocks spin on
// a host word until a CPU thread sets it, and the probe measures how long the last block took
// to see it. Prints nanoseconds per load and microseconds per wake-up by block count.
//
//   nvcc -O2 -std=c++17 -arch=sm_90 tests/gpu/probes/host_poll_cost.cu -o host_poll_cost && ./host_poll_cost
#include <cuda/atomic>
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <thread>

__device__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Block b's first thread reads `words[b * stride]` `loads` times in a chain; its time lands in
// `ns[b]`.
template <cuda::memory_order Order>
__global__ void load_chain(unsigned long long* words, int stride, int loads, unsigned long long* ns) {
  if (threadIdx.x != 0) return;
  cuda::atomic_ref<unsigned long long, cuda::thread_scope_system> w(words[blockIdx.x * stride]);
  unsigned long long acc = 0, t0 = now_ns();
  for (int i = 0; i < loads; i++) acc += w.load(Order) & 1;
  ns[blockIdx.x] = now_ns() - t0 + (acc > (1ull << 62));
}

// Every block's first thread spins on `flag` until it reaches `want`, then records when.
__global__ void wait_flag(unsigned long long* flag, unsigned long long want, unsigned long long* seen) {
  if (threadIdx.x != 0) return;
  cuda::atomic_ref<unsigned long long, cuda::thread_scope_system> f(*flag);
  while (f.load(cuda::memory_order_acquire) < want) {
  }
  seen[blockIdx.x] = now_ns();
}

__global__ void stamp(unsigned long long* t) { *t = now_ns(); }

int main() {
  const int max_blocks = 128, loads = 64, stride = 16;  // words 128 bytes apart
  unsigned long long *host_words, *dev_words, *ns, *host_flag, *seen, *mark;
  cudaHostAlloc(&host_words, max_blocks * stride * 8, cudaHostAllocMapped);
  cudaMalloc(&dev_words, max_blocks * stride * 8);
  cudaMemset(dev_words, 0, max_blocks * stride * 8);
  cudaHostAlloc(&ns, max_blocks * 8, cudaHostAllocMapped);
  cudaHostAlloc(&host_flag, 64, cudaHostAllocMapped);
  cudaHostAlloc(&seen, max_blocks * 8, cudaHostAllocMapped);
  cudaHostAlloc(&mark, 64, cudaHostAllocMapped);
  unsigned long long *d_host_words, *d_ns, *d_flag, *d_seen, *d_mark;
  cudaHostGetDevicePointer((void**)&d_host_words, host_words, 0);
  cudaHostGetDevicePointer((void**)&d_ns, ns, 0);
  cudaHostGetDevicePointer((void**)&d_flag, host_flag, 0);
  cudaHostGetDevicePointer((void**)&d_seen, seen, 0);
  cudaHostGetDevicePointer((void**)&d_mark, mark, 0);
  cudaStream_t s, side;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
  setvbuf(stdout, nullptr, _IOLBF, 0);
  // Loads every kernel before any spins: with lazy loading, a kernel's first launch waits for
  // the device, which a spinning kernel never frees.
  *host_flag = 1;
  wait_flag<<<1, 32, 0, s>>>(d_flag, 1, d_seen);
  stamp<<<1, 1, 0, side>>>(d_mark);
  cudaDeviceSynchronize();

  printf("# ns per load, mean over blocks (max), %d chained loads per block\n", loads);
  printf("%-28s %8s %8s %8s %8s %8s\n", "memory/order", "1", "4", "16", "64", "128");
  struct Case { const char* name; bool host; bool acquire; bool shared; };
  const Case cases[] = {{"host, acquire, own word", true, true, false},
                        {"host, acquire, one word", true, true, true},
                        {"host, relaxed, own word", true, false, false},
                        {"device, acquire, own word", false, true, false},
                        {"device, relaxed, own word", false, false, false}};
  for (const Case& c : cases) {
    printf("%-28s", c.name);
    for (int blocks : {1, 4, 16, 64, 128}) {
      unsigned long long* words = c.host ? d_host_words : dev_words;
      int st = c.shared ? 0 : stride;
      double sum = 0, worst = 0;
      for (int rep = 0; rep < 5; rep++) {
        if (c.acquire)
          load_chain<cuda::memory_order_acquire><<<blocks, 32, 0, s>>>(words, st, loads, d_ns);
        else
          load_chain<cuda::memory_order_relaxed><<<blocks, 32, 0, s>>>(words, st, loads, d_ns);
        cudaStreamSynchronize(s);
        if (rep == 0) continue;
        for (int b = 0; b < blocks; b++) {
          double per = (double)ns[b] / loads;
          sum += per / blocks / 4;
          if (per > worst) worst = per;
        }
      }
      printf(" %5.0f(%4.0f)", sum, worst);
    }
    printf("\n");
  }

  printf("# us from the CPU setting a host word until the last spinning block saw it\n");
  printf("%-28s %8s %8s %8s %8s %8s\n", "", "1", "4", "16", "64", "128");
  printf("%-28s", "host word, acquire spin");
  for (int blocks : {1, 4, 16, 64, 128}) {
    double sum = 0;
    const int reps = 20;
    for (int rep = 0; rep < reps; rep++) {
      __atomic_store_n(host_flag, 0ull, __ATOMIC_SEQ_CST);
      wait_flag<<<blocks, 32, 0, s>>>(d_flag, 1, d_seen);
      std::this_thread::sleep_for(std::chrono::microseconds(200));  // every block spinning
      // The GPU's clock when the CPU sets the word: a one-thread kernel on another stream,
      // stamped just before the store (its launch lag is measured below and subtracted).
      stamp<<<1, 1, 0, side>>>(d_mark);
      cudaStreamSynchronize(side);
      __atomic_store_n(host_flag, 1ull, __ATOMIC_SEQ_CST);
      cudaStreamSynchronize(s);
      unsigned long long last = 0;
      for (int b = 0; b < blocks; b++) last = seen[b] > last ? seen[b] : last;
      sum += (double)(last - *mark) / 1000.0 / reps;
    }
    printf(" %8.1f", sum);
  }
  printf("\n# (includes the side stream's synchronize, a few us: compare columns, not absolutes)\n");
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    printf("CUDA error: %s\n", cudaGetErrorString(e));
    return 1;
  }
  return 0;
}
