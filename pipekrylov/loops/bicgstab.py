"""Classic BiCGStab (van der Vorst 1992), right preconditioned as in scipy: two SpMVs,
two preconditioner applications and three blocking reductions per iteration: ``(r0, r)``
with ``(r, r)``; ``(r0, v)``; ``(t, s)`` with ``(t, t)`` and ``(s, s)``.  The first
reduction also carries ``(b, b)``.

When ``(r0, r)`` vanishes (a BiCG breakdown) the shadow residual restarts from the current
residual; a second breakdown right after one is ``diverged_breakdown_bicg``.  Convergence
at the half step (``||s||``) ends the iteration there, as scipy's loop does.

BiCGStab's updated residual can drift far from ``b - A x`` (bcsstk15 without a
preconditioner: 3,000 times the tolerance where it reported convergence), so a test that
passes is confirmed against ``b - A x`` (one operator application, one reduction); where
that fails, the method starts again from it, the count going on.
"""
import numpy as np

from ..kernels import dot, fused_kernel
from ..kernels.workspace import vectors
from ..runtime.layout import (AFTER_TEST, ATOL, BEGIN, BNORM, CONFIRM, CONVERGED, DONE, FLUSH, FROM_X, ITERATION,
                              MAX_ITERATIONS, MAXITER, NONE, REPLACEMENTS, RESTARTS, RESUME, TOP)
from ..runtime.operators import apply_operator, precondition
from ..runtime.reduce import allreduce
from ..runtime.steps import breakdown, confirmed, confirmed_for_driver, end_iteration, residual_test, room, tolerance
from ..solvers.result import Breakdown
from . import LoopSpec, loop

__all__ = ["BICGSTAB", "bicgstab"]

EPS2 = np.finfo(float).eps ** 2

residual = fused_kernel(["r = b - r"]).function
direction = fused_kernel(["p = r + beta*p - beta*omega*v"], scalars=["beta", "omega"]).function
half = fused_kernel(["r = r - alpha*v"], dots=["r.r"], scalars=["alpha"]).function
step = fused_kernel(["x = x + alpha*phat + omega*shat", "r = r - omega*t"], scalars=["alpha", "omega"]).function
half_step = fused_kernel(["x = x + alpha*phat"], scalars=["alpha"], exact=True).function
copy = fused_kernel(["y = x"]).function

RHO, RR, RHO_OLD, ALPHA, OMEGA, RESTARTED_AT, FRESH = range(7)   # the scalars kept in S between calls
BICG, ZERO_OMEGA, ZERO_R0V = range(3)                      # the breakdown checks
TRUE_LABEL = 3                                             # the confirmation's reduction


