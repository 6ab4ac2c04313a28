"""The performance model of this package against measured runs, in one go.

    python -m benchmarks.model_check                       # 1 and 2 ranks, shared memory and TCP
    python -m benchmarks.model_check --ranks 2 --transports tcp --sizes 4096 65536

Calibrates the model (``pipekrylov.model.calibrate``: SpMV and vector costs at a few
local sizes, each loop's own time on one rank) before the runs and after each, and
measures time per iteration as ``benchmarks.strong_scaling_limit`` does (2D Poisson,
Jacobi; the difference of two solves) in ``--runs`` mpiexec runs, at 1 and 2 ranks over
shared memory and over TCP (Open MPI ``--mca btl tcp,self --mca btl_tcp_if_include lo``:
a real reduction latency).  A run on p ranks is modelled with the mean of the times
modelled with the calibrations either side of it, made in p processes at once (a rank's
costs while the other cores work too; and this VM's speed drifts by a quarter within an
hour as its host is loaded, the model then drifting with the measurement).  It prints,
for our cg (compiled loop), p-cg and p(2)-cg (compiled and Python loop), the medians
over the runs of the measured and the modelled time and of their ratio, and the runs'
ratios.  The model's communication is what each run measures at each size with
``model.communication_costs``, as the loops communicate: the pipelined methods'
reduction G a nonblocking Allreduce, of which the processor's own time o is not hidden,
cg's a blocking Allreduce, and the halo an exchange of a grid line with the neighbouring
ranks.  About 15 minutes.
"""
import argparse
import dataclasses
import shutil
import subprocess
import sys
import tempfile

import numpy as np

from benchmarks.common import cpu_name, mpiexec_env
from benchmarks.strong_scaling_limit import ROOT, SIZES, TOTAL, launcher_kind, measure, runnable
from pipekrylov import model
from pipekrylov.compare import markdown_table
from pipekrylov.timing import grid

# the benchmark's series: (model method, loop, depth)
SERIES = {"cg": ("cg", "compiled", 1), "p-cg compiled": ("p-cg", "compiled", 1),
          "p-cg python": ("p-cg", "python", 1), "p(2)-cg compiled": ("p(l)-cg", "compiled", 2),
          "p(2)-cg python": ("p(l)-cg", "python", 2)}


@dataclasses.dataclass(frozen=True)
class Measured(model.Machine):
    """The calibrated machine with a run's measured reductions."""
    allreduce: float = 0.0    # nonblocking, waited for at once
    blocking: float = 0.0

    def reduction(self, ranks, blocking=False):
        return (self.blocking if blocking else self.allreduce) if ranks > 1 else 0.0


def median_rows(runs):
    """The rows of several runs of :func:`measure` (the same configurations in the same
    order) as one: each measured figure the median over the runs, None where most runs
    have none (at a few hundred unknowns one run's figure differs from the next run's by
    10-20%, the state of the caches and of the allocator as it falls in that process)."""
    merged = []
    for same in zip(*runs, strict=True):
        if len({(row["transport"], row["ranks"], row["local"]) for row in same}) > 1:
            raise SystemExit(f"the runs measured different configurations: {same}")
        row = dict(same[0])
        for key in row:
            values = [other.get(key) for other in same]
            if any(isinstance(v, float) for v in values):
                values = [v for v in values if v is not None]
                row[key] = float(np.median(values)) if 2 * len(values) > len(same) else None
        merged.append(row)
    return merged


def calibrated(path, processes):
    """``model.calibrate`` (``pipekrylov model --machine here``) in ``processes`` processes
    at once, each timing its own figures (rank 0's kept): a run on two ranks is modelled
    with the costs of a rank while the other core works too (a rank's share of the
    memory and the caches), a run on one rank with those of one process alone.  This
    process must not have started MPI when it starts mpiexec."""
    command = [shutil.which("mpiexec"), "-n", str(processes), sys.executable, "-m", "pipekrylov", "model",
               "--machine", "here", "--max-ranks", "1", "--save-machine", path]
    env = mpiexec_env()
    print(f"# calibrating in {processes} process(es)", file=sys.stderr, flush=True)
    out = subprocess.run(command, capture_output=True, text=True, timeout=1800, cwd=ROOT, env=env)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{out.stdout[-2000:]}{out.stderr[-4000:]}")
    return model.Machine.load(path)


