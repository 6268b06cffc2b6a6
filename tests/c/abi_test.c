/*
 * End-to-end test of oxccl's C ABI, compiled against our header and linked with -lnccl (or, with
 * -DOXCCL_TEST_RCCL, against rccl/rccl.h and -lrccl). Run with OXCCL_BACKEND=host: buffers are
 * host memory and every call has completed when it returns (or when ncclGroupEnd returns).
 *
 * Sections: static checks (no communicator), 4 ranks in 4 processes, 4 ranks in 4 threads (every
 * collective, in place and out of place, send/recv, split, shrink, non-blocking init, an older
 * ncclConfig_t, abort inside a group), ncclCommInitAll in one thread, and a table of bad
 * arguments. Prints one line per section and "ALL PASS" at the end when nothing failed.
 */
#define _GNU_SOURCE
#include <pthread.h>
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

#define NRANKS 4
#define N 1000 /* elements per buffer: not a power of two */

static int failures;

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

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    perror("malloc");
    exit(2);
  }
  return p;
}

static void fill_f(float *p, size_t n, float v) {
  for (size_t i = 0; i < n; i++) p[i] = v;
}

/* ---- Every collective on one communicator ------------------------------------------------- */

static int test_allreduce(ncclComm_t comm, int rank, int n, stream_t s) {
  float *send = xmalloc(N * sizeof(float)), *recv = xmalloc(N * sizeof(float));
  float *want = xmalloc(N * sizeof(float));
  for (size_t i = 0; i < N; i++) {
    send[i] = val(rank, i);
    want[i] = 0;
    for (int r = 0; r < n; r++) want[i] += val(r, i);
  }
  fill_f(recv, N, -1);
  NCCLCHECK(ncclAllReduce(send, recv, N, ncclFloat, ncclSum, comm, s));
  check_floats("allreduce sum", rank, recv, want, N);
  memcpy(recv, send, N * sizeof(float));
  NCCLCHECK(ncclAllReduce(recv, recv, N, ncclFloat32, ncclSum, comm, s));
  check_floats("allreduce sum in place", rank, recv, want, N);

  /* Avg: contributions chosen so the mean is exact. */
  for (size_t i = 0; i < N; i++) {
    send[i] = (float)(4 * (rank + 1)) + (float)(i % 5);
    want[i] = (float)(2 * (n + 1)) + (float)(i % 5);
  }
  NCCLCHECK(ncclAllReduce(send, recv, N, ncclFloat, ncclAvg, comm, s));
  check_floats("allreduce avg", rank, recv, want, N);

  int32_t *is = xmalloc(N * sizeof(int32_t)), *ir = xmalloc(N * sizeof(int32_t));
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
    check_ints(names[op], rank, ir, iw, N);
  }

  /* Other element types: double, int64, uint8 max, half and bfloat16 (bit patterns). */
  double ds[16], dr[16];
  int64_t ls[16], lr[16];
  uint8_t us[16], ur[16];
  uint16_t hs[16], hr[16], bs[16], br[16];
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
  for (int i = 0; i < 16; i++) {
    CHECK(dr[i] == 0.25 * n * (n + 1), "rank %d double sum [%d] = %g", rank, i, dr[i]);
    CHECK(lr[i] == ((int64_t)1 << 40) * n * (n + 1) / 2, "rank %d int64 sum [%d]", rank, i);
    CHECK(ur[i] == (uint8_t)((n - 1) * 10 + i), "rank %d uint8 max [%d] = %d", rank, i, ur[i]);
    if (n == 4) {
      CHECK(hr[i] == 0x4400, "rank %d half sum [%d] = %#x, expected 4.0", rank, i, hr[i]);
      CHECK(br[i] == 0x4080, "rank %d bf16 sum [%d] = %#x, expected 4.0", rank, i, br[i]);
    }
  }

  /* Count 0 with NULL buffers is a no-op. */
  NCCLCHECK(ncclAllReduce(NULL, NULL, 0, ncclFloat, ncclSum, comm, s));

  /* PreMulSum: host-immediate scalar 2, then a "device" (here: host memory) scalar rank+1. */
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
  check_floats("allreduce premulsum immediate", rank, recv, want, N);
  NCCLCHECK(ncclRedOpDestroy(premul, comm));
  float *dscalar = xmalloc(sizeof(float));
  *dscalar = (float)(rank + 1);
  for (size_t i = 0; i < N; i++) {
    want[i] = 0;
    for (int r = 0; r < n; r++) want[i] += (float)(r + 1) * val(r, i);
  }
  NCCLCHECK(ncclRedOpCreatePreMulSum(&premul, dscalar, ncclFloat, ncclScalarDevice, comm));
  NCCLCHECK(ncclAllReduce(send, recv, N, ncclFloat, premul, comm, s));
  check_floats("allreduce premulsum device scalar", rank, recv, want, N);
  NCCLCHECK(ncclRedOpDestroy(premul, comm));

  free(dscalar);
  free(is);
  free(ir);
  free(iw);
  free(send);
  free(recv);
  free(want);
  return 0;
}

