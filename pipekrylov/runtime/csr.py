"""The distributed CSR format's operands and its compiled apply: the SpMV with its halo
exchange, as :meth:`pipekrylov.matrix.DistributedCSR.matvec` does it from Python.

The exchange runs on the matrix's persistent requests: start it, multiply the block of
owned columns while the messages travel (by runs of equal rows and diagonals where the
matrix has them, :mod:`pipekrylov.kernels.spmv`), poking a reduction in flight every
``I[POKE_ROWS]`` rows, wait, add the ghost block.  No poke after the last chunk: the MPI
call that follows progresses the reduction too, and over TCP each call costs microseconds.
"""
from collections import namedtuple


from ..kernels.compile import hot
import numpy as np

from ..kernels.spmv import csr_matvec_add_rows, csr_matvec_rows, gather, runs_kernel
from ..parallel import native
from .layout import MPI_ERROR, POKE_ROWS, RANKS
from .operators import register
from .reduce import poke

__all__ = ["CSROperands", "operands"]

_mpi = native.declarations()
MPI_Startall, MPI_Waitall = _mpi["MPI_Startall"], _mpi["MPI_Waitall"]
_runs = runs_kernel()

CSROperands = namedtuple("CSROperands", "indptr indices data runs start length diagonal offsets offset_ptr values "
                                        "ghost_rows g_indptr g_indices g_data send_index send_values ghost_values "
                                        "halo halo_status")
"""The arrays of one rank's rows: the owned block in CSR and its row runs (``runs`` 0
when it has none, the run arrays then placeholders), the ghost rows' block, the halo's
send index, buffers and persistent requests."""


def operands(A):
    """A DistributedCSR's operands (its arrays, not copies)."""
    local, ghost, halo, runs = A.local, A.ghost, A.halo, A.local.runs
    if runs is None:
        empty = np.zeros(1, dtype=np.int64)
        run_arrays = (empty, empty, np.zeros(1, np.uint8), empty, empty, np.zeros((1, 1)))
    else:
        run_arrays = (runs.start, runs.length, runs.diagonal, runs.offsets, runs.offset_ptr, runs.values)
    requests = native.handles(halo.requests)
    return CSROperands(local.indptr, local.indices, local.data, int(runs is not None), *run_arrays, A.ghost_rows,
                       ghost.indptr, ghost.indices, ghost.data, halo.send_index, halo.send_values,
                       halo.ghost_values, requests, native.status_buffer(len(requests)))


@hot
def spmv(A, x, y, R, slot, I, F):
    """y = A x on this rank's rows (see the module's docstring)."""
    gather(x, A.send_index, A.send_values)
    nhalo = A.halo.shape[0]
    if nhalo > 0:
        e = MPI_Startall(nhalo, A.halo.ctypes.data)
        if e != 0:
            I[MPI_ERROR] = e
    n = y.shape[0]
    step = I[POKE_ROWS] if slot >= 0 and I[RANKS] > 1 else n
    first = 0
    while first < n:
        last = min(n, first + step)
        if A.runs != 0:
            _runs(first, last, A.start, A.length, A.diagonal, A.offsets, A.offset_ptr, A.values,
                  A.indptr, A.indices, A.data, x, y)
        else:
            csr_matvec_rows(first, last, A.indptr, A.indices, A.data, x, y)
        if last < n:
            poke(R, slot, I)
        first = last
    if nhalo > 0:
        e = MPI_Waitall(nhalo, A.halo.ctypes.data, A.halo_status.ctypes.data)
        if e != 0:
            I[MPI_ERROR] = e
    if A.ghost_rows.shape[0] > 0:
        csr_matvec_add_rows(A.ghost_rows, A.g_indptr, A.g_indices, A.g_data, A.ghost_values, y)


register(CSROperands, spmv)
