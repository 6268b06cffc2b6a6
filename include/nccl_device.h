/*
 * nccl_device.h for oxccl's libnccl.so.2 and librccl.so.1 (installed as rccl/nccl_device.h):
 * NCCL's device API, for kernels that communicate by themselves through symmetric windows
 * (ncclCommWindowRegister) and a device communicator (ncclDevCommCreate). Include this file;
 * the nccl_device/ headers hold its parts:
 *
 *   core.h         the data types the library fills in: ncclDevComm, ncclWindow_vidmem, the
 *                  window table, resource handles, requirement lists
 *   team.h         teams (world, LSA, rail, factors) and rank conversions
 *   coop.h         cooperative groups: ncclCoopThread, ncclCoopWarp, ncclCoopCta, ...
 *   ptr.h          addresses in windows and resource buffers; ncclSymPtr<T>
 *   window.h       ncclFindWindow
 *   gin.h          ncclGin: device-initiated networking (GIN) through the host proxy
 *   lsa_barrier.h  ncclLsaBarrierSession
 *   gin_barrier.h  ncclGinBarrierSession
 *   barrier.h      ncclBarrierSession (LSA, rail and world forms)
 *   ll_a2a.h       ncclLLA2ASession, low-latency all-to-all
 *   utility.h      macros and nccl::utility helpers
 *
 * Written for oxccl from the published NCCL 2.28.9 device-API facts (names, signatures, struct
 * layouts, the layout of state in the resource buffer). Kernels compiled against NVIDIA's
 * nccl_device.h 2.28.9 compile unchanged against this one and run the same on either library,
 * and the barrier and LL state they leave in resource buffers is NVIDIA's.
 *
 * Differences from NVIDIA's headers:
 *  - GIN (device-initiated networking) has one backend, the host proxy (NCCL's proxy type),
 *    the only one oxccl's device communicators have; a call on any other traps. One GIN
 *    descriptor carries a signal or counter id of 16 bits, as NCCL 2.28.9's proxy does.
 *  - Multimem (NVLink multicast) addresses and barrier/LL paths are present, but oxccl does
 *    not create multicast objects yet (ncclDevCommCreate refuses lsaMultimem).
 *  - Only the nccl::utility helpers the API needs; internal helper names differ.
 *  - ncclFindWindow returns NULL for an address in no window.
 *  - Host functions (ncclDevCommCreate, ncclTeamLsa(ncclComm_t), ...) are declared in nccl.h
 *    (rccl/rccl.h for RCCL).
 *  - Device functions need nvcc (__CUDACC__) or hipcc for AMD GPUs (HIP_PLATFORM=amd); C and
 *    host-only C++ get the types, the team arithmetic and ncclSymPtr.
 *
 * On AMD GPUs (the RCCL flavour; AMD's RCCL has no device functions of this API for them) the
 * same kernels compile with hipcc, with these differences:
 *  - The signatures keep cuda::memory_order and cuda::thread_scope: libhipcxx's where it is
 *    installed, else two enums of those names declared here.
 *  - A warp stays 32 threads (ncclCoopWarp, ncclCoopWarpSpan); a CDNA wavefront holds two.
 *    Tiles may span the wavefront; lane masks are 64-bit (nccl::utility::LaneMask).
 *  - ncclCoopWarpSpan syncs only as the whole block, and traps otherwise: AMD GPUs have no
 *    named barriers.
 *  - No multimem: requests for it take the unicast paths.
 *  - Barrier words are system-scope atomics and LL slots volatile 8-byte halves; both need the
 *    window memory to be coherent between GPUs while a kernel runs. Compiled only, never run
 *    on an AMD GPU (docs/hip.md).
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
#include "nccl_device/gin_barrier.h"
#include "nccl_device/barrier.h"
#include "nccl_device/ll_a2a.h"

#endif /* OXCCL_NCCL_DEVICE_H */
