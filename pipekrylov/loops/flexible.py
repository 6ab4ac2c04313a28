"""Pipelined flexible Conjugate Gradients and Generalized Conjugate Residuals (Sanan,
Schnepp and May's PIPEFCG and PIPEGCR, PETSc's KSPPIPEFCG and KSPPIPEGCR): CG (SPD A) and
GCR (any A) for a preconditioner that may change from one application to the next (a
multigrid cycle with a Krylov smoother, a few inner CG steps), with one reduction per
iteration overlapped with the preconditioner and the operator.  One loop: the two differ
in the vector their dots take, ``u`` (FCG: A-orthogonal directions) or ``w = A u``
(GCR: ``A^T A``-orthogonal ones, minimizing ``||r||``).

Flexible CG keeps each new direction ``p_i = u_i - sum_k beta_k p_k`` A-orthogonal to the
last ``m_i`` directions explicitly (truncated Gram-Schmidt, ``beta_k = (u_i, s_k) / eta_k``,
``s_k = A p_k``, ``eta_k = (p_k, s_k)``), where CG relies on a fixed M to make it
orthogonal to all but the last for free.  The pipelined variant carries ``q = M s`` and
``zeta = A q`` alongside ``p`` and ``s`` in a ring of ``mmax + 1``, so that
``eta_i = (u_i, w_i) - sum_k beta_k^2 eta_k`` needs no reduction of its own: the
iteration's one reduction gathers ``(u, s_k)`` for the window, ``(u, r)``, ``(u, w)`` and
``(r, r)`` (GCR: ``w`` for ``u`` in each), while ``m = u + M (w - r)`` (``M w`` for a linear M, applied to a difference
so that a nonlinear M sees a residual-like vector) and ``n = A m`` are computed.

The window: ``mmax`` directions (PETSc's "standard" truncation) or, by default, Notay's
``((i - 1) mod mmax) + 1`` (a restart every ``mmax`` iterations in all but the
residual).  An ``eta_i <= 0`` (the recurrences have lost A-orthogonality) starts a new
cycle from ``b - A x``, as PETSc's does at ``eta_i < 0`` (``result.restarts``), with no
test of its own: the last iteration's stands, as it does where a confirmation failed.  The residual tested is the
recurrence's ``||r||``, in the iteration's reduction; a test that passes is confirmed
against ``b - A x`` (one more operator application and reduction per solve)."""
import numpy as np

from ..kernels import dot, fused_kernel
from ..kernels.basis import copy
from ..kernels.compile import hot, jit
from ..kernels.workspace import vectors
from ..runtime.layout import (AFTER_TEST, BEGIN, CONFIRM, CONVERGED, FLUSH, FROM_X, ITERATION, MAX_ITERATIONS,
                              MAXITER, NONE, PRECONDITIONED, REPLACEMENTS, RESTARTS, RESUME, TOP)
from ..runtime.operators import apply_operator
from ..runtime.reduce import start, wait
from ..runtime.steps import (breakdown, confirmed, confirmed_for_driver, end_iteration, precondition_or_copy,
                              residual_test, room, tolerance)
from ..solvers.result import Breakdown
from . import LoopSpec, loop

__all__ = ["Flexible", "PipeFCG", "PipeGCR", "flexible", "TRUNCATIONS"]

TRUNCATIONS = ("notay", "standard")

residual = fused_kernel(["r = b - r"]).function
difference = fused_kernel(["t = w - r"]).function
update = fused_kernel(["x = x + alpha*p", "r = r - alpha*s", "u = u - alpha*q", "w = w - alpha*z"],
                      dots=["r.r", "u.r", "u.w", "w.r", "w.w"], scalars=["alpha"], noalias=True).function

# resume points of the method's own, after the common ones
CYCLE = 6      # a new cycle from b - A x, computed here (the solve's start, a restart)
REDUCE = 7     # after an iteration's update (a callback's stop): its reduction next

ALPHA, GAMMA, ETA = range(3)                 # the scalars kept in S between calls
K, WINDOW, MMAX, NOTAY, GCR = range(5)       # J: the cycle's iteration, its window, the options
NOT_SPD, NOT_FINITE, NO_IMAGE = range(3)     # the breakdown checks
START_LABEL, ITERATION_LABEL, TRUE_LABEL = range(3)


