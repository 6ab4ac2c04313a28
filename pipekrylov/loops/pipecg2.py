"""Pipelined CG with one reduction per two iterations (Tiwari and Vadhiyar's PIPECG2,
PETSc's KSPPIPECG2): Chronopoulos-Gear CG, two iterations a *pair*, the pair's one
non-blocking reduction overlapped with two applications of A and two of M.

**The vectors.**  Besides CG's ``x``, ``r``, ``u = M r``, ``w = A u`` and the direction
``p`` with ``s = A p``, the pipeline keeps the images two levels deeper: ``m = M w``,
``n = A m`` (p-CG's), and ``q = M s``, ``z = A q``, ``c = M z``, ``d = A c``.  Each
iteration updates every one of them by a recurrence of its own (``u -= alpha q``,
``m -= alpha c``, ...), so that no operator is applied inside the pair.

**The pair.**  Its reduction gathers, from the vectors at its start, CG's ``gamma =
(r, u)``, ``delta = (w, u)`` and ``(r, r)`` (the norm tested), and seven dots that
predict the second iteration's ``gamma`` and ``delta`` before its vectors exist: with
the first iteration's ``alpha`` and ``beta``, ``(r', u')`` and ``(w', u')`` are
quadratics in ``(s, u)``, ``(w, m)``, ``(w, q)``, ``(s, q)``, ``(n, m)``, ``(n, q)`` and
``(z, q)`` (M and A symmetric).  Overlapping it: ``g = M n``, ``h = A g``, ``e = M h``,
``f = A e``, the images the pair's two iterations need (``a = M d`` by ``e`` and the last
``a``, ``A a`` by ``f``).  The last ``a`` is never applied: it is recovered from two
versions of ``g``, ``M n`` after the last pair's first iteration (its recurrence's, kept
as ``gh``) and ``M n`` now, whose difference is ``alpha_old M d``.

**Its iterations.**  The pair's first iteration updates the 8 pairs of vectors and
directions at once; its second the 6 that the next pair's reduction needs, and the dots.
A prediction that fails (``(r', u')`` or its ``eta`` not positive: rounding near the
attainable accuracy) or ``maxiter`` one iteration away makes a pair of one iteration:
the next reduction starts from its vectors, and ``a`` is already ``M d`` (``behind`` sets
``gh`` so that the recovery gives it).  Where the pair's own ``(r, M r)`` or ``(p, A p)``
is not positive (the recurrences lost them), the pairs start again from ``b - A x``
(``result.replacements``); from ``b - A x`` itself it is a breakdown.

The test is on ``||r||_2``, at each pair's start (every other iteration, as PETSc's);
a test that passes is confirmed against ``b - A x``, and where that fails the pairs start
again from it.  The solve's start makes ``u``, ``w``, ``m`` and ``n`` before its one
reduction (PETSc's makes two more, blocking, for ``(w, m)`` and ``(n, m)``)."""
import numpy as np

from ..kernels import dot, fused_kernel
from ..kernels.basis import copy
from ..kernels.compile import hot
from ..kernels.workspace import vectors
from ..runtime.layout import (AFTER_TEST, BEGIN, CONFIRM, CONVERGED, FLUSH, FROM_X, ITERATION, MAX_ITERATIONS,
                              MAXITER, NONE, PRECONDITIONED, REPLACEMENTS, RESUME, TOP)
from ..runtime.operators import apply_operator
from ..runtime.reduce import start, wait
from ..runtime.steps import (breakdown, confirmed, confirmed_for_driver, end_iteration, precondition_or_copy,
                              residual_test, room, tolerance)
from ..solvers.result import Breakdown
from . import LoopSpec, loop

__all__ = ["PipeCG2", "pipecg2"]

