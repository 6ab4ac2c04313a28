"""CSR kernels.

Index types were chosen by measurement (benchmarks/spmv.py): unsigned ``uint32`` column
indices and unsigned row pointers, because Numba adds a negative-index wraparound test to
every access through a signed index, and that test, not memory, bounded the signed loops
(1.3-1.5x slower here).  Row pointers are ``uint32`` while a rank's block has fewer than
2^32 nonzeros (4 bytes less per row, as PETSc's 32-bit PetscInt), else ``uint64``.  The
inner loop is unrolled by two with two accumulators, as PETSc's
``PetscSparseDensePlusDot`` does.
"""
import numpy as np

from .compile import jit

INDEX = "uint32"


def pointer_dtype(nnz):
    """The row-pointer type for a block with ``nnz`` nonzeros."""
    return "uint32" if nnz < 2 ** 32 else "uint64"
_ONE, _TWO = np.uint64(1), np.uint64(2)

__all__ = ["csr_matvec", "csr_matvec_add_rows", "csr_matvec_rows", "gather", "INDEX", "pointer_dtype"]

_CSRS = ["uint32[::1], uint32[::1], float64[::1]", "uint64[::1], uint32[::1], float64[::1]"]


@jit([f"void(int64, int64, {c}, float64[::1], float64[::1])" for c in _CSRS], fastmath=False)
def csr_matvec_rows(first, last, indptr, indices, data, x, y):
    """y[first:last] = A[first:last] x."""
    for i in range(first, last):
        k, end = indptr[i], indptr[i + 1]
        s0 = 0.0
        s1 = 0.0
        while k + _TWO <= end:
            s0 += data[k] * x[indices[k]]
            s1 += data[k + _ONE] * x[indices[k + _ONE]]
            k += _TWO
        if k < end:
            s0 += data[k] * x[indices[k]]
        y[i] = s0 + s1


@jit([f"void({c}, float64[::1], float64[::1])" for c in _CSRS], fastmath=False)
def csr_matvec(indptr, indices, data, x, y):
    """y = A x."""
    csr_matvec_rows(0, y.shape[0], indptr, indices, data, x, y)


@jit([f"void(int64[::1], {c}, float64[::1], float64[::1])" for c in _CSRS], fastmath=False)
def csr_matvec_add_rows(rows, indptr, indices, data, x, y):
    """y[rows[i]] += (B x)[i] for a CSR block B holding only the listed rows."""
    for i in range(rows.shape[0]):
        s = 0.0
        k = indptr[i]
        while k < indptr[i + 1]:
            s += data[k] * x[indices[k]]
            k += _ONE
        y[rows[i]] += s


@jit(["void(float64[::1], int64[::1], float64[::1])"], fastmath=False)
def gather(x, index, out):
    """out = x[index] (packing a halo send buffer without a temporary)."""
    for i in range(index.shape[0]):
        out[i] = x[index[i]]
