/*
 * nccl.h for oxccl's libnccl.so.2.
 *
 * Written for oxccl from the published NCCL 2.28.9 ABI facts (names, enum values, struct layouts,
 * version codes). Programs compiled against NVIDIA's nccl.h of the same version run unchanged on
 * oxccl, and programs compiled against this header run on NVIDIA's library.
 *
 * Differences from NVIDIA's header, none of which change the ABI:
 *  - cuda_runtime.h is not included: cudaStream_t is declared here as the same opaque pointer
 *    type CUDA uses, and the declaration steps aside when CUDA's own came first. Define
 *    OXCCL_INCLUDE_CUDA_RUNTIME before including this file to pull in cuda_runtime.h as NVIDIA's
 *    header does.
 *  - The device-API host functions are declared here (NVIDIA declares them in the nccl_device headers),
 *    with their structs left opaque except ncclTeam_t, which is returned by value.
 *  - A few NCCL 2.29 functions and oxccl extensions are declared at the end, in marked sections.
 */
#ifndef OXCCL_NCCL_H
#define OXCCL_NCCL_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#if defined(OXCCL_INCLUDE_CUDA_RUNTIME)
#include <cuda_runtime.h>
#elif !defined(__DRIVER_TYPES_H__)
/* The same type as CUDA's: a redeclaration by cuda_runtime.h later is compatible (C11, C++). */
typedef struct CUstream_st *cudaStream_t;
#endif

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_SUFFIX ""

/* Versions up to 2.8 used X*1000+Y*100+Z; later ones use X*10000+Y*100+Z. */
#define NCCL_VERSION(X, Y, Z) \
  (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))
#define NCCL_VERSION_CODE 22809

/* Marks oxccl's header; the library itself reports its own version via oxcclGetVersionString. */
#define OXCCL_NCCL_HEADER 1

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Handles and ids ------------------------------------------------------------------------ */

typedef struct ncclComm *ncclComm_t;
#define NCCL_COMM_NULL NULL

/* Points at device memory describing a registered window. */
typedef struct ncclWindow_vidmem *ncclWindow_t;

#define NCCL_UNIQUE_ID_BYTES 128
/* Passed by value to ncclCommInitRank; copy its 128 bytes verbatim between processes. */
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

/* ---- Result codes --------------------------------------------------------------------------- */

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

/* ---- Configuration -------------------------------------------------------------------------- */

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f

/* ncclCommWindowRegister flags. */
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

/* config.CTAPolicy values. */
#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02

/* ncclCommShrink flags. */
#define NCCL_SHRINK_DEFAULT 0x00
#define NCCL_SHRINK_ABORT 0x01

/* ncclCommRevoke flags. */
#define NCCL_REVOKE_DEFAULT 0x00

/*
 * Communicator options. The struct only ever grows at the end: the library reads `size` and
 * `version` to know which fields the caller's header had. Always start from
 * NCCL_CONFIG_INITIALIZER; fields left at NCCL_CONFIG_UNDEF_* take the library default.
 */
typedef struct ncclConfig_v22800 {
  size_t size;             /* sizeof(ncclConfig_t) of the caller's header */
  unsigned int magic;      /* 0xcafebeef */
  unsigned int version;    /* NCCL_VERSION_CODE of the caller's header */
  int blocking;            /* 0: init and operations may return ncclInProgress */
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char *netName;
  int splitShare;
  int trafficClass;
  const char *commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                                 \
  {                                                                                             \
    sizeof(ncclConfig_t),                 /* size */                                            \
        0xcafebeef,                       /* magic */                                           \
        NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), /* version */                         \
        NCCL_CONFIG_UNDEF_INT,            /* blocking */                                        \
        NCCL_CONFIG_UNDEF_INT,            /* cgaClusterSize */                                  \
        NCCL_CONFIG_UNDEF_INT,            /* minCTAs */                                         \
        NCCL_CONFIG_UNDEF_INT,            /* maxCTAs */                                         \
        NCCL_CONFIG_UNDEF_PTR,            /* netName */                                         \
        NCCL_CONFIG_UNDEF_INT,            /* splitShare */                                      \
        NCCL_CONFIG_UNDEF_INT,            /* trafficClass */                                    \
        NCCL_CONFIG_UNDEF_PTR,            /* commName */                                        \
        NCCL_CONFIG_UNDEF_INT,            /* collnetEnable */                                   \
        NCCL_CONFIG_UNDEF_INT,            /* CTAPolicy */                                       \
        NCCL_CONFIG_UNDEF_INT,            /* shrinkShare */                                     \
        NCCL_CONFIG_UNDEF_INT,            /* nvlsCTAs */                                        \
        NCCL_CONFIG_UNDEF_INT,            /* nChannelsPerNetPeer */                             \
        NCCL_CONFIG_UNDEF_INT             /* nvlinkCentricSched */                              \
  }