static int test_rooted(ncclComm_t comm, int rank, int n, stream_t s) {
  float *send = xmalloc(N * n * sizeof(float)), *recv = xmalloc(N * n * sizeof(float));
  float *want = xmalloc(N * n * sizeof(float));
  int root = 2 % n;

  /* Broadcast, out of place and in place, and the deprecated in-place ncclBcast. */
  for (size_t i = 0; i < N; i++) {
    send[i] = rank == root ? val(root, i) * 3 : -7;
    want[i] = val(root, i) * 3;
  }
  fill_f(recv, N, -1);
  NCCLCHECK(ncclBroadcast(send, recv, N, ncclFloat, root, comm, s));
  check_floats("broadcast", rank, recv, want, N);
  memcpy(recv, send, N * sizeof(float));
  NCCLCHECK(ncclBroadcast(recv, recv, N, ncclFloat, root, comm, s));
  check_floats("broadcast in place", rank, recv, want, N);
  int broot = 1 % n;
  for (size_t i = 0; i < N; i++) {
    recv[i] = rank == broot ? (float)i : -3;
    want[i] = (float)i;
  }
  NCCLCHECK(ncclBcast(recv, N, ncclFloat, broot, comm, s));
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
  if (rank == rroot) check_floats("reduce", rank, recv, want, N);
  memcpy(recv, send, N * sizeof(float));
  NCCLCHECK(ncclReduce(recv, recv, N, ncclFloat, ncclSum, rroot, comm, s));
  if (rank == rroot) check_floats("reduce in place", rank, recv, want, N);

  /* Gather to root 3 % n: out of place (non-roots pass NULL) and in place at the root. */
  int groot = 3 % n;
  for (size_t i = 0; i < N; i++) send[i] = val(rank, i) + 100 * rank;
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < N; i++) want[r * N + i] = val(r, i) + 100 * r;
  fill_f(recv, N * n, -1);
  NCCLCHECK(ncclGather(send, rank == groot ? recv : NULL, N, ncclFloat, groot, comm, s));
  if (rank == groot) check_floats("gather", rank, recv, want, N * n);
  fill_f(recv, N * n, -1);
  memcpy(recv + (size_t)rank * N, send, N * sizeof(float));
  NCCLCHECK(ncclGather(recv + (size_t)rank * N, recv, N, ncclFloat, groot, comm, s));
  if (rank == groot) check_floats("gather in place", rank, recv, want, N * n);

  /* Scatter from root 0: out of place (non-roots pass NULL send) and in place at the root. */
  int sroot = 0;
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < N; i++) send[r * N + i] = (float)(r * 1000) + (float)i;
  for (size_t i = 0; i < N; i++) want[i] = (float)(rank * 1000) + (float)i;
  fill_f(recv, N, -1);
  NCCLCHECK(ncclScatter(rank == sroot ? send : NULL, recv, N, ncclFloat, sroot, comm, s));
  check_floats("scatter", rank, recv, want, N);
  memcpy(recv, send, N * n * sizeof(float));
  if (rank != sroot) fill_f(recv, N * n, -1);
  NCCLCHECK(ncclScatter(recv, recv + (size_t)rank * N, N, ncclFloat, sroot, comm, s));
  check_floats("scatter in place", rank, recv + (size_t)rank * N, want, N);

  free(send);
  free(recv);
  free(want);
  return 0;
}

