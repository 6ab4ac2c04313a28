"""The grid split across processes along axis 0, halos T layers deep.

Rank r owns the layers ``partition.starts[r]:starts[r+1]`` of the global grid.  Every T
steps (one pass), :func:`exchange_halos` copies the T owned layers next to each
neighbour into that neighbour's ghosts; inside a pass each process runs its scheduler
(temporal blocking inside, message passing between).  Periodic boundaries make the
ranks a ring, so one process exchanges with itself.
"""
import numpy as np
from mpi4py import MPI

from pipekrylov.parallel.errors import collective_check
from pipekrylov.parallel.partition import RowPartition

from .slab import Slab

__all__ = ["layer_partition", "make_slab", "exchange_halos", "scatter_layers", "gather_layers"]


def layer_partition(comm, nlayers):
    """Equal shares (within one layer) of the ``nlayers`` layers of axis 0.  Collective."""
    return RowPartition.uniform(comm, nlayers)


def neighbours(comm, periodic):
    """Ranks below and above this one along axis 0 (``MPI.PROC_NULL`` at a Dirichlet end)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    below = rank - 1 if rank > 0 else (size - 1 if periodic else MPI.PROC_NULL)
    above = rank + 1 if rank < size - 1 else (0 if periodic else MPI.PROC_NULL)
    return below, above


def make_slab(comm, owned, stencil, depth):
    """This rank's :class:`Slab` with ghosts ``depth`` deep toward each neighbour.  Collective.

    Raises ValueError on every rank if some rank owns fewer layers than ``depth``: its
    neighbours' ghosts could not be filled from it alone.
    """
    below, above = neighbours(comm, stencil.periodic)
    with collective_check(comm, "stencil"):
        if (below != MPI.PROC_NULL or above != MPI.PROC_NULL) and owned.shape[0] < depth:
            raise ValueError(f"rank {comm.Get_rank()} owns {owned.shape[0]} layers, fewer than "
                             f"the halo depth {depth}: use fewer ranks or fewer steps per pass")
    slab = Slab(owned, stencil, depth, below != MPI.PROC_NULL, above != MPI.PROC_NULL)
    if stencil.variable:
        exchange_halos(comm, slab, [slab.coefficient])
    return slab


def exchange_halos(comm, slab, arrays=None):
    """Fill the ghost layers from the neighbours' owned layers.  Collective over the neighbours.

    The ghosts go into every array of ``arrays`` (default: both buffers of the slab: the
    fixed boundary points inside a ghost layer must be in each), sent from the first.
    """
    arrays = slab.buffers if arrays is None else arrays
    below, above = neighbours(comm, slab.stencil.periodic)
    d, first, end = slab.depth, slab.below, slab.below + slab.nowned
    source = arrays[0]
    # Upward: my top owned layers become the ghosts below my upper neighbour.
    upward = np.ascontiguousarray(source[end - d:end]) if slab.above else np.empty(0)
    from_below = np.empty_like(source[:slab.below])
    comm.Sendrecv(upward, dest=above, sendtag=1, recvbuf=from_below, source=below, recvtag=1)
    downward = np.ascontiguousarray(source[first:first + d]) if slab.below else np.empty(0)
    from_above = np.empty_like(source[end:])
    comm.Sendrecv(downward, dest=below, sendtag=2, recvbuf=from_above, source=above, recvtag=2)
    for array in arrays:
        array[:slab.below] = from_below
        array[end:] = from_above


def scatter_layers(comm, grid, root=0):
    """Give each rank its layers of ``grid`` (significant on ``root`` only).  Collective."""
    gshape = comm.bcast(None if grid is None else np.shape(grid), root=root)
    part = layer_partition(comm, gshape[0])
    layer = int(np.prod(gshape[1:]))
    local = np.empty((part.nlocal,) + tuple(gshape[1:]))
    counts = np.diff(part.starts) * layer
    send = None
    if comm.Get_rank() == root:
        send = (np.ascontiguousarray(grid, dtype=np.float64), counts, part.starts[:-1] * layer, MPI.DOUBLE)
    comm.Scatterv(send, local, root=root)
    return local


def gather_layers(comm, local, root=0):
    """The whole grid on ``root`` (None elsewhere) from each rank's layers.  Collective."""
    layers = np.array(comm.allgather(local.shape[0]))
    counts = layers * int(np.prod(local.shape[1:]))
    recv = None
    if comm.Get_rank() == root:
        out = np.empty((int(layers.sum()),) + local.shape[1:])
        recv = (out, counts, np.concatenate([[0], np.cumsum(counts)[:-1]]), MPI.DOUBLE)
    comm.Gatherv(np.ascontiguousarray(local, dtype=np.float64), recv, root=root)
    return recv[0] if recv else None
