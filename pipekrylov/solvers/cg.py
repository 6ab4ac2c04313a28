"""Classic preconditioned Conjugate Gradients, scipy's calling contract (the loop:
:mod:`pipekrylov.loops.cg`)."""
from .solver import made, solve_once

__all__ = ["cg", "sstep_cg", "pipecg2"]


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
        "ilu0", "ic0" or "bjacobi"), else the same loop interpreted; ``result.loop``
        says which ran.

    Returns
    -------
    SolveResult
        Unpacks to ``(x, info)``: ``info == 0`` converged, ``> 0`` iterations done
        without converging, ``< 0`` breakdown (``diverged_indefinite_mat`` when
        ``p^T A p <= 0``, ``diverged_indefinite_pc`` when ``r^T M r < 0``).

    Notes
    -----
    Each iteration does one SpMV, one preconditioner application and two blocking
    global reductions: ``(p, Ap)``, then ``(r, r)`` fused with ``(r, z)``.  For many
    solves with one matrix, :class:`pipekrylov.Solver` sets up once.
    """
    return solve_once("cg", A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M, callback=callback, comm=comm,
                      monitor=monitor, latency=latency, loop=loop)


def sstep_cg(A, b, x0=None, *, s=4, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
             comm=None, monitor=False, latency=0.0, loop="auto"):
    """Solve ``A x = b`` (``A`` SPD) by s-step CG: one blocking reduction per ``s``
    iterations (:mod:`pipekrylov.loops.sstep`).  Collective.

    Arguments and result as :func:`cg`, plus ``s`` (1 to 10), the iterations of a block.
    The norm tested is the natural one, ``sqrt(r^T M r)`` (the 2-norm without M), and a
    test that passes is confirmed against scipy's ``||b - A x|| <= max(atol, rtol ||b||)``
    before convergence is reported.  The result also has ``s``,
    ``short_blocks`` (blocks ended early where their basis lost rank) and ``lambda_max``
    (the estimate the Newton basis was made on; a :class:`Solver` keeps it for its later
    solves with the same matrix).
    """
    from ..loops.sstep import SStepCG
    return solve_once(made(lambda: SStepCG(s), "s-cg"), A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M, callback=callback,
                      comm=comm, monitor=monitor, latency=latency, loop=loop)


def pipecg2(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
            comm=None, monitor=False, latency=0.0, loop="auto"):
    """Solve ``A x = b`` (``A`` SPD) by pipelined CG with one reduction per two
    iterations (PETSc's pipecg2; :mod:`pipekrylov.loops.pipecg2`).  Collective.

    Arguments and result as :func:`cg`.  Each pair of iterations makes one non-blocking
    reduction, overlapped with two applications of A and two of M.  The norm tested is
    ``||r||_2``, at every other iteration (a monitor prints iterations 0, 2, 4, ...); a
    test that passes is confirmed against ``b - A x``.  Where the recurrences lose
    ``(r, M r)`` or ``(p, A p)`` near the attainable accuracy, the pairs start again from
    ``b - A x`` (``result.replacements`` counts those and the failed confirmations).
    """
    from ..loops.pipecg2 import PipeCG2
    return solve_once(PipeCG2, A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M, callback=callback,
                      comm=comm, monitor=monitor, latency=latency, loop=loop)
