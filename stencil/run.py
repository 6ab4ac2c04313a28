"""Advance a grid by N steps: a scheduler inside each process, halos between processes."""
import zlib

import numpy as np
from mpi4py import MPI

from pipekrylov.parallel.errors import collective_check, raise_on_any

from .distributed import exchange_halos, make_slab
from .schedulers import PipelinedBlocking, WavefrontTiles

__all__ = ["advance"]


def advance(u, stencil, steps, *, scheduler=None, comm=None, checkpoint=None, callback=None):
    """Take ``steps`` steps of ``stencil`` from ``u``; return the new values (a new array).

    Parameters
    ----------
    u : ndarray
        The whole grid, or with ``comm`` this rank's layers of it (axis 0, as
        :func:`stencil.layer_partition` splits it; :func:`stencil.scatter_layers`).
        With variable coefficients, ``stencil.coefficient`` covers the same layers.
    stencil : Stencil
    steps : int
    scheduler : Sweep, PipelinedBlocking or WavefrontTiles, optional
        How each process updates its layers; its ``steps_per_pass`` is also the halo
        depth between processes.  Default: ``WavefrontTiles()`` with Dirichlet
        boundaries (the fastest here), ``PipelinedBlocking()`` with periodic ones.
    comm : mpi4py communicator, optional
        The processes sharing the grid (default: this process alone).
    checkpoint : Checkpoint, optional
        Resume from its latest complete checkpoint and save new ones.
    callback : callable, optional
        ``callback(step, owned)`` after each pass (``owned`` is a view: copy to keep it).

    Returns
    -------
    ndarray
        The grid (or this rank's layers) after ``steps`` steps.  The result is the same
        bit for bit for every scheduler, process count and checkpoint history.
        Collective when ``comm`` is given.
    """
    comm = MPI.COMM_SELF if comm is None else comm
    if scheduler is None:
        scheduler = PipelinedBlocking() if stencil.periodic else WavefrontTiles()
    u = np.asarray(u)
    with collective_check(comm, "stencil.advance"):
        if not isinstance(steps, (int, np.integer)) or steps < 0:
            raise ValueError(f"steps must be a non-negative integer, not {steps!r}")
        stencil.check_grid(u, layers_only=comm.Get_size() > 1)
    shapes = comm.allgather(u.shape)       # outside the check: no collective inside one
    with collective_check(comm, "stencil.advance"):
        if any(s[1:] != u.shape[1:] for s in shapes):
            raise ValueError(f"ranks hold layers of different shapes: {shapes}")
        if sum(s[0] for s in shapes) < 3:
            raise ValueError(f"the grid has {sum(s[0] for s in shapes)} layers; at least 3 are needed")
    slab = make_slab(comm, u, stencil, scheduler.steps_per_pass)   # copies u into its buffers
    step = 0
    if checkpoint is not None:
        # the run a checkpoint belongs to: a resume from another run's files (other
        # initial data) would return that run's grid
        initial = comm.allgather(f"{zlib.crc32(np.ascontiguousarray(u, dtype=np.float64).view(np.uint8)):08x}")
        identity = {"layers": [s[0] for s in shapes], "layer_shape": list(u.shape[1:]),
                    "stencil": stencil.describe(), "initial_crc32": initial}
        step = checkpoint.restore(comm, identity, slab.owned)
        with collective_check(comm, "stencil.advance"):   # step is the same on every rank
            if step > steps:
                raise ValueError(f"the checkpoint in {checkpoint.directory} is at step {step}, beyond "
                                 f"this run's {steps} steps: it belongs to a longer run")
    while step < steps:
        length = min(scheduler.steps_per_pass, steps - step)
        if slab.below or slab.above:
            exchange_halos(comm, slab)
        error = None
        try:
            scheduler.run_pass(slab, length)
        except Exception as e:      # reach every rank before the next exchange
            error = e
        raise_on_any(comm, error, "stencil.advance")
        step += length
        if checkpoint is not None:
            checkpoint.maybe_save(comm, step, slab.owned)
        if callback is not None:
            callback(step, slab.owned)
    return slab.owned.copy()
