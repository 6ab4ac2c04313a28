"""Kernels on a basis of vectors, the rows of a 2-D array, that the fused-statement
generator cannot write: passes whose number of dot products or terms is a run-time
number (GMRES's projections, p(l)-CG's next column), and linear combinations of rows.

Each works block by block (:data:`BLOCK` elements), so that a block of the vector read
many times comes from L1.  Their dots sum in four interleaved sums added in a fixed order
(:func:`_dot4`) in IEEE arithmetic: the same bits wherever the code is compiled or
inlined (a reassociated sum is vectorized, and so rounded, as each caller's compilation
decides: a loop and the same loop interpreted would then differ)."""
import numba

from .compile import NO_REFCOUNT

__all__ = ["next_column", "combine", "project", "subtract_combination", "add_combination", "divide"]


BLOCK = 256   # elements per block: the dots with Y's rows read them from L1, vectorized


@numba.njit(cache=True, nogil=True, **NO_REFCOUNT)
def next_column(u, ui, um, z, zi, zm, v, vp, Y, rows, d, g, e, out):
    """The three-term recurrences ``u = d u - g ui - e um``, ``z = d z - g zi - e zm``
    and, in the same pass over memory (block by block), the dots of the next column of
    ``G``: ``out = [(u, v), (u, Y[rows[0]]), .., (u, Y[rows[-1]]), (u, z), (u, vp)]``."""
    m = rows.shape[0]
    for j in range(m + 3):
        out[j] = 0.0
    n = u.shape[0]
    for first in range(0, n, BLOCK):
        last = min(n, first + BLOCK)
        for i in range(first, last):
            u[i] = d * u[i] - g * ui[i] - e * um[i]
            z[i] = d * z[i] - g * zi[i] - e * zm[i]
        out[0] += _dot4(u, v, first, last)
        for j in range(m):
            out[1 + j] += _dot4(u, Y[rows[j]], first, last)
        out[m + 1] += _dot4(u, z, first, last)
        out[m + 2] += _dot4(u, vp, first, last)


@numba.njit(cache=True, nogil=True, **NO_REFCOUNT)
def combine(coefficients, basis, rows, out):
    """``out = sum_i coefficients[i] * basis[i]`` over the first ``rows`` rows, summed
    in row order."""
    for k in range(out.shape[0]):
        s = 0.0
        for i in range(rows):
            s += coefficients[i] * basis[i, k]
        out[k] = s


@numba.njit(cache=True, nogil=True, **NO_REFCOUNT)
def project(basis, rows, w, out):
    """``out[k] = (basis[k], w)`` for the first ``rows`` rows, in one pass over ``w``."""
    for k in range(rows):
        out[k] = 0.0
    n = w.shape[0]
    for first in range(0, n, BLOCK):
        last = min(n, first + BLOCK)
        for k in range(rows):
            out[k] += _dot4(basis[k], w, first, last)


@numba.njit(cache=True, nogil=True, **NO_REFCOUNT)
def _dot4(a, b, first, last):
    """``(a, b)`` over ``first:last`` in four interleaved sums, ``(s0 + s1) + (s2 + s3)``."""
    s0 = s1 = s2 = s3 = 0.0
    i = first
    while i + 4 <= last:
        s0 += a[i] * b[i]
        s1 += a[i + 1] * b[i + 1]
        s2 += a[i + 2] * b[i + 2]
        s3 += a[i + 3] * b[i + 3]
        i += 4
    while i < last:
        s0 += a[i] * b[i]
        i += 1
    return (s0 + s1) + (s2 + s3)


@numba.njit(cache=True, nogil=True, **NO_REFCOUNT)
def subtract_combination(basis, coefficients, rows, w):
    """``w -= sum_k coefficients[k] basis[k]`` over the first ``rows`` rows."""
    for i in range(w.shape[0]):
        acc = 0.0
        for k in range(rows):
            acc += coefficients[k] * basis[k, i]
        w[i] -= acc


@numba.njit(cache=True, nogil=True, **NO_REFCOUNT)
def add_combination(basis, coefficients, rows, x):
    """``x += sum_k coefficients[k] basis[k]`` over the first ``rows`` rows."""
    for i in range(x.shape[0]):
        acc = 0.0
        for k in range(rows):
            acc += coefficients[k] * basis[k, i]
        x[i] += acc


@numba.njit(cache=True, nogil=True, **NO_REFCOUNT)
def divide(w, divisor, out):
    """``out = w / divisor``, each entry divided (not multiplied by the reciprocal)."""
    for i in range(w.shape[0]):
        out[i] = w[i] / divisor
