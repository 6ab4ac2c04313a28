"""Classic preconditioned Conjugate Gradients (Hestenes-Stiefel, as scipy and PETSc's
KSPCG run it): the baseline, two blocking reductions per iteration, ``(r, r)`` fused with
``(r, z)``, then ``(p, A p)``.  The first reduction also carries ``(b, b)``.

The updated residual drifts from ``b - A x`` near the attainable accuracy (1138_bus at
rtol 1e-14: 24 times the tolerance where it passed), so a test that passes is confirmed
against ``b - A x`` (one operator application and one reduction per solve); where that
fails, CG starts again from it, the count going on."""
import numpy as np

from ..kernels import dot, fused_kernel
from ..kernels.workspace import vectors
from ..runtime.layout import (AFTER_TEST, BEGIN, CONFIRM, CONVERGED, FLUSH, FROM_X, ITERATION, MAX_ITERATIONS,
                              MAXITER, NONE, PRECONDITIONED, REPLACEMENTS, RESUME, TOP)
from ..runtime.operators import apply_operator, precondition
from ..runtime.reduce import allreduce
from ..runtime.steps import breakdown, confirmed, confirmed_for_driver, end_iteration, residual_test, room, tolerance
from ..solvers.result import Breakdown
from . import LoopSpec, loop

__all__ = ["CG", "cg"]

residual = fused_kernel(["r = b - r"]).function
direction = fused_kernel(["p = z + beta*p"], scalars=["beta"]).function
update = fused_kernel(["x = x + alpha*p", "r = r - alpha*q"], dots=["r.r"], scalars=["alpha"]).function

RR, RHO, RHO_OLD, FRESH = range(4)                 # the scalars kept in S between calls
INDEFINITE_PC, NOT_FINITE, INDEFINITE_MAT = range(3)   # the breakdown checks
TRUE_LABEL = 3                                         # the confirmation's reduction


@loop
def cg(W, x, b, S, I, F, hist, trace, A, P, R):
    r, z, p, q, coef, out = W
    send, d = R.send[0], R.recv[0]
    rr, rho, rho_old, fresh = S[RR], S[RHO], S[RHO_OLD], S[FRESH] != 0.0   # fresh: from b - A x (beta = 0)
    iteration, resume = I[ITERATION], I[RESUME]
    preconditioned = I[PRECONDITIONED] != 0
    event = NONE
    if resume == BEGIN:
        apply_operator(A, x, r, R, -1, I, F)
        residual(b=b, r=r, coef=coef, out=out)          # r = b - A x
        rr, fresh = dot(r, r), False
    while True:
        if resume == CONFIRM:   # a test the driver made passed: b - A x decides (into r)
            event = confirmed_for_driver(A, P, x, b, r, q, R, TRUE_LABEL, I, F, hist, trace)
            break
        if resume == FROM_X:    # b - A x (in r) failed the test: start again from it
            rr, fresh = dot(r, r), True
            I[REPLACEMENTS] += 1
            resume = TOP
        if resume != AFTER_TEST:
            if not room(1, 2, hist, trace, I):
                event = FLUSH
                break
            send[0] = rr
            if preconditioned:
                precondition(P, r, z, R, -1, I, F)
                send[1] = dot(r, z)
                count, label = 2, 0
            else:
                count, label = 1, 2
            first = resume == BEGIN     # the solve's first reduction: (b, b) too
            if first:
                send[count] = dot(b, b)
            event = allreduce(R, 0, count + 1 if first else count, label, I, F, trace)
            if event != NONE:
                break
            rr = d[0]
            rho = d[1] if preconditioned else rr
            if first:
                event = tolerance(d[count], I, F)
                if event != NONE:
                    break
            event = residual_test(np.sqrt(rr), hist, I, F)
            if event == CONVERGED:
                event = confirmed(A, P, x, b, r, q, R, TRUE_LABEL, I, F, hist, trace)
                if event == NONE:
                    resume = FROM_X
                    continue
            if event != NONE:
                break
        resume = TOP
        if iteration == I[MAXITER]:
            event = MAX_ITERATIONS
            break
        if rho < 0:
            event = breakdown(INDEFINITE_PC, rho, I, F)
            break
        coef[0] = 0.0 if iteration == 0 or fresh else rho / rho_old
        fresh = False
        direction(p=p, z=z, coef=coef, out=out)       # p = z + beta p
        apply_operator(A, p, q, R, -1, I, F)
        send[0] = dot(p, q)
        event = allreduce(R, 0, 1, 1, I, F, trace)
        if event != NONE:
            break
        pq = d[0]
        if not pq > 0:
            event = breakdown(INDEFINITE_MAT if np.isfinite(pq) else NOT_FINITE, pq, I, F)
            break
        coef[0] = rho / pq
        update(x=x, p=p, r=r, q=q, coef=coef, out=out)   # x += alpha p, r -= alpha q, (r, r)
        rr = out[0]
        rho_old = rho
        event = end_iteration(iteration, I)
        iteration += 1
        if event != NONE:
            break
    I[ITERATION] = iteration
    I[RESUME] = resume
    S[RR], S[RHO], S[RHO_OLD], S[FRESH] = rr, rho, rho_old, 1.0 if fresh else 0.0
    return event


def _breakdown(check, value):
    if check == INDEFINITE_PC:
        return Breakdown("diverged_indefinite_pc", "preconditioner is not positive definite: (r, Mr) < 0")
    if check == NOT_FINITE:
        return Breakdown("diverged_nanorinf", "(p, Ap) is not finite")
    return Breakdown("diverged_indefinite_mat", f"matrix is not positive definite: (p, Ap) = {value:.3e} <= 0")


def _workspace(n, preconditioned):
    r, z, p, q = vectors(4, n)
    return r, (z if preconditioned else r), p, q, np.zeros(1), np.zeros(1)


CG = LoopSpec("cg", cg, ["(r,r) (r,z)", "(p,Ap)", "(r,r)", "b - A x"], _workspace, 4, _breakdown, width=3,
              reductions=2, confirms=True)
