"""Classic preconditioned Conjugate Residuals (the base method of Ghysels & Vanroose's
p-CR): one SpMV, one preconditioner and two blocking reductions per iteration, ``(s, q)``
and then ``(r, r)`` fused with ``(u, A u)``.  The first reduction also carries ``(b, b)``.
A test that passes is confirmed against ``b - A x``, as CG's is."""
import numpy as np

from ..kernels import dot, fused_kernel
from ..kernels.workspace import vectors
from ..runtime.layout import (AFTER_TEST, BEGIN, CONFIRM, CONVERGED, FLUSH, FROM_X, ITERATION, MAX_ITERATIONS,
                              MAXITER, NONE, REPLACEMENTS, RESUME, TOP)
from ..runtime.operators import apply_operator, precondition
from ..runtime.reduce import allreduce
from ..runtime.steps import breakdown, confirmed, confirmed_for_driver, end_iteration, residual_test, room, tolerance
from ..solvers.result import Breakdown
from . import LoopSpec, loop

__all__ = ["CR", "cr"]

residual = fused_kernel(["r = b - r"]).function
directions = fused_kernel(["p = u + beta*p", "s = w + beta*s"], scalars=["beta"]).function
update = fused_kernel(["x = x + alpha*p", "r = r - alpha*s", "u = u - alpha*q"], dots=["r.r"],
                      scalars=["alpha"], noalias=True).function   # three stores: scalar without noalias

RR, GAMMA, GAMMA_OLD, FRESH = range(4)  # the scalars kept in S between calls
ZERO_GAMMA, INDEFINITE_PC = range(2)    # the breakdown checks
TRUE_LABEL = 2                          # the confirmation's reduction


@loop
def cr(W, x, b, S, I, F, hist, trace, A, P, R):
    r, u, w, p, s, q, coef, out = W
    send, d = R.send[0], R.recv[0]
    rr, gamma, gamma_old, fresh = S[RR], S[GAMMA], S[GAMMA_OLD], S[FRESH] != 0.0   # fresh: from b - A x
    iteration, resume = I[ITERATION], I[RESUME]
    event = NONE
    if resume == BEGIN:
        apply_operator(A, x, r, R, -1, I, F)
        residual(b=b, r=r, coef=coef, out=out)          # r = b - A x
        precondition(P, r, u, R, -1, I, F)
        apply_operator(A, u, w, R, -1, I, F)
        rr, fresh = dot(r, r), False
    while True:
        if resume == CONFIRM:   # a test the driver made passed: b - A x decides (into r)
            event = confirmed_for_driver(A, P, x, b, r, q, R, TRUE_LABEL, I, F, hist, trace)
            break
        if resume == FROM_X:    # b - A x (in r) failed the test: start again from it
            precondition(P, r, u, R, -1, I, F)
            apply_operator(A, u, w, R, -1, I, F)
            rr, fresh = dot(r, r), True
            I[REPLACEMENTS] += 1
            resume = TOP
        if resume != AFTER_TEST:
            if not room(1, 2, hist, trace, I):
                event = FLUSH
                break
            send[0], send[1] = rr, dot(u, w)
            first = resume == BEGIN     # the solve's first reduction: (b, b) too
            if first:
                send[2] = dot(b, b)
            event = allreduce(R, 0, 3 if first else 2, 0, I, F, trace)
            if event != NONE:
                break
            rr, gamma = d[0], d[1]
            if first:
                event = tolerance(d[2], I, F)
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
        if gamma == 0:
            event = breakdown(ZERO_GAMMA, gamma, I, F)
            break
        coef[0] = 0.0 if iteration == 0 or fresh else gamma / gamma_old
        fresh = False
        directions(p=p, u=u, s=s, w=w, coef=coef, out=out)     # p = u + beta p, s = w + beta s
        precondition(P, s, q, R, -1, I, F)
        send[0] = dot(s, q)
        event = allreduce(R, 0, 1, 1, I, F, trace)
        if event != NONE:
            break
        sq = d[0]
        if not sq > 0:
            event = breakdown(INDEFINITE_PC, sq, I, F)
            break
        coef[0] = gamma / sq
        update(x=x, p=p, r=r, s=s, u=u, q=q, coef=coef, out=out)
        rr = out[0]
        apply_operator(A, u, w, R, -1, I, F)
        gamma_old = gamma
        event = end_iteration(iteration, I)
        iteration += 1
        if event != NONE:
            break
    I[ITERATION] = iteration
    I[RESUME] = resume
    S[RR], S[GAMMA], S[GAMMA_OLD], S[FRESH] = rr, gamma, gamma_old, 1.0 if fresh else 0.0
    return event


def _breakdown(check, value):
    if check == ZERO_GAMMA:
        return Breakdown("diverged_breakdown", "(u, Au) = 0")
    return Breakdown("diverged_indefinite_pc", f"(Ap, M Ap) = {value:.3e} <= 0")


def _workspace(n, preconditioned):
    return (*vectors(6, n), np.zeros(1), np.zeros(1))


CR = LoopSpec("cr", cr, ["(r,r) (u,Au)", "(Ap,MAp)", "b - A x"], _workspace, 4, _breakdown, width=3, reductions=2,
              confirms=True)
