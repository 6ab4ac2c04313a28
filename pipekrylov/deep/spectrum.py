"""Shifts for the auxiliary basis, and the spectral estimate they are made from.

A monomial basis (all shifts zero, PETSc's pipelcg default) grows like ``lambda_max^l``
and loses the small eigencomponents for ``l >= 3``; Chebyshev shifts on an interval
that contains the spectrum keep ``|P_l|`` small on it (Cornelis, Cools & Vanroose 2018;
Ghysels et al. 2013 use the same idea for p(l)-GMRES).

The interval comes from the solver's own estimate (:func:`estimate_spectrum`): a few
Lanczos or Arnoldi steps from the initial residual, whose largest Ritz value
underestimates the largest eigenvalue, hence the margin.  (Running those steps as
counted iterations that advance the solution was tried: the restart it forces cost
about 15% more iterations on 2D Poisson.)
"""
import numpy as np
import scipy.linalg as la

__all__ = ["chebyshev_shifts", "resolve_shifts", "estimate_spectrum", "interval_from_ritz", "auto_shifts"]

MARGIN = 1.1


def chebyshev_shifts(depth, lmin, lmax):
    """The ``depth`` Chebyshev points of ``[lmin, lmax]`` (roots of T_depth, mapped)."""
    i = np.arange(depth)
    return 0.5 * (lmin + lmax) + 0.5 * (lmax - lmin) * np.cos(np.pi * (2 * i + 1) / (2 * depth))


def interval_from_ritz(ritz):
    """An interval for the shifts from Ritz values: ``[0, 1.1 max Re]`` for a spectrum
    in the right half plane (the smallest Ritz values converge last and would
    overestimate ``lambda_min``), widened to the left when some real part is negative."""
    re = np.real(np.asarray(ritz))
    return min(0.0, MARGIN * re.min()), MARGIN * re.max()


def resolve_shifts(shifts, depth):
    """User shifts: a number (all equal; 0 is the monomial basis), an interval
    ``(lmin, lmax)`` or ``depth`` explicit values.  Returns an array of ``depth`` floats."""
    values = np.atleast_1d(np.asarray(shifts, dtype=np.float64))
    if values.ndim != 1 or not np.all(np.isfinite(values)):
        raise ValueError(f"shifts must be finite numbers, got {shifts!r}")
    if values.size == 1:
        return np.full(depth, values[0])
    if values.size == 2 and depth != 2:
        return chebyshev_shifts(depth, *sorted(values))
    if values.size == depth:
        return values
    raise ValueError(f"shifts: give a number, an interval (lmin, lmax) or {depth} values, "
                     f"got {values.size} values")


def estimate_spectrum(run, steps, symmetric):
    """Ritz values of ``steps`` Arnoldi steps from the initial residual.  Collective.

    ``symmetric``: Lanczos on ``M A`` in the ``M^-1`` inner product (the operator of
    preconditioned CG); otherwise Arnoldi on ``A M`` (right-preconditioned GMRES).  Full
    orthogonalization with blocking reductions; the solution is not touched.  Like the
    eigenvalue estimate of PETSc's KSPChebyshev, these steps are not counted as
    iterations: they cost ``steps`` operator applications and ``3 steps`` reductions.
    Returns an empty array when the residual is zero.
    """
    A, reduce = run.A, run.reduction.allreduce
    r = run.b - A.matvec(run.x)
    v = run.precondition(r, np.empty_like(r)) if symmetric else r
    beta = float(np.sqrt(max(reduce([r @ v], "estimate ||r||")[0], 0.0)))
    if beta == 0.0:
        return np.array([])
    V = [v / beta]
    U = [r / beta] if symmetric else V      # U = M^-1 V: the partners the inner product needs
    H = np.zeros((steps + 1, steps))
    k = 0
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
        k = j + 1
        if not H[j + 1, j] > 1e-12 * abs(H[j, j]):
            break                           # invariant subspace: its Ritz values are exact
        V.append(w / H[j + 1, j])
        if symmetric:
            U.append(uw / H[j + 1, j])
    square = H[:k, :k]
    return la.eigvalsh(0.5 * (square + square.T)) if symmetric else la.eigvals(square)


def auto_shifts(run, depth, steps, symmetric):
    """Chebyshev shifts on the interval of :func:`estimate_spectrum`'s Ritz values
    (``None`` when the initial residual is zero)."""
    ritz = estimate_spectrum(run, steps, symmetric)
    if ritz.size == 0:
        return None
    return chebyshev_shifts(depth, *interval_from_ritz(ritz))