static int test_gathers(ncclComm_t comm, int rank, int n, stream_t s) {
  float *send = xmalloc(N * n * sizeof(float)), *recv = xmalloc(N * n * sizeof(float));
  float *want = xmalloc(N * n * sizeof(float));

  /* AllGather, out of place and in place (sendbuff == recvbuff + rank*count). */
  for (size_t i = 0; i < N; i++) send[i] = val(rank, i) * 10;
  for (int r = 0; r < n; r++)
    for (size_t i = 0; i < N; i++) want[r * N + i] = val(r, i) * 10;
  fill_f(recv, N * n, -1);
  NCCLCHECK(ncclAllGather(send, recv, N, ncclFloat, comm, s));
  check_floats("allgather", rank, recv, want, N * n);
  fill_f(recv, N * n, -1);
  memcpy(recv + (size_t)rank * N, send, N * sizeof(float));
  NCCLCHECK(ncclAllGather(recv + (size_t)rank * N, recv, N, ncclFloat, comm, s));
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
  check_floats("reducescatter", rank, recv, want, N);
  NCCLCHECK(ncclReduceScatter(send, send + (size_t)rank * N, N, ncclFloat, ncclSum, comm, s));
  check_floats("reducescatter in place", rank, send + (size_t)rank * N, want, N);

  /* AlltoAll: block j goes to rank j, arriving as block `rank`. */
  for (int j = 0; j < n; j++)
    for (size_t i = 0; i < N; i++) send[j * N + i] = (float)(rank * 100 + j) + (float)i / 1024;
  for (int j = 0; j < n; j++)
    for (size_t i = 0; i < N; i++) want[j * N + i] = (float)(j * 100 + rank) + (float)i / 1024;
  fill_f(recv, N * n, -1);
  NCCLCHECK(ncclAlltoAll(send, recv, N, ncclFloat, comm, s));
  check_floats("alltoall", rank, recv, want, N * n);
#ifdef OXCCL_TEST_RCCL
  fill_f(recv, N * n, -1);
  NCCLCHECK(ncclAllToAll(send, recv, N, ncclFloat, comm, s));
  check_floats("alltoall (RCCL spelling)", rank, recv, want, N * n);
#endif

  /* AlltoAllv: rank a sends (a+b)%3+1 elements to rank b, with a one-element gap between
   * blocks; gaps must stay untouched. */
  size_t sc[NRANKS], sd[NRANKS], rc[NRANKS], rd[NRANKS], stot = 0, rtot = 0;
  for (int j = 0; j < n; j++) {
    sc[j] = (size_t)((rank + j) % 3 + 1);
    rc[j] = (size_t)((j + rank) % 3 + 1);
    sd[j] = stot;
    rd[j] = rtot;
    stot += sc[j] + 1;
    rtot += rc[j] + 1;
  }
  int32_t *vs = xmalloc(stot * sizeof(int32_t)), *vr = xmalloc(rtot * sizeof(int32_t));
  int32_t *vw = xmalloc(rtot * sizeof(int32_t));
  for (size_t i = 0; i < stot; i++) vs[i] = -5;
  for (size_t i = 0; i < rtot; i++) vr[i] = vw[i] = -9;
  for (int j = 0; j < n; j++) {
    for (size_t k = 0; k < sc[j]; k++) vs[sd[j] + k] = rank * 1000 + j * 10 + (int)k;
    for (size_t k = 0; k < rc[j]; k++) vw[rd[j] + k] = j * 1000 + rank * 10 + (int)k;
  }
  NCCLCHECK(ncclAlltoAllv(vs, sc, sd, vr, rc, rd, ncclInt32, comm, s));
  check_ints("alltoallv", rank, vr, vw, rtot);
#ifdef OXCCL_TEST_RCCL
  for (size_t i = 0; i < rtot; i++) vr[i] = -9;
  NCCLCHECK(ncclAllToAllv(vs, sc, sd, vr, rc, rd, ncclInt32, comm, s));
  check_ints("alltoallv (RCCL spelling)", rank, vr, vw, rtot);
#endif
  free(vs);
  free(vr);
  free(vw);
  free(send);
  free(recv);
  free(want);
  return 0;
}

static int test_p2p_and_groups(ncclComm_t comm, int rank, int n, stream_t s) {
  float *a = xmalloc(N * sizeof(float)), *b = xmalloc(N * sizeof(float));
  float *c = xmalloc(N * sizeof(float)), *d = xmalloc(N * sizeof(float));
  float *want = xmalloc(N * sizeof(float));
  int next = (rank + 1) % n, prev = (rank + n - 1) % n;

  /* A ring shift plus an exchange with the opposite rank, all in one group. */
  for (size_t i = 0; i < N; i++) {
    a[i] = (float)(rank * 10000) + (float)i;
    c[i] = (float)(rank * 100) - (float)i;
  }
  fill_f(b, N, -1);
  fill_f(d, N, -1);
  int opp = (rank + n / 2) % n;
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclSend(a, N, ncclFloat, next, comm, s));
  NCCLCHECK(ncclRecv(b, N, ncclFloat, prev, comm, s));
  NCCLCHECK(ncclSend(c, N, ncclFloat, opp, comm, s));
  NCCLCHECK(ncclRecv(d, N, ncclFloat, opp, comm, s));
  NCCLCHECK(ncclGroupEnd());
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
  check_floats("grouped allreduce 1", rank, b, want, N);
  check_floats("grouped allreduce 2", rank, c, want, N);

  /* ncclGroupSimulateEnd estimates and launches nothing. */
  fill_f(b, N, -1);
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclAllReduce(a, b, N, ncclFloat, ncclSum, comm, s));
  NCCLCHECK(ncclGroupSimulateEnd(&sim));
  CHECK(sim.estimatedTime > 0, "rank %d simulated time %g", rank, (double)sim.estimatedTime);
  fill_f(want, N, -1);
  check_floats("simulated group left recvbuff alone", rank, b, want, N);

