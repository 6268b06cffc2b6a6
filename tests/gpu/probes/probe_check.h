// The probes' one error check: any nonzero status (cudaError_t, ncclResult_t) ends the program
// with the failing call and its code.
#pragma once
#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                                      \
  do {                                                                                \
    auto r_ = (x);                                                                    \
    if (r_ != 0) {                                                                    \
      std::fprintf(stderr, "%s:%d %s failed: %d\n", __FILE__, __LINE__, #x, (int)r_); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)
