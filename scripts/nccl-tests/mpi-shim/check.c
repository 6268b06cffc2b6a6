/* Checks mpi_shim.c the way nccl-tests uses it: every collective, at the ranks launch.sh
 * starts, with the host names OXCCL_MPI_HOSTNAME gives. Exits non-zero on the first wrong value
 * (run by tests/tests/mpi_shim.rs). */
#include "mpi.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fails;

#define EXPECT(cond)                                                        \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "check.c:%d: %s\n", __LINE__, #cond);                 \
      ++fails;                                                              \
    }                                                                       \
  } while (0)

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int r, n;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm c;
  MPI_Comm_split(MPI_COMM_WORLD, 0, r, &c);
  for (int round = 0; round < 20; ++round) {
    int x = r + round;
    MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_INT, MPI_SUM, c);
    EXPECT(x == n * (n - 1) / 2 + n * round);
    double d = r;
    double dmax = 0;
    MPI_Allreduce(&d, &dmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    EXPECT(dmax == n - 1);
    int64_t m = 100 - r;
    MPI_Allreduce(MPI_IN_PLACE, &m, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
    EXPECT(m == 100 - (n - 1));
    long long s = r;
    MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    EXPECT(s == (long long)n * (n - 1) / 2);
  }
  uint64_t h[64] = {0};
  h[r] = 1000 + r;
  MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, h, sizeof(uint64_t), MPI_BYTE, MPI_COMM_WORLD);
  for (int p = 0; p < n; ++p) EXPECT(h[p] == (uint64_t)(1000 + p));
  char id[128] = {0};
  if (r == 0) strcpy(id, "unique id");
  MPI_Bcast(id, sizeof id, MPI_BYTE, 0, c);
  EXPECT(strcmp(id, "unique id") == 0);
  double mine[2] = {r, r * 10.0}, all[128] = {0};
  MPI_Gather(mine, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (r == 0) {
    for (int p = 0; p < n; ++p) EXPECT(all[2 * p] == p && all[2 * p + 1] == p * 10.0);
  }
  char host[64];
  EXPECT(gethostname(host, sizeof host) == 0);
  const char* want = getenv("OXCCL_MPI_HOSTNAME");
  if (want != NULL) EXPECT(strcmp(host, want) == 0);
  for (int i = 0; i < 100; ++i) MPI_Barrier(MPI_COMM_WORLD);
  MPI_Comm_free(&c);
  MPI_Finalize();
  if (fails == 0) printf("rank %d of %d: ok\n", r, n);
  return fails == 0 ? 0 : 1;
}
