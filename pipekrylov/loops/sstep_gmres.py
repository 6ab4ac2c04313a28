"""s-step GMRES (communication-avoiding GMRES: Hoemmen 2010, Mohiyuddin, Hoemmen, Demmel and
Yelick 2009, Yamazaki et al. 2014), right preconditioned as :mod:`.gmres`: one blocking
reduction per s iterations where the basis is well conditioned (docs/sstep.md).

A *block* of ``b <= s`` iterations extends the cycle's orthonormal basis ``Q_(k+1) =
[q_0, .., q_k]`` from its last vector with ``b`` applications of ``A M``, and no
reduction, into a Newton basis::

    v_0 = q_k,   v_(i+1) = (A M v_i - theta_i v_i + (c_i / sigma_(i-1)) v_(i-1)) / sigma_i

(``c_i`` is ``Im(theta)^2`` at the second step of a complex conjugate pair of shifts,
which keeps the arithmetic real, else 0), then one reduction of ``[Q_(k+1)^T V; V^T V]``
(``V = [v_1, .., v_b]``: the new columns of the basis's Gram matrix), orthogonalizes V
against Q by block classical Gram-Schmidt and within itself by a Cholesky factor of
``V^T V - C^T C`` (``C = Q^T V``: Pythagoras, CholQR), and makes the Hessenberg matrix's
``b`` new columns from that factor and the shifts' change of basis: with ``W = [v_0, ..,
v_(b-1)]`` and ``[v_0, .., v_b] = Q R_V``, ``A M W = [v_0, .., v_b] B``, so that::

    H[:, k:k+b] = (R_V B - H[:, :k] R_W[:k]) U^-1      (U = R_W[k:k+b]: upper triangular)

Each new column is then rotated and its residual estimate tested, as GMRES's: a test
that passes ends the cycle there, and ``x += M Q y`` (M applied once a cycle, as PETSc's
GMRES does).  The cycle's next starts from ``b - A x``; the norm tested at the top of a
cycle is the true residual's, and convergence is decided there only.

**The shifts** are the Ritz values of ``A M``: the eigenvalues of the Hessenberg matrix
of the solve's first ``min(restart, 2 s)`` iterations, in Leja order (a complex value
followed by its conjugate); the scale ``sigma`` is a quarter of their spread.  They are
estimated again from the first whole cycle, by the driver on rank 0 (numpy's eigvals)
and broadcast.  Until they are known the blocks are one unshifted step long: GMRES by
classical Gram-Schmidt, one reduction an iteration.  A :class:`~pipekrylov.Solver` keeps
them for its later solves with the same matrix.

**Loss of accuracy and of rank.**  Where a Cholesky pivot keeps less than
:data:`GOOD` of its column's squared norm (Pythagoras would lose digits, or the Newton
basis is ill conditioned), or where one pass would let the basis's loss of
orthogonality grow past :data:`LOSS_LIMIT` (the loop keeps an estimate over the cycle's
blocks, from rounding at its start: one pass multiplies it by up to ``||C U^-1||`` and
adds rounding's ``eps max G_ii / U_ii^2``), the block takes a second pass: the columns orthogonalized by the first
pass's factor are projected and factored again (CholQR2 with block Gram-Schmidt twice),
a second reduction.  Columns whose pivot is at rounding level (:data:`TINY`) are
dropped: the block ends before them (``result.short_blocks``) and later blocks are
halved (doubled back towards s after blocks that need one pass).  A block whose first
column is dropped has found an invariant subspace: the Hessenberg column's subdiagonal
is zero, a "happy" breakdown.  A pivot clearly negative after the second pass means the
basis is no longer orthonormal: the cycle ends before the block, and the next starts
from ``b - A x``.
"""
import numpy as np

from ..kernels.basis import add_combination, divide, gram, subtract_combination
from ..kernels.compile import hot
from ..runtime.layout import (ATOL, DONE, ESTIMATE, ITERATED, ITERATION, MAXITER, NONE, PRECONDITIONED,
                              RESUME, STOP_EVERY)
from ..runtime.operators import apply_operator, precondition
from ..runtime.reduce import allreduce
from ..runtime.steps import breakdown
from . import loop
from .gmres import INNER, RESIDUAL, ZERO, Restarted, _back_substitute, _breakdown, _inner_test, _rotate_column, begin_cycle

