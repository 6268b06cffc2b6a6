// Runs the embedded kernels on a real GPU through the driver API, the way the backends will:
// cuModuleLoadData on the fatbin, cuModuleGetFunction by name, one block per channel.
//
// Usage: gpu_exec_test <oxccl.fatbin>
//
// 1. Local steps and loopback (send-to-self) steps for all 12 types and 4 combiners, with and
//    without pre-scale and post-division, at aligned and misaligned offsets; results must equal
//    the host arithmetic of reduce_ops.cuh bit for bit (NaN matches any NaN).
// 2. A two-rank ring allreduce over OxcclConn FIFOs: the ranks are two kernels running at once,
//    on two GPUs with peer access when there are two, else on one GPU, on separate streams.
// 3. Abort: a kernel waiting on a peer that never sends exits once the host raises the flag.
// Then, for information: local copy bandwidth, and what one launch costs in a CUDA graph.
//
// Build: nvcc -std=c++17 -O2 -Ikernels/common kernels/tests/gpu_exec_test.cu -lcuda
#include <cuda.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "reduce_ops.cuh"

using namespace oxccl;

static void ck(CUresult r, const char* what, int line) {
  if (r != CUDA_SUCCESS) {
    const char* s = "?";
    cuGetErrorString(r, &s);
    fprintf(stderr, "line %d: %s failed: %s\n", line, what, s);
    exit(2);
  }
}
#define CK(x) ck((x), #x, __LINE__)

static int failures = 0;
static int checks = 0;

static const char* kNames[12] = {"oxccl_exec_i8",  "oxccl_exec_u8",   "oxccl_exec_i32",
                                 "oxccl_exec_u32", "oxccl_exec_i64",  "oxccl_exec_u64",
                                 "oxccl_exec_f16", "oxccl_exec_f32",  "oxccl_exec_f64",
                                 "oxccl_exec_bf16", "oxccl_exec_f8e4m3", "oxccl_exec_f8e5m2"};
static const char* kOps[4] = {"sum", "prod", "max", "min"};
static const int kThreads = 512;

struct Gpu {
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  CUfunction fn[12];
  CUstream stream;
  CUstream stream2;  // the second rank's, when both ranks share this GPU
};
static std::vector<Gpu> gpus;

static CUdeviceptr dalloc(size_t bytes) {
  CUdeviceptr p;
  CK(cuMemAlloc(&p, bytes ? bytes : 16));
  CK(cuMemsetD8(p, 0, bytes ? bytes : 16));
  return p;
}

template <class T>
static CUdeviceptr upload(const std::vector<T>& v) {
  CUdeviceptr p = dalloc(v.size() * sizeof(T));
  if (!v.empty()) CK(cuMemcpyHtoD(p, v.data(), v.size() * sizeof(T)));
  return p;
}

template <class T>
static std::vector<T> download(CUdeviceptr p, size_t n) {
  std::vector<T> v(n);
  CK(cuMemcpyDtoH(v.data(), p, n * sizeof(T)));
  return v;
}

// Per-type test values and NaN test.
template <class E>
struct Traits {
  typedef typename E::Bits T;
  static bool is_nan(T b) {
    if constexpr (std::is_same<E, F32>::value || std::is_same<E, F64>::value) return std::isnan(b);
    if constexpr (std::is_same<E, F16>::value) return (b & 0x7fff) > 0x7c00;
    if constexpr (std::is_same<E, BF16>::value) return (b & 0x7fff) > 0x7f80;
    if constexpr (std::is_same<E, E4M3>::value) return (b & 0x7f) == 0x7f;
    if constexpr (std::is_same<E, E5M2>::value) return (b & 0x7f) > 0x7c;
    return false;
  }
  static T random(std::mt19937_64& rng) {
    std::uniform_real_distribution<float> small(-4.0f, 4.0f);
    if constexpr (std::is_same<E, F32>::value) return std::uniform_real_distribution<float>(-1e3f, 1e3f)(rng);
    if constexpr (std::is_same<E, F64>::value) return std::uniform_real_distribution<double>(-1e3, 1e3)(rng);
    if constexpr (std::is_same<E, F16>::value || std::is_same<E, BF16>::value ||
                  std::is_same<E, E4M3>::value || std::is_same<E, E5M2>::value) {
      return E::from_f(small(rng));
    }
    if constexpr (std::is_integral<T>::value) return (T)rng();
    return T(0);
  }
  static T scale() {
    if constexpr (std::is_same<E, F32>::value) return 0.5f;
    if constexpr (std::is_same<E, F64>::value) return 0.5;
    if constexpr (std::is_same<E, F16>::value || std::is_same<E, BF16>::value ||
                  std::is_same<E, E4M3>::value || std::is_same<E, E5M2>::value) {
      return E::from_f(0.75f);
    }
    return T(3);
  }
  static bool same(T a, T b) {
    if (is_nan(a) || is_nan(b)) return is_nan(a) && is_nan(b);
    return memcmp(&a, &b, sizeof(T)) == 0;
  }
};

template <class T>
static unsigned long long bits(T v) {
  unsigned long long b = 0;
  memcpy(&b, &v, sizeof(T));
  return b;
}

template <class E>
static typename E::Bits combine(unsigned op, typename E::Bits a, typename E::Bits b) {
  switch (op) {
    case OXCCL_OP_SUM: return Combine<E, OXCCL_OP_SUM>::apply(a, b);
    case OXCCL_OP_PROD: return Combine<E, OXCCL_OP_PROD>::apply(a, b);
    case OXCCL_OP_MAX: return Combine<E, OXCCL_OP_MAX>::apply(a, b);
    default: return Combine<E, OXCCL_OP_MIN>::apply(a, b);
  }
}

