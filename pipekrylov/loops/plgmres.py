"""p(l)-GMRES: restarted GMRES with a pipeline of depth l (Ghysels, Ashby, Meerbergen &
Vanroose, SISC 2013), right preconditioned, one compiled function for every depth.

Arnoldi on ``B = A M`` carried out on the auxiliary basis of :mod:`pipekrylov.deep.basis`;
each iteration starts one reduction (the new ``z`` against every ``v`` and the last ``l``
``z``'s) and waits for the one started ``l`` iterations earlier::

    z_0 = b - A x;  start <z_0, z_0>
    it = 0 .. l-1  (fill)   z_(it+1) = (B - sigma_it) z_it;  start <z_(it+1), z_j>, j <= it+1
    it >= l, c = it-l+1, k = c-1:
        w = B z_it                                   # overlaps the reductions in flight
        (it = l: wait <z_0, z_0>: beta, the residual norm; z_0 .. z_l and w scaled by 1/beta)
        wait column c; finish G[:, c] (Cholesky step)
        H[:, k] = (G B[:, k] - H[:, :k] G[:k, k]) / G[k, k]      # from A M Z = Z B, Z = V G
        v_c = (z_c - V G[:c, c]) / G[c, c]
        z_(it+1) = (w - sum_r H[r, k] z_(r+l)) / H[k+1, k]
        start <z_(it+1), v_j> (j <= c), <z_(it+1), z_j> (c < j <= it+1)
        Givens rotation of H[:, k]: the residual estimate of iteration k+1
    x += M V_k y,  R_k y = g_k

``B`` (the matrix of the ``z`` recurrence) holds the shifts in its first ``l`` columns and
``H`` shifted down by ``l`` after that.  A cycle ends after ``m`` iterations, at
convergence (confirmed against ``b - A x``), at a lucky breakdown (``h_(k+1,k)`` ~ 0: the
solution is in the Krylov space), or at a basis breakdown (a square root that is not
positive: its driver restarts from the iterate reached); its reductions in flight are
completed first.  The shifts come from the solver (estimated once per Solver).
"""
import numpy as np

from ..kernels import dot, fused_kernel
from ..kernels.basis import add_combination, copy, divide, project, subtract_combination
from ..runtime.layout import (AFTER_TEST, ATOL, BEGIN, BREAKDOWN, CHECK, CONVERGED, DONE, FLUSH, FROM_X, HIST,
                              ITERATED, MAX_ITERATIONS, MAXITER, MPI_FAILED, NANORINF, NONE, PRECONDITIONED, RESTART,
                              RESUME, RNORM, STOP_AT_TEST, STOP_EVERY, TESTED, TOP, TRACE, VALUE)
from ..runtime.operators import apply_operator, precondition
from ..runtime.reduce import allreduce, drain, start, wait
from ..runtime.steps import confirm, tolerance
from . import loop
from .gmres import _back_substitute, _rotate_column

__all__ = ["plgmres", "workspace", "W_NAMES", "LABELS"]

residual = fused_kernel(["r = b - r"]).function

INNER, END, COLUMN = 6, 7, 8    # after an iteration's test; the cycle's end; an iteration's column of G
MOVED = 9                        # x moved to the cycle's iterate, reported to the callback: the outcome next
SQUARE_ROOT, ZERO_COLUMN, NO_DESCENT = 0, 1, 2  # the breakdown checks; a square root's restarts the cycle
FULL, NOT_CONFIRMED = 0, 1       # why a cycle ended without converging (J[CAUSE])
FIRST_LABEL, TRUE_LABEL = -1, -2
RISE = 10.0     # a cycle's update raising b - A x by this factor: its basis is lost
# A zero column: its rotated diagonal relative to its norm.  The columns come from the
# shifted basis's Gram matrix (a Cholesky-type recurrence), accurate to about sqrt(eps)
# times the basis's condition, not to eps as Arnoldi's: a singular A seen at 1 to 4
# ranks gave 1e-14 to 8e-8 where classic GMRES gives 1e-16.
ZERO = 1e-6
LUCKY = 1e-12   # a square root's argument below this fraction of ||z_c||^2: z_c is in the basis's span
LABELS = ("||r||", "true ||r||")
(DEPTH, IT, DONE_K, REPORT, CAUSE, FIRST, HAPPY, OUTCOME, J_SIZE) = range(9)   # the method's integers J
(BETA, NORM_A, S_SIZE) = range(3)   # and scalars S (NORM_A: ||A||_inf, 0 where unknown)
W_NAMES = ("Z", "V", "w", "mz", "H", "Rh", "g", "cs", "sn", "G", "sigma", "y", "bvec", "coef", "out", "true_r",
           "true_z", "J")