__all__ = ["sstep_gmres", "SStepGMRES", "MAX_S"]

MAX_S = 10
GOOD = 1e-2      # a pivot keeping less of its column's squared norm: a second pass
LOSS_LIMIT = 1e-10  # ... as where one pass would take the basis's loss of orthogonality (estimated) past this
ROUNDING = 2.2e-16
TINY = 1e-13     # a pivot keeping at most this: the column is lost (rounding's)

# the method's integers J
(S_MAX,       # s
 BLOCK,       # the length of the next blocks (s, halved after a lost column)
 KNOWN,       # 1 once the shifts are estimated
 ESTIMATED,   # the columns of the Hessenberg matrix they were estimated from
 COLUMN,      # the cycle's columns rotated and tested
 BUILT,       # the cycle's columns made (the basis has BUILT + 1 vectors)
 SHORT,       # blocks that lost columns
 SECOND,      # blocks that took a second pass
 J_SIZE) = range(9)
BETA, LOSS, S_SIZE = 0, 1, 2   # the cycle's first residual norm; the estimate of max |Q^T Q - I|
RESIDUAL_LABEL, GRAM_LABEL, AGAIN_LABEL = range(3)   # RESIDUAL_LABEL: gmres.begin_cycle's
W_NAMES = ("Q", "z", "w", "H", "Hu", "g", "cs", "sn", "y", "C", "C2", "G", "U", "U2", "RV", "X", "theta", "curv",
           "scale", "lanes", "coef", "J")


def workspace(n, s, m, preconditioned):
    """The loop's workspace for restart ``m`` and blocks of up to ``s`` iterations on
    ``n`` unknowns."""
    J = np.zeros(J_SIZE, np.int64)
    J[S_MAX] = J[BLOCK] = s
    count = s * (m + 1) + s * (s + 1) // 2   # a block's Gram columns at most
    scale = np.ones(s)
    return (np.zeros((m + 1, n)), np.zeros(n if preconditioned else 1), np.zeros(n),
            np.zeros((m + 1, m)), np.zeros((m + 1, m)), np.zeros(m + 1), np.zeros(m), np.zeros(m), np.zeros(m),
            np.zeros((m + 1, s)), np.zeros((m + 1, s)), np.zeros((s, s)), np.zeros((s, s)), np.zeros((s, s)),
            np.zeros((m + 1, s + 1)), np.zeros((m + 1, s)), np.zeros(s), np.zeros(s), scale,
            np.zeros((count, 8)), np.zeros(m + 1), J)


@loop
def sstep_gmres(W, x, b, S, I, F, hist, trace, A, P, R):
    Q, z, w, H, Hu, g, cs, sn, y, C, C2, G, U, U2, RV, X, theta, curv, scale, lanes, coef, J = W
    m = H.shape[1]
    iteration, resume = I[ITERATION], I[RESUME]
    event = NONE
    while True:
        if resume == RESIDUAL and J[ESTIMATED] < J[COLUMN] and (J[ESTIMATED] < min(m, 2 * J[S_MAX]) or
                                                                J[COLUMN] == m):
            event = ESTIMATE    # the shifts from more Ritz values: a whole cycle's, or 2 s at least
            break
        if resume != INNER:
            event, resume = begin_cycle(resume, iteration, A, x, b, w, coef, S, BETA, m, 2 * m + 2, Q[0], g, hist,
                                        trace, R, I, F)
            if event != NONE:
                break
            J[COLUMN] = J[BUILT] = 0
            S[LOSS] = ROUNDING
        if resume == INNER:
            event, iteration = _cycle(W, x, S, I, F, hist, trace, A, P, R, iteration)
            if event != NONE:
                break
            resume = RESIDUAL
            if I[STOP_EVERY] != 0:
                event = ITERATED
                break
    I[ITERATION] = iteration
    I[RESUME] = resume
    return event


