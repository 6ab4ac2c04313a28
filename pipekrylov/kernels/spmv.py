"""CSR kernels.

Index types were chosen by measurement (benchmarks/spmv.py): unsigned ``uint32`` column
indices and unsigned row pointers, because Numba adds a negative-index wraparound test to
every access through a signed index, and that test, not memory, bounded the signed loops.  Row pointers are ``uint32`` while a rank's block has fewer than
2^32 nonzeros (4 bytes less per row, as PETSc's 32-bit PetscInt), else ``uint64``.  The
inner loop is unrolled by two with two accumulators, as PETSc's
``PetscSparseDensePlusDot`` does.

Matrices from stencils have long runs of rows of equal length (a 5-point Laplacian: all
rows but the boundary ones hold 5 entries).  ``RowRuns`` records those runs and
``runs_kernel`` multiplies them with straight-line code per length: no row-pointer loads,
no inner loop (benchmarks/spmv.py measures it against the unrolled loop).

Most rows of a stencil also have their entries on a few common diagonals (column - row
offsets).  ``RowRuns`` stores the values of such *diagonal runs* a second time, by
diagonal (entry j of row r at ``values[j, r]``, so that diagonal j of a run is one stream
in memory; 8 bytes per row and diagonal), and the kernel then reads no column indices
and no row pointers: each term is two contiguous streams, and the loop vectorizes.  A
row at a grid boundary lacks a diagonal or two: it is padded with zeros and stays in the
run, so a 2D or 3D Laplacian's block is one diagonal run between its first and last
grid lines, with no per-run cost at small sizes.  Every row sums its terms from the left
in column order, in both kinds of run, so a padded zero leaves the sum as it was: the
two give equal numbers (tested; a sum of -0.0 may come out +0.0).  (A padded zero times an
infinite or NaN ``x`` entry makes the row NaN where CSR would not read that entry.)
"""
import functools

import numpy as np

from .compile import compile_source, jit

INDEX = "uint32"


def pointer_dtype(nnz):
    """The row-pointer type for a block with ``nnz`` nonzeros."""
    return "uint32" if nnz < 2 ** 32 else "uint64"
_ONE, _TWO = np.uint64(1), np.uint64(2)

__all__ = ["csr_matvec", "csr_matvec_add_rows", "csr_matvec_rows", "gather", "INDEX", "pointer_dtype",
           "RowRuns", "runs_kernel", "runs_source"]

_CSRS = ["uint32[::1], uint32[::1], float64[::1]", "uint64[::1], uint32[::1], float64[::1]"]


@jit([f"void(int64, int64, {c}, float64[::1], float64[::1])" for c in _CSRS], fastmath=False, refcount=False)
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


@jit([f"void(int64[::1], {c}, float64[::1], float64[::1])" for c in _CSRS], fastmath=False, refcount=False)
def csr_matvec_add_rows(rows, indptr, indices, data, x, y):
    """y[rows[i]] += (B x)[i] for a CSR block B holding only the listed rows."""
    for i in range(rows.shape[0]):
        s = 0.0
        k = indptr[i]
        while k < indptr[i + 1]:
            s += data[k] * x[indices[k]]
            k += _ONE
        y[rows[i]] += s


@jit(["void(float64[::1], int64[::1], float64[::1])"], fastmath=False, refcount=False)
def gather(x, index, out):
    """out = x[index] (packing a halo send buffer without a temporary)."""
    for i in range(index.shape[0]):
        out[i] = x[index[i]]


# ---------------------------------------------------------------- runs of equal length
MAX_FIXED = 9          # straight-line code for rows of 1..9 entries (a 3D 7-point or 2D 9-point row)
MIN_AVERAGE_RUN = 8    # with fewer rows per run on average the unrolled CSR loop is as fast
MIN_DIAGONAL_RUN = 16  # rows; shorter diagonal runs stay CSR runs (vectors too short to pay)
MAX_PADDING = 0.125    # of a diagonal run's stored entries at most this share are zeros it adds