def workspace(n, depth, restart):
    m, l = restart, depth
    zeros = np.zeros
    return (zeros((m + 1, n)), zeros((m + 1, n)), zeros(n), zeros(n),   # Z, V, w, mz
            zeros((m + 1, m)), zeros((m + 1, m)), zeros(m + 1), zeros(m), zeros(m),   # H, R (rotated), g, cs, sn
            zeros((m + 2, m + 2)), zeros(l), zeros(m + 1), zeros(m + 2),           # G, sigma, y, bvec
            zeros(1), zeros(1), zeros(n), zeros(n), np.zeros(J_SIZE, np.int64))


@loop
def plgmres(W, x, b, S, I, F, hist, trace, A, P, R):
    Z, V, w, mz, H, Rh, g, cs, sn, G, sigma, y, bvec, coef, out, true_r, true_z, J = W
    m, l = H.shape[1], J[DEPTH]
    NS = l + 1
    preconditioned = I[PRECONDITIONED] != 0
    resume = I[RESUME]
    event = NONE
    it = J[IT]
    if resume == MOVED:
        event = _outcome(A, P, x, b, w, mz, preconditioned, S[BETA], S[NORM_A], true_r, true_z, R, I, F, trace, J)
        I[RESUME] = FROM_X
        return event
    if resume == BEGIN or resume == FROM_X:
        J[FIRST] = resume == BEGIN
        _fill(Z, w, mz, sigma, b, x, coef, out, preconditioned, l, I, F, trace, A, P, R, J)
        J[DONE_K], J[HAPPY] = 0, 0
        it = l
        resume = TOP
    while True:
        c, k = it - l + 1, it - l
        if resume == TOP:
            if I[HIST] + 1 > hist.shape[0] or I[TRACE] + 2 > trace.shape[0]:
                event = FLUSH
                break
            if it < m:   # w = B z_it, overlapping the reductions in flight
                _apply_b(A, P, Z[it], w, mz, preconditioned, R, c % NS, I, F)
            resume = COLUMN
            if it == l:   # the cycle's first residual, beta, and its test
                event = wait(R, 0, I, F, trace)
                if event != NONE:
                    break
                if J[FIRST] != 0:   # the solve's first reduction: ||b|| too
                    event = tolerance(R.recv[0, 1], I, F)
                    if event != NONE:
                        break
                S[BETA] = np.sqrt(max(R.recv[0, 0], 0.0))
                F[RNORM] = S[BETA]
                resume = AFTER_TEST
                if J[REPORT] != 0:
                    if I[STOP_AT_TEST] != 0:
                        event = TESTED
                        break
                    hist[I[HIST]] = S[BETA]
                    I[HIST] += 1
                    if not np.isfinite(S[BETA]):
                        event = NANORINF
                        break
        if resume == AFTER_TEST:   # the cycle's first residual: the true one, no confirmation
            if S[BETA] <= F[ATOL] or S[BETA] == 0.0:
                J[OUTCOME] = CONVERGED
                resume = END
                break
            _first_column(Z, V, w, G, g, S[BETA], l, m, it)
            resume = COLUMN
        if resume == INNER:   # after an estimate the driver reported
            if F[RNORM] <= F[ATOL] or J[HAPPY] != 0:
                J[OUTCOME] = CONVERGED
                resume = END
                break
            if I[DONE] >= I[MAXITER] or it + 1 >= m + l:
                J[OUTCOME] = NONE
                resume = END
                break
            it += 1
            resume = TOP
            continue
        # column c of G from its Gram entries, started l iterations ago
        slot = c % NS
        event = wait(R, slot, I, F, trace)
        if event != NONE:
            break
        gram = R.recv[slot]
        if c <= l:   # a fill column: its z's were not scaled yet
            for r in range(c + 1):
                gram[r] = gram[r] / (S[BETA] * S[BETA])
            first_gram = 0
        else:
            for r in range(c - l + 1):
                G[r, c] = gram[r]
            first_gram = c - l + 1
        square = _complete_column(G, c, first_gram, gram)
        # z_c in the span of v_0 .. v_(c-1) to rounding: the Krylov space is invariant
        # (a lucky breakdown: a 1 x 1 system's first column), and the last column of H
        # holds the solution (its h_(k+1,k) = 0); b - A x confirms it
        lucky = not square > 0 and abs(square) <= LUCKY * gram[c]
        if not square > 0 and not lucky:
            I[CHECK], F[VALUE] = SQUARE_ROOT, square
            J[OUTCOME] = BREAKDOWN
            resume = END
            break
        if lucky:
            G[c, c] = 0.0
        _hessenberg_column(G, H, sigma, k, l, bvec)
        if not lucky:   # v_c = (z_c - V G[:c, c]) / G[c, c]
            copy(Z[c], V[c])
            for r in range(c):
                bvec[r] = G[r, c]
            subtract_combination(V, bvec, c, V[c])
            divide(V[c], G[c, c], V[c])
        if it < m and not lucky:
            # z_(it+1) = (w - sum_r H[r, k] z_(r+l)) / H[k+1, k], and its Gram entries
            for r in range(k + 1):
                bvec[r] = H[r, k]
            subtract_combination(Z[l:], bvec, k + 1, w)
            divide(w, H[k + 1, k], Z[it + 1])
            slot = (it + 1) % NS
            project(V, c + 1, Z[it + 1], R.send[slot])
            for j in range(c + 1, it + 2):
                R.send[slot, j] = dot(Z[j], Z[it + 1])
            start(R, slot, it + 2, it + 1, I, F, trace)
        for r in range(k + 2):   # H itself stays unrotated for the next columns
            Rh[r, k] = H[r, k]
        estimate = _rotate_column(Rh, g, cs, sn, k, ZERO)
        if estimate < 0.0:
            I[CHECK], F[VALUE] = ZERO_COLUMN, 0.0
            J[OUTCOME] = BREAKDOWN
            resume = END
            break
        J[DONE_K] = k + 1
        I[DONE] += 1
        J[HAPPY] = lucky or not abs(H[k + 1, k]) > 1e-14 * abs(Rh[k, k])   # the solution is in the Krylov space
        F[RNORM] = estimate
        resume = INNER
        if I[STOP_AT_TEST] != 0:
            event = TESTED
            break
        hist[I[HIST]] = estimate
        I[HIST] += 1
        if not np.isfinite(estimate):
            event = NANORINF
            break
    J[IT] = it
    if resume == END and event == NONE:
        # the cycle ends: its reductions complete; x moves to the cycle's iterate
        event = drain(R, I, F, trace)
        if event == NONE:
            _update(V, Rh, g, y, w, mz, x, preconditioned, J[DONE_K], R, I, F, P)
            if I[STOP_EVERY] != 0 and J[DONE_K] > 0:   # the callback sees x after each cycle, as GMRES's
                I[RESUME] = MOVED
                return ITERATED
            event = _outcome(A, P, x, b, w, mz, preconditioned, S[BETA], S[NORM_A], true_r, true_z, R, I, F, trace, J)
        I[RESUME] = FROM_X
        return event
    if event != TESTED and event != FLUSH and event != MPI_FAILED:
        drain(R, I, F, trace)   # an error: the reductions in flight complete, on every rank alike
    I[RESUME] = resume
    return event