// One rank's launch: builds OxcclLaunchArgs and its tables in device memory.
struct RankLaunch {
  std::vector<std::vector<OxcclDevStep>> channels;
  std::vector<CUdeviceptr> buffers;
  std::vector<OxcclConn> send_conns, recv_conns;  // [nchannels * nranks]
  std::vector<uint64_t> loopback_offs;
  uint64_t loopback_bytes = 0;
  uint32_t nranks = 1, rank = 0;
  OxcclLaunchArgs args{};
  std::vector<CUdeviceptr> owned;

  // The kernels read the argument block at the returned address; its table pointers are
  // offsets from that address (work.h), which may wrap around to tables allocated elsewhere.
  CUdeviceptr build(volatile uint32_t* abort_dev, uint64_t epoch) {
    const CUdeviceptr a = dalloc(sizeof(OxcclLaunchArgs));
    owned.push_back(a);
    std::vector<OxcclDevChannel> chans;
    for (auto& steps : channels) {
      CUdeviceptr s = upload(steps);
      owned.push_back(s);
      OxcclDevChannel c{};
      c.steps = (const OxcclDevStep*)(uintptr_t)(s - a);
      c.nsteps = (uint32_t)steps.size();
      chans.push_back(c);
    }
    CUdeviceptr ch = upload(chans), bufs = upload(buffers);
    CUdeviceptr sc = upload(send_conns), rc = upload(recv_conns);
    CUdeviceptr lb = dalloc(loopback_bytes), lo = upload(loopback_offs);
    CUdeviceptr lf = dalloc(8 * loopback_offs.size());
    owned.insert(owned.end(), {ch, bufs, sc, rc, lb, lo, lf});
    args.channels = (const OxcclDevChannel*)(uintptr_t)(ch - a);
    args.buffers = (char* const*)(uintptr_t)(bufs - a);
    args.send_conns = (const OxcclConn*)(uintptr_t)sc;
    args.recv_conns = (const OxcclConn*)(uintptr_t)rc;
    args.loopback = (char*)(uintptr_t)lb;
    args.loopback_offs = (const uint64_t*)(uintptr_t)(lo - a);
    args.loopback_flags = (uint64_t*)(uintptr_t)lf;
    args.abort_flag = abort_dev;
    args.epoch = epoch;
    args.nchannels = (uint32_t)channels.size();
    args.nranks = nranks;
    args.rank = rank;
    args.nbuffers = (uint32_t)buffers.size();
    CK(cuMemcpyHtoD(a, &args, sizeof(args)));
    return a;
  }
  void free_all() {
    for (auto p : owned) cuMemFree(p);
    owned.clear();
  }
};

static void launch(Gpu& g, int dtype, CUdeviceptr args, uint32_t nchannels, CUstream s = nullptr,
                   uint32_t threads = kThreads) {
  OxcclKernelParams p{};
  p.indirect = (const char*)(uintptr_t)args;
  void* params[] = {&p};
  CK(cuLaunchKernel(g.fn[dtype], nchannels, 1, 1, threads, 1, 1, 0, s ? s : g.stream, params,
                    nullptr));
}

static OxcclDevStep step(uint64_t count, uint64_t tag) {
  OxcclDevStep s{};
  s.count = count;
  s.tag = tag;
  s.recv_peer = -1;
  s.send_peer = -1;
  return s;
}

// ---- 1. local and loopback steps -----------------------------------------------------------

template <class E>
static void test_local(int dtype, size_t n, size_t off) {
  typedef typename E::Bits T;
  Gpu& g = gpus[0];
  CK(cuCtxSetCurrent(g.ctx));
  std::mt19937_64 rng(1234 + dtype);
  std::vector<T> in0(n + off), in1(n + off);
  for (auto& x : in0) x = Traits<E>::random(rng);
  for (auto& x : in1) x = Traits<E>::random(rng);
  CUdeviceptr d0 = upload(in0), d1 = upload(in1), dout = dalloc((n + off) * sizeof(T));
  const T scale = Traits<E>::scale();
  const uint32_t div = 3;

  // Plain copy: bits must survive exactly (NaN payloads included).
  {
    RankLaunch L;
    L.buffers = {d0, d1, dout};
    const size_t half = n / 2;
    for (int c = 0; c < 2; ++c) {
      const size_t first = c ? half : 0, count = c ? n - half : half;
      OxcclDevStep s = step(count, 0);
      s.flags = OXCCL_STEP_HAS_SRC | OXCCL_STEP_HAS_DST;
      s.src_buf = 0;
      s.src_off = off + first;
      s.dst_buf = 2;
      s.dst_off = off + first;
      L.channels.push_back({s});
    }
    L.send_conns.resize(2);
    L.recv_conns.resize(2);
    launch(g, dtype, L.build(nullptr, 1), 2);
    CK(cuStreamSynchronize(g.stream));
    auto out = download<T>(dout, n + off);
    ++checks;
    if (memcmp(out.data() + off, in0.data() + off, n * sizeof(T)) != 0) {
      ++failures;
      fprintf(stderr, "FAIL copy %s off %zu\n", kNames[dtype], off);
    }
    L.free_all();
  }

  // in0 -> loopback (pre-scaled) -> combined with pre(in1) -> post-divided -> out.
  for (unsigned op = 0; op < 4; ++op) {
    for (int prepost = 0; prepost < 2; ++prepost) {
      RankLaunch L;
      L.buffers = {d0, d1, dout};
      L.args.redop = (uint8_t)op;
      if (prepost) {
        memcpy(&L.args.pre_scale_bytes, &scale, sizeof(T));
        L.args.flags = OXCCL_ARGS_PRE_SCALE;
        L.args.post_div = div;
      }
      const size_t half = n / 2;
      for (int c = 0; c < 2; ++c) {
        const size_t first = c ? half : 0, count = c ? n - half : half;
        OxcclDevStep a = step(count, 7);
        a.flags = OXCCL_STEP_HAS_SRC | OXCCL_STEP_PRE_OP | OXCCL_STEP_SEND_SELF;
        a.src_buf = 0;
        a.src_off = off + first;
        a.send_peer = c;  // loopback message index
        OxcclDevStep b = step(count, 7);
        b.flags = OXCCL_STEP_HAS_SRC | OXCCL_STEP_PRE_OP | OXCCL_STEP_POST_OP | OXCCL_STEP_HAS_DST |
                  OXCCL_STEP_RECV_SELF;
        b.recv_peer = c;
        b.src_buf = 1;
        b.src_off = off + first;
        b.dst_buf = 2;
        b.dst_off = off + first;
        L.channels.push_back({a, b});
        L.loopback_offs.push_back(L.loopback_bytes);
        L.loopback_bytes += (count * sizeof(T) + 15) / 16 * 16;
      }
      L.send_conns.resize(2);
      L.recv_conns.resize(2);
      CK(cuMemsetD8(dout, 0, (n + off) * sizeof(T)));
      launch(g, dtype, L.build(nullptr, 1), 2);
      CK(cuStreamSynchronize(g.stream));
      auto out = download<T>(dout, n + off);
      size_t bad = 0;
      for (size_t i = off; i < n + off; ++i) {
        T x = in0[i], y = in1[i];
        if (prepost) {
          x = Arith<E>::prod(x, scale);
          y = Arith<E>::prod(y, scale);
        }
        T v = combine<E>(op, x, y);
        if (prepost) v = Arith<E>::div(v, div);
        if (!Traits<E>::same(v, out[i])) {
          if (++bad <= 3) {
            fprintf(stderr, "FAIL %s %s prepost=%d off=%zu at %zu: got %llx want %llx\n",
                    kNames[dtype], kOps[op], prepost, off, i, bits(out[i]), bits(v));
          }
        }
      }
      ++checks;
      if (bad) ++failures;
      L.free_all();
    }
  }
  cuMemFree(d0);
  cuMemFree(d1);
  cuMemFree(dout);
}

