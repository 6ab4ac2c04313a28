"""Kernels on a basis of vectors, the rows of a 2-D array, that the fused-statement
generator cannot write: passes whose number of dot products or terms is a run-time
number (GMRES's projections, p(l)-CG's next column), and linear combinations of rows.

Their dots are :func:`pipekrylov.kernels.fused.dot`'s: the same bits wherever the code is
compiled or inlined (a loop and the same loop interpreted must not differ).  (Blocked
versions, a block of the vector read by every dot from L1, were slower at 4,096
unknowns, where everything is in L2.)  A projection takes its dots in pairs and a
combination its rows in fours, each entry's operations in the same order as one row at
a time (the same bits): the vector is read once per pair or four rows, which at 16,384
unknowns, the basis in L3, made projections 1.1-1.3x and combinations 1.5-1.7x faster
(Zen 4).  An s-step block's Gram matrix (:func:`gram`: every pair of up to 21 rows) is
blocked: each row read once, every dot's part taken from L1, its sums over the blocks in
order (fixed bits, not :func:`dot`'s)."""
import numba

from .compile import NO_REFCOUNT, jit
from .fused import dot
from .lanes import lane_sums_grid, lane_sums_pair, lanes_total

__all__ = ["next_column", "combine", "project", "project_two", "subtract_combination", "subtract_combinations",
           "add_combination", "divide", "gram", "recover_block", "copy"]


@numba.njit(cache=True, nogil=True, **NO_REFCOUNT)
def next_column(u, ui, um, z, zi, zm, v, vp, Y, rows, d, g, e, out):
    """The three-term recurrences ``u = d u - g ui - e um``, ``z = d z - g zi - e zm``,
    then the dots of the next column of ``G``: ``out = [(u, v), (u, Y[rows[0]]), ..,
    (u, Y[rows[-1]]), (u, z), (u, vp)]``.  One loop per vector updated (a loop that stores
    to two of six arrays is not vectorized: 2x slower at 4,096 unknowns) and the dots in
    pairs (u read once per two)."""
    m = rows.shape[0]
    for i in range(u.shape[0]):
        u[i] = d * u[i] - g * ui[i] - e * um[i]
    for i in range(z.shape[0]):
        z[i] = d * z[i] - g * zi[i] - e * zm[i]
    # the pairs: (v, Y[rows[0]]), (Y[rows[1]], Y[rows[2]]), .., then z and vp
    total = m + 3
    k = 0
    while k + 2 <= total:
        out[k], out[k + 1] = _dots(_column_partner(k, v, vp, z, Y, rows), _column_partner(k + 1, v, vp, z, Y, rows), u)
        k += 2
    if k < total:
        out[k] = dot(_column_partner(k, v, vp, z, Y, rows), u)


@numba.njit(cache=True, nogil=True, inline="always", **NO_REFCOUNT)
def _column_partner(k, v, vp, z, Y, rows):
    """The vector of ``out[k]``'s dot with u in :func:`next_column`."""
    m = rows.shape[0]
    if k == 0:
        return v
    if k <= m:
        return Y[rows[k - 1]]
    return z if k == m + 1 else vp


