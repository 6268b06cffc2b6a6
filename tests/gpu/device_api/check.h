// The error checks of the device API programs (lsa_sum.cu, gin_put.cu): inside a rank's lambda,
// where `rank` and `failed` are in scope, a failed call prints what failed and returns.
#pragma once

#include <cstdio>

#define CHECK_CUDA(x)                                                                   \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      fprintf(stderr, "rank %d: %s: %s\n", rank, #x, cudaGetErrorString(e_));           \
      failed = true;                                                                    \
      return;                                                                           \
    }                                                                                   \
  } while (0)
#define CHECK_NCCL(x)                                                                   \
  do {                                                                                  \
    ncclResult_t r_ = (x);                                                              \
    if (r_ != ncclSuccess) {                                                            \
      fprintf(stderr, "rank %d: %s: %s (%s)\n", rank, #x, ncclGetErrorString(r_),       \
              ncclGetLastError(nullptr));                                               \
      failed = true;                                                                    \
      return;                                                                           \
    }                                                                                   \
  } while (0)
