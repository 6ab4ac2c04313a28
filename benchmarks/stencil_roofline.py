"""MLUP/s of each stencil kernel on a grid much larger than the cache, beside the STREAM bound.

    .venv/bin/python benchmarks/stencil_roofline.py [--n 420] [--steps 16] [--threads 2]

Measures, in one run: STREAM copy and triad; the numpy reference; the non-blocked sweep;
pipelined temporal blocking (autotuned on the grid, then timed); the in-core rate (the
sweep on a grid that fits in the cache).  Prints each kernel's rate, bytes per update,
its share of the memory bound, and temporal blocking's speedup over the sweep.
"""
import argparse
import time

import numpy as np

from stencil import PipelinedBlocking, Stencil, Sweep, advance, autotune, memory_bound, reference_step, stream


def rate(shape, stencil, scheduler, steps, u):
    """Updates per second in the steady state: from the end of the first pass to the last
    (setup copies, page faults and compilation stay outside)."""
    ends = []
    advance(u, stencil, steps, scheduler=scheduler,
            callback=lambda step, owned: ends.append((step, time.perf_counter())))
    (s0, t0), (s1, t1) = ends[0], ends[-1]
    return np.prod(np.subtract(shape, 2)) * (s1 - s0) / (t1 - t0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=420, help="grid points per axis (3D)")
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--variable", action="store_true", help="variable coefficients")
    args = parser.parse_args()
    shape = (args.n,) * 3
    rng = np.random.default_rng(0)
    u = rng.random(shape)
    stencil = (Stencil(3, coefficient=0.1 * rng.random(shape)) if args.variable
               else Stencil.heat(3, 0.1))
    bw = stream(args.threads)
    bound = memory_bound(bw["copy"], stencil.bytes_per_update)
    print(f"grid {args.n}^3 ({u.nbytes / 1e9:.2f} GB per array), {stencil.describe()}")
    print(f"STREAM copy {bw['copy'] / 1e9:.1f} GB/s, triad {bw['triad'] / 1e9:.1f} GB/s "
          f"({args.threads} threads); memory bound of a sweep at {stencil.bytes_per_update} B/update: "
          f"{bound / 1e6:.0f} MLUP/s")
    rows = []
    start = time.perf_counter()
    reference_step(u, stencil)
    rows.append(("numpy reference", np.prod(np.subtract(shape, 2)) / (time.perf_counter() - start),
                 stencil.bytes_per_update))
    sweep = Sweep(args.threads)
    rows.append((f"non-blocked sweep ({args.threads} threads)",
                 rate(shape, stencil, sweep, args.steps, u), stencil.bytes_per_update))
    small = (64, 64, 64)     # 1 MB per thread and array: the in-core ceiling, from L2
    rows.append(("sweep in cache (64^3)", rate(small, stencil if not args.variable else
                 Stencil(3, coefficient=stencil.coefficient[:64, :64, :64].copy()),
                 Sweep(args.threads, steps_per_pass=100), 2000, u[:64, :64, :64].copy()), None))
    slab = (8 * args.threads * 4 + 16,) + shape[1:]
    slab_updates = np.prod(np.subtract(slab, 2))
    best, table = autotune(slab, stencil,
                           [PipelinedBlocking(args.threads, b, args.threads * p)
                            for b in (1, 2, 4) for p in (1, 2, 4)])
    print("autotuned on a slab of the grid (MLUP/s):", ", ".join(
        f"block {s.block} T {s.steps_per_pass}: {1e-6 * slab_updates / t:.0f}" for s, t in table[:4]), "...")
    tb = rate(shape, stencil, best, args.steps, u)
    rows.append((f"pipelined temporal blocking (team {best.team}, block {best.block}, "
                 f"T {best.steps_per_pass})", tb, stencil.bytes_per_update / best.steps_per_pass))
    print(f"{'kernel':58s} {'MLUP/s':>8s} {'B/update':>9s} {'of bound':>9s}")
    for name, r, nbytes in rows:
        share = "" if nbytes is None else f"{r / memory_bound(bw['copy'], nbytes):9.2f}"
        print(f"{name:58s} {r / 1e6:8.0f} {'' if nbytes is None else f'{nbytes:9.1f}'} {share}")
    print(f"non-blocked sweep: {rows[1][1] / bound:.2f} of the memory bound; "
          f"temporal blocking / sweep: {tb / rows[1][1]:.2f}x")


if __name__ == "__main__":
    main()
