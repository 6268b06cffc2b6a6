"""A NumPy stand-in for the part of CuPy that cupy_nccl.py uses, for checking that script where no
GPU is present. Arrays are host memory; cupy.cuda.nccl calls the real libnccl.so.2 of the process
through ctypes with a NULL stream, which oxccl's host backend (OXCCL_BACKEND=host) accepts:

  cd tests/clients && PYTHONPATH=mock_cupy OXCCL_BACKEND=host \
      LD_PRELOAD=$PWD/../../dist/lib/libnccl.so.2 python3 cupy_nccl.py

Not CuPy: no devices, no streams, no kernels. NCCL argument order and enum values are NCCL's.
"""
import ctypes
import os
import sys
import types

import numpy as np


class _Ptr:
    def __init__(self, ptr):
        self.ptr = ptr


class ndarray(np.ndarray):
    """numpy array whose .data.ptr is its address, as a CuPy array's is."""

    @property
    def data(self):
        return _Ptr(self.ctypes.data)


def asarray(a, dtype=None):
    return np.array(a, dtype=dtype, copy=True).view(ndarray)


def empty(shape, dtype=np.float32):
    fill = np.nan if np.dtype(dtype).kind == "f" else 0xAB  # garbage, as cupy.empty's may be
    return np.full(shape, fill, dtype=dtype).view(ndarray)


def asnumpy(a):
    return np.array(a, copy=True).view(np.ndarray)


# --- cupy.cuda --------------------------------------------------------------------------------
_current = [0]


class Device:
    def __init__(self, i=None):
        self.id = _current[0] if i is None else i

    def use(self):
        _current[0] = self.id

    def __enter__(self):
        self._prev = _current[0]
        _current[0] = self.id
        return self

    def __exit__(self, *exc):
        _current[0] = self._prev
        return False


class Stream:
    ptr = 0  # NULL: the host backend completes every call before it returns

    def __init__(self, non_blocking=False):
        pass

    def synchronize(self):
        pass


Stream.null = Stream()


class _Runtime:
    @staticmethod
    def getDeviceCount():
        return int(os.environ.get("MOCK_CUPY_DEVICES", "2"))

    @staticmethod
    def deviceSynchronize():
        pass  # host memory: nothing in flight


cuda = types.ModuleType("cupy.cuda")
cuda.Device, cuda.Stream, cuda.runtime = Device, Stream, _Runtime


# --- cupy.cuda.nccl ---------------------------------------------------------------------------
nccl = types.ModuleType("cupy.cuda.nccl")
_lib = ctypes.CDLL("libnccl.so.2")  # the one LD_PRELOAD / LD_LIBRARY_PATH provides
_c = ctypes.c_void_p


class _UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


class NcclError(RuntimeError):
    pass


def _check(status):
    if status != 0:
        _lib.ncclGetErrorString.restype = ctypes.c_char_p
        _lib.ncclGetLastError.restype = ctypes.c_char_p
        raise NcclError(f"NCCL error {status}: {_lib.ncclGetErrorString(status).decode()}: "
                        f"{(_lib.ncclGetLastError(None) or b'').decode()}")


def get_version():
    v = ctypes.c_int()
    _check(_lib.ncclGetVersion(ctypes.byref(v)))
    return v.value


def get_build_version():
    return 22809


def get_unique_id():
    uid = _UniqueId()
    _check(_lib.ncclGetUniqueId(ctypes.byref(uid)))
    raw = ctypes.string_at(ctypes.addressof(uid), 128)  # c_char arrays stop at NUL: copy raw
    return tuple(b - 256 if b > 127 else b for b in raw)  # signed chars, as CuPy returns


def groupStart():
    _check(_lib.ncclGroupStart())


def groupEnd():
    _check(_lib.ncclGroupEnd())


