"""MLUP/s of each stencil kernel on a grid much larger than the cache, beside the STREAM bound.

    .venv/bin/python benchmarks/stencil_roofline.py [--ndim 3] [--n 420] [--steps 16] [--rounds 3] [--threads 2]

Measures, in one run: STREAM copy and triad; the numpy reference; the non-blocked sweep;
the in-core ceiling (each thread updating its own small grid, with rows as long as the
big grid's, that stays in its L2 cache); the two temporal blockings, each autotuned on a
slab of the grid and then timed on it: the shared-cache team (PipelinedBlocking) and the
private-cache skewed tiles (WavefrontTiles); and Devito, the Python peer, on the same
update when it is installed (an optional extra, not a dependency: run this script with
a Python that has it and the repository on PYTHONPATH, OMP_NUM_THREADS=threads,
DEVITO_LANGUAGE=openmp).  Prints each kernel's rate, bytes per update, its share of the
memory bound, and the speedups over the sweep (and over Devito).
"""
import argparse
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from stencil import (PipelinedBlocking, Stencil, Sweep, WavefrontTiles, advance, autotune, candidates,
                     memory_bound, reference_run, reference_step, stream)
from stencil.kernels import dummy_coefficient, layer_kernel


def rate(stencil, scheduler, steps, u):
    """Updates per second over ``steps`` steps after a first pass (setup copies, page
    faults and compilation stay outside), and in the fastest of those passes."""
    ends = []
    advance(u, stencil, scheduler.steps_per_pass + steps, scheduler=scheduler,
            callback=lambda step, owned: ends.append((step, time.perf_counter())))
    per_step = np.prod(np.subtract(u.shape, 2))
    (s0, t0), (s1, t1) = ends[0], ends[-1]
    best = max(per_step * (b - a) / (tb - ta) for (a, ta), (b, tb) in zip(ends, ends[1:]))
    return per_step * (s1 - s0) / (t1 - t0), best


def devito_timer(stencil, u, steps):
    """A function returning Devito's rate on the same update of ``u`` (float64, constant
    coefficients, Dirichlet, ``opt=('advanced', {'openmp': True})``, threads from
    OMP_NUM_THREADS), after checking it against the reference on a small grid; None when
    Devito is not installed."""
    try:
        from devito import Eq, Grid, Operator, TimeFunction
    except ImportError:
        return None

    def operator(shape):
        grid = Grid(shape=shape, dtype=np.float64)
        f = TimeFunction(name="u", grid=grid, space_order=2)
        t, (x, y, z) = grid.stepping_dim, grid.dimensions
        neighbours = (f[t, x, y, z - 1] + f[t, x, y, z + 1] + f[t, x, y - 1, z] + f[t, x, y + 1, z]
                      + f[t, x - 1, y, z] + f[t, x + 1, y, z])
        update = Eq(f.forward, stencil.c0 * f + stencil.c1 * neighbours, subdomain=grid.interior)
        return f, Operator(update, opt=("advanced", {"openmp": True}))

    small = np.random.default_rng(1).random((30, 30, 30))
    f, op = operator(small.shape)
    f.data[0], f.data[1] = small, small
    op.apply(time_M=3)
    assert np.allclose(f.data[0], reference_run(small, stencil, 4), rtol=1e-13, atol=0)
    f, op = operator(u.shape)
    f.data[0], f.data[1] = u, u
    op.apply(time_M=0)                       # compiled and paged in outside the timing

    def timed():
        start = time.perf_counter()
        op.apply(time_M=steps - 1)
        return np.prod(np.subtract(u.shape, 2)) * steps / (time.perf_counter() - start), 0.0
    return timed


