/*
 * nccl_device.h for oxccl's libnccl.so.2: NCCL's device API, for kernels that communicate by
 * themselves through symmetric windows (ncclCommWindowRegister) and a device communicator
 * (ncclDevCommCreate). Include this file; the nccl_device/ headers hold its parts:
 *
 *   core.h         the data types the library fills in: ncclDevComm, ncclWindow_vidmem, the
 *                  window table, resource handles, requirement lists
 *   team.h         teams (world, LSA, rail, factors) and rank conversions
 *   coop.h         cooperative groups: ncclCoopThread, ncclCoopWarp, ncclCoopCta, ...
 *   ptr.h          addresses in windows and resource buffers; ncclSymPtr<T>
 *   window.h       ncclFindWindow
 *   gin.h          GIN's declarations (every operation traps: see the differences below)
 *   lsa_barrier.h  ncclLsaBarrierSession
 *   barrier.h      ncclBarrierSession (its LSA form)
 *   ll_a2a.h       ncclLLA2ASession, low-latency all-to-all
 *   utility.h      macros and nccl::utility helpers
 *
 * Written for oxccl from the published NCCL 2.28.9 device-API facts (names, signatures, struct
 * layouts, the layout of state in the resource buffer). Kernels compiled against NVIDIA's
 * nccl_device.h 2.28.9 compile unchanged against this one and run the same on either library,
 * and the barrier and LL state they leave in resource buffers is NVIDIA's.
 *
 * Differences from NVIDIA's headers:
 *  - No GIN (device-initiated networking): ncclGin, its actions and the world and rail forms
 *    of ncclBarrierSession are declared, so GIN kernels compile, but trap if they run; no
 *    device communicator of oxccl can reach them, since ncclDevCommCreate refuses every
 *    requirement that needs GIN. The GIN fields of the structs are kept for their layout.
 *  - Multimem (NVLink multicast) addresses and barrier/LL paths are present, but oxccl does
 *    not create multicast objects yet (ncclDevCommCreate refuses lsaMultimem).
 *  - Only the nccl::utility helpers the API needs; internal helper names differ.
 *  - ncclFindWindow returns NULL for an address in no window.
 *  - Host functions (ncclDevCommCreate, ncclTeamLsa(ncclComm_t), ...) are declared in nccl.h.
 *  - Device functions need nvcc (__CUDACC__); C and host-only C++ get the types, the team
 *    arithmetic and ncclSymPtr.
 */
#ifndef OXCCL_NCCL_DEVICE_H
#define OXCCL_NCCL_DEVICE_H

#include "nccl_device/utility.h"
#include "nccl_device/core.h"
#include "nccl_device/team.h"
#include "nccl_device/coop.h"
#include "nccl_device/ptr.h"
#include "nccl_device/window.h"
#include "nccl_device/gin.h"
#include "nccl_device/lsa_barrier.h"
#include "nccl_device/barrier.h"
#include "nccl_device/ll_a2a.h"

#endif /* OXCCL_NCCL_DEVICE_H */
