// The kernel of lsa_sum.cu, apart so that ffi/tests/device_api/kernels.cu compiles the same
// kernel for AMD GPUs (hipcc, against rccl/nccl_device.h), where lsa_sum.cu's host code, CUDA's
// runtime, does not build. Include it after nccl_device.h (or rccl/nccl_device.h).
#pragma once

#include <stddef.h>

// out[i] = the sum over LSA peers of their in[i]; `in` and `out` are the window's two halves.
__global__ void lsa_sum(ncclDevComm dc, ncclWindow_t win, float* user, size_t count, int* bad) {
  ncclLsaBarrierSession<ncclCoopCta> bar(ncclCoopCta(), dc, ncclTeamLsa(dc), dc.lsaBarrier,
                                         blockIdx.x);
  // Every peer's input is in place before anyone reads it.
  bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);
  float* out = (float*)ncclGetLocalPointer(win, count * sizeof(float));
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
       i += (size_t)gridDim.x * blockDim.x) {
    float s = 0;
    for (int p = 0; p < dc.lsaSize; p++) s += ((const float*)ncclGetLsaPointer(win, 0, p))[i];
    out[i] = s;
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    // The local pointer is another mapping of the user's buffer (the same memory, not the same
    // address), and this rank's world-rank pointer is the local one.
    const float* local = (const float*)ncclGetLocalPointer(win, 0);
    if (local[count - 1] != user[count - 1] || local[0] != user[0]) atomicAdd(bad, 1);
    if (ncclGetPeerPointer(win, 0, dc.rank) != (void*)local) atomicAdd(bad, 1);
  }
  if (blockIdx.x == 0 && threadIdx.x < 32) {
    ncclWindow_t found = ncclFindWindow(ncclCoopWarp(), dc, user + 5);
    if (threadIdx.x == 0 && found != win) atomicAdd(bad, 1);
  }
  // Nobody writes a new input while a peer may still read the old one.
  bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);
}
