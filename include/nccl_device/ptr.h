/*
 * nccl_device/ptr.h for oxccl's libnccl.so.2: addresses inside symmetric windows and the
 * device communicator's resource buffers, for this rank, any LSA peer, or a multicast object;
 * and ncclSymPtr<T>, a (window, offset) pair that names the same element on every rank.
 *
 * A window is mapped for the whole LSA team at one base (lsaFlatBase), LSA rank r's part
 * r * stride4G * 4 GiB above it, so a peer's address is the base with its high word moved
 * (nccl::utility::add4G). Multimem (NVLink multicast) addresses are computed here as in NCCL,
 * but oxccl does not create multicast objects yet: ncclDevCommCreate refuses lsaMultimem and
 * multimem teams, so there is no valid ncclMultimemHandle to pass.
 *
 * Written for oxccl from the published NCCL 2.28.9 device-API facts (names, signatures, struct
 * layouts, the layout of state in the resource buffer); see nccl_device.h.
 */
#ifndef OXCCL_NCCL_DEVICE_PTR_H
#define OXCCL_NCCL_DEVICE_PTR_H

#include "core.h"
#include "team.h"

/* Resource buffers are placed in 128-byte units of the resource window. */
NCCL_EXTERN_C NCCL_HOST_DEVICE_INLINE size_t ncclGetResourceBufferOffset(ncclDevResourceHandle_t h) {
  return (size_t)h * 128;
}

#if defined(OXCCL_NCCL_DEVICE_CODE)
namespace nccl {
namespace ptr_detail {
/* LSA rank `index`'s part of window w, at byte `offset`. */
NCCL_DEVICE_INLINE void *lsaAddress(ncclWindow_t w, size_t offset, int index) {
  char *base = nccl::utility::loadConst(&w->lsaFlatBase);
  uint32_t stride4G = nccl::utility::loadConst(&w->stride4G);
  return nccl::utility::add4G(base, (int)((uint32_t)index * stride4G)) + offset;
}

/* The same for the resource window, from the copy inlined in the device communicator (kernel
 * parameter space: no load from global memory). */
NCCL_DEVICE_INLINE void *resourceAddress(ncclDevComm const &comm, ncclDevResourceHandle h,
                                         int index) {
  char *base = comm.resourceWindow_inlined.lsaFlatBase;
  uint32_t stride4G = comm.resourceWindow_inlined.stride4G;
  return nccl::utility::add4G(base, (int)((uint32_t)index * stride4G)) +
         ncclGetResourceBufferOffset(h);
}
}  // namespace ptr_detail
}  // namespace nccl

/* This rank's own part of w. */
NCCL_DEVICE_INLINE void *ncclGetLocalPointer(ncclWindow_t w, size_t offset) {
  return nccl::ptr_detail::lsaAddress(w, offset, nccl::utility::loadConst(&w->lsaRank));
}

/* LSA rank `peer`'s part of w. */
NCCL_DEVICE_INLINE void *ncclGetLsaPointer(ncclWindow_t w, size_t offset, int peer) {
  return nccl::ptr_detail::lsaAddress(w, offset, peer);
}

/* World rank `peer`'s part of w; peer must be in this rank's LSA team. */
NCCL_DEVICE_INLINE void *ncclGetPeerPointer(ncclWindow_t w, size_t offset, int peer) {
  int lsaRank = nccl::utility::loadConst(&w->lsaRank);
  int worldRank = nccl::utility::loadConst(&w->worldRank);
  return nccl::ptr_detail::lsaAddress(w, offset, lsaRank + (peer - worldRank));
}

/* Member `peer` of team tm's part of w; the member must be in this rank's LSA team. */
NCCL_DEVICE_INLINE void *ncclGetPeerPointer(ncclWindow_t w, size_t offset, ncclTeam tm, int peer) {
  int lsaRank = nccl::utility::loadConst(&w->lsaRank);
  return nccl::ptr_detail::lsaAddress(w, offset, lsaRank + (peer - tm.rank) * tm.stride);
}