@loop
def _cycle(W, x, S, I, F, hist, trace, A, P, R, iteration):
    """The cycle's columns from ``J[COLUMN]``, a block made wherever the columns made run
    out; ends the cycle (``x`` updated) where a column ends it.  Returns (event,
    iteration): NONE at the cycle's end."""
    Q, z, w, H, Hu, g, cs, sn, y, C, C2, G, U, U2, RV, X, theta, curv, scale, lanes, coef, J = W
    m = H.shape[1]
    s = J[S_MAX]
    event = NONE
    while True:
        j = J[COLUMN]
        if j == J[BUILT] and J[ESTIMATED] < min(m, 2 * s) <= j:   # the driver estimates the shifts
            event = ESTIMATE
            break
        if j == J[BUILT]:
            length = min(J[BLOCK] if J[KNOWN] != 0 else 1, m - j, I[MAXITER] - iteration)
            event = _block(W, S, I, F, trace, A, P, R, j, length)
            if event != NONE:
                break
            if J[BUILT] == j:   # no column: the basis lost orthogonality, the next cycle starts from b - A x
                _update(W, x, j, P, R, I, F)
                break
        estimate = _rotate_column(H, g, cs, sn, j, ZERO)
        if estimate < 0.0:   # A M singular on the Krylov space: the columns before's update
            _update(W, x, j, P, R, I, F)
            event = breakdown(0, 0.0, I, F)
            break
        iteration += 1
        I[DONE] = iteration
        j += 1
        J[COLUMN] = j
        happy = Hu[j, j - 1] <= 1e-14 * abs(H[j - 1, j - 1])
        if happy or j == m or iteration == I[MAXITER] or estimate <= F[ATOL]:
            _update(W, x, j, P, R, I, F)
            break
        event = _inner_test(estimate, hist, I, F)
        if event != NONE:
            break
    return event, iteration


