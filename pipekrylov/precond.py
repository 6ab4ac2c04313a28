"""Preconditioners: Jacobi, block Jacobi with ILU(0)/IC(0) or with a few iterations of
CG (a preconditioner that changes from one application to the next, for the flexible
methods), and a user's operator.

A preconditioner applies ``z = M^{-1} r`` on this rank's slice (``apply(r, z)``, no
communication) and is set up collectively: a failure on any rank (a zero diagonal, a
zero pivot) raises :class:`PreconditionerFailure` on every rank, which the solvers turn
into ``info < 0`` with reason ``diverged_pc_failed``.

Each kind also gives a compiled loop its *operands* (:meth:`Preconditioner.operands`: a
namedtuple of its arrays) and registers their compiled apply with the runtime
(:func:`pipekrylov.runtime.operators.register`): a new preconditioner is one class here.
One whose apply only Python can run (a user's operator) gives operands that only the
interpreted loop applies.
"""
import re
import time
from collections import namedtuple

import numpy as np

from .kernels.compile import hot
from .kernels.fused import dot
from .kernels.spmv import INDEX, csr_matvec_rows, pointer_dtype
from .kernels.triangular import ilu0_factor, ilu0_solve
from .matrix.distributed import CSRBlock
from .parallel import RowPartition, raise_on_any
from .runtime.layout import FLAG, POKE_ROWS, RANKS
from .runtime.operators import register
from .runtime.reduce import poke

__all__ = ["Preconditioner", "Jacobi", "BlockJacobi", "BlockCG", "PreconditionerFailure", "make_preconditioner",
           "Identity", "PythonOperands"]


class PreconditionerFailure(ArithmeticError):
    """The preconditioner could not be built (zero pivot, zero diagonal)."""


PythonOperands = namedtuple("PythonOperands", "apply failures")
"""An operator only Python applies: ``apply(x, y)``; ``failures`` collects what it raised
on this rank (the solve raises it on every rank at its next reduction)."""


def _python_apply(P, x, y, R, slot, I, F):
    try:
        P.apply(x, y)
    except BaseException as exc:  # noqa: BLE001 - raised on every rank at the next reduction
        y[:] = x
        P.failures.append(exc)
        F[FLAG] = 1.0


class Preconditioner:
    """The base of a preconditioner: subclasses define ``apply(r, z)``; calling one applies
    it and keeps the time and the count."""

    time = 0.0
    count = 0
    name = "user"

    def __call__(self, r, z):
        t0 = time.perf_counter()
        self.apply(r, z)
        self.time += time.perf_counter() - t0
        self.count += 1
        return z

    def operands(self, failures):
        """The loop's operands: this kind's compiled ones where its ``apply`` is the
        class's own, else Python's (``failures`` collects what ``apply`` raises)."""
        return PythonOperands(self.apply, failures)

    def _own_apply(self, cls):
        return type(self).apply is cls.apply


class Identity(Preconditioner):
    """No preconditioner: z = r."""

    name = "none"

    def apply(self, r, z):
        z[:] = r

    def operands(self, failures):
        return DiagonalOperands(_NO_DIAGONAL) if self._own_apply(Identity) else super().operands(failures)


class Jacobi(Preconditioner):
    """z = D^{-1} r.  Collective setup."""

    name = "jacobi"

    def __init__(self, A):
        d = A.diagonal()
        zero = np.flatnonzero(d == 0)
        error = None
        if len(zero):
            error = PreconditionerFailure(f"Jacobi: zero diagonal in row {A.partition.start + zero[0]}")
        raise_on_any(A.comm, error)
        self.inverse_diagonal = 1.0 / d

    def apply(self, r, z):
        np.multiply(self.inverse_diagonal, r, out=z)

    def operands(self, failures):
        return DiagonalOperands(self.inverse_diagonal) if self._own_apply(Jacobi) else super().operands(failures)


class BlockJacobi(Preconditioner):
    """One block per rank, factored by ILU(0) or, for SPD matrices, IC(0).  Collective setup.

    IC(0) is computed as the ILU(0) of the symmetric block, whose U is D L^T, and fails
    on a nonpositive pivot; it is applied by the same two triangular solves.
    """

    def __init__(self, A, factor="ilu0"):
        if factor not in ("ilu0", "ic0"):
            raise ValueError(f"unknown block factorization {factor!r}: use 'ilu0' or 'ic0'")
        self.name = f"bjacobi-{factor}"
        block = CSRBlock(A.local_block())
        block.data = block.data.copy()  # factored in place; the matrix shares these arrays
        block.indptr = block.indptr.astype(np.int64)  # the factorization does signed arithmetic
        self.block = block
        n = block.shape[0]
        diag = np.full(n, -1, dtype=np.int64)
        rows = np.repeat(np.arange(n), np.diff(block.indptr))
        on_diagonal = np.flatnonzero(block.indices.astype(np.int64) == rows)
        diag[rows[on_diagonal]] = on_diagonal
        self.diag = diag
        failed_row = ilu0_factor(block.indptr, block.indices, block.data, diag, factor == "ic0")
        error = None
        if failed_row >= 0:
            kind = "nonpositive" if factor == "ic0" else "zero"
            error = PreconditionerFailure(f"{factor.upper()}: {kind} pivot in row "
                                          f"{A.partition.start + failed_row}")
        raise_on_any(A.comm, error)

    def apply(self, r, z):
        b = self.block
        ilu0_solve(b.indptr, b.indices, b.data, self.diag, r, z)

    def operands(self, failures):
        if not self._own_apply(BlockJacobi):
            return super().operands(failures)
        b = self.block
        return BlockJacobiOperands(b.indptr, b.indices, b.data, self.diag)


