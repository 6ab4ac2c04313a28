"""Classic preconditioned Conjugate Gradients: the baseline with two reductions per iteration.

The iteration runs in Python (:func:`_cg_loop`) or as one compiled function
(:func:`cg_loop_source`, on :mod:`pipekrylov.parallel.runtime`), with the same results, bit
for bit: both sum the local dots in index order and call the same fused kernels.
"""
import functools

import numpy as np

from ..kernels import dot, fused_kernel
from ..parallel.runtime import IntSlot
from .common import Breakdown, SolverRun

__all__ = ["cg", "direction_kernel", "update_kernel"]


def direction_kernel():
    """p = z + beta p (both loops; the model times it: pipekrylov.model)."""
    return fused_kernel(["p = z + beta*p"], scalars=["beta"])


def update_kernel():
    """x += alpha p, r -= alpha q and the local (r, r)."""
    return fused_kernel(["x = x + alpha*p", "r = r - alpha*q"], dots=["r.r"], scalars=["alpha"])


def cg(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
       comm=None, monitor=False, latency=0.0, loop="auto"):
    """Solve ``A x = b`` for symmetric positive definite ``A`` by preconditioned CG.  Collective.

    Parameters
    ----------
    A : DistributedCSR, or scipy.sparse matrix / 2-D array given whole on every rank
    b, x0 : ndarray
        Whole vectors, or this rank's slices when ``A`` is distributed.
    rtol, atol : float
        Stop when ``||r|| < max(atol, rtol * ||b||)`` (scipy's rule).
    maxiter : int
        Default ``10 n``.
    M : None, 'jacobi', 'bjacobi', 'ic0', 'ilu0', a preconditioner or an operator
        Approximates ``inv(A)``; must be SPD.
    callback : callable
        ``callback(xk)`` after each iteration.
    comm : mpi4py communicator
        Default: ``A.comm``, or COMM_WORLD for a matrix given whole.
    monitor : bool, file or callable
        Print PETSc-style ``  k KSP Residual norm ...`` lines on rank 0 (to the file), or
        call ``monitor(k, rnorm)`` on every rank.
    latency : float
        Injected reduction latency in seconds (emulating a large machine).
    loop : "auto", "compiled" or "python"
        ``"auto"``: the whole iteration compiled (A distributed, M None, "jacobi",
        "ilu0", "ic0" or "bjacobi"), else the Python loop; ``result.loop`` says which ran.

    Returns
    -------
    SolveResult
        Unpacks to ``(x, info)``: ``info == 0`` converged, ``> 0`` iterations done
        without converging, ``< 0`` breakdown (``diverged_indefinite_mat`` when
        ``p^T A p <= 0``, ``diverged_indefinite_pc`` when ``r^T M r < 0``).

    Notes
    -----
    Each iteration does one SpMV, one preconditioner application and two blocking
    global reductions: ``(p, Ap)``, then ``(r, r)`` fused with ``(r, z)``.
    """
    from .compiled import check_loop, run_on_loop
    check_loop(loop)
    run = SolverRun("cg", A, b, x0, rtol, atol, maxiter, M, callback, comm, monitor, latency, loop=loop)
    return run_on_loop(run, _cg_loop, _compiled_cg() if loop != "python" else None, loop)


