"""Classic preconditioned BiCGStab (van der Vorst 1992), right preconditioned as in scipy."""
import numpy as np

from ..kernels import fused_kernel
from .common import Breakdown, SolverRun

__all__ = ["bicgstab"]


def bicgstab(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
             comm=None, monitor=False, latency=0.0):
    """Solve ``A x = b`` for general ``A`` by BiCGStab.  Collective.

    Arguments and return value as :func:`pipekrylov.cg`.  When ``(r0, r)`` vanishes (a BiCG
    breakdown) the shadow residual restarts from the current residual; ``result.restarts``
    counts that, and a second breakdown right after one gives ``diverged_breakdown_bicg``.
    ``(r0, A p) = 0`` or ``omega = 0`` gives ``diverged_breakdown``.

    Notes
    -----
    Per iteration: two SpMVs, two preconditioner applications and three blocking
    reductions: ``(r0, r)`` with ``(r, r)``; ``(r0, v)``; ``(t, s)`` with ``(t, t)`` and
    ``(s, s)``.  Follows scipy's loop, so iteration counts agree with it.
    """
    run = SolverRun("bicgstab", A, b, x0, rtol, atol, maxiter, M, callback, comm, monitor, latency)
    result = run.run(_bicgstab_loop)
    result.restarts = run.restarts
    return result


def _bicgstab_loop(run):
    matvec, reduce = run.A.matvec, run.reduction.allreduce
    x = run.x
    r = run.b - matvec(x)
    r0 = r.copy()
    p, v, phat, shat, t = (np.zeros_like(r) for _ in range(5))
    direction = fused_kernel(["p = r + beta*p - beta*omega*v"], scalars=["beta", "omega"])
    half = fused_kernel(["r = r - alpha*v"], dots=["r.r"], scalars=["alpha"])
    step = fused_kernel(["x = x + alpha*phat + omega*shat", "r = r - omega*t"],
                        scalars=["alpha", "omega"])
    rho_prev = alpha = omega = None
    eps = np.finfo(float).eps
    restarted_at = None
    run.restarts = 0
    for iteration in range(run.maxiter + 1):
        rho, rr = reduce([r0 @ r, r @ r], "(r0,r) (r,r)")
        if run.converged(iteration, np.sqrt(rr)):
            return x, iteration, run.stop_reason()
        if iteration == run.maxiter:
            break
        restart = abs(rho) < eps ** 2 * run.bnorm ** 2
        if restart:
            # BiCG breakdown: (r0, r) vanished.  Restart the shadow space from the current
            # residual (then (r0, r) = (r, r) > 0) instead of giving up.
            if restarted_at == iteration - 1:
                raise Breakdown("diverged_breakdown_bicg", f"(r0, r) = {rho:.3e}: BiCG breakdown")
            r0[:] = r
            rho, restarted_at = rr, iteration
            run.restarts += 1
        if iteration == 0 or restart:
            p[:] = r
        else:
            if abs(omega) < eps ** 2:
                raise Breakdown("diverged_breakdown", f"omega = {omega:.3e}")
            beta = (rho / rho_prev) * (alpha / omega)
            direction({"p": p, "r": r, "v": v}, {"beta": beta, "omega": omega})
        run.precondition(p, phat)
        matvec(phat, v)
        rv = reduce([r0 @ v], "(r0,v)")[0]
        if rv == 0:
            raise Breakdown("diverged_breakdown", "(r0, A p) = 0")
        alpha = rho / rv
        (ss,) = half({"r": r, "v": v}, {"alpha": alpha})  # r now holds s
        run.precondition(r, shat)
        matvec(shat, t)
        ts, tt, ss = reduce([t @ r, t @ t, ss], "(t,s) (t,t) (s,s)")
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
