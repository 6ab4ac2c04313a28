"""Schedulers: who updates which layers of a slab when, during one pass of P steps.

* :class:`Sweep` is the non-blocked baseline: each step, the updated layers are split
  into one contiguous chunk per thread, and all threads finish the step before the next
  starts, so every step streams the whole grid through memory.
* :class:`PipelinedBlocking` is Wittmann, Hager & Wellein's pipelined temporal blocking:
  the layers are cut into blocks, thread ``s mod team`` does step ``s`` of the pass, and
  a thread takes block ``b`` at step ``s`` once step ``s-1`` has finished block ``b+1``.
  The team thus moves through the grid as a wavefront, each thread one step and two
  blocks behind its predecessor, while the blocks in between stay in the shared cache:
  a pass of P steps streams the grid once instead of P times.
* :class:`WavefrontTiles` blocks for each core's private cache instead: a thread takes a
  narrow skewed tile through all P steps as a wavefront; tiles go round the team.

Threads are Python threads running the GIL-free compiled kernels, ordered by progress
counters (:class:`_Team`).
"""
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

__all__ = ["Sweep", "PipelinedBlocking", "WavefrontTiles"]


def _chunks(lo, hi, parts):
    return [(lo + (hi - lo) * p // parts, lo + (hi - lo) * (p + 1) // parts) for p in range(parts)]


@dataclass(frozen=True)
class Sweep:
    """Non-blocked: one step at a time over all layers, split among ``threads``.

    ``steps_per_pass`` is only the halo depth between exchanges on several processes.
    ``streaming_stores=True`` writes the new grid by non-temporal stores, which skip
    reading it first (16 B per update instead of 24, :mod:`stencil.vector_row`): for
    grids far larger than the cache, on CPUs with 64-byte vectors (AVX-512; slower with
    narrower ones, docs/stencil.md).  A grid that fits in cache is
    better left there: the default is off.
    """
    threads: int = 2
    rows_per_block: int = 32
    steps_per_pass: int = 1
    streaming_stores: bool = False

    def __post_init__(self):
        _positive(self, "threads", "rows_per_block", "steps_per_pass")
        if not isinstance(self.streaming_stores, (bool, np.bool_)):
            raise ValueError(f"Sweep.streaming_stores must be True or False, not {self.streaming_stores!r}")

    def run_pass(self, slab, steps):
        options = (self.rows_per_block, self.streaming_stores)
        if self.threads == 1:       # no hand-off: Parareal runs many of these side by side
            for step in range(steps):
                slab.update(step, *slab.update_range(step, steps), *options)
            slab.finish_pass(steps)
            return
        with ThreadPoolExecutor(self.threads) as pool:
            for step in range(steps):
                lo, hi = slab.update_range(step, steps)
                work = [pool.submit(slab.update, step, k0, k1, *options)
                        for k0, k1 in _chunks(lo, hi, self.threads) if k1 > k0]
                for w in work:
                    w.result()
        slab.finish_pass(steps)


@dataclass(frozen=True)
class PipelinedBlocking:
    """Pipelined temporal blocking by a team of threads (see the module docstring).

    Parameters
    ----------
    team : int
        Threads in the team; thread ``t`` does steps ``t, t + team, ...`` of each pass.
    block : int
        Layers per block (planes in 3D, rows in 2D).
    steps_per_pass : int
        Steps taken per sweep of the wavefront through the grid (the memory traffic is
        divided by it); also the ghost depth on several processes.
    rows_per_block : int
        Rows of a 3D plane taken together (L2 blocking inside the kernel).
    """
    team: int = 2
    block: int = 4
    steps_per_pass: int = 4
    rows_per_block: int = 32

    def __post_init__(self):
        _positive(self, "team", "block", "steps_per_pass", "rows_per_block")

    def run_pass(self, slab, steps):
        nblocks = -(-(slab.nlayers - 2) // self.block)
        team = _Team(steps)             # counter s: blocks step s has finished

        def blocks_of(step):
            lo, hi = slab.update_range(step, steps)
            for b in range(nblocks):
                k0 = max(lo, 1 + b * self.block)
                k1 = min(hi, 1 + (b + 1) * self.block)
                yield b, k0, k1

        def worker(first):
            # This thread's steps, block by block, in wavefront order: step s reaches
            # block b at "time" b + 2s, so a thread with several steps interleaves them.
            tasks = sorted((b + 2 * s, s, b, k0, k1) for s in range(first, steps, self.team)
                           for b, k0, k1 in blocks_of(s))
            for _, s, b, k0, k1 in tasks:
                if s > 0 and not team.wait(s - 1, min(b + 2, nblocks)):
                    return
                if k1 > k0:
                    slab.update(s, k0, k1, self.rows_per_block)
                team.reach(s, b + 1)

        team.run(worker, min(self.team, steps))
        slab.finish_pass(steps)


@dataclass(frozen=True)
class WavefrontTiles:
    """Temporal blocking in each core's private cache: skewed tiles, handed round a team.

    Axis 1 is cut into skewed tiles of ``tile`` rows (points in 2D); one thread takes a
    tile through the ``steps_per_pass`` steps of a pass as a wavefront along axis 0, the
    tiles going round the ``team``, which meets every ``fronts_per_sync`` fronts.  The
    algorithm and its hazards: docs/stencil.md ("Skewed tiles in each core's cache").

    ``tile`` and ``fronts_per_sync`` default (None) to 16 rows and 8 fronts in 3D, 1024
    points and 256 fronts in 2D (where a front of a tile is much less work).
    ``steps_per_pass`` is also the halo depth on several processes: each rank must own at
    least that many layers.  With a periodic axis 1 the whole axis is one tile, run by one
    thread (use :class:`PipelinedBlocking` there).
    """
    team: int = 2
    tile: int = None
    steps_per_pass: int = 16
    fronts_per_sync: int = None

    DEFAULTS = {3: (16, 8), 2: (1024, 256)}     # ndim: (tile, fronts_per_sync)

    def __post_init__(self):
        _positive(self, "team", "steps_per_pass")
        _positive(self, *(name for name in ("tile", "fronts_per_sync") if getattr(self, name) is not None))

    def sizes(self, ndim):
        """``(tile, fronts_per_sync)`` for a grid of ``ndim`` dimensions."""
        tile, fronts = self.DEFAULTS[ndim]
        return (tile if self.tile is None else self.tile,
                fronts if self.fronts_per_sync is None else self.fronts_per_sync)

    def tiles(self, length, steps, periodic, tile):
        """``[(first, last), ...]``: per tile of ``tile`` points, the range
        ``[first[s], last[s])`` of axis 1 (of ``length`` points) that step ``s`` updates."""
        if periodic:
            whole = np.zeros(steps, dtype=np.int64)
            return [(whole, whole)]
        lo, hi = 1, length - 1
        edges = list(range(lo, hi, tile)) + [hi]
        shift = np.arange(steps)
        cut = [np.full(steps, lo)] + [np.maximum(lo, e - shift) for e in edges[1:-1]] + [np.full(steps, hi)]
        return [(cut[t].astype(np.int64), cut[t + 1].astype(np.int64)) for t in range(len(cut) - 1)]

    def plan(self, slab, steps):
        """``(lo, hi, tiles, front0, front1)`` of a pass of ``steps`` over ``slab``: the
        layer range ``[lo[s], hi[s])`` of each step, the tiles (:meth:`tiles`) and the
        fronts ``[front0, front1)`` that take every tile through all steps; one call of
        ``slab.update_tile(lo, hi, *tiles[t], front0, front1)`` runs tile ``t`` whole."""
        lo, hi = np.array([slab.update_range(s, steps) for s in range(steps)], dtype=np.int64).T.copy()
        tiles = self.tiles(slab.buffers[0].shape[1], steps, slab.stencil.periodic, self.sizes(slab.stencil.ndim)[0])
        return lo, hi, tiles, int(lo.min()), int((hi + np.arange(steps)).max())

    def run_pass(self, slab, steps):
        lo, hi, tiles, front0, front1 = self.plan(slab, steps)
        fronts_per_sync = self.sizes(slab.stencil.ndim)[1]
        team = _Team(len(tiles))        # counter t: fronts tile t has finished

        def worker(first):
            for t in range(first, len(tiles), self.team):
                for f0 in range(front0, front1, fronts_per_sync):
                    f1 = min(f0 + fronts_per_sync, front1)
                    if t > 0 and not team.wait(t - 1, f1):
                        return
                    slab.update_tile(lo, hi, *tiles[t], f0, f1)
                    team.reach(t, f1)

        team.run(worker, min(self.team, len(tiles)))
        slab.finish_pass(steps)


class _Team:
    """Threads ordered by progress counters under one condition variable.  A compiled loop
    spinning on a shared flag may never see it change, and prange iterations need not run
    concurrently, hence Python threads; an exception in one stops the others and is raised
    by :meth:`run` in the caller."""

    def __init__(self, counters):
        self.done = [0] * counters
        self.state = threading.Condition()
        self.failed = []

    def wait(self, counter, value):
        """Block until ``counter`` reaches ``value``; False if the team has failed."""
        with self.state:
            self.state.wait_for(lambda: self.failed or self.done[counter] >= value)
            return not self.failed

    def reach(self, counter, value):
        with self.state:
            self.done[counter] = value
            self.state.notify_all()

    def run(self, worker, threads):
        """Run ``worker(i)`` on threads ``i = 0 .. threads-1``; raise the first failure."""
        def guarded(i):
            try:
                worker(i)
            except BaseException as error:      # stop the team, report in the caller
                with self.state:
                    self.failed.append(error)
                    self.state.notify_all()
        pool = [threading.Thread(target=guarded, args=(i,), daemon=True) for i in range(threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
        if self.failed:
            raise self.failed[0]


def _positive(params, *names):
    for name in names:
        value = getattr(params, name)
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{type(params).__name__}.{name} must be a positive integer, not {value!r}")