class RowRuns:
    """The rows in runs: diagonal runs (rows whose entries lie on a few common diagonals,
    values stored by diagonal) and, between them, runs of consecutive rows with the same
    number of entries.

    ``start`` holds each run's first row and, last, the number of rows; ``length`` the
    entries per row of each run (of a diagonal run: its diagonals); ``diagonal[g]``
    whether run ``g`` is a diagonal run, its offsets (column - row) then
    ``offsets[offset_ptr[g]:offset_ptr[g] + length[g]]`` and entry ``j`` of its row ``r``
    in ``values[j, r]``: zero where row ``r`` has no entry on diagonal ``j`` (a stencil's
    rows at a grid boundary; at most :data:`MAX_PADDING` of a run's entries).
    ``RowRuns.of(...)`` is None where runs are too short to pay (irregular matrices).
    """

    def __init__(self, start, length, diagonal, offsets, offset_ptr, values):
        self.start, self.length, self.diagonal = start, length, diagonal
        self.offsets, self.offset_ptr, self.values = offsets, offset_ptr, values

    @classmethod
    def of(cls, indptr, indices, data, ncols, diagonals=True):
        """The runs of a CSR block with ``ncols`` columns, its column indices sorted and
        unique in each row (``CSRBlock``'s are); without diagonal runs when ``diagonals``
        is False (runs of equal rows only)."""
        indptr = np.asarray(indptr, dtype=np.int64)
        n = len(indptr) - 1
        if n <= 0:
            return None
        indices = np.asarray(indices, dtype=np.int64)
        most_runs = n // MIN_DIAGONAL_RUN + 1       # runs do not overlap and hold MIN_DIAGONAL_RUN rows or more
        run_of = np.full(n, -1, np.int64)
        width, diagonals_of = np.zeros(most_runs, np.int64), np.zeros((most_runs, MAX_FIXED), np.int64)
        count = _diagonal_runs(indptr, indices, ncols, MIN_DIAGONAL_RUN, MAX_PADDING,
                               run_of, width, diagonals_of) if diagonals else 0
        lengths = np.diff(indptr)
        # a new run where a diagonal run begins or ends, or the row length changes outside them
        new = np.ones(n, dtype=bool)
        new[1:] = (run_of[1:] != run_of[:-1]) | ((run_of[1:] < 0) & (lengths[1:] != lengths[:-1]))
        start = np.flatnonzero(new)
        if n < MIN_AVERAGE_RUN * len(start):
            return None
        diagonal = run_of[start] >= 0
        length = lengths[start]
        length[diagonal] = width[:count]
        values = np.zeros((int(length[diagonal].max(initial=0)), n))
        offset_ptr = np.zeros(len(start), np.int64)
        offset_ptr[diagonal] = np.concatenate(([0], np.cumsum(length[diagonal])[:-1]))
        offsets = np.concatenate([diagonals_of[g, :width[g]] for g in range(count)] or [np.zeros(0, np.int64)])
        _diagonal_values(indptr, indices, np.asarray(data, dtype=np.float64), run_of, diagonals_of, values)
        return cls(np.append(start, n).astype(np.int64), length.astype(np.int64), diagonal.astype(np.uint8),
                   offsets, offset_ptr, values)


@jit(["int64(int64[::1], int64[::1], int64, int64, float64, int64[::1], int64[::1], int64[:, ::1])"],
     fastmath=False)
def _diagonal_runs(indptr, indices, ncols, min_run, max_padding, run_of, width, diagonals):
    """Find the diagonal runs, greedily: from row ``a``, take the next rows while the
    union of their offsets (column - row) holds at most ``diagonals.shape[1]`` diagonals,
    each inside the columns for every row of the run, and at most ``max_padding`` of the
    entries stored are zeros; keep runs of at least ``min_run`` rows.  Fills
    ``run_of`` (per row: its run, or -1), ``width`` and ``diagonals`` (per run: its
    number of diagonals, their sorted offsets; room for ``n // min_run + 1`` runs);
    returns the number of runs.  Each row's indices sorted and unique."""
    n = indptr.shape[0] - 1
    most = diagonals.shape[1]   # diagonals per run
    union = np.empty(most, np.int64)
    merged = np.empty(most, np.int64)
    count = 0
    a = 0
    while a < n:
        size = indptr[a + 1] - indptr[a]
        if size == 0 or size > most:
            a += 1
            continue
        for j in range(size):
            union[j] = indices[indptr[a] + j] - a
        entries = size
        b = a + 1
        while b < n:
            p, q = indptr[b], indptr[b + 1]
            if q == p or q - p > most:
                break
            # merged = union | offsets of row b (both sorted)
            i, t, s, fits = 0, p, 0, True
            while i < size or t < q:
                if t >= q or (i < size and union[i] < indices[t] - b):
                    v = union[i]
                    i += 1
                elif i >= size or indices[t] - b < union[i]:
                    v = indices[t] - b
                    t += 1
                else:
                    v = union[i]
                    i += 1
                    t += 1
                if s == most:
                    fits = False
                    break
                merged[s] = v
                s += 1
            if not fits or a + merged[0] < 0 or b + merged[s - 1] >= ncols:
                break
            stored = (b - a + 1) * s
            if stored - (entries + q - p) > max_padding * stored:
                break
            union[:s] = merged[:s]
            size = s
            entries += q - p
            b += 1
        if b - a >= min_run:
            run_of[a:b] = count
            width[count] = size
            diagonals[count, :size] = union[:size]
            count += 1
            a = b
        else:
            a += 1
    return count