@loop
def _block(W, S, I, F, trace, A, P, R, k, length):
    """A block of ``length`` columns from ``q_k``: the Newton basis, one reduction (two
    where the first pass loses accuracy), the basis's new vectors in ``Q[k+1:]`` and the
    Hessenberg matrix's new columns in ``Hu`` and ``H``; ``J[BUILT]`` the columns made."""
    Q, z, w, H, Hu, g, cs, sn, y, C, C2, G, U, U2, RV, X, theta, curv, scale, lanes, coef, J = W
    for i in range(length):
        v = Q[k + i]
        if I[PRECONDITIONED] != 0:
            precondition(P, v, z, R, -1, I, F)
            apply_operator(A, z, w, R, -1, I, F)
        else:
            apply_operator(A, v, w, R, -1, I, F)
        c = curv[i] / scale[i - 1] if i > 0 else 0.0
        _newton(Q[k + 1 + i], w, v, Q[k + i - 1] if i > 0 else v, theta[i], c, scale[i])
    event = _gram(Q, G, C, lanes, k, length, GRAM_LABEL, R, I, F, trace)
    if event != NONE:
        return event
    kept = _cholesky(G, C, U, k, length, GOOD)
    growth = _growth(C, U, X, k, length) if kept == length else np.inf
    loss = (S[LOSS] + ROUNDING * _conditioning(G, U, length)) * max(growth, 1.0)
    if loss <= LOSS_LIMIT:
        S[LOSS] = loss
        _orthonormalize(Q, C, U, k, length, coef)
        if length == J[BLOCK] and J[BLOCK] < J[S_MAX] and J[KNOWN] != 0:
            J[BLOCK] = min(J[S_MAX], 2 * J[BLOCK])
    else:   # a second pass on the columns the first can factor (the first, projected, at least)
        J[SECOND] += 1
        usable = _cholesky(G, C, U, k, length, TINY)
        if usable == 0:
            U[0, 0] = 1.0
            usable = 1
        _orthonormalize(Q, C, U, k, usable, coef)
        event = _gram(Q, G, C2, lanes, k, usable, AGAIN_LABEL, R, I, F, trace)
        if event != NONE:
            return event
        kept = _cholesky(G, C2, U2, k, usable, TINY)
        if k > 0 and kept < usable and U2[kept, kept] < -TINY * G[kept, kept]:
            J[SHORT] += 1   # Pythagoras failed twice: Q is no longer orthonormal, the cycle ends at q_k
            J[BLOCK] = max(1, J[BLOCK] // 2)
            return NONE
        _orthonormalize(Q, C2, U2, k, kept, coef)
        _compose(C, C2, U, U2, k, usable, kept)
        if 0 < kept < length:
            J[SHORT] += 1
            J[BLOCK] = max(1, J[BLOCK] // 2)
    columns = max(kept, 1)    # none kept: q_k's image lies in the basis's span, a zero subdiagonal
    _hessenberg(H, Hu, C, U, RV, X, theta, curv, scale, k, columns)
    J[BUILT] = k + columns
    return NONE


@loop
def _gram(Q, G, C, lanes, k, length, label, R, I, F, trace):
    """One reduction of the new columns ``Q[k+1 : k+1+length]``' dots with every vector
    before them and themselves: ``C = Q[:k+1] . V`` and ``G = V . V``."""
    used = k + 1 + length
    gram(Q, Q, used, lanes, R.send[0], k + 1)
    event = allreduce(R, 0, length * (k + 1) + length * (length + 1) // 2, label, I, F, trace)
    if event != NONE:
        return event
    base = (k + 1) * (k + 2) // 2
    for i in range(length):
        col = k + 1 + i
        at = col * (col + 1) // 2 - base
        for a in range(k + 1):
            C[a, i] = R.recv[0, at + a]
        for a in range(i + 1):
            G[a, i] = G[i, a] = R.recv[0, at + k + 1 + a]
    return NONE


@hot
def _newton(out, w, v, before, shift, curvature, scale):
    """``out = (w - shift v + curvature before) / scale``: a Newton step, scaled."""
    inverse = 1.0 / scale
    for i in range(out.shape[0]):
        out[i] = (w[i] - shift * v[i] + curvature * before[i]) * inverse


@hot
def _cholesky(G, C, U, k, length, threshold):
    """``U``, the Cholesky factor of ``G - C^T C`` (``C``'s rows 0..k), column by column;
    stops at the first pivot that keeps at most ``threshold`` of its column's ``G[i, i]``
    (that pivot left in ``U[i, i]``).  Returns the columns factored."""
    for i in range(length):
        for a in range(i + 1):
            value = G[a, i]
            for q in range(k + 1):
                value -= C[q, a] * C[q, i]
            for p in range(a):
                value -= U[p, a] * U[p, i]
            if a < i:
                U[a, i] = value / U[a, a]
            elif not value > threshold * G[i, i]:
                U[i, i] = value   # the pivot that failed, for the caller
                return i
            else:
                U[i, i] = np.sqrt(value)
        for a in range(i + 1, length):
            U[a, i] = 0.0
    return length


@hot
def _growth(C, U, K, k, length):
    """The largest column norm of ``K = C U^-1``: after one pass, ``Q^T Q_new = -(Q^T Q -
    I) K`` (Swirydowicz et al.'s analysis of block Gram-Schmidt), so that the basis's loss
    of orthogonality grows by up to that factor."""
    largest = 0.0
    for i in range(length):
        norm = 0.0
        for a in range(k + 1):
            value = C[a, i]
            for j in range(i):
                value -= K[a, j] * U[j, i]
            K[a, i] = value / U[i, i]
            norm += K[a, i] * K[a, i]
        largest = max(largest, norm)
    return np.sqrt(largest)


@hot
def _conditioning(G, U, length):
    """``max G[i, i] / U[i, i]^2`` over the block: how much of each column one pass
    removes, squared, the factor rounding's error in Cholesky QR grows by (Yamamoto et
    al.: ``eps kappa^2``)."""
    largest = 1.0
    for i in range(length):
        largest = max(largest, G[i, i] / (U[i, i] * U[i, i]))
    return largest


@loop
def _orthonormalize(Q, C, U, k, length, coef):
    """``Q[k+1 : k+1+length] = (V - Q[:k+1] C) U^-1`` in place, row after row."""
    for i in range(length):
        for a in range(k + 1):
            coef[a] = C[a, i]
        for a in range(i):
            coef[k + 1 + a] = U[a, i]
        row = Q[k + 1 + i]
        subtract_combination(Q, coef, k + 1 + i, row)
        divide(row, U[i, i], row)


@hot
def _compose(C, C2, U, U2, k, usable, kept):
    """The two passes as one: ``V = Q (C + C2 U) + Q_new (U2 U)``, into ``C`` and ``U``
    (the first ``usable`` columns; ``U2 U`` on the ``kept`` ones, and ``U[0, 0] = 0``
    where none is kept)."""
    for i in range(usable):
        for a in range(k + 1):
            extra = 0.0
            for j in range(i + 1):
                extra += C2[a, j] * U[j, i]
            C[a, i] += extra
    for a in range(kept):   # top down, in place: row a reads rows a and below
        for i in range(kept - 1, a - 1, -1):
            value = 0.0
            for j in range(a, i + 1):
                value += U2[a, j] * U[j, i]
            U[a, i] = value
    if kept == 0:
        U[0, 0] = 0.0


@hot
def _hessenberg(H, Hu, C, U, RV, X, theta, curv, scale, k, columns):
    """The Hessenberg matrix's columns ``k .. k+columns-1``: ``(R_V B - H[:, :k] R_W[:k])
    U^-1`` (the module's docstring), into ``Hu`` and, to be rotated, ``H``."""
    rows = k + columns + 1
    for i in range(columns + 1):   # R_V: v_0 = q_k, v_i = Q[:k+1] C[:, i-1] + Q_new U[:, i-1]
        for r in range(rows):
            RV[r, i] = 0.0
        if i == 0:
            RV[k, 0] = 1.0
        else:
            for r in range(k + 1):
                RV[r, i] = C[r, i - 1]
            for a in range(i):
                RV[k + 1 + a, i] = U[a, i - 1]
    for i in range(columns):
        for r in range(rows):   # A M v_i = sigma_i v_(i+1) + theta_i v_i - (c_i / sigma_(i-1)) v_(i-1)
            value = scale[i] * RV[r, i + 1] + theta[i] * RV[r, i]
            if i > 0 and curv[i] != 0.0:
                value -= curv[i] / scale[i - 1] * RV[r, i - 1]
            for q in range(k):
                value -= Hu[r, q] * RV[q, i]
            X[r, i] = value
        for a in range(i):   # X U^-1, U = RV[k:k+columns, :columns]
            u = RV[k + a, i]
            for r in range(rows):
                X[r, i] -= X[r, a] * u
        d = RV[k + i, i]
        for r in range(rows):
            X[r, i] /= d
        for r in range(H.shape[0]):
            value = X[r, i] if r < rows else 0.0
            Hu[r, k + i] = value
            H[r, k + i] = value


@loop
def _update(W, x, k, P, R, I, F):
    """``x += M Q_k y`` with ``R_k y = g_k``: the cycle's least-squares update over its
    first ``k`` columns (M applied once, to ``Q_k y``)."""
    Q, z, w, H, Hu, g, cs, sn, y, C, C2, G, U, U2, RV, X, theta, curv, scale, lanes, coef, J = W
    _back_substitute(H, g, k, y)
    if I[PRECONDITIONED] != 0:
        _combination(Q, y, k, w)
        precondition(P, w, z, R, -1, I, F)
        _add(z, x)
    else:
        add_combination(Q, y, k, x)


@hot
def _combination(Q, y, k, out):
    """``out = Q_k y``."""
    for i in range(out.shape[0]):
        out[i] = 0.0
    add_combination(Q, y, k, out)


@hot
def _add(z, x):
    """``x += z``."""
    for i in range(x.shape[0]):
        x[i] += z[i]


def estimate_shifts(Hu, columns, theta, curv, scale):
    """The Newton steps from the Ritz values of ``A M`` (the eigenvalues of the first
    ``columns`` columns' square Hessenberg matrix): s of them (``theta``'s length) in Leja
    order, each the farthest, by product of distances, from those before; a complex one
    followed by its conjugate (its second step's ``curv`` its imaginary part squared);
    every step scaled by a quarter of their spread.  False where the matrix is not finite
    (the steps unchanged)."""
    block = Hu[:columns, :columns]
    if not np.isfinite(block).all():
        return False
    try:
        ritz = np.linalg.eigvals(block)
    except np.linalg.LinAlgError:
        return False
    largest = np.abs(ritz).max()
    if largest == 0.0:
        return False
    ritz = np.where(np.abs(ritz.imag) <= 1e-10 * largest, ritz.real + 0j, ritz)
    candidates = ritz[ritz.imag >= 0.0]          # one of each conjugate pair
    s, steps, chosen = theta.shape[0], 0, []
    taken = np.zeros(candidates.shape[0], bool)
    while steps < s:
        if taken.all():   # fewer Ritz values than steps: through them again
            taken[:] = False
        if chosen:
            logs = np.log(np.maximum(np.abs(candidates[:, None] - np.array(chosen)[None, :]), 1e-300)).sum(axis=1)
        else:
            logs = np.abs(candidates)
        best = int(np.argmax(np.where(taken, -np.inf, logs)))
        taken[best] = True
        value = candidates[best]
        theta[steps], curv[steps] = value.real, 0.0
        chosen.append(value)
        steps += 1
        if value.imag > 0.0 and steps < s:
            theta[steps], curv[steps] = value.real, value.imag ** 2
            chosen.append(np.conj(value))
            steps += 1
    spread = np.abs(ritz[:, None] - ritz[None, :]).max()
    scale[:] = 0.25 * spread if spread > 1e-8 * largest else largest
    return True


class SStepGMRES(Restarted):
    """s-step GMRES(``restart``)'s loop (see the module's docstring): blocks of ``s``
    iterations, one reduction each."""

    def __init__(self, s=4, restart=30):
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or not 1 <= s <= MAX_S:
            raise ValueError(f"s must be an integer from 1 to {MAX_S}, got {s!r}")
        if int(restart) < 1:
            raise ValueError(f"restart must be positive, got {restart}")
        from ..solvers.solver import BUFFERED
        self.s, self.restart = int(s), int(restart)
        count = self.s * (self.restart + 1) + self.s * (self.s + 1) // 2
        super().__init__(f"s({self.s})-gmres", sstep_gmres, ["||r||", "Gram columns", "Gram columns again"],
                         self._workspace, S_SIZE, _breakdown, width=max(count, 2),
                         norms=self.restart + 1, reductions=3 * (1 + self.restart // BUFFERED))

    @property
    def key(self):
        return f"s({self.s})-gmres restart={self.restart}"

    def with_restart(self, restart):
        return SStepGMRES(self.s, restart)

    def _workspace(self, n, preconditioned):
        return workspace(n, self.s, self.restart, preconditioned)

    def event(self, solver, run, event):
        """ESTIMATE: the shifts from the Hessenberg matrix's columns so far (the loop
        resumes where it stopped)."""
        if event != ESTIMATE:
            return super().event(solver, run, event)
        names = dict(zip(W_NAMES, solver.W))
        J, theta, curv, scale = names["J"], names["theta"], names["curv"], names["scale"]
        columns = int(J[COLUMN])
        # rank 0's: LAPACK on another CPU may round otherwise, and the shifts steer every rank's branches
        packed = np.zeros(1 + 3 * self.s)
        if solver.comm.Get_rank() == 0:
            packed[0] = estimate_shifts(names["Hu"], columns, theta, curv, scale)
            packed[1:] = np.concatenate([theta, curv, scale])
        solver.comm.Bcast(packed, root=0)
        if packed[0]:
            theta[:], curv[:], scale[:] = np.split(packed[1:], 3)
            J[KNOWN] = 1
        J[ESTIMATED] = columns   # not again from these columns, estimated or not

    def prepare(self, solver):
        """Each solve starts its own blocks; the shifts are the solver's while its matrix
        is the same."""
        names = dict(zip(W_NAMES, solver.W))
        J, theta, curv, scale = names["J"], names["theta"], names["curv"], names["scale"]
        J[BLOCK], J[SHORT], J[SECOND], J[COLUMN] = self.s, 0, 0, 0
        kept = getattr(solver, "sstep_shifts", None)
        if kept is not None and kept[0] is solver.A_operands:
            theta[:], curv[:], scale[:] = kept[1]
            J[KNOWN], J[ESTIMATED] = 1, kept[2]
        else:
            theta[:], curv[:], scale[:] = 0.0, 0.0, 1.0
            J[KNOWN] = J[ESTIMATED] = 0

    def report(self, solver):
        names = dict(zip(W_NAMES, solver.W))
        J, theta, curv, scale = names["J"], names["theta"], names["curv"], names["scale"]
        shifts = None
        if J[KNOWN]:
            solver.sstep_shifts = (solver.A_operands, (theta.copy(), curv.copy(), scale.copy()), int(J[ESTIMATED]))
            shifts = []
            for i, (t, c) in enumerate(zip(theta, curv)):   # a pair's first step: curv on its second
                pair = curv[i + 1] if i + 1 < len(curv) else 0.0
                shifts.append(complex(t, np.sqrt(pair)) if pair else complex(t, -np.sqrt(c)) if c else float(t))
        return {"s": self.s, "short_blocks": int(J[SHORT]), "second_passes": int(J[SECOND]), "shifts": shifts}
