/*
 * A tuner plugin for oxccl's tests, written against the ABI NCCL 2.28 loads (ncclTunerPlugin_v5,
 * and with -DOXTEST_TUNER_V4/V3/V2 the older members; with -DOXTEST_TUNER_V6 NCCL 2.30's v6). It steers every collective it is asked
 * about to one algorithm/protocol/channel count read from OXTEST_TUNER_FORCE ("algo,proto,nch":
 * NCCL's ids, e.g. "1,2,4" = ring, simple, 4 channels; unset: it changes nothing), and appends
 * one line per call to the file OXTEST_TUNER_LOG (when set) so tests see what it was given.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int result_t; /* ncclResult_t */
typedef void (*logger_t)(int level, unsigned long flags, const char* file, int line, const char* fmt,
                         ...);

struct nvl_info { int domains, min_ranks, max_ranks; };
struct constants { double v[7 * 3 + 3 * 7 * 3 + 4 * 3 * 4]; };

struct ctx {
  size_t nranks, nnodes;
  logger_t log;
  int force_algo, force_proto, force_nch;
};

static void log_line(const char* what, struct ctx* c, int coll, size_t bytes, int nch) {
  const char* path = getenv("OXTEST_TUNER_LOG");
  if (path == NULL) return;
  FILE* f = fopen(path, "a");
  if (f == NULL) return;
  fprintf(f, "%s nranks=%zu nnodes=%zu coll=%d bytes=%zu nch=%d\n", what, c ? c->nranks : 0,
          c ? c->nnodes : 0, coll, bytes, nch);
  fclose(f);
}

static struct ctx* new_ctx(size_t nranks, size_t nnodes, logger_t log) {
  struct ctx* c = calloc(1, sizeof *c);
  if (c == NULL) return NULL;
  c->nranks = nranks;
  c->nnodes = nnodes;
  c->log = log;
  c->force_algo = c->force_proto = c->force_nch = -1;
  const char* f = getenv("OXTEST_TUNER_FORCE");
  if (f != NULL) sscanf(f, "%d,%d,%d", &c->force_algo, &c->force_proto, &c->force_nch);
  if (log != NULL) log(3, 0x40, __FILE__, __LINE__, "oxtest tuner for %zu ranks on %zu nodes", nranks, nnodes);
  log_line("init", c, -1, 0, 0);
  return c;
}

/* The table is NCCL's contiguous float[numAlgo][numProto], passed cast to float** (as NCCL's
 * core does); the forced entry becomes the cheapest. */
#if !defined(OXTEST_TUNER_V2)
static result_t steer(struct ctx* c, int coll, size_t bytes, float** table, int nalgo, int nproto,
                      int* nch) {
  log_line("coll", c, coll, bytes, *nch);
  float* cells = (float*)table;
  if (c->force_algo >= 0 && c->force_algo < nalgo && c->force_proto >= 0 && c->force_proto < nproto &&
      cells[c->force_algo * nproto + c->force_proto] >= 0.0f) {
    cells[c->force_algo * nproto + c->force_proto] = 0.0f;
  }
  if (c->force_nch > 0) *nch = c->force_nch;
  return 0;
}
#endif

static result_t finish(void* ctx) {
  log_line("finalize", ctx, -1, 0, 0);
  free(ctx);
  return 0;
}

#if defined(OXTEST_TUNER_V2)
static result_t init_old(size_t nranks, size_t nnodes, logger_t log, void** ctx) {
  *ctx = new_ctx(nranks, nnodes, log);
  return *ctx ? 0 : 1;
}
static result_t info_v2(void* ctx, int coll, size_t bytes, int collnet, int nvls, int pipe, int* algo,
                        int* proto, int* nch) {
  (void)collnet; (void)nvls; (void)pipe;
  struct ctx* c = ctx;
  log_line("coll", c, coll, bytes, *nch);
  if (c->force_algo >= 0) { *algo = c->force_algo; *proto = c->force_proto; }
  if (c->force_nch > 0) *nch = c->force_nch;
  return 0;
}
struct { const char* name; void* init; void* info; void* destroy; } ncclTunerPlugin_v2 = {
    "oxtest-v2", (void*)init_old, (void*)info_v2, (void*)finish};
#elif defined(OXTEST_TUNER_V3)
static result_t init_old(size_t nranks, size_t nnodes, logger_t log, void** ctx) {
  *ctx = new_ctx(nranks, nnodes, log);
  return *ctx ? 0 : 1;
}
static result_t info_v3(void* ctx, int coll, size_t bytes, int pipe, float** table, int nalgo, int nproto,
                        int* nch) {
  (void)pipe;
  return steer(ctx, coll, bytes, table, nalgo, nproto, nch);
}
struct { const char* name; void* init; void* info; void* destroy; } ncclTunerPlugin_v3 = {
    "oxtest-v3", (void*)init_old, (void*)info_v3, (void*)finish};
#elif defined(OXTEST_TUNER_V4)
static result_t init_old(size_t nranks, size_t nnodes, logger_t log, void** ctx) {
  *ctx = new_ctx(nranks, nnodes, log);
  return *ctx ? 0 : 1;
}
static result_t info_v45(void* ctx, int coll, size_t bytes, int pipe, float** table, int nalgo,
                         int nproto, int reg, int* nch) {
  (void)pipe; (void)reg;
  return steer(ctx, coll, bytes, table, nalgo, nproto, nch);
}
struct { const char* name; void* init; void* info; void* destroy; } ncclTunerPlugin_v4 = {
    "oxtest-v4", (void*)init_old, (void*)info_v45, (void*)finish};
#else
static result_t init_v5(void** ctx, uint64_t comm_id, size_t nranks, size_t nnodes, logger_t log,
                        struct nvl_info* nvl, struct constants* k) {
  (void)comm_id; (void)k;
  *ctx = new_ctx(nranks, nnodes, log);
  if (*ctx && nvl) log_line(nvl->domains > 0 ? "nvl" : "nvl-empty", *ctx, nvl->domains, (size_t)nvl->max_ranks, nvl->min_ranks);
  return *ctx ? 0 : 1;
}
static result_t info_v45(void* ctx, int coll, size_t bytes, int pipe, float** table, int nalgo,
                         int nproto, int reg, int* nch) {
  (void)pipe; (void)reg;
  return steer(ctx, coll, bytes, table, nalgo, nproto, nch);
}
#if defined(OXTEST_TUNER_V6)
/* v6 adds getChunkSize, which oxccl does not call. */
static result_t chunk_v6(void* ctx, int coll, size_t bytes, int algo, int proto, int nch, size_t* chunk) {
  (void)ctx; (void)coll; (void)bytes; (void)algo; (void)proto; (void)nch; (void)chunk;
  abort();
}
struct { const char* name; void* init; void* info; void* finalize; void* chunk; } ncclTunerPlugin_v6 = {
    "oxtest-v6", (void*)init_v5, (void*)info_v45, (void*)finish, (void*)chunk_v6};
#else
struct { const char* name; void* init; void* info; void* finalize; } ncclTunerPlugin_v5 = {
    "oxtest-v5", (void*)init_v5, (void*)info_v45, (void*)finish};
#endif
#endif
