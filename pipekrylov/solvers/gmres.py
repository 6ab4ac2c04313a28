"""Classic restarted GMRES(m), scipy's calling contract (the loop: :mod:`pipekrylov.loops.gmres`)."""
import warnings

import numpy as np

from .inputs import distributed, fitted_restart
from .solver import Refused, _name, made, solve_once

__all__ = ["gmres", "sstep_gmres", "scipy_gmres", "CALLBACK_TYPES"]

CALLBACK_TYPES = ("x", "pr_norm", "legacy")


def gmres(A, b, x0=None, *, rtol=1e-5, atol=0.0, restart=30, maxiter=None, M=None,
          callback=None, callback_type=None, comm=None, monitor=False, latency=0.0, loop="auto",
          orthogonalization="dcgs2"):
    """Solve ``A x = b`` by restarted GMRES(``restart``).  Collective.

    Arguments and return value as :func:`pipekrylov.cg`, except (scipy's conventions):

    restart : int
        Krylov subspace size before a restart (default 30; at most n).
    maxiter : int
        Restart cycles (default ``10 n``): at most ``maxiter * restart`` iterations;
        ``info`` is ``maxiter`` when they do not converge.  With
        ``callback_type="legacy"``: iterations.
    callback, callback_type : callable, "x", "pr_norm" or "legacy"
        ``"x"``: ``callback(x)`` after each restart cycle; ``"pr_norm"``:
        ``callback(||r|| / ||b||)`` after each iteration (a numpy float); ``"legacy"``
        (the default with a callback, with scipy's DeprecationWarning when not given):
        as ``"pr_norm"``, and ``maxiter`` counts iterations.

    Right preconditioning, so the norm tested, and given to a ``"pr_norm"`` callback, is
    the true residual's ``||b - A x||`` (estimated by the Givens rotations within a
    cycle); scipy's GMRES, left preconditioned, gives ``||M (b - A x)|| / ||b||``.
    orthogonalization : "dcgs2", "cgs2" or "cgs"
        Classical Gram-Schmidt twice, its second pass put off to the next step (DCGS2,
        the default: one blocking reduction a step, the basis orthogonal to rounding as
        CGS2's); twice in each step (CGS2: two reductions a step); or once (CGS, PETSc's
        default: one reduction a step, half DCGS2's vector work, and the basis loses
        orthogonality as the Krylov space nears an invariant one).  ``||w||`` travels in
        the last pass's reduction; where that pass removed more than a quarter of
        ``||w||^2`` (CGS does, more often than not), it takes a reduction of its own.
        DCGS2 tests each step's residual estimate a step late, after the next
        application of A and M, predicting from ``||w||`` which step ends a cycle: a
        solve applies A and M as often as with CGS2.
    """
    return scipy_gmres("gmres", A, b, x0, restart=restart, maxiter=maxiter, callback=callback,
                       callback_type=callback_type, monitor=monitor, rtol=rtol, atol=atol, M=M, comm=comm,
                       latency=latency, loop=loop, options={"restart": restart, "orthogonalization": orthogonalization})


def sstep_gmres(A, b, x0=None, *, s=4, rtol=1e-5, atol=0.0, restart=30, maxiter=None, M=None, callback=None,
                callback_type=None, comm=None, monitor=False, latency=0.0, loop="auto"):
    """Solve ``A x = b`` by s-step GMRES(``restart``): one blocking reduction per ``s``
    iterations where the basis is well conditioned (:mod:`pipekrylov.loops.sstep_gmres`).
    Collective.

    Arguments and result as :func:`gmres` (right preconditioning: the norm tested is
    ``||b - A x||``, at each cycle's start), plus ``s`` (1 to 10), the iterations of a
    block.  The result also has ``s``, ``short_blocks`` (blocks ended early where their
    basis lost rank), ``second_passes`` (blocks orthogonalized twice, a second reduction)
    and ``shifts`` (the Newton basis's, from the solve's Ritz values; a :class:`Solver`
    keeps them for its later solves with the same matrix).
    """
    from ..loops.sstep_gmres import SStepGMRES
    return scipy_gmres(made(lambda: SStepGMRES(s, restart), "s-gmres"), A, b, x0, restart=restart, maxiter=maxiter, callback=callback,
                       callback_type=callback_type, monitor=monitor, rtol=rtol, atol=atol, M=M, comm=comm,
                       latency=latency, loop=loop)


def scipy_gmres(method, A, b, x0, *, restart, maxiter, callback, callback_type, monitor, comm, least=1,
                options=None, **arguments):
    """A GMRES's solve (``method``: a name or a LoopSpec) under scipy's conventions for
    ``maxiter`` (restart cycles), ``callback`` and ``callback_type``."""
    if callback is None:
        callback_type = None
    elif callback_type is None:
        warnings.warn("pipekrylov gmres called without specifying `callback_type`: as scipy's, the callback "
                      "gets the relative residual norm after each iteration and maxiter counts iterations "
                      "('legacy'); give callback_type='x' (x after each restart cycle) or 'pr_norm'",
                      DeprecationWarning, stacklevel=3)
        callback_type = "legacy"
    elif callback_type not in CALLBACK_TYPES:   # raised by the Solver, on every rank
        method = Refused(ValueError(f"unknown callback_type {callback_type!r}: choose from "
                                    f"{', '.join(CALLBACK_TYPES)}"), _name(method))
        callback_type = None
    n = _size(A)
    try:
        cycle = fitted_restart(restart, n, least) if n else int(restart)
    except (TypeError, ValueError) as exc:
        method = method if isinstance(method, Refused) else Refused(
            ValueError(f"restart must be a positive integer, got {restart!r} ({exc})"), _name(method))
        cycle = 1
    cycles = 10 * n if maxiter is None else maxiter
    try:
        iterations = cycles if callback_type == "legacy" else int(cycles) * cycle
    except (TypeError, ValueError):
        iterations = cycles   # refused, with its message, by the solve
    if callback_type in ("pr_norm", "legacy"):
        monitor = _pr_norm(callback, monitor, A, b, comm)
        callback = None
    res = solve_once(method, A, b, x0, maxiter=iterations, callback=callback, comm=comm, monitor=monitor,
                     **arguments, **(options or {}))
    if res.info > 0 and callback_type != "legacy":
        res = res.replace(info=int(cycles))
    return res


def _size(A):
    shape = getattr(A, "shape", None)
    if shape is not None and len(shape) == 2:
        return int(shape[0])
    partition = getattr(A, "partition", None)
    return int(partition.n) if partition is not None else 0


def _pr_norm(callback, monitor, A, b, comm):
    """A monitor giving ``callback`` the relative residual norm after each iteration (and
    the user's monitor its lines).  ||b|| of a slice of b: one Allreduce, here."""
    bb = np.asarray(b, dtype=float).ravel()
    bnorm = float(np.linalg.norm(bb))
    rank = 0
    if distributed(A) and bb.size != A.partition.n:
        comm = A.comm if comm is None else comm
        bnorm = float(np.sqrt(comm.allreduce(bnorm * bnorm)))
    if monitor and not callable(monitor):
        from mpi4py import MPI
        rank = (comm or getattr(A, "comm", None) or MPI.COMM_WORLD).Get_rank()

    def pr_norm(k, rnorm):
        if callable(monitor):
            monitor(k, rnorm)
        elif monitor and rank == 0:
            import sys
            print(f"{k:4d} KSP Residual norm {rnorm:.12e}", file=monitor if hasattr(monitor, "write") else sys.stdout,
                  flush=True)
        if k > 0 and bnorm > 0:
            callback(np.float64(rnorm / bnorm))
    return pr_norm
