"""Classic BiCGStab, right preconditioned as in scipy (the loop: :mod:`pipekrylov.loops.bicgstab`)."""
from .solver import solve_once

__all__ = ["bicgstab"]


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
    return solve_once("bicgstab", A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M, callback=callback,
                      comm=comm, monitor=monitor, latency=latency, loop=loop)
