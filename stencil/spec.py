"""What a stencil computes: the Jacobi update of the 2D 5-point / 3D 7-point heat stencil.

One step maps ``u`` to ``u'`` with, at every updated point,

* constant coefficients:  ``u' = c0*u + c1*S``
* variable coefficients:  ``u' = u + a*(S - 2*ndim*u)``  (``a`` a field shaped like ``u``)

where ``S`` is the sum of the ``2*ndim`` neighbours taken in one fixed order: along the
last axis (minus, plus), then the axis before it, and so on.  Every kernel of this
package adds in that order, so all of them reproduce the numpy reference bit for bit.

Boundaries: ``"dirichlet"`` keeps the outermost layer of the array fixed (it holds the
boundary values); ``"periodic"`` updates every point and wraps the neighbours.
The forward-Euler step of ``u_t = nu Laplace(u)`` with step dt on spacing h is the
constant stencil with ``c1 = nu*dt/h**2`` and ``c0 = 1 - 2*ndim*c1``: :meth:`Stencil.heat`.
"""
from dataclasses import dataclass

import numpy as np

__all__ = ["Stencil", "BOUNDARIES"]

BOUNDARIES = ("dirichlet", "periodic")


@dataclass(frozen=True, eq=False)
class Stencil:
    """A Jacobi stencil; give ``c0, c1`` (constant) or ``coefficient`` (variable).

    Parameters
    ----------
    ndim : {2, 3}
    boundary : {"dirichlet", "periodic"}
    c0, c1 : float
        Constant-coefficient weights of the centre and of the neighbour sum.
    coefficient : ndarray, optional
        The field ``a`` of the variable-coefficient form, shaped like the grid.
    """
    ndim: int
    boundary: str = "dirichlet"
    c0: float = 0.0
    c1: float = 0.0
    coefficient: np.ndarray = None

    def __post_init__(self):
        if self.ndim not in (2, 3):
            raise ValueError(f"ndim must be 2 or 3, not {self.ndim!r}")
        if self.boundary not in BOUNDARIES:
            raise ValueError(f"boundary must be one of {BOUNDARIES}, not {self.boundary!r}")
        if not (np.isfinite(self.c0) and np.isfinite(self.c1)):
            raise ValueError(f"c0 and c1 must be finite, not {self.c0!r}, {self.c1!r}")
        if self.coefficient is not None:
            a = np.ascontiguousarray(self.coefficient, dtype=np.float64)
            if a.ndim != self.ndim:
                raise ValueError(f"the coefficient field has {a.ndim} dimensions, the stencil {self.ndim}")
            if not np.all(np.isfinite(a)):
                raise ValueError("the coefficient field has non-finite values")
            object.__setattr__(self, "coefficient", a)

    @classmethod
    def heat(cls, ndim, nu_dt_h2, boundary="dirichlet"):
        """Forward Euler for the heat equation, ``c1 = nu*dt/h**2``; stable for
        ``c1 <= 1/(2*ndim)``."""
        if not 0 < nu_dt_h2 <= 1 / (2 * ndim):
            raise ValueError(f"nu*dt/h**2 = {nu_dt_h2} is outside (0, 1/{2 * ndim}]: "
                             "forward Euler would be unstable")
        return cls(ndim, boundary, c0=1.0 - 2 * ndim * nu_dt_h2, c1=float(nu_dt_h2))

    @property
    def variable(self):
        return self.coefficient is not None

    @property
    def periodic(self):
        return self.boundary == "periodic"

    @property
    def bytes_per_update(self):
        """Memory traffic of one lattice update in a sweep that streams the grid: read u,
        write u' and its write-allocate (8 B each), plus reading ``a`` when variable."""
        return 32 if self.variable else 24

    def check_grid(self, u, layers_only=False):
        """Raise ValueError unless ``u`` is a finite grid this stencil can update
        (``layers_only``: ``u`` is one process's layers, of any count, of a larger grid)."""
        u = np.asarray(u)
        if u.ndim != self.ndim:
            raise ValueError(f"the grid has {u.ndim} dimensions, the stencil {self.ndim}")
        if min(u.shape[1:] if layers_only else u.shape) < 3:
            raise ValueError(f"grid {u.shape} is too small: every axis needs at least 3 points")
        if self.variable and self.coefficient.shape != u.shape:
            raise ValueError(f"the coefficient field is {self.coefficient.shape}, the grid {u.shape}")
        if not np.all(np.isfinite(u)):
            raise ValueError("the grid has non-finite values")

    def describe(self):
        form = "u + a*(S - %d u)" % (2 * self.ndim) if self.variable else \
            f"{self.c0!r}*u + {self.c1!r}*S"
        return f"{self.ndim}D {2 * self.ndim + 1}-point Jacobi, {self.boundary}: u' = {form}"
