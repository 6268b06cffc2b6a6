// Which teardown calls leave a global-mode stream capture intact: one thread captures a kernel
// on a stream of its own (blocking or non-blocking) while the same thread or another, in relaxed
// capture mode, makes one call a communicator's destruction makes (frees, stream destruction,
// event and stream waits, VMM unmapping). Prints, per call, whether the call succeeded and
// whether the capture survived.
//
//   nvcc -O2 -std=c++17 -arch=sm_90 tests/gpu/probes/capture_teardown.cu -lcuda -o capture_teardown
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

__global__ void nop(int* p) {
  if (p) *p = 1;
}

struct Case {
  const char* name;
  std::function<void()> setup;  // outside the capture
  std::function<int()> call;    // the teardown call, returns its error code
};

static void* dptr;
static void* hptr;
static cudaStream_t other;
static cudaEvent_t ev;
static CUmemGenericAllocationHandle vmm_handle;
static CUdeviceptr vmm_va;
static size_t vmm_size;

static void vmm_map() {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  cuMemGetAllocationGranularity(&vmm_size, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  cuMemCreate(&vmm_handle, vmm_size, &prop, 0);
  cuMemAddressReserve(&vmm_va, vmm_size, 0, 0, 0);
  cuMemMap(vmm_va, vmm_size, 0, vmm_handle, 0);
  CUmemAccessDesc acc = {};
  acc.location = prop.location;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  cuMemSetAccess(vmm_va, vmm_size, &acc, 1);
}

int main() {
  cudaSetDevice(0);
  cudaFree(nullptr);
  std::vector<Case> cases = {
      {"cudaFree", [] { cudaMalloc(&dptr, 1 << 20); }, [] { return (int)cudaFree(dptr); }},
      {"cudaFreeHost", [] { cudaHostAlloc(&hptr, 1 << 20, cudaHostAllocMapped); },
       [] { return (int)cudaFreeHost(hptr); }},
      {"cuMemFree", [] { cudaMalloc(&dptr, 1 << 20); }, [] { return (int)cuMemFree((CUdeviceptr)dptr); }},
      {"cuMemFreeHost", [] { cuMemHostAlloc(&hptr, 1 << 20, CU_MEMHOSTALLOC_DEVICEMAP); },
       [] { return (int)cuMemFreeHost(hptr); }},
      {"cudaStreamDestroy(other)", [] { cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking); },
       [] { return (int)cudaStreamDestroy(other); }},
      {"cudaStreamSynchronize(other)",
       [] {
         cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking);
         nop<<<1, 1, 0, other>>>(nullptr);
       },
       [] { return (int)cudaStreamSynchronize(other); }},
      {"cudaEventSynchronize(other's)",
       [] {
         cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking);
         cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
         nop<<<1, 1, 0, other>>>(nullptr);
         cudaEventRecord(ev, other);
       },
       [] { return (int)cudaEventSynchronize(ev); }},
      {"cudaEventDestroy", [] { cudaEventCreateWithFlags(&ev, cudaEventDisableTiming); },
       [] { return (int)cudaEventDestroy(ev); }},
      {"cuMemUnmap+Release+AddressFree", [] { vmm_map(); },
       [] {
         int a = cuMemUnmap(vmm_va, vmm_size);
         int b = cuMemRelease(vmm_handle);
         int c = cuMemAddressFree(vmm_va, vmm_size);
         return a ? a : b ? b : c;
       }},
      {"cudaStreamQuery(legacy)", [] {}, [] { return (int)cudaStreamQuery(0); }},
  };
  for (int blocking = 1; blocking >= 0; blocking--) {
    for (int same = 1; same >= 0; same--) {
      for (auto& c : cases) {
        cudaStream_t s;
        cudaStreamCreateWithFlags(&s, blocking ? cudaStreamDefault : cudaStreamNonBlocking);
        c.setup();
        cudaDeviceSynchronize();
        cudaGetLastError();
        int call_rc = -1;
        auto teardown = [&] {
          cudaSetDevice(0);
          cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
          cudaThreadExchangeStreamCaptureMode(&m);
          call_rc = c.call();
          cudaThreadExchangeStreamCaptureMode(&m);
        };
        cudaError_t b = cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
        nop<<<1, 1, 0, s>>>(nullptr);
        if (same) {
          teardown();
        } else {
          std::thread t(teardown);
          t.join();
        }
        nop<<<1, 1, 0, s>>>(nullptr);
        cudaGraph_t g = nullptr;
        cudaError_t e = cudaStreamEndCapture(s, &g);
        printf("%-9s %-7s %-34s call=%-4d begin=%d end=%d (%s)\n", blocking ? "blocking" : "nonblock",
               same ? "same" : "other", c.name, call_rc, (int)b, (int)e, cudaGetErrorName(e));
        if (g) cudaGraphDestroy(g);
        cudaStreamDestroy(s);
        cudaDeviceSynchronize();
        cudaGetLastError();
      }
    }
  }
  return 0;
}