residual = fused_kernel(["r = b - r"]).function
DOTS = ["r.u", "w.u", "r.r", "s.u", "w.m", "w.q", "s.q", "n.m", "n.q", "z.q"]
(GAMMA_, DELTA_, RR_, SU, WM, WQ, SQ, NM, NQ, ZQ, BB) = range(len(DOTS) + 1)   # BB: the start's (b, b)
# a pair's first iteration (t = beta / alpha_old: a = e + beta M d_old, M d_old recovered)
first = fused_kernel(["a = e + t*gh - t*g", "ab = f + t*hh - t*h",
                      "p = u + beta*p", "s = w + beta*s", "q = m + beta*q", "z = n + beta*z", "c = g + beta*c",
                      "d = h + beta*d",
                      "x = x + alpha*p", "r = r - alpha*s", "u = u - alpha*q", "w = w - alpha*z", "m = m - alpha*c",
                      "n = n - alpha*d", "g = g - alpha*a", "h = h - alpha*ab", "gh = g", "hh = h"],
                     scalars=["alpha", "beta", "t"], noalias=True).function
# its second, and the next reduction's dots
second = fused_kernel(["p = u + beta*p", "s = w + beta*s", "q = m + beta*q", "z = n + beta*z", "c = g + beta*c",
                       "d = h + beta*d",
                       "x = x + alpha*p", "r = r - alpha*s", "u = u - alpha*q", "w = w - alpha*z", "m = m - alpha*c",
                       "n = n - alpha*d"],
                      dots=DOTS, scalars=["alpha", "beta"], noalias=True).function
dots = fused_kernel([], dots=DOTS).function
behind = fused_kernel(["gh = g + alpha*a", "hh = h + alpha*ab"], scalars=["alpha"], noalias=True).function

# resume points of the method's own, after the common ones
HALF = 6       # after a pair's first iteration (a callback's stop): its second next
REDUCE = 7     # after a pair's last iteration: the next pair's reduction
CYCLE = 8      # the pairs again from b - A x, computed here (the recurrences lost it)

# the scalars kept in S: the last iteration's gamma and alpha; the pair's two
# iterations' alpha and beta; whether it has one iteration, whether it starts afresh
# (beta = 0); the breakdown its reduction found (-1: none) and the value
(GAMMA, ALPHA, ALPHA1, BETA1, ALPHA2, BETA2, SINGLE, FRESH, FOUND, FOUND_VALUE) = range(10)
INDEFINITE_PC, INDEFINITE_MAT, NOT_FINITE = range(3)                        # the breakdown checks
START_LABEL, PAIR_LABEL, TRUE_LABEL = range(3)