class NcclCommunicator:
    def __init__(self, ndev, commId, rank):
        uid = _UniqueId()
        ctypes.memmove(ctypes.addressof(uid), bytes(b & 0xFF for b in commId), 128)
        self._comm = _c()
        _check(_lib.ncclCommInitRank(ctypes.byref(self._comm), ndev, uid, rank))

    @staticmethod
    def initAll(devices):
        devs = list(range(devices)) if isinstance(devices, int) else list(devices)
        arr = (_c * len(devs))()
        dl = (ctypes.c_int * len(devs))(*devs)
        _check(_lib.ncclCommInitAll(arr, len(devs), dl))
        comms = []
        for h in arr:
            c = NcclCommunicator.__new__(NcclCommunicator)
            c._comm = _c(h)
            comms.append(c)
        return comms

    def destroy(self):
        if self._comm:
            _lib.ncclCommDestroy(self._comm)
            self._comm = _c()

    def abort(self):
        if self._comm:
            _lib.ncclCommAbort(self._comm)
            self._comm = _c()

    def _int(self, fn):
        v = ctypes.c_int()
        _check(fn(self._comm, ctypes.byref(v)))
        return v.value

    def device_id(self):
        self._int(_lib.ncclCommCuDevice)  # called, but the host backend has no devices:
        return _current[0]  # report the mock's current device instead

    def rank_id(self):
        return self._int(_lib.ncclCommUserRank)

    def size(self):
        return self._int(_lib.ncclCommCount)

    def allReduce(self, s, r, count, dt, op, stream):
        _check(_lib.ncclAllReduce(_c(s), _c(r), ctypes.c_size_t(count), dt, op, self._comm,
                                  _c(stream)))

    def reduce(self, s, r, count, dt, op, root, stream):
        _check(_lib.ncclReduce(_c(s), _c(r), ctypes.c_size_t(count), dt, op, root, self._comm,
                               _c(stream)))

    def broadcast(self, s, r, count, dt, root, stream):
        _check(_lib.ncclBroadcast(_c(s), _c(r), ctypes.c_size_t(count), dt, root, self._comm,
                                  _c(stream)))

    def bcast(self, buf, count, dt, root, stream):
        _check(_lib.ncclBcast(_c(buf), ctypes.c_size_t(count), dt, root, self._comm, _c(stream)))

    def allGather(self, s, r, count, dt, stream):
        _check(_lib.ncclAllGather(_c(s), _c(r), ctypes.c_size_t(count), dt, self._comm,
                                  _c(stream)))

    def reduceScatter(self, s, r, count, dt, op, stream):
        _check(_lib.ncclReduceScatter(_c(s), _c(r), ctypes.c_size_t(count), dt, op, self._comm,
                                      _c(stream)))

    def send(self, s, count, dt, peer, stream):
        _check(_lib.ncclSend(_c(s), ctypes.c_size_t(count), dt, peer, self._comm, _c(stream)))

    def recv(self, r, count, dt, peer, stream):
        _check(_lib.ncclRecv(_c(r), ctypes.c_size_t(count), dt, peer, self._comm, _c(stream)))


for _name, _value in dict(
        NCCL_INT8=0, NCCL_UINT8=1, NCCL_INT32=2, NCCL_UINT32=3, NCCL_INT64=4, NCCL_UINT64=5,
        NCCL_FLOAT16=6, NCCL_FLOAT32=7, NCCL_FLOAT64=8,
        NCCL_SUM=0, NCCL_PROD=1, NCCL_MAX=2, NCCL_MIN=3, NCCL_AVG=4).items():
    setattr(nccl, _name, _value)
for _f in (get_version, get_build_version, get_unique_id, groupStart, groupEnd):
    setattr(nccl, _f.__name__, _f)
nccl.NcclCommunicator, nccl.NcclError = NcclCommunicator, NcclError
cuda.nccl = nccl
sys.modules["cupy.cuda"], sys.modules["cupy.cuda.nccl"] = cuda, nccl
