/*
 * nccl_device/gin.h for oxccl's libnccl.so.2: the declarations of NCCL's device-initiated
 * networking (GIN), so that programs with GIN kernels beside their LSA ones build against
 * oxccl alone (nccl-tests' alltoall.cu, for one).
 *
 * oxccl has no GIN: ncclDevCommCreate refuses every requirement that needs it (GIN signals or
 * counters, ginForceEnable, barriers across hosts), so no device communicator it returns can
 * reach these functions. Should one run anyway, it traps instead of pretending to move data.
 *
 * Written for oxccl from the published NCCL 2.28.9 device-API facts (names and signatures);
 * see nccl_device.h.
 */
#ifndef OXCCL_NCCL_DEVICE_GIN_H
#define OXCCL_NCCL_DEVICE_GIN_H

#include "coop.h"
#include "core.h"
#include "ptr.h"

#if defined(OXCCL_NCCL_DEVICE_CODE)
/* What a put does at the destination (signals) or at the source (counters) once it lands. */
struct ncclGin_None {};
struct ncclGin_SignalAdd {
  ncclGinSignal_t signal;
  uint64_t value;
};
struct ncclGin_SignalInc {
  ncclGinSignal_t signal;
};
struct ncclGin_CounterInc {
  ncclGinCounter_t counter;
};
struct ncclGinDescriptorSmem;
struct ncclGin_DescriptorSmem {
  ncclGinDescriptorSmem *descriptor;
};

/* A GIN context of a device communicator. Every operation traps: see the file comment. */
struct ncclGin {
  ncclDevComm const &comm;
  int contextIndex;

  NCCL_DEVICE_INLINE ncclGin(ncclDevComm const &c, int context) : comm(c), contextIndex(context) {}

  template <typename RemoteAction = ncclGin_None, typename LocalAction = ncclGin_None,
            typename Coop = ncclCoopThread, typename DescriptorSmem = ncclGin_None>
  NCCL_DEVICE_INLINE void put(ncclTeam, int, ncclWindow_t, size_t, ncclWindow_t, size_t, size_t,
                              RemoteAction = RemoteAction{}, LocalAction = LocalAction{},
                              Coop = Coop{}, DescriptorSmem = DescriptorSmem{},
                              cuda::thread_scope = cuda::thread_scope_thread,
                              cuda::thread_scope = cuda::thread_scope_device) const {
    nccl::utility::trap();
  }

  template <typename T, typename RemoteAction = ncclGin_None,
            typename LocalAction = ncclGin_None, typename Coop = ncclCoopThread,
            typename DescriptorSmem = ncclGin_None>
  NCCL_DEVICE_INLINE void put(ncclTeam, int, ncclSymPtr<T>, ncclSymPtr<T>, size_t,
                              RemoteAction = RemoteAction{}, LocalAction = LocalAction{},
                              Coop = Coop{}, DescriptorSmem = DescriptorSmem{},
                              cuda::thread_scope = cuda::thread_scope_thread,
                              cuda::thread_scope = cuda::thread_scope_device) const {
    nccl::utility::trap();
  }

  template <typename T, typename RemoteAction = ncclGin_None, typename Coop = ncclCoopThread,
            typename DescriptorSmem = ncclGin_None>
  NCCL_DEVICE_INLINE void putValue(ncclTeam, int, ncclWindow_t, size_t, T,
                                   RemoteAction = RemoteAction{}, Coop = Coop{},
                                   DescriptorSmem = DescriptorSmem{},
                                   cuda::thread_scope = cuda::thread_scope_thread,
                                   cuda::thread_scope = cuda::thread_scope_device) const {
    nccl::utility::trap();
  }

  template <typename T, typename RemoteAction = ncclGin_None, typename Coop = ncclCoopThread,
            typename DescriptorSmem = ncclGin_None>
  NCCL_DEVICE_INLINE void putValue(ncclTeam, int, ncclSymPtr<T>, T,
                                   RemoteAction = RemoteAction{}, Coop = Coop{},
                                   DescriptorSmem = DescriptorSmem{},
                                   cuda::thread_scope = cuda::thread_scope_thread,
                                   cuda::thread_scope = cuda::thread_scope_device) const {
    nccl::utility::trap();
  }

  template <typename RemoteAction, typename Coop = ncclCoopThread,
            typename DescriptorSmem = ncclGin_None>
  NCCL_DEVICE_INLINE void signal(ncclTeam, int, RemoteAction, Coop = Coop{},
                                 DescriptorSmem = DescriptorSmem{},
                                 cuda::thread_scope = cuda::thread_scope_thread,
                                 cuda::thread_scope = cuda::thread_scope_device) const {
    nccl::utility::trap();
  }

  template <typename Coop>
  NCCL_DEVICE_INLINE void flush(Coop, cuda::memory_order = cuda::memory_order_acquire) const {
    nccl::utility::trap();
  }

  NCCL_DEVICE_INLINE uint64_t readCounter(ncclGinCounter_t, int = 56,
                                          cuda::memory_order = cuda::memory_order_acquire) const {
    nccl::utility::trap();
    return 0;
  }

  template <typename Coop>
  NCCL_DEVICE_INLINE void waitCounter(Coop, ncclGinCounter_t, uint64_t, int = 56,
                                      cuda::memory_order = cuda::memory_order_acquire) const {
    nccl::utility::trap();
  }

  NCCL_DEVICE_INLINE uint64_t readSignal(ncclGinSignal_t, int = 64,
                                         cuda::memory_order = cuda::memory_order_acquire) const {
    nccl::utility::trap();
    return 0;
  }

  template <typename Coop>
  NCCL_DEVICE_INLINE void waitSignal(Coop, ncclGinSignal_t, uint64_t, int = 64,
                                     cuda::memory_order = cuda::memory_order_acquire) const {
    nccl::utility::trap();
  }

  NCCL_DEVICE_INLINE void resetCounter(ncclGinCounter_t) const { nccl::utility::trap(); }
  NCCL_DEVICE_INLINE void resetSignal(ncclGinSignal_t) const { nccl::utility::trap(); }
};
#endif /* OXCCL_NCCL_DEVICE_CODE */

#endif /* OXCCL_NCCL_DEVICE_GIN_H */
