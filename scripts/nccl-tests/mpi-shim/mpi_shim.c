/* A stand-in for MPI that runs nccl-tests' MPI build as several processes of one machine (see
 * mpi.h for what it covers). launch.sh starts the processes with OXCCL_MPI_RANK, OXCCL_MPI_SIZE
 * and OXCCL_MPI_JOB; they meet in a shared-memory segment named after the job, where every
 * collective is: each rank copies its part into its slot, a barrier, each rank reads what it
 * needs, a barrier (so no slot is overwritten while read).
 *
 * OXCCL_MPI_HOSTNAME, when set, is what gethostname() returns in the process (this library
 * interposes it): nccl-tests numbers a process's GPU among the processes of its host name, so
 * giving ranks 0-1 and 2-3 two names places four processes on GPUs 0, 1, 0, 1. */
#define _GNU_SOURCE
#include "mpi.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#define SLOT_BYTES (64 << 10)
#define MAX_RANKS 64
#define WAIT_SECONDS 300

struct header {
  unsigned arrived;
  unsigned generation;
  unsigned joined;
};

static int g_rank = -1, g_size = 0;
static char g_name[128];
static struct header* g_head;
static char* g_slots;

static void die(const char* what) {
  fprintf(stderr, "mpi-shim rank %d: %s\n", g_rank, what);
  exit(1);
}

static int env_int(const char* name) {
  const char* v = getenv(name);
  if (v == NULL || *v == '\0') {
    fprintf(stderr, "mpi-shim: %s is not set (start the ranks with launch.sh)\n", name);
    exit(1);
  }
  return atoi(v);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static char* slot(int r) { return g_slots + (size_t)r * SLOT_BYTES; }

/* Sense-reversing barrier over the segment; a rank that waits too long (a peer died) exits. */
static void barrier(void) {
  const unsigned gen = __atomic_load_n(&g_head->generation, __ATOMIC_ACQUIRE);
  if (__atomic_add_fetch(&g_head->arrived, 1, __ATOMIC_ACQ_REL) == (unsigned)g_size) {
    __atomic_store_n(&g_head->arrived, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&g_head->generation, gen + 1, __ATOMIC_RELEASE);
    return;
  }
  const double start = now();
  unsigned spins = 0;
  while (__atomic_load_n(&g_head->generation, __ATOMIC_ACQUIRE) == gen) {
    if (++spins % 1024 == 0) {
      sched_yield();
      if (now() - start > WAIT_SECONDS) die("a peer did not reach the barrier (exited?)");
    }
  }
}

static size_t type_size(MPI_Datatype t) {
  switch (t) {
    case MPI_BYTE: return 1;
    case MPI_INT: return sizeof(int);
    case MPI_LONG: return sizeof(long);
    case MPI_LONG_LONG: return sizeof(long long);
    case MPI_INT64_T: return sizeof(int64_t);
    case MPI_DOUBLE: return sizeof(double);
    default: die("unknown datatype"); return 0;
  }
}

static void check(MPI_Comm comm, size_t bytes) {
  if (comm != MPI_COMM_WORLD) die("only MPI_COMM_WORLD (and splits equal to it)");
  if (bytes > SLOT_BYTES) die("message larger than a slot");
}

int MPI_Init(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  g_rank = env_int("OXCCL_MPI_RANK");
  g_size = env_int("OXCCL_MPI_SIZE");
  if (g_size < 1 || g_size > MAX_RANKS || g_rank < 0 || g_rank >= g_size) die("bad rank or size");
  const char* job = getenv("OXCCL_MPI_JOB");
  snprintf(g_name, sizeof g_name, "/oxccl-mpi-%s", job ? job : "0");
  const size_t bytes = 4096 + (size_t)g_size * SLOT_BYTES;
  int fd = shm_open(g_name, O_RDWR | O_CREAT, 0600);
  if (fd < 0) die("shm_open failed");
  /* Every rank sizes it alike; fresh pages are zero, so the header starts at rest. */
  if (ftruncate(fd, (off_t)bytes) != 0) die("ftruncate failed");
  void* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) die("mmap failed");
  g_head = (struct header*)p;
  g_slots = (char*)p + 4096;
  /* Every rank has mapped the segment before any collective runs. */
  __atomic_add_fetch(&g_head->joined, 1, __ATOMIC_ACQ_REL);
  const double start = now();
  while (__atomic_load_n(&g_head->joined, __ATOMIC_ACQUIRE) < (unsigned)g_size) {
    sched_yield();
    if (now() - start > WAIT_SECONDS) die("not every rank started");
  }
  return MPI_SUCCESS;
}

int MPI_Finalize(void) {
  barrier();
  if (g_rank == 0) shm_unlink(g_name);
  return MPI_SUCCESS;
}

int MPI_Comm_size(MPI_Comm comm, int* size) {
  check(comm, 0);
  *size = g_size;
  return MPI_SUCCESS;
}

