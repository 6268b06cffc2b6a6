// Kernels over every part of the device API, compiled (never run) by device_abi_layout.rs: by
// hipcc for AMD GPUs against the RCCL flavour's installed headers, and by nvcc for NVIDIA GPUs
// against the NCCL flavour's, from this one source as a program using both would be written.
// The test finds each kernel's name in the code object (extern "C" but the suite's lsa_sum): a
// kernel whose body the headers had left out would not be there.
//
// layout_asserts.h is written by the test from NCCL 2.28.9's numbers (static_asserts of sizeof
// and offsetof), so the device compiler itself checks the layouts the library fills in.
#if defined(__HIP__)
#include <rccl/rccl.h>
#include <rccl/nccl_device.h>
#else
#include <nccl.h>
#include <nccl_device.h>
#endif

#include <cstddef>

#include "layout_asserts.h"

// The GPU suite's LSA sum (tests/gpu/device_api/lsa_sum.cu): LSA barriers of a block, local,
// LSA and peer pointers, the window table searched by a warp.
#include "lsa_sum_kernel.cuh"

// The other forms of the window functions: a peer through a team, the table searched by a
// block.
extern "C" __global__ void oxccl_dev_windows(ncclDevComm dc, ncclWindow_t win, float* user,
                                             int* bad) {
  void* local = ncclGetLocalPointer(win, 0);
  if (ncclGetPeerPointer(win, 0, ncclTeamWorld(dc), dc.rank) != local) atomicAdd(bad, 1);
  ncclWindow_t byCta = ncclFindWindow(ncclCoopCta(), dc, user);
  if (threadIdx.x == 0 && byCta != win) atomicAdd(bad, 1);
}

// The team arithmetic on the device, written out for the host to compare.
extern "C" __global__ void oxccl_dev_teams(ncclDevComm dc, int* out) {
  ncclTeam world = ncclTeamWorld(dc), lsa = ncclTeamLsa(dc), rail = ncclTeamRail(dc);
  ncclTeam inner = ncclTeamInnerFactor(world, dc.lsaSize);
  ncclTeam outer = ncclTeamOuterFactor(world, dc.lsaSize);
  int k = 0;
  out[k++] = rail.nRanks;
  out[k++] = rail.rank;
  out[k++] = ncclTeamRankToWorld(dc, rail, 0);
  out[k++] = ncclTeamRankToLsa(dc, lsa, lsa.nRanks - 1);
  out[k++] = ncclTeamRankIsMember(lsa, world, 0);
  out[k++] = ncclTeamRankToTeam(world, rail, 0);
  out[k++] = ncclTeamRankInDifference(world, lsa, 0);
  out[k++] = inner.nRanks + outer.nRanks;
}

// A low-latency all-to-all within the LSA team, then a reduction of what came back; a block is
// one session on its own block of slots.
extern "C" __global__ void oxccl_dev_lla2a(ncclDevComm dc, ncclLLA2AHandle h, int maxElts,
                                           double* out) {
  ncclTeam lsa = ncclTeamLsa(dc);
  ncclLLA2ASession<ncclCoopCta> s(ncclCoopCta(), dc, lsa, h, blockIdx.x, maxElts);
  for (int peer = threadIdx.x; peer < lsa.nRanks; peer += blockDim.x) {
    s.send(peer, lsa.rank, (double)(lsa.rank + 1));
  }
  if (threadIdx.x < (unsigned)lsa.nRanks) {
    double got[4];
    s.recvUnrolled<1, 4>(threadIdx.x, 1, 1, got);
    out[threadIdx.x] = got[0];
  }
  s.endEpoch(ncclCoopCta());
  // A 16-byte value goes in two 8-byte pieces, maxElts slots apart.
  struct Pair {
    double a, b;
  };
  if (threadIdx.x == 0) s.bcast(lsa.rank, Pair{1.0, 2.0});
  if (threadIdx.x == 0) {
    Pair p = s.recv<Pair>(0);
    double sum = s.recvReduce<2, double>(
        0, lsa.nRanks, 1, [](double x) { return x; }, [](double a, double b) { return a + b; });
    out[lsa.nRanks] = p.a + p.b + sum;
  }
  s.endEpoch(ncclCoopCta());
}

// Broadcasts and syncs over every cooperative group.
extern "C" __global__ void oxccl_dev_coops(int* out) {
  int lane = threadIdx.x % 32;
  int v = ncclCoopBcast(ncclCoopCta(), (int)threadIdx.x * 3, 5);
  v += ncclCoopBcast(ncclCoopWarp(), lane, 7);
  v += ncclCoopBcast(ncclCoopTile<4>(), lane, 1);
  v += ncclCoopBcast(ncclCoopThread(), lane, 0);
  ncclCoopWarpSpan all(0, blockDim.x / 32, 0);
  v += ncclCoopBcast(all, (int)all.thread_rank(), 2);
  if (lane % 2 == 0) {
    ncclCoopLanes even = ncclCoopCoalesced();
    v += ncclCoopBcast(even, lane, 1) + even.size() + even.thread_rank();
    even.sync();
  }
  ncclCoopTile<16> tile;
  tile.sync();
  out[threadIdx.x] = v + ncclCoopIsThread(tile) + ncclCoopWithinWarp(ncclCoopCta()) +
                     (int)(ncclCoopGetLaneMask(ncclCoopCoalesced(ncclCoopCta())) != 0);
}

