"""Classic restarted GMRES(m), right preconditioned, classical Gram-Schmidt run twice
(CGS2, the default) or once (CGS, PETSc's default): one blocking reduction per pass,
``V^T w``, with ``||w||`` in the last pass's (``||w - V c||^2 = ||w||^2 - ||c||^2``: V is
orthonormal); where that pass took much of w (``||c||^2`` above a quarter of
``||w||^2``, the subtraction would cancel) a third reduction measures ``||w||``.

    beta = ||b - A x||                    (a cycle's first reduction; the solve's: (b, b) too)
    cycle: v_0 = r / beta, g = beta e_0
        for j < m: z_j = M v_j, w = A z_j
            twice (once): c = V_(j+1)^T w (one reduction), w -= V_(j+1) c, h += c
            h_(j+1) = ||w||, from the last pass's reduction;  H[:, j] = h, rotated by Givens: |g_(j+1)| estimates ||r||
            v_(j+1) = w / h_(j+1)  (h_(j+1) ~ 0: the Krylov space is invariant, a "happy" breakdown)
        x += Z_k y,  R_k y = g_k  (R: H rotated, upper triangular)

The norm tested is the true residual's (right preconditioning), estimated by the
rotations within a cycle; the cycle's last estimate is not recorded: the true residual
after the update is, at the top of the next cycle.  The callback sees x after each cycle.
"""
import numpy as np

from ..kernels import dot, fused_kernel
from ..kernels.basis import add_combination, divide, project, subtract_combination
from ..runtime.layout import (AFTER_TEST, ATOL, BEGIN, DONE, FLUSH, HIST, ITERATED, ITERATION, MAX_ITERATIONS,
                              MAXITER, NONE, PRECONDITIONED, RESUME, RNORM, STOP_AT_TEST, STOP_EVERY, TESTED, TOP,
                              TRACE)
from ..runtime.operators import apply_operator, precondition
from ..runtime.reduce import allreduce
from ..runtime.steps import breakdown, residual_test, tolerance
from ..solvers.result import Breakdown
from . import LoopSpec, loop

__all__ = ["gmres_spec", "gmres"]

residual = fused_kernel(["r = b - r"]).function

INNER, RESIDUAL = 6, 7       # GMRES's own resume points: after an inner test; the cycle's new residual
ZERO_COLUMN = 0              # the breakdown check: a zero column of the Hessenberg matrix
ZERO = 1e-14                 # ... its rotated diagonal relative to its norm (Gram-Schmidt twice: rounding)
PYTHAGORAS = 0.25            # ||w||^2 - ||c||^2 is h_(j+1)^2 to rounding while ||c||^2 is at most this of ||w||^2
# the scalars kept in S: the cycle's step, its first residual norm, Gram-Schmidt's passes
(J, BETA, PASSES, S_SIZE) = range(4)
ORTHOGONALIZATIONS = {"cgs2": 2, "cgs": 1}   # classical Gram-Schmidt twice (the default), once


