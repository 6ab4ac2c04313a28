"""What every compiled solver loop shares (source text, compiled with the loop):

* the operators and the reduction as Numba functions: the distributed SpMV with its
  halo exchange (persistent requests), the preconditioners (none, Jacobi, block-Jacobi
  ILU(0)/IC(0)), the nonblocking reduction with its trace and injected latency, and
  ``MPI_Test`` pokes of an outstanding reduction inside the long kernels;
* the layout of the loop's integer and float state (:class:`IntSlot`, :class:`FloatSlot`)
  and the events a loop returns to its Python driver (:data:`EVENTS`).

The derived methods' loops (:mod:`pipekrylov.derive.loopgen`) and the classic methods'
(:mod:`pipekrylov.solvers.compiled`) are written on it.
"""
import functools
import hashlib
import os

from .. import kernels
from ..kernels.spmv import runs_kernel
from . import native
from .native import PRELUDE

__all__ = ["EVENTS", "RESUME_TOP", "RESUME_AFTER_TEST", "RESUME_BEGIN", "IntSlot", "FloatSlot", "runtime_source",
           "kernels_digest"]

EVENTS = ("converged", "tested", "maxiter", "nanorinf", "breakdown", "iterated", "failed", "flush",
          "mpi_error")
RESUME_TOP, RESUME_AFTER_TEST, RESUME_BEGIN = 0, 1, 2   # where a loop call starts (BEGIN: its start-up first)


class IntSlot:
    """Indices into the loop's integer state ``I``."""
    ITERATION, RESUME, MAXITER, STOP_AT_TEST, STOP_EVERY, REPLACE_EVERY, CHECK_EVERY = range(7)
    HIST, TRACE, CHECK, MPI_ERROR, SPMVS, PCS, POKE_ROWS, PC_KIND, RUNS, DONE, RANKS, SIZE = range(7, 19)


class FloatSlot:
    """Indices into the loop's float state ``F``."""
    ATOL, LATENCY, FLAG, RNORM, VALUE, SPMV_TIME, PC_TIME, SIZE = range(8)