@loop
def pipecg2(W, x, b, S, I, F, hist, trace, A, P, R):
    r, u, w, m, n, p, s, q, z, c, d, g, h, e, f, a, ab, gh, hh, coef, out = W
    send, rd = R.send[0], R.recv[0]
    iteration, resume = I[ITERATION], I[RESUME]
    preconditioned = I[PRECONDITIONED] != 0
    event = NONE
    while True:
        if resume == CONFIRM:   # a test the driver made passed: b - A x decides (into r)
            event = confirmed_for_driver(A, P, x, b, r, e, R, TRUE_LABEL, I, F, hist, trace)
            break
        if resume == BEGIN or resume == FROM_X or resume == CYCLE:
            # the start: u, w, m, n, then the one reduction, overlapping g, h, e, f
            if not room(1, 2, hist, trace, I):
                event = FLUSH
                break
            begin = resume == BEGIN
            if resume != FROM_X:    # (FROM_X: b - A x is in r already, a confirmation that failed)
                apply_operator(A, x, r, R, -1, I, F)
                residual(b=b, r=r, coef=coef, out=out)
            if not begin:
                I[REPLACEMENTS] += 1
            precondition_or_copy(P, r, u, R, -1, I, F, preconditioned)
            apply_operator(A, u, w, R, -1, I, F)
            precondition_or_copy(P, w, m, R, -1, I, F, preconditioned)
            apply_operator(A, m, n, R, -1, I, F)
            for v in (p, s, q, z, c, d):    # no direction yet (beta = 0 takes none of them)
                v[:] = 0.0
            send[SU], send[WQ], send[SQ], send[NQ], send[ZQ] = 0.0, 0.0, 0.0, 0.0, 0.0
            send[GAMMA_], send[DELTA_], send[RR_] = dot(r, u), dot(w, u), dot(r, r)
            send[WM], send[NM] = dot(w, m), dot(n, m)
            if begin:
                send[BB] = dot(b, b)
            event = _reduce(A, P, n, g, h, e, f, R, START_LABEL, BB + 1 if begin else BB, I, F,
                            trace, preconditioned)
            if event != NONE:
                break
            if begin:
                event = tolerance(rd[BB], I, F)
                if event != NONE:
                    break
            copy(g, gh)     # finite, whatever an earlier solve left: the first pair takes 0 times them
            copy(h, hh)
            S[FRESH], S[SINGLE] = 1.0, 0.0
            _coefficients(rd, S, I, iteration)
            resume = AFTER_TEST
            event = residual_test(np.sqrt(rd[RR_]), hist, I, F)
        elif resume == TOP or resume == HALF or resume == REDUCE:
            if resume == TOP:   # the pair's first iteration
                coef[0], coef[1] = S[ALPHA1], S[BETA1]
                coef[2] = 0.0 if S[FRESH] != 0.0 else S[BETA1] / S[ALPHA]
                first(a=a, ab=ab, e=e, f=f, g=g, gh=gh, h=h, hh=hh, p=p, s=s, q=q, z=z, c=c, d=d, x=x, r=r, u=u, w=w,
                      m=m, n=n, coef=coef, out=out)
                S[ALPHA], S[FRESH] = S[ALPHA1], 0.0
                event = end_iteration(iteration, I)
                iteration += 1
                resume = HALF
                if event != NONE:
                    break
            if resume == HALF:  # its second, or none: the next reduction's dots
                resume = REDUCE
                if S[SINGLE] != 0.0:
                    dots(r=r, u=u, w=w, s=s, m=m, q=q, n=n, z=z, coef=coef, out=out)
                else:
                    coef[0], coef[1] = S[ALPHA2], S[BETA2]
                    second(p=p, s=s, q=q, z=z, c=c, d=d, x=x, r=r, u=u, w=w, m=m, n=n, g=g, h=h, coef=coef,
                           out=out)
                    S[ALPHA] = S[ALPHA2]
                    event = end_iteration(iteration, I)
                    iteration += 1
                    if event != NONE:
                        break
            if not room(1, 2, hist, trace, I):
                event = FLUSH
                break
            for j in range(BB):
                send[j] = out[j]
            event = _reduce(A, P, n, g, h, e, f, R, PAIR_LABEL, BB, I, F, trace, preconditioned)
            if event != NONE:
                break
            if S[SINGLE] != 0.0:    # a holds M d already: make the next pair's recovery give it
                coef[0] = S[ALPHA]
                behind(g=g, h=h, a=a, ab=ab, gh=gh, hh=hh, coef=coef, out=out)
            _coefficients(rd, S, I, iteration)
            resume = AFTER_TEST
            event = residual_test(np.sqrt(rd[RR_]), hist, I, F)
        if resume == AFTER_TEST:
            if event == CONVERGED:
                event = confirmed(A, P, x, b, r, e, R, TRUE_LABEL, I, F, hist, trace)
                if event == NONE:
                    resume = FROM_X
                    continue
            if event != NONE:
                break
            if iteration == I[MAXITER]:
                event = MAX_ITERATIONS
                break
            if S[FOUND] >= 0.0:
                if S[FRESH] != 0.0:     # from b - A x: A or M is not SPD
                    event = breakdown(int(S[FOUND]), S[FOUND_VALUE], I, F)
                    break
                resume = CYCLE      # the recurrences lost (r, M r) or (p, A p): again from b - A x
                continue
            resume = TOP
    I[ITERATION] = iteration
    I[RESUME] = resume
    return event