// ---- 2. two-rank ring allreduce over FIFOs -------------------------------------------------

// An LL FIFO from `sender` to `receiver`, the way the transports lay it out: slots and the
// consumed-slot counter `ll_head` on the receiver, whose position is that counter; the sender's
// position and last head seen in its own memory. Allocations go to `mem`.
static void ll_fifo(Gpu& sender, Gpu& receiver, uint32_t slot_bytes, uint32_t nslots,
                    std::vector<CUdeviceptr>& mem, OxcclConn* send_side, OxcclConn* recv_side) {
  CK(cuCtxSetCurrent(receiver.ctx));
  CUdeviceptr buff = dalloc((size_t)slot_bytes * nslots), head = dalloc(16);
  CK(cuCtxSetCurrent(sender.ctx));
  CUdeviceptr mine = dalloc(16);
  mem.insert(mem.end(), {buff, head, mine});
  OxcclConn k{};
  k.ll_buff = (char*)(uintptr_t)buff;
  k.ll_head = (volatile uint64_t*)(uintptr_t)head;
  k.ll_pos = k.ll_head;
  k.ll_slot_bytes = slot_bytes;
  k.ll_nslots = nslots;
  *recv_side = k;
  k.ll_pos = (volatile uint64_t*)(uintptr_t)mine;
  k.ll_head_seen = (volatile uint64_t*)(uintptr_t)(mine + 8);
  *send_side = k;
}