@loop
def bicgstab(W, x, b, S, I, F, hist, trace, A, P, R):
    r, r0, p, v, phat, shat, t, coef, out = W
    send, d = R.send[0], R.recv[0]
    rho, rr, rho_old, alpha, omega = S[RHO], S[RR], S[RHO_OLD], S[ALPHA], S[OMEGA]
    restarted_at, fresh = S[RESTARTED_AT], S[FRESH] != 0.0   # fresh: from b - A x (p = r)
    iteration, resume = I[ITERATION], I[RESUME]
    event = NONE
    if resume == BEGIN:
        apply_operator(A, x, r, R, -1, I, F)
        residual(b=b, r=r, coef=coef, out=out)          # r = b - A x
        copy(x=r, y=r0, coef=coef, out=out)
        restarted_at, fresh = -2.0, False
    while True:
        if resume == CONFIRM:   # a test the driver made passed: b - A x decides (into r)
            event = confirmed_for_driver(A, P, x, b, r, t, R, TRUE_LABEL, I, F, hist, trace)
            break
        if resume == FROM_X:    # b - A x (in r) failed the test: start again from it
            fresh = True
            copy(x=r, y=r0, coef=coef, out=out)
            restarted_at = -2.0
            I[REPLACEMENTS] += 1
            resume = TOP
        if resume != AFTER_TEST:
            if not room(2, 3, hist, trace, I):
                event = FLUSH
                break
            send[0], send[1] = dot(r0, r), dot(r, r)
            first = resume == BEGIN     # the solve's first reduction: (b, b) too
            if first:
                send[2] = dot(b, b)
            event = allreduce(R, 0, 3 if first else 2, 0, I, F, trace)
            if event != NONE:
                break
            rho, rr = d[0], d[1]
            if first:
                event = tolerance(d[2], I, F)
                if event != NONE:
                    break
            event = residual_test(np.sqrt(rr), hist, I, F)
            if event == CONVERGED:
                event = confirmed(A, P, x, b, r, t, R, TRUE_LABEL, I, F, hist, trace)
                if event == NONE:
                    resume = FROM_X
                    continue
            if event != NONE:
                break
        resume = TOP
        if iteration == I[MAXITER]:
            event = MAX_ITERATIONS
            break
        restart = abs(rho) < EPS2 * (F[BNORM] * F[BNORM])
        if restart:
            # BiCG breakdown: (r0, r) vanished.  Restart the shadow space from the current
            # residual (then (r0, r) = (r, r) > 0) instead of giving up.
            if restarted_at == iteration - 1:
                event = breakdown(BICG, rho, I, F)
                break
            copy(x=r, y=r0, coef=coef, out=out)
            rho, restarted_at = rr, iteration
            I[RESTARTS] += 1
        if iteration == 0 or restart or fresh:
            copy(x=r, y=p, coef=coef, out=out)
            fresh = False
        else:
            if abs(omega) < EPS2:
                event = breakdown(ZERO_OMEGA, omega, I, F)
                break
            coef[0], coef[1] = (rho / rho_old) * (alpha / omega), omega
            direction(p=p, r=r, v=v, coef=coef, out=out)    # p = r + beta (p - omega v)
        precondition(P, p, phat, R, -1, I, F)
        apply_operator(A, phat, v, R, -1, I, F)
        send[0] = dot(r0, v)
        event = allreduce(R, 0, 1, 1, I, F, trace)
        if event != NONE:
            break
        rv = d[0]
        if rv == 0:
            event = breakdown(ZERO_R0V, rv, I, F)
            break
        alpha = rho / rv
        coef[0] = alpha
        half(r=r, v=v, coef=coef, out=out)              # r now holds s = r - alpha v
        ss = out[0]
        precondition(P, r, shat, R, -1, I, F)
        apply_operator(A, shat, t, R, -1, I, F)
        send[0], send[1], send[2] = dot(t, r), dot(t, t), ss
        event = allreduce(R, 0, 3, 2, I, F, trace)
        if event != NONE:
            break
        ts, tt, ss = d[0], d[1], d[2]
        if np.sqrt(ss) <= F[ATOL]:   # converged at the half step: x += alpha phat
            coef[0] = alpha
            half_step(x=x, phat=phat, coef=coef, out=out)
            iteration += 1
            I[DONE] = iteration
            event = residual_test(np.sqrt(ss), hist, I, F)
            if event == CONVERGED:
                event = confirmed(A, P, x, b, r, t, R, TRUE_LABEL, I, F, hist, trace)
                if event == NONE:
                    resume = FROM_X
                    continue
            break
        omega = ts / tt if tt > 0 else 0.0
        coef[0], coef[1] = alpha, omega
        step(x=x, phat=phat, shat=shat, r=r, t=t, coef=coef, out=out)
        rho_old = rho
        event = end_iteration(iteration, I)
        iteration += 1
        if event != NONE:
            break
    I[ITERATION] = iteration
    I[RESUME] = resume
    S[RHO], S[RR], S[RHO_OLD], S[ALPHA], S[OMEGA] = rho, rr, rho_old, alpha, omega
    S[RESTARTED_AT], S[FRESH] = restarted_at, 1.0 if fresh else 0.0
    return event


def _breakdown(check, value):
    if check == BICG:
        return Breakdown("diverged_breakdown_bicg", f"(r0, r) = {value:.3e}: BiCG breakdown")
    if check == ZERO_OMEGA:
        return Breakdown("diverged_breakdown", f"omega = {value:.3e}")
    return Breakdown("diverged_breakdown", "(r0, A p) = 0")


def _workspace(n, preconditioned):
    return (*vectors(7, n), np.zeros(2), np.zeros(1))


BICGSTAB = LoopSpec("bicgstab", bicgstab, ["(r0,r) (r,r)", "(r0,v)", "(t,s) (t,t) (s,s)", "b - A x"], _workspace,
                    7, _breakdown, width=3, norms=2, reductions=3, confirms=True)
