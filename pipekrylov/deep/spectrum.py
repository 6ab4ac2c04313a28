"""Shifts for the auxiliary basis, and the spectral estimate they are made from.

A monomial basis (all shifts zero, PETSc's pipelcg default) grows like ``lambda_max^l``
and loses the small eigencomponents for ``l >= 3``; Chebyshev shifts on an interval
that contains the spectrum keep ``|P_l|`` small on it (Cornelis, Cools & Vanroose 2018;
Ghysels et al. 2013 use the same idea for p(l)-GMRES).

The interval comes from the solver's own estimate: steps of Lanczos (p(l)-CG's start,
by CG's recurrences, judged by :func:`ritz_bound`) or of Arnoldi (p(l)-GMRES:
:func:`estimate_spectrum`) from the initial residual until the largest Ritz value's
residual bound is 1% of it; the interval ends at that Ritz value plus its bound.  The end must be
close: on the SuiteSparse matrices a 10% over- or underestimate of ``lambda_max`` cost
p(l)-CG square-root breakdowns and up to 3x the iterations at l >= 3 where the exact
value cost none (measured, docs/deep.md).  (Running the steps as counted iterations that
advance the solution was tried too: the restart that follows cost about 15% more
iterations on 2D Poisson.)
"""
from contextlib import contextmanager
from functools import lru_cache

import numpy as np
import scipy.linalg as la

__all__ = ["chebyshev_shifts", "estimate_spectrum", "interval_from_ritz", "ritz_bound", "krylov_basis",
           "KrylovBasis"]

@lru_cache(maxsize=64)
def chebyshev_shifts(depth, lmin, lmax):
    """The ``depth`` Chebyshev points of ``[lmin, lmax]`` (roots of T_depth, mapped), read
    only.  Kept: a solver's solves ask for the same ones (a few microseconds each)."""
    i = np.arange(depth)
    shifts = 0.5 * (lmin + lmax) + 0.5 * (lmax - lmin) * np.cos(np.pi * (2 * i + 1) / (2 * depth))
    shifts.flags.writeable = False
    return shifts


def interval_from_ritz(ritz, bound=0.0):
    """``[0, max Re theta + bound]`` for a spectrum in the right half plane (the smallest
    Ritz values converge last and would overestimate ``lambda_min``), widened to the left
    when some real part is negative.  ``bound`` is the residual bound of the largest Ritz
    value: the interval's end is a tight upper estimate of ``lambda_max``."""
    re = np.real(np.asarray(ritz))
    return min(0.0, re.min()), re.max() + bound


def estimate_spectrum(solver, x, b, steps, symmetric, tolerance=0.01):
    """Ritz values from at most ``steps`` Arnoldi steps from ``b - A x`` on ``solver``'s
    operands.  Collective.

    ``symmetric``: Lanczos on ``M A`` in the ``M^-1`` inner product (the operator of
    preconditioned CG); otherwise Arnoldi on ``A M`` (right-preconditioned GMRES).  Stops
    once the residual bound ``h_(k+1,k) |s_k|`` of the largest Ritz value is below
    ``tolerance`` times it.  Like the eigenvalue estimate of PETSc's KSPChebyshev, these
    steps are not counted as iterations: each costs an operator application and three
    reductions.  Returns ``(ritz_values, bound)``; no values when the residual is zero.
    """
    def converged(H, j):
        ritz, bound = _largest_ritz_bound(H[:j + 2, :j + 1], symmetric)
        return bound <= tolerance * abs(np.real(ritz).max())

    r = b - solver.apply("A", x, np.empty_like(x))
    basis = krylov_basis(solver, r, steps, symmetric, stop=converged)
    if basis.beta == 0.0:
        return np.array([]), 0.0
    k = basis.steps
    return _largest_ritz_bound(basis.H[:k + 1, :k], symmetric)


class KrylovBasis:
    """What :func:`krylov_basis` built: ``V`` (orthonormal rows), ``U = M^-1 V`` (``V`` itself
    for Arnoldi on ``A M``), the Hessenberg ``H`` (``A V_k = V_(k+1) H`` for the operator),
    ``beta`` the residual's norm and ``steps`` the steps taken (fewer than asked at an
    invariant subspace or when ``stop`` said so)."""

    def __init__(self, V, U, H, beta, steps, invariant):
        self.V, self.U, self.H, self.beta, self.steps, self.invariant = V, U, H, beta, steps, invariant


