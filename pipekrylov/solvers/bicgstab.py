"""Classic preconditioned BiCGStab (van der Vorst 1992), right preconditioned as in scipy.

As CG (:mod:`.cg`), a Python loop and a compiled one (:func:`bicgstab_loop_source`), bit
for bit alike.
"""
import functools

import numpy as np

from ..kernels import dot, fused_kernel
from ..parallel.runtime import FloatSlot, IntSlot
from .common import Breakdown, SolverRun

__all__ = ["bicgstab"]

EPS2 = np.finfo(float).eps ** 2


def _direction():
    return fused_kernel(["p = r + beta*p - beta*omega*v"], scalars=["beta", "omega"])


def _half():
    return fused_kernel(["r = r - alpha*v"], dots=["r.r"], scalars=["alpha"])


def _step():
    return fused_kernel(["x = x + alpha*phat + omega*shat", "r = r - omega*t"], scalars=["alpha", "omega"])


def bicgstab(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
             comm=None, monitor=False, latency=0.0, loop="auto"):
    """Solve ``A x = b`` for general ``A`` by BiCGStab.  Collective.

    Arguments (``loop`` too) and return value as :func:`pipekrylov.cg`.  When ``(r0, r)``
    vanishes (a BiCG breakdown) the shadow residual restarts from the current residual;
    ``result.restarts`` counts that, and a second breakdown right after one gives
    ``diverged_breakdown_bicg``.  ``(r0, A p) = 0`` or ``omega = 0`` gives
    ``diverged_breakdown``.

    Notes
    -----
    Per iteration: two SpMVs, two preconditioner applications and three blocking
    reductions: ``(r0, r)`` with ``(r, r)``; ``(r0, v)``; ``(t, s)`` with ``(t, t)`` and
    ``(s, s)``.  Follows scipy's loop, so iteration counts agree with it.
    """
    from .compiled import check_loop, run_on_loop
    check_loop(loop)
    run = SolverRun("bicgstab", A, b, x0, rtol, atol, maxiter, M, callback, comm, monitor, latency, loop=loop)
    return run_on_loop(run, _bicgstab_loop, _compiled_bicgstab() if loop != "python" else None, loop)


def _bicgstab_loop(run):
    matvec, reduce = run.A.matvec, run.reduction.allreduce
    x = run.x
    r = run.b - matvec(x)
    r0 = r.copy()
    p, v, phat, shat, t = (np.zeros_like(r) for _ in range(5))
    direction, half, step = _direction(), _half(), _step()
    rho_prev = alpha = omega = None
    threshold = EPS2 * run.bnorm ** 2
    restarted_at = None
    run.restarts = 0
    for iteration in range(run.maxiter + 1):
        rho, rr = reduce([dot(r0, r), dot(r, r)], "(r0,r) (r,r)")
        if run.converged(iteration, np.sqrt(rr)):
            return x, iteration, run.stop_reason()
        if iteration == run.maxiter:
            break
        restart = abs(rho) < threshold
        if restart:
            # BiCG breakdown: (r0, r) vanished.  Restart the shadow space from the current
            # residual (then (r0, r) = (r, r) > 0) instead of giving up.
            if restarted_at == iteration - 1:
                raise _breakdown(0, rho)
            r0[:] = r
            rho, restarted_at = rr, iteration
            run.restarts += 1
        if iteration == 0 or restart:
            p[:] = r
        else:
            if abs(omega) < EPS2:
                raise _breakdown(1, omega)
            beta = (rho / rho_prev) * (alpha / omega)
            direction({"p": p, "r": r, "v": v}, {"beta": beta, "omega": omega})
        run.precondition(p, phat)
        matvec(phat, v)
        rv = reduce([dot(r0, v)], "(r0,v)")[0]
        if rv == 0:
            raise _breakdown(2, rv)
        alpha = rho / rv
        (ss,) = half({"r": r, "v": v}, {"alpha": alpha})  # r now holds s
        run.precondition(r, shat)
        matvec(shat, t)
        ts, tt, ss = reduce([dot(t, r), dot(t, t), ss], "(t,s) (t,t) (s,s)")
        if np.sqrt(ss) <= run.atol:
            x += alpha * phat
            run.iterations = iteration + 1
            run.converged(iteration + 1, np.sqrt(ss))
            return x, iteration + 1, run.stop_reason()
        omega = ts / tt if tt > 0 else 0.0
        step({"x": x, "phat": phat, "shat": shat, "r": r, "t": t}, {"alpha": alpha, "omega": omega})
        rho_prev = rho
        run.iterations = iteration + 1
        run.iterated(x)
    return x, run.maxiter, "diverged_its"


