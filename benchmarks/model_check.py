"""The performance model of this package against measured runs, in one go.

    python -m benchmarks.model_check                       # 1 and 2 ranks, shared memory and TCP
    python -m benchmarks.model_check --ranks 2 --transports tcp --sizes 4096 65536

Calibrates the model on this process (``pipekrylov.model.calibrate``: SpMV and vector
costs at a few local sizes, each loop's own time on one rank), then measures time per
iteration as ``benchmarks.strong_scaling_limit`` does (2D Poisson, Jacobi; the
difference of two solves) in ``--runs`` mpiexec runs, each figure the median over them,
at 1 and 2 ranks over shared memory and over TCP (Open MPI
``--mca btl tcp,self --mca btl_tcp_if_include lo``: a real reduction latency), and
prints measured, modelled and their ratio for our cg (compiled loop), p-cg and p(2)-cg
(compiled and Python loop).  The model's communication is what each run measures at each
size with ``model.communication_costs``, as the loops communicate: the pipelined
methods' reduction G a nonblocking Allreduce, of which the processor's own time o is not
hidden, cg's a blocking Allreduce, and the halo an exchange of a grid line with the
neighbouring ranks.
"""
import argparse
import dataclasses
import sys

import numpy as np

from benchmarks.common import cpu_name
from benchmarks.strong_scaling_limit import SIZES, TOTAL, measure
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=SIZES + [TOTAL],
                        help=f"unknowns per rank ({TOTAL} means that many in total)")
    parser.add_argument("--ranks", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--transports", nargs="*", default=["shm", "tcp"], choices=["shm", "tcp"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3,
                        help="mpiexec runs of each configuration; each figure the median over them")
    args = parser.parse_args(argv)
    # the runs first: this process must not have started MPI when it starts mpiexec
    rows = median_rows([measure(args.ranks, args.transports, args.sizes, args.repeat, with_petsc=False)
                        for _ in range(max(1, args.runs))])
    from mpi4py import MPI
    here = model.calibrate(MPI.COMM_SELF)
    table, ratios = [], []
    for row in rows:
        n = row["total"]
        nnz = 5 * n - 2 * sum(grid(n))   # 2D Poisson nx x ny
        machine = Measured(**{**dataclasses.asdict(here), "rates": here.rates, "kernels": here.kernels,
                              "halo": row["halo_us"] * 1e-6, "allreduce": row["iallreduce_us"] * 1e-6,
                              "blocking": row["blocking_us"] * 1e-6,
                              "reduction_overhead": row["allreduce_overhead_us"] * 1e-6})
        for name, (method, loop, depth) in SERIES.items():
            measured = row.get(name)
            if measured is None:
                continue
            modelled = model.time_per_iteration(method, machine, n, nnz, row["ranks"], depth=depth, loop=loop) * 1e6
            ratio = modelled / measured
            ratios.append(ratio)
            table.append([row["transport"], row["ranks"], f"{row['local']:,}", name, f"{measured:.1f}",
                          f"{modelled:.1f}", f"{ratio:.2f}" + ("" if 0.8 <= ratio <= 1.25 else " (outside)")])
    print(f"model against measured, time per iteration in us; {cpu_name()}; calibrated: "
          + ", ".join(f"{key} fixed {value * 1e6:.1f} us" for key, value in here.fixed.items()))
    print("communication (model.communication_costs), us: " + "; ".join(
        f"{row['transport']} {row['ranks']} ranks {row['local']:,}: G {row['iallreduce_us']:.1f} (blocking "
        f"{row['blocking_us']:.1f}), o {row['allreduce_overhead_us']:.1f}, halo {row['halo_us']:.1f}"
        for row in rows if row["ranks"] > 1))
    print(markdown_table(["transport", "ranks", "unknowns/rank", "solver", "measured", "modelled", "modelled / measured"],
                         table))
    inside = sum(0.8 <= r <= 1.25 for r in ratios)
    print(f"modelled / measured within 0.8-1.25: {inside} of {len(ratios)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
