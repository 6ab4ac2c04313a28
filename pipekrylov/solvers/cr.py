"""Classic preconditioned Conjugate Residuals, scipy's calling contract (the loop:
:mod:`pipekrylov.loops.cr`)."""
from .solver import solve_once

__all__ = ["cr"]


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
    return solve_once("cr", A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M, callback=callback, comm=comm,
                      monitor=monitor, latency=latency, loop=loop)