template <class E>
static void test_ring(int dtype, size_t n_per_channel, uint32_t nchannels, uint64_t slot_bytes,
                      uint32_t nslots, volatile uint32_t* abort_host, volatile uint32_t* abort_dev,
                      bool ll = false) {
  typedef typename E::Bits T;
  const int nranks = 2;
  Gpu* g[2] = {&gpus[0], &gpus[gpus.size() > 1 ? 1 : 0]};
  // Two ranks on one GPU must not share a stream: the second would wait for the first forever.
  CUstream st[2] = {g[0]->stream, gpus.size() > 1 ? g[1]->stream : g[1]->stream2};
  const size_t n = n_per_channel * nchannels;  // elements per rank
  std::mt19937_64 rng(99 + dtype);
  std::vector<T> in[2];
  CUdeviceptr din[2], dout[2];
  for (int r = 0; r < nranks; ++r) {
    in[r].resize(n);
    for (auto& x : in[r]) x = Traits<E>::random(rng);
    CK(cuCtxSetCurrent(g[r]->ctx));
    din[r] = upload(in[r]);
    dout[r] = dalloc(n * sizeof(T));
  }
  // conns[c][s]: FIFO of channel c from rank s to rank 1-s; memory lives on the receiver. LL:
  // the same geometry as LL slots, and the sender's position and last head seen on the sender.
  std::vector<OxcclConn> fifo(nchannels * 2), ll_send(nchannels * 2);
  std::vector<CUdeviceptr> fifo_mem;
  for (uint32_t c = 0; c < nchannels; ++c) {
    for (int s = 0; s < 2; ++s) {
      if (ll) {
        ll_fifo(*g[s], *g[1 - s], (uint32_t)slot_bytes, nslots, fifo_mem, &ll_send[c * 2 + s],
                &fifo[c * 2 + s]);
      } else {
        CK(cuCtxSetCurrent(g[1 - s]->ctx));
        CUdeviceptr buff = dalloc(slot_bytes * nslots), ctr = dalloc(16);
        fifo_mem.push_back(buff);
        fifo_mem.push_back(ctr);
        OxcclConn& k = fifo[c * 2 + s];
        k.buff = (char*)(uintptr_t)buff;
        k.head = (volatile uint64_t*)(uintptr_t)ctr;
        k.tail = (volatile uint64_t*)(uintptr_t)(ctr + 8);
        k.slot_bytes = slot_bytes;
        k.nslots = nslots;
      }
    }
  }
  // Elements a slot carries: LL packets hold 8 data bytes in 16.
  const uint64_t slot_data = ll ? slot_bytes / 2 : slot_bytes;
  const uint8_t ll_flag = ll ? OXCCL_STEP_LL : 0;
  RankLaunch L[2];
  CUdeviceptr args[2];
  for (int r = 0; r < nranks; ++r) {
    const int p = 1 - r;
    L[r].nranks = 2;
    L[r].rank = r;
    L[r].buffers = {din[r], dout[r]};
    L[r].args.redop = OXCCL_OP_SUM;
    L[r].args.post_div = 2;  // ncclAvg
    L[r].send_conns.resize(nchannels * 2);
    L[r].recv_conns.resize(nchannels * 2);
    for (uint32_t c = 0; c < nchannels; ++c) {
      L[r].send_conns[c * 2 + p] = ll ? ll_send[c * 2 + r] : fifo[c * 2 + r];
      L[r].recv_conns[c * 2 + p] = fifo[c * 2 + p];
      // Pipeline the channel's range in pieces of two halves, each half at most one slot short
      // of the FIFO: a rank's send runs ahead of its peer's receive by one half, and the
      // recv-reduce-send step needs a free slot while the peer's half still sits in the FIFO.
      const size_t half_max = (nslots - 1) * (slot_data / sizeof(T));
      const size_t base = c * n_per_channel, end = base + n_per_channel;
      std::vector<OxcclDevStep> steps;
      for (size_t s0 = base; s0 < end; s0 += 2 * half_max) {
        const size_t s1 = s0 + 2 * half_max < end ? s0 + 2 * half_max : end;
        const size_t mid = s0 + (s1 - s0) / 2;
        const size_t start[2] = {s0, mid}, len[2] = {mid - s0, s1 - mid};
        OxcclDevStep a = step(len[r], 1);  // send my copy of half r
        a.flags = OXCCL_STEP_HAS_SRC | OXCCL_STEP_PRE_OP | ll_flag;
        a.src_buf = 0;
        a.src_off = start[r];
        a.send_peer = p;
        OxcclDevStep b = step(len[p], 2);  // half p: peer's + mine, final, keep and send back
        b.flags = OXCCL_STEP_HAS_SRC | OXCCL_STEP_PRE_OP | OXCCL_STEP_POST_OP | OXCCL_STEP_HAS_DST |
                  ll_flag;
        b.recv_peer = p;
        b.src_buf = 0;
        b.src_off = start[p];
        b.dst_buf = 1;
        b.dst_off = start[p];
        b.send_peer = p;
        OxcclDevStep d = step(len[r], 3);  // half r, final, from the peer
        d.flags = OXCCL_STEP_HAS_DST | ll_flag;
        d.recv_peer = p;
        d.dst_buf = 1;
        d.dst_off = start[r];
        steps.insert(steps.end(), {a, b, d});
      }
      L[r].channels.push_back(steps);
    }
    CK(cuCtxSetCurrent(g[r]->ctx));
    args[r] = L[r].build(abort_dev, 1);
  }
  *abort_host = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < nranks; ++r) {
    CK(cuCtxSetCurrent(g[r]->ctx));
    launch(*g[r], dtype, args[r], nchannels, st[r]);
  }
  // Watchdog: a hang (a protocol bug) must end as a failure, not as a stuck test.
  bool done[2] = {false, false};
  while (!(done[0] && done[1])) {
    for (int r = 0; r < nranks; ++r) {
      if (done[r]) continue;
      CK(cuCtxSetCurrent(g[r]->ctx));
      CUresult q = cuStreamQuery(st[r]);
      if (q == CUDA_SUCCESS) done[r] = true;
      else if (q != CUDA_ERROR_NOT_READY) CK(q);
    }
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) {
      fprintf(stderr, "FAIL ring %s: still running after 10 s, aborting\n", kNames[dtype]);
      *abort_host = 1;
      ++failures;
      for (int r = 0; r < nranks; ++r) {
        CK(cuCtxSetCurrent(g[r]->ctx));
        CK(cuStreamSynchronize(st[r]));
      }
      break;
    }
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  size_t bad = 0;
  for (int r = 0; r < nranks; ++r) {
    CK(cuCtxSetCurrent(g[r]->ctx));
    auto out = download<T>(dout[r], n);
    for (size_t i = 0; i < n; ++i) {
      const T v = Arith<E>::div(Combine<E, OXCCL_OP_SUM>::apply(in[0][i], in[1][i]), 2);
      if (!Traits<E>::same(v, out[i]) && ++bad <= 3) {
        fprintf(stderr, "FAIL ring %s rank %d at %zu: got %llx want %llx\n", kNames[dtype], r, i,
                bits(out[i]), bits(v));
      }
    }
    L[r].free_all();
    cuMemFree(din[r]);
    cuMemFree(dout[r]);
  }
  for (auto p : fifo_mem) cuMemFree(p);
  ++checks;
  if (bad) ++failures;
  printf("ring allreduce %-18s %u ch x %zu elems, %s slots %llu B x %u: %s (%.2f ms, %.1f GB/s per rank)\n",
         kNames[dtype], nchannels, n_per_channel, ll ? "LL" : "Simple", (unsigned long long)slot_bytes, nslots,
         bad ? "FAIL" : "ok", ms, n * sizeof(T) / (ms * 1e-3) / 1e9);
}

// ---- 3. abort ------------------------------------------------------------------------------

