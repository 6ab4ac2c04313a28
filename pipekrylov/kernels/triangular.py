"""Incomplete LU (ILU(0)) factorization and its triangular solves, on one rank's block."""
import numpy as np

from .compile import jit

__all__ = ["ilu0_factor", "ilu0_solve"]


@jit(["int64(int64[::1], uint32[::1], float64[::1], int64[::1], boolean)"], fastmath=False)
def ilu0_factor(indptr, indices, data, diag, positive):
    """Factor in place (L unit lower, U upper, same pattern as A; indices sorted).

    Returns -1 on success, else the row whose pivot is zero (or not positive when
    ``positive``, the IC(0) case of a symmetric matrix: A = L D L^T).
    """
    n = indptr.shape[0] - 1
    where = np.full(n, -1, dtype=np.int64)
    for i in range(n):
        if diag[i] < 0:
            return i
        for kk in range(indptr[i], indptr[i + 1]):
            where[indices[kk]] = kk
        for kk in range(indptr[i], diag[i]):
            k = indices[kk]
            pivot = data[kk] / data[diag[k]]
            data[kk] = pivot
            for jj in range(diag[k] + 1, indptr[k + 1]):
                target = where[indices[jj]]
                if target >= 0:
                    data[target] -= pivot * data[jj]
        for kk in range(indptr[i], indptr[i + 1]):
            where[indices[kk]] = -1
        d = data[diag[i]]
        if d == 0.0 or not np.isfinite(d) or (positive and d < 0.0):
            return i
    return -1


@jit(["void(int64[::1], uint32[::1], float64[::1], int64[::1], float64[::1], float64[::1])"],
     fastmath=False, refcount=False)
def ilu0_solve(indptr, indices, data, diag, r, z):
    """z = (L U)^{-1} r."""
    n = r.shape[0]
    for i in range(n):
        s = r[i]
        for kk in range(indptr[i], diag[i]):
            s -= data[kk] * z[indices[kk]]
        z[i] = s
    for i in range(n - 1, -1, -1):
        s = z[i]
        for kk in range(diag[i] + 1, indptr[i + 1]):
            s -= data[kk] * z[indices[kk]]
        z[i] = s / data[diag[i]]