@hot
def _coefficients(rd, S, I, iteration):
    """The pair's alphas and betas from its reduction ``rd``, into S: CG's (Chronopoulos
    and Gear's) for its first iteration, and for its second from ``gamma`` and ``delta``
    predicted by the dots.  A check that fails is kept (S[FOUND]) for after the test."""
    fresh = S[FRESH] != 0.0
    gamma, delta = rd[GAMMA_], rd[DELTA_]
    S[FOUND] = -1.0
    if not gamma > 0.0:     # (r, M r) <= 0 with r != 0, where the test does not pass
        S[FOUND], S[FOUND_VALUE] = INDEFINITE_PC if np.isfinite(gamma) else NOT_FINITE, gamma
        return
    beta = 0.0 if fresh else gamma / S[GAMMA]
    eta = delta if fresh else delta - beta * gamma / S[ALPHA]
    if not eta > 0.0:
        S[FOUND], S[FOUND_VALUE] = INDEFINITE_MAT if np.isfinite(eta) else NOT_FINITE, eta
        return
    alpha = gamma / eta
    S[ALPHA1], S[BETA1], S[GAMMA] = alpha, beta, gamma
    # the second iteration's (r, u) and (w, u), predicted
    gamma2 = gamma - 2.0 * alpha * (delta + beta * rd[SU]) + alpha * alpha * (
        rd[WM] + 2.0 * beta * rd[WQ] + beta * beta * rd[SQ])
    delta2 = delta - 2.0 * alpha * (rd[WM] + beta * rd[WQ]) + alpha * alpha * (
        rd[NM] + 2.0 * beta * rd[NQ] + beta * beta * rd[ZQ])
    beta2 = gamma2 / gamma
    eta2 = delta2 - beta2 * gamma2 / alpha
    single = I[MAXITER] - iteration == 1 or not (gamma2 > 0.0 and eta2 > 0.0 and np.isfinite(eta2))
    S[SINGLE] = 1.0 if single else 0.0
    if not single:
        S[ALPHA2], S[BETA2], S[GAMMA] = gamma2 / eta2, beta2, gamma2


@hot
def _reduce(A, P, n, g, h, e, f, R, label, count, I, F, trace, preconditioned):
    """Start the reduction of ``R.send[0, :count]``, make ``g = M n``, ``h = A g``,
    ``e = M h`` and ``f = A e`` meanwhile, and wait for it."""
    start(R, 0, count, label, I, F, trace)
    precondition_or_copy(P, n, g, R, 0, I, F, preconditioned)
    apply_operator(A, g, h, R, 0, I, F)
    precondition_or_copy(P, h, e, R, 0, I, F, preconditioned)
    apply_operator(A, e, f, R, 0, I, F)
    return wait(R, 0, I, F, trace)



def _breakdown(check, value):
    if check == INDEFINITE_PC:
        return Breakdown("diverged_indefinite_pc", f"preconditioner is not positive definite: (r, M r) = {value:.3e}")
    if check == NOT_FINITE:
        return Breakdown("diverged_nanorinf", "(r, M r) or (p, A p) is not finite")
    return Breakdown("diverged_indefinite_mat", f"matrix is not positive definite: (p, A p) = {value:.3e} <= 0")


def _workspace(n, preconditioned):
    return (*vectors(19, n), np.zeros(3), np.zeros(len(DOTS)))


PipeCG2 = LoopSpec("p-cg2", pipecg2, ["start (r,u) (w,u) (r,r) (w,m) (n,m) (b,b)",
                                      "pair " + " ".join(f"({d[0]},{d[2]})" for d in DOTS), "b - A x"],
                   _workspace, 10, _breakdown, width=len(DOTS) + 1, reductions=2, confirms=True)
