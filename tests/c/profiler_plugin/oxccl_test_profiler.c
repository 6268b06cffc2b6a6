/*
 * A profiler plugin for oxccl's tests. Built once per ABI version NCCL 2.28 loads:
 * OXTEST_PROFILER_VERSION (default 5) picks which ncclProfiler_v<N> it exports and the
 * descriptor layout it reads. It asks for the events in OXTEST_PROFILER_MASK (default: Coll,
 * 0x2) and appends one line per call to OXTEST_PROFILER_LOG:
 *   "init rank=<r> nranks=<n> nnodes=<k> name=<s>" (v1-v3: "init"; their init has no more),
 *   "start <id> type=<t> parent=<id> rank=<r> <field>=<value> ...", "stop <id>",
 *   "state <id> <state>" when the state comes without arguments; with them, v4-v5 add their
 *   8 bytes ("timer=<ns>" for a KernelCh stop, 22, else "arg=<u64>") and v1-v3 their two
 *   fields ("trans=<transSize> steps=<steps>"); "finalize".
 * Ids are the plugin's own (1, 2, ...; parent 0 is none); pointers print as 0x<hex>; v1 prints
 * NCCL's enum values where later versions print names.
 */
#include <stdarg.h>
#include <stddef.h>
#include <sys/types.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef OXTEST_PROFILER_VERSION
#define OXTEST_PROFILER_VERSION 5
#endif
#define V OXTEST_PROFILER_VERSION

typedef int result_t;
typedef void (*logger_t)(int, unsigned long, const char*, int, const char*, ...);

/* The event bits (NCCL's ncclProfile* values). */
enum { GROUP = 1 << 0, COLL = 1 << 1, P2P = 1 << 2, PROXY_OP = 1 << 3, PROXY_STEP = 1 << 4, KERNEL_CH = 1 << 6,
       NET_PLUGIN = 1 << 7, GROUP_API = 1 << 8, COLL_API = 1 << 9, P2P_API = 1 << 10, KERNEL_LAUNCH = 1 << 11 };

/* The descriptor of version V, as NCCL 2.28.9's headers lay it out (fields oxccl fills). */
struct descr {
#if V >= 5
  uint64_t type;
#else
  uint8_t type;
#endif
  void* parent;
  int rank;
  union {
#if V >= 5
    struct { _Bool captured; int depth; } group_api;
    struct { const char* func; size_t count; const char* dtype; int root; void* stream; _Bool captured; } coll_api;
    struct { const char* func; size_t count; const char* dtype; void* stream; _Bool captured; } p2p_api;
    struct { void* stream; } kernel_launch;
#endif
#if V >= 4
    struct { uint64_t seq; const char* func; const void* send; void* recv; size_t count; int root;
             const char* dtype; uint8_t nch, nwarps; const char* algo; const char* proto;
#if V >= 5
             void* group;
#endif
    } coll;
    struct { const char* func; void* buff; const char* dtype; size_t count; int peer; uint8_t nch;
#if V >= 5
             void* group;
#endif
    } p2p;
#elif V >= 2
    struct { const char* name; uint64_t hash; uint64_t seq; const char* func; const void* send; void* recv;
             size_t count; int root; const char* dtype;
#if V == 2
             size_t traffic;
#endif
             uint8_t nch, nwarps; const char* algo; const char* proto; } coll;
    struct { const char* name; uint64_t hash; const char* func; void* buff; const char* dtype; size_t count;
             int peer; } p2p;
#endif
    /* Alike in every version. */
    struct { pid_t pid; uint8_t ch; int peer; int steps; int chunk; int send; } proxy_op;
    struct { int step; } proxy_step;
#if V >= 3
    struct { uint8_t ch;
#if V >= 4
             uint64_t timer;
#endif
    } kernel_ch;
    struct { int64_t id; void* data; } net_plugin;
#endif
#if V == 1
    struct { const char* name; uint64_t hash; uint64_t seq; uint8_t func; const void* send; void* recv;
             size_t count; int root; uint8_t dtype; uint32_t op; size_t traffic; uint8_t nch, nwarps, algo,
             proto; int collnet, nvls; } coll;
    struct { const char* name; uint64_t hash; uint8_t func; void* buff; uint8_t dtype; size_t count;
             int peer; } p2p;
#endif
  } u;
};

/* The proxy members' offsets in NCCL 2.28.9's headers (every version). */
_Static_assert(offsetof(struct descr, u.proxy_op.pid) == 24, "proxyOp.pid");
_Static_assert(offsetof(struct descr, u.proxy_op.ch) == 28, "proxyOp.channelId");
_Static_assert(offsetof(struct descr, u.proxy_op.peer) == 32, "proxyOp.peer");
_Static_assert(offsetof(struct descr, u.proxy_op.send) == 44, "proxyOp.isSend");
_Static_assert(offsetof(struct descr, u.proxy_step.step) == 24, "proxyStep.step");
#if V >= 3
_Static_assert(offsetof(struct descr, u.net_plugin.data) == 32, "netPlugin.data");
#endif

