"""A small autotuner: time one pass of each candidate temporal blocking on the real grid shape."""
import itertools
import time

import numpy as np
from mpi4py import MPI

from .distributed import exchange_halos, make_slab
from .schedulers import PipelinedBlocking, WavefrontTiles

__all__ = ["autotune", "candidates"]


def candidates(team=2, blocks=(1, 2, 4, 8), passes=(1, 2, 4), rows_per_block=(32,), tiles=None, ndim=3):
    """Teams of ``team`` threads: :class:`PipelinedBlocking` with blocks of ``blocks``
    layers and ``team * p`` steps per pass, and :class:`WavefrontTiles` with tiles of
    ``tiles`` (default 8, 16, 32 rows in 3D; 512, 1024, 2048 points in 2D) and ``4 * p``
    steps per pass, for p in ``passes``."""
    tiles = ((8, 16, 32) if ndim == 3 else (512, 1024, 2048)) if tiles is None else tiles
    return ([PipelinedBlocking(team, b, team * p, r)
             for b, p, r in itertools.product(blocks, passes, rows_per_block)]
            + [WavefrontTiles(team, t, 4 * p) for t, p in itertools.product(tiles, passes)])


def autotune(shape, stencil, options=None, repeat=1):
    """Return ``(best, table)``: the fastest of ``options`` (default :func:`candidates`)
    on a random grid of ``shape``, and ``[(scheduler, seconds per step), ...]``, fastest first.

    Each candidate runs ``repeat`` passes on this process alone; the grid should be the
    size of the production run's per-process layers, as cache effects decide the winner.
    """
    options = candidates() if options is None else options
    grid = np.random.default_rng(0).random(shape)
    table = []
    for scheduler in options:
        slab = make_slab(MPI.COMM_SELF, grid, stencil, scheduler.steps_per_pass)
        scheduler.run_pass(slab, 1)       # compile and touch the buffers outside the timing
        best = np.inf
        for _ in range(repeat):
            exchange_halos(MPI.COMM_SELF, slab)
            start = time.perf_counter()
            scheduler.run_pass(slab, scheduler.steps_per_pass)
            best = min(best, (time.perf_counter() - start) / scheduler.steps_per_pass)
        table.append((scheduler, best))
    table.sort(key=lambda row: row[1])
    return table[0][0], table