@numba.njit(cache=True, nogil=True, **NO_REFCOUNT)
def combine(coefficients, basis, rows, out, lo, hi):
    """``out = sum_i coefficients[i] * basis[i]`` over the first ``rows`` rows, on the
    entries ``lo:hi`` (a block of the basis its caller reads from L1 for several
    combinations), summed in row order from 0.0; rows whose coefficient is zero are
    skipped (the start's polynomials in T are banded).  Up to four rows per pass over out,
    the first pass starting from 0.0 (no pass of its own to clear out): each entry's
    operations in the same order as one row at a time from a cleared out (the same bits;
    2-3x faster at 256-4,096 unknowns than clearing first and adding the last rows one
    by one)."""
    out = out[lo:hi]   # views: their loops from 0 need no check of negative indices
    i = _nonzero(coefficients, 0, rows)
    if i == rows:
        for k in range(out.shape[0]):
            out[k] = 0.0
    first = True
    while i < rows:
        j = _nonzero(coefficients, i + 1, rows)
        m = _nonzero(coefficients, j + 1, rows) if j < rows else rows
        q = _nonzero(coefficients, m + 1, rows) if m < rows else rows
        c0, v0 = coefficients[i], basis[i][lo:hi]
        if q < rows:
            c1, c2, c3 = coefficients[j], coefficients[m], coefficients[q]
            v1, v2, v3 = basis[j][lo:hi], basis[m][lo:hi], basis[q][lo:hi]
            if first:
                for k in range(out.shape[0]):
                    out[k] = (((0.0 + c0 * v0[k]) + c1 * v1[k]) + c2 * v2[k]) + c3 * v3[k]
            else:
                for k in range(out.shape[0]):
                    out[k] = (((out[k] + c0 * v0[k]) + c1 * v1[k]) + c2 * v2[k]) + c3 * v3[k]
            i = _nonzero(coefficients, q + 1, rows)
        elif m < rows:
            c1, c2, v1, v2 = coefficients[j], coefficients[m], basis[j][lo:hi], basis[m][lo:hi]
            if first:
                for k in range(out.shape[0]):
                    out[k] = ((0.0 + c0 * v0[k]) + c1 * v1[k]) + c2 * v2[k]
            else:
                for k in range(out.shape[0]):
                    out[k] = ((out[k] + c0 * v0[k]) + c1 * v1[k]) + c2 * v2[k]
            i = rows
        elif j < rows:
            c1, v1 = coefficients[j], basis[j][lo:hi]
            if first:
                for k in range(out.shape[0]):
                    out[k] = (0.0 + c0 * v0[k]) + c1 * v1[k]
            else:
                for k in range(out.shape[0]):
                    out[k] = (out[k] + c0 * v0[k]) + c1 * v1[k]
            i = rows
        else:
            if first:
                for k in range(out.shape[0]):
                    out[k] = 0.0 + c0 * v0[k]
            else:
                for k in range(out.shape[0]):
                    out[k] += c0 * v0[k]
            i = rows
        first = False


@numba.njit(cache=True, nogil=True, inline="always", **NO_REFCOUNT)
def _nonzero(coefficients, start, rows):
    """The first row from ``start`` whose coefficient is nonzero, or ``rows``."""
    for i in range(start, rows):
        if coefficients[i] != 0.0:
            return i
    return rows


@numba.njit(cache=True, nogil=True, **NO_REFCOUNT)
def project(basis, rows, w, out):
    """``out[k] = (basis[k], w)`` for the first ``rows`` rows, two rows per pass."""
    k = 0
    while k + 2 <= rows:
        out[k], out[k + 1] = _dots(basis[k], basis[k + 1], w)
        k += 2
    if k < rows:
        out[k] = dot(basis[k], w)


@numba.njit(cache=True, nogil=True, **NO_REFCOUNT)
def project_two(basis, rows, u, w, out_u, out_w):
    """``out_u[k] = (basis[k], u)`` and ``out_w[k] = (basis[k], w)`` for the first
    ``rows`` rows, two rows per pass: each row read once for both, u and w once per two
    rows."""
    n = w.shape[0]
    k = 0
    while k + 2 <= rows:
        a, c = basis[k], basis[k + 1]
        (p0, p1, p2, p3, p4, p5, p6, p7, q0, q1, q2, q3, q4, q5, q6, q7,
         r0, r1, r2, r3, r4, r5, r6, r7, t0, t1, t2, t3, t4, t5, t6, t7) = lane_sums_grid(a, c, u, w)
        for j in range(n - n % 8, n):
            p0 += a[j] * u[j]
            q0 += a[j] * w[j]
            r0 += c[j] * u[j]
            t0 += c[j] * w[j]
        out_u[k] = lanes_total(p0, p1, p2, p3, p4, p5, p6, p7)
        out_w[k] = lanes_total(q0, q1, q2, q3, q4, q5, q6, q7)
        out_u[k + 1] = lanes_total(r0, r1, r2, r3, r4, r5, r6, r7)
        out_w[k + 1] = lanes_total(t0, t1, t2, t3, t4, t5, t6, t7)
        k += 2
    if k < rows:
        out_u[k], out_w[k] = _dots(u, w, basis[k])


@numba.njit(cache=True, nogil=True, inline="always", **NO_REFCOUNT)
def _dots(a, c, b):
    """``dot(a, b), dot(c, b)``, bit for bit, reading b once."""
    n = b.shape[0]
    s0, s1, s2, s3, s4, s5, s6, s7, t0, t1, t2, t3, t4, t5, t6, t7 = lane_sums_pair(a, c, b)
    for j in range(n - n % 8, n):
        s0 += a[j] * b[j]
        t0 += c[j] * b[j]
    return lanes_total(s0, s1, s2, s3, s4, s5, s6, s7), lanes_total(t0, t1, t2, t3, t4, t5, t6, t7)


@numba.njit(cache=True, nogil=True, **NO_REFCOUNT)
def subtract_combination(basis, coefficients, rows, w):
    """``w -= coefficients[k] basis[k]`` for the first ``rows`` rows, in row order."""
    _accumulate(basis, coefficients, rows, w, -1.0)


