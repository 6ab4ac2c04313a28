"""Pipelined flexible GMRES (Sanan, Schnepp and May's p1-FGMRES, PETSc's KSPPIPEFGMRES):
restarted GMRES, right preconditioned by an M that may change from one application to
the next, with each step's one reduction overlapped with an application of M and of A.

The iteration keeps three bases: ``V`` (orthonormal), ``U`` (``u_j``, what M made of the
basis) and ``Z`` (``z_j = A u_j - sigma v_j``).  Step j reduces ``V_(j+1)^T z_j`` and
``||z_j||^2`` while it computes ``q = M z_j`` and ``w = A q``; then, with ``c`` the
reduction's projections and ``h = sqrt(||z_j||^2 - ||c||^2)`` (Pythagoras, V orthonormal)::

    v_(j+1) = (z_j - V c) / h
    u_(j+1) = (q - U c) / h
    z_(j+1) = (w - Z c') / h,   c' = c but c'_j = c_j + sigma
    H[:, j] = (c', h)          (A u_j = V_(j+2) H[:, j])

so that ``z_(j+1) = A u_(j+1) - sigma v_(j+1)`` holds by the recurrences whatever M
did: ``u_(j+1)`` is whatever M made, and x moves by ``U_k y`` (``R_k y = g_k``, H rotated by
Givens) at a cycle's end.

**The shift.**  ``sigma`` keeps ``z_j`` away from the span of V: without it ``A u_j`` may
lie nearly in it, and Pythagoras's subtraction cancels.  It must be of the scale of
``A M``: PETSc's default, 1, with ``A M`` scaled by 1e-6 (scipy's test of a badly scaled
M) leaves ``z_j ~ -v_j`` and every cycle ends in a square-root breakdown.  PETSc's
heuristic is the largest eigenvalue of ``A M``, which the user must find.  By default
(``"auto"``) each cycle makes ``z_0 = A u_0`` unshifted and takes ``sigma = ||A u_0||``
from its first reduction (a value of ``A M``'s scale, at no cost); the later ``z``'s are
then shifted by sigma and the unshifted ``z_0`` costs one term, ``c_0 sigma v_0``, in
their recurrence.  A number given is used as PETSc uses it.

A square root of a negative number (the recurrences lost V's orthogonality) ends the
cycle with the columns before it, and the next starts from ``b - A x``, as PETSc's does.
At a cycle's first step it can only be rounding's (Cauchy-Schwarz): ``z_0`` is then in
the span of ``v_0``, a happy breakdown.
The cycle's structure (its first residual, the test of the true residual at its top, the
estimates tested within it, the update) is classic GMRES's (:mod:`.gmres`).
"""
import numpy as np

from ..kernels import dot
from ..kernels.basis import add_combination, copy, divide, project, subtract_combination
from ..kernels.compile import hot
from ..runtime.layout import (ATOL, DONE, ITERATED, ITERATION, MAXITER, NANORINF, NONE, PRECONDITIONED, RESTARTS,
                              RESUME, STOP_EVERY)
from ..runtime.operators import apply_operator, precondition
from ..runtime.reduce import start, wait
from ..runtime.steps import breakdown
from ..solvers.result import Breakdown
from . import loop
from .gmres import INNER, RESIDUAL, ZERO, Restarted, _back_substitute, _inner_test, _rotate_column, begin_cycle

__all__ = ["PipeFGMRES", "pipefgmres"]

ZERO_COLUMN = 0     # the breakdown check
# ||z||^2 - ||c||^2 below zero by at most this of ||z||^2 is rounding's: h = 0 (PETSc
# clamps at an absolute 1e-10; relative here, as ||z|| scales with A)
ROUNDING = 1e-14
# the scalars kept in S: the cycle's step, its first residual, sigma, whether sigma is the cycle's ||A u_0||
(J, BETA, SHIFT, AUTO, S_SIZE) = range(5)