# The operators and the reduction, shared by every generated loop.  Matrix ``A`` is a
# tuple (local CSR, its row runs, the ghost rows' CSR, the halo's send index and
# buffers, its persistent requests); ``P`` the preconditioner's arrays; ``R`` the
# reduction's (MPI handles: double, sum, comm; the request; scratch flag and status).
RUNTIME = '''
import numpy as np
import numba
from pipekrylov.kernels.spmv import csr_matvec_rows, csr_matvec_add_rows, gather
from pipekrylov.kernels.triangular import ilu0_solve
from pipekrylov.kernels.fused import dot
from {runs_module} import runs as runs_kernel


@numba.njit(nogil=True, cache=True)
def poke(R):
    """MPI_Test on the outstanding reduction (a completed one is MPI_REQUEST_NULL: no-op)."""
    handles, request, flag, status = R
    return MPI_Test(request.ctypes.data, flag.ctypes.data, status.ctypes.data)


@numba.njit(nogil=True, cache=True)
def spmv(x, y, A, R, I, F, progress):
    """y = A x: start the halo exchange, multiply the local block (with ``progress``, in
    chunks of I[POKE_ROWS] rows, poking the reduction between two), finish the exchange,
    add the ghost rows.  No poke after the last chunk: the MPI call that follows
    progresses the reduction as well, and over TCP every MPI call costs microseconds."""
    t0 = MPI_Wtime()
    (indptr, indices, data, start, length, diagonal, offsets, offset_ptr, values,
     ghost_rows, g_indptr, g_indices, g_data, send_index, send_values, ghost_values, halo, halo_status) = A
    gather(x, send_index, send_values)
    nhalo = halo.shape[0]
    if nhalo > 0:
        e = MPI_Startall(nhalo, halo.ctypes.data)
        if e != 0:
            I[{MPI_ERROR}] = e
    n = y.shape[0]
    step = I[{POKE_ROWS}] if progress else n
    first = 0
    while first < n:
        last = min(n, first + step)
        if I[{RUNS}] != 0:
            runs_kernel(first, last, start, length, diagonal, offsets, offset_ptr, values,
                        indptr, indices, data, x, y)
        else:
            csr_matvec_rows(first, last, indptr, indices, data, x, y)
        if progress and last < n and I[{RANKS}] > 1:
            poke(R)
        first = last
    if nhalo > 0:
        e = MPI_Waitall(nhalo, halo.ctypes.data, halo_status.ctypes.data)
        if e != 0:
            I[{MPI_ERROR}] = e
    if ghost_rows.shape[0] > 0:
        csr_matvec_add_rows(ghost_rows, g_indptr, g_indices, g_data, ghost_values, y)
    F[{SPMV_TIME}] += MPI_Wtime() - t0
    I[{SPMVS}] += 1


@numba.njit(nogil=True, cache=True)
def precondition(r, z, P, R, I, F, progress):
    """z = M^-1 r: a copy (no M), Jacobi (poking between chunks of I[POKE_ROWS] rows, as
    the SpMV) or the ILU(0)/IC(0) triangular solves of block Jacobi."""
    t0 = MPI_Wtime()
    dinv, indptr, indices, data, diag = P
    kind = I[{PC_KIND}]
    if kind == 2:
        ilu0_solve(indptr, indices, data, diag, r, z)
    else:
        n = r.shape[0]
        step = I[{POKE_ROWS}] if progress else n
        first = 0
        while first < n:
            last = min(n, first + step)
            # slices indexed from 0: no negative-index test, so the loops vectorize
            zc, rc = z[first:last], r[first:last]
            if kind == 1:
                dc = dinv[first:last]
                for q in range(last - first):
                    zc[q] = dc[q] * rc[q]
            else:
                zc[:] = rc
            if progress and last < n and I[{RANKS}] > 1:
                poke(R)
            first = last
    if kind != 0:
        F[{PC_TIME}] += MPI_Wtime() - t0
        I[{PCS}] += 1


@numba.njit(nogil=True, cache=True)
def start(send, count, recv, R, I, F, trace):
    """Start the Iallreduce of send[:count + 1] (the last entry: the failure flag); on
    one rank the sums are the local values (no MPI call, as PETSc on one process)."""
    handles, request, flag, status = R
    send[count] = F[{FLAG}]
    t = I[{TRACE}]
    trace[t, 0] = MPI_Wtime()
    if I[{RANKS}] == 1:
        recv[:count + 1] = send[:count + 1]
        return
    e = MPI_Iallreduce(send.ctypes.data, recv.ctypes.data, count + 1, handles[0], handles[1], handles[2],
                       request.ctypes.data)
    if e != 0:
        I[{MPI_ERROR}] = e


@numba.njit(nogil=True, cache=True)
def wait(R, I, F, trace):
    """Complete the reduction, not before its start + the injected latency; trace it."""
    handles, request, flag, status = R
    t = I[{TRACE}]
    trace[t, 3] = MPI_Wtime()
    if F[{LATENCY}] > 0.0:
        ready = trace[t, 0] + F[{LATENCY}]
        while MPI_Wtime() < ready:
            poke(R)
    if I[{RANKS}] > 1:
        e = MPI_Wait(request.ctypes.data, status.ctypes.data)
        if e != 0:
            I[{MPI_ERROR}] = e
    trace[t, 4] = MPI_Wtime()
    I[{TRACE}] = t + 1


@numba.njit(nogil=True, cache=True)
def reduce_now(send, count, label, D, R, I, F, trace):
    """A blocking reduction (a classic method's): one ``MPI_Allreduce`` (not an
    ``MPI_Iallreduce`` waited for at once, which Open MPI 4.1 completes in two rounds of
    messages where its blocking one takes one), not done before its start + the injected
    latency, traced with no overlap.  The event that ends the loop (an MPI error, a
    rank's failure flag), or -1."""
    handles = R[0]
    send[count] = F[{FLAG}]
    t = I[{TRACE}]
    t0 = MPI_Wtime()
    trace[t, 0] = t0
    trace[t, 1] = t0
    trace[t, 2] = t0
    trace[t, 3] = t0
    trace[t, 5] = label
    if I[{RANKS}] == 1:
        D[:count + 1] = send[:count + 1]
    else:
        e = MPI_Allreduce(send.ctypes.data, D.ctypes.data, count + 1, handles[0], handles[1], handles[2])
        if e != 0:
            I[{MPI_ERROR}] = e
    if F[{LATENCY}] > 0.0:
        while MPI_Wtime() < t0 + F[{LATENCY}]:
            pass
    trace[t, 4] = MPI_Wtime()
    I[{TRACE}] = t + 1
    if I[{MPI_ERROR}] != 0:
        return {EVENT_MPI_ERROR}
    if D[count] > 0.0:
        return {EVENT_FAILED}
    return -1


@numba.njit(nogil=True, cache=True)
def breakdown(check, value, I, F):
    """A breakdown check failed: which (the driver names its reason) and the value."""
    I[{CHECK}] = check
    F[{VALUE}] = value
    return {EVENT_BREAKDOWN}


@numba.njit(nogil=True, cache=True)
def end_iteration(iteration, I):
    """Count the iteration done; the callback's event where there is one, else -1."""
    I[{DONE}] = iteration + 1
    if I[{STOP_EVERY}] != 0:
        return {EVENT_ITERATED}
    return -1


@numba.njit(nogil=True, cache=True)
def residual_test(rr, hist, I, F):
    """The test at the top of a classic iteration on ||r||^2 = ``rr``: the event that
    ends the loop (a monitor line to print, a non-finite norm, convergence), or -1."""
    rnorm = np.sqrt(rr)
    F[{RNORM}] = rnorm
    if I[{STOP_AT_TEST}] != 0:
        return {EVENT_TESTED}
    hist[I[{HIST}]] = rnorm
    I[{HIST}] += 1
    if not np.isfinite(rnorm):
        return {EVENT_NANORINF}
    if rnorm <= F[{ATOL}]:
        return {EVENT_CONVERGED}
    return -1
'''


def runtime_source():
    """The MPI declarations and the runtime functions, as the first part of a loop's module."""
    I, F = IntSlot, FloatSlot
    slots = {k: getattr(I, k) for k in dir(I) if k.isupper()} | {k: getattr(F, k) for k in dir(F) if k.isupper()}
    slots |= {f"EVENT_{name.upper()}": code for code, name in enumerate(EVENTS)}
    runtime = RUNTIME.replace("{runs_module}", runs_kernel().py_func.__module__)
    for key, value in slots.items():
        runtime = runtime.replace("{" + key + "}", str(value))
    return "\n".join([PRELUDE.rstrip(), f"# the package's kernels it calls: {kernels_digest()}", runtime])


@functools.lru_cache(maxsize=None)
def kernels_digest():
    """A digest of the sources of the package kernels and MPI declarations the loop
    calls.  Numba's cache of the loop holds their compiled code: a loop cached against
    other kernels (an upgrade) must not be loaded, so their digest is in its source."""
    folder = os.path.dirname(kernels.__file__)
    paths = [os.path.join(folder, name) for name in sorted(os.listdir(folder)) if name.endswith(".py")]
    digest = hashlib.sha256()
    for path in paths + [native.__file__]:
        with open(path, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()[:16]