/* Result of ncclGroupSimulateEnd. */
typedef struct ncclSimInfo_v22200 {
  size_t size;
  unsigned int magic;     /* 0x74685283 */
  unsigned int version;
  float estimatedTime;    /* microseconds */
} ncclSimInfo_t;

#define NCCL_SIM_INFO_INITIALIZER                                                               \
  { sizeof(ncclSimInfo_t), 0x74685283, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH),         \
    NCCL_UNDEF_FLOAT }

/* ---- Reduction operators and data types ----------------------------------------------------- */

/* Only sizes ncclRedOp_t: the enum below must be as wide as this one. */
typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;

/* Values from ncclNumOps up to ncclMaxRedOp are handles made by ncclRedOpCreatePreMulSum. */
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

/* Where ncclRedOpCreatePreMulSum finds its scalar. */
typedef enum {
  ncclScalarDevice = 0,        /* read from device memory when the operation runs */
  ncclScalarHostImmediate = 1  /* copied from host memory at creation */
} ncclScalarResidence_t;

/* ---- Version and unique id ------------------------------------------------------------------ */

ncclResult_t ncclGetVersion(int *version);
ncclResult_t pncclGetVersion(int *version);

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
ncclResult_t pncclGetUniqueId(ncclUniqueId *uniqueId);

/* ---- Communicator creation and teardown ----------------------------------------------------- */

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config);
ncclResult_t pncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                     ncclConfig_t *config);

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t pncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);

/* commIds holds nId ids; every rank passes the same array. */
ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                      ncclUniqueId *commIds, ncclConfig_t *config);
ncclResult_t pncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                       ncclUniqueId *commIds, ncclConfig_t *config);

/* One communicator per device, all in this process; devlist NULL means devices 0..ndev-1. */
ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist);
ncclResult_t pncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist);

ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t pncclCommFinalize(ncclComm_t comm);

ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t pncclCommDestroy(ncclComm_t comm);

ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t pncclCommAbort(ncclComm_t comm);

ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags);
ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags);

/* color NCCL_SPLIT_NOCOLOR yields *newcomm == NULL; config NULL copies the parent's. */
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config);
ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                            ncclConfig_t *config);

ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                            ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags);
ncclResult_t pncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                             ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags);

/* ---- Errors and queries --------------------------------------------------------------------- */

const char *ncclGetErrorString(ncclResult_t result);
const char *pncclGetErrorString(ncclResult_t result);

/* comm is not used and may be NULL. */
const char *ncclGetLastError(ncclComm_t comm);
const char *pncclGetLastError(ncclComm_t comm);

#if defined(__GNUC__) || defined(__clang__)
__attribute__((deprecated("ncclResetDebugInit is deprecated")))
#endif
void ncclResetDebugInit(void);
#if defined(__GNUC__) || defined(__clang__)
__attribute__((deprecated("pncclResetDebugInit is deprecated")))
#endif
void pncclResetDebugInit(void);

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);
ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
ncclResult_t pncclCommCount(const ncclComm_t comm, int *count);

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device);
ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int *device);

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);
ncclResult_t pncclCommUserRank(const ncclComm_t comm, int *rank);

/* ---- Memory, registration, windows ---------------------------------------------------------- */

ncclResult_t ncclMemAlloc(void **ptr, size_t size);
ncclResult_t pncclMemAlloc(void **ptr, size_t size);

