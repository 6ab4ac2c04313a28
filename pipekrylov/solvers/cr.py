"""Classic preconditioned Conjugate Residuals (the base method of Ghysels & Vanroose's p-CR).

As CG (:mod:`.cg`), a Python loop and a compiled one (:func:`cr_loop_source`), bit for bit
alike.
"""
import functools

import numpy as np

from ..kernels import dot, fused_kernel
from .common import Breakdown, SolverRun

__all__ = ["cr"]


def _directions():
    return fused_kernel(["p = u + beta*p", "s = w + beta*s"], scalars=["beta"])


def _update():
    return fused_kernel(["x = x + alpha*p", "r = r - alpha*s", "u = u - alpha*q"], dots=["r.r"],
                        scalars=["alpha"])


def cr(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
       comm=None, monitor=False, latency=0.0, loop="auto"):
    """Solve ``A x = b`` for symmetric ``A`` (and SPD ``M``) by Conjugate Residuals.  Collective.

    Arguments (``loop`` too) and return value as :func:`pipekrylov.cg`.  CR minimizes the residual in
    the ``M``-norm over the Krylov space (unpreconditioned: equal to MINRES in exact
    arithmetic).  Breakdown: ``(u, Au) = 0`` or ``(Ap, M A p) <= 0`` gives
    ``diverged_breakdown`` / ``diverged_indefinite_pc``.

    Notes
    -----
    Per iteration: one SpMV, one preconditioner, two blocking reductions
    (``(s, q)``; then ``(u, w)`` fused with ``(r, r)``).
    """
    from .compiled import check_loop, run_on_loop
    check_loop(loop)
    run = SolverRun("cr", A, b, x0, rtol, atol, maxiter, M, callback, comm, monitor, latency, loop=loop)
    return run_on_loop(run, _cr_loop, _compiled_cr() if loop != "python" else None, loop)


def _cr_loop(run):
    matvec, reduce = run.A.matvec, run.reduction.allreduce
    x = run.x
    r = run.b - matvec(x)
    u = run.precondition(r, np.empty_like(r))
    w = matvec(u)
    p, s, q = np.zeros_like(r), np.zeros_like(r), np.zeros_like(r)
    directions, update = _directions(), _update()
    rr, gamma_prev = dot(r, r), None
    for iteration in range(run.maxiter + 1):
        rr, gamma = reduce([rr, dot(u, w)], "(r,r) (u,Au)")
        if run.converged(iteration, np.sqrt(rr)):
            return x, iteration, run.stop_reason()
        if iteration == run.maxiter:
            break
        if gamma == 0:
            raise _breakdown(0, gamma)
        beta = 0.0 if gamma_prev is None else gamma / gamma_prev
        directions({"p": p, "u": u, "s": s, "w": w}, {"beta": beta})
        run.precondition(s, q)
        sq = reduce([dot(s, q)], "(Ap,MAp)")[0]
        if not sq > 0:
            raise _breakdown(1, sq)
        alpha = gamma / sq
        (rr,) = update({"x": x, "p": p, "r": r, "s": s, "u": u, "q": q}, {"alpha": alpha})
        matvec(u, w)
        gamma_prev = gamma
        run.iterations = iteration + 1
        run.iterated(x)
    return x, run.maxiter, "diverged_its"


# ---------------------------------------------------------------- the compiled loop
_LABELS = ["(r,r) (u,Au)", "(Ap,MAp)"]


def cr_loop_source():
    """The compiled loop of classic CR (source text): ``begin`` (r = b - A x, u = M r,
    w = A u, (r, r)) and ``loop`` (see :mod:`pipekrylov.parallel.runtime`)."""
    from .compiled import classic_source, fused_call
    directions, update = _directions(), _update()
    begin = ["spmv(x, r, A, R, I, F, False)",
             "for i in range(r.shape[0]):",
             "    r[i] = b[i] - r[i]",
             "precondition(r, u, P, R, I, F, False)",
             "spmv(u, w, A, R, I, F, False)",
             "S[0] = dot(r, r)"]
    top = ["send[0], send[1] = rr, dot(u, w)",
           "event = reduce_now(send, 2, 0, D, R, I, F, trace)",
           "if event >= 0:",
           "    break",
           "rr, gamma = D[0], D[1]",
           "event = residual_test(rr, hist, I, F)",
           "if event >= 0:",
           "    break"]
    body = ["if gamma == 0:",
            "    event = breakdown(0, gamma, I, F)",
            "    break",
            "coef[0] = 0.0 if S[3] == 0.0 else gamma / gamma_prev",
            fused_call(directions, "directions"),
            "precondition(s, q, P, R, I, F, False)",
            "send[0] = dot(s, q)",
            "event = reduce_now(send, 1, 1, D, R, I, F, trace)",
            "if event >= 0:",
            "    break",
            "sq = D[0]",
            "if not sq > 0:",
            "    event = breakdown(1, sq, I, F)",
            "    break",
            "coef[0] = gamma / sq",
            fused_call(update, "update"),
            "rr = out[0]",
            "spmv(u, w, A, R, I, F, False)",
            "gamma_prev = gamma"]
    return classic_source("classic preconditioned CR", {"directions": directions, "update": update},
                          ["x", "b", "r", "u", "w", "p", "s", "q"], ["rr", "gamma", "gamma_prev"], 2,
                          begin, top, body)


def _breakdown(check, value):
    """The breakdown of check ``check`` (as the compiled loop numbers them) at ``value``;
    both loops raise it."""
    if check == 0:
        return Breakdown("diverged_breakdown", "(u, Au) = 0")
    return Breakdown("diverged_indefinite_pc", f"(Ap, M Ap) = {value:.3e} <= 0")


def _vectors(run):
    n = len(run.b)
    return run.x, run.b, np.empty(n), np.empty(n), np.empty(n), np.zeros(n), np.zeros(n), np.zeros(n)


@functools.lru_cache(maxsize=None)
def _compiled_cr():
    from .compiled import ClassicLoop
    return ClassicLoop(cr_loop_source(), _vectors, _LABELS, _breakdown)
