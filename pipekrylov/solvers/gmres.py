"""Classic restarted GMRES(m), right preconditioned, classical Gram-Schmidt with reorthogonalization."""
import numpy as np
import scipy.linalg as la

from .common import Breakdown, SolverRun

__all__ = ["gmres", "rotate_column"]


def gmres(A, b, x0=None, *, rtol=1e-5, atol=0.0, restart=30, maxiter=None, M=None,
          callback=None, comm=None, monitor=False, latency=0.0):
    """Solve ``A x = b`` by restarted GMRES(``restart``).  Collective.

    Arguments and return value as :func:`pipekrylov.cg`, except:

    restart : int
        Krylov subspace size before a restart (default 30).
    maxiter : int
        Total inner iterations (PETSc's convention; scipy counts restart cycles).

    Right preconditioning, so the norm tested is the true residual's ``||b - A x||``
    (estimated by the Givens rotations within a cycle).  Classical Gram-Schmidt run
    twice (CGS2): three blocking reductions per iteration, ``V^T w`` twice and ``||w||``.
    """
    run = SolverRun("gmres", A, b, x0, rtol, atol, maxiter, M, callback, comm, monitor, latency)
    if int(restart) < 1:
        raise ValueError(f"restart must be positive, got {restart}")
    return run.run(lambda r: _gmres_loop(r, int(restart)))


def _gmres_loop(run, m):
    matvec, reduce = run.A.matvec, run.reduction.allreduce
    x = run.x
    nlocal = len(x)
    V = np.zeros((m + 1, nlocal))
    Z = np.zeros((m, nlocal)) if run.M is not None else V
    H = np.zeros((m + 1, m))
    iteration = 0
    beta = run.norm(r := run.b - matvec(x), "||r||")
    while True:
        if run.converged(iteration, beta):
            return x, iteration, run.stop_reason()
        if iteration >= run.maxiter:
            return x, iteration, "diverged_its"
        V[0] = r / beta
        g = np.zeros(m + 1)
        g[0] = beta
        cs, sn = np.zeros(m), np.zeros(m)
        j = 0
        while j < m and iteration < run.maxiter:
            if run.M is not None:
                run.precondition(V[j], Z[j])
            w = matvec(Z[j])
            h = np.zeros(j + 1)
            for _ in range(2):  # CGS2: the second pass restores orthogonality CGS loses
                c = reduce(V[:j + 1] @ w, "V^T w")
                w -= c @ V[:j + 1]
                h += c
            hnext = run.norm(w, "||w||")
            H[:j + 1, j], H[j + 1, j] = h, hnext
            rotate_column(H, g, cs, sn, j)
            iteration += 1
            j += 1
            run.iterations = iteration
            happy = hnext <= 1e-14 * abs(H[j - 1, j - 1])
            if not happy:
                V[j] = w / hnext
            # The cycle's last estimate is not recorded: the true residual after the
            # update is, at the top of the outer loop.
            if happy or j == m or iteration == run.maxiter or abs(g[j]) <= run.atol:
                break
            run.converged(iteration, abs(g[j]))
        y = la.solve_triangular(H[:j, :j], g[:j])
        x += y @ Z[:j]
        if run.callback is not None:
            run.iterated(x)
        r = run.b - matvec(x)
        beta = run.norm(r, "||r||")


def rotate_column(R, g, cs, sn, j):
    """Apply the previous Givens rotations to column ``j`` of the Hessenberg matrix ``R``
    (in place), make and apply the one that zeroes ``R[j+1, j]``, rotate ``g`` with it;
    return the residual estimate ``|g[j+1]|``."""
    for i in range(j):
        R[i, j], R[i + 1, j] = cs[i] * R[i, j] + sn[i] * R[i + 1, j], -sn[i] * R[i, j] + cs[i] * R[i + 1, j]
    denom = np.hypot(R[j, j], R[j + 1, j])
    if denom == 0:
        raise Breakdown("diverged_breakdown", "GMRES: zero column in the Hessenberg matrix")
    cs[j], sn[j] = R[j, j] / denom, R[j + 1, j] / denom
    R[j, j], R[j + 1, j] = denom, 0.0
    g[j + 1], g[j] = -sn[j] * g[j], cs[j] * g[j]
    return abs(g[j + 1])
