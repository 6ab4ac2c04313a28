"""Pipelined flexible CG, GCR and GMRES, scipy's calling contract (the loops:
:mod:`pipekrylov.loops.flexible`, :mod:`pipekrylov.loops.pipefgmres`)."""
from .gmres import scipy_gmres
from .solver import made, solve_once

__all__ = ["pipefcg", "pipegcr", "pipefgmres"]


def pipefcg(A, b, x0=None, *, mmax=15, truncation="notay", rtol=1e-5, atol=0.0, maxiter=None, M=None,
            callback=None, comm=None, monitor=False, latency=0.0, loop="auto"):
    """Solve ``A x = b`` (``A`` SPD) by pipelined flexible CG (PETSc's pipefcg): for a
    preconditioner that may change from one application to the next, such as
    ``M="bjacobi-cg(k)"`` or a callable that itself iterates; one reduction per iteration,
    overlapped with M and A.  Collective.

    Arguments and result as :func:`pipekrylov.cg`, plus ``mmax``, the most earlier
    directions a new one is made A-orthogonal to, and ``truncation``, ``"notay"`` (the
    window grows from 1 to ``mmax`` and starts again) or ``"standard"`` (the last
    ``mmax``).  The norm tested is ``||r||`` of the recurrences, and a test that passes is
    confirmed against ``||b - A x|| <= max(atol, rtol ||b||)`` before convergence is
    reported.  ``result.restarts`` counts new cycles from ``b - A x`` where the directions
    lost A-orthogonality.
    """
    from ..loops.flexible import PipeFCG
    return solve_once(made(lambda: PipeFCG(mmax, truncation), "p-fcg"), A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M,
                      callback=callback, comm=comm, monitor=monitor, latency=latency, loop=loop)


def pipegcr(A, b, x0=None, *, mmax=15, truncation="notay", rtol=1e-5, atol=0.0, maxiter=None, M=None,
            callback=None, comm=None, monitor=False, latency=0.0, loop="auto"):
    """Solve ``A x = b`` (any nonsingular ``A``) by pipelined flexible GCR (PETSc's
    pipegcr): as :func:`pipefcg`, with directions ``A^T A``-orthogonal, so that each
    iteration minimizes ``||r||`` over the window's span (GMRES's residual, truncated).
    Right preconditioned, M may change.  Collective.
    """
    from ..loops.flexible import PipeGCR
    return solve_once(made(lambda: PipeGCR(mmax, truncation), "p-gcr"), A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M,
                      callback=callback, comm=comm, monitor=monitor, latency=latency, loop=loop)


def pipefgmres(A, b, x0=None, *, restart=30, shift="auto", rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
               callback_type=None, comm=None, monitor=False, latency=0.0, loop="auto"):
    """Solve ``A x = b`` by pipelined flexible GMRES(``restart``) (PETSc's pipefgmres): right
    preconditioned by an M that may change from one application to the next, each
    iteration's one reduction overlapped with an application of M and of A.  Collective.

    Arguments and result as :func:`pipekrylov.gmres` (scipy's ``maxiter`` in restart
    cycles, ``callback_type``), plus ``shift``, which keeps the recurred basis vectors
    away from the basis's span: ``"auto"`` (each cycle's ``||A M v_0||``, of ``A M``'s
    scale) or a number (PETSc's default is 1, its heuristic the largest eigenvalue of
    ``A M``).  ``result.shift`` is the last cycle's; ``result.restarts`` counts cycles
    ended early where the basis lost its orthogonality (a square root of a negative
    number).
    """
    from ..loops.pipefgmres import PipeFGMRES
    return scipy_gmres(made(lambda: PipeFGMRES(restart, shift), "p-fgmres"), A, b, x0, restart=restart, maxiter=maxiter, callback=callback,
                       callback_type=callback_type, monitor=monitor, rtol=rtol, atol=atol, M=M, comm=comm,
                       latency=latency, loop=loop)
