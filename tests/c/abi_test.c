/*
 * End-to-end test of oxccl's C ABI, compiled against our header and linked with -lnccl (or, with
 * -DOXCCL_TEST_RCCL, against rccl/rccl.h and -lrccl).
 *
 * Two modes, chosen at run time:
 *  - host (default): OXCCL_BACKEND=host, 4 ranks, buffers are host memory and every call has
 *    completed when it returns (or when ncclGroupEnd returns).
 *  - GPU (OXCCL_TEST_GPU=1): one rank per GPU (at most 4), buffers are CUDA managed
 *    memory, every rank has its own stream and the program synchronizes it before looking at a
 *    buffer. The CUDA driver is loaded with dlopen, so the program never links against CUDA and
 *    the same binary also runs against NVIDIA's libnccl.so.2 for comparison (functions that
 *    library lacks are weak references, and checks of oxccl-only behaviour are skipped there).
 *    The RCCL flavour runs GPU mode only where HIP is CUDA underneath: librccl.so.1's HIP backend
 *    over the test runtime of tests/hip-on-cuda (OXCCL_HIP_RUNTIME set), where a hipStream_t is
 *    a CUstream.
 *
 * Sections: static checks (no communicator), the ranks in processes, the ranks in threads (every
 * collective, in place and out of place, send/recv, split, shrink, non-blocking init, an older
 * ncclConfig_t, abort inside a group), ncclCommInitAll in one thread, and a table of bad
 * arguments. Prints one line per section and "ALL PASS" at the end when nothing failed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef OXCCL_TEST_RCCL
#include <rccl/rccl.h>
typedef hipStream_t stream_t;
#define FLAVOUR "rccl"
#define EXPECTED_VERSION 23004
#else
#include <nccl.h>
typedef cudaStream_t stream_t;
#define FLAVOUR "nccl"
#define EXPECTED_VERSION 22809
#endif

/* Functions a vendor library may lack (oxccl's own, NCCL 2.29 and RCCL extensions, and the
 * newer NCCL 2.2x APIs). Weak references let the binary load against such a library; the checks
 * that need one are skipped when it is absent. */
#define OPTIONAL_FUNCTIONS(X)                                                                   \
  X(oxcclGetVersionString) X(ncclCommGetUniqueId) X(ncclCommGrow) X(ncclCommSuspend)            \
  X(ncclCommResume) X(ncclCommMemStats) X(ncclWinGetUserPtr) X(ncclAlltoAllv) X(ncclAlltoAll)   \
  X(ncclGather) X(ncclScatter) X(ncclCommRevoke) X(ncclCommShrink) X(ncclCommWindowRegister)    \
  X(ncclCommWindowDeregister) X(ncclDevCommCreate) X(ncclTeamWorld) X(ncclTeamLsa)              \
  X(ncclTeamRankToWorld) X(ncclLLA2ACreateRequirement) X(ncclCommInitRankScalable)              \
  X(ncclGroupSimulateEnd) X(ncclCommQueryProperties)
#define STRINGIFY(x) #x
#define WEAK_REF(f) _Pragma(STRINGIFY(weak f))
OPTIONAL_FUNCTIONS(WEAK_REF)
#define HAVE(f) ((f) != NULL)

#define MAX_RANKS 4
#define N 1000 /* elements per buffer: not a power of two */

static int gpu;            /* OXCCL_TEST_GPU=1 */
static int nranks = 4;     /* host mode: 4; GPU mode: one per GPU, at most MAX_RANKS */
static int ndev;           /* GPU mode: devices the driver reports */
static int is_oxccl;       /* the library loaded is oxccl, not a vendor's */
static int failures;
static const char *volatile current_section = "start";

static void fail_count(void) { __atomic_fetch_add(&failures, 1, __ATOMIC_SEQ_CST); }
static int failure_total(void) { return __atomic_load_n(&failures, __ATOMIC_SEQ_CST); }

#define CHECK(cond, ...)                                                  \
  do {                                                                    \
    if (!(cond)) {                                                        \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                \
      fprintf(stderr, __VA_ARGS__);                                       \
      fputc('\n', stderr);                                                \
      fail_count();                                                       \
    }                                                                     \
  } while (0)

/* A failed call stops the rank: carrying on would leave peers waiting in the next collective. */
#define NCCLCHECK(call)                                                                    \
  do {                                                                                     \
    ncclResult_t r_ = (call);                                                              \
    if (r_ != ncclSuccess) {                                                               \
      fprintf(stderr, "FAIL %s:%d: %s returned %d (%s): %s\n", __FILE__, __LINE__, #call, \
              (int)r_, ncclGetErrorString(r_), ncclGetLastError(NULL));                    \
      fail_count();                                                                        \
      return -1;                                                                           \
    }                                                                                      \
  } while (0)

/* ---- The CUDA driver, loaded at run time ----------------------------------------------------- */

/* Declared here with plain C types: the program must build where no CUDA is installed. */
typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;
#define CU_MEM_ATTACH_GLOBAL 0x1
#define CU_STREAM_NON_BLOCKING 0x1

static struct {
  CUresult (*Init)(unsigned int);
  CUresult (*DeviceGetCount)(int *);
  CUresult (*DeviceGet)(CUdevice *, int);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*MemAllocManaged)(CUdeviceptr *, size_t, unsigned int);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*StreamCreate)(CUstream *, unsigned int);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*StreamDestroy)(CUstream);
  CUresult (*GetErrorString)(CUresult, const char **);
} cu;
static CUcontext dev_ctx[MAX_RANKS];

static const char *cu_error(CUresult r) {
  const char *s = NULL;
  if (cu.GetErrorString && cu.GetErrorString(r, &s) == 0 && s) return s;
  return "unknown CUDA error";
}

#define CUCHECK(call)                                                                     \
  do {                                                                                    \
    CUresult c_ = (call);                                                                 \
    if (c_ != 0) {                                                                        \
      fprintf(stderr, "FAIL %s:%d: %s returned %d (%s)\n", __FILE__, __LINE__, #call, c_, \
              cu_error(c_));                                                              \
      fail_count();                                                                       \
      return -1;                                                                          \
    }                                                                                     \
  } while (0)

/* Loads the driver, initializes it and retains the primary context of the first MAX_RANKS
 * devices. Returns the device count, or -1 with a sentence in err. */
static int cuda_start(char *err, size_t errlen) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    snprintf(err, errlen, "no CUDA driver: dlopen(libcuda.so.1) failed: %s", dlerror());
    return -1;
  }
  struct {
    const char *name;
    void **slot;
  } syms[] = {
      {"cuInit", (void **)&cu.Init},
      {"cuDeviceGetCount", (void **)&cu.DeviceGetCount},
      {"cuDeviceGet", (void **)&cu.DeviceGet},
      {"cuDevicePrimaryCtxRetain", (void **)&cu.DevicePrimaryCtxRetain},
      {"cuCtxSetCurrent", (void **)&cu.CtxSetCurrent},
      {"cuMemAllocManaged", (void **)&cu.MemAllocManaged},
      {"cuMemFree_v2", (void **)&cu.MemFree},
      {"cuMemcpyHtoD_v2", (void **)&cu.MemcpyHtoD},
      {"cuMemcpyDtoH_v2", (void **)&cu.MemcpyDtoH},
      {"cuStreamCreate", (void **)&cu.StreamCreate},
      {"cuStreamSynchronize", (void **)&cu.StreamSynchronize},
      {"cuStreamDestroy_v2", (void **)&cu.StreamDestroy},
      {"cuGetErrorString", (void **)&cu.GetErrorString},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    *syms[i].slot = dlsym(lib, syms[i].name);
    if (!*syms[i].slot) {
      snprintf(err, errlen, "CUDA driver lacks %s: %s", syms[i].name, dlerror());
      return -1;
    }
  }
  CUresult r = cu.Init(0);
  if (r) {
    snprintf(err, errlen, "cuInit failed: %d (%s)", r, cu_error(r));
    return -1;
  }
  int count = 0;
  r = cu.DeviceGetCount(&count);
  if (r) {
    snprintf(err, errlen, "cuDeviceGetCount failed: %d (%s)", r, cu_error(r));
    return -1;
  }
  if (count < 1) {
    snprintf(err, errlen, "the CUDA driver reports no device");
    return -1;
  }
  for (int d = 0; d < count && d < MAX_RANKS; d++) {
    CUdevice dev = 0;
    r = cu.DeviceGet(&dev, d);
    if (!r) r = cu.DevicePrimaryCtxRetain(&dev_ctx[d], dev);
    if (r) {
      snprintf(err, errlen, "device %d: no primary context: %d (%s)", d, r, cu_error(r));
      return -1;
    }
  }
  return count;
}

/* CUDA must not be initialized in a process that forks ranks afterwards (a child cannot use a
 * driver its parent initialized), so the device count comes from a short-lived child. */
