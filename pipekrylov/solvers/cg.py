"""Classic preconditioned Conjugate Gradients: the baseline with two reductions per iteration."""
import numpy as np

from ..kernels import fused_kernel
from .common import Breakdown, SolverRun

__all__ = ["cg"]


def cg(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
       comm=None, monitor=False, latency=0.0):
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
    run = SolverRun("cg", A, b, x0, rtol, atol, maxiter, M, callback, comm, monitor, latency)
    return run.run(_cg_loop)


def _cg_loop(run):
    matvec, reduce = run.A.matvec, run.reduction.allreduce
    x, b = run.x, run.b
    r = b - matvec(x)
    z = np.empty_like(r) if run.M is not None else r
    p, q = np.zeros_like(r), np.empty_like(r)
    update = fused_kernel(["x = x + alpha*p", "r = r - alpha*q"], dots=["r.r"], scalars=["alpha"])
    direction = fused_kernel(["p = z + beta*p"], scalars=["beta"])
    rr, rho_prev = r @ r, None
    for iteration in range(run.maxiter + 1):
        if run.M is not None:
            run.precondition(r, z)
            rr, rho = reduce([rr, r @ z], "(r,r) (r,z)")
        else:
            rr = rho = reduce([rr], "(r,r)")[0]
        if run.converged(iteration, np.sqrt(rr)):
            return x, iteration, run.stop_reason()
        if iteration == run.maxiter:
            break
        if rho < 0:
            raise Breakdown("diverged_indefinite_pc", "preconditioner is not positive definite: (r, Mr) < 0")
        beta = 0.0 if rho_prev is None else rho / rho_prev
        direction({"p": p, "z": z}, {"beta": beta})
        matvec(p, q)
        pq = reduce([p @ q], "(p,Ap)")[0]
        if not pq > 0:
            if not np.isfinite(pq):
                raise Breakdown("diverged_nanorinf", "(p, Ap) is not finite")
            raise Breakdown("diverged_indefinite_mat",
                            f"matrix is not positive definite: (p, Ap) = {pq:.3e} <= 0")
        alpha = rho / pq
        (rr,) = update({"x": x, "p": p, "r": r, "q": q}, {"alpha": alpha})
        rho_prev = rho
        run.iterations = iteration + 1
        run.iterated(x)
    return x, run.maxiter, "diverged_its"