ncclResult_t ncclMemFree(void *ptr);
ncclResult_t pncclMemFree(void *ptr);

ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle);
ncclResult_t pncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle);

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle);
ncclResult_t pncclCommDeregister(const ncclComm_t comm, void *handle);

/* Collective over the communicator. */
ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win,
                                    int winFlags);
ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win,
                                     int winFlags);

ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);
ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);

/* ---- Reduction operators -------------------------------------------------------------------- */

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                       ncclScalarResidence_t residence, ncclComm_t comm);

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);
ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);

/* ---- Collectives ---------------------------------------------------------------------------- */

/* recvbuff matters only on root. In place when sendbuff == recvbuff. */
ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                        cudaStream_t stream);
ncclResult_t pncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                         cudaStream_t stream);

/* In-place broadcast (deprecated spelling). */
ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                       ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t stream);

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t pncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                            ncclDataType_t datatype, int root, ncclComm_t comm,
                            cudaStream_t stream);

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t pncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                            ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                            cudaStream_t stream);

/* sendbuff holds nranks*recvcount elements. In place when recvbuff == sendbuff+rank*recvcount. */
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
ncclResult_t pncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                cudaStream_t stream);

/* recvbuff holds nranks*sendcount elements. In place when sendbuff == recvbuff+rank*sendcount. */
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                            ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);

/* Block j of sendbuff goes to rank j; both buffers hold nranks*count elements. */
ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);

/* Root receives nranks*count elements. In place when sendbuff == recvbuff + root*count. */
ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                        ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclGather(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);

/* Root sends nranks*count elements. In place when recvbuff == sendbuff + root*count. */
ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                          ncclDataType_t datatype, int root, ncclComm_t comm,
                          cudaStream_t stream);

/* ---- Point to point ------------------------------------------------------------------------- */

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream);

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream);

/* ---- Groups --------------------------------------------------------------------------------- */

ncclResult_t ncclGroupStart(void);
ncclResult_t pncclGroupStart(void);

ncclResult_t ncclGroupEnd(void);
ncclResult_t pncclGroupEnd(void);

/* Ends the group like ncclGroupEnd but launches nothing; fills simInfo->estimatedTime. */
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo);
ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t *simInfo);

/* ---- Device-API host functions ---------------------------------------------------------------
 * NVIDIA declares these in the nccl_device headers. Only ncclTeam_t is laid out here; the other structs
 * are used through pointers. oxccl does not provide device-side communicators yet:
 * ncclDevCommCreate and the requirement helpers return ncclInvalidUsage.
 */

/* A team of ranks: rank r of the team is world rank (worldRank - rank*stride + r*stride). */
typedef struct ncclTeam {
  int nRanks;
  int rank;
  int stride;
} ncclTeam_t;

typedef struct ncclDevComm ncclDevComm_t;
typedef struct ncclDevCommRequirements ncclDevCommRequirements_t;
typedef struct ncclDevResourceRequirements ncclDevResourceRequirements_t;
typedef struct ncclLsaBarrierHandle ncclLsaBarrierHandle_t;
typedef struct ncclGinBarrierHandle ncclGinBarrierHandle_t;
typedef struct ncclLLA2AHandle ncclLLA2AHandle_t;

ncclResult_t ncclDevCommCreate(ncclComm_t comm, ncclDevCommRequirements_t const *reqs,
                               ncclDevComm_t *outDevComm);
ncclResult_t pncclDevCommCreate(ncclComm_t comm, ncclDevCommRequirements_t const *reqs,
                                ncclDevComm_t *outDevComm);

ncclResult_t ncclDevCommDestroy(ncclComm_t comm, ncclDevComm_t const *devComm);
ncclResult_t pncclDevCommDestroy(ncclComm_t comm, ncclDevComm_t const *devComm);

ncclTeam_t ncclTeamWorld(ncclComm_t comm);
ncclTeam_t pncclTeamWorld(ncclComm_t comm);

ncclTeam_t ncclTeamLsa(ncclComm_t comm);
ncclTeam_t pncclTeamLsa(ncclComm_t comm);