static int probe_devices(char *err, size_t errlen) {
  int fds[2];
  if (pipe(fds)) {
    snprintf(err, errlen, "pipe failed");
    return -1;
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(err, errlen, "fork failed");
    return -1;
  }
  if (pid == 0) {
    char msg[512];
    close(fds[0]);
    int count = cuda_start(msg, sizeof msg);
    if (count >= 0) snprintf(msg, sizeof msg, "OK %d", count);
    ssize_t w = write(fds[1], msg, strlen(msg));
    _exit(w < 0);
  }
  close(fds[1]);
  char msg[512];
  size_t len = 0;
  ssize_t got;
  while (len < sizeof msg - 1 && (got = read(fds[0], msg + len, sizeof msg - 1 - len)) > 0)
    len += (size_t)got;
  msg[len] = 0;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  int count = -1;
  if (sscanf(msg, "OK %d", &count) == 1) return count;
  if (len) snprintf(err, errlen, "%s", msg);
  else snprintf(err, errlen, "the CUDA probe process died (status %#x)", status);
  return -1;
}

static int bind_device(int dev) {
  if (!gpu) return 0;
  CUCHECK(cu.CtxSetCurrent(dev_ctx[dev]));
  return 0;
}

/* NCCL (and oxccl's CUDA backend) take the device from the calling thread's current context. */
static int rank_device(int rank) { return gpu ? rank % ndev : rank; }
static int bind_rank(int rank) { return bind_device(rank_device(rank)); }

/* Host mode keeps the token it always passed; GPU mode creates a stream on the current device. */
static int stream_new(stream_t *s, stream_t host_token) {
  *s = host_token;
  if (!gpu) return 0;
  CUstream cs = NULL;
  CUCHECK(cu.StreamCreate(&cs, CU_STREAM_NON_BLOCKING));
  *s = (stream_t)cs;
  return 0;
}

static void stream_free(stream_t s) {
  if (gpu && s) {
    CUresult r = cu.StreamDestroy((CUstream)s);
    CHECK(r == 0, "cuStreamDestroy: %d (%s)", r, cu_error(r));
  }
}

/* Host mode: the call has already completed. GPU mode: wait for the rank's stream before the host
 * reads or rewrites a buffer. */
static int sync_rank(stream_t s) {
  if (!gpu) return 0;
  CUCHECK(cu.StreamSynchronize((CUstream)s));
  return 0;
}
#define SYNC(s)                    \
  do {                             \
    if (sync_rank(s)) return -1;   \
  } while (0)

/* ---- Buffers --------------------------------------------------------------------------------- */

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    perror("malloc");
    exit(2);
  }
  return p;
}

/* Buffers NCCL reads or writes. Managed memory in GPU mode, so the checks read them directly. */
static void *buf_alloc(size_t n) {
  if (!gpu) return xmalloc(n);
  CUdeviceptr p = 0;
  CUresult r = cu.MemAllocManaged(&p, n ? n : 1, CU_MEM_ATTACH_GLOBAL);
  if (r) {
    fprintf(stderr, "cuMemAllocManaged(%zu) failed: %d (%s)\n", n, r, cu_error(r));
    exit(2);
  }
  return (void *)(uintptr_t)p;
}

static void buf_free(void *p) {
  if (!gpu) {
    free(p);
    return;
  }
  CUresult r = cu.MemFree((CUdeviceptr)(uintptr_t)p);
  CHECK(r == 0, "cuMemFree: %d (%s)", r, cu_error(r));
}

/* Compares n floats; reports the first few differences. */
static int check_floats(const char *what, int rank, const float *got, const float *want,
                        size_t n) {
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    if (got[i] != want[i]) {
      if (bad < 3)
        fprintf(stderr, "FAIL rank %d %s: element %zu is %g, expected %g\n", rank, what, i,
                (double)got[i], (double)want[i]);
      bad++;
    }
  }
  if (bad) fail_count();
  return bad ? -1 : 0;
}

static int check_ints(const char *what, int rank, const int32_t *got, const int32_t *want,
                      size_t n) {
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    if (got[i] != want[i]) {
      if (bad < 3)
        fprintf(stderr, "FAIL rank %d %s: element %zu is %d, expected %d\n", rank, what, i,
                (int)got[i], (int)want[i]);
      bad++;
    }
  }
  if (bad) fail_count();
  return bad ? -1 : 0;
}

/* Value rank r contributes at index i in the float tests. */
static float val(int r, size_t i) { return (float)(r + 1 + (int)(i % 7)); }

static void fill_f(float *p, size_t n, float v) {
  for (size_t i = 0; i < n; i++) p[i] = v;
}

/* ---- Every collective on one communicator ------------------------------------------------- */

static int test_allreduce(ncclComm_t comm, int rank, int n, stream_t s) {
  float *send = buf_alloc(N * sizeof(float)), *recv = buf_alloc(N * sizeof(float));
  float *want = xmalloc(N * sizeof(float));
  for (size_t i = 0; i < N; i++) {
    send[i] = val(rank, i);
    want[i] = 0;
    for (int r = 0; r < n; r++) want[i] += val(r, i);
  }
  fill_f(recv, N, -1);
  NCCLCHECK(ncclAllReduce(send, recv, N, ncclFloat, ncclSum, comm, s));
  SYNC(s);
  check_floats("allreduce sum", rank, recv, want, N);
  memcpy(recv, send, N * sizeof(float));
  NCCLCHECK(ncclAllReduce(recv, recv, N, ncclFloat32, ncclSum, comm, s));
  SYNC(s);
  check_floats("allreduce sum in place", rank, recv, want, N);

  /* Avg: contributions chosen so the mean is exact. */
  for (size_t i = 0; i < N; i++) {
    send[i] = (float)(4 * (rank + 1)) + (float)(i % 5);
    want[i] = (float)(2 * (n + 1)) + (float)(i % 5);
  }
  NCCLCHECK(ncclAllReduce(send, recv, N, ncclFloat, ncclAvg, comm, s));
  SYNC(s);
  check_floats("allreduce avg", rank, recv, want, N);

  int32_t *is = buf_alloc(N * sizeof(int32_t)), *ir = buf_alloc(N * sizeof(int32_t));
  int32_t *iw = xmalloc(N * sizeof(int32_t));
  for (size_t i = 0; i < N; i++) is[i] = (int32_t)((rank * 37 + (int)i * 11) % 101) - 50;
  for (int op = 0; op < 4; op++) { /* max, min, prod (small values), sum */
    for (size_t i = 0; i < N; i++) {
      if (op == 2) is[i] = (int32_t)((rank + (int)i) % 3) + 1;
      int32_t acc = op == 2 ? 1 : 0;
      for (int r = 0; r < n; r++) {
        int32_t v = op == 2 ? (int32_t)((r + (int)i) % 3) + 1
                            : (int32_t)((r * 37 + (int)i * 11) % 101) - 50;
        if (r == 0 && op < 2) acc = v;
        else if (op == 0) acc = v > acc ? v : acc;
        else if (op == 1) acc = v < acc ? v : acc;
        else if (op == 2) acc *= v;
        else acc += v;
      }
      iw[i] = acc;
    }
    ncclRedOp_t ops[4] = {ncclMax, ncclMin, ncclProd, ncclSum};
    const char *names[4] = {"allreduce int32 max", "allreduce int32 min", "allreduce int32 prod",
                            "allreduce int32 sum"};
    if (op == 3)
      for (size_t i = 0; i < N; i++) is[i] = (int32_t)((rank * 37 + (int)i * 11) % 101) - 50;
    NCCLCHECK(ncclAllReduce(is, ir, N, ncclInt32, ops[op], comm, s));
    SYNC(s);
    check_ints(names[op], rank, ir, iw, N);
  }

  /* Other element types: double, int64, uint8 max, half and bfloat16 (bit patterns). */
  double *ds = buf_alloc(16 * sizeof(double)), *dr = buf_alloc(16 * sizeof(double));
  int64_t *ls = buf_alloc(16 * sizeof(int64_t)), *lr = buf_alloc(16 * sizeof(int64_t));
  uint8_t *us = buf_alloc(16), *ur = buf_alloc(16);
  uint16_t *hs = buf_alloc(16 * 2), *hr = buf_alloc(16 * 2);
  uint16_t *bs = buf_alloc(16 * 2), *br = buf_alloc(16 * 2);
  for (int i = 0; i < 16; i++) {
    ds[i] = 0.5 * (rank + 1);
    ls[i] = ((int64_t)1 << 40) * (rank + 1);
    us[i] = (uint8_t)(rank * 10 + i);
    hs[i] = 0x3C00; /* 1.0 as IEEE half */
    bs[i] = 0x3F80; /* 1.0 as bfloat16 */
  }
  NCCLCHECK(ncclAllReduce(ds, dr, 16, ncclDouble, ncclSum, comm, s));
  NCCLCHECK(ncclAllReduce(ls, lr, 16, ncclInt64, ncclSum, comm, s));
  NCCLCHECK(ncclAllReduce(us, ur, 16, ncclUint8, ncclMax, comm, s));
  NCCLCHECK(ncclAllReduce(hs, hr, 16, ncclHalf, ncclSum, comm, s));
  NCCLCHECK(ncclAllReduce(bs, br, 16, ncclBfloat16, ncclSum, comm, s));
  SYNC(s);
  /* n * 1.0 for n = 1..4 as half and as bfloat16. */
  static const uint16_t half_n[MAX_RANKS + 1] = {0, 0x3C00, 0x4000, 0x4200, 0x4400};
  static const uint16_t bf16_n[MAX_RANKS + 1] = {0, 0x3F80, 0x4000, 0x4040, 0x4080};
  for (int i = 0; i < 16; i++) {
    CHECK(dr[i] == 0.25 * n * (n + 1), "rank %d double sum [%d] = %g", rank, i, dr[i]);
    CHECK(lr[i] == ((int64_t)1 << 40) * n * (n + 1) / 2, "rank %d int64 sum [%d]", rank, i);
    CHECK(ur[i] == (uint8_t)((n - 1) * 10 + i), "rank %d uint8 max [%d] = %d", rank, i, ur[i]);
    CHECK(hr[i] == half_n[n], "rank %d half sum [%d] = %#x, expected %d.0", rank, i, hr[i], n);
    CHECK(br[i] == bf16_n[n], "rank %d bf16 sum [%d] = %#x, expected %d.0", rank, i, br[i], n);
  }
  void *small[] = {ds, dr, ls, lr, us, ur, hs, hr, bs, br};
  for (size_t i = 0; i < sizeof small / sizeof small[0]; i++) buf_free(small[i]);

  /* Count 0 with NULL buffers is a no-op. */
  NCCLCHECK(ncclAllReduce(NULL, NULL, 0, ncclFloat, ncclSum, comm, s));

  /* PreMulSum: host-immediate scalar 2, then a device scalar rank+1 (host memory in host mode,
   * managed memory in GPU mode). */
  ncclRedOp_t premul;
  float two = 2.0f;
  for (size_t i = 0; i < N; i++) {
    send[i] = val(rank, i);
    want[i] = 0;
    for (int r = 0; r < n; r++) want[i] += 2.0f * val(r, i);
  }
  NCCLCHECK(ncclRedOpCreatePreMulSum(&premul, &two, ncclFloat, ncclScalarHostImmediate, comm));
  CHECK((int)premul >= (int)ncclNumOps, "PreMulSum handle %d below ncclNumOps", (int)premul);
  two = 100.0f; /* immediate: the value was copied at creation */
  NCCLCHECK(ncclAllReduce(send, recv, N, ncclFloat, premul, comm, s));
  SYNC(s);
  check_floats("allreduce premulsum immediate", rank, recv, want, N);
  NCCLCHECK(ncclRedOpDestroy(premul, comm));
  float *dscalar = buf_alloc(sizeof(float));
  *dscalar = (float)(rank + 1);
  for (size_t i = 0; i < N; i++) {
    want[i] = 0;
    for (int r = 0; r < n; r++) want[i] += (float)(r + 1) * val(r, i);
  }
  NCCLCHECK(ncclRedOpCreatePreMulSum(&premul, dscalar, ncclFloat, ncclScalarDevice, comm));
  NCCLCHECK(ncclAllReduce(send, recv, N, ncclFloat, premul, comm, s));
  SYNC(s);
  check_floats("allreduce premulsum device scalar", rank, recv, want, N);
  NCCLCHECK(ncclRedOpDestroy(premul, comm));

  buf_free(dscalar);
  buf_free(is);
  buf_free(ir);
  free(iw);
  buf_free(send);
  buf_free(recv);
  free(want);
  return 0;
}