@loop
def pipefgmres(W, x, b, S, I, F, hist, trace, A, P, R):
    V, U, Z, q, w, H, g, cs, sn, c, y, coef, out = W
    m = H.shape[1]
    preconditioned = I[PRECONDITIONED] != 0
    iteration, resume = I[ITERATION], I[RESUME]
    j = int(S[J])
    event = NONE
    while True:
        if resume != INNER:
            event, resume = begin_cycle(resume, iteration, A, x, b, w, out, S, BETA, m, m + 2, V[0], g, hist, trace,
                                        R, I, F)
            if event != NONE:
                break
            _fill(V, U, Z, 0.0 if S[AUTO] != 0.0 else S[SHIFT], A, P, R, I, F, preconditioned)
            j = 0
        if resume == INNER:
            event, j, iteration = _steps(W, x, S, I, F, hist, trace, A, P, R, j, iteration, preconditioned)
            if event != NONE:
                break

            _update(W, x, j, preconditioned)   # the cycle's end
            resume = RESIDUAL
            if I[STOP_EVERY] != 0:
                event = ITERATED
                break
    I[ITERATION] = iteration
    I[RESUME] = resume
    S[J] = j
    return event


@loop
def _fill(V, U, Z, sigma, A, P, R, I, F, preconditioned):
    """The pipeline's fill: ``u_0 = M v_0``, ``z_0 = A u_0 - sigma v_0``."""
    if preconditioned:
        precondition(P, V[0], U[0], R, -1, I, F)
        apply_operator(A, U[0], Z[0], R, -1, I, F)
    else:
        apply_operator(A, V[0], Z[0], R, -1, I, F)
    _axpy(Z[0], -sigma, V[0])


@loop
def _steps(W, x, S, I, F, hist, trace, A, P, R, j, iteration, preconditioned):
    """A cycle's steps from step ``j`` (``z_j`` made), one reduction each, overlapped with
    ``q = M z_j`` and ``w = A q``.  Returns (event, the step to resume at or the cycle's
    columns, iteration)."""
    V, U, Z, q, w, H, g, cs, sn, c, y, coef, out = W
    m = H.shape[1]
    auto = S[AUTO] != 0.0
    event = NONE
    while j < m and iteration < I[MAXITER]:
        project(V, j + 1, Z[j], R.send[0])
        R.send[0, j + 1] = dot(Z[j], Z[j])
        start(R, 0, j + 2, 1, I, F, trace)
        if preconditioned:
            precondition(P, Z[j], q, R, 0, I, F)
            apply_operator(A, q, w, R, 0, I, F)
        else:
            apply_operator(A, Z[j], w, R, 0, I, F)
        event = wait(R, 0, I, F, trace)
        if event != NONE:
            break
        removed = 0.0
        for k in range(j + 1):
            c[k] = R.recv[0, k]
            removed += c[k] * c[k]
        square = R.recv[0, j + 1] - removed
        if not np.isfinite(square):
            event = NANORINF
            break
        # below zero at step 0 (Cauchy-Schwarz), or by a little later, it is rounding's:
        # z_j in the span of V, a happy breakdown (A M v_0 parallel to v_0 at step 0)
        if square < 0.0 and (j == 0 or square >= -ROUNDING * R.recv[0, j + 1]):
            square = 0.0
        if square < 0.0:   # V lost its orthogonality: the cycle ends with its columns so far
            I[RESTARTS] += 1
            break
        h = np.sqrt(square)
        if auto and j == 0:   # z_0 = A u_0 unshifted: sigma = ||A u_0|| for the rest of the cycle
            S[SHIFT] = np.sqrt(R.recv[0, 1])
        sigma = S[SHIFT]
        for k in range(j):
            H[k, j] = c[k]
        H[j, j] = c[j] + (0.0 if auto and j == 0 else sigma)
        H[j + 1, j] = h
        _next(V, U, Z, q, w, c, j, sigma, auto, preconditioned)
        estimate = _rotate_column(H, g, cs, sn, j, ZERO)
        if estimate < 0.0:   # A (or A M) singular on the Krylov space: the columns before's update
            _update(W, x, j, preconditioned)
            event = breakdown(ZERO_COLUMN, 0.0, I, F)
            break
        iteration += 1
        j += 1
        I[DONE] = iteration
        happy = h <= 1e-14 * abs(H[j - 1, j - 1])
        if not happy:
            divide(V[j], h, V[j])
            if preconditioned:
                divide(U[j], h, U[j])
            divide(Z[j], h, Z[j])
        if happy or j == m or iteration == I[MAXITER] or estimate <= F[ATOL]:
            break
        event = _inner_test(estimate, hist, I, F)
        if event != NONE:
            break
    return event, j, iteration