def in_core_rate(n, stencil, threads, calls=2000):
    """Updates per second of the layer kernel with each thread on its own (10, 16, n) grid
    (two 0.5 MB arrays at n = 420, in L2): what the cores can do when memory is no limit."""
    kernel = layer_kernel(3, stencil.periodic, False)
    shape = (10, 16, n)

    def run(_):
        u = np.random.default_rng(0).random(shape)
        v, a = u.copy(), dummy_coefficient(3)
        kernel(u, v, a, stencil.c0, stencil.c1, 1, shape[0] - 1, 32)
        start = time.perf_counter()
        for _ in range(calls):
            kernel(u, v, a, stencil.c0, stencil.c1, 1, shape[0] - 1, 32)
            u, v = v, u
        return np.prod(np.subtract(shape, 2)) * calls / (time.perf_counter() - start)
    with ThreadPoolExecutor(threads) as pool:
        return sum(pool.map(run, range(threads)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ndim", type=int, choices=(2, 3), default=3)
    parser.add_argument("--n", type=int, help="grid points per axis (default 420 in 3D, 10000 in 2D)")
    parser.add_argument("--steps", type=int, default=16, help="steps timed per kernel and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--variable", action="store_true", help="variable coefficients")
    args = parser.parse_args()
    args.n = args.n or {3: 420, 2: 10000}[args.ndim]
    shape = (args.n,) * args.ndim
    rng = np.random.default_rng(0)
    u = rng.random(shape)
    stencil = (Stencil(args.ndim, coefficient=0.1 * rng.random(shape)) if args.variable
               else Stencil.heat(args.ndim, 0.1))
    print(f"grid {args.n}^{args.ndim} ({u.nbytes / 1e9:.2f} GB per array), {stencil.describe()}")
    slab = (8 * args.threads * 4 + 16,) + shape[1:]
    slab_updates = np.prod(np.subtract(slab, 2))
    blockings = {}
    options = candidates(args.threads, blocks=(1, 2, 4), ndim=args.ndim)
    for kind, scheduler in (("pipelined temporal blocking", PipelinedBlocking),
                            ("wavefront tiles", WavefrontTiles)):
        best, table = autotune(slab, stencil, [s for s in options if isinstance(s, scheduler)])
        print(f"{kind} autotuned on a slab of the grid (MLUP/s):", ", ".join(
            f"{s}: {1e-6 * slab_updates / t:.0f}" for s, t in table[:3]), "...")
        blockings[f"{kind} ({best})"] = best
    # Memory bandwidth here drifts by 20-30% over minutes: every kernel runs in each round,
    # best of the rounds; STREAM before and after them.
    steps = max([args.steps] + [b.steps_per_pass for b in blockings.values()])
    schedulers = {f"non-blocked sweep ({args.threads} threads)": Sweep(args.threads), **blockings}
    timers = {name: (lambda s=scheduler: rate(stencil, s, steps, u)) for name, scheduler in schedulers.items()}
    devito = None if args.variable or args.ndim == 2 else devito_timer(stencil, u, steps)
    if devito is not None:
        timers["Devito, opt=advanced, OpenMP (float64)"] = devito
    rates = {name: 0.0 for name in timers}
    best_pass = dict(rates)
    bw = stream(args.threads)
    for _ in range(args.rounds):
        for name, timed in timers.items():
            average, best = timed()
            rates[name], best_pass[name] = max(rates[name], average), max(best_pass[name], best)
    bw = {key: max(value, after) for (key, value), after in zip(bw.items(), stream(args.threads).values())}
    bound = memory_bound(bw["copy"], stencil.bytes_per_update)
    print(f"STREAM copy {bw['copy'] / 1e9:.1f} GB/s, triad {bw['triad'] / 1e9:.1f} GB/s "
          f"({args.threads} threads); memory bound of a sweep at {stencil.bytes_per_update} B/update: "
          f"{bound / 1e6:.0f} MLUP/s; best of {args.rounds} rounds of {steps} steps")
    start = time.perf_counter()
    reference_step(u, stencil)
    rows = [("numpy reference", np.prod(np.subtract(shape, 2)) / (time.perf_counter() - start),
             stencil.bytes_per_update)]
    rows += [(name, rates[name], stencil.bytes_per_update / scheduler.steps_per_pass)
             for name, scheduler in schedulers.items()]
    if devito is not None:
        rows.append(("Devito, opt=advanced, OpenMP (float64)", rates["Devito, opt=advanced, OpenMP (float64)"],
                     stencil.bytes_per_update))
    if not args.variable and args.ndim == 3:
        rows.append((f"in-core ceiling ({args.threads} threads, each in its L2)",
                     in_core_rate(args.n, stencil, args.threads), None))
    sweep = rows[1][1]
    print(f"{'kernel':90s} {'MLUP/s':>8s} {'B/update':>9s} {'of bound':>9s}")
    for name, r, nbytes in rows:
        share = "" if nbytes is None else f"{r / memory_bound(bw['copy'], nbytes):9.2f}"
        print(f"{name:90s} {r / 1e6:8.0f} {'' if nbytes is None else f'{nbytes:9.1f}'} {share}")
    sweep_name = next(iter(schedulers))
    print(f"non-blocked sweep's fastest single step (STREAM's convention: best of {args.rounds * steps} "
          f"trials): {best_pass[sweep_name] / 1e6:.0f} MLUP/s, {best_pass[sweep_name] / bound:.2f} of the bound")
    print(f"non-blocked sweep: {sweep / bound:.2f} of the memory bound; temporal blocking / sweep: "
          + ", ".join(f"{name.split(' (')[0]} {rates[name] / sweep:.2f}x" for name in blockings))
    if devito is not None:
        print("/ Devito: " + ", ".join(f"{name.split(' (')[0]} {rates[name] / rates['Devito, opt=advanced, OpenMP (float64)']:.2f}x"
                                       for name in schedulers))


if __name__ == "__main__":
    main()
