"""p(l)-GMRES: restarted GMRES with a pipeline of depth l (Ghysels, Ashby, Meerbergen &
Vanroose, SISC 2013), right preconditioned.

Arnoldi on ``B = A M`` carried out on the auxiliary basis of :mod:`.basis`; each
iteration starts one reduction (the new ``z`` against every ``v`` and the last ``l``
``z``'s) and waits for the one started ``l`` iterations earlier:

    it = 0 .. l-1  (fill)   z_(it+1) = (B - sigma_it) z_it;  start <z_(it+1), z_j>, j <= it+1
    it >= l, c = it-l+1, k = c-1:
        w = B z_it                                   # overlaps the reductions in flight
        wait column c; finish G[:, c] (Cholesky step)
        H[:, k] = (G B[:, k] - H[:, :k] G[:k, k]) / G[k, k]      # from A M Z = Z B, Z = V G
        v_c = (z_c - V G[:c, c]) / G[c, c]
        z_(it+1) = (w - sum_r H[r, k] z_(r+l)) / H[k+1, k]
        start <z_(it+1), v_j> (j <= c), <z_(it+1), z_j> (c < j <= it+1)
        Givens rotation of H[:, k]: the residual estimate of iteration k+1

``B`` (the matrix of the ``z`` recurrence) holds the shifts in its first ``l`` columns
and ``H`` shifted down by ``l`` after that.  At the end of a cycle the pipeline drains:
the last ``l`` iterations of a cycle have no operator application to hide behind.
"""
import numpy as np
import scipy.linalg as la

from ..solvers.common import Breakdown, SolverRun
from ..loops.gmres import _rotate_column
from .basis import BandedColumns, BasisBreakdown, complete_column
from .pipeline import Pipeline, VectorPool
from .spectrum import resolve_shifts

__all__ = ["plgmres"]

MAX_RESTARTS = 50


def plgmres(A, b, x0=None, *, depth=1, restart=30, shifts="auto", interval=None, rtol=1e-5, atol=0.0,
            maxiter=None, M=None, callback=None, comm=None, monitor=False, latency=0.0,
            estimate_steps=30):
    """Solve ``A x = b`` by p(l)-GMRES(``restart``) with pipeline depth ``depth``.  Collective.

    Arguments and result as :func:`pipekrylov.gmres`, plus ``depth`` (``1 <= depth <=
    restart``), ``shifts``, ``interval`` and ``estimate_steps`` as :func:`pipekrylov.deep.plcg`
    (``'auto'``: Chebyshev points on ``[min(0, min Re theta), max Re theta + bound]`` of
    the Ritz values ``theta`` of Arnoldi steps on ``A M``, ``bound`` the residual norm of
    the rightmost one).  Real
    shifts keep the recurrences real; Ghysels et al. also use complex Leja-ordered Ritz
    values in pairs.  The result also has ``restarts`` (cycles cut short by a
    breakdown or a failed true-residual check) and ``shifts``.
    """
    depth, restart = int(depth), int(restart)
    run = SolverRun(f"p({depth})-gmres", A, b, x0, rtol, atol, maxiter, M, callback, comm,
                    monitor, latency)
    if depth < 1 or restart < depth:
        raise ValueError(f"need 1 <= depth <= restart, got depth={depth}, restart={restart}")
    return run.run(lambda run: _solve(run, depth, restart, shifts, interval, int(estimate_steps)))


def _solve(run, l, m, shifts, interval, estimate_steps):
    run.shifts = resolve_shifts(run, shifts, interval, l, estimate_steps, symmetric=False)(l)
    first = True
    while run.iterations < run.maxiter:
        before = run.iterations
        pipe = Pipeline(run.reduction)
        try:
            outcome = _cycle(run, l, m, run.shifts, pipe, report_initial=first)
        finally:
            pipe.drain()
        if outcome == "converged":
            return run.x, run.iterations, run.stop_reason()
        first = False
        if outcome == "breakdown":
            run.restarts += 1
            if run.restarts > MAX_RESTARTS or run.iterations == before:
                raise Breakdown("diverged_breakdown", f"p({l})-GMRES: {run.last_breakdown}")
    return run.x, run.iterations, "diverged_its"