static void test_abort(volatile uint32_t* abort_host, volatile uint32_t* abort_dev) {
  Gpu& g = gpus[0];
  CK(cuCtxSetCurrent(g.ctx));
  CUdeviceptr out = dalloc(4096), buff = dalloc(4096), ctr = dalloc(16);
  RankLaunch L;
  L.nranks = 2;
  L.rank = 0;
  L.buffers = {out, out};
  L.send_conns.resize(2);
  L.recv_conns.resize(2);
  OxcclConn k{};
  k.buff = (char*)(uintptr_t)buff;
  k.head = (volatile uint64_t*)(uintptr_t)ctr;
  k.tail = (volatile uint64_t*)(uintptr_t)(ctr + 8);
  k.slot_bytes = 1024;
  k.nslots = 2;
  L.recv_conns[1] = k;
  OxcclDevStep s = step(256, 0);
  s.flags = OXCCL_STEP_HAS_DST;
  s.recv_peer = 1;  // nobody ever sends
  s.dst_buf = 1;
  L.channels.push_back({s});
  *abort_host = 0;
  launch(g, 7, L.build(abort_dev, 1), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ++checks;
  if (cuStreamQuery(g.stream) != CUDA_ERROR_NOT_READY) {
    ++failures;
    fprintf(stderr, "FAIL abort: the kernel did not wait for the missing peer\n");
  }
  const auto t0 = std::chrono::steady_clock::now();
  *abort_host = 1;
  CUresult r;
  while ((r = cuStreamQuery(g.stream)) == CUDA_ERROR_NOT_READY &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ++checks;
  if (r != CUDA_SUCCESS) {
    ++failures;
    fprintf(stderr, "FAIL abort: kernel still running %.0f ms after the flag (%d)\n", ms, (int)r);
  } else {
    printf("abort: waiting kernel exited %.3f ms after the flag was raised\n", ms);
  }
  *abort_host = 0;
  L.free_all();
  cuMemFree(out);
  cuMemFree(buff);
  cuMemFree(ctr);
}

// ---- copy bandwidth (informational) --------------------------------------------------------

static void bench_copy() {
  Gpu& g = gpus[0];
  CK(cuCtxSetCurrent(g.ctx));
  const size_t bytes = size_t(1) << 30, n = bytes / 4;
  CUdeviceptr a = dalloc(bytes), b = dalloc(bytes);
  for (uint32_t nch : {1u, 8u, 32u, 64u}) {
    RankLaunch L;
    L.buffers = {a, b};
    for (uint32_t c = 0; c < nch; ++c) {
      const size_t first = n * c / nch, last = n * (c + 1) / nch;
      OxcclDevStep s = step(last - first, 0);
      s.flags = OXCCL_STEP_HAS_SRC | OXCCL_STEP_HAS_DST;
      s.src_off = first;
      s.dst_buf = 1;
      s.dst_off = first;
      L.channels.push_back({s});
    }
    L.send_conns.resize(nch);
    L.recv_conns.resize(nch);
    CUdeviceptr args = L.build(nullptr, 1);
    launch(g, 7, args, nch);
    CK(cuStreamSynchronize(g.stream));
    CUevent e0, e1;
    CK(cuEventCreate(&e0, 0));
    CK(cuEventCreate(&e1, 0));
    CK(cuEventRecord(e0, g.stream));
    for (int i = 0; i < 5; ++i) launch(g, 7, args, nch);
    CK(cuEventRecord(e1, g.stream));
    CK(cuEventSynchronize(e1));
    float ms;
    CK(cuEventElapsedTime(&ms, e0, e1));
    printf("local copy f32 1 GiB, %2u channels: %.0f GB/s (read+write %.0f GB/s)\n", nch,
           5 * bytes / (ms * 1e-3) / 1e9, 2 * 5 * bytes / (ms * 1e-3) / 1e9);
    L.free_all();
    cuEventDestroy(e0);
    cuEventDestroy(e1);
  }
  cuMemFree(a);
  cuMemFree(b);
}


// ---- launch cost (informational) -----------------------------------------------------------

// Kernels with the _small entry points' parameters, to price the launch itself.
extern "C" __global__ void oxccl_test_empty_small(const OXCCL_GRID_CONSTANT OxcclKernelParamsSmall p) {}
extern "C" __global__ void oxccl_test_stage_small(const OXCCL_GRID_CONSTANT OxcclKernelParamsSmall p) {
  __shared__ uint64_t block[OXCCL_SMALL_INLINE_ARGS_BYTES / 8];
  const uint64_t* from = reinterpret_cast<const uint64_t*>(p.block);
  for (uint32_t i = threadIdx.x; i < OXCCL_SMALL_INLINE_ARGS_BYTES / 8; i += blockDim.x) block[i] = from[i];
  __syncthreads();
  if (block[threadIdx.x % 8] == 0x5a5a5a5a5a5a5a5aull) *(volatile int*)nullptr = 1;
}

// The executor's local copy step alone, in a compact kernel: what a step costs without the rest
// of the executor's code around it.
extern "C" __global__ void oxccl_test_mini_small(const OXCCL_GRID_CONSTANT OxcclKernelParamsSmall p) {
  __shared__ uint64_t block[OXCCL_SMALL_INLINE_ARGS_BYTES / 8];
  const uint64_t* from = reinterpret_cast<const uint64_t*>(p.block);
  for (uint32_t i = threadIdx.x; i < OXCCL_SMALL_INLINE_ARGS_BYTES / 8; i += blockDim.x) block[i] = from[i];
  __syncthreads();
  const char* base = reinterpret_cast<const char*>(block);
  const uintptr_t b = reinterpret_cast<uintptr_t>(base);
  const OxcclLaunchArgs* a = reinterpret_cast<const OxcclLaunchArgs*>(base);
  const OxcclDevChannel* ch = reinterpret_cast<const OxcclDevChannel*>(b + (uintptr_t)a->channels) + blockIdx.x;
  const OxcclDevStep* steps = reinterpret_cast<const OxcclDevStep*>(b + (uintptr_t)ch->steps);
  char* const* bufs = reinterpret_cast<char* const*>(b + (uintptr_t)a->buffers);
  for (uint32_t i = 0; i < ch->nsteps; ++i) {
    const OxcclDevStep& st = steps[i];
    const float* src = reinterpret_cast<const float*>(bufs[st.src_buf]) + st.src_off;
    float* dst = reinterpret_cast<float*>(bufs[st.dst_buf]) + st.dst_off;
    for (uint64_t j = threadIdx.x; j < st.count; j += blockDim.x) dst[j] = src[j];
    __syncthreads();
  }
}

// An argument block inline in _small parameters: args, channel table, steps, buffer table.
static OxcclKernelParamsSmall small_block(const std::vector<std::vector<OxcclDevStep>>& channels,
                                          const std::vector<CUdeviceptr>& buffers) {
  OxcclKernelParamsSmall p{};
  size_t at = sizeof(OxcclLaunchArgs);
  const size_t ch_at = at;
  at += channels.size() * sizeof(OxcclDevChannel);
  std::vector<OxcclDevChannel> chans;
  for (auto& steps : channels) {
    OxcclDevChannel c{};
    c.steps = (const OxcclDevStep*)(uintptr_t)at;
    c.nsteps = (uint32_t)steps.size();
    chans.push_back(c);
    memcpy(p.block + at, steps.data(), steps.size() * sizeof(OxcclDevStep));
    at += steps.size() * sizeof(OxcclDevStep);
  }
  memcpy(p.block + ch_at, chans.data(), chans.size() * sizeof(OxcclDevChannel));
  const size_t buf_at = at;
  memcpy(p.block + at, buffers.data(), buffers.size() * 8);
  at += buffers.size() * 8;
  if (at > OXCCL_SMALL_INLINE_ARGS_BYTES) {
    fprintf(stderr, "small_block: %zu bytes do not fit\n", at);
    exit(2);
  }
  OxcclLaunchArgs a{};
  a.channels = (const OxcclDevChannel*)(uintptr_t)ch_at;
  a.buffers = (char* const*)(uintptr_t)buf_at;
  a.epoch = 1;
  a.nchannels = (uint32_t)channels.size();
  a.nranks = 1;
  a.nbuffers = (uint32_t)buffers.size();
  memcpy(p.block, &a, sizeof a);
  return p;
}

// Microseconds per kernel of a graph of `n` back-to-back launches of `fn`.
static double graph_us_per_launch(CUfunction fn, void* params, uint32_t grid, uint32_t threads) {
  Gpu& g = gpus[0];
  const int n = 200, reps = 10;
  void* kp[] = {params};
  CUgraph graph;
  CUgraphExec exec;
  CK(cuStreamBeginCapture(g.stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  for (int i = 0; i < n; ++i) CK(cuLaunchKernel(fn, grid, 1, 1, threads, 1, 1, 0, g.stream, kp, nullptr));
  CK(cuStreamEndCapture(g.stream, &graph));
  CK(cuGraphInstantiate(&exec, graph, 0));
  CK(cuGraphLaunch(exec, g.stream));
  CK(cuStreamSynchronize(g.stream));
  CUevent e0, e1;
  CK(cuEventCreate(&e0, 0));
  CK(cuEventCreate(&e1, 0));
  CK(cuEventRecord(e0, g.stream));
  for (int r = 0; r < reps; ++r) CK(cuGraphLaunch(exec, g.stream));
  CK(cuEventRecord(e1, g.stream));
  CK(cuEventSynchronize(e1));
  float ms;
  CK(cuEventElapsedTime(&ms, e0, e1));
  cuEventDestroy(e0);
  cuEventDestroy(e1);
  cuGraphExecDestroy(exec);
  cuGraphDestroy(graph);
  return ms * 1e3 / (n * reps);
}

// What one launch costs in a graph: an empty kernel, one that only stages its parameters in
// shared memory, and the executor with growing plans, so the executor's own fixed cost shows.
static void bench_launch() {
  Gpu& g = gpus[0];
  CK(cuCtxSetCurrent(g.ctx));
  CUfunction empty, stage, mini, small;
  CK(cuModuleGetFunction(&small, g.mod, "oxccl_exec_f32_small"));
  // The two reference kernels live in this program's own module (the runtime's, on the same
  // primary context), not in the fatbin.
  cudaFunction_t fe, fs, fm;
  if (cudaGetFuncBySymbol(&fe, (const void*)oxccl_test_empty_small) != cudaSuccess ||
      cudaGetFuncBySymbol(&fm, (const void*)oxccl_test_mini_small) != cudaSuccess ||
      cudaGetFuncBySymbol(&fs, (const void*)oxccl_test_stage_small) != cudaSuccess) {
    fprintf(stderr, "cudaGetFuncBySymbol failed\n");
    exit(2);
  }
  empty = (CUfunction)fe;
  stage = (CUfunction)fs;
  mini = (CUfunction)fm;
  CUdeviceptr a = dalloc(1 << 20), b = dalloc(1 << 20);
  auto copy = [&](uint64_t count) {
    OxcclDevStep s = step(count, 0);
    s.flags = OXCCL_STEP_HAS_SRC | OXCCL_STEP_HAS_DST;
    s.dst_buf = 1;
    return s;
  };
  OxcclKernelParamsSmall none = small_block({{}}, {a, b});
  OxcclKernelParamsSmall one = small_block({{copy(2)}}, {a, b});
  OxcclKernelParamsSmall four = small_block({{copy(2), copy(2), copy(2), copy(2)}}, {a, b});
  OxcclKernelParamsSmall big = small_block({{copy(65536)}}, {a, b});
  std::vector<std::vector<OxcclDevStep>> chans8(8, {copy(2)});
  OxcclKernelParamsSmall eight = small_block(chans8, {a, b});
  struct Case {
    const char* name;
    CUfunction fn;
    OxcclKernelParamsSmall* p;
    uint32_t grid;
  };
  Case cases[] = {
      {"empty kernel", empty, &none, 1},
      {"stage 1 KiB params in shared", stage, &none, 1},
      {"executor, 0 steps", small, &none, 1},
      {"executor, 1 copy step of 8 B", small, &one, 1},
      {"executor, 4 copy steps of 8 B", small, &four, 1},
      {"executor, 1 copy step of 256 KiB", small, &big, 1},
      {"executor, 8 channels x 8 B", small, &eight, 8},
      {"compact copy kernel, 1 step of 8 B", mini, &one, 1},
      {"compact copy kernel, 4 steps of 8 B", mini, &four, 1},
  };
  for (uint32_t threads : {64u, 128u, 256u, 512u}) {
    for (auto& c : cases) {
      printf("launch cost, graph, %3u threads: %-34s %.2f us\n", threads, c.name,
             graph_us_per_launch(c.fn, c.p, c.grid, threads));
    }
  }
  // A fatbin built with -DOXCCL_PROFILE records clock marks: print them for one launch.
  CUdeviceptr marks;
  size_t marks_bytes;
  if (cuModuleGetGlobal(&marks, &marks_bytes, g.mod, "oxccl_profile_marks") == CUDA_SUCCESS) {
    for (auto* c : {&cases[3], &cases[4]}) {
      for (int rep = 0; rep < 3; ++rep) {
        CK(cuMemsetD8(marks, 0, marks_bytes));
        void* kp[] = {c->p};
        CK(cuLaunchKernel(c->fn, c->grid, 1, 1, 512, 1, 1, 0, g.stream, kp, nullptr));
        CK(cuStreamSynchronize(g.stream));
        unsigned long long m[64];
        CK(cuMemcpyDtoH(m, marks, sizeof m));
        printf("marks (cycles from entry), %s, run %d:", c->name, rep);
        for (int i = 1; i < 64; ++i) {
          if (m[i] != 0) printf(" %d:%lld", i, (long long)(m[i] - m[0]));
        }
        printf("\n");
      }
    }
  }
  int regs, local, shared;
  CK(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, small));
  CK(cuFuncGetAttribute(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, small));
  CK(cuFuncGetAttribute(&shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, small));
  printf("oxccl_exec_f32_small: %d registers, %d B local, %d B static shared\n", regs, local, shared);
  cuMemFree(a);
  cuMemFree(b);
}

// What a two-rank LL exchange costs in a graph: the direct allreduce of 8 bytes (send mine,
// receive the peer's and add mine), the two ranks as two kernels on two streams of GPU 0 (or on
// GPUs 0 and 1), forked and joined per iteration. Informational: it prices the executor's LL
// steps, not the link.
static void bench_ll_exchange(uint64_t count, uint32_t threads) {
  const int nranks = 2;
  Gpu* g[2] = {&gpus[0], &gpus[gpus.size() > 1 ? 1 : 0]};
  CUstream st[2] = {g[0]->stream, gpus.size() > 1 ? g[1]->stream : g[1]->stream2};
  CUdeviceptr din[2], dout[2];
  std::vector<CUdeviceptr> mem;
  OxcclConn recv_side[2], send_side[2];  // [s]: the FIFO from rank s to rank 1 - s
  for (int s = 0; s < 2; ++s) {
    CK(cuCtxSetCurrent(g[s]->ctx));
    din[s] = upload(std::vector<float>(count, 1.0f + s));
    dout[s] = dalloc(count * 4);
    mem.insert(mem.end(), {din[s], dout[s]});
    ll_fifo(*g[s], *g[1 - s], 4096, 8, mem, &send_side[s], &recv_side[s]);
  }
  RankLaunch L[2];
  CUdeviceptr args[2];
  for (int r = 0; r < nranks; ++r) {
    const int p = 1 - r;
    L[r].nranks = 2;
    L[r].rank = r;
    L[r].buffers = {din[r], dout[r]};
    L[r].send_conns.resize(2);
    L[r].recv_conns.resize(2);
    L[r].send_conns[p] = send_side[r];
    L[r].recv_conns[p] = recv_side[p];
    OxcclDevStep a = step(count, 1);
    a.flags = OXCCL_STEP_HAS_SRC | OXCCL_STEP_LL;
    a.send_peer = p;
    OxcclDevStep b = step(count, 1);
    b.flags = OXCCL_STEP_HAS_SRC | OXCCL_STEP_HAS_DST | OXCCL_STEP_LL;
    b.recv_peer = p;
    b.dst_buf = 1;
    L[r].channels.push_back({a, b});
    CK(cuCtxSetCurrent(g[r]->ctx));
    args[r] = L[r].build(nullptr, 1);
  }
  CK(cuCtxSetCurrent(g[0]->ctx));
  CUevent fork, join;
  CK(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
  CK(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
  const int n = 100, reps = 10;
  CUgraph graph;
  CUgraphExec exec;
  CK(cuStreamBeginCapture(st[0], CU_STREAM_CAPTURE_MODE_RELAXED));
  for (int i = 0; i < n; ++i) {
    CK(cuEventRecord(fork, st[0]));
    CK(cuStreamWaitEvent(st[1], fork, 0));
    launch(*g[0], 7, args[0], 1, st[0], threads);
    launch(*g[1], 7, args[1], 1, st[1], threads);
    CK(cuEventRecord(join, st[1]));
    CK(cuStreamWaitEvent(st[0], join, 0));
  }
  CK(cuStreamEndCapture(st[0], &graph));
  CK(cuGraphInstantiate(&exec, graph, 0));
  CK(cuGraphLaunch(exec, st[0]));
  CK(cuStreamSynchronize(st[0]));
  CUevent e0, e1;
  CK(cuEventCreate(&e0, 0));
  CK(cuEventCreate(&e1, 0));
  CK(cuEventRecord(e0, st[0]));
  for (int r = 0; r < reps; ++r) CK(cuGraphLaunch(exec, st[0]));
  CK(cuEventRecord(e1, st[0]));
  CK(cuEventSynchronize(e1));
  float ms;
  CK(cuEventElapsedTime(&ms, e0, e1));
  auto out = download<float>(dout[0], count);
  const bool ok = out[0] == 3.0f && out[count - 1] == 3.0f;
  ++checks;
  if (!ok) ++failures;
  printf("LL exchange, graph, 2 ranks on %s, %3u threads: direct allreduce of %llu B %.2f us per iteration%s\n",
         gpus.size() > 1 ? "2 GPUs" : "1 GPU", threads, (unsigned long long)count * 4,
         ms * 1e3 / (n * reps), ok ? "" : " (WRONG RESULT)");
  cuGraphExecDestroy(exec);
  cuGraphDestroy(graph);
  for (auto& l : L) l.free_all();
  for (auto m : mem) cuMemFree(m);
}

template <class E>
static void local_all(int dtype) {
  test_local<E>(dtype, 100003, 0);
  test_local<E>(dtype, 4099, 1);  // misaligned: the scalar path
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s oxccl.fatbin\n", argv[0]);
    return 2;
  }
  FILE* f = fopen(argv[1], "rb");
  if (!f) {
    perror(argv[1]);
    return 2;
  }
  std::vector<char> blob;
  char buf[1 << 16];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, f)) > 0) blob.insert(blob.end(), buf, buf + got);
  fclose(f);

  CK(cuInit(0));
  int ndev = 0;
  CK(cuDeviceGetCount(&ndev));
  ndev = ndev > 2 ? 2 : ndev;
  for (int d = 0; d < ndev; ++d) {
    Gpu g{};
    CK(cuDeviceGet(&g.dev, d));
    CK(cuDevicePrimaryCtxRetain(&g.ctx, g.dev));
    CK(cuCtxSetCurrent(g.ctx));
    CK(cuModuleLoadData(&g.mod, blob.data()));
    for (int t = 0; t < 12; ++t) CK(cuModuleGetFunction(&g.fn[t], g.mod, kNames[t]));
    CK(cuStreamCreate(&g.stream, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&g.stream2, CU_STREAM_NON_BLOCKING));
    char name[128];
    CK(cuDeviceGetName(name, sizeof name, g.dev));
    int major, minor;
    CK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, g.dev));
    CK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, g.dev));
    int regs;
    CK(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, g.fn[7]));
    printf("GPU %d: %s (sm_%d%d), module loaded, 12 entry points found, f32 kernel %d registers\n", d,
           name, major, minor, regs);
    gpus.push_back(g);
  }
  if (ndev == 2) {
    CK(cuCtxSetCurrent(gpus[0].ctx));
    CK(cuCtxEnablePeerAccess(gpus[1].ctx, 0));
    CK(cuCtxSetCurrent(gpus[1].ctx));
    CK(cuCtxEnablePeerAccess(gpus[0].ctx, 0));
    printf("two GPUs: ring ranks run on GPU 0 and GPU 1 through peer memory\n");
  } else {
    printf("one GPU: ring ranks run as two concurrent kernels on it\n");
  }

  // The abort flag lives in pinned host memory mapped into the device, as the backends will do.
  CK(cuCtxSetCurrent(gpus[0].ctx));
  void* host_flag;
  CK(cuMemHostAlloc(&host_flag, 64, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  CUdeviceptr dev_flag;
  CK(cuMemHostGetDevicePointer(&dev_flag, host_flag, 0));
  volatile uint32_t* abort_host = (volatile uint32_t*)host_flag;
  volatile uint32_t* abort_dev = (volatile uint32_t*)(uintptr_t)dev_flag;
  *abort_host = 0;

  local_all<I8>(0);
  local_all<U8>(1);
  local_all<I32>(2);
  local_all<U32>(3);
  local_all<I64>(4);
  local_all<U64>(5);
  local_all<F16>(6);
  local_all<F32>(7);
  local_all<F64>(8);
  local_all<BF16>(9);
  local_all<E4M3>(10);
  local_all<E5M2>(11);
  printf("local and loopback steps: %d checks, %d failures\n", checks, failures);

  test_ring<F32>(7, 1 << 20, 4, 64 << 10, 4, abort_host, abort_dev);
  test_ring<BF16>(9, 100003, 2, 8192, 4, abort_host, abort_dev);
  test_ring<I8>(0, 77777, 3, 4096, 2, abort_host, abort_dev);
  test_ring<E4M3>(10, 50001, 2, 1024, 8, abort_host, abort_dev);
  test_ring<F64>(8, 30011, 2, 4096, 2, abort_host, abort_dev);
  test_ring<F32>(7, 1 << 22, 8, 512 << 10, 8, abort_host, abort_dev);
  test_ring<F32>(7, 2, 1, 4096, 4, abort_host, abort_dev, true);
  test_ring<F32>(7, 100003, 4, 4096, 4, abort_host, abort_dev, true);
  test_ring<BF16>(9, 77777, 2, 2048, 8, abort_host, abort_dev, true);
  test_ring<I8>(0, 4099, 3, 1024, 2, abort_host, abort_dev, true);
  test_ring<F64>(8, 30011, 2, 4096, 4, abort_host, abort_dev, true);

  test_abort(abort_host, abort_dev);
  bench_copy();
  bench_launch();
  for (uint32_t threads : {64u, 128u, 256u, 512u}) {
    bench_ll_exchange(2, threads);
    bench_ll_exchange(2048, threads);
  }

  printf("%d passed, %d failed\n", checks - failures, failures);
  return failures ? 1 : 0;
}
