"""Kernels on a basis of vectors, the rows of a 2-D array, that the fused-statement
generator cannot write: passes whose number of dot products or terms is a run-time
number (GMRES's projections, p(l)-CG's next column), and linear combinations of rows.

Their dots are :func:`pipekrylov.kernels.fused.dot`'s: the same bits wherever the code is
compiled or inlined (a loop and the same loop interpreted must not differ).  (Blocked
versions, a block of the vector read by every dot from L1, were slower at 4,096
unknowns, where everything is in L2.)"""
import numba

from .compile import NO_REFCOUNT
from .fused import dot

__all__ = ["next_column", "combine", "project", "subtract_combination", "add_combination", "divide"]


@numba.njit(cache=True, nogil=True, **NO_REFCOUNT)
def next_column(u, ui, um, z, zi, zm, v, vp, Y, rows, d, g, e, out):
    """The three-term recurrences ``u = d u - g ui - e um``, ``z = d z - g zi - e zm``,
    then the dots of the next column of ``G``: ``out = [(u, v), (u, Y[rows[0]]), ..,
    (u, Y[rows[-1]]), (u, z), (u, vp)]``."""
    m = rows.shape[0]
    for i in range(u.shape[0]):
        u[i] = d * u[i] - g * ui[i] - e * um[i]
        z[i] = d * z[i] - g * zi[i] - e * zm[i]
    out[0] = dot(u, v)
    for j in range(m):
        out[1 + j] = dot(u, Y[rows[j]])
    out[m + 1] = dot(u, z)
    out[m + 2] = dot(u, vp)


@numba.njit(cache=True, nogil=True, **NO_REFCOUNT)
def combine(coefficients, basis, rows, out):
    """``out = sum_i coefficients[i] * basis[i]`` over the first ``rows`` rows, summed
    in row order, row after row (each pass contiguous); rows whose coefficient is zero
    are skipped (the start's polynomials in T are banded)."""
    for k in range(out.shape[0]):
        out[k] = 0.0
    for i in range(rows):
        c, v = coefficients[i], basis[i]
        if c != 0.0:
            for k in range(out.shape[0]):
                out[k] += c * v[k]


@numba.njit(cache=True, nogil=True, **NO_REFCOUNT)
def project(basis, rows, w, out):
    """``out[k] = (basis[k], w)`` for the first ``rows`` rows."""
    for k in range(rows):
        out[k] = dot(basis[k], w)


@numba.njit(cache=True, nogil=True, **NO_REFCOUNT)
def subtract_combination(basis, coefficients, rows, w):
    """``w -= coefficients[k] basis[k]`` for the first ``rows`` rows, one row after the
    other (each pass along a row: contiguous, vectorized)."""
    for k in range(rows):
        c, v = coefficients[k], basis[k]
        for i in range(w.shape[0]):
            w[i] -= c * v[i]


@numba.njit(cache=True, nogil=True, **NO_REFCOUNT)
def add_combination(basis, coefficients, rows, x):
    """``x += coefficients[k] basis[k]`` for the first ``rows`` rows, one row after the
    other."""
    for k in range(rows):
        c, v = coefficients[k], basis[k]
        for i in range(x.shape[0]):
            x[i] += c * v[i]


@numba.njit(cache=True, nogil=True, **NO_REFCOUNT)
def divide(w, divisor, out):
    """``out = w / divisor``, each entry divided (not multiplied by the reciprocal)."""
    for i in range(w.shape[0]):
        out[i] = w[i] / divisor