#ifdef OXCCL_TEST_RCCL
  /* AllReduce with a bias: sum(rank+1) + acc. */
  for (size_t i = 0; i < N; i++) {
    a[i] = (float)(rank + 1);
    c[i] = (float)(100 + i);
    want[i] = (float)(n * (n + 1) / 2) + (float)(100 + i);
  }
  NCCLCHECK(ncclAllReduceWithBias(a, b, N, ncclFloat, ncclSum, comm, s, c));
  check_floats("allreduce with bias", rank, b, want, N);
#endif
  free(a);
  free(b);
  free(c);
  free(d);
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
  ncclResult_t async = ncclInternalError;
  NCCLCHECK(ncclCommGetAsyncError(comm, &async));
  CHECK(async == ncclSuccess, "async error %d", (int)async);
  ncclUniqueId id;
  NCCLCHECK(ncclCommGetUniqueId(comm, &id));

  ncclTeam_t world = ncclTeamWorld(comm);
  CHECK(world.nRanks == n && world.rank == rank && world.stride == 1, "team world {%d,%d,%d}",
        world.nRanks, world.rank, world.stride);
  ncclTeam_t lsa = ncclTeamLsa(comm);
  CHECK(lsa.nRanks == n && lsa.rank == rank, "team lsa {%d,%d,%d}", lsa.nRanks, lsa.rank,
        lsa.stride);
  CHECK(ncclTeamRankToWorld(comm, world, n - 1) == n - 1, "team rank to world");
  CHECK(ncclDevCommCreate(comm, NULL, NULL) == ncclInvalidUsage, "ncclDevCommCreate");

  /* Registration and windows. */
  float *buf = xmalloc(4096);
  void *handle = NULL;
  NCCLCHECK(ncclCommRegister(comm, buf, 4096, &handle));
  CHECK(handle != NULL, "registration handle");
  NCCLCHECK(ncclCommDeregister(comm, handle));
  ncclWindow_t win = NULL;
  void *user = NULL;
  NCCLCHECK(ncclCommWindowRegister(comm, buf, 4096, &win, NCCL_WIN_COLL_SYMMETRIC));
  NCCLCHECK(ncclWinGetUserPtr(comm, win, &user));
  CHECK(user == buf, "window user pointer");
  NCCLCHECK(ncclCommWindowDeregister(comm, win));
  free(buf);

  void *mem = NULL;
  NCCLCHECK(ncclMemAlloc(&mem, 1 << 20));
  CHECK(mem != NULL, "ncclMemAlloc");
  memset(mem, 1, 1 << 20);
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

/* Allreduce of rank+1 on comm; checks the sum over `members` world ranks given. */
static int check_sum(ncclComm_t comm, int rank, const int *members, int nmembers,
                     const char *what) {
  float x[8], y[8], want[8];
  float sum = 0;
  for (int i = 0; i < nmembers; i++) sum += (float)(members[i] + 1);
  for (int i = 0; i < 8; i++) {
    x[i] = (float)(rank + 1);
    want[i] = sum;
  }
  NCCLCHECK(ncclAllReduce(x, y, 8, ncclFloat, ncclSum, comm, NULL));
  return check_floats(what, rank, y, want, 8);
}

/* ---- 4 processes ---------------------------------------------------------------------------- */

static int section_processes(void) {
  ncclUniqueId id;
  NCCLCHECK(ncclGetUniqueId(&id));
  pid_t pids[NRANKS];
  for (int r = 0; r < NRANKS; r++) {
    fflush(NULL);
    pids[r] = fork();
    if (pids[r] < 0) {
      perror("fork");
      return -1;
    }
    if (pids[r] == 0) {
      alarm(40);
      ncclComm_t comm = NULL;
      int rc = 1;
      ncclResult_t res = ncclCommInitRank(&comm, NRANKS, id, r);
      if (res != ncclSuccess) {
        fprintf(stderr, "FAIL process rank %d: ncclCommInitRank returned %d: %s\n", r, (int)res,
                ncclGetLastError(NULL));
      } else {
        stream_t s = (stream_t)(uintptr_t)(0x100 + r);
        if (run_all(comm, r, NRANKS, s) == 0 && ncclCommDestroy(comm) == ncclSuccess &&
            failure_total() == 0)
          rc = 0;
      }
      fflush(NULL);
      _exit(rc);
    }
  }
  int ok = 0;
  for (int r = 0; r < NRANKS; r++) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) ok++;
    else {
      fprintf(stderr, "FAIL process rank %d exited with status %#x\n", r, status);
      fail_count();
    }
  }
  return ok == NRANKS ? 0 : -1;
}