static int test_rooted(ncclComm_t comm, int rank, int n, stream_t s) {
  float *send = buf_alloc(N * n * sizeof(float)), *recv = buf_alloc(N * n * sizeof(float));
  float *want = xmalloc(N * n * sizeof(float));
  int root = 2 % n;

  /* Broadcast, out of place and in place, and the deprecated in-place ncclBcast. */
  for (size_t i = 0; i < N; i++) {
    send[i] = rank == root ? val(root, i) * 3 : -7;
    want[i] = val(root, i) * 3;
  }
  fill_f(recv, N, -1);
  NCCLCHECK(ncclBroadcast(send, recv, N, ncclFloat, root, comm, s));
  SYNC(s);
  check_floats("broadcast", rank, recv, want, N);
  memcpy(recv, send, N * sizeof(float));
  NCCLCHECK(ncclBroadcast(recv, recv, N, ncclFloat, root, comm, s));
  SYNC(s);
  check_floats("broadcast in place", rank, recv, want, N);
  int broot = 1 % n;
  for (size_t i = 0; i < N; i++) {
    recv[i] = rank == broot ? (float)i : -3;
    want[i] = (float)i;
  }
  NCCLCHECK(ncclBcast(recv, N, ncclFloat, broot, comm, s));
  SYNC(s);
  check_floats("bcast", rank, recv, want, N);

  /* Reduce to root 1; non-roots pass a NULL receive buffer. */
  int rroot = 1 % n;
  for (size_t i = 0; i < N; i++) {
    send[i] = val(rank, i);
    want[i] = 0;
    for (int r = 0; r < n; r++) want[i] += val(r, i);
  }
  fill_f(recv, N, -1);
  NCCLCHECK(ncclReduce(send, rank == rroot ? recv : NULL, N, ncclFloat, ncclSum, rroot, comm, s));
  SYNC(s);
  if (rank == rroot) check_floats("reduce", rank, recv, want, N);
  memcpy(recv, send, N * sizeof(float));
  NCCLCHECK(ncclReduce(recv, recv, N, ncclFloat, ncclSum, rroot, comm, s));
  SYNC(s);
  if (rank == rroot) check_floats("reduce in place", rank, recv, want, N);

  if (HAVE(ncclGather) && HAVE(ncclScatter)) {
    /* Gather to root 3 % n: out of place (non-roots pass NULL) and in place at the root. */
    int groot = 3 % n;
    for (size_t i = 0; i < N; i++) send[i] = val(rank, i) + 100 * rank;
    for (int r = 0; r < n; r++)
      for (size_t i = 0; i < N; i++) want[r * N + i] = val(r, i) + 100 * r;
    fill_f(recv, N * n, -1);
    NCCLCHECK(ncclGather(send, rank == groot ? recv : NULL, N, ncclFloat, groot, comm, s));
    SYNC(s);
    if (rank == groot) check_floats("gather", rank, recv, want, N * n);
    fill_f(recv, N * n, -1);
    memcpy(recv + (size_t)rank * N, send, N * sizeof(float));
    NCCLCHECK(ncclGather(recv + (size_t)rank * N, recv, N, ncclFloat, groot, comm, s));
    SYNC(s);
    if (rank == groot) check_floats("gather in place", rank, recv, want, N * n);

    /* Scatter from root 0: out of place (non-roots pass NULL send) and in place at the root. */
    int sroot = 0;
    for (int r = 0; r < n; r++)
      for (size_t i = 0; i < N; i++) send[r * N + i] = (float)(r * 1000) + (float)i;
    for (size_t i = 0; i < N; i++) want[i] = (float)(rank * 1000) + (float)i;
    fill_f(recv, N, -1);
    NCCLCHECK(ncclScatter(rank == sroot ? send : NULL, recv, N, ncclFloat, sroot, comm, s));
    SYNC(s);
    check_floats("scatter", rank, recv, want, N);
    memcpy(recv, send, N * n * sizeof(float));
    if (rank != sroot) fill_f(recv, N * n, -1);
    NCCLCHECK(ncclScatter(recv, recv + (size_t)rank * N, N, ncclFloat, sroot, comm, s));
    SYNC(s);
    check_floats("scatter in place", rank, recv + (size_t)rank * N, want, N);
  }

  buf_free(send);
  buf_free(recv);
  free(want);
  return 0;
}

static int test_gathers(ncclComm_t comm, int rank, int n, stream_t s) {
  float *send = buf_alloc(N * n * sizeof(float)), *recv = buf_alloc(N * n * sizeof(float));
  float *want = xmalloc(N * n * sizeof(float));

  /* AllGather, out of place and in place (sendbuff == recvbuff + rank*count). */
  for (size_t i = 0; i < N; i++) send[i] = val(rank, i) * 10;
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < N; i++) want[r * N + i] = val(r, i) * 10;
  fill_f(recv, N * n, -1);
  NCCLCHECK(ncclAllGather(send, recv, N, ncclFloat, comm, s));
  SYNC(s);
  check_floats("allgather", rank, recv, want, N * n);
  fill_f(recv, N * n, -1);
  memcpy(recv + (size_t)rank * N, send, N * sizeof(float));
  NCCLCHECK(ncclAllGather(recv + (size_t)rank * N, recv, N, ncclFloat, comm, s));
  SYNC(s);
  check_floats("allgather in place", rank, recv, want, N * n);

  /* ReduceScatter, out of place and in place (recvbuff == sendbuff + rank*recvcount). */
  for (int b = 0; b < n; b++)
    for (size_t i = 0; i < N; i++) send[b * N + i] = val(rank, i) + (float)b;
  for (size_t i = 0; i < N; i++) {
    want[i] = 0;
    for (int r = 0; r < n; r++) want[i] += val(r, i) + (float)rank;
  }
  fill_f(recv, N, -1);
  NCCLCHECK(ncclReduceScatter(send, recv, N, ncclFloat, ncclSum, comm, s));
  SYNC(s);
  check_floats("reducescatter", rank, recv, want, N);
  NCCLCHECK(ncclReduceScatter(send, send + (size_t)rank * N, N, ncclFloat, ncclSum, comm, s));
  SYNC(s);
  check_floats("reducescatter in place", rank, send + (size_t)rank * N, want, N);

  /* AlltoAll: block j goes to rank j, arriving as block `rank`. */
  for (int j = 0; j < n; j++)
    for (size_t i = 0; i < N; i++) send[j * N + i] = (float)(rank * 100 + j) + (float)i / 1024;
  for (int j = 0; j < n; j++)
    for (size_t i = 0; i < N; i++) want[j * N + i] = (float)(j * 100 + rank) + (float)i / 1024;
  if (HAVE(ncclAlltoAll)) {
    fill_f(recv, N * n, -1);
    NCCLCHECK(ncclAlltoAll(send, recv, N, ncclFloat, comm, s));
    SYNC(s);
    check_floats("alltoall", rank, recv, want, N * n);
  }
