"""Classic preconditioned Conjugate Gradients (Hestenes-Stiefel, as scipy and PETSc's
KSPCG run it): the baseline, two blocking reductions per iteration, ``(r, r)`` fused with
``(r, z)``, then ``(p, A p)``.  The first reduction also carries ``(b, b)``."""
import numpy as np

from ..kernels import dot, fused_kernel
from ..runtime.layout import (AFTER_TEST, BEGIN, FLUSH, ITERATION, MAX_ITERATIONS, MAXITER, NONE, PRECONDITIONED,
                              RESUME, TOP)
from ..runtime.operators import apply_operator, precondition
from ..runtime.reduce import allreduce
from ..runtime.steps import breakdown, end_iteration, residual_test, room, tolerance
from ..solvers.result import Breakdown
from . import LoopSpec, loop

__all__ = ["CG", "cg"]

residual = fused_kernel(["r = b - r"]).function
direction = fused_kernel(["p = z + beta*p"], scalars=["beta"]).function
update = fused_kernel(["x = x + alpha*p", "r = r - alpha*q"], dots=["r.r"], scalars=["alpha"]).function

RR, RHO, RHO_OLD = range(3)                        # the scalars kept in S between calls
INDEFINITE_PC, NOT_FINITE, INDEFINITE_MAT = range(3)   # the breakdown checks


@loop
def cg(W, x, b, S, I, F, hist, trace, A, P, R):
    r, z, p, q, coef, out = W
    send, d = R.send[0], R.recv[0]
    rr, rho, rho_old = S[RR], S[RHO], S[RHO_OLD]
    iteration, resume = I[ITERATION], I[RESUME]
    preconditioned = I[PRECONDITIONED] != 0
    event = NONE
    if resume == BEGIN:
        apply_operator(A, x, r, R, -1, I, F)
        residual(b=b, r=r, coef=coef, out=out)          # r = b - A x
        rr = dot(r, r)
    while True:
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
            if event != NONE:
                break
        resume = TOP
        if iteration == I[MAXITER]:
            event = MAX_ITERATIONS
            break
        if rho < 0:
            event = breakdown(INDEFINITE_PC, rho, I, F)
            break
        coef[0] = 0.0 if iteration == 0 else rho / rho_old
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
    S[RR], S[RHO], S[RHO_OLD] = rr, rho, rho_old
    return event


def _breakdown(check, value):
    if check == INDEFINITE_PC:
        return Breakdown("diverged_indefinite_pc", "preconditioner is not positive definite: (r, Mr) < 0")
    if check == NOT_FINITE:
        return Breakdown("diverged_nanorinf", "(p, Ap) is not finite")
    return Breakdown("diverged_indefinite_mat", f"matrix is not positive definite: (p, Ap) = {value:.3e} <= 0")


def _workspace(n, preconditioned):
    r = np.empty(n)
    return r, (np.empty(n) if preconditioned else r), np.zeros(n), np.empty(n), np.zeros(1), np.zeros(1)


CG = LoopSpec("cg", cg, ["(r,r) (r,z)", "(p,Ap)", "(r,r)"], _workspace, 3, _breakdown, width=3, reductions=2)