int MPI_Comm_rank(MPI_Comm comm, int* rank) {
  check(comm, 0);
  *rank = g_rank;
  return MPI_SUCCESS;
}

int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* out) {
  (void)key;
  int colors[MAX_RANKS];
  MPI_Allgather(&color, 1, MPI_INT, colors, 1, MPI_INT, comm);
  for (int r = 0; r < g_size; ++r) {
    if (colors[r] != color) die("MPI_Comm_split into several communicators is not supported");
  }
  *out = MPI_COMM_WORLD;
  return MPI_SUCCESS;
}

int MPI_Comm_free(MPI_Comm* comm) {
  *comm = 0;
  return MPI_SUCCESS;
}

int MPI_Barrier(MPI_Comm comm) {
  check(comm, 0);
  barrier();
  return MPI_SUCCESS;
}

int MPI_Bcast(void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  const size_t bytes = (size_t)count * type_size(type);
  check(comm, bytes);
  if (g_rank == root) memcpy(slot(root), buf, bytes);
  barrier();
  if (g_rank != root) memcpy(buf, slot(root), bytes);
  barrier();
  return MPI_SUCCESS;
}

#define COMBINE(T)                                                    \
  do {                                                                \
    T* a = (T*)acc;                                                   \
    const T* b = (const T*)in;                                        \
    for (int i = 0; i < count; ++i) {                                 \
      if (op == MPI_SUM) a[i] += b[i];                                \
      else if (op == MPI_MIN) a[i] = b[i] < a[i] ? b[i] : a[i];       \
      else if (op == MPI_MAX) a[i] = b[i] > a[i] ? b[i] : a[i];       \
      else die("unknown reduction");                                  \
    }                                                                 \
  } while (0)

static void combine(void* acc, const void* in, int count, MPI_Datatype type, MPI_Op op) {
  switch (type) {
    case MPI_INT: COMBINE(int); break;
    case MPI_LONG: COMBINE(long); break;
    case MPI_LONG_LONG: COMBINE(long long); break;
    case MPI_INT64_T: COMBINE(int64_t); break;
    case MPI_DOUBLE: COMBINE(double); break;
    default: die("no reduction for this datatype");
  }
}

int MPI_Allreduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op,
                  MPI_Comm comm) {
  const size_t bytes = (size_t)count * type_size(type);
  check(comm, bytes);
  memcpy(slot(g_rank), send == MPI_IN_PLACE ? recv : send, bytes);
  barrier();
  /* Every rank combines in rank order, so all get bitwise the same result. */
  char acc[SLOT_BYTES];
  memcpy(acc, slot(0), bytes);
  for (int r = 1; r < g_size; ++r) combine(acc, slot(r), count, type, op);
  memcpy(recv, acc, bytes);
  barrier();
  return MPI_SUCCESS;
}

int MPI_Gather(const void* send, int scount, MPI_Datatype stype, void* recv, int rcount,
               MPI_Datatype rtype, int root, MPI_Comm comm) {
  const size_t bytes = (size_t)scount * type_size(stype);
  check(comm, bytes);
  if ((size_t)rcount * type_size(rtype) != bytes && g_rank == root) die("gather sizes differ");
  const void* mine = send == MPI_IN_PLACE ? (const char*)recv + (size_t)g_rank * bytes : send;
  memcpy(slot(g_rank), mine, bytes);
  barrier();
  if (g_rank == root) {
    for (int r = 0; r < g_size; ++r) memcpy((char*)recv + (size_t)r * bytes, slot(r), bytes);
  }
  barrier();
  return MPI_SUCCESS;
}

int MPI_Allgather(const void* send, int scount, MPI_Datatype stype, void* recv, int rcount,
                  MPI_Datatype rtype, MPI_Comm comm) {
  const size_t bytes = (size_t)rcount * type_size(rtype);
  check(comm, bytes);
  const void* mine = (char*)recv + (size_t)g_rank * bytes;
  if (send != MPI_IN_PLACE) {
    if ((size_t)scount * type_size(stype) != bytes) die("allgather sizes differ");
    mine = send;
  }
  memcpy(slot(g_rank), mine, bytes);
  barrier();
  for (int r = 0; r < g_size; ++r) memcpy((char*)recv + (size_t)r * bytes, slot(r), bytes);
  barrier();
  return MPI_SUCCESS;
}

/* nccl-tests groups processes into hosts by this name (see the top of the file). */
int gethostname(char* name, size_t len) {
  const char* fake = getenv("OXCCL_MPI_HOSTNAME");
  struct utsname u;
  if (fake == NULL || *fake == '\0') {
    if (uname(&u) != 0) return -1;
    fake = u.nodename;
  }
  if (strlen(fake) + 1 > len) {
    errno = ENAMETOOLONG;
    return -1;
  }
  strcpy(name, fake);
  return 0;
}