#ifdef OXCCL_TEST_RCCL
  fill_f(recv, N * n, -1);
  NCCLCHECK(ncclAllToAll(send, recv, N, ncclFloat, comm, s));
  SYNC(s);
  check_floats("alltoall (RCCL spelling)", rank, recv, want, N * n);
#endif

  /* AlltoAllv: rank a sends (a+b)%3+1 elements to rank b, with a one-element gap between
   * blocks; gaps must stay untouched. The counts and displacements are host arrays. */
  size_t sc[MAX_RANKS] = {0}, sd[MAX_RANKS] = {0}, rc[MAX_RANKS] = {0}, rd[MAX_RANKS] = {0};
  size_t stot = 0, rtot = 0;
  for (int j = 0; j < n; j++) {
    sc[j] = (size_t)((rank + j) % 3 + 1);
    rc[j] = (size_t)((j + rank) % 3 + 1);
    sd[j] = stot;
    rd[j] = rtot;
    stot += sc[j] + 1;
    rtot += rc[j] + 1;
  }
  int32_t *vs = buf_alloc(stot * sizeof(int32_t)), *vr = buf_alloc(rtot * sizeof(int32_t));
  int32_t *vw = xmalloc(rtot * sizeof(int32_t));
  for (size_t i = 0; i < stot; i++) vs[i] = -5;
  for (size_t i = 0; i < rtot; i++) vr[i] = vw[i] = -9;
  for (int j = 0; j < n; j++) {
    for (size_t k = 0; k < sc[j]; k++) vs[sd[j] + k] = rank * 1000 + j * 10 + (int)k;
    for (size_t k = 0; k < rc[j]; k++) vw[rd[j] + k] = j * 1000 + rank * 10 + (int)k;
  }
  if (HAVE(ncclAlltoAllv)) {
    NCCLCHECK(ncclAlltoAllv(vs, sc, sd, vr, rc, rd, ncclInt32, comm, s));
    SYNC(s);
    check_ints("alltoallv", rank, vr, vw, rtot);
  }
#ifdef OXCCL_TEST_RCCL
  for (size_t i = 0; i < rtot; i++) vr[i] = -9;
  NCCLCHECK(ncclAllToAllv(vs, sc, sd, vr, rc, rd, ncclInt32, comm, s));
  SYNC(s);
  check_ints("alltoallv (RCCL spelling)", rank, vr, vw, rtot);
#endif
  buf_free(vs);
  buf_free(vr);
  free(vw);
  buf_free(send);
  buf_free(recv);
  free(want);
  return 0;
}

static int test_p2p_and_groups(ncclComm_t comm, int rank, int n, stream_t s) {
  float *a = buf_alloc(N * sizeof(float)), *b = buf_alloc(N * sizeof(float));
  float *c = buf_alloc(N * sizeof(float)), *d = buf_alloc(N * sizeof(float));
  float *want = xmalloc(N * sizeof(float));
  int next = (rank + 1) % n, prev = (rank + n - 1) % n;

  /* A ring shift plus an exchange with the opposite rank, all in one group. An odd number of
   * ranks has no opposite pairs, so each rank exchanges with itself; with 1 or 2 ranks both
   * pairs join the same peers and match in order. */
  for (size_t i = 0; i < N; i++) {
    a[i] = (float)(rank * 10000) + (float)i;
    c[i] = (float)(rank * 100) - (float)i;
  }
  fill_f(b, N, -1);
  fill_f(d, N, -1);
  int opp = n % 2 ? rank : (rank + n / 2) % n;
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclSend(a, N, ncclFloat, next, comm, s));
  NCCLCHECK(ncclRecv(b, N, ncclFloat, prev, comm, s));
  NCCLCHECK(ncclSend(c, N, ncclFloat, opp, comm, s));
  NCCLCHECK(ncclRecv(d, N, ncclFloat, opp, comm, s));
  NCCLCHECK(ncclGroupEnd());
  SYNC(s);
  for (size_t i = 0; i < N; i++) want[i] = (float)(prev * 10000) + (float)i;
  check_floats("send/recv ring", rank, b, want, N);
  for (size_t i = 0; i < N; i++) want[i] = (float)(opp * 100) - (float)i;
  check_floats("send/recv opposite", rank, d, want, N);

  /* Several collectives in one (nested) group. */
  for (size_t i = 0; i < N; i++) {
    a[i] = val(rank, i);
    want[i] = 0;
    for (int r = 0; r < n; r++) want[i] += val(r, i);
  }
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclAllReduce(a, b, N, ncclFloat, ncclSum, comm, s));
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclAllReduce(a, c, N, ncclFloat, ncclSum, comm, s));
  NCCLCHECK(ncclGroupEnd());
  NCCLCHECK(ncclGroupEnd());
  SYNC(s);
  check_floats("grouped allreduce 1", rank, b, want, N);
  check_floats("grouped allreduce 2", rank, c, want, N);

  /* ncclGroupSimulateEnd estimates and launches nothing. */
  if (HAVE(ncclGroupSimulateEnd)) {
    fill_f(b, N, -1);
    ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
    NCCLCHECK(ncclGroupStart());
    NCCLCHECK(ncclAllReduce(a, b, N, ncclFloat, ncclSum, comm, s));
    NCCLCHECK(ncclGroupSimulateEnd(&sim));
    SYNC(s);
    CHECK(sim.estimatedTime > 0, "rank %d simulated time %g", rank, (double)sim.estimatedTime);
    fill_f(want, N, -1);
    check_floats("simulated group left recvbuff alone", rank, b, want, N);
  }

#ifdef OXCCL_TEST_RCCL
  /* AllReduce with a bias: sum(rank+1) + acc. */
  for (size_t i = 0; i < N; i++) {
    a[i] = (float)(rank + 1);
    c[i] = (float)(100 + i);
    want[i] = (float)(n * (n + 1) / 2) + (float)(100 + i);
  }
  NCCLCHECK(ncclAllReduceWithBias(a, b, N, ncclFloat, ncclSum, comm, s, c));
  SYNC(s);
  check_floats("allreduce with bias", rank, b, want, N);
#endif
  buf_free(a);
  buf_free(b);
  buf_free(c);
  buf_free(d);
  free(want);
  return 0;
}

static int test_queries(ncclComm_t comm, int rank, int n) {
  int v = -1;
  NCCLCHECK(ncclCommCount(comm, &v));
  CHECK(v == n, "count %d", v);
  NCCLCHECK(ncclCommUserRank(comm, &v));
  CHECK(v == rank, "user rank %d, expected %d", v, rank);
  NCCLCHECK(ncclCommCuDevice(comm, &v));
  CHECK(v >= 0, "device %d", v);
  if (gpu) CHECK(v == rank_device(rank), "rank %d on device %d, expected %d", rank, v,
                 rank_device(rank));
  ncclResult_t async = ncclInternalError;
  NCCLCHECK(ncclCommGetAsyncError(comm, &async));
  CHECK(async == ncclSuccess, "async error %d", (int)async);
  ncclUniqueId id;
  if (HAVE(ncclCommGetUniqueId)) NCCLCHECK(ncclCommGetUniqueId(comm, &id));

  if (HAVE(ncclTeamWorld) && HAVE(ncclTeamLsa) && HAVE(ncclTeamRankToWorld)) {
    ncclTeam_t world = ncclTeamWorld(comm);
    CHECK(world.nRanks == n && world.rank == rank && world.stride == 1,
          "team world {%d,%d,%d}", world.nRanks, world.rank, world.stride);
    ncclTeam_t lsa = ncclTeamLsa(comm);
    CHECK(lsa.nRanks == n && lsa.rank == rank, "team lsa {%d,%d,%d}", lsa.nRanks, lsa.rank,
          lsa.stride);
    CHECK(ncclTeamRankToWorld(comm, world, n - 1) == n - 1, "team rank to world");
  }
  if (HAVE(ncclCommQueryProperties)) {
    ncclCommProperties_t props = NCCL_COMM_PROPERTIES_INITIALIZER;
    NCCLCHECK(ncclCommQueryProperties(comm, &props));
    CHECK(props.rank == rank && props.nRanks == n, "properties: rank %d of %d", props.rank,
          props.nRanks);
    NCCLCHECK(ncclCommCuDevice(comm, &v));
    CHECK(props.cudaDev == v, "properties: device %d, expected %d", props.cudaDev, v);
  }
  /* NULL requirements: oxccl names the argument; NCCL would dereference them. */
  if (is_oxccl) CHECK(ncclDevCommCreate(comm, NULL, NULL) == ncclInvalidArgument,
                      "ncclDevCommCreate");

  /* Registration and windows. NCCL windows need ncclMemAlloc memory on a GPU. */
  float *buf = NULL;
  if (gpu) NCCLCHECK(ncclMemAlloc((void **)&buf, 4096));
  else buf = xmalloc(4096);
  void *handle = NULL;
  NCCLCHECK(ncclCommRegister(comm, buf, 4096, &handle));
  CHECK(handle != NULL, "registration handle");
  NCCLCHECK(ncclCommDeregister(comm, handle));
  if (HAVE(ncclCommWindowRegister) && HAVE(ncclCommWindowDeregister)) {
    ncclWindow_t win = NULL;
    NCCLCHECK(ncclCommWindowRegister(comm, buf, 4096, &win, NCCL_WIN_COLL_SYMMETRIC));
    if (HAVE(ncclWinGetUserPtr)) {
      void *user = NULL;
      NCCLCHECK(ncclWinGetUserPtr(comm, win, &user));
      CHECK(user == buf, "window user pointer");
    }
    NCCLCHECK(ncclCommWindowDeregister(comm, win));
  }
  if (gpu) NCCLCHECK(ncclMemFree(buf));
  else free(buf);

  void *mem = NULL;
  NCCLCHECK(ncclMemAlloc(&mem, 1 << 20));
  CHECK(mem != NULL, "ncclMemAlloc");
  if (gpu) {
    /* Device memory: the host cannot touch it, a round trip through the driver can. */
    unsigned char out[4096], back[4096];
    for (size_t i = 0; i < sizeof out; i++) out[i] = (unsigned char)(i * 7 + rank);
    memset(back, 0, sizeof back);
    CUCHECK(cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)mem + (1 << 19), out, sizeof out));
    CUCHECK(cu.MemcpyDtoH(back, (CUdeviceptr)(uintptr_t)mem + (1 << 19), sizeof back));
    CHECK(memcmp(out, back, sizeof out) == 0, "rank %d ncclMemAlloc memory round trip", rank);
  } else {
    memset(mem, 1, 1 << 20);
  }
  NCCLCHECK(ncclMemFree(mem));
  return 0;
}

