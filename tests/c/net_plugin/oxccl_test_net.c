/* oxccl's test network plugin: a small but real TCP network behind NCCL's net-plugin C ABI.
 *
 * Built by core/build.rs into shared libraries that the net-plugin tests open by path, exactly
 * as a third-party plugin is opened (NCCL_NET_PLUGIN=<path>):
 *   (default)            exports only ncclNetPlugin_v11, name "OxTest"
 *   -DOXTEST_V8          exports only ncclNetPlugin_v8, name "OxTest8" (exercises the adapter)
 *   -DOXTEST_V6 / _V7 / _V9 / _V10   only ncclNetPlugin_v6 / v7 / v9 / v10, names "OxTest6" ...
 *   -DOXTEST_V12         exports only ncclNetPlugin_v12, name "OxTest12" (v12 properties, with
 *                        railId 3, planeId 1 and maxP2pBytes 2^37, which no other flavour has)
 *   -DOXTEST_V12_AND_V11 exports ncclNetPlugin_v12 ("OxTest12") and ncclNetPlugin_v11 ("OxTest")
 *   -DOXTEST_NO_SYMBOL   exports no ncclNetPlugin_* symbol at all
 *   -DOXTEST_FAIL_INIT   exports ncclNetPlugin_v11 whose init fails, name "OxTestBad"
 *   -DOXTEST_GIN=11|13   also exports ncclGinPlugin_v11 ("OxTestGin") or ncclGinPlugin_v13
 *                        ("OxTestGin13"): an in-process GIN plugin of the proxy type (see the
 *                        end of this file); -DOXTEST_GIN_TYPE=n reports another device type
 *   -DOXTEST_PCI_PATHS_DEFAULT="p0;p1;..."   the devices below without OXTEST_NET_PCI_PATHS
 *   -DOXTEST_GDR_DEFAULT=fake|cuda, -DOXTEST_DMABUF_DEFAULT=1, -DOXTEST_FORCE_FLUSH_DEFAULT=1
 *                        the defaults of the GPU-memory modes below, for variants that need no
 *                        environment
 *
 * GPU memory (GPUDirect RDMA), chosen at init by OXTEST_NET_GDR (default OXTEST_GDR_DEFAULT):
 *   unset, 0 or off      host memory only (NCCL_PTR_HOST)
 *   fake                 also NCCL_PTR_CUDA; memory registered as CUDA is used as host memory
 *                        (CPU tests give host memory standing in for GPU memory)
 *   cuda                 also NCCL_PTR_CUDA; memory registered as CUDA is GPU memory, copied
 *                        through a host bounce buffer with the CUDA driver (libcuda.so.1, opened
 *                        at run time: no CUDA headers or libraries needed to build)
 * With GPU memory, OXTEST_NET_DMABUF=1 also reports NCCL_PTR_DMABUF and offers regMrDmaBuf
 * (v11 only), and OXTEST_NET_FORCE_FLUSH=1 sets forceFlush (v9+). Registrations by type and
 * flushes are counted (oxtest_regmr_*_count, oxtest_iflush_count) and logged at INFO.
 *
 * One device ("lo") by default; OXTEST_NET_PCI_PATHS="p0;p1;..." (at most 8, "-" for none) gives
 * as many devices "lo0", "lo1", ..., each reporting that pciPath, all of them loopback (listens
 * and connects per device are counted: oxtest_listen_count, oxtest_connect_count).
 * One buffer per receive (maxRecvs 1). Connections go over
 * 127.0.0.1. connect and accept never block: they return success with a NULL comm until the
 * connection is complete (an 8-byte hello, then a one-byte answer that only the peer's accept
 * sends), keeping connect's progress in the handle buffer.
 * Each message is an 8-byte length and the payload; requests progress only inside test, in the
 * order they were posted. The layouts below are written from the ABI tables in oxccl's
 * reference notes (net.md section 2), not copied from any header. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

typedef int res_t;
enum { NET_OK = 0, NET_SYSTEM = 2, NET_INTERNAL = 3, NET_ARGUMENT = 4, NET_USAGE = 5, NET_REMOTE = 6 };
enum { L_WARN = 2, L_INFO = 3, L_TRACE = 5 };
enum { F_NET = 0x10 };
enum { PTR_HOST = 1, PTR_CUDA = 2, PTR_DMABUF = 4 };

typedef void (*logger_t)(int level, unsigned long flags, const char *file, int line,
                         const char *fmt, ...);
typedef res_t (*profiler_t)(void **ev, int type, void *ph, int64_t id, void *ext);

typedef struct { int traffic_class; } comm_config_t;
typedef struct { int ndevs; int devs[4]; } vprops_t;
typedef struct { int type, version; void *handle; size_t size; int needs_progress; } dev_handle_t;

#define PROP_HEAD                                                                              \
  char *name;                                                                                  \
  char *pci_path;                                                                              \
  uint64_t guid;                                                                               \
  int ptr_support;                                                                             \
  int reg_is_global;

#define PROP_MID                                                                               \
  int speed;                                                                                   \
  int port;                                                                                    \
  float latency;                                                                               \
  int max_comms;                                                                               \
  int max_recvs;                                                                               \
  int dev_type;                                                                                \
  int dev_version;

typedef struct { PROP_HEAD PROP_MID } props_v8_t;
typedef struct {
  PROP_HEAD int force_flush;
  PROP_MID vprops_t vprops;
  size_t max_p2p_bytes;
  size_t max_coll_bytes;
  int max_multi_request_size;
} props_v11_t;

static logger_t log_fn;
#define LOG(level, ...)                                                                        \
  do {                                                                                         \
    if (log_fn) log_fn(level, F_NET, __func__, __LINE__, __VA_ARGS__);                          \
  } while (0)

/* Counters the tests read through dlsym. */
static int n_init, n_finalize, n_comms;
int oxtest_init_count(void) { return __atomic_load_n(&n_init, __ATOMIC_SEQ_CST); }
int oxtest_finalize_count(void) { return __atomic_load_n(&n_finalize, __ATOMIC_SEQ_CST); }
int oxtest_open_comms(void) { return __atomic_load_n(&n_comms, __ATOMIC_SEQ_CST); }

/* Registrations by type, and flushes of GPU memory. */
static int n_reg_host, n_reg_cuda, n_reg_dmabuf, n_flush;
int oxtest_regmr_host_count(void) { return __atomic_load_n(&n_reg_host, __ATOMIC_SEQ_CST); }
int oxtest_regmr_cuda_count(void) { return __atomic_load_n(&n_reg_cuda, __ATOMIC_SEQ_CST); }
int oxtest_regmr_dmabuf_count(void) { return __atomic_load_n(&n_reg_dmabuf, __ATOMIC_SEQ_CST); }
int oxtest_iflush_count(void) { return __atomic_load_n(&n_flush, __ATOMIC_SEQ_CST); }

/* ---- GPU-memory modes ---- */
#define STR2(x) #x
#define STR(x) STR2(x)
#ifndef OXTEST_GDR_DEFAULT
#define OXTEST_GDR_DEFAULT off
#endif
#ifndef OXTEST_DMABUF_DEFAULT
#define OXTEST_DMABUF_DEFAULT 0
#endif
#ifndef OXTEST_FORCE_FLUSH_DEFAULT
#define OXTEST_FORCE_FLUSH_DEFAULT 0
#endif
enum { GDR_OFF = 0, GDR_FAKE = 1, GDR_CUDA = 2 };
static int gdr_mode, dmabuf_on, force_flush_on;

/* The few CUDA driver calls of the cuda mode, declared here and found with dlsym. */
typedef int cu_result;
typedef void *cu_context;
typedef void *cu_stream;
typedef unsigned long long cu_ptr;
static struct {
  cu_result (*init)(unsigned);
  cu_result (*ctx_get_current)(cu_context *);
  cu_result (*ctx_push)(cu_context);
  cu_result (*ctx_pop)(cu_context *);
  cu_result (*device_get)(int *, int);
  cu_result (*primary_retain)(cu_context *, int);
  cu_result (*stream_create)(cu_stream *, unsigned);
  cu_result (*stream_destroy)(cu_stream);
  cu_result (*stream_sync)(cu_stream);
  cu_result (*dtoh)(void *, cu_ptr, size_t, cu_stream);
  cu_result (*htod)(cu_ptr, const void *, size_t, cu_stream);
} cu;
static int cu_loaded;
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;

static void cu_load(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return;
  struct { void **fn; const char *name; } syms[] = {
      {(void **)&cu.init, "cuInit"},
      {(void **)&cu.ctx_get_current, "cuCtxGetCurrent"},
      {(void **)&cu.ctx_push, "cuCtxPushCurrent_v2"},
      {(void **)&cu.ctx_pop, "cuCtxPopCurrent_v2"},
      {(void **)&cu.device_get, "cuDeviceGet"},
      {(void **)&cu.primary_retain, "cuDevicePrimaryCtxRetain"},
      {(void **)&cu.stream_create, "cuStreamCreate"},
      {(void **)&cu.stream_destroy, "cuStreamDestroy_v2"},
      {(void **)&cu.stream_sync, "cuStreamSynchronize"},
      {(void **)&cu.dtoh, "cuMemcpyDtoHAsync_v2"},
      {(void **)&cu.htod, "cuMemcpyHtoDAsync_v2"},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    *syms[i].fn = dlsym(lib, syms[i].name);
    if (!*syms[i].fn) return;
  }
  cu_loaded = cu.init(0) == 0;
}