@jit(["void(float64[:, ::1], int64, float64[::1], float64[::1], float64[::1], float64[::1])"], noalias=True,
     refcount=False, fastmath=False)
def subtract_combinations(basis, rows, s, u, t, w):
    """``u -= s[k] basis[k]`` and ``w -= t[k] basis[k]`` for the first ``rows`` rows,
    each as :func:`subtract_combination` (the same bits), each row read once for both: at
    16,384 unknowns, the basis in L3, 2x faster than the two apart (Intel Xeon).  Its
    arrays never overlap (``noalias``: LLVM vectorizes a loop that stores to two arrays
    only then)."""
    k = 0
    while k + 4 <= rows:
        s0, s1, s2, s3 = -s[k], -s[k + 1], -s[k + 2], -s[k + 3]
        t0, t1, t2, t3 = -t[k], -t[k + 1], -t[k + 2], -t[k + 3]
        v0, v1, v2, v3 = basis[k], basis[k + 1], basis[k + 2], basis[k + 3]
        for i in range(u.shape[0]):
            a0, a1, a2, a3 = v0[i], v1[i], v2[i], v3[i]
            u[i] = (((u[i] + s0 * a0) + s1 * a1) + s2 * a2) + s3 * a3
            w[i] = (((w[i] + t0 * a0) + t1 * a1) + t2 * a2) + t3 * a3
        k += 4
    while k < rows:
        sk, tk, v = -s[k], -t[k], basis[k]
        for i in range(u.shape[0]):
            u[i] += sk * v[i]
            w[i] += tk * v[i]
        k += 1


@numba.njit(cache=True, nogil=True, **NO_REFCOUNT)
def add_combination(basis, coefficients, rows, x):
    """``x += coefficients[k] basis[k]`` for the first ``rows`` rows, in row order."""
    _accumulate(basis, coefficients, rows, x, 1.0)


@numba.njit(cache=True, nogil=True, **NO_REFCOUNT)
def _accumulate(basis, coefficients, rows, y, sign):
    """``y += sign coefficients[k] basis[k]`` row after row (``sign * c`` is exact), four
    rows per pass over y."""
    k = 0
    while k + 4 <= rows:
        c0, c1 = sign * coefficients[k], sign * coefficients[k + 1]
        c2, c3 = sign * coefficients[k + 2], sign * coefficients[k + 3]
        v0, v1, v2, v3 = basis[k], basis[k + 1], basis[k + 2], basis[k + 3]
        for i in range(y.shape[0]):
            y[i] = (((y[i] + c0 * v0[i]) + c1 * v1[i]) + c2 * v2[i]) + c3 * v3[i]
        k += 4
    while k < rows:
        c, v = sign * coefficients[k], basis[k]
        for i in range(y.shape[0]):
            y[i] += c * v[i]
        k += 1


@numba.njit(cache=True, nogil=True, **NO_REFCOUNT)
def copy(source, target):
    """``target = source`` (rows of a basis, the loops' vectors)."""
    for i in range(source.shape[0]):
        target[i] = source[i]


@numba.njit(cache=True, nogil=True, **NO_REFCOUNT)
def divide(w, divisor, out):
    """``out = w / divisor``, each entry divided (not multiplied by the reciprocal)."""
    for i in range(w.shape[0]):
        out[i] = w[i] / divisor


@jit(["void(float64[:, ::1], float64[:, ::1], int64, float64[::1], float64[::1], float64[::1], float64[::1], "
      "float64[::1], float64[::1])"], noalias=True, refcount=False, fastmath=False)
def recover_block(Y, T, rows, a, b, c, x, p, r):
    """An s-step block's end in one pass per four rows: ``x += Y a``, ``p = Y b``,
    ``r = T c`` (T may be Y: both are only read), each entry summed in row order from
    0.0 (x from its value).  The outputs are separate arrays, none a row of Y or T
    (``noalias``: three stores in one loop are vectorized only then)."""
    n = x.shape[0]
    for i in range(n):
        p[i] = 0.0
        r[i] = 0.0
    k = 0
    while k + 4 <= rows:
        a0, a1, a2, a3 = a[k], a[k + 1], a[k + 2], a[k + 3]
        b0, b1, b2, b3 = b[k], b[k + 1], b[k + 2], b[k + 3]
        c0, c1, c2, c3 = c[k], c[k + 1], c[k + 2], c[k + 3]
        v0, v1, v2, v3 = Y[k], Y[k + 1], Y[k + 2], Y[k + 3]
        u0, u1, u2, u3 = T[k], T[k + 1], T[k + 2], T[k + 3]
        for i in range(n):
            y0, y1, y2, y3 = v0[i], v1[i], v2[i], v3[i]
            x[i] = (((x[i] + a0 * y0) + a1 * y1) + a2 * y2) + a3 * y3
            p[i] = (((p[i] + b0 * y0) + b1 * y1) + b2 * y2) + b3 * y3
            r[i] = (((r[i] + c0 * u0[i]) + c1 * u1[i]) + c2 * u2[i]) + c3 * u3[i]
        k += 4
    while k < rows:
        ak, bk, ck, v, u = a[k], b[k], c[k], Y[k], T[k]
        for i in range(n):
            x[i] += ak * v[i]
            p[i] += bk * v[i]
            r[i] += ck * u[i]
        k += 1