static int run_all(ncclComm_t comm, int rank, int n, stream_t s) {
  if (test_queries(comm, rank, n)) return -1;
  if (test_allreduce(comm, rank, n, s)) return -1;
  if (test_rooted(comm, rank, n, s)) return -1;
  if (test_gathers(comm, rank, n, s)) return -1;
  if (test_p2p_and_groups(comm, rank, n, s)) return -1;
  return 0;
}

/* A non-blocking communicator may answer ncclInProgress while it launches an operation. */
static ncclResult_t settle(ncclComm_t comm, ncclResult_t r) {
  for (int i = 0; r == ncclInProgress && i < 30000; i++) {
    usleep(1000);
    ncclResult_t q = ncclCommGetAsyncError(comm, &r);
    if (q != ncclSuccess) return q;
  }
  return r;
}

/* Allreduce of rank+1 on comm; checks the sum over `members` world ranks given. */
static int check_sum(ncclComm_t comm, int rank, const int *members, int nmembers, stream_t s,
                     const char *what) {
  float *x = buf_alloc(8 * sizeof(float)), *y = buf_alloc(8 * sizeof(float)), want[8];
  float sum = 0;
  for (int i = 0; i < nmembers; i++) sum += (float)(members[i] + 1);
  for (int i = 0; i < 8; i++) {
    x[i] = (float)(rank + 1);
    want[i] = sum;
  }
  NCCLCHECK(settle(comm, ncclAllReduce(x, y, 8, ncclFloat, ncclSum, comm, s)));
  SYNC(s);
  int rc = check_floats(what, rank, y, want, 8);
  buf_free(x);
  buf_free(y);
  return rc;
}

/* ---- The ranks in processes ------------------------------------------------------------------- */

/* One forked rank. GPU mode: the child initializes CUDA itself (the parent has not). */
static int process_rank(ncclUniqueId id, int r) {
  if (gpu) {
    char err[512];
    if (cuda_start(err, sizeof err) < 0) {
      fprintf(stderr, "FAIL process rank %d: %s\n", r, err);
      return -1;
    }
    if (bind_rank(r)) return -1;
  }
  ncclComm_t comm = NULL;
  ncclResult_t res = ncclCommInitRank(&comm, nranks, id, r);
  if (res != ncclSuccess) {
    fprintf(stderr, "FAIL process rank %d: ncclCommInitRank returned %d: %s\n", r, (int)res,
            ncclGetLastError(NULL));
    return -1;
  }
  stream_t s;
  if (stream_new(&s, (stream_t)(uintptr_t)(0x100 + r))) return -1;
  int rc = run_all(comm, r, nranks, s);
  if (rc == 0 && ncclCommDestroy(comm) != ncclSuccess) rc = -1;
  stream_free(s);
  return rc;
}

static int section_processes(void) {
  ncclUniqueId id;
  NCCLCHECK(ncclGetUniqueId(&id));
  pid_t pids[MAX_RANKS] = {0};
  for (int r = 0; r < nranks; r++) {
    fflush(NULL);
    pids[r] = fork();
    if (pids[r] < 0) {
      perror("fork");
      return -1;
    }
    if (pids[r] == 0) {
      alarm(gpu ? 100 : 40);
      int rc = process_rank(id, r) == 0 && failure_total() == 0 ? 0 : 1;
      fflush(NULL);
      _exit(rc);
    }
  }
  int ok = 0;
  for (int r = 0; r < nranks; r++) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) ok++;
    else {
      fprintf(stderr, "FAIL process rank %d exited with status %#x\n", r, status);
      fail_count();
    }
  }
  return ok == nranks ? 0 : -1;
}

/* ---- The ranks in threads --------------------------------------------------------------------- */

struct thread_arg {
  int rank;
  ncclUniqueId id, nb_id, old_id;
  int rc;
};

static int thread_body(struct thread_arg *a, stream_t s) {
  int rank = a->rank, n = nranks, last = nranks - 1;
  int all[MAX_RANKS] = {0};
  for (int q = 0; q < n; q++) all[q] = q;
  ncclComm_t comm = NULL;
  NCCLCHECK(ncclCommInitRank(&comm, n, a->id, rank));
  if (run_all(comm, rank, n, s)) return -1;

  /* Split by parity, the last rank out (NCCL_SPLIT_NOCOLOR), keys reversing the order. */
  ncclComm_t sub = NULL;
  int color = rank == last ? NCCL_SPLIT_NOCOLOR : rank % 2;
  NCCLCHECK(ncclCommSplit(comm, color, -rank, &sub, NULL));
  if (rank == last) {
    CHECK(sub == NULL, "NOCOLOR split returned a communicator");
  } else {
    int members[MAX_RANKS] = {0}, want_cnt = 0, want_rank = 0;
    for (int q = 0; q < last; q++) {
      if (q % 2 != rank % 2) continue;
      members[want_cnt++] = q;
      if (q > rank) want_rank++;
    }
    int cnt = 0, r = -1;
    NCCLCHECK(ncclCommCount(sub, &cnt));
    NCCLCHECK(ncclCommUserRank(sub, &r));
    CHECK(cnt == want_cnt, "split size %d, expected %d", cnt, want_cnt);
    CHECK(r == want_rank, "split key order: rank %d got %d, expected %d", rank, r, want_rank);
    check_sum(sub, rank, members, want_cnt, s, rank % 2 ? "split odd" : "split even");
    NCCLCHECK(ncclCommDestroy(sub));
  }

  /* Abort inside a group, as PyTorch does. */
  ncclComm_t extra = NULL;
  NCCLCHECK(ncclCommSplit(comm, 0, rank, &extra, NULL));
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclCommAbort(extra));
  NCCLCHECK(ncclGroupEnd());
  ncclResult_t r;
  if (is_oxccl) { /* a vendor library frees the communicator: the handle dangles there */
    float x = 1;
    r = ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, extra, s);
    CHECK(r == ncclInvalidUsage, "allreduce on an aborted communicator returned %d", (int)r);
  }
  /* Shrink last: the last rank does not take part, so it must not use the parent communicator
   * for another split afterwards. The other ranks drop it. */
  if (n < 2) {
    if (rank == 0) printf("SKIP threads/shrink: needs 2 GPUs\n");
  } else if (!HAVE(ncclCommShrink)) {
    if (rank == 0) printf("SKIP threads/shrink: the library lacks ncclCommShrink\n");
  } else if (rank != last) {
    int exclude[1] = {last};
    ncclComm_t shr = NULL;
    NCCLCHECK(ncclCommShrink(comm, exclude, 1, &shr, NULL, NCCL_SHRINK_DEFAULT));
    int cnt = 0;
    NCCLCHECK(ncclCommCount(shr, &cnt));
    CHECK(cnt == n - 1, "shrunk size %d", cnt);
    check_sum(shr, rank, all, n - 1, s, "shrink");
    NCCLCHECK(ncclCommDestroy(shr));
  }

  NCCLCHECK(ncclCommFinalize(comm));
  NCCLCHECK(ncclCommDestroy(comm));

  /* Non-blocking init, polled with ncclCommGetAsyncError. */
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  cfg.commName = "nonblocking";
  ncclComm_t nb = NULL;
  r = ncclCommInitRankConfig(&nb, n, a->nb_id, rank, &cfg);
  CHECK(r == ncclSuccess || r == ncclInProgress, "non-blocking init returned %d", (int)r);
  if (nb == NULL) return -1;
  ncclResult_t st = ncclInProgress;
  for (int i = 0; i < 30000 && st == ncclInProgress; i++) {
    NCCLCHECK(ncclCommGetAsyncError(nb, &st));
    if (st == ncclInProgress) usleep(1000);
  }
  CHECK(st == ncclSuccess, "non-blocking init ended with %d: %s", (int)st,
        ncclGetLastError(NULL));
  if (st != ncclSuccess) return -1;
  check_sum(nb, rank, all, n, s, "non-blocking communicator");
  NCCLCHECK(ncclCommDestroy(nb));

  /* A config from an older, smaller header: 64 bytes, version 2.27. Only those bytes exist. */
  ncclConfig_t full = NCCL_CONFIG_INITIALIZER;
  full.size = 64;
  full.version = NCCL_VERSION(2, 27, 0);
  full.minCTAs = 2;
  full.blocking = 1;
  void *old = xmalloc(64);
  memcpy(old, &full, 64);
  ncclComm_t oc = NULL;
  NCCLCHECK(ncclCommInitRankConfig(&oc, n, a->old_id, rank, (ncclConfig_t *)old));
  free(old);
  check_sum(oc, rank, all, n, s, "communicator from a 2.27 config");
  NCCLCHECK(ncclCommDestroy(oc));
  return 0;
}