/* The devices (OXTEST_NET_PCI_PATHS, else OXTEST_PCI_PATHS_DEFAULT; read at init). */
#ifndef OXTEST_PCI_PATHS_DEFAULT
#define OXTEST_PCI_PATHS_DEFAULT ""
#endif
#define MAX_DEVS 8
static int n_devs = 1;
static char *dev_paths[MAX_DEVS];
static char dev_names[MAX_DEVS][8];
static int n_listen[MAX_DEVS], n_connect[MAX_DEVS];
int oxtest_listen_count(int dev) {
  return dev >= 0 && dev < MAX_DEVS ? __atomic_load_n(&n_listen[dev], __ATOMIC_SEQ_CST) : -1;
}
int oxtest_connect_count(int dev) {
  return dev >= 0 && dev < MAX_DEVS ? __atomic_load_n(&n_connect[dev], __ATOMIC_SEQ_CST) : -1;
}

/* Once per process: every rank of a test process calls init, and a second reading while another
 * rank's thread asks for a device's properties briefly left one device, refusing the others. */
static pthread_once_t devices_once = PTHREAD_ONCE_INIT;
static void read_devices(void) {
  for (int d = 0; d < MAX_DEVS; d++) snprintf(dev_names[d], sizeof dev_names[d], "lo%d", d);
  const char *v = getenv("OXTEST_NET_PCI_PATHS");
  if (!v) v = OXTEST_PCI_PATHS_DEFAULT;
  if (!*v) return;
  n_devs = 0;
  while (n_devs < MAX_DEVS) {
    size_t len = strcspn(v, ";");
    if (!(len == 1 && v[0] == '-')) dev_paths[n_devs] = strndup(v, len);
    n_devs++;
    if (!v[len]) break;
    v += len + 1;
  }
}

static int bad_dev(int dev) { return dev < 0 || dev >= n_devs; }

static int env_flag(const char *name, int dflt) {
  const char *v = getenv(name);
  return v ? strcmp(v, "1") == 0 : dflt;
}

/* Reads the modes (at every init: a v11 plugin may be initialized per communicator). */
static res_t read_modes(void) {
  const char *g = getenv("OXTEST_NET_GDR");
  if (!g) g = STR(OXTEST_GDR_DEFAULT);
  if (!strcmp(g, "fake")) {
    gdr_mode = GDR_FAKE;
  } else if (!strcmp(g, "cuda")) {
    gdr_mode = GDR_CUDA;
  } else if (!*g || !strcmp(g, "0") || !strcmp(g, "off")) {
    gdr_mode = GDR_OFF;
  } else {
    LOG(L_WARN, "OxTest: OXTEST_NET_GDR=%s is none of 0, fake, cuda", g);
    return NET_USAGE;
  }
  pthread_once(&devices_once, read_devices);
  dmabuf_on = gdr_mode != GDR_OFF && env_flag("OXTEST_NET_DMABUF", OXTEST_DMABUF_DEFAULT);
  force_flush_on = env_flag("OXTEST_NET_FORCE_FLUSH", OXTEST_FORCE_FLUSH_DEFAULT);
  if (gdr_mode == GDR_CUDA) {
    pthread_once(&cu_once, cu_load);
    if (!cu_loaded) {
      LOG(L_WARN, "OxTest: GPU-memory mode cuda needs the CUDA driver (libcuda.so.1)");
      return NET_SYSTEM;
    }
  }
  if (gdr_mode != GDR_OFF)
    LOG(L_INFO, "OxTest: GPU memory mode %s, dma-buf %d, forceFlush %d", g, dmabuf_on,
        force_flush_on);
  return NET_OK;
}

#define HANDLE_MAGIC 0x4e54584fu /* "OXTN" */
#define HELLO 0x6c6c65685f74786full
#define ANSWER 'k' /* the accepting side's one-byte answer to the hello */
#define MAX_REQS 32

/* Inside the 128-byte handle: the listener's address and the connector's progress. */
struct handle {
  uint32_t magic;
  uint32_t addr; /* network order */
  uint16_t port; /* network order */
  uint16_t pad;
  int32_t stage; /* 0 new, 1 connecting, 2 sending the hello, 4 awaiting the answer, 3 done */
  int32_t fd;
  uint32_t hello_sent;
};
_Static_assert(sizeof(struct handle) <= 128, "handle fits NCCL_NET_HANDLE_MAXSIZE");

struct listen_comm {
  int fd;
  int afd; /* accepted socket while its hello arrives */
  uint32_t got;
  uint64_t hello;
};

enum { KIND_MESSAGE = 1, KIND_FLUSH = 2 }; /* the first int of every request */

struct comm;
struct mr;
struct req {
  int kind;
  int used, is_send, done;
  char *data;
  struct mr *gpu; /* cuda mode: GPU memory, staged through `data`, a host bounce buffer */
  char *gpu_data;
  size_t size;   /* bytes to send, or the room posted for a receive */
  size_t nbytes; /* bytes of the message */
  size_t off;    /* payload bytes moved */
  uint64_t hdr;
  size_t hdr_off;
  struct comm *comm;
};

struct comm {
  int fd, is_send;
  uint64_t posted, finished; /* requests, in posting order */
  struct req reqs[MAX_REQS];
};

struct mr {
  uint32_t magic;
  int type; /* PTR_HOST or PTR_CUDA */
  void *data;
  size_t size;
  cu_context ctx;  /* cuda mode: the context the memory belongs to */
  cu_stream stream; /* cuda mode: a non-blocking stream of that context for the copies */
};

/* A flush request: done at its second test, so callers see one "not yet". */
struct flush_req {
  int kind;
  int tests_left;
};

static int set_nonblock(int fd) {
  int on = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  return 0;
}

static res_t devices(int *ndev) {
  *ndev = n_devs;
  return NET_OK;
}

static void fill_common(int dev, char **name, char **pci, uint64_t *guid, int *ptr) {
  *name = n_devs == 1 ? (char *)"lo" : dev_names[dev];
  *pci = dev_paths[dev];
  *guid = 0x4f58;
  *ptr = PTR_HOST;
  if (gdr_mode != GDR_OFF) *ptr |= PTR_CUDA | (dmabuf_on ? PTR_DMABUF : 0);
}

static res_t listen_(int dev, void *opaque, void **listen_comm) {
  if (bad_dev(dev)) return NET_ARGUMENT;
  __atomic_add_fetch(&n_listen[dev], 1, __ATOMIC_SEQ_CST);
  struct handle *h = opaque;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return NET_SYSTEM;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof sa;
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, 16) ||
      getsockname(fd, (struct sockaddr *)&sa, &len)) {
    LOG(L_WARN, "OxTest: listen failed: errno %d", errno);
    close(fd);
    return NET_SYSTEM;
  }
  memset(h, 0, sizeof *h);
  h->magic = HANDLE_MAGIC;
  h->addr = sa.sin_addr.s_addr;
  h->port = sa.sin_port;
  h->fd = -1;
  struct listen_comm *l = calloc(1, sizeof *l);
  if (!l) {
    close(fd);
    return NET_SYSTEM;
  }
  l->fd = fd;
  l->afd = -1;
  *listen_comm = l;
  __atomic_add_fetch(&n_comms, 1, __ATOMIC_SEQ_CST);
  return NET_OK;
}

static struct comm *new_comm(int fd, int is_send) {
  struct comm *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->fd = fd;
  c->is_send = is_send;
  set_nonblock(fd);
  __atomic_add_fetch(&n_comms, 1, __ATOMIC_SEQ_CST);
  return c;
}

