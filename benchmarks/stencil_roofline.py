"""MLUP/s of each stencil kernel on a grid much larger than the cache, beside the STREAM bound.

    .venv/bin/python -m benchmarks.stencil_roofline [--ndim 3] [--n 420] [--steps 16] [--rounds 3] [--threads 2]

Measures, in one run: STREAM copy and triad; the numpy reference; the non-blocked sweep,
with plain and with streaming stores; the in-core ceiling (each thread updating its own small grid, with rows as long as the
big grid's, that stays in its L2 cache); the two temporal blockings, each autotuned on a
slab of the grid and then timed on it: the shared-cache team (PipelinedBlocking) and the
private-cache skewed tiles (WavefrontTiles); and Devito, the Python peer, on the same
update when it is installed (an optional extra, not a dependency: run this script with
a Python that has it and the repository on PYTHONPATH, OMP_NUM_THREADS=threads,
DEVITO_LANGUAGE=openmp).  Prints each kernel's rate, bytes per update, its share of the
memory bound (from the best round and STREAM before and after all rounds; and "paired":
each pass against a copy of the grid's size right before and after it, the median over
passes, which the drift of this machine's bandwidth affects least), and the speedups
over the sweeps (and over Devito): from the best rounds, and round by round.
"""
import argparse
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from stencil import (PipelinedBlocking, Stencil, Sweep, WavefrontTiles, advance, autotune, bytes_per_update,
                     candidates, memory_bound, reference_run, reference_step, stream)
from stencil.kernels import dummy_coefficient, layer_kernel
from stencil.roofline import copy_timer


def rate(stencil, scheduler, steps, u, copy):
    """Updates per second over ``steps`` steps after a first pass (setup copies, page
    faults and compilation stay outside), in the fastest of those passes, and each pass's
    rate over the STREAM copy's element rate measured right before and after it (the
    better of the two; ``copy()`` runs between the passes, outside their timing)."""
    marks = []      # (step, end of the pass, copy rate after it, start of the next pass)

    def between_passes(step, owned):
        end = time.perf_counter()
        marks.append((step, end, copy(), time.perf_counter()))
    advance(u, stencil, scheduler.steps_per_pass + steps, scheduler=scheduler, callback=between_passes)
    per_step = np.prod(np.subtract(u.shape, 2))
    passes = [(per_step * (b[0] - a[0]), b[1] - a[3], max(a[2], b[2])) for a, b in zip(marks, marks[1:])]
    average = sum(n for n, _, _ in passes) / sum(t for _, t, _ in passes)
    return average, max(n / t for n, t, _ in passes), [n / t / c for n, t, c in passes]


DEVITO = "Devito, opt=advanced, OpenMP (float64)"


