"""Shifts for the auxiliary basis, and the spectral estimate they are made from.

A monomial basis (all shifts zero, PETSc's pipelcg default) grows like ``lambda_max^l``
and loses the small eigencomponents for ``l >= 3``; Chebyshev shifts on an interval
that contains the spectrum keep ``|P_l|`` small on it (Cornelis, Cools & Vanroose 2018;
Ghysels et al. 2013 use the same idea for p(l)-GMRES).

The interval comes from the solver's own estimate (:func:`estimate_spectrum`): Lanczos
or Arnoldi steps from the initial residual until the largest Ritz value's residual
bound is 1% of it; the interval ends at that Ritz value plus its bound.  The end must be
close: on the SuiteSparse matrices a 10% over- or underestimate of ``lambda_max`` cost
p(l)-CG square-root breakdowns and up to 3x the iterations at l >= 3 where the exact
value cost none (measured, docs/deep.md).  (Running the steps as counted iterations that
advance the solution was tried too: the restart that follows cost about 15% more
iterations on 2D Poisson.)
"""
import numpy as np
import scipy.linalg as la

__all__ = ["chebyshev_shifts", "resolve_shifts", "estimate_spectrum", "interval_from_ritz"]

def chebyshev_shifts(depth, lmin, lmax):
    """The ``depth`` Chebyshev points of ``[lmin, lmax]`` (roots of T_depth, mapped)."""
    i = np.arange(depth)
    return 0.5 * (lmin + lmax) + 0.5 * (lmax - lmin) * np.cos(np.pi * (2 * i + 1) / (2 * depth))


def interval_from_ritz(ritz, bound=0.0):
    """``[0, max Re theta + bound]`` for a spectrum in the right half plane (the smallest
    Ritz values converge last and would overestimate ``lambda_min``), widened to the left
    when some real part is negative.  ``bound`` is the residual bound of the largest Ritz
    value: the interval's end is a tight upper estimate of ``lambda_max``."""
    re = np.real(np.asarray(ritz))
    return min(0.0, re.min()), re.max() + bound


def resolve_shifts(run, shifts, interval, depth, estimate_steps, symmetric):
    """The ``depth`` shifts a solver uses.  ``interval=(lmin, lmax)``: its Chebyshev
    points (PETSc's ``-ksp_pipelcg_lmin/lmax``).  Otherwise ``shifts``: ``'auto'`` (the
    Chebyshev points of :func:`interval_from_ritz` of :func:`estimate_spectrum`), a number
    (all equal; 0 is the monomial basis) or ``depth`` explicit values."""
    if interval is not None:
        bounds = np.asarray(interval, dtype=np.float64)
        if bounds.shape != (2,) or not np.all(np.isfinite(bounds)) or bounds[0] >= bounds[1]:
            raise ValueError(f"interval must be (lmin, lmax) with lmin < lmax, got {interval!r}")
        return chebyshev_shifts(depth, *bounds)
    if isinstance(shifts, str):
        if shifts != "auto":
            raise ValueError(f"shifts must be 'auto', a number or {depth} numbers, got {shifts!r}")
        ritz, bound = estimate_spectrum(run, max(1, estimate_steps), symmetric)
        return chebyshev_shifts(depth, *interval_from_ritz(ritz, bound)) if ritz.size else np.zeros(depth)
    values = np.atleast_1d(np.asarray(shifts, dtype=np.float64))
    if values.ndim != 1 or not np.all(np.isfinite(values)):
        raise ValueError(f"shifts must be finite numbers, got {shifts!r}")
    if values.size == 1:
        return np.full(depth, values[0])
    if values.size == depth:
        return values
    raise ValueError(f"shifts: give 'auto', a number or {depth} values, got {values.size} values "
                     "(an interval goes in interval=(lmin, lmax))")


def estimate_spectrum(run, steps, symmetric, tolerance=0.01):
    """Ritz values from at most ``steps`` Arnoldi steps from the initial residual.  Collective.

    ``symmetric``: Lanczos on ``M A`` in the ``M^-1`` inner product (the operator of
    preconditioned CG); otherwise Arnoldi on ``A M`` (right-preconditioned GMRES).  Full
    orthogonalization with blocking reductions; the solution is not touched.  Stops once
    the residual bound ``h_(k+1,k) |s_k|`` of the largest Ritz value is below
    ``tolerance`` times it.  Like the eigenvalue estimate of PETSc's KSPChebyshev, these
    steps are not counted as iterations: each costs an operator application and three
    reductions.  Returns ``(ritz_values, bound)``; no values when the residual is zero.
    """
    A, reduce = run.A, run.reduction.allreduce
    r = run.b - A.matvec(run.x)
    v = run.precondition(r, np.empty_like(r)) if symmetric else r
    beta = float(np.sqrt(max(reduce([r @ v], "estimate ||r||")[0], 0.0)))
    if beta == 0.0:
        return np.array([]), 0.0
    V = [v / beta]
    U = [r / beta] if symmetric else V      # U = M^-1 V: the partners the inner product needs
    H = np.zeros((steps + 1, steps))
    for j in range(steps):
        if symmetric:
            uw = A.matvec(V[j])
            w = run.precondition(uw, np.empty_like(uw))
        else:
            w = A.matvec(run.precondition(V[j], np.empty_like(V[j])))
            uw = w
        for _ in range(2):                  # classical Gram-Schmidt twice
            h = reduce([uw @ vi for vi in V], "estimate V^T w")
            w = w - h @ np.array(V)
            uw = uw - h @ np.array(U) if symmetric else w
            H[:j + 1, j] += h
        H[j + 1, j] = np.sqrt(max(reduce([uw @ w], "estimate ||w||")[0], 0.0))
        ritz, bound = _largest_ritz_bound(H[:j + 2, :j + 1], symmetric)
        largest = np.real(ritz).max()
        invariant = not H[j + 1, j] > 1e-12 * abs(H[j, j])
        if invariant or bound <= tolerance * abs(largest):
            break
        V.append(w / H[j + 1, j])
        if symmetric:
            U.append(uw / H[j + 1, j])
    return ritz, bound


def _largest_ritz_bound(H, symmetric):
    """Ritz values of the square part of the (k+1) x k Hessenberg ``H``, and the residual
    norm ``h_(k+1,k) |s_k|`` of the one with the largest real part."""
    k = H.shape[1]
    square = H[:k, :k]
    if symmetric:
        ritz, vectors = la.eigh(0.5 * (square + square.T))
    else:
        ritz, vectors = la.eig(square)
    i = int(np.argmax(np.real(ritz)))
    s = vectors[:, i] / np.linalg.norm(vectors[:, i])
    return ritz, float(abs(H[k, k - 1] * s[-1]))
