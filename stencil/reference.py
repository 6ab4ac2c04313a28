"""The numpy reference: one Jacobi step in whole-array operations, the oracle for every kernel."""
import numpy as np

__all__ = ["reference_step", "reference_run"]


def _neighbour_sum(u, periodic):
    """Sum of the 2*ndim neighbours of the updated points, in the package's fixed order."""
    total = None
    for axis in reversed(range(u.ndim)):
        for shift in (1, -1):   # the minus neighbour, then the plus neighbour
            if periodic:
                term = np.roll(u, shift, axis)
            else:
                index = [slice(1, -1)] * u.ndim
                index[axis] = slice(1 - shift, u.shape[axis] - 1 - shift)
                term = u[tuple(index)]
            total = term if total is None else total + term
    return total


def reference_step(u, stencil):
    """One step of ``stencil`` on ``u``; returns a new array."""
    interior = (slice(None) if stencil.periodic else slice(1, -1),) * u.ndim
    centre = u[interior]
    total = _neighbour_sum(u, stencil.periodic)
    out = u.copy()
    if stencil.variable:
        a = stencil.coefficient[interior]
        out[interior] = centre + a * (total - 2 * u.ndim * centre)
    else:
        out[interior] = stencil.c0 * centre + stencil.c1 * total
    return out


def reference_run(u, stencil, steps):
    """``steps`` steps of ``stencil`` from ``u``; returns a new array."""
    stencil.check_grid(u)
    u = np.array(u, dtype=np.float64)
    for _ in range(steps):
        u = reference_step(u, stencil)
    return u