/* w's byte `offset` in the multicast object mm (the window sits mcOffset4K pages into it). */
NCCL_DEVICE_INLINE void *ncclGetMultimemPointer(ncclWindow_t w, size_t offset,
                                                ncclMultimemHandle mm) {
  size_t page = nccl::utility::loadConst(&w->mcOffset4K);
  return (char *)mm.mcBasePtr + page * 4096 + offset;
}

NCCL_DEVICE_INLINE void *ncclGetLsaMultimemPointer(ncclWindow_t w, size_t offset,
                                                   ncclDevComm const &comm) {
  return ncclGetMultimemPointer(w, offset, comm.lsaMultimem);
}

NCCL_DEVICE_INLINE void *ncclGetResourceBufferLocalPointer(ncclDevComm const &comm,
                                                           ncclDevResourceHandle h) {
  return nccl::ptr_detail::resourceAddress(comm, h, comm.lsaRank);
}

NCCL_DEVICE_INLINE void *ncclGetResourceBufferLsaPointer(ncclDevComm const &comm,
                                                         ncclDevResourceHandle h, int peer) {
  return nccl::ptr_detail::resourceAddress(comm, h, peer);
}

NCCL_DEVICE_INLINE void *ncclGetResourceBufferPeerPointer(ncclDevComm const &comm,
                                                          ncclDevResourceHandle h, ncclTeam team,
                                                          int peer) {
  return nccl::ptr_detail::resourceAddress(comm, h, comm.lsaRank + (peer - team.rank) * team.stride);
}

NCCL_DEVICE_INLINE void *ncclGetResourceBufferMultimemPointer(ncclDevComm const &comm,
                                                              ncclDevResourceHandle h,
                                                              ncclMultimemHandle mm) {
  size_t page = comm.resourceWindow_inlined.mcOffset4K;
  return (char *)mm.mcBasePtr + page * 4096 + ncclGetResourceBufferOffset(h);
}

NCCL_DEVICE_INLINE void *ncclGetResourceBufferLsaMultimemPointer(ncclDevComm const &comm,
                                                                 ncclDevResourceHandle h) {
  return ncclGetResourceBufferMultimemPointer(comm, h, comm.lsaMultimem);
}
#endif /* OXCCL_NCCL_DEVICE_CODE */

#if defined(__cplusplus)
/* A T at byte `offset` of a symmetric window: the same element on every rank, turned into an
 * address for one of them with localPtr(), lsaPtr(), peerPtr() (device code). Arithmetic moves
 * the offset in units of T, as on T*. */
template <typename T>
struct ncclSymPtr {
  using ElementType = T;
  ncclWindow_t window;
  size_t offset;

  NCCL_HOST_DEVICE_INLINE constexpr ncclSymPtr(ncclWindow_t window = nullptr, size_t offset = 0)
      : window(window), offset(offset) {}

  template <typename U>
  NCCL_HOST_DEVICE_INLINE operator ncclSymPtr<U>() const {
    return ncclSymPtr<U>(window, offset);
  }

  /* One overload per integer type, as for T*, so that no call is ambiguous. */
  NCCL_HOST_DEVICE_INLINE ncclSymPtr &operator+=(int d) { return advance((size_t)d); }
  NCCL_HOST_DEVICE_INLINE ncclSymPtr &operator+=(unsigned int d) { return advance((size_t)d); }
  NCCL_HOST_DEVICE_INLINE ncclSymPtr &operator+=(long d) { return advance((size_t)d); }
  NCCL_HOST_DEVICE_INLINE ncclSymPtr &operator+=(unsigned long d) { return advance((size_t)d); }
  NCCL_HOST_DEVICE_INLINE ncclSymPtr &operator+=(long long d) { return advance((size_t)d); }
  NCCL_HOST_DEVICE_INLINE ncclSymPtr &operator+=(unsigned long long d) {
    return advance((size_t)d);
  }