def _cg_loop(run):
    matvec, reduce = run.A.matvec, run.reduction.allreduce
    x, b = run.x, run.b
    r = b - matvec(x)
    z = np.empty_like(r) if run.M is not None else r
    p, q = np.zeros_like(r), np.empty_like(r)
    update, direction = update_kernel(), direction_kernel()
    rr, rho_prev = dot(r, r), None
    for iteration in range(run.maxiter + 1):
        if run.M is not None:
            run.precondition(r, z)
            rr, rho = reduce([rr, dot(r, z)], "(r,r) (r,z)")
        else:
            rr = rho = reduce([rr], "(r,r)")[0]
        if run.converged(iteration, np.sqrt(rr)):
            return x, iteration, run.stop_reason()
        if iteration == run.maxiter:
            break
        if rho < 0:
            raise _breakdown(0, rho)
        beta = 0.0 if rho_prev is None else rho / rho_prev
        direction({"p": p, "z": z}, {"beta": beta})
        matvec(p, q)
        pq = reduce([dot(p, q)], "(p,Ap)")[0]
        if not pq > 0:
            raise _breakdown(1 if not np.isfinite(pq) else 2, pq)
        alpha = rho / pq
        (rr,) = update({"x": x, "p": p, "r": r, "q": q}, {"alpha": alpha})
        rho_prev = rho
        run.iterations = iteration + 1
        run.iterated(x)
    return x, run.maxiter, "diverged_its"


# ---------------------------------------------------------------- the compiled loop
_LABELS = ["(r,r) (r,z)", "(p,Ap)", "(r,r)"]


def cg_loop_source():
    """The compiled loop of classic CG (source text): ``begin`` (r = b - A x, (r, r))
    and ``loop``, which runs iterations until an event (see :mod:`pipekrylov.parallel.runtime`)."""
    from .compiled import classic_source, fused_call
    direction, update = direction_kernel(), update_kernel()
    begin = ["spmv(x, r, A, R, I, F, False)",
             "for i in range(r.shape[0]):",
             "    r[i] = b[i] - r[i]",
             "rr = dot(r, r)",
             "S[0] = rr"]
    top = ["if I[%d] != 0:   # a preconditioner" % IntSlot.PC_KIND,
           "    precondition(r, z, P, R, I, F, False)",
           "    send[0], send[1] = rr, dot(r, z)",
           "    count, label = 2, 0",
           "else:",
           "    send[0] = rr",
           "    count, label = 1, 2",
           "event = reduce_now(send, count, label, D, R, I, F, trace)",
           "if event >= 0:",
           "    break",
           "rr = D[0]",
           "rho = D[1] if count == 2 else rr",
           "event = residual_test(rr, hist, I, F)",
           "if event >= 0:",
           "    break"]
    body = ["if rho < 0:",
            "    event = breakdown(0, rho, I, F)",
            "    break",
            "coef[0] = 0.0 if S[3] == 0.0 else rho / rho_prev",
            fused_call(direction, "direction"),
            "spmv(p, q, A, R, I, F, False)",
            "send[0] = dot(p, q)",
            "event = reduce_now(send, 1, 1, D, R, I, F, trace)",
            "if event >= 0:",
            "    break",
            "pq = D[0]",
            "if not pq > 0:",
            "    event = breakdown(2 if np.isfinite(pq) else 1, pq, I, F)",
            "    break",
            "coef[0] = rho / pq",
            fused_call(update, "update"),
            "rr = out[0]",
            "rho_prev = rho"]
    return classic_source("classic preconditioned CG", {"direction": direction, "update": update},
                          ["x", "b", "r", "z", "p", "q"], ["rr", "rho", "rho_prev"], 2, begin, top, body)


def _breakdown(check, value):
    """The breakdown of check ``check`` (as the compiled loop numbers them) at ``value``;
    both loops raise it."""
    if check == 0:
        return Breakdown("diverged_indefinite_pc", "preconditioner is not positive definite: (r, Mr) < 0")
    if check == 1:
        return Breakdown("diverged_nanorinf", "(p, Ap) is not finite")
    return Breakdown("diverged_indefinite_mat", f"matrix is not positive definite: (p, Ap) = {value:.3e} <= 0")


def _vectors(run):
    n = len(run.b)
    r = np.empty(n)
    return run.x, run.b, r, (np.empty(n) if run.M is not None else r), np.zeros(n), np.empty(n)


@functools.lru_cache(maxsize=None)
def _compiled_cg():
    from .compiled import ClassicLoop
    return ClassicLoop(cg_loop_source(), _vectors, _LABELS, _breakdown)
