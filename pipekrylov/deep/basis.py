"""The small dense algebra behind deep pipelines: the basis change Z = V G.

A deep pipeline builds an auxiliary basis ``z_0, z_1, ...`` that runs ``l`` vectors
ahead of the orthonormal basis ``v_0, v_1, ...``:

    z_j = P_j(B) v_0        for j <= l,     P_j(t) = (t - sigma_0) ... (t - sigma_{j-1})
    z_j = P_l(B) v_{j-l}    for j >= l,

with ``B`` the (preconditioned) operator and ``sigma`` the shifts.  Both bases span the
same Krylov spaces, so ``Z = V G`` with ``G`` upper triangular.  The dot products of a
new ``z_c`` against the ``z``'s are entries of the Gram matrix ``Z^T Z = G^T G``; a
column of ``G`` follows from them by one step of a Cholesky factorization
(:func:`complete_column`).  Its diagonal is a square root, and in finite precision the
argument can turn negative: the square-root breakdown of p(l)-CG (:class:`SqrtBreakdown`).

:class:`BandedColumns` stores the columns: p(l)-CG needs only the last ``2l + 1`` rows
of the last few columns (its ``G`` is banded), p(l)-GMRES every row of one cycle.
"""
import numpy as np

__all__ = ["BandedColumns", "BasisBreakdown", "BasisDrift", "SqrtBreakdown", "complete_column", "in_order"]


class BasisBreakdown(ArithmeticError):
    """The auxiliary basis lost too much accuracy to go on: the solver restarts."""


class BasisDrift(ArithmeticError):
    """The auxiliary basis has begun to drift from its definition, while the iterate and
    the search ``direction`` are still sound: the solver continues from them."""

    def __init__(self, column, drift, direction):
        super().__init__(f"basis drift {drift:.1e} in column {column} of G")
        self.column, self.drift, self.direction = column, drift, direction


class SqrtBreakdown(BasisBreakdown):
    """The Gram matrix of the auxiliary basis stopped being numerically positive definite."""

    def __init__(self, column, value):
        super().__init__(f"square-root breakdown in column {column} of G: "
                         f"argument {value:.3e} <= 0")
        self.column, self.value = column, value


class BandedColumns:
    """An upper triangular matrix kept column by column: rows ``c - width + 1 .. c`` of
    the last ``keep`` columns.  Entries outside the band read as zero."""

    def __init__(self, width, keep):
        self.width, self.keep = int(width), int(keep)
        self.data = np.zeros((self.keep, self.width))
        self.newest = -1

    def new_column(self, c):
        """Start column ``c`` (zeroed); columns older than ``c - keep + 1`` are dropped."""
        self.data[c % self.keep] = 0.0
        self.newest = c

    def _index(self, r, c):
        if c > self.newest or c <= self.newest - self.keep:
            raise IndexError(f"column {c} is not stored (newest {self.newest}, keep {self.keep})")
        return c % self.keep, r - c + self.width - 1

    def __getitem__(self, rc):
        r, c = rc
        if r < 0 or r > c or r <= c - self.width:
            return 0.0
        i, j = self._index(r, c)
        return self.data[i, j]

    def __setitem__(self, rc, value):
        r, c = rc
        if r < 0 or r > c or r <= c - self.width:
            raise IndexError(f"G[{r}, {c}] is outside the band")
        i, j = self._index(r, c)
        self.data[i, j] = value

    def rows(self, c, lo, hi):
        """Rows ``lo .. hi-1`` of column ``c`` as an array (zeros outside the band)."""
        out = np.zeros(max(0, hi - lo))
        first = max(lo, c - self.width + 1, 0)
        last = min(hi, c + 1)
        if last > first:
            i, j = self._index(first, c)
            out[first - lo:last - lo] = self.data[i, j:j + last - first]
        return out


def in_order(a, b):
    """``a @ b`` summed in index order, as p(l)-CG's compiled loop sums it (BLAS's order
    depends on the CPU and the length)."""
    s = 0.0
    for i in range(len(a)):
        s += a[i] * b[i]
    return s


def complete_column(G, c, first_gram, gram):
    """Finish column ``c`` of ``G`` from Gram entries ``gram[i] = <z_c, z_(first_gram+i)>``
    (the last one ``<z_c, z_c>``); rows above ``first_gram`` must already be set.

    Uses ``<z_r, z_c> = sum_k G[k, r] G[k, c]`` for ``r = first_gram .. c``, solved
    for ``G[r, c]`` in order (forward substitution), then ``G[c, c]`` as a square root.
    Raises :class:`SqrtBreakdown` when its argument is not positive.
    """
    lo = max(0, c - G.width + 1)
    for i, r in enumerate(range(first_gram, c)):
        G[r, c] = (gram[i] - in_order(G.rows(r, lo, r), G.rows(c, lo, r))) / G[r, r]
    column = G.rows(c, lo, c)
    square = gram[-1] - in_order(column, column)
    if not square > 0:
        raise SqrtBreakdown(c, square)
    G[c, c] = np.sqrt(square)
