"""Where the time of the wavefront tiles goes, from their kernel's in-core rate to a team pass.

    .venv/bin/python -m benchmarks.stencil_tiles [--n 420] [--tile 16] [--steps 8] [--threads 2] [--rounds 6]

`WavefrontTiles` is bound by the cores, not the memory (README): this splits what a team
pass loses against its kernel on data held in L2.  On the 3D 7-point Jacobi (constant
coefficients, Dirichlet) and in interleaved rounds (this machine's speed drifts by 20-40%
over minutes, so each figure is a median and the ratios compare the same rounds), it times
the tile kernel (:func:`stencil.kernels.wavefront_kernel`, one pass of ``--steps`` steps):

* in core: each thread on a tile of its own small grid (ten layers of three tiles), whose
  planes stay in its L2; one thread alone, then all threads at once;
* one tile of the big grid (n^3), one thread, the others idle;
* one tile per thread at once, each on its own copy of the grid: no waiting between them;
* a team pass of ``WavefrontTiles`` on the grid, and the share of it each thread spends
  in the kernel (the rest: waiting at tile edges, Python).
"""
import argparse
import collections
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from stencil import Stencil, WavefrontTiles
from stencil.slab import Slab


class TimedSlab(Slab):
    """A slab that adds up, per thread, the seconds spent in the tile kernel."""

    def __init__(self, *args):
        super().__init__(*args)
        self.kernel_seconds = collections.defaultdict(float)

    def update_tile(self, *args):
        start = time.perf_counter()
        super().update_tile(*args)
        self.kernel_seconds[threading.get_ident()] += time.perf_counter() - start


def tile_timer(slab, scheduler, steps, repeat=1):
    """``run(t)``: the updates per second of ``repeat`` calls of the kernel taking tile
    ``t`` of ``slab`` through a pass of ``steps`` steps, all fronts (the scheduler's own plan)."""
    lo, hi, tiles, front0, front1 = scheduler.plan(slab, steps)
    points = slab.buffers[0].shape[2] - 2

    def run(t):
        first, last = tiles[t % len(tiles)]
        updates = int(np.sum((hi - lo) * (last - first))) * points
        start = time.perf_counter()
        for _ in range(repeat):
            slab.update_tile(lo, hi, first, last, front0, front1)
        return repeat * updates / (time.perf_counter() - start)
    return run, len(tiles)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=420, help="grid points per axis")
    parser.add_argument("--tile", type=int, default=16, help="rows per tile")
    parser.add_argument("--steps", type=int, default=8, help="steps per pass")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    stencil = Stencil.heat(3, 0.1)
    scheduler = WavefrontTiles(team=args.threads, tile=args.tile, steps_per_pass=args.steps)
    rng = np.random.default_rng(0)

    def slab(shape):
        return TimedSlab(rng.random(shape), stencil, args.steps, False, False)
    # in core: the middle one of three tiles, ten layers deep: its planes, skewed as on
    # the grid, stay in L2 (1.7 MB at n = 420, tile = 16, 8 steps); as many passes as
    # one tile of the grid takes updates
    repeat = max(1, args.n // 8)
    small = [tile_timer(slab((10, 3 * args.tile + 2, args.n)), scheduler, args.steps, repeat)[0]
             for _ in range(args.threads)]
    small = [lambda t, run=run: run(1) for run in small]
    grids = [slab((args.n,) * 3) for _ in range(args.threads)]
    on_grid = [tile_timer(g, scheduler, args.steps) for g in grids]
    ntiles = on_grid[0][1]
    team_slab = grids[0]
    team_updates = (args.n - 2) ** 3 * args.steps

    def team_pass():
        team_slab.kernel_seconds.clear()
        start = time.perf_counter()
        scheduler.run_pass(team_slab, args.steps)
        seconds = time.perf_counter() - start
        return team_updates / seconds, np.mean(list(team_slab.kernel_seconds.values())) / seconds

    results = collections.defaultdict(list)
    with ThreadPoolExecutor(args.threads) as pool:
        def together(runs, t):      # each thread one run, at once; their rates
            return list(pool.map(lambda run: run(t), runs))
        for run in small + [run for run, _ in on_grid]:     # compile, fault the pages in
            run(0)
        for r in range(args.rounds):
            t = ntiles // 4 + r             # a tile of the grid's inside, another each round
            results["in core, one thread"].append(small[0](t))
            results["in core, all threads"].append(sum(together(small, t)))
            results["one tile, one thread alone"].append(on_grid[0][0](t))
            results["one tile per thread, no waiting"].append(sum(together([run for run, _ in on_grid], t)))
            rate, in_kernel = team_pass()
            results["team pass"].append(rate)
            results["in kernel"].append(in_kernel)
    m = {name: np.median(values) for name, values in results.items()}
    T = args.threads
    print(f"grid {args.n}^3, {scheduler}, 3D 7-point Jacobi; medians of {args.rounds} interleaved rounds, "
          f"GLUP/s (all threads together)")
    rows = [("in core, one thread (a tile of its own 10-layer grid, in L2)", m["in core, one thread"], ""),
            (f"in core, {T} threads (each its own grid)", m["in core, all threads"],
             f"{m['in core, all threads'] / (T * m['in core, one thread']):.2f} of {T}x one thread"),
            ("one tile of the grid, one thread alone", m["one tile, one thread alone"],
             f"{m['one tile, one thread alone'] / m['in core, one thread']:.2f} of in core, one thread"),
            (f"one tile per thread at once, {T} grids, no waiting", m["one tile per thread, no waiting"],
             f"{m['one tile per thread, no waiting'] / (T * m['one tile, one thread alone']):.2f} of {T}x one alone"),
            (f"team pass of {T} threads on the grid", m["team pass"],
             f"{m['team pass'] / m['one tile per thread, no waiting']:.2f} of no waiting, "
             f"{m['team pass'] / m['in core, all threads']:.2f} of in core; "
             f"each thread {100 * m['in kernel']:.0f}% of the pass in the kernel")]
    for name, value, note in rows:
        print(f"{name:62s} {value / 1e9:6.2f}   {note}")


if __name__ == "__main__":
    main()