@loop
def flexible(W, x, b, S, I, F, hist, trace, A, P, R):
    r, u, w, m, n, t, Pr, Sr, Qr, Zr, etas, betas, olds, coef, out, J = W
    send, d = R.send[0], R.recv[0]
    alpha, gamma, eta = S[ALPHA], S[GAMMA], S[ETA]
    iteration, resume = I[ITERATION], I[RESUME]
    preconditioned = I[PRECONDITIONED] != 0
    gcr = J[GCR] != 0
    left = w if gcr else u      # the dots' first vector
    ring = Pr.shape[0]
    event = NONE
    while True:
        if resume == CONFIRM:   # a test the driver made passed: b - A x decides (into r)
            event = confirmed_for_driver(A, P, x, b, r, t, R, TRUE_LABEL, I, F, hist, trace)
            break
        if resume == BEGIN or resume == CYCLE or resume == FROM_X:
            # a cycle's start: u = M r, p = u, s = w = A u; its reduction overlaps
            # m = M w and n = A m (q and zeta)
            if not room(1, 2, hist, trace, I):
                event = FLUSH
                break
            first = resume == BEGIN
            if resume == FROM_X:      # b - A x is in r already (a confirmation that failed)
                I[REPLACEMENTS] += 1
            else:
                apply_operator(A, x, r, R, -1, I, F)
                residual(b=b, r=r, coef=coef, out=out)
            precondition_or_copy(P, r, u, R, -1, I, F, preconditioned)
            copy(u, Pr[0])
            apply_operator(A, u, Sr[0], R, -1, I, F)
            copy(Sr[0], w)
            send[0], send[1], send[2] = dot(left, r), dot(left, w), dot(r, r)
            if first:
                send[3] = dot(b, b)
            start(R, 0, 4 if first else 3, START_LABEL, I, F, trace)
            precondition_or_copy(P, w, Qr[0], R, 0, I, F, preconditioned)
            apply_operator(A, Qr[0], Zr[0], R, 0, I, F)
            event = wait(R, 0, I, F, trace)
            if event != NONE:
                break
            if first:
                event = tolerance(d[3], I, F)
                if event != NONE:
                    break
            gamma, eta = d[0], d[1]
            J[K], J[WINDOW] = 0, 0
            resume = AFTER_TEST
            if first:   # a later cycle's b - A x was tested where the last one ended (as PETSc's)
                event = residual_test(np.sqrt(d[2]), hist, I, F)
        elif resume == TOP or resume == REDUCE:
            k = J[K]
            if resume == TOP:   # the iteration's update, and the local dots of the next reduction
                coef[0] = alpha
                slot = k % ring
                update(x=x, p=Pr[slot], r=r, s=Sr[slot], u=u, q=Qr[slot], w=w, z=Zr[slot], coef=coef, out=out)
                event = end_iteration(iteration, I)
                iteration += 1
                if event != NONE:
                    resume = REDUCE
                    break
            if not room(1, 2, hist, trace, I):
                event = FLUSH
                resume = REDUCE
                break
            k += 1
            window = _window(k, J[MMAX], J[NOTAY] != 0)
            for j in range(window):
                send[j] = dot(left, Sr[(k - window + j) % ring])
            if gcr:
                send[window], send[window + 1] = out[3], out[4]
            else:
                send[window], send[window + 1] = out[1], out[2]
            send[window + 2] = out[0]
            start(R, 0, window + 3, ITERATION_LABEL, I, F, trace)
            difference(w=w, r=r, t=t, coef=coef, out=out)           # m = u + M (w - r), n = A m
            precondition_or_copy(P, t, m, R, 0, I, F, preconditioned)
            _add(u, m)
            apply_operator(A, m, n, R, 0, I, F)
            event = wait(R, 0, I, F, trace)
            if event != NONE:
                resume = REDUCE     # never resumed: a reduction's event ends the solve
                break
            gamma, eta = d[window], d[window + 1]
            for j in range(window):
                beta = -d[j] / etas[(k - window + j) % ring]
                betas[j] = beta
                eta -= beta * beta * etas[(k - window + j) % ring]
            J[K], J[WINDOW] = k, window
            resume = AFTER_TEST
            event = residual_test(np.sqrt(d[window + 2]), hist, I, F)
        if resume == AFTER_TEST:
            if event == CONVERGED:
                event = confirmed(A, P, x, b, r, t, R, TRUE_LABEL, I, F, hist, trace)
                if event == NONE:
                    resume = FROM_X
                    continue
            if event != NONE:
                break
            if iteration == I[MAXITER]:
                event = MAX_ITERATIONS
                break
            k = J[K]
            if not np.isfinite(eta):
                event = breakdown(NOT_FINITE, eta, I, F)
                break
            if not eta > 0.0:
                if k == 0:      # from b - A x: FCG's (u, A u) <= 0, GCR's A u = 0
                    event = breakdown(NO_IMAGE if gcr else NOT_SPD, eta, I, F)
                    break
                I[RESTARTS] += 1   # the directions lost A-orthogonality: a new cycle
                resume = CYCLE
                continue
            etas[k % ring] = eta
            alpha = gamma / eta
            if k > 0:
                _directions(k, J[WINDOW], betas, olds, u, w, m, n, Pr, Sr, Qr, Zr)
            resume = TOP
    I[ITERATION] = iteration
    I[RESUME] = resume
    S[ALPHA], S[GAMMA], S[ETA] = alpha, gamma, eta
    return event


@hot
def _window(k, mmax, notay):
    """How many of the last directions the ``k``-th direction of a cycle is made
    A-orthogonal to."""
    if notay:
        return (k - 1) % mmax + 1
    return min(k, mmax)



