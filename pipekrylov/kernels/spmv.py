"""CSR kernels.

Index types were chosen by measurement (benchmarks/spmv.py): unsigned ``uint32`` column
indices and unsigned row pointers, because Numba adds a negative-index wraparound test to
every access through a signed index, and that test, not memory, bounded the signed loops.  Row pointers are ``uint32`` while a rank's block has fewer than
2^32 nonzeros (4 bytes less per row, as PETSc's 32-bit PetscInt), else ``uint64``.  The
inner loop is unrolled by two with two accumulators, as PETSc's
``PetscSparseDensePlusDot`` does.

Matrices from stencils have long runs of rows of equal length (a 5-point Laplacian: all
rows but the boundary ones hold 5 entries).  ``RowRuns`` records those runs and
``runs_kernel`` multiplies them with straight-line code per length, summed as a balanced
tree: no row-pointer loads, no inner loop, a short dependency chain (benchmarks/spmv.py
measures it against the unrolled loop).

Within those runs, the rows away from the stencil's boundaries also have their entries on
the same diagonals (column - row offsets).  ``RowRuns`` stores the values of such
*diagonal runs* a second time, by diagonal (entry j of row r at ``values[j, r]``, so that
diagonal j of consecutive runs is one stream in memory; 8 bytes per row and diagonal),
and the kernel then reads no column indices and no row pointers: each term is two
contiguous streams, and the loop vectorizes (benchmarks/spmv.py measures it against the
CSR runs).
The sums are the same balanced trees in the same column order, so the results are bit
for bit those of the CSR runs.
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


# ---------------------------------------------------------------- runs of equal length
MAX_FIXED = 9          # straight-line code for rows of 1..9 entries (a 3D 7-point or 2D 9-point row)
MIN_AVERAGE_RUN = 8    # with fewer rows per run on average the unrolled CSR loop is as fast
MIN_DIAGONAL_RUN = 16  # rows; shorter diagonal runs stay CSR runs (vectors too short to pay)


class RowRuns:
    """Maximal runs of consecutive rows with the same number of entries, some of them
    diagonal runs (the same column offsets in every row, values stored by diagonal).

    ``start`` holds each run's first row and, last, the number of rows; ``length`` the
    entries per row of each run; ``diagonal[g]`` whether run ``g`` is a diagonal run, its
    offsets then ``offsets[offset_ptr[g]:offset_ptr[g] + length[g]]`` and entry ``j`` of
    its row ``r`` in ``values[j, r]`` (zero outside diagonal runs).  ``RowRuns.of(...)``
    is None where runs are too short to pay (irregular matrices).
    """

    def __init__(self, start, length, diagonal, offsets, offset_ptr, values):
        self.start, self.length, self.diagonal = start, length, diagonal
        self.offsets, self.offset_ptr, self.values = offsets, offset_ptr, values

    @classmethod
    def of(cls, indptr, indices, data):
        indptr = np.asarray(indptr, dtype=np.int64)
        lengths = np.diff(indptr)
        if len(lengths) == 0:
            return None
        if len(lengths) < MIN_AVERAGE_RUN * (1 + np.count_nonzero(np.diff(lengths))):
            return None
        diagonal_row, group = _diagonal_groups(indptr, indices, lengths)
        rows = np.arange(len(lengths))
        new = np.ones(len(lengths), dtype=bool)
        new[1:] = ((lengths[1:] != lengths[:-1]) | (diagonal_row[1:] != diagonal_row[:-1])
                   | (diagonal_row[1:] & (group[1:] != group[:-1])))
        first = rows[new]
        start = np.append(first, len(lengths)).astype(np.int64)
        length = lengths[first].astype(np.int64)
        diagonal = diagonal_row[first]
        # values[j, r]: the j-th entry of row r of a diagonal run, so that diagonal j of
        # consecutive runs is one stream in memory
        values = np.zeros((int(length[diagonal].max(initial=0)), len(lengths)))
        offset_ptr = np.zeros(len(first), np.int64)
        offset_ptr[diagonal] = np.concatenate(([0], np.cumsum(length[diagonal])[:-1]))
        offsets = np.zeros(int(length[diagonal].sum()), np.int64)
        for g in np.flatnonzero(diagonal):
            a, b, k = indptr[start[g]], indptr[start[g + 1]], length[g]
            offsets[offset_ptr[g]:offset_ptr[g] + k] = indices[a:a + k].astype(np.int64) - start[g]
            values[:k, start[g]:start[g + 1]] = np.asarray(data[a:b]).reshape(-1, k).T
        return cls(start, length, diagonal.astype(np.uint8), offsets, offset_ptr, values)


def _diagonal_groups(indptr, indices, lengths):
    """Per row: whether it belongs to a diagonal run, and its group (rows of one group are
    consecutive and have the same column offsets)."""
    n, nnz = len(lengths), int(indptr[-1])
    offset = indices.astype(np.int64) - np.repeat(np.arange(n), lengths)
    entry_row_length = np.repeat(lengths, lengths)
    # entry j of row r against entry j of row r + 1 (when both rows are equally long)
    partner = np.arange(nnz) + entry_row_length
    differs = np.ones(nnz, dtype=bool)
    inside = partner < nnz
    differs[inside] = offset[inside] != offset[partner[inside]]
    count = np.concatenate(([0], np.cumsum(differs)))
    same_as_next = np.zeros(n, dtype=bool)
    same_as_next[:-1] = ((lengths[:-1] == lengths[1:]) & (lengths[:-1] > 0)
                         & (count[indptr[1:-1]] == count[indptr[:-2]]))
    begins = np.ones(n, dtype=bool)
    begins[1:] = ~same_as_next[:-1]
    group = np.cumsum(begins) - 1
    size = np.bincount(group)[group]
    return (size >= MIN_DIAGONAL_RUN) & (lengths >= 1) & (lengths <= MAX_FIXED), group


def _tree(terms):
    """A balanced sum: ((t0 + t1) + (t2 + t3)) + t4 ..."""
    while len(terms) > 1:
        terms = [f"({terms[j]} + {terms[j + 1]})" if j + 1 < len(terms) else terms[j]
                 for j in range(0, len(terms), 2)]
    return terms[0]


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
                  f"                    yq[q] = {_tree([f'd{j}[q] * x{j}[q]' for j in range(k)])}"]
    lines += ["            i = end",
              "            g += 1",
              "            continue",
              "        p = np.uint64(indptr[i])"]
    for k in range(1, max_fixed + 1):
        lines += [f"        {'if' if k == 1 else 'elif'} k == {k}:",
                  "            for r in range(i, end):",
                  f"                y[r] = {_tree([_entry(j) for j in range(k)])}",
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
                           for c in _CSRS], fastmath=False, noalias=True)
