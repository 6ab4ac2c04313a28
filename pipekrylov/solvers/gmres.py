"""Classic restarted GMRES(m), scipy's calling contract (the loop: :mod:`pipekrylov.loops.gmres`)."""
from .solver import solve_once

__all__ = ["gmres"]


def gmres(A, b, x0=None, *, rtol=1e-5, atol=0.0, restart=30, maxiter=None, M=None,
          callback=None, comm=None, monitor=False, latency=0.0, loop="auto"):
    """Solve ``A x = b`` by restarted GMRES(``restart``).  Collective.

    Arguments and return value as :func:`pipekrylov.cg`, except:

    restart : int
        Krylov subspace size before a restart (default 30).
    maxiter : int
        Total inner iterations (PETSc's convention; scipy counts restart cycles).

    Right preconditioning, so the norm tested is the true residual's ``||b - A x||``
    (estimated by the Givens rotations within a cycle).  Classical Gram-Schmidt run
    twice (CGS2): three blocking reductions per iteration, ``V^T w`` twice and ``||w||``.
    The callback sees x after each cycle.
    """
    return solve_once("gmres", A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M, callback=callback, comm=comm,
                      monitor=monitor, latency=latency, loop=loop, restart=restart)