ncclTeam_t ncclTeamRail(ncclComm_t comm);
ncclTeam_t pncclTeamRail(ncclComm_t comm);

int ncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank);
int pncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank);

int ncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank);
int pncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank);

ncclResult_t ncclLsaBarrierCreateRequirement(ncclTeam_t team, int nBarriers,
                                             ncclLsaBarrierHandle_t *outHandle,
                                             ncclDevResourceRequirements_t *outReq);
ncclResult_t pncclLsaBarrierCreateRequirement(ncclTeam_t team, int nBarriers,
                                              ncclLsaBarrierHandle_t *outHandle,
                                              ncclDevResourceRequirements_t *outReq);

ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t comm, ncclTeam_t team, int nBarriers,
                                             ncclGinBarrierHandle_t *outHandle,
                                             ncclDevResourceRequirements_t *outReq);
ncclResult_t pncclGinBarrierCreateRequirement(ncclComm_t comm, ncclTeam_t team, int nBarriers,
                                              ncclGinBarrierHandle_t *outHandle,
                                              ncclDevResourceRequirements_t *outReq);

int ncclLLA2ACalcSlots(int maxElts, int maxEltSize);
int pncclLLA2ACalcSlots(int maxElts, int maxEltSize);

ncclResult_t ncclLLA2ACreateRequirement(int nBlocks, int nSlots, ncclLLA2AHandle_t *outHandle,
                                        ncclDevResourceRequirements_t *outReq);
ncclResult_t pncclLLA2ACreateRequirement(int nBlocks, int nSlots, ncclLLA2AHandle_t *outHandle,
                                         ncclDevResourceRequirements_t *outReq);

/* ---- NCCL 2.29 additions that oxccl also exports -------------------------------------------- */

#define NCCL_SUSPEND_MEM 0x01

typedef enum {
  ncclStatGpuMemSuspend = 0,
  ncclStatGpuMemSuspended = 1,
  ncclStatGpuMemPersist = 2,
  ncclStatGpuMemTotal = 3
} ncclCommMemStat_t;

ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId *uniqueId);
ncclResult_t pncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId *uniqueId);

/* Not supported by oxccl yet: returns ncclInvalidUsage. */
ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank,
                          ncclComm_t *newcomm, ncclConfig_t *config);
ncclResult_t pncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId *uniqueId, int rank,
                           ncclComm_t *newcomm, ncclConfig_t *config);

ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t pncclCommSuspend(ncclComm_t comm, int flags);

ncclResult_t ncclCommResume(ncclComm_t comm);
ncclResult_t pncclCommResume(ncclComm_t comm);

ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value);
ncclResult_t pncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t *value);

ncclResult_t ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void **outUserPtr);
ncclResult_t pncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void **outUserPtr);

/* ---- oxccl extensions ----------------------------------------------------------------------- */

/* RCCL's all-to-all with per-peer counts and displacements (in elements), nranks entries each. */
ncclResult_t ncclAlltoAllv(const void *sendbuff, const size_t sendcounts[], const size_t sdispls[],
                           void *recvbuff, const size_t recvcounts[], const size_t rdispls[],
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAlltoAllv(const void *sendbuff, const size_t sendcounts[],
                            const size_t sdispls[], void *recvbuff, const size_t recvcounts[],
                            const size_t rdispls[], ncclDataType_t datatype, ncclComm_t comm,
                            cudaStream_t stream);

/* oxccl's own version, e.g. "oxccl 0.1.0 (NCCL 2.28.9 API)"; ncclGetVersion reports the API. */
const char *oxcclGetVersionString(void);

/* The watchdog's latest hang report on comm (OXCCL_WATCHDOG_SECONDS), e.g. "rank 0: AllReduce #12
 * (count 1024 f32 sum) waiting 120 s: ranks 0-2 entered it; rank 3 is at #11 (AllReduce, done)";
 * an empty string when none was made. NUL-terminated, truncated to len - 1 bytes. */
ncclResult_t oxcclCommHangReport(ncclComm_t comm, char *buf, size_t len);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* OXCCL_NCCL_H */
