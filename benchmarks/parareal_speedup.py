"""Parareal on the Burgers study: measured speedup against the bounds, and memory.

    python -m benchmarks.parareal_speedup [--slices 2] [--iterations 1] [--memory-slices 8]

Runs, in this one invocation: the serial fine run (the baseline, timed here), then each
controller as its own process through ``python -m parareal run`` (MPI ones under
mpiexec), and prints for each its wall time, the measured speedup, Ruprecht's bound for
the measured coarse/fine cost ratio a, and the ratio of the two.  Then the peak memory
(sum of every process's peak resident set) of the MPI and the shared-memory controller
at the same P, and the bounds for larger P.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from parareal.report import speedup_bound
from parareal.setups import make_setup

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", NUMBA_NUM_THREADS="1")


def run_cli(mode, slices, iterations, params):
    prefix = ["mpiexec", "-n", str(slices)] if mode.startswith("mpi") else []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.npz")
        subprocess.run(prefix + [sys.executable, "-m", "parareal", "run", "burgers", "--set", *params,
                                 "--mode", mode, "--slices", str(slices), "--iterations", str(iterations),
                                 "--output", out], check=True, env=ENV, stdout=subprocess.DEVNULL)
        return json.loads(str(np.load(out)["summary"]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slices", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=1)
    parser.add_argument("--memory-slices", type=int, default=8)
    parser.add_argument("--n", type=int, default=40)
    args = parser.parse_args()
    params = [f"n={args.n}"]
    setup = make_setup("burgers", n=args.n)
    setup.fine(setup.u0, 0.0, 1 / 24)  # warm up
    start = time.perf_counter()
    setup.fine(setup.u0, 0.0, setup.t_end)
    serial = time.perf_counter() - start
    P, K = args.slices, args.iterations
    print(f"{setup.description}\nserial fine run: {serial:.3f} s\n")
    print(f"{'controller':<20}{'P':>3}{'K':>3}{'wall s':>9}{'a':>8}{'speedup':>9}"
          f"{'bound':>8}{'of bound':>10}")
    for mode in ("mpi", "mpi-standard", "threads", "threads-standard"):
        r = run_cli(mode, P, K, params)
        pipelined = mode in ("mpi", "threads")
        bound = speedup_bound(r["a"], K, P, pipelined)
        speedup = serial / r["wall_time"]
        print(f"{r['controller']:<20}{P:>3}{K:>3}{r['wall_time']:>9.3f}{r['a']:>8.4f}"
              f"{speedup:>9.2f}{bound:>8.2f}{speedup / bound:>9.0%}")
        a = r["a"]
    print(f"\npeak memory at P = {args.memory_slices} (K = 1), all processes together:")
    memory = {mode: run_cli(mode, args.memory_slices, 1, params)["peak_rss_mib"]
              for mode in ("mpi", "threads")}
    print(f"  MPI pipelined     {memory['mpi']:8.0f} MiB ({args.memory_slices} processes)")
    print(f"  threads pipelined {memory['threads']:8.0f} MiB (1 process): "
          f"{memory['threads'] / memory['mpi']:.0%} of MPI's")
    print(f"\nbounds for a = {a:.4f} (measured above):")
    print(f"{'P':>6}" + "".join(f"{f'K={k} std':>10}{f'K={k} pipe':>11}" for k in (1, 2, 4)))
    for p in (4, 8, 16, 24, 64, 256):
        print(f"{p:>6}" + "".join(f"{speedup_bound(a, k, p, False):>10.2f}{speedup_bound(a, k, p, True):>11.2f}"
                                  for k in (1, 2, 4)))


if __name__ == "__main__":
    main()