// Barriers in their other forms (LSA barrier session of a warp and of a thread, split into
// arrive and wait; ncclBarrierSession over the LSA team), resource buffers and ncclSymPtr.
extern "C" __global__ void oxccl_dev_barriers(ncclDevComm dc, ncclWindow_t win,
                                              ncclDevResourceHandle_t res, int* out) {
  if (threadIdx.x < 32) {
    ncclLsaBarrierSession<ncclCoopWarp> bar(ncclCoopWarp(), dc, ncclTeamTagLsa(), 1);
    bar.arrive(ncclCoopWarp(), cuda::memory_order_release);
    bar.wait(ncclCoopWarp(), cuda::memory_order_acquire);
  }
  if (threadIdx.x == 0) {
    ncclLsaBarrierSession<ncclCoopThread> bar(ncclCoopThread(), dc, ncclTeamTagLsa(), 2);
    bar.sync(ncclCoopThread(), cuda::memory_order_relaxed);
  }
  {
    ncclBarrierSession<ncclCoopCta> bar(ncclCoopCta(), ncclTeamTagLsa(), dc, 0);
    bar.sync(ncclCoopCta(), cuda::memory_order_seq_cst, ncclGinFenceLevel::Relaxed);
  }
  ncclSymPtr<int> p(win, 64);
  p += 3;
  int* mine = p.localPtr();
  int* next = (p + 1).lsaPtr((dc.lsaRank + 1) % dc.lsaSize);
  int* peer = p.peerPtr(ncclTeamLsa(dc), 0);
  char* buf = ncclGetResourceBuffer(dc, res).localPtr();
  char* lsaBuf = (char*)ncclGetResourceBufferLsaPointer(dc, res, 0);
  char* peerBuf = (char*)ncclGetResourceBufferPeerPointer(dc, res, ncclTeamLsa(dc), 0);
  if (threadIdx.x == 0) {
    out[0] = *mine + *next + *peer + (int)(buf - lsaBuf) + (int)(peerBuf - lsaBuf);
  }
}

// GIN through the host proxy: every operation, action and cooperative group, and the GIN
// and world barriers.
extern "C" __global__ void oxccl_dev_gin(ncclDevComm dc, ncclWindow_t win, uint64_t *out) {
  __shared__ ncclGinDescriptorSmem desc;
  ncclGin gin(dc, 1);
  ncclTeam world = ncclTeamWorld(dc);
  int peer = (dc.rank + 1) % dc.nRanks;
  gin.put(world, peer, win, 0, win, 64, 8);
  gin.put(world, peer, win, 128, win, 0, 4096, ncclGin_SignalInc{0}, ncclGin_CounterInc{0},
          ncclCoopCta(), ncclGin_DescriptorSmem{&desc}, cuda::thread_scope_system);
  gin.put(world, peer, ncclSymPtr<float>(win, 256), ncclSymPtr<float>(win, 0), 16,
          ncclGin_SignalAdd{1, 7}, ncclGin_None{}, ncclCoopWarp());
  gin.putValue(world, peer, win, 8, (uint16_t)3, ncclGin_SignalInc{2});
  gin.putValue(world, peer, ncclSymPtr<double>(win, 16), 2.5);
  gin.signal(ncclTeamRail(dc), 0, ncclGin_SignalAdd{1, 1ull << 40}, ncclCoopTile<4>());
  gin.flush(ncclCoopCta());
  gin.waitCounter(ncclCoopCta(), 0, 1);
  gin.waitSignal(ncclCoopWarp(), 0, 1, 32, cuda::memory_order_relaxed);
  gin.increaseSignalShadow(0, 1);
  gin.waitSignalMeetShadow(ncclCoopCta(), 0);
  uint32_t before, delta;
  gin.waitSignalFollowShadow(ncclCoopWarp(), 1, 1u, &before, &delta, 32);
  {
    ncclGinBarrierSession<ncclCoopCta> bar(ncclCoopCta(), gin, ncclTeamTagRail(), 0);
    bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel, ncclGinFenceLevel::Relaxed);
  }
  {
    ncclBarrierSession<ncclCoopCta> bar(ncclCoopCta(), ncclTeamTagWorld(), gin, 0);
    bar.sync(ncclCoopCta(), cuda::memory_order_seq_cst, ncclGinFenceLevel::Relaxed);
    bar.lsaBarrier().sync(ncclCoopCta(), cuda::memory_order_relaxed);
  }
  if (threadIdx.x == 0) {
    out[0] = gin.readCounter(0) + gin.readSignal(1, 48) + before + delta +
             *gin.getSignalShadowPtr(2);
  }
  gin.resetCounter(0);
  gin.resetSignal(1);
}