@loop
def _next(V, U, Z, q, w, c, j, sigma, auto, preconditioned):
    """``v_(j+1) = z_j - V c``, ``u_(j+1) = q - U c`` and ``z_(j+1) = w - Z c'``, not yet
    divided by h (unpreconditioned, U is V and q is z_j: no u).  Where sigma is the
    cycle's own (``auto``), ``z_0`` was made unshifted: ``z_(j+1)`` gains ``c_0 sigma v_0``
    to be ``A u_(j+1) - sigma v_(j+1)``."""
    copy(Z[j], V[j + 1])
    subtract_combination(V, c, j + 1, V[j + 1])
    if preconditioned:
        copy(q, U[j + 1])
        subtract_combination(U, c, j + 1, U[j + 1])
    first = c[0]
    c[j] += sigma
    copy(w, Z[j + 1])
    subtract_combination(Z, c, j + 1, Z[j + 1])
    if auto:
        _axpy(Z[j + 1], first * sigma, V[0])


@hot
def _axpy(y, a, x):
    """``y += a x``."""
    for i in range(y.shape[0]):
        y[i] += a * x[i]


@loop
def _update(W, x, k, preconditioned):
    """x += U_k y (V_k y unpreconditioned) with R_k y = g_k: the least-squares update of the
    cycle's first k columns."""
    V, U, Z, q, w, H, g, cs, sn, c, y, coef, out = W
    if k == 0:
        return
    _back_substitute(H, g, k, y)
    add_combination(U if preconditioned else V, y, k, x)


def _breakdown(check, value):
    return Breakdown("diverged_breakdown", "GMRES: zero column in the Hessenberg matrix")


class PipeFGMRES(Restarted):
    """Pipelined flexible GMRES(``restart``)'s loop (see the module's docstring), with the
    shift ``shift``: a number (PETSc's ``-ksp_pipefgmres_shift``, 1 by default there) or
    ``"auto"``, each cycle's ``||A u_0||``."""

    def __init__(self, restart=30, shift="auto"):
        from ..solvers.solver import BUFFERED
        if isinstance(restart, bool) or int(restart) != restart or restart < 1:
            raise ValueError(f"restart must be a positive integer, got {restart!r}")
        if shift != "auto":
            try:
                shift = float(shift)
            except (TypeError, ValueError):
                shift = np.nan
            if not np.isfinite(shift):
                raise ValueError(f"shift must be 'auto' or a finite number, got {shift!r}")
        self.restart, self.shift = int(restart), shift
        super().__init__("p-fgmres", pipefgmres, ["||r||", "V^T z, ||z||"], self._workspace, S_SIZE, _breakdown,
                         width=self.restart + 2, norms=self.restart + 1,
                         reductions=2 * (1 + self.restart // BUFFERED))

    @property
    def key(self):
        return f"p-fgmres restart={self.restart} shift={self.shift!r}"

    def with_restart(self, restart):
        return PipeFGMRES(restart, self.shift)

    def _workspace(self, n, preconditioned):
        m = self.restart
        return (np.zeros((m + 1, n)), np.zeros((m + 1, n) if preconditioned else (1, 1)), np.zeros((m + 1, n)),
                np.zeros(n), np.zeros(n), np.zeros((m + 1, m)), np.zeros(m + 1), np.zeros(m), np.zeros(m),
                np.zeros(m + 1), np.zeros(m), np.zeros(1), np.zeros(1))

    def prepare(self, solver):
        auto = self.shift == "auto"
        solver.S[J], solver.S[SHIFT], solver.S[AUTO] = 0.0, 0.0 if auto else self.shift, float(auto)

    def report(self, solver):
        return {"shift": self.shift if self.shift != "auto" else float(solver.S[SHIFT])}