class BlockCG(Preconditioner):
    """One block per rank, solved approximately by ``iterations`` steps of Jacobi-
    preconditioned CG from zero (PETSc's ``-pc_type bjacobi -sub_ksp_type cg
    -sub_pc_type jacobi -sub_ksp_max_it k``).  A few CG steps are a polynomial in the
    block chosen by ``r`` itself: the preconditioner is not linear and changes from one
    application to the next, as a multigrid cycle with a Krylov smoother does.  CG and
    the pipelined CGs assume a fixed M and may stagnate with it; the flexible methods
    (:func:`pipekrylov.pipefcg`) do not.  For an SPD matrix (a nonpositive diagonal
    fails, collectively).  No communication."""

    def __init__(self, A, iterations=4):
        if isinstance(iterations, bool) or not isinstance(iterations, (int, np.integer)) or iterations < 1:
            raise ValueError(f"iterations must be a positive integer, got {iterations!r}")
        self.iterations = int(iterations)
        self.name = f"bjacobi-cg({self.iterations})"
        block = A.local_block()
        d = block.diagonal()
        bad = np.flatnonzero(~(d > 0))
        error = None
        if len(bad):
            error = PreconditionerFailure(f"block CG: nonpositive diagonal in row {A.partition.start + bad[0]}")
        raise_on_any(A.comm, error)
        n = block.shape[0]
        self.arrays = (block.indptr.astype(pointer_dtype(block.nnz)), block.indices.astype(INDEX),
                       block.data.astype(np.float64), 1.0 / d)
        self.scratch = np.zeros((4, n))

    def apply(self, r, z):
        P = BlockCGOperands(*self.arrays, self.scratch, self.iterations)
        rho = _cg_start(P, r, z)
        for step in range(self.iterations):
            rho = _cg_step(P, z, rho, step == self.iterations - 1)
            if not rho > 0.0:
                break

    def operands(self, failures):
        if not self._own_apply(BlockCG):
            return super().operands(failures)
        return BlockCGOperands(*self.arrays, self.scratch, self.iterations)


class _Operator(Preconditioner):
    """A user's M, applied to this rank's slice: ``z = apply(r)``."""

    def __init__(self, apply):
        self.apply_local = apply

    def apply(self, r, z):
        out = self.apply_local(r)
        # numpy would broadcast a scalar into z, read None as NaN: a breakdown far from its cause
        shape, kind = np.shape(out), getattr(out, "dtype", np.asarray(out).dtype).kind
        if shape != r.shape or kind not in "biuf":
            what = "None" if out is None else f"{type(out).__name__} of shape {shape}, dtype {np.asarray(out).dtype}"
            raise ValueError(f"M(r) returned {what}: it must return a real array of shape {r.shape}, "
                             f"like r (this rank's rows)")
        z[:] = out


# ---------------------------------------------------------------- the compiled applies
# No preconditioner and Jacobi are one kind, z = D^-1 r with D = I where no diagonal is
# given: a loop is compiled once per kind of operands it receives (15-80 s a loop on a
# first run), and the branch costs an apply nothing measurable.
DiagonalOperands = namedtuple("DiagonalOperands", "inverse_diagonal")
_NO_DIAGONAL = np.zeros(0)
BlockJacobiOperands = namedtuple("BlockJacobiOperands", "indptr indices data diag")
BlockCGOperands = namedtuple("BlockCGOperands", "indptr indices data inverse_diagonal scratch iterations")


@hot
def _diagonal(P, r, z, R, slot, I, F):
    n = r.shape[0]
    if P.inverse_diagonal.shape[0] == 0:
        for i in range(n):
            z[i] = r[i]
        return
    # chunks of I[POKE_ROWS] rows, poking the reduction in flight between two; slices
    # indexed from 0, so that the loop has no negative-index test and vectorizes
    step = I[POKE_ROWS] if slot >= 0 and I[RANKS] > 1 else n
    first = 0
    while first < n:
        last = min(n, first + step)
        zc, rc, dc = z[first:last], r[first:last], P.inverse_diagonal[first:last]
        for q in range(last - first):
            zc[q] = dc[q] * rc[q]
        if last < n:
            poke(R, slot, I)
        first = last


@hot
def _block_jacobi(P, r, z, R, slot, I, F):
    ilu0_solve(P.indptr, P.indices, P.data, P.diag, r, z)


@hot
def _block_cg(P, r, z, R, slot, I, F):
    rho = _cg_start(P, r, z)
    for step in range(P.iterations):
        rho = _cg_step(P, z, rho, step == P.iterations - 1)
        if not rho > 0.0:
            break
        poke(R, slot, I)