@loop
def gmres(W, x, b, S, I, F, hist, trace, A, P, R):
    V, Z, w, H, g, cs, sn, c, y, coef, out = W
    m = H.shape[1]
    preconditioned = I[PRECONDITIONED] != 0
    passes = max(1, int(S[PASSES]))   # (GMRESSpec.prepare sets it; none would skip Gram-Schmidt)
    iteration, resume = I[ITERATION], I[RESUME]
    j = int(S[J])
    event = NONE
    while True:
        if resume == BEGIN or resume == RESIDUAL:
            first = resume == BEGIN
            apply_operator(A, x, w, R, -1, I, F)
            residual(b=b, r=w, coef=coef, out=out)      # r = b - A x, in w
            R.send[0, 0] = dot(w, w)
            if first:
                R.send[0, 1] = dot(b, b)
            event = allreduce(R, 0, 2 if first else 1, 0, I, F, trace)
            if event != NONE:
                break
            if first:
                event = tolerance(R.recv[0, 1], I, F)
                if event != NONE:
                    break
            S[BETA] = np.sqrt(max(R.recv[0, 0], 0.0))
            resume = TOP
        if resume == TOP:
            if I[HIST] + m + 1 > hist.shape[0] or I[TRACE] + (passes + 1) * m + 2 > trace.shape[0]:
                event = FLUSH
                break
            resume = AFTER_TEST
            event = residual_test(S[BETA], hist, I, F)
            if event != NONE:
                break
        if resume == AFTER_TEST:
            if iteration >= I[MAXITER]:
                event = MAX_ITERATIONS
                break
            divide(w, S[BETA], V[0])
            for k in range(m + 1):
                g[k] = 0.0
            g[0] = S[BETA]
            j = 0
            resume = INNER
        if resume == INNER:
            # the cycle's steps, until its end
            happy = False
            while j < m and iteration < I[MAXITER]:
                if preconditioned:
                    precondition(P, V[j], Z[j], R, -1, I, F)
                    apply_operator(A, Z[j], w, R, -1, I, F)
                else:
                    apply_operator(A, V[j], w, R, -1, I, F)
                # Gram-Schmidt, ||w|| in the last pass's reduction (one reduction a pass)
                before = removed = 0.0
                for p in range(passes):
                    last = p == passes - 1
                    project(V, j + 1, w, R.send[0])
                    if last:
                        R.send[0, j + 1] = dot(w, w)
                    event = allreduce(R, 0, j + 1 + last, 2 if last else 1, I, F, trace)
                    if event != NONE:
                        break
                    for k in range(j + 1):
                        c[k] = R.recv[0, k]
                        H[k, j] = c[k] if p == 0 else H[k, j] + c[k]
                    if last:
                        before = R.recv[0, j + 1]
                        for k in range(j + 1):
                            removed += c[k] * c[k]
                    subtract_combination(V, c, j + 1, w)
                if event != NONE:
                    break
                if removed <= PYTHAGORAS * before:
                    hnext = np.sqrt(before - removed)   # ||w - V c||, V orthonormal
                else:   # the last pass took much of w (w nearly in span V): measure it
                    R.send[0, 0] = dot(w, w)
                    event = allreduce(R, 0, 1, 3, I, F, trace)
                    if event != NONE:
                        break
                    hnext = np.sqrt(max(R.recv[0, 0], 0.0))
                H[j + 1, j] = hnext
                estimate = _rotate_column(H, g, cs, sn, j, ZERO)
                if estimate < 0.0:   # A (or A M) singular on the Krylov space: keep the columns before's
                    _back_substitute(H, g, j, y)   # least-squares update, the best x the cycle has
                    add_combination(Z if preconditioned else V, y, j, x)
                    event = breakdown(ZERO_COLUMN, 0.0, I, F)
                    break
                iteration += 1
                j += 1
                I[DONE] = iteration
                happy = hnext <= 1e-14 * abs(H[j - 1, j - 1])
                if not happy:
                    divide(w, hnext, V[j])
                if happy or j == m or iteration == I[MAXITER] or estimate <= F[ATOL]:
                    break
                F[RNORM] = estimate
                if I[STOP_AT_TEST] != 0:   # the driver reports it (the inner tests only report)
                    event = TESTED
                    break
                hist[I[HIST]] = estimate
                I[HIST] += 1
            if event != NONE:
                break
            # the cycle's end: x += Z_j y with R_j y = g_j
            _back_substitute(H, g, j, y)
            add_combination(Z if preconditioned else V, y, j, x)
            resume = RESIDUAL
            if I[STOP_EVERY] != 0:
                event = ITERATED
                break
    I[ITERATION] = iteration
    I[RESUME] = resume
    S[J] = j
    return event