def modelled_us(here, row, name):
    """The model's time per iteration (us) of series ``name`` in the configuration of
    ``row``, with the machine ``here`` and the communication the run measured there."""
    method, loop, depth = SERIES[name]
    n = row["total"]
    nnz = 5 * n - 2 * sum(grid(n))   # 2D Poisson nx x ny
    machine = Measured(**{**dataclasses.asdict(here), "rates": here.rates, "kernels": here.kernels,
                          "halo": row["halo_us"] * 1e-6, "allreduce": row["iallreduce_us"] * 1e-6,
                          "blocking": row["blocking_us"] * 1e-6,
                          "reduction_overhead": row["allreduce_overhead_us"] * 1e-6})
    return model.time_per_iteration(method, machine, n, nnz, row["ranks"], depth=depth, loop=loop) * 1e6


def compare(runs, machines):
    """Rows ``(row, series, measured, modelled, ratios)``: for each configuration and
    series, the medians over the runs of the measured and the modelled time, and each
    run's ratio of the two.  A run on p ranks is modelled with the mean of the times
    modelled with the machines calibrated in p processes just before it and just after
    it (``machines[p][i]`` and ``machines[p][i + 1]``), so that a drift of the machine's
    speed through the check moves the model with the measurement.  A series is left out where at most half the
    runs have a figure for it, or a calibration has no cost for its loop."""
    for ranks, calibrations in machines.items():
        if len(calibrations) != len(runs) + 1:
            raise ValueError(f"{len(runs)} runs need {len(runs) + 1} calibrations around them, "
                             f"not {len(calibrations)} (in {ranks} processes)")
    compared = []
    for j, row in enumerate(median_rows(runs)):
        around = machines[row["ranks"]]
        for name, (method, loop, _) in SERIES.items():
            if any(f"{method} {loop}" not in m.fixed for m in around):
                continue   # a loop the calibration could not run (no MPI library for compiled code)
            pairs = [(np.mean([modelled_us(m, run[j], name) for m in around[i:i + 2]]), run[j][name])
                     for i, run in enumerate(runs) if run[j].get(name) is not None]
            if 2 * len(pairs) <= len(runs):
                continue
            modelled, measured = np.array(pairs).T
            compared.append((row, name, float(np.median(measured)), float(np.median(modelled)),
                             sorted(modelled / measured)))
    return compared


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=SIZES + [TOTAL],
                        help=f"unknowns per rank ({TOTAL} means that many in total)")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--transports", nargs="+", default=["shm", "tcp"], choices=["shm", "tcp"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3,
                        help="mpiexec runs of each configuration; each figure the median over them")
    args = parser.parse_args(argv)
    kind = launcher_kind(shutil.which("mpiexec"))
    rank_counts = sorted({r for r in args.ranks for t in args.transports if runnable(t, r, kind)})
    if not rank_counts:
        raise SystemExit("nothing to measure: TCP runs need 2 or more ranks and Open MPI's mpiexec")
    runs, machines = [], {ranks: [] for ranks in rank_counts}
    with tempfile.TemporaryDirectory() as folder:
        for i in range(max(1, args.runs) + 1):
            for ranks in rank_counts:
                machines[ranks].append(calibrated(f"{folder}/machine{i}-{ranks}.json", ranks))
            if i < max(1, args.runs):
                runs.append(measure(rank_counts, args.transports, args.sizes, args.repeat, with_petsc=False))
    table, inside = [], []
    for row, name, measured, modelled, ratios in compare(runs, machines):
        ratio = float(np.median(ratios))
        inside.append(0.8 <= ratio <= 1.25)
        table.append([row["transport"], row["ranks"], f"{row['local']:,}", name, f"{measured:.1f}",
                      f"{modelled:.1f}", f"{ratio:.2f}" + ("" if inside[-1] else " (outside)"),
                      "-".join(f"{r:.2f}" for r in (ratios[0], ratios[-1]))])
    print(f"model against measured, time per iteration in us; {cpu_name()}; {len(runs)} runs, each modelled "
          f"with the calibrations (in as many processes as it has ranks) before and after it; the loops' fixed "
          f"costs per calibration, us: " + "; ".join(
              f"{key} " + ", ".join(f"{ranks} proc. " + "/".join(
                  f"{m.fixed[key] * 1e6:.1f}" if key in m.fixed else "-" for m in ms) for ranks, ms in machines.items())
              for key in model.LOOP_KEYS))
    print("communication (model.communication_costs, median of the runs), us: " + "; ".join(
        f"{row['transport']} {row['ranks']} ranks {row['local']:,}: G {row['iallreduce_us']:.1f} (blocking "
        f"{row['blocking_us']:.1f}), o {row['allreduce_overhead_us']:.1f}, halo {row['halo_us']:.1f}"
        for row in median_rows(runs) if row["ranks"] > 1))
    print(markdown_table(["transport", "ranks", "unknowns/rank", "solver", "measured", "modelled",
                          "modelled / measured", "runs' ratios (least-most)"], table))
    print(f"modelled / measured within 0.8-1.25: {sum(inside)} of {len(inside)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