# ---------------------------------------------------------------- the compiled loop
_LABELS = ["(r0,r) (r,r)", "(r0,v)", "(t,s) (t,t) (s,s)"]
# the loop's scalars in S; the driver sets THRESHOLD before and reads RESTARTS after
_STATE = ["rho", "rr", "rho_prev", "alpha", "omega", "restarted_at", "restarts", "threshold"]
RESTARTS, THRESHOLD = _STATE.index("restarts"), _STATE.index("threshold")


def bicgstab_loop_source():
    """The compiled loop of classic BiCGStab (source text): ``begin`` (r = b - A x,
    r0 = r) and ``loop`` (see :mod:`pipekrylov.parallel.runtime`)."""
    from .compiled import classic_source, fused_call
    direction, half, step = _direction(), _half(), _step()
    begin = ["spmv(x, r, A, R, I, F, False)",
             "for i in range(r.shape[0]):",
             "    r[i] = b[i] - r[i]",
             "r0[:] = r",
             f"S[{_STATE.index('restarted_at')}] = -2.0"]
    top = ["send[0], send[1] = dot(r0, r), dot(r, r)",
           "event = reduce_now(send, 2, 0, D, R, I, F, trace)",
           "if event >= 0:",
           "    break",
           "rho, rr = D[0], D[1]",
           "event = residual_test(rr, hist, I, F)",
           "if event >= 0:",
           "    break"]
    body = ["restart = abs(rho) < threshold",
            "if restart:",
            "    if restarted_at == iteration - 1:",
            "        event = breakdown(0, rho, I, F)",
            "        break",
            "    r0[:] = r",
            "    rho, restarted_at = rr, iteration",
            "    restarts += 1.0",
            "if iteration == 0 or restart:",
            "    p[:] = r",
            "else:",
            f"    if abs(omega) < {EPS2!r}:",
            "        event = breakdown(1, omega, I, F)",
            "        break",
            "    coef[0], coef[1] = (rho / rho_prev) * (alpha / omega), omega",
            "    " + fused_call(direction, "direction"),
            "precondition(p, phat, P, R, I, F, False)",
            "spmv(phat, v, A, R, I, F, False)",
            "send[0] = dot(r0, v)",
            "event = reduce_now(send, 1, 1, D, R, I, F, trace)",
            "if event >= 0:",
            "    break",
            "rv = D[0]",
            "if rv == 0:",
            "    event = breakdown(2, rv, I, F)",
            "    break",
            "alpha = rho / rv",
            "coef[0] = alpha",
            fused_call(half, "half"),
            "ss = out[0]",
            "precondition(r, shat, P, R, I, F, False)",
            "spmv(shat, t, A, R, I, F, False)",
            "send[0], send[1], send[2] = dot(t, r), dot(t, t), ss",
            "event = reduce_now(send, 3, 2, D, R, I, F, trace)",
            "if event >= 0:",
            "    break",
            "ts, tt, ss = D[0], D[1], D[2]",
            f"if np.sqrt(ss) <= F[{FloatSlot.ATOL}]:   # converged at the half step: x += alpha phat",
            "    for i in range(x.shape[0]):",
            "        x[i] += alpha * phat[i]",
            "    iteration += 1",
            f"    I[{IntSlot.DONE}] = iteration",
            "    event = residual_test(ss, hist, I, F)",
            "    break",
            "omega = ts / tt if tt > 0 else 0.0",
            "coef[0], coef[1] = alpha, omega",
            fused_call(step, "step"),
            "rho_prev = rho"]
    return classic_source("classic preconditioned BiCGStab",
                          {"direction": direction, "half": half, "step": step},
                          ["x", "b", "r", "r0", "p", "v", "phat", "shat", "t"], _STATE, 3, begin, top, body,
                          coefficients=2, norms=2)


def _breakdown(check, value):
    """The breakdown of check ``check`` (as the compiled loop numbers them) at ``value``;
    both loops raise it."""
    if check == 0:
        return Breakdown("diverged_breakdown_bicg", f"(r0, r) = {value:.3e}: BiCG breakdown")
    if check == 1:
        return Breakdown("diverged_breakdown", f"omega = {value:.3e}")
    return Breakdown("diverged_breakdown", "(r0, A p) = 0")


def _vectors(run):
    n = len(run.b)
    return (run.x, run.b, *(np.zeros(n) for _ in range(7)))


def _setup(run, S):
    S[THRESHOLD] = EPS2 * run.bnorm ** 2


def _finish(run, S):
    run.restarts = int(S[RESTARTS])


@functools.lru_cache(maxsize=None)
def _compiled_bicgstab():
    from .compiled import ClassicLoop
    return ClassicLoop(bicgstab_loop_source(), _vectors, _LABELS, _breakdown, scalars=len(_STATE) + 1,
                       setup=_setup, finish=_finish)
