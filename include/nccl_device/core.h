/*
 * nccl_device/core.h for oxccl's libnccl.so.2: the device API's data types, laid out exactly as
 * in NVIDIA's NCCL 2.28.9 because the library fills them in (ncclDevCommCreate, window
 * registration) and kernels read them: the device communicator, windows, the window table,
 * resource handles and the requirement lists passed to ncclDevCommCreate.
 *
 * Written for oxccl from the published NCCL 2.28.9 device-API facts (names, signatures, struct
 * layouts, the layout of state in the resource buffer); see nccl_device.h.
 *
 * The host functions (ncclDevCommCreate, ncclTeamWorld(ncclComm_t), the requirement helpers)
 * are declared in nccl.h. GIN's (device-initiated networking) device functions are in gin.h.
 */
#ifndef OXCCL_NCCL_DEVICE_CORE_H
#define OXCCL_NCCL_DEVICE_CORE_H

/* Our own API header, whatever else is on the include path: the two are one ABI. The RCCL
 * flavour installs these headers in include/rccl/, beside rccl.h; the NCCL flavour in include/,
 * beside nccl.h (where no rccl.h sits: RCCL's is one folder down). */
#if defined(__has_include)
#if __has_include("../rccl.h")
#include "../rccl.h"
#else
#include "../nccl.h"
#endif
#else
#include "../nccl.h"
#endif
#include "utility.h"

/* A resource buffer's position in the device communicator's resource window, in 128-byte
 * units (ncclGetResourceBufferOffset). */
typedef uint32_t ncclDevResourceHandle;
typedef ncclDevResourceHandle ncclDevResourceHandle_t;

/* GIN's signal and counter ids and per-context window handles, for the layouts below. */
#define NCCL_GIN_MAX_CONTEXTS 4
typedef uint32_t ncclGinSignal_t;
typedef uint32_t ncclGinCounter_t;
typedef void *ncclGinWindow_t;

typedef struct ncclMultimemHandle ncclMultimemHandle_t;
typedef struct ncclTeamRequirements ncclTeamRequirements_t;

/* What an ncclWindow_t points at (device memory, written by ncclCommWindowRegister). Rank r of
 * the LSA team sees its part of the window at lsaFlatBase + r * stride4G * 4 GiB. */
struct ncclWindow_vidmem {
  void *winHost;
  char *lsaFlatBase;
  int lsaRank;
  int worldRank;
  uint32_t stride4G;
  uint32_t mcOffset4K; /* in the multicast object, in 4 KiB units */
  uint32_t ginOffset4K;
  ncclGinWindow_t ginWins[NCCL_GIN_MAX_CONTEXTS];
};

struct ncclMultimemHandle {
  void *mcBasePtr;
};

/* nBarriers LSA barriers in one resource buffer; see lsa_barrier.h for the words it holds. */
struct ncclLsaBarrierHandle {
  ncclDevResourceHandle_t bufHandle;
  int nBarriers;
};

struct ncclGinBarrierHandle {
  ncclGinSignal_t signal0;
  ncclDevResourceHandle_t bufHandle;
};

/* LL all-to-all slots in one resource buffer; see ll_a2a.h for their layout. */
struct ncclLLA2AHandle {
  ncclDevResourceHandle_t bufHandle;
  uint32_t nSlots;
};

struct ncclDevCommRequirements {
  ncclDevResourceRequirements_t *resourceRequirementsList;
  ncclTeamRequirements_t *teamRequirementsList;
  bool lsaMultimem;
  int barrierCount;
  int lsaBarrierCount;
  int railGinBarrierCount;
  int lsaLLA2ABlockCount, lsaLLA2ASlotCount;
  bool ginForceEnable;
  int ginContextCount; /* a hint */
  int ginSignalCount;  /* ids from 0 */
  int ginCounterCount; /* ids from 0 */
};

/* One buffer of the resource window (and GIN ids); the out* targets are written when the
 * device communicator is created. */
struct ncclDevResourceRequirements {
  ncclDevResourceRequirements_t *next;
  size_t bufferSize, bufferAlign;
  ncclDevResourceHandle_t *outBufferHandle;
  int ginSignalCount;
  int ginCounterCount;
  ncclGinSignal_t *outGinSignalStart;
  ncclGinCounter_t *outGinCounterStart;
};

struct ncclTeamRequirements {
  ncclTeamRequirements_t *next;
  ncclTeam_t team;
  bool multimem;
  ncclMultimemHandle_t *outMultimemHandle;
};

/* The windows registered on a communicator, for ncclFindWindow: a chain of 32-entry tables in
 * device memory. Only C++ gives it a body (its entry type is nested, as in NVIDIA's). */
struct ncclDevCommWindowTable;
#if defined(__cplusplus)
struct ncclDevCommWindowTable {
  struct Entry {
    uintptr_t base, size;
    ncclWindow_t window;
  } entries[32];
  struct ncclDevCommWindowTable *next;
};
#endif

/* Passed to kernels by value. The *_rcp32 fields are idivRcp32 of the sizes beside them. */
struct ncclDevComm {
  int rank, nRanks;
  uint32_t nRanks_rcp32;
  int lsaRank, lsaSize;
  uint32_t lsaSize_rcp32;

  struct ncclDevCommWindowTable *windowTable;

  /* Holds every resource buffer (barriers, LL slots, the caller's); a copy of the window's
   * description travels inline so kernels reach their buffers without a load. */
  ncclWindow_t resourceWindow;
  struct ncclWindow_vidmem resourceWindow_inlined;

  ncclMultimemHandle_t lsaMultimem;
  ncclLsaBarrierHandle_t lsaBarrier;
  ncclGinBarrierHandle_t railGinBarrier;

  uint8_t ginContextCount;
  uint8_t ginTypes[NCCL_GIN_MAX_CONTEXTS];
  void *ginHandles[NCCL_GIN_MAX_CONTEXTS];
  uint32_t ginSignalBase;
  int ginSignalCount;
  uint32_t ginCounterBase;
  int ginCounterCount;
  uint64_t *ginSignalShadows;
};

#endif /* OXCCL_NCCL_DEVICE_CORE_H */