/* The state arguments of version V: v4-v5 one 8-byte member (transSize, data, pTimer, ...),
 * v1-v3 proxyOp {transSize, steps} (appendedProxyOps aliasing transSize). */
#if V >= 4
typedef union { uint64_t value; } state_args;
#else
typedef union { struct { size_t trans; int steps; } proxy_op; int appended; } state_args;
#endif

struct event { long id; };

static long next_id = 0;

static void log_line(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_line(const char* fmt, ...) {
  const char* path = getenv("OXTEST_PROFILER_LOG");
  if (path == NULL) return;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (n > (int)sizeof line - 2) n = sizeof line - 2;
  line[n++] = '\n';
  FILE* f = fopen(path, "a");
  if (f == NULL) return;
  /* One write per line: ranks log from several threads. */
  setvbuf(f, NULL, _IONBF, 0);
  fwrite(line, 1, (size_t)n, f);
  fclose(f);
}

static int start_mask(void) {
  const char* m = getenv("OXTEST_PROFILER_MASK");
  return m ? (int)strtol(m, NULL, 0) : COLL;
}

#if V >= 4
static result_t init(void** ctx, int* mask, const char* name, int nnodes, int nranks, int rank) {
  *ctx = calloc(1, 1);
  if (*ctx == NULL) return 1;
  *mask = start_mask();
  log_line("init rank=%d nranks=%d nnodes=%d name=%s", rank, nranks, nnodes, name ? name : "(null)");
  return 0;
}
#endif

#if V >= 5
static result_t init_v5(void** ctx, uint64_t comm_id, int* mask, const char* name, int nnodes, int nranks,
                        int rank, logger_t log) {
  (void)comm_id; (void)log;
  return init(ctx, mask, name, nnodes, nranks, rank);
}
#elif V == 4
static result_t init_v4(void** ctx, int* mask, const char* name, uint64_t hash, int nnodes, int nranks,
                        int rank, logger_t log) {
  (void)hash; (void)log;
  return init(ctx, mask, name, nnodes, nranks, rank);
}
#else
static result_t init_v1(void** ctx, int* mask) {
  *ctx = calloc(1, 1);
  if (*ctx == NULL) return 1;
  *mask = start_mask();
  log_line("init");
  return 0;
}
#endif

static long id_of(void* handle) { return handle ? ((struct event*)handle)->id : 0; }

static result_t start(void* ctx, void** handle, struct descr* d) {
  (void)ctx;
  struct event* e = calloc(1, sizeof *e);
  if (e == NULL) return 1;
  e->id = __atomic_add_fetch(&next_id, 1, __ATOMIC_RELAXED);
  long id = e->id, parent = id_of(d->parent);
  int rank = d->rank;
  switch ((int)d->type) {
#if V >= 5
  case GROUP_API:
    log_line("start %ld type=GroupApi parent=%ld rank=%d depth=%d captured=%d", id, parent, rank,
             d->u.group_api.depth, d->u.group_api.captured);
    break;
  case COLL_API:
    log_line("start %ld type=CollApi parent=%ld rank=%d func=%s count=%zu dtype=%s root=%d stream=%p captured=%d",
             id, parent, rank, d->u.coll_api.func, d->u.coll_api.count, d->u.coll_api.dtype, d->u.coll_api.root,
             d->u.coll_api.stream, d->u.coll_api.captured);
    break;
  case P2P_API:
    log_line("start %ld type=P2pApi parent=%ld rank=%d func=%s count=%zu dtype=%s stream=%p captured=%d", id,
             parent, rank, d->u.p2p_api.func, d->u.p2p_api.count, d->u.p2p_api.dtype, d->u.p2p_api.stream,
             d->u.p2p_api.captured);
    break;
  case KERNEL_LAUNCH:
    log_line("start %ld type=KernelLaunch parent=%ld rank=%d stream=%p", id, parent, rank,
             d->u.kernel_launch.stream);
    break;
#endif
  case GROUP:
    log_line("start %ld type=Group parent=%ld rank=%d", id, parent, rank);
    break;
#if V >= 2
  case COLL:
    log_line("start %ld type=Coll parent=%ld rank=%d func=%s count=%zu dtype=%s seq=%lu algo=%s proto=%s "
             "send=%p recv=%p root=%d nch=%u nwarps=%u group=%ld", id, parent, rank, d->u.coll.func,
             d->u.coll.count, d->u.coll.dtype, (unsigned long)d->u.coll.seq, d->u.coll.algo, d->u.coll.proto,
             d->u.coll.send, d->u.coll.recv, d->u.coll.root, d->u.coll.nch, d->u.coll.nwarps,
#if V >= 5
             id_of(d->u.coll.group)
#else
             -1L
#endif
    );
    break;
  case P2P:
    log_line("start %ld type=P2p parent=%ld rank=%d func=%s buff=%p count=%zu dtype=%s peer=%d nch=%d group=%ld",
             id, parent, rank, d->u.p2p.func, d->u.p2p.buff, d->u.p2p.count, d->u.p2p.dtype, d->u.p2p.peer,
#if V >= 4
             d->u.p2p.nch,
#else
             -1,
#endif
#if V >= 5
             id_of(d->u.p2p.group)
#else
             -1L
#endif
    );
    break;
#else
  case COLL:
    log_line("start %ld type=Coll parent=%ld rank=%d func=%u count=%zu dtype=%u seq=%lu algo=%u proto=%u "
             "send=%p recv=%p root=%d nch=%u nwarps=%u", id, parent, rank, d->u.coll.func, d->u.coll.count,
             d->u.coll.dtype, (unsigned long)d->u.coll.seq, d->u.coll.algo, d->u.coll.proto, d->u.coll.send,
             d->u.coll.recv, d->u.coll.root, d->u.coll.nch, d->u.coll.nwarps);
    break;
  case P2P:
    log_line("start %ld type=P2p parent=%ld rank=%d func=%u buff=%p count=%zu dtype=%u peer=%d", id, parent,
             rank, d->u.p2p.func, d->u.p2p.buff, d->u.p2p.count, d->u.p2p.dtype, d->u.p2p.peer);
    break;
#endif
#if V >= 3
  case KERNEL_CH:
    log_line("start %ld type=KernelCh parent=%ld rank=%d ch=%u timer=%ld", id, parent, rank, d->u.kernel_ch.ch,
#if V >= 4
             (long)d->u.kernel_ch.timer
#else
             -1L
#endif
    );
    break;
  case NET_PLUGIN:
    log_line("start %ld type=NetPlugin parent=%ld rank=%d id=%ld data=%p", id, parent, rank,
             (long)d->u.net_plugin.id, d->u.net_plugin.data);
    break;
#endif
  case PROXY_OP:
    log_line("start %ld type=ProxyOp parent=%ld rank=%d pid=%d ch=%u peer=%d steps=%d chunk=%d send=%d", id, parent,
             rank, (int)d->u.proxy_op.pid, d->u.proxy_op.ch, d->u.proxy_op.peer, d->u.proxy_op.steps,
             d->u.proxy_op.chunk, d->u.proxy_op.send);
    break;
  case PROXY_STEP:
    log_line("start %ld type=ProxyStep parent=%ld rank=%d step=%d", id, parent, rank, d->u.proxy_step.step);
    break;
  default:
    log_line("start %ld type=%lu parent=%ld rank=%d", id, (unsigned long)d->type, parent, rank);
  }
  *handle = e;
  return 0;
}

/* Events are never freed: NCCL names a stopped API event as the parent of a task event. */
static result_t stop(void* handle) {
  log_line("stop %ld", id_of(handle));
  return 0;
}

/* NCCL's ncclProfilerKernelChStop: its arguments carry the channel's stop time. */
enum { KERNEL_CH_STOP = 22 };

static result_t record(void* handle, int state, state_args* args) {
  if (args == NULL) {
    log_line("state %ld %d", id_of(handle), state);
#if V >= 4
  } else if (state == KERNEL_CH_STOP) {
    log_line("state %ld %d timer=%lu", id_of(handle), state, (unsigned long)args->value);
  } else {
    log_line("state %ld %d arg=%lu", id_of(handle), state, (unsigned long)args->value);
#else
  } else {
    log_line("state %ld %d trans=%zu steps=%d", id_of(handle), state, args->proxy_op.trans, args->proxy_op.steps);
#endif
  }
  return 0;
}

static result_t finish(void* ctx) {
  log_line("finalize");
  free(ctx);
  return 0;
}

#if V >= 5
#define SYMBOL ncclProfiler_v5
#define INIT init_v5
#elif V == 4
#define SYMBOL ncclProfiler_v4
#define INIT init_v4
#elif V == 3
#define SYMBOL ncclProfiler_v3
#define INIT init_v1
#elif V == 2
#define SYMBOL ncclProfiler_v2
#define INIT init_v1
#else
#define SYMBOL ncclProfiler_v1
#define INIT init_v1
#endif

struct { const char* name; void* init; void* start; void* stop; void* record; void* finalize; }
    SYMBOL = {"oxtest-profiler", (void*)INIT, (void*)start, (void*)stop, (void*)record, (void*)finish};
