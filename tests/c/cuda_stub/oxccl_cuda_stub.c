/*
 * A stand-in for the few functions of CUDA's runtime and driver libraries that NVIDIA's
 * Inspector profiler calls when a communicator starts (which device, its UUID, error strings),
 * so that it runs on oxccl's host backend on machines without a GPU. core/build.rs builds it as
 * libcudart.so.12 and .13 (sonames and symbol versions of CUDA's runtime) and libcuda.so (the
 * name the Inspector opens first), in a folder of their own off every library path (anything
 * else looking for CUDA must not find them); a test loads them before the plugin, whose
 * references they then satisfy. Device 0, an all-zero UUID but for the device number, no errors.
 */
#include <string.h>

typedef int status_t;

status_t cudaGetDevice(int* device) {
  *device = 0;
  return 0;
}

const char* cudaGetErrorString(status_t error) {
  return error == 0 ? "no error" : "oxccl CUDA stub: error";
}

status_t cuGetErrorString(status_t error, const char** text) {
  *text = cudaGetErrorString(error);
  return 0;
}

status_t cuDeviceGet(int* device, int ordinal) {
  *device = ordinal;
  return 0;
}

/* CUuuid: 16 bytes. */
status_t cuDeviceGetUuid(unsigned char* uuid, int device) {
  memset(uuid, 0, 16);
  uuid[15] = (unsigned char)device;
  return 0;
}
