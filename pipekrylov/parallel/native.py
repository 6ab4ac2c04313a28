"""MPI for compiled code: the few MPI calls the compiled solver loop makes from Numba.

The compiled loops (:mod:`pipekrylov.loops`, on :mod:`pipekrylov.runtime`) run whole
solves without returning to Python, so they call MPI themselves: ``MPI_Iallreduce``, ``MPI_Test`` and
``MPI_Wait`` for the fused reduction (``MPI_Allreduce`` for a classic method's blocking
one), ``MPI_Startall`` and ``MPI_Waitall`` on the halo exchange's persistent requests, and
``MPI_Wtime`` for the trace and the injected latency.
They are bound here, to the MPI library mpi4py has loaded, and called on handles taken
from mpi4py's objects (the caller's communicator, its requests).

Why our own binding rather than numba-mpi: numba-mpi binds only ``COMM_WORLD`` and
has neither ``MPI_Iallreduce`` nor persistent requests, and it calls through ctypes
function pointers, which Numba will not cache.  Here each function is declared as an
external symbol (``numba.types.ExternalFunction``) that LLVM resolves in the library
when the code is loaded, so the compiled loops are cached on disk like every kernel (the
handles' type, part of their signatures, keeps one ABI's code from another's).

The ABIs differ in the type of a handle: Open MPI's (and the MPI 5 standard ABI's)
are pointers, MPICH's are 32-bit integers.  :data:`HANDLE` is the dtype of this
library's handles (from mpi4py's ``MPI._sizeof``); handles travel into compiled code
in arrays of that dtype and the external functions are declared with it.  Statuses
are written to scratch buffers (``MPI_STATUS_IGNORE`` is 0 in one ABI, 1 in the
other); ``MPI_IN_PLACE`` is never used, for the same reason.
"""
import ctypes
import functools
import re

import numpy as np
from mpi4py import MPI

__all__ = ["HANDLE", "handles", "library", "declarations", "status_buffer"]

HANDLE = np.dtype(np.int64 if MPI._sizeof(MPI.Comm) == 8 else np.int32)
"""The dtype of an MPI handle in this MPI's ABI."""

_STATUS_BYTES = 64  # larger than MPI_Status in every ABI (20-24 bytes)


@functools.lru_cache(maxsize=None)
def library():
    """The path of the MPI library this process has loaded (the one mpi4py calls).

    Read from the process's memory map: mpi4py may load it as a dependency of its
    extension module or by ``dlopen``, under any of the ABIs' names."""
    seen = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            match = re.search(r"\s(/\S*/libmpi[\w.-]*\.so[\d.]*)$", line.rstrip())
            if match and match.group(1) not in seen:
                seen.append(match.group(1))
    for path in seen:
        try:
            if hasattr(ctypes.CDLL(path), "MPI_Iallreduce"):
                return path
        except OSError:
            continue
    raise RuntimeError("the MPI library mpi4py uses was not found in this process "
                       f"(libraries seen: {seen or 'none'}); the compiled loop needs it: use loop='python'")


def handles(objects):
    """The MPI handles of mpi4py objects as an array of :data:`HANDLE` (the bits of each
    handle as this ABI stores it: mpi4py reports MPICH's 32-bit handles sign-extended)."""
    bits = 8 * HANDLE.itemsize
    unsigned = np.dtype(f"uint{bits}")
    return np.array([MPI._handleof(o) & ((1 << bits) - 1) for o in objects], dtype=unsigned).view(HANDLE)


def status_buffer(count=1):
    """Scratch space for ``count`` statuses."""
    return np.zeros(count * _STATUS_BYTES // 8 + 1, dtype=np.int64)


@functools.lru_cache(maxsize=None)
def declarations():
    """The external functions, declared for this ABI (the library loaded for LLVM)."""
    import llvmlite.binding as llvm
    from numba import types
    llvm.load_library_permanently(library())
    h, i32, ptr = (types.int64 if HANDLE == np.int64 else types.int32), types.int32, types.voidptr
    declare = types.ExternalFunction
    return {
        # (sendbuf, recvbuf, count, datatype, op, comm, request*)
        "MPI_Iallreduce": declare("MPI_Iallreduce", i32(ptr, ptr, i32, h, h, h, ptr)),
        "MPI_Allreduce": declare("MPI_Allreduce", i32(ptr, ptr, i32, h, h, h)),   # the classic methods'

        "MPI_Test": declare("MPI_Test", i32(ptr, ptr, ptr)),            # (request*, flag*, status*)
        "MPI_Wait": declare("MPI_Wait", i32(ptr, ptr)),                 # (request*, status*)
        "MPI_Startall": declare("MPI_Startall", i32(i32, ptr)),         # (count, requests*)
        "MPI_Waitall": declare("MPI_Waitall", i32(i32, ptr, ptr)),      # (count, requests*, statuses*)
        "MPI_Wtime": declare("MPI_Wtime", types.float64()),
    }
