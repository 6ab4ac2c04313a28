"""Classic preconditioned Conjugate Residuals (the base method of Ghysels & Vanroose's p-CR)."""
import numpy as np

from ..kernels import fused_kernel
from .common import Breakdown, SolverRun

__all__ = ["cr"]


def cr(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
       comm=None, monitor=False, latency=0.0):
    """Solve ``A x = b`` for symmetric ``A`` (and SPD ``M``) by Conjugate Residuals.  Collective.

    Arguments and return value as :func:`pipekrylov.cg`.  CR minimizes the residual in
    the ``M``-norm over the Krylov space (unpreconditioned: equal to MINRES in exact
    arithmetic).  Breakdown: ``(u, Au) = 0`` or ``(Ap, M A p) <= 0`` gives
    ``diverged_breakdown`` / ``diverged_indefinite_pc``.

    Notes
    -----
    Per iteration: one SpMV, one preconditioner, two blocking reductions
    (``(s, q)``; then ``(u, w)`` fused with ``(r, r)``).
    """
    run = SolverRun("cr", A, b, x0, rtol, atol, maxiter, M, callback, comm, monitor, latency)
    return run.run(_cr_loop)


def _cr_loop(run):
    matvec, reduce = run.A.matvec, run.reduction.allreduce
    x = run.x
    r = run.b - matvec(x)
    u = run.precondition(r, np.empty_like(r))
    w = matvec(u)
    p, s, q = np.zeros_like(r), np.zeros_like(r), np.zeros_like(r)
    directions = fused_kernel(["p = u + beta*p", "s = w + beta*s"], scalars=["beta"])
    update = fused_kernel(["x = x + alpha*p", "r = r - alpha*s", "u = u - alpha*q"],
                          dots=["r.r"], scalars=["alpha"])
    rr, gamma_prev = r @ r, None
    for iteration in range(run.maxiter + 1):
        rr, gamma = reduce([rr, u @ w], "(r,r) (u,Au)")
        if run.converged(iteration, np.sqrt(rr)):
            return x, iteration, run.stop_reason()
        if iteration == run.maxiter:
            break
        if gamma == 0:
            raise Breakdown("diverged_breakdown", "(u, Au) = 0")
        beta = 0.0 if gamma_prev is None else gamma / gamma_prev
        directions({"p": p, "u": u, "s": s, "w": w}, {"beta": beta})
        run.precondition(s, q)
        sq = reduce([s @ q], "(Ap,MAp)")[0]
        if not sq > 0:
            raise Breakdown("diverged_indefinite_pc", f"(Ap, M Ap) = {sq:.3e} <= 0")
        alpha = gamma / sq
        (rr,) = update({"x": x, "p": p, "r": r, "s": s, "u": u, "q": q}, {"alpha": alpha})
        matvec(u, w)
        gamma_prev = gamma
        run.iterations = iteration + 1
        run.iterated(x)
    return x, run.maxiter, "diverged_its"
