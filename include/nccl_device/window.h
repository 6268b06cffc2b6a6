/*
 * nccl_device/window.h for oxccl's libnccl.so.2: ncclFindWindow, the window registered on the
 * device communicator's communicator that contains a given local address, looked up in the
 * window table on the device.
 *
 * Written for oxccl from the published NCCL 2.28.9 device-API facts (names, signatures, struct
 * layouts, the layout of state in the resource buffer); see nccl_device.h.
 */
#ifndef OXCCL_NCCL_DEVICE_WINDOW_H
#define OXCCL_NCCL_DEVICE_WINDOW_H

#include "coop.h"
#include "core.h"

#if defined(OXCCL_NCCL_DEVICE_CODE)
/* A collective call on coop: every member gets the window holding ptr (an address in this
 * rank's registered buffer), or NULL if none does. The lanes of each warp split every 32-entry
 * table between them and agree on the first hit with one ballot. Unused entries are zero. */
template <typename Coop>
NCCL_DEVICE_INLINE ncclWindow_t ncclFindWindow(Coop coop, ncclDevComm const &comm,
                                               void const *ptr) {
  using nccl::utility::loadConst;
  using Entry = ncclDevCommWindowTable::Entry;
  constexpr int kEntries = sizeof(ncclDevCommWindowTable::entries) / sizeof(Entry);
  auto lanes = ncclCoopCoalesced(coop);
  nccl::utility::LaneMask mask = ncclCoopGetLaneMask(lanes);
  uintptr_t addr = (uintptr_t)ptr;
  for (ncclDevCommWindowTable const *t = comm.windowTable; t != nullptr; t = loadConst(&t->next)) {
    int hit = -1;
#pragma unroll 1
    for (int i = lanes.thread_rank(); i < kEntries; i += lanes.size()) {
      Entry e = loadConst(&t->entries[i]);
      if (e.window != nullptr && e.base != 0 && e.size != 0 && addr - e.base < e.size) {
        hit = i;
        break;
      }
    }
    nccl::utility::LaneMask found = nccl::utility::ballot(mask, hit >= 0);
    if (found != 0) {
      int first = (int)nccl::utility::shfl(mask, (uint32_t)hit, nccl::utility::nthLane(found, 0),
                                           nccl::utility::kMaxTileLanes);
      return loadConst(&t->entries[first].window);
    }
  }
  return nullptr;
}
#endif /* OXCCL_NCCL_DEVICE_CODE */

#endif /* OXCCL_NCCL_DEVICE_WINDOW_H */