static void *thread_main(void *p) {
  struct thread_arg *a = p;
  stream_t s = NULL;
  a->rc = -1;
  /* Host mode: every rank passes the NULL stream, as ranks of one process must not serialise
   * on it. GPU mode: a stream of its own on the rank's device. */
  if (bind_rank(a->rank) || stream_new(&s, NULL)) return NULL;
  a->rc = thread_body(a, s);
  if (a->rc == 0 && sync_rank(s)) a->rc = -1;
  stream_free(s);
  return NULL;
}

static int section_threads(void) {
  ncclUniqueId id, nb_id, old_id;
  NCCLCHECK(ncclGetUniqueId(&id));
  NCCLCHECK(ncclGetUniqueId(&nb_id));
  NCCLCHECK(ncclGetUniqueId(&old_id));
  pthread_t th[MAX_RANKS];
  struct thread_arg args[MAX_RANKS];
  for (int r = 0; r < nranks; r++) {
    args[r].rank = r;
    args[r].id = id;
    args[r].nb_id = nb_id;
    args[r].old_id = old_id;
    args[r].rc = -1;
    pthread_create(&th[r], NULL, thread_main, &args[r]);
  }
  int rc = 0;
  for (int r = 0; r < nranks; r++) {
    pthread_join(th[r], NULL);
    if (args[r].rc) rc = -1;
  }
  return rc;
}

/* ---- ncclCommInitAll: every rank driven from one thread --------------------------------------- */

static int section_init_all(void) {
  int n = nranks;
  ncclComm_t comms[MAX_RANKS] = {0};
  stream_t ss[MAX_RANKS] = {0};
  /* Host mode: any device numbers, reversed to see them come back. GPU mode: one rank per GPU. */
  int devs[MAX_RANKS] = {0};
  for (int r = 0; r < n; r++) devs[r] = gpu ? r : n - 1 - r;
  NCCLCHECK(ncclCommInitAll(comms, n, devs));
  for (int r = 0; r < n; r++) {
    int v = -1;
    NCCLCHECK(ncclCommUserRank(comms[r], &v));
    CHECK(v == r, "InitAll rank %d reports %d", r, v);
    NCCLCHECK(ncclCommCuDevice(comms[r], &v));
    CHECK(v == devs[r], "InitAll rank %d on device %d, expected %d", r, v, devs[r]);
    /* Each rank's stream lives on its communicator's device. */
    if (bind_device(devs[r]) || stream_new(&ss[r], NULL)) return -1;
  }
  float *send[MAX_RANKS] = {0}, *recv[MAX_RANKS] = {0}, want[N];
  for (int r = 0; r < n; r++) {
    send[r] = buf_alloc(N * sizeof(float));
    recv[r] = buf_alloc(N * sizeof(float));
    for (size_t i = 0; i < N; i++) send[r][i] = val(r, i);
  }
  for (size_t i = 0; i < N; i++) {
    want[i] = 0;
    for (int r = 0; r < n; r++) want[i] += val(r, i);
  }
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < n; r++)
    NCCLCHECK(ncclAllReduce(send[r], recv[r], N, ncclFloat, ncclSum, comms[r], ss[r]));
  NCCLCHECK(ncclGroupEnd());
  for (int r = 0; r < n; r++) SYNC(ss[r]);
  for (int r = 0; r < n; r++) check_floats("InitAll grouped allreduce", r, recv[r], want, N);
  /* Send/recv between the communicators of one thread. */
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < n; r++) {
    NCCLCHECK(ncclSend(send[r], N, ncclFloat, (r + 1) % n, comms[r], ss[r]));
    NCCLCHECK(ncclRecv(recv[r], N, ncclFloat, (r + n - 1) % n, comms[r], ss[r]));
  }
  NCCLCHECK(ncclGroupEnd());
  for (int r = 0; r < n; r++) SYNC(ss[r]);
  for (int r = 0; r < n; r++)
    check_floats("InitAll grouped send/recv", r, recv[r], send[(r + n - 1) % n], N);
  /* One thread splits every device's communicator inside one group (each split waits for the
   * others): ranks reversed by key, then an allreduce on the children. */
  ncclComm_t kids[MAX_RANKS] = {0};
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < n; r++) NCCLCHECK(ncclCommSplit(comms[r], 0, n - 1 - r, &kids[r], NULL));
  NCCLCHECK(ncclGroupEnd());
  for (int r = 0; r < n; r++) {
    int v = -1;
    CHECK(kids[r] != NULL, "grouped split left rank %d without a communicator", r);
    if (!kids[r]) return -1;
    NCCLCHECK(ncclCommUserRank(kids[r], &v));
    CHECK(v == n - 1 - r, "grouped split: rank %d became %d, expected %d", r, v, n - 1 - r);
  }
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < n; r++)
    NCCLCHECK(ncclAllReduce(send[r], recv[r], N, ncclFloat, ncclSum, kids[r], ss[r]));
  NCCLCHECK(ncclGroupEnd());
  for (int r = 0; r < n; r++) SYNC(ss[r]);
  for (int r = 0; r < n; r++) check_floats("grouped split allreduce", r, recv[r], want, N);
  for (int r = 0; r < n; r++) NCCLCHECK(ncclCommDestroy(kids[r]));
  for (int r = 0; r < n; r++) {
    NCCLCHECK(ncclCommDestroy(comms[r]));
    buf_free(send[r]);
    buf_free(recv[r]);
  }
  /* The multi-device idiom without InitAll: every rank's init inside one group, then the
   * same with ncclCommInitRankScalable and two ids. Each init takes the current device, as
   * after cudaSetDevice. */
  ncclUniqueId id, ids[2];
  NCCLCHECK(ncclGetUniqueId(&id));
  NCCLCHECK(ncclGetUniqueId(&ids[0]));
  NCCLCHECK(ncclGetUniqueId(&ids[1]));
  float *x[MAX_RANKS] = {0}, *y[MAX_RANKS] = {0};
  for (int r = 0; r < n; r++) {
    x[r] = buf_alloc(4 * sizeof(float));
    y[r] = buf_alloc(4 * sizeof(float));
  }
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1 && !HAVE(ncclCommInitRankScalable)) continue;
    NCCLCHECK(ncclGroupStart());
    for (int r = 0; r < n; r++) {
      if (bind_device(devs[r])) return -1;
      if (pass == 0) NCCLCHECK(ncclCommInitRank(&comms[r], n, id, r));
      else NCCLCHECK(ncclCommInitRankScalable(&comms[r], n, r, 2, ids, NULL));
    }
    NCCLCHECK(ncclGroupEnd());
    NCCLCHECK(ncclGroupStart());
    for (int r = 0; r < n; r++) {
      for (int i = 0; i < 4; i++) x[r][i] = (float)(r + 1);
      NCCLCHECK(ncclAllReduce(x[r], y[r], 4, ncclFloat, ncclSum, comms[r], ss[r]));
    }
    NCCLCHECK(ncclGroupEnd());
    for (int r = 0; r < n; r++) SYNC(ss[r]);
    for (int r = 0; r < n; r++) {
      for (int i = 0; i < 4; i++)
        CHECK(y[r][i] == (float)(n * (n + 1) / 2), "%s: rank %d got %g",
              pass ? "scalable init" : "grouped init", r, (double)y[r][i]);
      NCCLCHECK(ncclCommDestroy(comms[r]));
    }
  }
  for (int r = 0; r < n; r++) {
    buf_free(x[r]);
    buf_free(y[r]);
    stream_free(ss[r]);
  }
  /* NULL devlist means devices 0..ndev-1. */
  ncclComm_t two[2];
  int ntwo = n < 2 ? n : 2;
  NCCLCHECK(ncclCommInitAll(two, ntwo, NULL));
  for (int r = 0; r < ntwo; r++) {
    int d = -1;
    NCCLCHECK(ncclCommCuDevice(two[r], &d));
    CHECK(d == r, "InitAll NULL devlist: rank %d on device %d", r, d);
    NCCLCHECK(ncclCommDestroy(two[r]));
  }
  return bind_device(0);
}

