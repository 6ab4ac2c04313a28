"""Model problems built in parallel: each rank builds only its own rows.

Finite differences on the unit square/cube with Dirichlet boundaries, unknowns numbered
lexicographically with x fastest.  Rows are split evenly; on a stencil matrix every row
has the same nonzero count except near the boundary, so this is also balanced by nonzeros.
"""
import numpy as np

from ..parallel.partition import RowPartition
from .distributed import DistributedCSR

__all__ = ["stencil_matrix", "poisson2d", "poisson3d", "anisotropic2d", "convection_diffusion2d"]


def stencil_matrix(comm, shape, stencil):
    """The matrix of a constant-coefficient stencil on a grid.  Collective.

    Parameters
    ----------
    comm : mpi4py communicator
    shape : tuple of int
        Grid points per dimension, slowest first (``(ny, nx)`` or ``(nz, ny, nx)``).
    stencil : dict
        Offset tuple (same order as ``shape``) -> coefficient; neighbours outside the
        grid are dropped (homogeneous Dirichlet).
    """
    shape = tuple(int(s) for s in shape)
    if min(shape) < 1:
        raise ValueError(f"grid shape must be positive, got {shape}")
    n = int(np.prod(shape))
    partition = RowPartition.uniform(comm, n)
    rows = np.arange(partition.start, partition.end, dtype=np.int64)
    coords = np.unravel_index(rows, shape)
    cols, vals, keep = [], [], []
    for offset, value in stencil.items():
        neighbour = [c + o for c, o in zip(coords, offset)]
        inside = np.ones(len(rows), dtype=bool)
        for c, s in zip(neighbour, shape):
            inside &= (c >= 0) & (c < s)
        clipped = [np.clip(c, 0, s - 1) for c, s in zip(neighbour, shape)]
        cols.append(np.ravel_multi_index(clipped, shape))
        vals.append(np.full(len(rows), float(value)))
        keep.append(inside)
    cols, vals, keep = (np.stack(a, axis=1) for a in (cols, vals, keep))
    counts = keep.sum(axis=1)
    indptr = np.concatenate([[0], np.cumsum(counts)])
    return DistributedCSR.from_local_rows(partition, indptr, cols[keep], vals[keep], n)


def poisson2d(comm, nx, ny=None):
    """5-point Laplacian (4 on the diagonal, -1 off it) on an nx x ny grid."""
    ny = nx if ny is None else ny
    return stencil_matrix(comm, (ny, nx), {(0, 0): 4, (0, -1): -1, (0, 1): -1, (-1, 0): -1, (1, 0): -1})


def poisson3d(comm, nx, ny=None, nz=None):
    """7-point Laplacian (6 on the diagonal, -1 off it) on an nx x ny x nz grid."""
    ny = nx if ny is None else ny
    nz = nx if nz is None else nz
    stencil = {(0, 0, 0): 6}
    for axis in range(3):
        for step in (-1, 1):
            offset = [0, 0, 0]
            offset[axis] = step
            stencil[tuple(offset)] = -1
    return stencil_matrix(comm, (nz, ny, nx), stencil)


def anisotropic2d(comm, nx, ny=None, epsilon=1e-2):
    """-epsilon u_xx - u_yy: strong coupling in y, weak in x (SPD, harder than Poisson)."""
    ny = nx if ny is None else ny
    return stencil_matrix(comm, (ny, nx), {(0, 0): 2 + 2 * epsilon, (0, -1): -epsilon,
                                           (0, 1): -epsilon, (-1, 0): -1, (1, 0): -1})


def convection_diffusion2d(comm, nx, ny=None, wind=(20.0, 10.0)):
    """-Laplace(u) + wind . grad(u), central differences, scaled by h^2 (nonsymmetric).

    With h = 1 / (n + 1), the mesh Peclet number |wind| h / 2 stays below 1 for the
    default wind on grids of 10 x 10 and finer, so the matrix is diagonally dominant.
    """
    ny = nx if ny is None else ny
    bx, by = wind
    hx, hy = 1.0 / (nx + 1), 1.0 / (ny + 1)
    return stencil_matrix(comm, (ny, nx), {
        (0, 0): 4, (0, -1): -1 - bx * hx / 2, (0, 1): -1 + bx * hx / 2,
        (-1, 0): -1 - by * hy / 2, (1, 0): -1 + by * hy / 2})