  NCCL_HOST_DEVICE_INLINE ncclSymPtr &operator-=(int d) { return advance(-(size_t)d); }
  NCCL_HOST_DEVICE_INLINE ncclSymPtr &operator-=(unsigned int d) { return advance(-(size_t)d); }
  NCCL_HOST_DEVICE_INLINE ncclSymPtr &operator-=(long d) { return advance(-(size_t)d); }
  NCCL_HOST_DEVICE_INLINE ncclSymPtr &operator-=(unsigned long d) { return advance(-(size_t)d); }
  NCCL_HOST_DEVICE_INLINE ncclSymPtr &operator-=(long long d) { return advance(-(size_t)d); }
  NCCL_HOST_DEVICE_INLINE ncclSymPtr &operator-=(unsigned long long d) {
    return advance(-(size_t)d);
  }

#if defined(OXCCL_NCCL_DEVICE_CODE)
  NCCL_DEVICE_INLINE T *localPtr() const { return (T *)ncclGetLocalPointer(window, offset); }
  NCCL_DEVICE_INLINE T *lsaPtr(int peer) const {
    return (T *)ncclGetLsaPointer(window, offset, peer);
  }
  NCCL_DEVICE_INLINE T *peerPtr(int peer) const {
    return (T *)ncclGetPeerPointer(window, offset, peer);
  }
  NCCL_DEVICE_INLINE T *peerPtr(ncclTeam team, int peer) const {
    return (T *)ncclGetPeerPointer(window, offset, team, peer);
  }
  NCCL_DEVICE_INLINE T *multimemPtr(ncclMultimemHandle mmHandle) const {
    return (T *)ncclGetMultimemPointer(window, offset, mmHandle);
  }
  NCCL_DEVICE_INLINE T *lsaMultimemPtr(ncclDevComm const &comm) const {
    return (T *)ncclGetLsaMultimemPointer(window, offset, comm);
  }
#endif

 private:
  /* Wrapping size_t arithmetic: a negative count is its two's complement. */
  NCCL_HOST_DEVICE_INLINE ncclSymPtr &advance(size_t elements) {
    offset += elements * sizeof(T);
    return *this;
  }
};

template <typename T, typename Int>
NCCL_HOST_DEVICE_INLINE ncclSymPtr<T> operator+(ncclSymPtr<T> p, Int d) {
  return p += d;
}
template <typename T, typename Int>
NCCL_HOST_DEVICE_INLINE ncclSymPtr<T> operator-(ncclSymPtr<T> p, Int d) {
  return p -= d;
}
/* Elements between two pointers into the same window. */
template <typename T>
NCCL_HOST_DEVICE_INLINE ptrdiff_t operator-(ncclSymPtr<T> a, ncclSymPtr<T> b) {
  return (ptrdiff_t)(a.offset - b.offset) / (ptrdiff_t)sizeof(T);
}
template <typename T>
NCCL_HOST_DEVICE_INLINE bool operator==(ncclSymPtr<T> a, ncclSymPtr<T> b) {
  return a.window == b.window && a.offset == b.offset;
}
template <typename T>
NCCL_HOST_DEVICE_INLINE bool operator!=(ncclSymPtr<T> a, ncclSymPtr<T> b) {
  return !(a == b);
}
#endif /* __cplusplus */

#if defined(OXCCL_NCCL_DEVICE_CODE)
/* Resource buffer h as a symmetric pointer into the resource window. */
NCCL_DEVICE_INLINE ncclSymPtr<char> ncclGetResourceBuffer(ncclDevComm const &comm,
                                                          ncclDevResourceHandle h) {
  return ncclSymPtr<char>(comm.resourceWindow, ncclGetResourceBufferOffset(h));
}
#endif

#endif /* OXCCL_NCCL_DEVICE_PTR_H */