@loop
def _fill(Z, w, mz, sigma, b, x, coef, out, preconditioned, l, I, F, trace, A, P, R, J):
    """The cycle's fill: z_0 = b - A x, z_(j+1) = (B - sigma_j) z_j for j < l, each
    column's Gram entries started (the first with (b, b) in the solve's first cycle)."""
    NS = l + 1
    apply_operator(A, x, Z[0], R, -1, I, F)
    residual(b=b, r=Z[0], coef=coef, out=out)
    R.send[0, 0] = dot(Z[0], Z[0])
    count = 1
    if J[FIRST] != 0:
        R.send[0, 1] = dot(b, b)
        count = 2
    start(R, 0, count, FIRST_LABEL, I, F, trace)
    for j in range(l):
        _apply_b(A, P, Z[j], w, mz, preconditioned, R, j % NS, I, F)
        for i in range(w.shape[0]):
            Z[j + 1, i] = w[i] - sigma[j] * Z[j, i]
        project(Z, j + 2, Z[j + 1], R.send[(j + 1) % NS])
        start(R, (j + 1) % NS, j + 2, j + 1, I, F, trace)


@loop
def _first_column(Z, V, w, G, g, beta, l, m, it):
    """The fill's z_0 .. z_l (and w) scaled by 1 / beta; v_0 = z_0, G's column 0, g = beta e_0."""
    for j in range(l + 1):
        divide(Z[j], beta, Z[j])
    if it < m:
        divide(w, beta, w)
    copy(Z[0], V[0])
    for r in range(G.shape[0]):
        for q in range(G.shape[1]):
            G[r, q] = 0.0
    G[0, 0] = 1.0
    for q in range(g.shape[0]):
        g[q] = 0.0
    g[0] = beta


@loop
def _update(V, Rh, g, y, w, mz, x, preconditioned, done, R, I, F, P):
    """x += M V_done y with R y = g (the rotated Hessenberg's triangle)."""
    if done == 0:
        return
    _back_substitute(Rh, g, done, y)
    for j in range(w.shape[0]):
        w[j] = 0.0
    add_combination(V, y, done, w)
    if preconditioned:
        precondition(P, w, mz, R, -1, I, F)
        _add(x, mz)
    else:
        _add(x, w)