@loop
def _rotate_column(H, g, cs, sn, j, zero):
    """The previous Givens rotations applied to column ``j`` of ``H`` (in place), the one
    that zeroes ``H[j+1, j]`` made and applied, ``g`` rotated with it: the residual
    estimate ``|g[j+1]|``, or -1 for a zero column.  A column is zero when its rotated
    diagonal is at most ``zero`` times its norm (the rotations keep the norm), the
    rounding level of how the column was computed: ``A M v_j`` then lies in the span of
    the columns before, a singular A or M, and a division by that diagonal would throw x
    to ~1e15."""
    norm = 0.0
    for i in range(j + 2):
        norm += H[i, j] * H[i, j]
    for i in range(j):
        a, c = H[i, j], H[i + 1, j]
        H[i, j], H[i + 1, j] = cs[i] * a + sn[i] * c, -sn[i] * a + cs[i] * c
    denom = np.hypot(H[j, j], H[j + 1, j])
    if denom <= zero * np.sqrt(norm):
        return -1.0
    cs[j], sn[j] = H[j, j] / denom, H[j + 1, j] / denom
    H[j, j], H[j + 1, j] = denom, 0.0
    g[j + 1], g[j] = -sn[j] * g[j], cs[j] * g[j]
    return abs(g[j + 1])


@loop
def _back_substitute(H, g, k, y):
    """y with R_k y = g_k (R_k: H's rotated upper triangle)."""
    for i in range(k - 1, -1, -1):
        acc = g[i]
        for q in range(i + 1, k):
            acc -= H[i, q] * y[q]
        y[i] = acc / H[i, i]


def _breakdown(check, value):
    return Breakdown("diverged_breakdown", "GMRES: zero column in the Hessenberg matrix")


class GMRESSpec(LoopSpec):
    """GMRES(m)'s loop: its workspace holds the cycle's basis."""

    def __init__(self, restart, orthogonalization):
        self.restart, self.orthogonalization = restart, orthogonalization
        from ..solvers.solver import BUFFERED
        # a cycle's reductions must fit the trace's buffer (passes + 1 an iteration at most)
        most = ORTHOGONALIZATIONS[orthogonalization] + 1
        super().__init__("gmres", gmres, ["||r||", "V^T w", "V^T w, ||w||", "||w||"], self._workspace, S_SIZE,
                         _breakdown, width=restart + 2, norms=restart + 1,
                         reductions=most * (1 + restart // BUFFERED))

    @property
    def key(self):
        return f"gmres restart={self.restart} orthogonalization={self.orthogonalization}"

    def fitted(self, n):
        from ..solvers.inputs import fitted_restart
        m = fitted_restart(self.restart, n)
        return self if m == self.restart else gmres_spec(m, self.orthogonalization)

    def _workspace(self, n, preconditioned):
        m = self.restart
        return (np.zeros((m + 1, n)), np.zeros((m, n) if preconditioned else (1, 1)), np.zeros(n),
                np.zeros((m + 1, m)), np.zeros(m + 1), np.zeros(m), np.zeros(m), np.zeros(m + 1), np.zeros(m),
                np.zeros(1), np.zeros(1))

    def prepare(self, solver):
        solver.S[PASSES] = ORTHOGONALIZATIONS[self.orthogonalization]

    def after_test(self, solver, passed):
        """A cycle's first test decides; an inner one only reports (the cycle goes on)."""
        if solver.I[RESUME] == INNER:
            return INNER
        return None if passed else AFTER_TEST


def gmres_spec(restart=30, orthogonalization="cgs2"):
    """The loop of GMRES(``restart``), orthogonalizing by classical Gram-Schmidt twice
    (``"cgs2"``) or once (``"cgs"``, PETSc's default)."""
    if int(restart) < 1:
        raise ValueError(f"restart must be positive, got {restart}")
    if orthogonalization not in ORTHOGONALIZATIONS:
        raise ValueError(f"orthogonalization must be one of {', '.join(map(repr, ORTHOGONALIZATIONS))}, "
                         f"got {orthogonalization!r}")
    return _SPECS.setdefault((int(restart), orthogonalization), GMRESSpec(int(restart), orthogonalization))


_SPECS = {}