def _cycle(run, l, m, sigma, pipe, report_initial):
    """One cycle of at most ``m`` iterations from ``run.x``: 'converged', 'full' or 'breakdown'."""
    A, x = run.A, run.x
    n = len(x)
    apply_B = pipe.operator(run, right=True)
    pool = VectorPool(n)
    Z, V = np.zeros((m + 1, n)), np.zeros((m + 1, n))
    Z[0] = run.b - A.matvec(x)
    pipe.start(0, [Z[0] @ Z[0]])
    for it in range(l):                                  # fill
        w, _ = apply_B(Z[it], pool)
        np.subtract(w, sigma[it] * Z[it], out=Z[it + 1])
        pool.give(w)
        pipe.start(it + 1, Z[:it + 2] @ Z[it + 1])

    G = BandedColumns(m + 2, m + 2)
    H, R = np.zeros((m + 1, m)), np.zeros((m + 1, m))   # R: H with the Givens rotations applied
    g, cs, sn = np.zeros(m + 1), np.zeros(m), np.zeros(m)
    done, outcome = 0, "full"
    for it in range(l, m + l):
        c, k = it - l + 1, it - l
        w = apply_B(Z[it], pool)[0] if it < m else None  # z_(it+1) is needed up to z_m
        if it == l:
            beta = float(np.sqrt(max(pipe.wait(0)[0], 0.0)))
            converged = run.converged(run.iterations, beta) if report_initial else beta <= run.atol
            if converged or beta == 0.0:
                return "converged"
            Z[:l + 1] /= beta
            if w is not None:
                w /= beta
            V[0] = Z[0]
            G.new_column(0)
            G[0, 0] = 1.0
            g[0] = beta
        gram = pipe.wait(c)
        try:
            G.new_column(c)
            if c <= l:                                   # fill columns: z's were not scaled yet
                complete_column(G, c, 0, gram / beta**2)
            else:
                for r in range(c - l + 1):
                    G[r, c] = gram[r]
                complete_column(G, c, c - l + 1, gram[c - l + 1:])
        except BasisBreakdown as exc:
            run.last_breakdown, outcome = str(exc), "breakdown"
            pool.give(w)
            break
        H[:c + 1, k] = _hessenberg_column(G, H, sigma, k, l)
        V[c] = (Z[c] - G.rows(c, 0, c) @ V[:c]) / G[c, c]
        if w is not None:
            np.subtract(w, H[:k + 1, k] @ Z[l:it + 1], out=Z[it + 1])
            Z[it + 1] /= H[k + 1, k]
            pool.give(w)
            pipe.start(it + 1, np.concatenate([V[:c + 1] @ Z[it + 1], Z[c + 1:it + 2] @ Z[it + 1]]))
        R[:k + 2, k] = H[:k + 2, k]                     # H itself stays unrotated for B
        estimate = _rotate_column(R, g, cs, sn, k)
        if estimate < 0:
            raise Breakdown("diverged_breakdown", "GMRES: zero column in the Hessenberg matrix")
        done = k + 1
        run.iterations += 1
        happy = not abs(H[k + 1, k]) > 1e-14 * abs(R[k, k])
        if run.converged(run.iterations, estimate) or happy:
            outcome = "converged"
            break
        if run.iterations >= run.maxiter:
            break
    if done:
        y = la.solve_triangular(R[:done, :done], g[:done])
        step = y @ V[:done]
        x += run.precondition(step, np.empty_like(step)) if run.M is not None else step
        run.iterated(x)
    if outcome == "converged" and not run.true_residual_passes(x):
        outcome = "full"
    return outcome


def _hessenberg_column(G, H, sigma, k, l):
    """Column k of the Arnoldi matrix from ``H G = G B`` (columns 0..k+1 of G known)."""
    c = k + 1
    Gc = np.column_stack([G.rows(j, 0, c + 1) for j in range(c + 1)])
    b = np.zeros(c + 1)
    if k < l:               # A M z_k = z_(k+1) + sigma_k z_k
        b[k], b[k + 1] = sigma[k], 1.0
    else:                   # A M z_k = sum_r H[r, k-l] z_(r+l)
        b[l:k + 2] = H[:k - l + 2, k - l]
    return (Gc @ b - H[:c + 1, :k] @ Gc[:k, k]) / Gc[k, k]