GRAM_CHUNK = 256   # entries of each row a Gram pass keeps in L1 (2 KB: 18 rows, s = 4, fill 36 of 48 KB)


@numba.njit(cache=True, nogil=True, **NO_REFCOUNT)
def gram(T, Y, used, lanes, out, first):
    """The upper triangle of ``T^T Y`` over the first ``used`` rows, its columns from
    ``first`` on, into ``out``, column after column (``T_a . Y_b``, ``a <= b``, at
    ``b (b + 1) / 2 - first (first + 1) / 2 + a``); ``lanes``, scratch of at least that
    many rows of eight.  (An s-step CG block's whole Gram matrix: ``first = 0``; an
    s-step GMRES block's new columns against the whole basis: ``first`` the first new.)  Every row is read once from memory: in chunks
    of :data:`GRAM_CHUNK` entries, on which every dot takes its part from L1, two rows
    by two columns at a time (four independent sums).  Each dot is eight lane sums, each
    over the chunks in order, then added as :func:`dot` adds them: its bits depend on the
    chunk, not on where the code is compiled.  (Row by row from L2, as
    :func:`project_two`, it took 3x as long at 4,096 unknowns: bandwidth.)"""
    n = Y.shape[1]
    whole = n - n % 8
    base = first * (first + 1) // 2
    count = used * (used + 1) // 2 - base
    for k in range(count):
        for q in range(8):
            lanes[k, q] = 0.0
    for lo in range(0, whole, GRAM_CHUNK):
        hi = min(lo + GRAM_CHUNK, whole)
        for b in range(first, used, 2):
            c = min(b + 1, used - 1)          # the columns b and c (c = b at an odd end)
            u, w = Y[b][lo:hi], Y[c][lo:hi]
            for a in range(0, c + 1, 2):
                d = min(a + 1, c)             # the rows a and d
                (p0, p1, p2, p3, p4, p5, p6, p7, q0, q1, q2, q3, q4, q5, q6, q7,
                 r0, r1, r2, r3, r4, r5, r6, r7, t0, t1, t2, t3, t4, t5, t6, t7) = \
                    lane_sums_grid(T[a][lo:hi], T[d][lo:hi], u, w)
                if a <= b:                    # (a row past b: an odd first's last pair)
                    _add_lanes(lanes, b * (b + 1) // 2 - base + a, p0, p1, p2, p3, p4, p5, p6, p7)
                if c > b:
                    _add_lanes(lanes, c * (c + 1) // 2 - base + a, q0, q1, q2, q3, q4, q5, q6, q7)
                if a < d <= b:
                    _add_lanes(lanes, b * (b + 1) // 2 - base + d, r0, r1, r2, r3, r4, r5, r6, r7)
                if d > a and c > b:
                    _add_lanes(lanes, c * (c + 1) // 2 - base + d, t0, t1, t2, t3, t4, t5, t6, t7)
    for b in range(first, used):
        for a in range(b + 1):
            k = b * (b + 1) // 2 - base + a
            ta, yb = T[a], Y[b]
            for j in range(whole, n):
                lanes[k, 0] += ta[j] * yb[j]
            out[k] = lanes_total(lanes[k, 0], lanes[k, 1], lanes[k, 2], lanes[k, 3], lanes[k, 4], lanes[k, 5],
                                 lanes[k, 6], lanes[k, 7])


@numba.njit(cache=True, nogil=True, inline="always", **NO_REFCOUNT)
def _add_lanes(lanes, k, s0, s1, s2, s3, s4, s5, s6, s7):
    lanes[k, 0] += s0
    lanes[k, 1] += s1
    lanes[k, 2] += s2
    lanes[k, 3] += s3
    lanes[k, 4] += s4
    lanes[k, 5] += s5
    lanes[k, 6] += s6
    lanes[k, 7] += s7
