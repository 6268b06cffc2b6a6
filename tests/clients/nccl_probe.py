"""Which libnccl a client really calls.

Being mapped is not enough: torch 2.11's import dlopens NVIDIA's libnccl.so.2 by full path
(RTLD_LOCAL, in _load_global_deps) even when LD_PRELOAD supplies another libnccl.so.2, so both can
be in /proc/self/maps. What counts is where the client's NCCL symbols bind: we look a symbol up
through the client's own handle (dlsym searches that object and its DT_NEEDED libraries, the way
the dynamic linker bound it) and ask dladdr which file holds the address.
"""
import ctypes
import os


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def mapped(name="libnccl"):
    """Real paths of mapped files whose name contains `name`, in map order."""
    paths = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and name in os.path.basename(parts[5]):
                p = os.path.realpath(parts[5])
                if p not in paths:
                    paths.append(p)
    return paths


def _handles(client):
    """Where to look a symbol up, in order: the client's own handle (how its references were
    bound), the global scope, and the object dlopen("libnccl.so.2") returns (what a client that
    loads NCCL at run time gets)."""
    if client is not None:
        try:
            yield ctypes.CDLL(client, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        except OSError:
            pass
    yield ctypes.CDLL(None)
    try:
        yield ctypes.CDLL("libnccl.so.2", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        pass


def _lookup(client, symbol):
    for h in _handles(client):
        try:
            return getattr(h, symbol)
        except AttributeError:
            continue
    return None


def provider(client=None, symbol="ncclCommInitRankConfig"):
    """Real path of the file that `symbol` resolves to as seen from `client`, or None."""
    fn = _lookup(client, symbol)
    if fn is None:
        return None
    info = _DlInfo()
    libc = ctypes.CDLL(None)
    if not libc.dladdr(ctypes.c_void_p(ctypes.cast(fn, ctypes.c_void_p).value),
                       ctypes.byref(info)) or not info.dli_fname:
        return None
    return os.path.realpath(info.dli_fname.decode())


def version(client=None):
    """ncclGetVersion() of the library `client` binds to, or None."""
    fn = _lookup(client, "ncclGetVersion")
    if fn is None:
        return None
    v = ctypes.c_int(0)
    fn(ctypes.byref(v))
    return v.value


def torch_client():
    """Path of the loaded libtorch_cuda.so (the library that imports NCCL), or None."""
    libs = mapped("libtorch_cuda.so")
    return libs[0] if libs else None


def cupy_client():
    """Path of CuPy's NCCL extension module, or None (e.g. the NumPy stand-in)."""
    try:
        import cupy_backends.cuda.libs.nccl as m
        return os.path.realpath(m.__file__)
    except Exception:  # noqa: BLE001
        return None


def check(client, expect_lib, expect_version):
    """None when `client` binds to expect_lib and reports expect_version, else the reason."""
    got = provider(client)
    if expect_lib and got != os.path.realpath(expect_lib):
        return (f"NCCL symbols of {os.path.basename(client or 'the process')} bind to {got}, "
                f"expected {os.path.realpath(expect_lib)} (mapped: {mapped()})")
    v = version(client)
    if expect_version and v != int(expect_version):
        return f"ncclGetVersion() = {v}, expected {expect_version}"
    return None


def describe(client):
    others = [p for p in mapped() if p != provider(client)]
    return (f"NCCL calls bind to {provider(client)} (ncclGetVersion {version(client)})"
            + (f"; also mapped, unused: {' '.join(others)}" if others else ""))