@jit(["void(int64[::1], int64[::1], float64[::1], int64[::1], int64[:, ::1], float64[:, ::1])"],
     fastmath=False)
def _diagonal_values(indptr, indices, data, run_of, diagonals, values):
    """values[j, r] = the entry of row r on diagonal j of its run (zero where it has none)."""
    for r in range(indptr.shape[0] - 1):
        g = run_of[r]
        if g < 0:
            continue
        j = 0
        for p in range(indptr[r], indptr[r + 1]):
            while diagonals[g, j] != indices[p] - r:
                j += 1
            values[j, r] = data[p]


def _sum(terms):
    """Summed from the left, ((t0 + t1) + t2) + ...: a zero term (a diagonal run's
    padding) then leaves the sum as without it (up to the sign of a zero sum)."""
    return " + ".join(terms)


def _entry(j):
    offset = f" + np.uint64({j})" if j else ""
    return f"data[p{offset}] * x[indices[p{offset}]]"


def runs_source(max_fixed=MAX_FIXED):
    """The Python source of the run kernel (``print(runs_source())`` to read it)."""
    lines = ["import numpy as np", "",
             "def runs(first, last, start, length, diagonal, offsets, offset_ptr, values,",
             "         indptr, indices, data, x, y):",
             "    # y[first:last] = A[first:last] x, run by run",
             "    g = np.searchsorted(start, first, side='right') - 1",
             "    i = first",
             "    while i < last:",
             "        k = length[g]",
             "        end = min(start[g + 1], last)",
             "        if diagonal[g]:",
             "            # by diagonal: term j of row i + q is values[j, i + q] * x[i + offsets[j] + q];",
             "            # q counts from 0 so that Numba needs no negative-index test (which blocks SIMD)",
             "            o = offset_ptr[g]",
             "            yq = y[i:end]"]
    for k in range(1, max_fixed + 1):
        lines += [f"            {'if' if k == 1 else 'elif'} k == {k}:"]
        lines += [f"                d{j} = values[{j}, i:end]" for j in range(k)]
        lines += [f"                x{j} = x[i + offsets[o + {j}]:]" for j in range(k)]
        lines += ["                for q in range(end - i):",
                  f"                    yq[q] = {_sum([f'd{j}[q] * x{j}[q]' for j in range(k)])}"]
    lines += ["            i = end",
              "            g += 1",
              "            continue",
              "        p = np.uint64(indptr[i])"]
    for k in range(1, max_fixed + 1):
        lines += [f"        {'if' if k == 1 else 'elif'} k == {k}:",
                  "            for r in range(i, end):",
                  f"                y[r] = {_sum([_entry(j) for j in range(k)])}",
                  f"                p += np.uint64({k})"]
    lines += ["        else:  # longer rows: the unrolled loop of csr_matvec_rows",
              "            for r in range(i, end):",
              "                q = p + np.uint64(k)",
              "                s0 = 0.0",
              "                s1 = 0.0",
              "                while p + np.uint64(2) <= q:",
              f"                    s0 += {_entry(0)}",
              f"                    s1 += {_entry(1)}",
              "                    p += np.uint64(2)",
              "                if p < q:",
              f"                    s0 += {_entry(0)}",
              "                    p += np.uint64(1)",
              "                y[r] = s0 + s1",
              "        i = end",
              "        g += 1",
              ""]
    return "\n".join(lines)


@functools.cache
def runs_kernel():
    """The compiled run kernel ``(first, last, start, length, diagonal, offsets, offset_ptr,
    values, indptr, indices, data, x, y)``."""
    runs = "int64[::1], int64[::1], uint8[::1], int64[::1], int64[::1], float64[:, ::1]"
    return compile_source(runs_source(), "runs",
                          [f"void(int64, int64, {runs}, {c}, float64[::1], float64[::1])"
                           for c in _CSRS], fastmath=False, noalias=True, refcount=False)