/* ---- 4 threads ------------------------------------------------------------------------------ */

struct thread_arg {
  int rank;
  ncclUniqueId id, nb_id, old_id;
  int rc;
};

static int thread_body(struct thread_arg *a) {
  int rank = a->rank, n = NRANKS;
  ncclComm_t comm = NULL;
  /* Every rank passes the NULL stream: ranks of one process must not serialise on it. */
  NCCLCHECK(ncclCommInitRank(&comm, n, a->id, rank));
  if (run_all(comm, rank, n, NULL)) return -1;

  /* Split by parity, rank 3 out (NCCL_SPLIT_NOCOLOR), keys reversing the order. */
  ncclComm_t sub = NULL;
  int color = rank == 3 ? NCCL_SPLIT_NOCOLOR : rank % 2;
  NCCLCHECK(ncclCommSplit(comm, color, -rank, &sub, NULL));
  if (rank == 3) {
    CHECK(sub == NULL, "NOCOLOR split returned a communicator");
  } else {
    int cnt = 0, r = -1;
    NCCLCHECK(ncclCommCount(sub, &cnt));
    NCCLCHECK(ncclCommUserRank(sub, &r));
    int even[2] = {0, 2}, odd[1] = {1};
    CHECK(cnt == (rank % 2 ? 1 : 2), "split size %d", cnt);
    if (rank == 0) CHECK(r == 1, "split key order: rank 0 got %d", r);
    if (rank == 2) CHECK(r == 0, "split key order: rank 2 got %d", r);
    if (rank % 2) check_sum(sub, rank, odd, 1, "split odd");
    else check_sum(sub, rank, even, 2, "split even");
    NCCLCHECK(ncclCommDestroy(sub));
  }

  /* Abort inside a group, as PyTorch does. */
  ncclComm_t extra = NULL;
  NCCLCHECK(ncclCommSplit(comm, 0, rank, &extra, NULL));
  NCCLCHECK(ncclGroupStart());
  NCCLCHECK(ncclCommAbort(extra));
  NCCLCHECK(ncclGroupEnd());
  float x = 1;
  ncclResult_t r = ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, extra, NULL);
  CHECK(r == ncclInvalidUsage, "allreduce on an aborted communicator returned %d", (int)r);
  /* Shrink last: rank 3 does not take part, so it must not use the parent communicator for
   * another split afterwards. Ranks 0..2 drop rank 3. */
  if (rank != 3) {
    int exclude[1] = {3}, members[3] = {0, 1, 2};
    ncclComm_t shr = NULL;
    NCCLCHECK(ncclCommShrink(comm, exclude, 1, &shr, NULL, NCCL_SHRINK_DEFAULT));
    int cnt = 0;
    NCCLCHECK(ncclCommCount(shr, &cnt));
    CHECK(cnt == 3, "shrunk size %d", cnt);
    check_sum(shr, rank, members, 3, "shrink");
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
  int all4[4] = {0, 1, 2, 3};
  check_sum(nb, rank, all4, 4, "non-blocking communicator");
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
  check_sum(oc, rank, all4, 4, "communicator from a 2.27 config");
  NCCLCHECK(ncclCommDestroy(oc));
  return 0;
}

static void *thread_main(void *p) {
  struct thread_arg *a = p;
  a->rc = thread_body(a);
  return NULL;
}

static int section_threads(void) {
  ncclUniqueId id, nb_id, old_id;
  NCCLCHECK(ncclGetUniqueId(&id));
  NCCLCHECK(ncclGetUniqueId(&nb_id));
  NCCLCHECK(ncclGetUniqueId(&old_id));
  pthread_t th[NRANKS];
  struct thread_arg args[NRANKS];
  for (int r = 0; r < NRANKS; r++) {
    args[r].rank = r;
    args[r].id = id;
    args[r].nb_id = nb_id;
    args[r].old_id = old_id;
    args[r].rc = -1;
    pthread_create(&th[r], NULL, thread_main, &args[r]);
  }
  int rc = 0;
  for (int r = 0; r < NRANKS; r++) {
    pthread_join(th[r], NULL);
    if (args[r].rc) rc = -1;
  }
  return rc;
}

/* ---- ncclCommInitAll: 4 ranks driven from one thread ------------------------------------------ */