/* ---- Bad arguments ---------------------------------------------------------------------------- */

/* The sentences are oxccl's; a vendor library is held to the result codes only. */
static void expect(const char *what, ncclResult_t got, ncclResult_t want, const char *substr) {
  const char *last = ncclGetLastError(NULL);
  CHECK(got == want, "%s: returned %d (%s), expected %d; last error: %s", what, (int)got,
        ncclGetErrorString(got), (int)want, last);
  if (substr && got == want && is_oxccl)
    CHECK(strstr(last, substr) != NULL, "%s: last error \"%s\" lacks \"%s\"", what, last,
          substr);
}

/* Checks that need no communicator: they pass whatever state the core is in. */
static int section_static(void) {
  int v = 0;
  NCCLCHECK(ncclGetVersion(&v));
  if (is_oxccl) {
    CHECK(v == EXPECTED_VERSION, "ncclGetVersion %d, expected %d", v, EXPECTED_VERSION);
    CHECK(v == NCCL_VERSION_CODE, "ncclGetVersion %d differs from the header's %d", v,
          NCCL_VERSION_CODE);
    CHECK(strncmp(oxcclGetVersionString(), "oxccl ", 6) == 0, "oxcclGetVersionString: %s",
          oxcclGetVersionString());
  }

  static const char *texts[] = {
      "no error",
      "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
      "unhandled system error (run with NCCL_DEBUG=INFO for details)",
      "internal error - please report this issue to the NCCL developers",
      "invalid argument (run with NCCL_DEBUG=WARN for details)",
      "invalid usage (run with NCCL_DEBUG=WARN for details)",
      "remote process exited or there was a network error",
      "NCCL operation in progress",
  };
  for (int i = 0; i < 8; i++)
    CHECK(strcmp(ncclGetErrorString((ncclResult_t)i), texts[i]) == 0, "error string %d: %s", i,
          ncclGetErrorString((ncclResult_t)i));
  CHECK(strcmp(ncclGetErrorString((ncclResult_t)99), "unknown result code") == 0,
        "error string 99");
#ifdef OXCCL_TEST_RCCL
  CHECK(strcmp(ncclGetErrorString(ncclTimeout), "timeout") == 0, "error string 8");
#else
  CHECK(strcmp(ncclGetErrorString((ncclResult_t)8), "unknown result code") == 0,
        "error string 8 must be unknown to a 2.28 client");
#endif

  /* Host stack memory on purpose: a pointer no allocator of the library issued. */
  float buf[16] = {0};
  ncclComm_t c = NULL;
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  expect("ncclGetVersion(NULL)", ncclGetVersion(NULL), ncclInvalidArgument, "NULL");
  expect("NULL comm", ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, NULL, NULL),
         ncclInvalidArgument, "comm argument is NULL");
  if (is_oxccl) { /* a vendor library dereferences the handle */
    /* The last-error pointer stays valid and is overwritten in place. */
    const char *p = ncclGetLastError(NULL);
    expect("garbage comm", ncclCommCount((ncclComm_t)(uintptr_t)0x10, &v), ncclInvalidArgument,
           "not a communicator");
    CHECK(strstr(p, "not a communicator") != NULL, "old last-error pointer reads \"%s\"", p);
  }
  expect("ncclGroupEnd without start", ncclGroupEnd(), ncclInvalidUsage, "ncclGroupStart");
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.magic = 0x1234;
  expect("config magic", ncclCommInitRankConfig(&c, 1, id, 0, &cfg), ncclInvalidArgument,
         "NCCL_CONFIG_INITIALIZER");
  CHECK(c == NULL, "failed init left a communicator");
  ncclConfig_t cfg2 = NCCL_CONFIG_INITIALIZER;
  cfg2.blocking = 5;
  expect("config blocking 5", ncclCommInitRankConfig(&c, 1, id, 0, &cfg2), ncclInvalidArgument,
         "blocking");
  expect("nranks 0", ncclCommInitRank(&c, 0, id, 0), ncclInvalidArgument, "number of ranks");
  expect("rank out of range", ncclCommInitRank(&c, 2, id, 5), ncclInvalidArgument,
         "invalid rank 5");
  expect("InitRank NULL out", ncclCommInitRank(NULL, 1, id, 0), ncclInvalidArgument, "NULL");
  /* Device 0 exists on every GPU machine, so only the duplicate can be the fault. */
  int dup[2] = {0, 0};
  ncclComm_t two[2];
  expect("InitAll duplicate device", ncclCommInitAll(two, 2, dup), ncclInvalidUsage,
         "duplicate device");
  expect("ncclGetUniqueId(NULL)", ncclGetUniqueId(NULL), ncclInvalidArgument, "NULL");
  void *mem = NULL;
  expect("ncclMemAlloc(NULL)", ncclMemAlloc(NULL, 16), ncclInvalidArgument, "NULL");
  NCCLCHECK(ncclMemAlloc(&mem, 16));
  NCCLCHECK(ncclMemFree(mem));
  expect("ncclMemFree(foreign)", ncclMemFree(buf), ncclInvalidArgument, NULL);
  if (HAVE(ncclGroupSimulateEnd)) {
    ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
    expect("simulate without group", ncclGroupSimulateEnd(&sim), ncclInvalidUsage,
           "ncclGroupStart");
    NCCLCHECK(ncclGroupStart());
    sim.magic = 0;
    expect("simulate bad magic", ncclGroupSimulateEnd(&sim), ncclInvalidArgument, "magic");
    NCCLCHECK(ncclGroupEnd());
  }
  CHECK(ncclCommDestroy(NULL) == ncclSuccess, "ncclCommDestroy(NULL)");
  CHECK(ncclCommAbort(NULL) == ncclSuccess, "ncclCommAbort(NULL)");
  if (is_oxccl) /* a vendor library writes through the NULL out-pointers */
    expect("device API requirement", ncclLLA2ACreateRequirement(1, 1, NULL, NULL),
           ncclInvalidArgument, "NULL");
#ifdef OXCCL_TEST_RCCL
  mscclAlgoHandle_t h = -1;
  /* A one-GPU copy algorithm; the MSCCL runs themselves are tested by tests/msccl_c_abi.rs. */
  char algo_path[] = "/tmp/oxccl-msccl-XXXXXX";
  int algo_fd = mkstemp(algo_path);
  CHECK(algo_fd >= 0, "mkstemp");
  if (algo_fd < 0) return 1;
  FILE *algo = fdopen(algo_fd, "w");
  fputs("<algo name=\"c\" nchunksperloop=\"1\" ngpus=\"1\" coll=\"allreduce\">"
        "<gpu id=\"0\" i_chunks=\"1\" o_chunks=\"1\"><tb id=\"0\" send=\"-1\" recv=\"-1\">"
        "<step s=\"0\" type=\"cpy\" srcbuf=\"i\" srcoff=\"0\" dstbuf=\"o\" dstoff=\"0\" cnt=\"1\"/>"
        "</tb></gpu></algo>\n",
        algo);
  fclose(algo);
  NCCLCHECK(mscclLoadAlgo(algo_path, &h, 0));
  unlink(algo_path);
  expect("msccl not XML", mscclLoadAlgo("/proc/self/exe", &h, 0), ncclInvalidArgument,
         "/proc/self/exe");
  NCCLCHECK(mscclUnloadAlgo(h));
  expect("msccl unload twice", mscclUnloadAlgo(h), ncclInvalidArgument, "mscclLoadAlgo");
  expect("msccl missing file", mscclLoadAlgo("/nonexistent/algo.xml", &h, 0),
         ncclInvalidArgument, "algo.xml");
#endif
  return 0;
}