# CG on the block B from z = 0, in steps (Python's apply takes the same ones): a step
# stops where rho = (res, D^-1 res) is 0 (solved) or (p, B p) <= 0, so that z stays finite


@hot
def _cg_start(P, r, z):
    """z = 0, res = r, p = D^-1 r; returns rho."""
    res, p = P.scratch[0], P.scratch[2]
    rho = 0.0
    for i in range(r.shape[0]):
        z[i] = 0.0
        res[i] = r[i]
        p[i] = P.inverse_diagonal[i] * r[i]
        rho += res[i] * p[i]
    return rho


@hot
def _cg_step(P, z, rho, last):
    """One CG step (the next direction too, unless ``last``); returns the next rho, 0 to
    stop."""
    res, h, p, q = P.scratch[0], P.scratch[1], P.scratch[2], P.scratch[3]
    n = z.shape[0]
    if not rho > 0.0:
        return 0.0
    csr_matvec_rows(0, n, P.indptr, P.indices, P.data, p, q)
    pq = dot(p, q)
    if not pq > 0.0:
        return 0.0
    alpha = rho / pq
    for i in range(n):
        z[i] += alpha * p[i]
        res[i] -= alpha * q[i]
    if last:
        return 0.0
    rho_new = 0.0
    for i in range(n):
        h[i] = P.inverse_diagonal[i] * res[i]
        rho_new += res[i] * h[i]
    beta = rho_new / rho
    for i in range(n):
        p[i] = h[i] + beta * p[i]
    return rho_new


register(DiagonalOperands, _diagonal)
register(BlockJacobiOperands, _block_jacobi)
register(BlockCGOperands, _block_cg)
register(PythonOperands, None, _python_apply)


def make_preconditioner(M, A):
    """None, a name ('jacobi', 'ilu0', 'ic0', 'bjacobi', 'bjacobi-cg' or 'bjacobi-cg(k)': block
    Jacobi with k CG steps, 4 by default), a preconditioner or an operator.

    Operators: a DistributedCSR with A's rows (applied by its matvec); a scipy sparse
    matrix or 2-D array given whole (distributed like A, then applied by matvec); a
    scipy LinearOperator given whole (applied to the gathered vector, every rank keeping
    its rows: an Allgatherv per application); or a callable ``z = M(r)`` on this rank's
    slice.  Collective."""
    if M is None:
        return None
    if isinstance(M, str):
        name = M.lower()
        inner = re.fullmatch(r"bjacobi-cg(?:\((\d+)\))?", name)
        if name in ("jacobi", "ilu0", "ic0", "bjacobi") or inner:
            if not hasattr(A, "local_block"):   # an operator given whole: it has no entries
                raise ValueError(f"M={M!r} is made from A's entries, and A is an operator without them "
                                 f"({type(getattr(A, 'operator', A)).__name__}): give A as a matrix, or M as a "
                                 f"matrix, a LinearOperator or a callable z = M(r)")
        if name == "jacobi":
            return Jacobi(A)
        if name in ("ilu0", "ic0", "bjacobi"):
            return BlockJacobi(A, "ilu0" if name == "bjacobi" else name)
        if inner:
            return BlockCG(A, int(inner.group(1) or 4))
        raise ValueError(f"unknown preconditioner {M!r}: use 'jacobi', 'bjacobi', 'ilu0', 'ic0' or 'bjacobi-cg(k)'")
    if isinstance(M, Preconditioner):
        return M
    p, error = A.partition, None
    distributed = isinstance(getattr(M, "partition", None), RowPartition)
    shape = (M.partition.n, M.partition.n) if distributed else getattr(M, "shape", None)
    if shape is not None and tuple(shape) != (p.n, p.n):
        error = ValueError(f"M has shape {tuple(shape)}: it must be ({p.n}, {p.n}), the shape of A")
    elif distributed and (M.partition.start, M.partition.end) != (p.start, p.end):
        error = ValueError(f"M holds rows {M.partition.start}..{M.partition.end - 1} on this rank, A "
                           f"{p.start}..{p.end - 1}: distribute M with A's partition")
    elif shape is None and not callable(M):
        error = TypeError(f"M must be 'jacobi', 'ilu0', 'ic0', a matrix, a LinearOperator or a callable "
                          f"z = M(r), got {type(M).__name__}")
    raise_on_any(A.comm, error, "preconditioner")
    if distributed:
        return _Operator(lambda r: M.matvec(r))
    import scipy.sparse as sp
    if sp.issparse(M) or isinstance(M, np.ndarray):
        from .matrix.distributed import DistributedCSR
        D = DistributedCSR.from_scipy(sp.csr_matrix(M), A.comm, partition=p)
        return _Operator(lambda r: D.matvec(r))
    if shape is not None and hasattr(M, "matvec"):   # a LinearOperator given whole
        if A.comm.Get_size() == 1:
            return _Operator(lambda r: np.asarray(M.matvec(r)).ravel())
        return _Operator(lambda r: np.asarray(M.matvec(A.gather(r))).ravel()[p.start:p.end])
    return _Operator(M)