@hot
def _add(u, m):
    """``m += u``."""
    for i in range(m.shape[0]):
        m[i] += u[i]


@hot
def _directions(k, window, betas, olds, u, w, m, n, Pr, Sr, Qr, Zr):
    """The ring's ``k``-th (p, s, q, zeta) = (u, w, m, n) + sum_j beta_j (the window's)."""
    slot = k % Pr.shape[0]
    for j in range(window):
        olds[j] = (k - window + j) % Pr.shape[0]
    _combine(u, Pr, betas, olds, window, Pr[slot])
    _combine(w, Sr, betas, olds, window, Sr[slot])
    _combine(m, Qr, betas, olds, window, Qr[slot])
    _combine(n, Zr, betas, olds, window, Zr[slot])


@jit(["void(float64[::1], float64[:, ::1], float64[::1], int64[::1], int64, float64[::1])"], noalias=True,
     refcount=False)
def _combine(first, ring, betas, olds, window, out):
    """``out = first + sum_j betas[j] ring[olds[j]]`` (``window >= 1``), the terms in order,
    four rows a pass after the first.  ``out`` is a row of ``ring`` that no ``olds[j]``
    names: the arrays it reads and the one it writes do not overlap (``noalias``: LLVM
    vectorizes the passes only then)."""
    c, v = betas[0], ring[olds[0]]
    for i in range(out.shape[0]):
        out[i] = first[i] + c * v[i]
    j = 1
    while j + 4 <= window:
        c0, c1, c2, c3 = betas[j], betas[j + 1], betas[j + 2], betas[j + 3]
        v0, v1, v2, v3 = ring[olds[j]], ring[olds[j + 1]], ring[olds[j + 2]], ring[olds[j + 3]]
        for i in range(out.shape[0]):
            out[i] = (((out[i] + c0 * v0[i]) + c1 * v1[i]) + c2 * v2[i]) + c3 * v3[i]
        j += 4
    while j < window:
        c, v = betas[j], ring[olds[j]]
        for i in range(out.shape[0]):
            out[i] += c * v[i]
        j += 1


def _breakdown(check, value):
    if check == NOT_SPD:
        return Breakdown("diverged_indefinite_mat", f"(u, A u) = {value:.3e} <= 0 with u = M (b - A x): "
                         f"A or M is not positive definite")
    if check == NO_IMAGE:
        return Breakdown("diverged_breakdown", "A u = 0 with u = M (b - A x): A M is singular")
    return Breakdown("diverged_nanorinf", "eta = (p, A p) is not finite")


class Flexible(LoopSpec):
    """The loop of PIPEFCG (``method="fcg"``) or PIPEGCR (``"gcr"``), see the module's
    docstring: ``mmax`` the most directions a new one is orthogonalized against (PETSc's
    ``-ksp_pipefcg_mmax``/``-ksp_pipegcr_mmax``, 15), ``truncation`` ``"notay"`` or
    ``"standard"``."""

    def __init__(self, method, mmax=15, truncation="notay"):
        if isinstance(mmax, bool) or not isinstance(mmax, (int, np.integer)) or mmax < 1:
            raise ValueError(f"mmax must be a positive integer, got {mmax!r}")
        if truncation not in TRUNCATIONS:
            raise ValueError(f"truncation must be one of {', '.join(TRUNCATIONS)}, got {truncation!r}")
        if method not in ("fcg", "gcr"):
            raise ValueError(f"method must be 'fcg' or 'gcr', got {method!r}")
        self.method, self.mmax, self.truncation = method, int(mmax), truncation
        left = "w" if method == "gcr" else "u"
        super().__init__(f"p-{method}", flexible,
                         [f"start ({left},r) ({left},w) (r,r)", f"reduction ({left},s_k) ({left},r) ({left},w) (r,r)",
                          "b - A x"], self._workspace, 3, _breakdown, width=self.mmax + 3, reductions=2, confirms=True)

    @property
    def key(self):
        return f"p-{self.method} mmax={self.mmax} truncation={self.truncation}"

    def _workspace(self, n, preconditioned):
        ring = self.mmax + 1
        rings = [np.zeros((ring, n)) for _ in range(4)]
        J = np.array([0, 0, self.mmax, self.truncation == "notay", self.method == "gcr"], dtype=np.int64)
        return (*vectors(6, n), *rings, np.zeros(ring), np.zeros(ring), np.zeros(ring, dtype=np.int64), np.zeros(1),
                np.zeros(5), J)

    def report(self, solver):
        return {"mmax": self.mmax, "truncation": self.truncation}


def PipeFCG(mmax=15, truncation="notay"):
    """Pipelined flexible CG's loop spec."""
    return Flexible("fcg", mmax, truncation)


def PipeGCR(mmax=15, truncation="notay"):
    """Pipelined flexible GCR's loop spec."""
    return Flexible("gcr", mmax, truncation)
