/*
 * A profiler plugin for oxccl's tests, written against the ABI NCCL 2.28 loads
 * (ncclProfiler_v5). It asks for the events in OXTEST_PROFILER_MASK (default: Coll, 0x2) and
 * appends one line per call to OXTEST_PROFILER_LOG: "start <id> type=<t> parent=<id> ..." with
 * the fields of the type, "stop <id>", "init rank=<r> nranks=<n> nnodes=<k>", "finalize".
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int result_t;
typedef void (*logger_t)(int, unsigned long, const char*, int, const char*, ...);

struct descr {
  uint64_t type;
  void* parent;
  int rank;
  union {
    struct { int captured, depth; } group_api;
    struct { const char* func; size_t count; const char* dtype; int root; void* stream; _Bool captured; } coll_api;
    struct { uint64_t seq; const char* func; const void* send; void* recv; size_t count; int root;
             const char* dtype; uint8_t nch, nwarps; const char* algo; const char* proto; void* group; } coll;
  } u;
};

struct event { uint64_t type; long id; };
struct ctx { int rank; };

static long next_id = 0;

static void log_line(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
#include <stdarg.h>
static void log_line(const char* fmt, ...) {
  const char* path = getenv("OXTEST_PROFILER_LOG");
  if (path == NULL) return;
  FILE* f = fopen(path, "a");
  if (f == NULL) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
  fclose(f);
}

static result_t init(void** ctx, uint64_t comm_id, int* mask, const char* name, int nnodes, int nranks,
                     int rank, logger_t log) {
  (void)comm_id; (void)name; (void)log;
  struct ctx* c = calloc(1, sizeof *c);
  if (c == NULL) return 1;
  c->rank = rank;
  *ctx = c;
  const char* m = getenv("OXTEST_PROFILER_MASK");
  *mask = m ? (int)strtol(m, NULL, 0) : 0x2;
  log_line("init rank=%d nranks=%d nnodes=%d", rank, nranks, nnodes);
  return 0;
}

static result_t start(void* ctx, void** handle, struct descr* d) {
  struct ctx* c = ctx;
  struct event* e = calloc(1, sizeof *e);
  if (e == NULL) return 1;
  e->type = d->type;
  e->id = __atomic_add_fetch(&next_id, 1, __ATOMIC_RELAXED);
  long parent = d->parent ? ((struct event*)d->parent)->id : 0;
  if (d->type == (1 << 8)) {
    log_line("start %ld type=GroupApi parent=%ld rank=%d depth=%d", e->id, parent, c->rank, d->u.group_api.depth);
  } else if (d->type == (1 << 9)) {
    log_line("start %ld type=CollApi parent=%ld rank=%d func=%s count=%zu dtype=%s", e->id, parent, c->rank,
             d->u.coll_api.func, d->u.coll_api.count, d->u.coll_api.dtype);
  } else if (d->type == (1 << 1)) {
    log_line("start %ld type=Coll parent=%ld rank=%d func=%s count=%zu dtype=%s seq=%lu algo=%s proto=%s", e->id,
             parent, c->rank, d->u.coll.func, d->u.coll.count, d->u.coll.dtype, (unsigned long)d->u.coll.seq,
             d->u.coll.algo, d->u.coll.proto);
  } else {
    log_line("start %ld type=%lu parent=%ld rank=%d", e->id, (unsigned long)d->type, parent, c->rank);
  }
  *handle = e;
  return 0;
}

static result_t stop(void* handle) {
  struct event* e = handle;
  log_line("stop %ld", e->id);
  return 0;
}

static result_t record(void* handle, int state, void* args) {
  (void)handle; (void)state; (void)args;
  return 0;
}

static result_t finish(void* ctx) {
  struct ctx* c = ctx;
  log_line("finalize rank=%d", c->rank);
  free(c);
  return 0;
}

struct { const char* name; void* init; void* start; void* stop; void* record; void* finalize; }
    ncclProfiler_v5 = {"oxtest-profiler", (void*)init, (void*)start, (void*)stop, (void*)record, (void*)finish};