/* Checks on a live single-rank communicator and on dead ones. */
static int section_bad_args_on(ncclComm_t c1, float *buf, stream_t s) {
  ncclUniqueId id;
  NCCLCHECK(ncclGetUniqueId(&id));
  ncclComm_t c = NULL;
  int v = 0;
  ncclRedOp_t op;
  float scalar = 1;

  if (is_oxccl) { /* a vendor library may launch on NULL, or wait for a matching send */
    expect("NULL sendbuff", ncclAllReduce(NULL, buf, 4, ncclFloat, ncclSum, c1, s),
           ncclInvalidArgument, "send buffer is NULL");
    expect("NULL recvbuff", ncclAllGather(buf, NULL, 4, ncclFloat, c1, s), ncclInvalidArgument,
           "receive buffer is NULL");
    expect("recv NULL", ncclRecv(NULL, 4, ncclFloat, 0, c1, s), ncclInvalidArgument,
           "receive buffer is NULL");
  }
  expect("datatype 99", ncclAllReduce(buf, buf, 4, (ncclDataType_t)99, ncclSum, c1, s),
         ncclInvalidArgument, "invalid data type 99");
  expect("op 77", ncclAllReduce(buf, buf, 4, ncclFloat, (ncclRedOp_t)77, c1, s),
         ncclInvalidArgument, "invalid reduction operator 77");
  expect("root out of range", ncclBroadcast(buf, buf, 4, ncclFloat, 1, c1, s),
         ncclInvalidArgument, "invalid root 1");
  expect("negative root", ncclReduce(buf, buf, 4, ncclFloat, ncclSum, -1, c1, s),
         ncclInvalidArgument, "invalid root -1");
  expect("peer out of range", ncclSend(buf, 4, ncclFloat, 5, c1, s), ncclInvalidArgument,
         "invalid peer 5");
  expect("count NULL out", ncclCommCount(c1, NULL), ncclInvalidArgument, "NULL");
  expect("split color -5", ncclCommSplit(c1, -5, 0, &c, NULL), ncclInvalidArgument,
         "invalid color");
  if (HAVE(ncclCommRevoke))
    expect("revoke flags", ncclCommRevoke(c1, 7), ncclInvalidArgument, "revokeFlags");
  if (HAVE(ncclCommShrink))
    expect("shrink flags", ncclCommShrink(c1, NULL, 0, &c, NULL, 9), ncclInvalidArgument,
           "shrinkFlags");
  expect("PreMulSum NULL scalar",
         ncclRedOpCreatePreMulSum(&op, NULL, ncclFloat, ncclScalarHostImmediate, c1),
         ncclInvalidArgument, "scalar");
  expect("PreMulSum residence 9",
         ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, (ncclScalarResidence_t)9, c1),
         ncclInvalidArgument, "residence");
  expect("RedOpDestroy built-in", ncclRedOpDestroy(ncclSum, c1), ncclInvalidArgument, "built in");
  if (is_oxccl) { /* a vendor library may write through NULL or read a foreign handle */
    expect("register NULL handle", ncclCommRegister(c1, buf, 16 * sizeof(float), NULL),
           ncclInvalidArgument, "NULL");
    expect("deregister foreign", ncclCommDeregister(c1, buf), ncclInvalidArgument, NULL);
    expect("ncclDevCommCreate", ncclDevCommCreate(c1, NULL, NULL), ncclInvalidArgument, "reqs");
  }
  if (HAVE(ncclCommGrow))
    expect("ncclCommGrow", ncclCommGrow(c1, 2, &id, 1, &c, NULL), ncclInvalidUsage,
           "ncclCommGrow");
  if (HAVE(ncclCommMemStats))
    expect("mem stat 9", ncclCommMemStats(c1, (ncclCommMemStat_t)9, NULL), ncclInvalidArgument,
           NULL);

  /* An error inside a group fails the group end too. */
  NCCLCHECK(ncclGroupStart());
  expect("datatype 99 in a group",
         ncclAllReduce(buf, buf, 4, (ncclDataType_t)99, ncclSum, c1, s), ncclInvalidArgument,
         "invalid data type 99");
  expect("group end after a failed call", ncclGroupEnd(), ncclInvalidArgument,
         "invalid data type 99");

  /* Suspend blocks operations until resume. */
  if (HAVE(ncclCommSuspend) && HAVE(ncclCommResume)) {
    NCCLCHECK(ncclCommSuspend(c1, NCCL_SUSPEND_MEM));
    expect("allreduce while suspended", ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, c1, s),
           ncclInvalidUsage, "suspended");
    NCCLCHECK(ncclCommResume(c1));
  }
  NCCLCHECK(ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, c1, s));
  SYNC(s);

  /* Revoke: no new operations, but destroy still works. */
  if (HAVE(ncclCommRevoke)) {
    ncclComm_t rv = NULL;
    NCCLCHECK(ncclCommSplit(c1, 0, 0, &rv, NULL));
    NCCLCHECK(ncclCommRevoke(rv, NCCL_REVOKE_DEFAULT));
    expect("allreduce on a revoked comm", ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, rv, s),
           ncclInvalidUsage, "revoked");
    NCCLCHECK(ncclCommDestroy(rv));
  }

  /* Destroyed and aborted communicators: a vendor library frees them, so only oxccl, which
   * keeps a tombstone, can be asked. */
  NCCLCHECK(ncclCommDestroy(c1));
  if (!is_oxccl) return 0;
  expect("destroyed comm", ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, c1, s),
         ncclInvalidUsage, "destroyed");
  expect("destroy twice", ncclCommDestroy(c1), ncclInvalidUsage, "destroyed");
  expect("count on destroyed comm", ncclCommCount(c1, &v), ncclInvalidUsage, "destroyed");
  NCCLCHECK(ncclGetUniqueId(&id));
  ncclComm_t ca = NULL;
  NCCLCHECK(ncclCommInitRank(&ca, 1, id, 0));
  NCCLCHECK(ncclCommAbort(ca));
  expect("aborted comm", ncclSend(buf, 4, ncclFloat, 0, ca, s), ncclInvalidUsage, "aborted");
  CHECK(ncclCommAbort(ca) == ncclSuccess, "abort is idempotent");
  return 0;
}

static int section_bad_args(void) {
  ncclUniqueId id;
  NCCLCHECK(ncclGetUniqueId(&id));
  ncclComm_t c1 = NULL;
  NCCLCHECK(ncclCommInitRank(&c1, 1, id, 0));
  /* Valid memory for the calls that should succeed; the bad cases differ in other arguments. */
  float *buf = buf_alloc(16 * sizeof(float));
  fill_f(buf, 16, 0);
  stream_t s;
  if (stream_new(&s, NULL)) return -1;
  int rc = section_bad_args_on(c1, buf, s);
  if (sync_rank(s)) rc = -1;
  stream_free(s);
  buf_free(buf);
  return rc;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int section(const char *name, int (*fn)(void)) {
  current_section = name;
  int before = failure_total();
  double t0 = now();
  int rc = fn();
  int failed = failure_total() - before;
  if (rc && !failed) {
    fail_count();
    failed = 1;
  }
  printf("SECTION %-12s %s (%d failures, %.2f s)\n", name, failed ? "FAIL" : "PASS", failed,
         now() - t0);
  fflush(stdout);
  return failed;
}

/* Says which section hung before the process dies, instead of a bare "Alarm clock". */
static void on_alarm(int sig) {
  (void)sig;
  static const char head[] = "FAIL: time limit reached in section ";
  const char *name = current_section;
  ssize_t w = write(2, head, sizeof head - 1);
  w = write(2, name, strlen(name));
  w = write(2, "\n", 1);
  (void)w;
  _exit(3);
}

int main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  const char *mode = getenv("OXCCL_TEST_GPU");
  gpu = mode && strcmp(mode, "1") == 0;
  is_oxccl = HAVE(oxcclGetVersionString);
  signal(SIGALRM, on_alarm);
  alarm(gpu ? 115 : 55); /* a deadlock must fail the test, not hang it */

  if (!gpu) {
    setenv("OXCCL_BACKEND", "host", 0);
  } else {
    /* Fail rather than quietly fall back to the host backend. */
#ifdef OXCCL_TEST_RCCL
    if (!getenv("OXCCL_HIP_RUNTIME")) {
      printf("abi_test (" FLAVOUR ", gpu): GPU mode drives CUDA; the RCCL flavour needs the HIP "
             "backend over tests/hip-on-cuda (set OXCCL_HIP_RUNTIME)\n");
      return 2;
    }
    setenv("OXCCL_BACKEND", "hip", 0);
#else
    setenv("OXCCL_BACKEND", "cuda", 0);
#endif
    char err[512];
    ndev = probe_devices(err, sizeof err);
    if (ndev < 1) {
      printf("abi_test (" FLAVOUR ", gpu): %s\n", err);
      printf("FAILED: no usable CUDA driver or GPU\n");
      return 2;
    }
    nranks = ndev < MAX_RANKS ? ndev : MAX_RANKS;
  }
  int version = 0;
  ncclGetVersion(&version);
  printf("abi_test (%s, %s, %d rank%s): %s", FLAVOUR, gpu ? "gpu" : "host", nranks,
         nranks == 1 ? "" : "s", is_oxccl ? oxcclGetVersionString() : "vendor library");
  if (!is_oxccl) printf(", ncclGetVersion %d", version);
  printf("\n");
  if (!is_oxccl) {
    printf("vendor library: skipping checks of oxccl's own behaviour; lacks:");
#define PRINT_MISSING(f) \
  if (!HAVE(f)) printf(" %s", #f);
    OPTIONAL_FUNCTIONS(PRINT_MISSING)
    printf("\n");
  }
  fflush(stdout);

  if (!gpu) {
    /* Processes first: fork while this process runs as few threads as possible. */
    section("static", section_static);
    section("processes", section_processes);
  } else {
    /* Processes before anything initializes CUDA here: children cannot use a CUDA their parent
     * initialized. */
    section("processes", section_processes);
    char err[512] = "no device 0";
    if (cuda_start(err, sizeof err) < 0 || bind_device(0)) {
      printf("FAILED: %s\n", err);
      return 2;
    }
    section("static", section_static);
  }
  section("threads", section_threads);
  section("init_all", section_init_all);
  section("bad_args", section_bad_args);
  int total = failure_total();
  if (total == 0) printf("ALL PASS\n");
  else printf("FAILED: %d failures\n", total);
  return total == 0 ? 0 : 1;
}