def devito_timer(stencil, u, steps):
    """A function of the copy timer returning Devito's rate on the same update of ``u``
    (float64, constant coefficients, Dirichlet, ``opt=('advanced', {'openmp': True})``,
    threads from OMP_NUM_THREADS), as :func:`rate` does, after checking it against the
    reference on a small grid; None when Devito is not installed."""
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

    def timed(copy):
        before = copy()
        start = time.perf_counter()
        op.apply(time_M=steps - 1)
        achieved = np.prod(np.subtract(u.shape, 2)) * steps / (time.perf_counter() - start)
        return achieved, 0.0, [achieved / max(before, copy())]
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
    # best of the rounds, STREAM before and after them; and each pass is set against a
    # copy of the grid's size right before and after it ("paired", median over passes).
    steps = max([args.steps] + [b.steps_per_pass for b in blockings.values()])
    sweeps = {f"non-blocked sweep ({args.threads} threads)": Sweep(args.threads),
              f"non-blocked sweep, streaming stores ({args.threads} threads)":
                  Sweep(args.threads, streaming_stores=True)}
    schedulers = {**sweeps, **blockings}
    traffic = {name: bytes_per_update(stencil, scheduler) for name, scheduler in schedulers.items()}
    copy = copy_timer(args.threads, u.size)
    timers = {name: (lambda s=scheduler: rate(stencil, s, steps, u, copy)) for name, scheduler in schedulers.items()}
    devito = None if args.variable or args.ndim == 2 else devito_timer(stencil, u, steps)
    if devito is not None:
        timers[DEVITO] = lambda: devito(copy)
        traffic[DEVITO] = stencil.bytes_per_update
    per_round, best_passes, paired = ({name: [] for name in timers} for _ in range(3))
    bw = stream(args.threads)
    for _ in range(args.rounds):
        for name, timed in timers.items():
            average, best, ratios = timed()
            per_round[name].append(average)
            best_passes[name].append(best)
            paired[name] += ratios
    rates = {name: max(values) for name, values in per_round.items()}       # the best round
    best_pass = {name: max(values) for name, values in best_passes.items()}
    bw = {key: max(value, after) for (key, value), after in zip(bw.items(), stream(args.threads).values())}
    bound = memory_bound(bw["copy"], stencil.bytes_per_update)
    print(f"STREAM copy {bw['copy'] / 1e9:.1f} GB/s, triad {bw['triad'] / 1e9:.1f} GB/s "
          f"({args.threads} threads); memory bound of a sweep at {stencil.bytes_per_update} B/update: "
          f"{bound / 1e6:.0f} MLUP/s; best of {args.rounds} rounds of {steps} steps")
    start = time.perf_counter()
    reference_step(u, stencil)
    rows = [("numpy reference", np.prod(np.subtract(shape, 2)) / (time.perf_counter() - start),
             stencil.bytes_per_update, None)]
    # a copy moves 24 B per element (write-allocate): a kernel's share of its bound
    # is its rate over the copy's element rate times its bytes per update / 24
    paired_share = {name: np.median(paired[name]) * traffic[name] / 24 for name in timers}
    rows += [(name, rates[name], traffic[name], paired_share[name]) for name in timers]
    if not args.variable and args.ndim == 3:
        rows.append((f"in-core ceiling ({args.threads} threads, each in its L2)",
                     in_core_rate(args.n, stencil, args.threads), None, None))
    print(f"{'kernel':90s} {'MLUP/s':>8s} {'B/update':>9s} {'of bound':>9s} {'paired':>7s}")
    for name, r, nbytes, share in rows:
        columns = [f"{r / 1e6:8.0f}"]
        if nbytes is not None:
            columns += [f"{nbytes:9.1f}", f"{r / memory_bound(bw['copy'], nbytes):9.2f}"]
        if share is not None:
            columns.append(f"{share:7.2f}")
        print(f"{name:90s} " + " ".join(columns))
    sweep, streaming = sweeps
    print(f"non-blocked sweep's fastest single step (STREAM's convention: best of {args.rounds * steps} "
          f"trials): {best_pass[sweep] / 1e6:.0f} MLUP/s, {best_pass[sweep] / bound:.2f} of the bound")
    print(f"non-blocked sweep: {rates[sweep] / bound:.2f} of the memory bound (paired: "
          f"{paired_share[sweep]:.2f}); with streaming stores {rates[streaming] / rates[sweep]:.2f}x the sweep, "
          f"{rates[streaming] / memory_bound(bw['copy'], traffic[streaming]):.2f} of its bound "
          f"(paired: {paired_share[streaming]:.2f})")
    for base in sweeps:
        print(f"temporal blocking / {base.split(' (')[0]}: "
              + ", ".join(f"{name.split(' (')[0]} {rates[name] / rates[base]:.2f}x" for name in blockings))
        # the same ratios round by round: the kernels of one round ran within a minute
        # of each other, so the machine's drift between rounds cancels
        print(f"  round by round (median, range of {args.rounds}): " + ", ".join(
            "{} {:.2f}x ({:.2f}-{:.2f})".format(name.split(' (')[0], np.median(r), min(r), max(r))
            for name in blockings for r in [np.divide(per_round[name], per_round[base])]))
    if devito is not None:
        print("/ Devito: " + ", ".join(f"{name.split(' (')[0]} {rates[name] / rates[DEVITO]:.2f}x"
                                       for name in schedulers))


if __name__ == "__main__":
    main()