static int section_init_all(void) {
  ncclComm_t comms[NRANKS];
  int devs[NRANKS] = {3, 2, 1, 0};
  NCCLCHECK(ncclCommInitAll(comms, NRANKS, devs));
  for (int r = 0; r < NRANKS; r++) {
    int v = -1;
    NCCLCHECK(ncclCommUserRank(comms[r], &v));
    CHECK(v == r, "InitAll rank %d reports %d", r, v);
    NCCLCHECK(ncclCommCuDevice(comms[r], &v));
    CHECK(v == devs[r], "InitAll rank %d on device %d, expected %d", r, v, devs[r]);
  }
  float *send[NRANKS], *recv[NRANKS], want[N];
  for (int r = 0; r < NRANKS; r++) {
    send[r] = xmalloc(N * sizeof(float));
    recv[r] = xmalloc(N * sizeof(float));
    for (size_t i = 0; i < N; i++) send[r][i] = val(r, i);
  }
  for (size_t i = 0; i < N; i++) {
    want[i] = 0;
    for (int r = 0; r < NRANKS; r++) want[i] += val(r, i);
  }
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < NRANKS; r++)
    NCCLCHECK(ncclAllReduce(send[r], recv[r], N, ncclFloat, ncclSum, comms[r], NULL));
  NCCLCHECK(ncclGroupEnd());
  for (int r = 0; r < NRANKS; r++) check_floats("InitAll grouped allreduce", r, recv[r], want, N);
  /* Send/recv between the communicators of one thread. */
  NCCLCHECK(ncclGroupStart());
  for (int r = 0; r < NRANKS; r++) {
    NCCLCHECK(ncclSend(send[r], N, ncclFloat, (r + 1) % NRANKS, comms[r], NULL));
    NCCLCHECK(ncclRecv(recv[r], N, ncclFloat, (r + NRANKS - 1) % NRANKS, comms[r], NULL));
  }
  NCCLCHECK(ncclGroupEnd());
  for (int r = 0; r < NRANKS; r++)
    check_floats("InitAll grouped send/recv", r, recv[r], send[(r + NRANKS - 1) % NRANKS], N);
  for (int r = 0; r < NRANKS; r++) {
    NCCLCHECK(ncclCommDestroy(comms[r]));
    free(send[r]);
    free(recv[r]);
  }
  /* The multi-device idiom without InitAll: every rank's init inside one group, then the
   * same with ncclCommInitRankScalable and two ids. */
  ncclUniqueId id, ids[2];
  NCCLCHECK(ncclGetUniqueId(&id));
  NCCLCHECK(ncclGetUniqueId(&ids[0]));
  NCCLCHECK(ncclGetUniqueId(&ids[1]));
  for (int pass = 0; pass < 2; pass++) {
    NCCLCHECK(ncclGroupStart());
    for (int r = 0; r < NRANKS; r++) {
      if (pass == 0) NCCLCHECK(ncclCommInitRank(&comms[r], NRANKS, id, r));
      else NCCLCHECK(ncclCommInitRankScalable(&comms[r], NRANKS, r, 2, ids, NULL));
    }
    NCCLCHECK(ncclGroupEnd());
    float x[NRANKS][4], y[NRANKS][4];
    NCCLCHECK(ncclGroupStart());
    for (int r = 0; r < NRANKS; r++) {
      for (int i = 0; i < 4; i++) x[r][i] = (float)(r + 1);
      NCCLCHECK(ncclAllReduce(x[r], y[r], 4, ncclFloat, ncclSum, comms[r], NULL));
    }
    NCCLCHECK(ncclGroupEnd());
    for (int r = 0; r < NRANKS; r++) {
      for (int i = 0; i < 4; i++)
        CHECK(y[r][i] == 10.0f, "%s: rank %d got %g", pass ? "scalable init" : "grouped init", r,
              (double)y[r][i]);
      NCCLCHECK(ncclCommDestroy(comms[r]));
    }
  }
  /* NULL devlist means devices 0..ndev-1. */
  ncclComm_t two[2];
  NCCLCHECK(ncclCommInitAll(two, 2, NULL));
  for (int r = 0; r < 2; r++) {
    int d = -1;
    NCCLCHECK(ncclCommCuDevice(two[r], &d));
    CHECK(d == r, "InitAll NULL devlist: rank %d on device %d", r, d);
    NCCLCHECK(ncclCommDestroy(two[r]));
  }
  return 0;
}

/* ---- Bad arguments ---------------------------------------------------------------------------- */

static void expect(const char *what, ncclResult_t got, ncclResult_t want, const char *substr) {
  const char *last = ncclGetLastError(NULL);
  CHECK(got == want, "%s: returned %d (%s), expected %d; last error: %s", what, (int)got,
        ncclGetErrorString(got), (int)want, last);
  if (substr && got == want)
    CHECK(strstr(last, substr) != NULL, "%s: last error \"%s\" lacks \"%s\"", what, last,
          substr);
}