@loop
def _outcome(A, P, x, b, step, mstep, preconditioned, beta, norm_a, true_r, true_z, R, I, F, trace, J):
    """The event a cycle ends with: CONVERGED (confirmed against b - A x where the
    iterations moved x), BREAKDOWN, MAX_ITERATIONS, or RESTART (a full cycle, or a
    convergence b - A x did not confirm: J[CAUSE] says which).

    A cycle minimizes ||b - A x|| over its Krylov space, so its update cannot raise it
    above the cycle's first residual ``beta``.  Where b - A x says it did, by a lot or
    with x run off to where b - A x is rounding (``_lost``), the basis lost its
    orthogonality past repair (a singular A or M whose invariant space the shifted basis
    missed to rounding, say): the update (``step``, or M ``step`` in ``mstep``) is taken
    back and the solve ends in a named breakdown, x bounded, rather than restarting
    cycles that each add to x's null-space part.  A small rise near the attainable
    accuracy (hor_131 at rtol 1e-8: 2x) is kept and the next cycle goes on from it."""
    outcome = J[OUTCOME]
    if outcome == BREAKDOWN:
        return BREAKDOWN
    if outcome == CONVERGED:
        if J[DONE_K] == 0:
            return CONVERGED
        event = confirm(A, P, x, b, true_r, true_z, False, R, R.row.shape[0] - 1, TRUE_LABEL, I, F, trace)
        if event != NONE:
            return event
        if F[VALUE] > beta and _lost(x, F[VALUE], beta, norm_a, R, I, F, trace):
            _add(x, mstep if preconditioned else step, -1.0)
            I[CHECK] = NO_DESCENT
            return BREAKDOWN
        J[CAUSE] = NOT_CONFIRMED
        return RESTART
    if I[DONE] >= I[MAXITER]:
        return MAX_ITERATIONS
    J[CAUSE] = FULL
    return RESTART


@loop
def _lost(x, true, beta, norm_a, R, I, F, trace):
    """Whether a cycle that raised ||b - A x|| from ``beta`` to ``true`` lost its basis:
    a rise by RISE, or x so large that its rounding in A x (eps ||A|| ||x||) exceeds
    ``beta``.  Collective: one reduction, on this rare path only."""
    if true > RISE * beta:
        return True
    slot = R.row.shape[0] - 1
    R.send[slot, 0] = dot(x, x)
    if allreduce(R, slot, 1, TRUE_LABEL, I, F, trace) != NONE:
        return True
    return np.finfo(np.float64).eps * norm_a * np.sqrt(max(R.recv[slot, 0], 0.0)) > beta


@loop
def _add(x, step, sign=1.0):
    for i in range(x.shape[0]):
        x[i] += sign * step[i]


@loop
def _apply_b(A, P, z, w, mz, preconditioned, R, slot, I, F):
    """w = A M z (right preconditioning), poking the reduction in ``slot``."""
    if preconditioned:
        precondition(P, z, mz, R, slot, I, F)
        apply_operator(A, mz, w, R, slot, I, F)
    else:
        apply_operator(A, z, w, R, slot, I, F)


@loop
def _complete_column(G, c, first, gram):
    """Finish column ``c`` of ``G`` from Gram entries ``gram[r] = <z_c, z_r>`` for ``r =
    first .. c`` (rows above ``first`` set): forward substitution in index order, then
    ``G[c, c]`` as a square root.  Returns the square root's argument (not positive: a
    breakdown)."""
    for r in range(first, c):
        acc = 0.0
        for q in range(r):
            acc += G[q, r] * G[q, c]
        G[r, c] = (gram[r] - acc) / G[r, r]
    acc = 0.0
    for q in range(c):
        acc += G[q, c] * G[q, c]
    square = gram[c] - acc
    if square > 0:
        G[c, c] = np.sqrt(square)
    return square


@loop
def _hessenberg_column(G, H, sigma, k, l, b):
    """Column k of the Arnoldi matrix from ``H G = G B`` (columns 0..k+1 of G known):
    ``H[:, k] = (G B[:, k] - H[:, :k] G[:k, k]) / G[k, k]``."""
    c = k + 1
    for r in range(c + 1):
        b[r] = 0.0
    if k < l:          # A M z_k = z_(k+1) + sigma_k z_k
        b[k], b[k + 1] = sigma[k], 1.0
    else:              # A M z_k = sum_r H[r, k-l] z_(r+l)
        for r in range(k - l + 2):
            b[l + r] = H[r, k - l]
    for r in range(c + 1):
        acc = 0.0
        for q in range(c + 1):
            acc += G[r, q] * b[q]
        for q in range(k):
            acc -= H[r, q] * G[q, k]
        H[r, k] = acc / G[k, k]