def krylov_basis(solver, r, steps, symmetric, stop=None):
    """Arnoldi (Lanczos for ``symmetric``) from the residual ``r`` on ``solver``'s operands,
    orthogonalized twice by classical Gram-Schmidt with blocking reductions.  Collective.

    ``symmetric``: the operator is ``M A`` in the ``M^-1`` inner product (so ``U`` keeps the
    ``M^-1`` partners the inner product needs); otherwise ``A M`` in the 2-inner product.
    ``stop(H, j)`` after step ``j`` ends it early.
    """
    def reduce(values, label):
        return solver.reduce(values, label)

    if symmetric:
        def apply(v):
            uw = solver.apply("A", v, np.empty_like(v))
            return uw, solver.apply("M", uw, np.empty_like(uw))
    else:
        def apply(v):
            w = solver.apply("AM", v, np.empty_like(v))
            return w, w
    v = solver.apply("M", r, np.empty_like(r)) if symmetric else r
    beta = float(np.sqrt(max(reduce([r @ v], "Krylov ||r||")[0], 0.0)))
    H = np.zeros((steps + 1, steps))
    if beta == 0.0:
        return KrylovBasis(np.empty((0, len(r))), np.empty((0, len(r))), H, 0.0, 0, True)
    V = np.empty((steps + 1, len(r)))       # rows: the basis (no copy per projection)
    U = np.empty_like(V) if symmetric else V
    V[0] = v / beta
    if symmetric:
        U[0] = r / beta
    for j in range(steps):
        uw, w = apply(V[j])
        for _ in range(2):                  # classical Gram-Schmidt twice
            h = reduce([uw @ vi for vi in V[:j + 1]], "Krylov V^T w")
            w -= h @ V[:j + 1]
            if symmetric:
                uw -= h @ U[:j + 1]
            else:
                uw = w
            H[:j + 1, j] += h
        H[j + 1, j] = np.sqrt(max(reduce([uw @ w], "Krylov ||w||")[0], 0.0))
        invariant = not H[j + 1, j] > 1e-12 * abs(H[j, j])
        stopped = stop is not None and stop(H, j)
        if invariant or stopped:
            return KrylovBasis(V[:j + 1], U[:j + 1], H, beta, j + 1, invariant)
        V[j + 1] = w / H[j + 1, j]
        if symmetric:
            U[j + 1] = uw / H[j + 1, j]
    return KrylovBasis(V, U, H, beta, steps, False)


def _largest_ritz_bound(H, symmetric):
    """Ritz values of the square part of the (k+1) x k Hessenberg ``H``, and the residual
    norm ``h_(k+1,k) |s_k|`` of the one with the largest real part."""
    k = H.shape[1]
    square = H[:k, :k]
    with _estimate_breakdown(square):
        if symmetric:
            ritz, vectors = la.eigh(0.5 * (square + square.T))
        else:
            ritz, vectors = la.eig(square)
    i = int(np.argmax(np.real(ritz)))
    s = vectors[:, i] / np.linalg.norm(vectors[:, i])
    return ritz, float(abs(H[k, k - 1] * s[-1]))


def ritz_bound(diagonal, offdiagonal):
    """The Ritz values of the ``k x k`` symmetric tridiagonal ``T`` with ``diagonal`` and
    the first ``k - 1`` entries of ``offdiagonal`` (whose ``k``-th is ``T_(k+1,k)``), and the
    residual bound ``T_(k+1,k) |s_k|`` of the largest: Lanczos's, from its coefficients."""
    k = len(diagonal)
    with _estimate_breakdown(np.r_[diagonal, offdiagonal[:k]]):
        ritz, vectors = la.eigh_tridiagonal(diagonal, offdiagonal[:k - 1])
    return ritz, float(abs(offdiagonal[k - 1] * vectors[-1, -1]))


@contextmanager
def _estimate_breakdown(coefficients):
    """The Ritz values of recurrence coefficients that are not finite (a singular or
    inconsistent system: a division by a vanishing (p, A p)), or that LAPACK cannot
    diagonalize, are a breakdown of the solve (the same coefficients on every rank: the
    same outcome), not a numpy error."""
    from ..solvers.result import Breakdown
    if not np.isfinite(coefficients).all():
        raise Breakdown("diverged_breakdown", "the spectrum estimate's recurrence coefficients are not finite "
                        "(a singular or inconsistent system?)")
    try:
        yield
    except (np.linalg.LinAlgError, ValueError) as exc:
        raise Breakdown("diverged_breakdown", f"the spectrum estimate failed ({exc})") from exc