/* Checks that need no communicator: they pass whatever state the core is in. */
static int section_static(void) {
  int v = 0;
  NCCLCHECK(ncclGetVersion(&v));
  CHECK(v == EXPECTED_VERSION, "ncclGetVersion %d, expected %d", v, EXPECTED_VERSION);
  CHECK(v == NCCL_VERSION_CODE, "ncclGetVersion %d differs from the header's %d", v,
        NCCL_VERSION_CODE);
  CHECK(strncmp(oxcclGetVersionString(), "oxccl ", 6) == 0, "oxcclGetVersionString: %s",
        oxcclGetVersionString());

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

  float buf[16] = {0};
  ncclComm_t c = NULL;
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  expect("ncclGetVersion(NULL)", ncclGetVersion(NULL), ncclInvalidArgument, "NULL");
  expect("NULL comm", ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, NULL, NULL),
         ncclInvalidArgument, "comm argument is NULL");
  /* The last-error pointer stays valid and is overwritten in place. */
  const char *p = ncclGetLastError(NULL);
  expect("garbage comm", ncclCommCount((ncclComm_t)(uintptr_t)0x10, &v), ncclInvalidArgument,
         "not a communicator");
  CHECK(strstr(p, "not a communicator") != NULL, "old last-error pointer reads \"%s\"", p);
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
  int dup[2] = {1, 1};
  ncclComm_t two[2];
  expect("InitAll duplicate device", ncclCommInitAll(two, 2, dup), ncclInvalidUsage,
         "duplicate device");
  expect("ncclGetUniqueId(NULL)", ncclGetUniqueId(NULL), ncclInvalidArgument, "NULL");
  void *mem = NULL;
  expect("ncclMemAlloc(NULL)", ncclMemAlloc(NULL, 16), ncclInvalidArgument, "NULL");
  NCCLCHECK(ncclMemAlloc(&mem, 16));
  NCCLCHECK(ncclMemFree(mem));
  expect("ncclMemFree(foreign)", ncclMemFree(buf), ncclInvalidArgument, NULL);
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  expect("simulate without group", ncclGroupSimulateEnd(&sim), ncclInvalidUsage, "ncclGroupStart");
  NCCLCHECK(ncclGroupStart());
  sim.magic = 0;
  expect("simulate bad magic", ncclGroupSimulateEnd(&sim), ncclInvalidArgument, "magic");
  NCCLCHECK(ncclGroupEnd());
  CHECK(ncclCommDestroy(NULL) == ncclSuccess, "ncclCommDestroy(NULL)");
  CHECK(ncclCommAbort(NULL) == ncclSuccess, "ncclCommAbort(NULL)");
  expect("device API requirement", ncclLLA2ACreateRequirement(1, 1, NULL, NULL), ncclInvalidUsage,
         "device");
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
static int section_bad_args(void) {
  ncclUniqueId id;
  NCCLCHECK(ncclGetUniqueId(&id));
  ncclComm_t c1 = NULL, c = NULL;
  NCCLCHECK(ncclCommInitRank(&c1, 1, id, 0));
  float buf[16] = {0};
  int v = 0;
  ncclRedOp_t op;
  float scalar = 1;

  expect("NULL sendbuff", ncclAllReduce(NULL, buf, 4, ncclFloat, ncclSum, c1, NULL),
         ncclInvalidArgument, "send buffer is NULL");
  expect("NULL recvbuff", ncclAllGather(buf, NULL, 4, ncclFloat, c1, NULL), ncclInvalidArgument,
         "receive buffer is NULL");
  expect("datatype 99", ncclAllReduce(buf, buf, 4, (ncclDataType_t)99, ncclSum, c1, NULL),
         ncclInvalidArgument, "invalid data type 99");
  expect("op 77", ncclAllReduce(buf, buf, 4, ncclFloat, (ncclRedOp_t)77, c1, NULL),
         ncclInvalidArgument, "invalid reduction operator 77");
  expect("root out of range", ncclBroadcast(buf, buf, 4, ncclFloat, 1, c1, NULL),
         ncclInvalidArgument, "invalid root 1");
  expect("negative root", ncclReduce(buf, buf, 4, ncclFloat, ncclSum, -1, c1, NULL),
         ncclInvalidArgument, "invalid root -1");
  expect("peer out of range", ncclSend(buf, 4, ncclFloat, 5, c1, NULL), ncclInvalidArgument,
         "invalid peer 5");
  expect("recv NULL", ncclRecv(NULL, 4, ncclFloat, 0, c1, NULL), ncclInvalidArgument,
         "receive buffer is NULL");
  expect("count NULL out", ncclCommCount(c1, NULL), ncclInvalidArgument, "NULL");
  expect("split color -5", ncclCommSplit(c1, -5, 0, &c, NULL), ncclInvalidArgument,
         "invalid color");
  expect("revoke flags", ncclCommRevoke(c1, 7), ncclInvalidArgument, "revokeFlags");
  expect("shrink flags", ncclCommShrink(c1, NULL, 0, &c, NULL, 9), ncclInvalidArgument,
         "shrinkFlags");
  expect("PreMulSum NULL scalar",
         ncclRedOpCreatePreMulSum(&op, NULL, ncclFloat, ncclScalarHostImmediate, c1),
         ncclInvalidArgument, "scalar");
  expect("PreMulSum residence 9",
         ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, (ncclScalarResidence_t)9, c1),
         ncclInvalidArgument, "residence");
  expect("RedOpDestroy built-in", ncclRedOpDestroy(ncclSum, c1), ncclInvalidArgument, "built in");
  expect("register NULL handle", ncclCommRegister(c1, buf, sizeof buf, NULL),
         ncclInvalidArgument, "NULL");
  expect("deregister foreign", ncclCommDeregister(c1, buf), ncclInvalidArgument, NULL);
  expect("ncclDevCommCreate", ncclDevCommCreate(c1, NULL, NULL), ncclInvalidUsage, "device");
  expect("ncclCommGrow", ncclCommGrow(c1, 2, &id, 1, &c, NULL), ncclInvalidUsage, "ncclCommGrow");
  expect("mem stat 9", ncclCommMemStats(c1, (ncclCommMemStat_t)9, NULL), ncclInvalidArgument,
         NULL);

  /* An error inside a group fails the group end too. */
  NCCLCHECK(ncclGroupStart());
  expect("datatype 99 in a group",
         ncclAllReduce(buf, buf, 4, (ncclDataType_t)99, ncclSum, c1, NULL), ncclInvalidArgument,
         "invalid data type 99");
  expect("group end after a failed call", ncclGroupEnd(), ncclInvalidArgument,
         "invalid data type 99");

  /* Suspend blocks operations until resume. */
  NCCLCHECK(ncclCommSuspend(c1, NCCL_SUSPEND_MEM));
  expect("allreduce while suspended", ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, c1, NULL),
         ncclInvalidUsage, "suspended");
  NCCLCHECK(ncclCommResume(c1));
  NCCLCHECK(ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, c1, NULL));

  /* Revoke: no new operations, but destroy still works. */
  ncclComm_t rv = NULL;
  NCCLCHECK(ncclCommSplit(c1, 0, 0, &rv, NULL));
  NCCLCHECK(ncclCommRevoke(rv, NCCL_REVOKE_DEFAULT));
  expect("allreduce on a revoked comm", ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, rv, NULL),
         ncclInvalidUsage, "revoked");
  NCCLCHECK(ncclCommDestroy(rv));

  /* Destroyed and aborted communicators. */
  NCCLCHECK(ncclCommDestroy(c1));
  expect("destroyed comm", ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, c1, NULL),
         ncclInvalidUsage, "destroyed");
  expect("destroy twice", ncclCommDestroy(c1), ncclInvalidUsage, "destroyed");
  expect("count on destroyed comm", ncclCommCount(c1, &v), ncclInvalidUsage, "destroyed");
  NCCLCHECK(ncclGetUniqueId(&id));
  ncclComm_t ca = NULL;
  NCCLCHECK(ncclCommInitRank(&ca, 1, id, 0));
  NCCLCHECK(ncclCommAbort(ca));
  expect("aborted comm", ncclSend(buf, 4, ncclFloat, 0, ca, NULL), ncclInvalidUsage, "aborted");
  CHECK(ncclCommAbort(ca) == ncclSuccess, "abort is idempotent");
  return 0;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int section(const char *name, int (*fn)(void)) {
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

int main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  setenv("OXCCL_BACKEND", "host", 0);
  alarm(55); /* a deadlock must fail the test, not hang it */
  printf("oxccl C ABI test (%s header): %s\n", FLAVOUR, oxcclGetVersionString());
  /* Processes first: fork while this process runs as few threads as possible. */
  section("static", section_static);
  section("processes", section_processes);
  section("threads", section_threads);
  section("init_all", section_init_all);
  section("bad_args", section_bad_args);
  int total = failure_total();
  if (total == 0) printf("ALL PASS\n");
  else printf("FAILED: %d failures\n", total);
  return total == 0 ? 0 : 1;
}