static res_t connect_(int dev, void *opaque, void **send_comm) {
  struct handle *h = opaque;
  *send_comm = NULL;
  if (bad_dev(dev) || h->magic != HANDLE_MAGIC) return NET_INTERNAL;
  if (h->stage == 0) {
    __atomic_add_fetch(&n_connect[dev], 1, __ATOMIC_SEQ_CST);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return NET_SYSTEM;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = h->addr, .sin_port = h->port};
    h->fd = fd;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) {
      h->stage = 2;
    } else if (errno == EINPROGRESS) {
      h->stage = 1;
    } else {
      LOG(L_WARN, "OxTest: connect failed: errno %d", errno);
      return NET_SYSTEM;
    }
    return NET_OK; /* always one NULL answer first: the caller must call again */
  }
  if (h->stage == 1) {
    struct pollfd p = {.fd = h->fd, .events = POLLOUT};
    if (poll(&p, 1, 0) == 0) return NET_OK;
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(h->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err) {
      LOG(L_WARN, "OxTest: connect failed: errno %d", err);
      return NET_SYSTEM;
    }
    h->stage = 2;
  }
  if (h->stage == 2) {
    uint64_t hello = HELLO;
    while (h->hello_sent < sizeof hello) {
      ssize_t n = send(h->fd, (char *)&hello + h->hello_sent, sizeof hello - h->hello_sent,
                       MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return NET_OK;
      if (n <= 0) return NET_SYSTEM;
      h->hello_sent += (uint32_t)n;
    }
    h->stage = 4;
  }
  if (h->stage == 4) {
    /* As in libfabric-based plugins, a connect completes only once the peer's accept has
       answered: a caller that finishes its connects before starting its accepts deadlocks
       with a peer doing the same. */
    char answer;
    ssize_t n = recv(h->fd, &answer, 1, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return NET_OK;
    if (n != 1 || answer != ANSWER) {
      LOG(L_WARN, "OxTest: no answer from the accepting side");
      return NET_SYSTEM;
    }
    struct comm *c = new_comm(h->fd, 1);
    if (!c) return NET_SYSTEM;
    h->stage = 3;
    *send_comm = c;
    return NET_OK;
  }
  return NET_INTERNAL; /* a handle used after its connection completed */
}

static res_t accept_(void *listen_comm, void **recv_comm) {
  struct listen_comm *l = listen_comm;
  *recv_comm = NULL;
  if (l->afd < 0) {
    int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return NET_OK;
      return NET_SYSTEM;
    }
    l->afd = fd;
    l->got = 0;
  }
  while (l->got < sizeof l->hello) {
    ssize_t n = recv(l->afd, (char *)&l->hello + l->got, sizeof l->hello - l->got, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return NET_OK;
    if (n <= 0) {
      close(l->afd);
      l->afd = -1;
      return NET_SYSTEM;
    }
    l->got += (uint32_t)n;
  }
  if (l->hello != HELLO) {
    LOG(L_WARN, "OxTest: a connection without the hello, dropped");
    close(l->afd);
    l->afd = -1;
    return NET_OK;
  }
  char answer = ANSWER;
  if (send(l->afd, &answer, 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1) {
    /* One byte into a fresh socket's empty send buffer. */
    LOG(L_WARN, "OxTest: answering a connection failed: errno %d", errno);
    close(l->afd);
    l->afd = -1;
    return NET_SYSTEM;
  }
  struct comm *c = new_comm(l->afd, 0);
  if (!c) return NET_SYSTEM;
  l->afd = -1;
  *recv_comm = c;
  return NET_OK;
}

/* cuda mode: the context `m` belongs to (the caller's current one, else device 0's primary
 * context, as the registering thread may have none) and a non-blocking stream in it, so that
 * copies never wait for kernels on the legacy default stream. */
static res_t cuda_bind(struct mr *m) {
  if (cu.ctx_get_current(&m->ctx) || !m->ctx) {
    int dev;
    if (cu.device_get(&dev, 0) || cu.primary_retain(&m->ctx, dev)) return NET_SYSTEM;
  }
  if (cu.ctx_push(m->ctx)) return NET_SYSTEM;
  cu_result rc = cu.stream_create(&m->stream, 1 /* CU_STREAM_NON_BLOCKING */);
  cu_context prev;
  cu.ctx_pop(&prev);
  return rc ? NET_SYSTEM : NET_OK;
}

/* Copies n bytes between GPU memory of `m` and host memory, waiting for the copy. */
static res_t cuda_copy(struct mr *m, int to_gpu, char *gpu, char *host, size_t n) {
  if (n == 0) return NET_OK;
  if (cu.ctx_push(m->ctx)) return NET_SYSTEM;
  cu_result rc = to_gpu ? cu.htod((cu_ptr)(uintptr_t)gpu, host, n, m->stream)
                        : cu.dtoh(host, (cu_ptr)(uintptr_t)gpu, n, m->stream);
  if (!rc) rc = cu.stream_sync(m->stream);
  cu_context prev;
  cu.ctx_pop(&prev);
  if (rc) {
    LOG(L_WARN, "OxTest: copying %zu bytes %s the GPU failed: CUDA error %d", n,
        to_gpu ? "to" : "from", rc);
    return NET_SYSTEM;
  }
  return NET_OK;
}

static res_t new_mr(void *data, size_t size, int type, struct mr **out) {
  struct mr *m = calloc(1, sizeof *m);
  if (!m) return NET_SYSTEM;
  m->magic = HANDLE_MAGIC;
  m->type = type;
  m->data = data;
  m->size = size;
  if (type == PTR_CUDA && gdr_mode == GDR_CUDA && cuda_bind(m) != NET_OK) {
    LOG(L_WARN, "OxTest: no CUDA context or stream for a GPU registration");
    free(m);
    return NET_SYSTEM;
  }
  *out = m;
  return NET_OK;
}

static res_t reg_mr(void *comm, void *data, size_t size, int type, void **mhandle) {
  (void)comm;
  if (type != PTR_HOST && !(type == PTR_CUDA && gdr_mode != GDR_OFF)) {
    LOG(L_WARN, "OxTest: only host memory can be registered (type %d)", type);
    return NET_ARGUMENT;
  }
  struct mr *m;
  res_t rc = new_mr(data, size, type, &m);
  if (rc != NET_OK) return rc;
  if (type == PTR_CUDA) {
    __atomic_add_fetch(&n_reg_cuda, 1, __ATOMIC_SEQ_CST);
    LOG(L_INFO, "OxTest: regMr CUDA %p, %zu bytes", data, size);
  } else {
    __atomic_add_fetch(&n_reg_host, 1, __ATOMIC_SEQ_CST);
  }
  *mhandle = m;
  return NET_OK;
}

__attribute__((unused)) static res_t reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset, int fd,
                           void **mhandle) {
  (void)comm;
  struct stat st;
  if (!dmabuf_on || type != PTR_CUDA || offset != 0 || fd < 0 || fstat(fd, &st)) {
    LOG(L_WARN, "OxTest: regMrDmaBuf refused (type %d, offset %llu, fd %d, dma-buf %d)", type,
        (unsigned long long)offset, fd, dmabuf_on);
    return NET_ARGUMENT;
  }
  struct mr *m;
  res_t rc = new_mr(data, size, type, &m);
  if (rc != NET_OK) return rc;
  __atomic_add_fetch(&n_reg_dmabuf, 1, __ATOMIC_SEQ_CST);
  LOG(L_INFO, "OxTest: regMrDmaBuf CUDA %p, %zu bytes, fd %d", data, size, fd);
  *mhandle = m;
  return NET_OK;
}

static res_t dereg_mr(void *comm, void *mhandle) {
  (void)comm;
  struct mr *m = mhandle;
  if (!m || m->magic != HANDLE_MAGIC) return NET_INTERNAL;
  if (m->stream) {
    cu.ctx_push(m->ctx);
    cu.stream_destroy(m->stream);
    cu_context prev;
    cu.ctx_pop(&prev);
  }
  m->magic = 0;
  free(m);
  return NET_OK;
}

static struct req *post(struct comm *c, int is_send, void *data, size_t size) {
  struct req *r = &c->reqs[c->posted % MAX_REQS];
  if (r->used) return NULL; /* 32 in flight: busy */
  memset(r, 0, sizeof *r);
  r->kind = KIND_MESSAGE;
  r->used = 1;
  r->is_send = is_send;
  r->data = data;
  r->size = size;
  r->comm = c;
  if (is_send) {
    r->nbytes = size;
    r->hdr = size;
  }
  c->posted++;
  return r;
}

/* cuda mode: moves a request on GPU memory to a host bounce buffer (a send copies its bytes
 * there now). NCCL calls isend and irecv from proxy threads on which it made the communicator's
 * GPU current, and plugins rely on it (a cudaMemcpy on the current device): this one refuses a
 * request on GPU memory from a thread without the registration's context current. */
static res_t stage(struct req *r, struct mr *m) {
  if (m->type != PTR_CUDA || gdr_mode != GDR_CUDA) return NET_OK;
  cu_context cur = NULL;
  if (cu.ctx_get_current(&cur) || cur != m->ctx) {
    LOG(L_WARN, "OxTest: %s on GPU memory from a thread whose current CUDA context is %p, not "
        "the registration's %p", r->is_send ? "isend" : "irecv", (void *)cur, (void *)m->ctx);
    return NET_SYSTEM;
  }
  char *bounce = malloc(r->size ? r->size : 1);
  if (!bounce) return NET_SYSTEM;
  r->gpu = m;
  r->gpu_data = r->data;
  r->data = bounce;
  return r->is_send ? cuda_copy(m, 0, r->gpu_data, bounce, r->size) : NET_OK;
}

/* A request's bytes have all moved: a receive through a bounce buffer lands in GPU memory. */
static res_t finish(struct req *r) {
  res_t rc = NET_OK;
  if (r->gpu) {
    if (!r->is_send) rc = cuda_copy(r->gpu, 1, r->gpu_data, r->data, r->nbytes);
    free(r->data);
    r->data = r->gpu_data;
    r->gpu = NULL;
  }
  return rc;
}

static res_t do_isend(void *send_comm, void *data, size_t size, void *mhandle, void **request) {
  struct comm *c = send_comm;
  struct mr *m = mhandle;
  *request = NULL;
  if (!c || !c->is_send || !m || m->magic != HANDLE_MAGIC) return NET_INTERNAL;
  struct req *r = post(c, 1, data, size);
  if (r) {
    res_t rc = stage(r, m);
    if (rc != NET_OK) return rc;
  }
  *request = r;
  return NET_OK;
}

static res_t do_irecv(void *recv_comm, int n, void **data, size_t size, void **mhandles,
                      void **request) {
  struct comm *c = recv_comm;
  *request = NULL; /* also clears NCCL's optional-completion hint */
  if (n != 1) {
    LOG(L_WARN, "OxTest: irecv of %d buffers; maxRecvs is 1", n);
    return NET_INTERNAL;
  }
  struct mr *m = mhandles[0];
  if (!c || c->is_send || !m || m->magic != HANDLE_MAGIC) return NET_INTERNAL;
  struct req *r = post(c, 0, data[0], size);
  if (r) {
    res_t rc = stage(r, m);
    if (rc != NET_OK) return rc;
  }
  *request = r;
  return NET_OK;
}

/* Moves bytes for the oldest unfinished requests of c, in order. */
static res_t progress(struct comm *c) {
  while (c->finished < c->posted) {
    struct req *r = &c->reqs[c->finished % MAX_REQS];
    while (r->hdr_off < sizeof r->hdr) {
      ssize_t n = c->is_send ? send(c->fd, (char *)&r->hdr + r->hdr_off, sizeof r->hdr - r->hdr_off,
                                    MSG_NOSIGNAL | MSG_DONTWAIT)
                             : recv(c->fd, (char *)&r->hdr + r->hdr_off, sizeof r->hdr - r->hdr_off,
                                    MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return NET_OK;
      if (n == 0) {
        LOG(L_WARN, "OxTest: peer closed the connection");
        return NET_REMOTE;
      }
      if (n < 0) return NET_REMOTE;
      r->hdr_off += (size_t)n;
      if (!c->is_send && r->hdr_off == sizeof r->hdr) {
        if (r->hdr > r->size) {
          LOG(L_WARN, "OxTest: message truncated: %llu bytes into a receive of %zu",
              (unsigned long long)r->hdr, r->size);
          return NET_USAGE;
        }
        r->nbytes = (size_t)r->hdr;
      }
    }
    while (r->off < r->nbytes) {
      ssize_t n = c->is_send ? send(c->fd, r->data + r->off, r->nbytes - r->off,
                                    MSG_NOSIGNAL | MSG_DONTWAIT)
                             : recv(c->fd, r->data + r->off, r->nbytes - r->off, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return NET_OK;
      if (n <= 0) {
        LOG(L_WARN, "OxTest: connection lost in the middle of a message");
        return NET_REMOTE;
      }
      r->off += (size_t)n;
    }
    res_t rc = finish(r);
    if (rc != NET_OK) return rc;
    r->done = 1;
    c->finished++;
    LOG(L_TRACE, "OxTest: %s of %zu bytes done", c->is_send ? "send" : "receive", r->nbytes);
  }
  return NET_OK;
}

static res_t iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                    void **request) {
  (void)recv_comm;
  *request = NULL;
  struct mr *m = n == 1 ? mhandles[0] : NULL;
  if (!m || m->magic != HANDLE_MAGIC) return NET_INTERNAL;
  if (m->type != PTR_CUDA) return NET_OK; /* host memory: nothing to flush */
  char *p = data[0];
  if (sizes[0] <= 0 || p < (char *)m->data || p + sizes[0] > (char *)m->data + m->size) {
    LOG(L_WARN, "OxTest: iflush of %d bytes at %p outside its registration", sizes[0], data[0]);
    return NET_INTERNAL;
  }
  /* The cuda mode's copies are complete when a receive is; a flush only has to be seen. */
  if (__atomic_add_fetch(&n_flush, 1, __ATOMIC_SEQ_CST) == 1)
    LOG(L_INFO, "OxTest: iflush of GPU memory (the first; later ones are counted)");
  struct flush_req *f = calloc(1, sizeof *f);
  if (!f) return NET_SYSTEM;
  f->kind = KIND_FLUSH;
  f->tests_left = 1;
  *request = f;
  return NET_OK;
}

static res_t test(void *request, int *done, int *sizes) {
  if (request && *(int *)request == KIND_FLUSH) {
    struct flush_req *f = request;
    if (sizes) {
      LOG(L_WARN, "OxTest: a flush request tested with sizes (NCCL passes NULL)");
      return NET_INTERNAL;
    }
    *done = f->tests_left-- <= 0;
    if (*done) free(f);
    return NET_OK;
  }
  struct req *r = request;
  if (!r || !r->used) return NET_INTERNAL;
  res_t rc = progress(r->comm);
  if (rc != NET_OK) return rc;
  *done = r->done;
  if (r->done) {
    if (sizes) sizes[0] = (int)r->nbytes;
    r->used = 0;
  }
  return NET_OK;
}

static res_t close_comm(void *comm) {
  struct comm *c = comm;
  if (!c) return NET_OK;
  if (gdr_mode != GDR_OFF)
    LOG(L_INFO,
        "OxTest: closing a %s comm after %llu messages; this process: regMr CUDA %d, "
        "regMrDmaBuf %d, iflush %d",
        c->is_send ? "send" : "receive", (unsigned long long)c->finished,
        oxtest_regmr_cuda_count(), oxtest_regmr_dmabuf_count(), oxtest_iflush_count());
  for (uint64_t i = c->finished; i < c->posted; i++) {
    struct req *r = &c->reqs[i % MAX_REQS];
    if (r->gpu) free(r->data); /* bounce buffers of requests never finished */
  }
  close(c->fd);
  free(c);
  __atomic_sub_fetch(&n_comms, 1, __ATOMIC_SEQ_CST);
  return NET_OK;
}

static res_t close_listen(void *listen_comm) {
  struct listen_comm *l = listen_comm;
  if (!l) return NET_OK;
  close(l->fd);
  if (l->afd >= 0) close(l->afd);
  free(l);
  __atomic_sub_fetch(&n_comms, 1, __ATOMIC_SEQ_CST);
  return NET_OK;
}

#if defined(OXTEST_V6) || defined(OXTEST_V7)

/* ---- ABI v6 and v7: int sizes; v7 adds device handles, getDeviceMr and irecvConsumed ---- */
typedef struct {
  char *name;
  char *pci_path;
  uint64_t guid;
  int ptr_support;
  int speed;
  int port;
  float latency;
  int max_comms;
  int max_recvs;
#ifdef OXTEST_V7
  int dev_type;
  int dev_version;
#endif
} props_old_t;

typedef struct {
  const char *name;
  res_t (*init)(logger_t);
  res_t (*devices)(int *);
  res_t (*get_properties)(int, props_old_t *);
  res_t (*listen)(int, void *, void **);
#ifdef OXTEST_V7
  res_t (*connect)(int, void *, void **, dev_handle_t **);
  res_t (*accept)(void *, void **, dev_handle_t **);
#else
  res_t (*connect)(int, void *, void **);
  res_t (*accept)(void *, void **);
#endif
  res_t (*reg_mr)(void *, void *, int, int, void **);
  res_t (*reg_mr_dmabuf)(void *, void *, size_t, int, uint64_t, int, void **);
  res_t (*dereg_mr)(void *, void *);
  res_t (*isend)(void *, void *, int, int, void *, void **);
  res_t (*irecv)(void *, int, void **, int *, int *, void **, void **);
  res_t (*iflush)(void *, int, void **, int *, void **, void **);
  res_t (*test)(void *, int *, int *);
  res_t (*close_send)(void *);
  res_t (*close_recv)(void *);
  res_t (*close_listen)(void *);
#ifdef OXTEST_V7
  res_t (*get_device_mr)(void *, void *, void **);
  res_t (*irecv_consumed)(void *, int, void *);
#endif
} net_old_t;
#ifdef OXTEST_V7
_Static_assert(sizeof(net_old_t) == 152, "v7 struct size");
_Static_assert(sizeof(props_old_t) == 56, "v7 properties size");
#else
_Static_assert(sizeof(net_old_t) == 136, "v6 struct size");
_Static_assert(sizeof(props_old_t) == 48, "v6 properties size");
#endif

static res_t init_old(logger_t logger) {
  log_fn = logger;
  res_t modes = read_modes();
  if (modes != NET_OK) return modes;
  __atomic_add_fetch(&n_init, 1, __ATOMIC_SEQ_CST);
  return NET_OK;
}

static res_t props_old(int dev, props_old_t *p) {
  if (bad_dev(dev)) return NET_ARGUMENT;
  memset(p, 0, sizeof *p);
  fill_common(dev, &p->name, &p->pci_path, &p->guid, &p->ptr_support);
  p->speed = 10000;
  p->max_comms = 65536;
  p->max_recvs = 1;
  return NET_OK;
}

static res_t reg_mr_int(void *comm, void *data, int size, int type, void **mh) {
  if (size < 0) return NET_ARGUMENT;
  return reg_mr(comm, data, (size_t)size, type, mh);
}
static res_t isend_int(void *c, void *d, int size, int tag, void *m, void **r) {
  (void)tag;
  if (size < 0) return NET_ARGUMENT;
  return do_isend(c, d, (size_t)size, m, r);
}
static res_t irecv_int(void *c, int n, void **d, int *sizes, int *tags, void **m, void **r) {
  (void)tags;
  if (n == 1 && sizes[0] < 0) return NET_ARGUMENT;
  return do_irecv(c, n, d, n == 1 ? (size_t)sizes[0] : 0, m, r);
}

#ifdef OXTEST_V7
static res_t connect_v7(int dev, void *h, void **sc, dev_handle_t **dc) {
  if (dc && *dc) return NET_INTERNAL;
  return connect_(dev, h, sc);
}
static res_t accept_v7(void *l, void **rc, dev_handle_t **dc) {
  (void)dc;
  return accept_(l, rc);
}
__attribute__((visibility("default"))) const net_old_t ncclNetPlugin_v7 = {
    "OxTest7", init_old,  devices,   props_old,  listen_,    connect_v7, accept_v7,
    reg_mr_int, NULL,     dereg_mr,  isend_int,  irecv_int,  iflush,     test,
    close_comm, close_comm, close_listen, NULL, NULL,
};
#else
__attribute__((visibility("default"))) const net_old_t ncclNetPlugin_v6 = {
    "OxTest6",  init_old,   devices,      props_old, listen_,   connect_,  accept_,
    reg_mr_int, NULL,       dereg_mr,     isend_int, irecv_int, iflush,    test,
    close_comm, close_comm, close_listen,
};
#endif

#elif defined(OXTEST_V9) || defined(OXTEST_V10)

/* ---- ABI v9 and v10: size_t sizes, makeVDevice; v10 adds the profiler callback, the
 * connection config on connect and profiler handles ---- */
typedef struct {
  PROP_HEAD int force_flush;
  PROP_MID vprops_t vprops;
  size_t max_p2p_bytes;
  size_t max_coll_bytes;
} props_v9_t;
_Static_assert(sizeof(props_v9_t) == 104, "v9 properties size");

typedef struct {
  const char *name;
#ifdef OXTEST_V10
  res_t (*init)(logger_t, profiler_t);
#else
  res_t (*init)(logger_t);
#endif
  res_t (*devices)(int *);
  res_t (*get_properties)(int, props_v9_t *);
  res_t (*listen)(int, void *, void **);
#ifdef OXTEST_V10
  res_t (*connect)(int, comm_config_t *, void *, void **, dev_handle_t **);
#else
  res_t (*connect)(int, void *, void **, dev_handle_t **);
#endif
  res_t (*accept)(void *, void **, dev_handle_t **);
  res_t (*reg_mr)(void *, void *, size_t, int, void **);
  res_t (*reg_mr_dmabuf)(void *, void *, size_t, int, uint64_t, int, void **);
  res_t (*dereg_mr)(void *, void *);
#ifdef OXTEST_V10
  res_t (*isend)(void *, void *, size_t, int, void *, void *, void **);
  res_t (*irecv)(void *, int, void **, size_t *, int *, void **, void **, void **);
#else
  res_t (*isend)(void *, void *, size_t, int, void *, void **);
  res_t (*irecv)(void *, int, void **, size_t *, int *, void **, void **);
#endif
  res_t (*iflush)(void *, int, void **, int *, void **, void **);
  res_t (*test)(void *, int *, int *);
  res_t (*close_send)(void *);
  res_t (*close_recv)(void *);
  res_t (*close_listen)(void *);
  res_t (*get_device_mr)(void *, void *, void **);
  res_t (*irecv_consumed)(void *, int, void *);
  res_t (*make_vdevice)(int *, vprops_t *);
} net_v9_t;
_Static_assert(sizeof(net_v9_t) == 160, "v9/v10 struct size");

static res_t props_v9(int dev, props_v9_t *p) {
  if (bad_dev(dev)) return NET_ARGUMENT;
  memset(p, 0, sizeof *p);
  fill_common(dev, &p->name, &p->pci_path, &p->guid, &p->ptr_support);
  p->speed = 10000;
  p->max_comms = 65536;
  p->max_recvs = 1;
  p->force_flush = force_flush_on;
  p->vprops.ndevs = 1;
  p->max_p2p_bytes = (size_t)1 << 36; /* 64 GiB: not the adapters' 1 GiB */
  p->max_coll_bytes = (size_t)1 << 29;
  return NET_OK;
}

static res_t accept_v9(void *l, void **rc, dev_handle_t **dc) {
  (void)dc;
  return accept_(l, rc);
}

#ifdef OXTEST_V10
static res_t init_v10(logger_t logger, profiler_t profiler) {
  log_fn = logger;
  res_t modes = read_modes();
  if (modes != NET_OK) return modes;
  if (!profiler) {
    LOG(L_WARN, "OxTest10: no profiler callback");
    return NET_INTERNAL;
  }
  __atomic_add_fetch(&n_init, 1, __ATOMIC_SEQ_CST);
  return NET_OK;
}
static res_t connect_v10(int dev, comm_config_t *config, void *h, void **sc, dev_handle_t **dc) {
  if (!config || config->traffic_class != -1) {
    LOG(L_WARN, "OxTest10: connect without the default connection config");
    return NET_INTERNAL;
  }
  if (dc && *dc) return NET_INTERNAL;
  return connect_(dev, h, sc);
}
static res_t isend_v10(void *c, void *d, size_t size, int tag, void *m, void *ph, void **r) {
  (void)tag, (void)ph;
  return do_isend(c, d, size, m, r);
}
static res_t irecv_v10(void *c, int n, void **d, size_t *sizes, int *tags, void **m, void **ph,
                       void **r) {
  (void)tags, (void)ph;
  return do_irecv(c, n, d, n == 1 ? sizes[0] : 0, m, r);
}
__attribute__((visibility("default"))) const net_v9_t ncclNetPlugin_v10 = {
    "OxTest10", init_v10,   devices,    props_v9,     listen_,   connect_v10,
    accept_v9,  reg_mr,     NULL,       dereg_mr,     isend_v10, irecv_v10,
    iflush,     test,       close_comm, close_comm,   close_listen, NULL,
    NULL,       NULL,
};
#else
static res_t init_v9(logger_t logger) {
  log_fn = logger;
  res_t modes = read_modes();
  if (modes != NET_OK) return modes;
  __atomic_add_fetch(&n_init, 1, __ATOMIC_SEQ_CST);
  return NET_OK;
}
static res_t connect_v9(int dev, void *h, void **sc, dev_handle_t **dc) {
  if (dc && *dc) return NET_INTERNAL;
  return connect_(dev, h, sc);
}
static res_t isend_v9(void *c, void *d, size_t size, int tag, void *m, void **r) {
  (void)tag;
  return do_isend(c, d, size, m, r);
}
static res_t irecv_v9(void *c, int n, void **d, size_t *sizes, int *tags, void **m, void **r) {
  (void)tags;
  return do_irecv(c, n, d, n == 1 ? sizes[0] : 0, m, r);
}
__attribute__((visibility("default"))) const net_v9_t ncclNetPlugin_v9 = {
    "OxTest9", init_v9,    devices,    props_v9,     listen_,   connect_v9,
    accept_v9, reg_mr,     NULL,       dereg_mr,     isend_v9,  irecv_v9,
    iflush,    test,       close_comm, close_comm,   close_listen, NULL,
    NULL,      NULL,
};
#endif

#elif defined(OXTEST_V8)

/* ---- ABI v8 ---- */
typedef struct {
  const char *name;
  res_t (*init)(logger_t);
  res_t (*devices)(int *);
  res_t (*get_properties)(int, props_v8_t *);
  res_t (*listen)(int, void *, void **);
  res_t (*connect)(int, void *, void **, dev_handle_t **);
  res_t (*accept)(void *, void **, dev_handle_t **);
  res_t (*reg_mr)(void *, void *, size_t, int, void **);
  res_t (*reg_mr_dmabuf)(void *, void *, size_t, int, uint64_t, int, void **);
  res_t (*dereg_mr)(void *, void *);
  res_t (*isend)(void *, void *, int, int, void *, void **);
  res_t (*irecv)(void *, int, void **, int *, int *, void **, void **);
  res_t (*iflush)(void *, int, void **, int *, void **, void **);
  res_t (*test)(void *, int *, int *);
  res_t (*close_send)(void *);
  res_t (*close_recv)(void *);
  res_t (*close_listen)(void *);
  res_t (*get_device_mr)(void *, void *, void **);
  res_t (*irecv_consumed)(void *, int, void *);
} net_v8_t;
_Static_assert(sizeof(net_v8_t) == 152, "v8 struct size");
_Static_assert(sizeof(props_v8_t) == 64, "v8 properties size");

static res_t init_v8(logger_t logger) {
  log_fn = logger;
  res_t modes = read_modes();
  if (modes != NET_OK) return modes;
  __atomic_add_fetch(&n_init, 1, __ATOMIC_SEQ_CST);
  LOG(L_INFO, "OxTest8: init (%s), %d device", "ABI v8", 1);
  return NET_OK;
}

static res_t props_v8(int dev, props_v8_t *p) {
  if (bad_dev(dev)) return NET_ARGUMENT;
  memset(p, 0, sizeof *p);
  fill_common(dev, &p->name, &p->pci_path, &p->guid, &p->ptr_support);
  p->speed = 10000;
  p->max_comms = 65536;
  p->max_recvs = 1;
  return NET_OK;
}

static res_t connect_v8(int dev, void *h, void **sc, dev_handle_t **dc) {
  if (dc && *dc) return NET_INTERNAL; /* no device offload offered by this plugin */
  return connect_(dev, h, sc);
}
static res_t accept_v8(void *l, void **rc, dev_handle_t **dc) {
  (void)dc;
  return accept_(l, rc);
}
static res_t isend_v8(void *c, void *d, int size, int tag, void *m, void **r) {
  (void)tag;
  if (size < 0) return NET_ARGUMENT;
  return do_isend(c, d, (size_t)size, m, r);
}
static res_t irecv_v8(void *c, int n, void **d, int *sizes, int *tags, void **m, void **r) {
  (void)tags;
  if (n == 1 && sizes[0] < 0) return NET_ARGUMENT;
  return do_irecv(c, n, d, n == 1 ? (size_t)sizes[0] : 0, m, r);
}

__attribute__((visibility("default"))) const net_v8_t ncclNetPlugin_v8 = {
    "OxTest8", init_v8,  devices,  props_v8, listen_,      connect_v8,   accept_v8,
    reg_mr,    NULL,     dereg_mr, isend_v8, irecv_v8,     iflush,       test,
    close_comm, close_comm, close_listen, NULL, NULL,
};

#else

/* ---- ABI v11 and v12: the same members; v12's properties (and vProps) are larger ---- */
typedef struct { int ndevs; int devs[8]; } vprops_v12_t;
typedef struct {
  PROP_HEAD int force_flush;
  PROP_MID vprops_v12_t vprops;
  size_t max_p2p_bytes;
  size_t max_coll_bytes;
  int max_multi_request_size;
  int16_t rail_id;
  int16_t plane_id;
} props_v12_t;
_Static_assert(sizeof(props_v12_t) == 128, "v12 properties size");
_Static_assert(offsetof(props_v12_t, max_p2p_bytes) == 104, "v12 maxP2pBytes offset");
_Static_assert(offsetof(props_v12_t, rail_id) == 124, "v12 railId offset");
_Static_assert(offsetof(props_v12_t, plane_id) == 126, "v12 planeId offset");

/* Only what getProperties and makeVDevice point to differs between the two versions. */
#define NET_V11_MEMBERS(props_t, vprops_t)                                                     \
  const char *name;                                                                            \
  res_t (*init)(void **, uint64_t, comm_config_t *, logger_t, profiler_t);                     \
  res_t (*devices)(int *);                                                                     \
  res_t (*get_properties)(int, props_t *);                                                     \
  res_t (*listen)(void *, int, void *, void **);                                               \
  res_t (*connect)(void *, int, void *, void **, dev_handle_t **);                             \
  res_t (*accept)(void *, void **, dev_handle_t **);                                           \
  res_t (*reg_mr)(void *, void *, size_t, int, void **);                                       \
  res_t (*reg_mr_dmabuf)(void *, void *, size_t, int, uint64_t, int, void **);                 \
  res_t (*dereg_mr)(void *, void *);                                                           \
  res_t (*isend)(void *, void *, size_t, int, void *, void *, void **);                        \
  res_t (*irecv)(void *, int, void **, size_t *, int *, void **, void **, void **);            \
  res_t (*iflush)(void *, int, void **, int *, void **, void **);                              \
  res_t (*test)(void *, int *, int *);                                                         \
  res_t (*close_send)(void *);                                                                 \
  res_t (*close_recv)(void *);                                                                 \
  res_t (*close_listen)(void *);                                                               \
  res_t (*get_device_mr)(void *, void *, void **);                                             \
  res_t (*irecv_consumed)(void *, int, void *);                                                \
  res_t (*make_vdevice)(int *, vprops_t *);                                                    \
  res_t (*finalize)(void *);                                                                   \
  res_t (*set_net_attr)(void *, void *);
typedef struct { NET_V11_MEMBERS(props_v11_t, vprops_t) } net_v11_t;
typedef struct { NET_V11_MEMBERS(props_v12_t, vprops_v12_t) } net_v12_t;
_Static_assert(sizeof(net_v11_t) == 176, "v11 struct size");
_Static_assert(sizeof(net_v12_t) == 176, "v12 struct size");
_Static_assert(sizeof(props_v11_t) == 112, "v11 properties size");
_Static_assert(offsetof(props_v11_t, max_p2p_bytes) == 88, "v11 maxP2pBytes offset");

#if defined(OXTEST_V12) || defined(OXTEST_V12_AND_V11)
#define OXTEST_HAS_V12 1
#endif
#ifndef OXTEST_V12
#define OXTEST_HAS_V11 1
#endif

#ifdef OXTEST_NO_SYMBOL
#define OXTEST_EXPORT static
#define OXTEST_SYMBOL oxtest_not_exported
#else
#define OXTEST_EXPORT __attribute__((visibility("default")))
#define OXTEST_SYMBOL ncclNetPlugin_v11
#endif
/* Not const: init fills regMrDmaBuf when the dma-buf mode is on (members are read after init). */
#ifdef OXTEST_HAS_V11
OXTEST_EXPORT net_v11_t OXTEST_SYMBOL;
#endif
#ifdef OXTEST_HAS_V12
__attribute__((visibility("default"))) net_v12_t ncclNetPlugin_v12;
#endif

#define CTX_MAGIC 0x5854434fu
struct ctx {
  uint32_t magic;
  uint64_t comm_id;
};

static res_t init_v11(void **ctx, uint64_t comm_id, comm_config_t *config, logger_t logger,
                      profiler_t profiler) {
  log_fn = logger;
  res_t modes = read_modes();
  if (modes != NET_OK) return modes;
  (void)profiler;
#ifdef OXTEST_FAIL_INIT
  (void)ctx, (void)comm_id, (void)config;
  LOG(L_WARN, "OxTestBad: init fails on purpose (%s %d)", "code", NET_SYSTEM);
  return NET_SYSTEM;
#else
  struct ctx *c = malloc(sizeof *c);
  if (!c) return NET_SYSTEM;
  c->magic = CTX_MAGIC;
  c->comm_id = comm_id;
  *ctx = c;
#ifdef OXTEST_HAS_V11
  OXTEST_SYMBOL.reg_mr_dmabuf = dmabuf_on ? reg_mr_dmabuf : NULL;
#endif
#ifdef OXTEST_HAS_V12
  ncclNetPlugin_v12.reg_mr_dmabuf = dmabuf_on ? reg_mr_dmabuf : NULL;
#endif
  __atomic_add_fetch(&n_init, 1, __ATOMIC_SEQ_CST);
  LOG(L_INFO, "OxTest: init for comm %#llx, traffic class %d", (unsigned long long)comm_id,
      config ? config->traffic_class : -2);
  return NET_OK;
#endif
}

static res_t finalize_v11(void *ctx) {
  struct ctx *c = ctx;
  if (!c || c->magic != CTX_MAGIC) return NET_INTERNAL;
  c->magic = 0;
  free(c);
  __atomic_add_fetch(&n_finalize, 1, __ATOMIC_SEQ_CST);
  return NET_OK;
}

/* The fields v11 and v12 share by name (v12 has them at other offsets from vProps on). */
#define FILL_V11(p, max_p2p)                                                                   \
  do {                                                                                         \
    memset(p, 0, sizeof *p);                                                                   \
    fill_common(dev, &p->name, &p->pci_path, &p->guid, &p->ptr_support);                            \
    p->speed = 10000;                                                                          \
    p->max_comms = 65536;                                                                      \
    p->max_recvs = 1;                                                                          \
    p->force_flush = force_flush_on;                                                           \
    p->vprops.ndevs = 1;                                                                       \
    p->max_p2p_bytes = max_p2p;                                                                \
    p->max_coll_bytes = (size_t)1 << 29;                                                       \
    p->max_multi_request_size = 1;                                                             \
  } while (0)

static __attribute__((unused)) res_t props_v11(int dev, props_v11_t *p) {
  if (bad_dev(dev)) return NET_ARGUMENT;
  FILL_V11(p, (size_t)1 << 40);
  return NET_OK;
}

/* Values no other flavour reports, so a host reading v11's layout would see other numbers. */
static __attribute__((unused)) res_t props_v12(int dev, props_v12_t *p) {
  if (bad_dev(dev)) return NET_ARGUMENT;
  FILL_V11(p, (size_t)1 << 37);
  p->rail_id = 3;
  p->plane_id = 1;
  return NET_OK;
}

static res_t listen_v11(void *ctx, int dev, void *h, void **l) {
  struct ctx *c = ctx;
  if (!c || c->magic != CTX_MAGIC) return NET_INTERNAL;
  return listen_(dev, h, l);
}
static res_t connect_v11(void *ctx, int dev, void *h, void **sc, dev_handle_t **dc) {
  struct ctx *c = ctx;
  if (!c || c->magic != CTX_MAGIC || (dc && *dc)) return NET_INTERNAL;
  return connect_(dev, h, sc);
}
static res_t accept_v11(void *l, void **rc, dev_handle_t **dc) {
  (void)dc;
  return accept_(l, rc);
}
static res_t isend_v11(void *c, void *d, size_t size, int tag, void *m, void *ph, void **r) {
  (void)tag, (void)ph;
  return do_isend(c, d, size, m, r);
}
static res_t irecv_v11(void *c, int n, void **d, size_t *sizes, int *tags, void **m, void **ph,
                       void **r) {
  (void)tags, (void)ph;
  return do_irecv(c, n, d, n == 1 ? sizes[0] : 0, m, r);
}

#ifdef OXTEST_FAIL_INIT
#define OXTEST_NAME "OxTestBad"
#else
#define OXTEST_NAME "OxTest"
#endif

/* Both versions share every function but getProperties. */
#define NET_V11_INIT(name, props)                                                              \
  {                                                                                            \
    name, init_v11, devices, props, listen_v11, connect_v11, accept_v11, reg_mr, NULL,         \
        dereg_mr, isend_v11, irecv_v11, iflush, test, close_comm, close_comm, close_listen,    \
        NULL, NULL, NULL, finalize_v11, NULL,                                                  \
  }

#ifdef OXTEST_HAS_V11
OXTEST_EXPORT net_v11_t OXTEST_SYMBOL = NET_V11_INIT(OXTEST_NAME, props_v11);
#endif
#ifdef OXTEST_HAS_V12
__attribute__((visibility("default"))) net_v12_t ncclNetPlugin_v12 =
    NET_V11_INIT("OxTest12", props_v12);
#endif

#ifdef OXTEST_NO_SYMBOL
/* Keep the struct referenced so the compiler does not warn about it. */
const void *oxtest_struct(void) { return &OXTEST_SYMBOL; }
#endif

#ifdef OXTEST_GIN
/* A GIN plugin of the proxy type (ncclGinPlugin_v11, or ncclGinPlugin_v13 with OXTEST_GIN=13)
 * for ranks that are threads of one process: it really moves data, in process memory.
 * listen puts a pointer to the rank's state in the handle; connect keeps every rank's state;
 * regMrSym records (address, size) under the registration's index (registrations are
 * collective, so an index names the same memory on every rank) and, standing in for the
 * all-gather a real plugin does there, waits until every rank made that registration; iput
 * copies into the peer's registration of the same index at once, iputSignal then adds to the
 * peer's signal word. A request is done at its second test, so callers do see pending ones.
 * OXTEST_GIN_TYPE (default 2, the proxy) is the device type reported; OXTEST_GIN_FAIL_AFTER=n
 * (environment, read at init; default OXTEST_GIN_FAIL_AFTER_DEFAULT, -1: never) makes every
 * put after the first n fail with ncclRemoteError.
 * States are freed when the last comm holding one closes. */
#ifndef OXTEST_GIN_TYPE
#define OXTEST_GIN_TYPE 2
#endif
#ifndef OXTEST_GIN_FAIL_AFTER_DEFAULT
#define OXTEST_GIN_FAIL_AFTER_DEFAULT -1
#endif
#include <sched.h>
#include <stdbool.h>
#include <time.h>

#define GIN_MAX_RANKS 64
#define GIN_MAX_REGS 4096
#define GIN_MAGIC 0x4e49474fu
enum { GIN_OP_INC = 1, GIN_OP_ADD = 2, GIN_FORCE_SO = 1 };

struct gin_rank {
  uint32_t magic;
  int refs;  /* the listen comm and every collective comm that knows this rank */
  int nregs; /* registrations published so far */
  void *base[GIN_MAX_REGS];
  size_t size[GIN_MAX_REGS];
};
struct gin_coll {
  uint32_t magic;
  int rank, nranks;
  struct gin_rank *self;
  struct gin_rank *peers[GIN_MAX_RANKS];
};
struct gin_mr {
  uint32_t magic;
  int idx;
};
struct gin_req {
  int tests;
};
struct gin_ctx {
  uint32_t magic;
  struct gin_coll *coll;
};

static int n_gin_init, n_gin_finalize, n_gin_colls, n_gin_puts, n_gin_signals, n_gin_progress;
static int n_gin_reg_host, n_gin_reg_cuda, n_gin_reg_strong, n_gin_contexts;
static long gin_fail_after = -1;
int oxtest_gin_init_count(void) { return __atomic_load_n(&n_gin_init, __ATOMIC_SEQ_CST); }
int oxtest_gin_finalize_count(void) { return __atomic_load_n(&n_gin_finalize, __ATOMIC_SEQ_CST); }
int oxtest_gin_open_colls(void) { return __atomic_load_n(&n_gin_colls, __ATOMIC_SEQ_CST); }
int oxtest_gin_put_count(void) { return __atomic_load_n(&n_gin_puts, __ATOMIC_SEQ_CST); }
int oxtest_gin_signal_count(void) { return __atomic_load_n(&n_gin_signals, __ATOMIC_SEQ_CST); }
int oxtest_gin_progress_count(void) { return __atomic_load_n(&n_gin_progress, __ATOMIC_SEQ_CST); }
int oxtest_gin_reg_host_count(void) { return __atomic_load_n(&n_gin_reg_host, __ATOMIC_SEQ_CST); }
int oxtest_gin_reg_cuda_count(void) { return __atomic_load_n(&n_gin_reg_cuda, __ATOMIC_SEQ_CST); }
int oxtest_gin_reg_strong_count(void) { return __atomic_load_n(&n_gin_reg_strong, __ATOMIC_SEQ_CST); }
int oxtest_gin_context_count(void) { return __atomic_load_n(&n_gin_contexts, __ATOMIC_SEQ_CST); }

static void gin_unref(struct gin_rank *r) {
  if (__atomic_sub_fetch(&r->refs, 1, __ATOMIC_ACQ_REL) == 0) {
    r->magic = 0;
    free(r);
  }
}

static res_t gin_init(void **ctx, uint64_t comm_id, logger_t logger) {
  log_fn = logger;
  const char *f = getenv("OXTEST_GIN_FAIL_AFTER");
  gin_fail_after = f ? atol(f) : OXTEST_GIN_FAIL_AFTER_DEFAULT;
  struct ctx *c = malloc(sizeof *c);
  if (!c) return NET_SYSTEM;
  c->magic = CTX_MAGIC;
  c->comm_id = comm_id;
  *ctx = c;
  __atomic_add_fetch(&n_gin_init, 1, __ATOMIC_SEQ_CST);
  LOG(L_INFO, "OxTestGin: init for comm %#llx", (unsigned long long)comm_id);
  return NET_OK;
}

static res_t gin_finalize(void *ctx) {
  struct ctx *c = ctx;
  if (!c || c->magic != CTX_MAGIC) return NET_INTERNAL;
  c->magic = 0;
  free(c);
  __atomic_add_fetch(&n_gin_finalize, 1, __ATOMIC_SEQ_CST);
  return NET_OK;
}

static res_t gin_devices(int *ndev) {
  *ndev = 1;
  return NET_OK;
}

#define GIN_PROPS(p)                                                                           \
  do {                                                                                         \
    if (dev != 0) return NET_ARGUMENT;                                                         \
    memset(p, 0, sizeof *p);                                                                   \
    p->name = (char *)"oxgin";                                                                 \
    p->ptr_support = PTR_HOST | PTR_CUDA;                                                      \
    p->speed = 10000;                                                                          \
    p->max_comms = 65536;                                                                      \
    p->max_recvs = 1;                                                                          \
    p->dev_type = OXTEST_GIN_TYPE;                                                             \
    p->vprops.ndevs = 1;                                                                       \
    p->max_p2p_bytes = (size_t)1 << 40;                                                        \
    p->max_coll_bytes = (size_t)1 << 40;                                                       \
    p->max_multi_request_size = 1;                                                             \
  } while (0)

static __attribute__((unused)) res_t gin_props_v11(int dev, props_v11_t *p) {
  GIN_PROPS(p);
  return NET_OK;
}
static __attribute__((unused)) res_t gin_props_v12(int dev, props_v12_t *p) {
  GIN_PROPS(p);
  return NET_OK;
}

static res_t gin_listen(void *ctx, int dev, void *handle, void **listen_comm) {
  struct ctx *c = ctx;
  if (!c || c->magic != CTX_MAGIC || dev != 0) return NET_INTERNAL;
  struct gin_rank *r = calloc(1, sizeof *r);
  if (!r) return NET_SYSTEM;
  r->magic = GIN_MAGIC;
  r->refs = 1;
  memset(handle, 0, 128);
  memcpy(handle, &r, sizeof r);
  *listen_comm = r;
  return NET_OK;
}

static res_t gin_connect(void *ctx, void **handles, int nranks, int rank, void *listen_comm,
                         void **coll_comm) {
  (void)ctx;
  if (nranks < 1 || nranks > GIN_MAX_RANKS || rank < 0 || rank >= nranks) return NET_ARGUMENT;
  struct gin_coll *g = calloc(1, sizeof *g);
  if (!g) return NET_SYSTEM;
  g->magic = GIN_MAGIC;
  g->rank = rank;
  g->nranks = nranks;
  g->self = listen_comm;
  for (int r = 0; r < nranks; r++) {
    memcpy(&g->peers[r], handles[r], sizeof g->peers[r]);
    if (!g->peers[r] || g->peers[r]->magic != GIN_MAGIC) {
      LOG(L_WARN, "OxTestGin: rank %d's handle names no rank of this process", r);
      free(g);
      return NET_INTERNAL;
    }
  }
  if (g->peers[rank] != g->self) {
    free(g);
    return NET_INTERNAL;
  }
  for (int r = 0; r < nranks; r++) __atomic_add_fetch(&g->peers[r]->refs, 1, __ATOMIC_ACQ_REL);
  __atomic_add_fetch(&n_gin_colls, 1, __ATOMIC_SEQ_CST);
  *coll_comm = g;
  return NET_OK;
}

static res_t gin_close_listen(void *listen_comm) {
  gin_unref(listen_comm);
  return NET_OK;
}

static res_t gin_close_coll(void *coll_comm) {
  struct gin_coll *g = coll_comm;
  if (!g || g->magic != GIN_MAGIC) return NET_INTERNAL;
  for (int r = 0; r < g->nranks; r++) gin_unref(g->peers[r]);
  g->magic = 0;
  free(g);
  __atomic_sub_fetch(&n_gin_colls, 1, __ATOMIC_SEQ_CST);
  return NET_OK;
}

static res_t gin_reg(void *coll_comm, void *data, size_t size, int type, uint64_t flags,
                     void **mhandle, void **gin_handle) {
  struct gin_coll *g = coll_comm;
  if (!g || g->magic != GIN_MAGIC) return NET_INTERNAL;
  if (type != PTR_HOST && type != PTR_CUDA) return NET_ARGUMENT;
  int idx = __atomic_load_n(&g->self->nregs, __ATOMIC_RELAXED);
  if (idx >= GIN_MAX_REGS) return NET_SYSTEM;
  struct gin_mr *m = malloc(sizeof *m);
  if (!m) return NET_SYSTEM;
  g->self->base[idx] = data;
  g->self->size[idx] = size;
  __atomic_store_n(&g->self->nregs, idx + 1, __ATOMIC_RELEASE);
  /* The all-gather of a real plugin: every rank's address is known before any put uses it. */
  time_t t0 = time(NULL);
  for (int r = 0; r < g->nranks; r++) {
    while (__atomic_load_n(&g->peers[r]->nregs, __ATOMIC_ACQUIRE) <= idx) {
      if (time(NULL) - t0 > 30) {
        LOG(L_WARN, "OxTestGin: rank %d never made registration %d", r, idx);
        free(m);
        return NET_INTERNAL;
      }
      sched_yield();
    }
  }
  __atomic_add_fetch(type == PTR_HOST ? &n_gin_reg_host : &n_gin_reg_cuda, 1, __ATOMIC_SEQ_CST);
  if (flags & GIN_FORCE_SO) __atomic_add_fetch(&n_gin_reg_strong, 1, __ATOMIC_SEQ_CST);
  m->magic = GIN_MAGIC;
  m->idx = idx;
  *mhandle = m;
  *gin_handle = m;
  return NET_OK;
}

static res_t gin_dereg(void *coll_comm, void *mhandle) {
  struct gin_coll *g = coll_comm;
  struct gin_mr *m = mhandle;
  if (!g || g->magic != GIN_MAGIC || !m || m->magic != GIN_MAGIC) return NET_INTERNAL;
  g->self->base[m->idx] = NULL;
  g->self->size[m->idx] = 0;
  m->magic = 0;
  free(m);
  return NET_OK;
}

/* The memory of `rank`'s registration `mh` from `off` for `n` bytes, or NULL. */
static char *gin_at(struct gin_coll *g, int rank, void *mh, uint64_t off, size_t n) {
  struct gin_mr *m = mh;
  if (!m || m->magic != GIN_MAGIC) return NULL;
  struct gin_rank *r = g->peers[rank];
  if (!r->base[m->idx] || off > r->size[m->idx] || n > r->size[m->idx] - off) return NULL;
  return (char *)r->base[m->idx] + off;
}

static res_t gin_put(void *coll_comm, uint64_t src_off, void *src_mh, size_t size,
                     uint64_t dst_off, void *dst_mh, uint32_t rank, int with_signal,
                     uint64_t sig_off, void *sig_mh, uint64_t sig_value, uint32_t sig_op,
                     void **request) {
  struct gin_coll *g = coll_comm;
  if (!g || g->magic != GIN_MAGIC) return NET_INTERNAL;
  if ((int)rank >= g->nranks) return NET_ARGUMENT;
  int n = __atomic_add_fetch(&n_gin_puts, 1, __ATOMIC_SEQ_CST);
  if (gin_fail_after >= 0 && n > gin_fail_after) {
    LOG(L_WARN, "OxTestGin: put %d fails on purpose (OXTEST_GIN_FAIL_AFTER)", n);
    return NET_REMOTE;
  }
  if (size > 0) {
    char *src = gin_at(g, g->rank, src_mh, src_off, size);
    char *dst = gin_at(g, rank, dst_mh, dst_off, size);
    if (!src || !dst) {
      LOG(L_WARN, "OxTestGin: a put of %zu bytes outside its registrations", size);
      return NET_ARGUMENT;
    }
    memcpy(dst, src, size);
  }
  if (with_signal) {
    uint64_t *word = (uint64_t *)gin_at(g, rank, sig_mh, sig_off, 8);
    if (!word || (sig_op != GIN_OP_INC && sig_op != GIN_OP_ADD)) return NET_ARGUMENT;
    __atomic_fetch_add(word, sig_op == GIN_OP_INC ? 1 : sig_value, __ATOMIC_RELEASE);
    __atomic_add_fetch(&n_gin_signals, 1, __ATOMIC_SEQ_CST);
  }
  struct gin_req *r = calloc(1, sizeof *r);
  if (!r) return NET_SYSTEM;
  *request = r;
  return NET_OK;
}

static res_t gin_test(void *coll_comm, void *request, int *done) {
  (void)coll_comm;
  struct gin_req *r = request;
  *done = ++r->tests >= 2;
  if (*done) free(r);
  return NET_OK;
}

static res_t gin_query_last_error(void *gin_ctx, bool *has_error) {
  (void)gin_ctx;
  *has_error = false;
  return NET_OK;
}

#if OXTEST_GIN == 13
typedef struct { int n_signals, n_counters, n_contexts, queue_depth, traffic_class; } gin_config_t;
typedef struct {
  const char *name;
  res_t (*init)(void **, uint64_t, logger_t);
  res_t (*devices)(int *);
  res_t (*get_properties)(int, props_v12_t *);
  res_t (*listen)(void *, int, void *, void **);
  res_t (*connect)(void *, void **, int, int, void *, void **);
  res_t (*create_context)(void *, gin_config_t *, void **, dev_handle_t **);
  res_t (*reg_mr_sym)(void *, void *, size_t, int, uint64_t, void **, void **);
  res_t (*reg_mr_sym_dmabuf)(void *, void *, size_t, int, uint64_t, int, uint64_t, void **,
                             void **);
  res_t (*dereg_mr_sym)(void *, void *);
  res_t (*destroy_context)(void *);
  res_t (*close_coll)(void *);
  res_t (*close_listen)(void *);
  res_t (*iput)(void *, int, uint64_t, void *, size_t, uint64_t, void *, uint32_t, void **);
  res_t (*iput_signal)(void *, int, uint64_t, void *, size_t, uint64_t, void *, uint32_t,
                       uint64_t, void *, uint64_t, uint32_t, void **);
  res_t (*iget)(void *, int, uint64_t, void *, size_t, uint64_t, void *, uint32_t, void **);
  res_t (*iflush)(void *, int, void *, uint32_t, void **);
  res_t (*test)(void *, void *, int *);
  res_t (*gin_progress)(void *);
  res_t (*query_last_error)(void *, bool *);
  res_t (*finalize)(void *);
} gin_v13_t;
_Static_assert(sizeof(gin_v13_t) == 168, "GIN v13 struct size");

static dev_handle_t gin_dev_handle = {OXTEST_GIN_TYPE, 0, NULL, 0, 1};

static res_t gin_create_context(void *coll_comm, gin_config_t *config, void **gin_ctx,
                                dev_handle_t **dev) {
  struct gin_coll *g = coll_comm;
  if (!g || g->magic != GIN_MAGIC || !config || config->n_contexts != 1) return NET_ARGUMENT;
  struct gin_ctx *c = malloc(sizeof *c);
  if (!c) return NET_SYSTEM;
  c->magic = GIN_MAGIC;
  c->coll = g;
  *gin_ctx = c;
  *dev = &gin_dev_handle;
  __atomic_add_fetch(&n_gin_contexts, 1, __ATOMIC_SEQ_CST);
  return NET_OK;
}
static res_t gin_destroy_context(void *gin_ctx) {
  struct gin_ctx *c = gin_ctx;
  if (!c || c->magic != GIN_MAGIC) return NET_INTERNAL;
  c->magic = 0;
  free(c);
  __atomic_sub_fetch(&n_gin_contexts, 1, __ATOMIC_SEQ_CST);
  return NET_OK;
}
static struct gin_coll *gin_coll_of(void *gin_ctx, int context) {
  struct gin_ctx *c = gin_ctx;
  return c && c->magic == GIN_MAGIC && context == 0 ? c->coll : NULL;
}
static res_t gin_iput_v13(void *gin_ctx, int context, uint64_t so, void *sm, size_t size,
                          uint64_t d_o, void *dm, uint32_t rank, void **req) {
  return gin_put(gin_coll_of(gin_ctx, context), so, sm, size, d_o, dm, rank, 0, 0, NULL, 0, 0,
                 req);
}
static res_t gin_iput_signal_v13(void *gin_ctx, int context, uint64_t so, void *sm,
                                 size_t size, uint64_t d_o, void *dm, uint32_t rank,
                                 uint64_t go, void *gm, uint64_t v, uint32_t op, void **req) {
  return gin_put(gin_coll_of(gin_ctx, context), so, sm, size, d_o, dm, rank, 1, go, gm, v, op,
                 req);
}
static res_t gin_progress_v13(void *gin_ctx) {
  if (!gin_coll_of(gin_ctx, 0)) return NET_INTERNAL;
  __atomic_add_fetch(&n_gin_progress, 1, __ATOMIC_SEQ_CST);
  return NET_OK;
}
__attribute__((visibility("default"))) gin_v13_t ncclGinPlugin_v13 = {
    "OxTestGin13", gin_init, gin_devices, gin_props_v12, gin_listen, gin_connect,
    gin_create_context, gin_reg, NULL, gin_dereg, gin_destroy_context, gin_close_coll,
    gin_close_listen, gin_iput_v13, gin_iput_signal_v13, NULL, NULL, gin_test,
    gin_progress_v13, gin_query_last_error, gin_finalize,
};
#else
typedef struct {
  const char *name;
  res_t (*init)(void **, uint64_t, logger_t);
  res_t (*devices)(int *);
  res_t (*get_properties)(int, props_v11_t *);
  res_t (*listen)(void *, int, void *, void **);
  res_t (*connect)(void *, void **, int, int, void *, void **);
  res_t (*create_context)(void *, int, int, void **, dev_handle_t **);
  res_t (*reg_mr_sym)(void *, void *, size_t, int, uint64_t, void **, void **);
  res_t (*reg_mr_sym_dmabuf)(void *, void *, size_t, int, uint64_t, int, uint64_t, void **,
                             void **);
  res_t (*dereg_mr_sym)(void *, void *);
  res_t (*destroy_context)(void *);
  res_t (*close_coll)(void *);
  res_t (*close_listen)(void *);
  res_t (*iput)(void *, uint64_t, void *, size_t, uint64_t, void *, uint32_t, void **);
  res_t (*iput_signal)(void *, uint64_t, void *, size_t, uint64_t, void *, uint32_t, uint64_t,
                       void *, uint64_t, uint32_t, void **);
  res_t (*test)(void *, void *, int *);
  res_t (*gin_progress)(void *);
  res_t (*query_last_error)(void *, bool *);
  res_t (*finalize)(void *);
} gin_v11_t;
_Static_assert(sizeof(gin_v11_t) == 152, "GIN v11 struct size");

static res_t gin_iput_v11(void *coll, uint64_t so, void *sm, size_t size, uint64_t d_o,
                          void *dm, uint32_t rank, void **req) {
  return gin_put(coll, so, sm, size, d_o, dm, rank, 0, 0, NULL, 0, 0, req);
}
static res_t gin_iput_signal_v11(void *coll, uint64_t so, void *sm, size_t size, uint64_t d_o,
                                 void *dm, uint32_t rank, uint64_t go, void *gm, uint64_t v,
                                 uint32_t op, void **req) {
  return gin_put(coll, so, sm, size, d_o, dm, rank, 1, go, gm, v, op, req);
}
static res_t gin_progress_v11(void *coll) {
  struct gin_coll *g = coll;
  if (!g || g->magic != GIN_MAGIC) return NET_INTERNAL;
  __atomic_add_fetch(&n_gin_progress, 1, __ATOMIC_SEQ_CST);
  return NET_OK;
}
/* createContext stays NULL: NCCL 2.28.9 never calls it for the proxy type. */
__attribute__((visibility("default"))) gin_v11_t ncclGinPlugin_v11 = {
    "OxTestGin", gin_init, gin_devices, gin_props_v11, gin_listen, gin_connect, NULL, gin_reg,
    NULL, gin_dereg, NULL, gin_close_coll, gin_close_listen, gin_iput_v11, gin_iput_signal_v11,
    gin_test, gin_progress_v11, gin_query_last_error, gin_finalize,
};
#endif
#endif /* OXTEST_GIN */

#endif
