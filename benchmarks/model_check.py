"""The performance model against measured runs, in one go.

    .venv/bin/python -m benchmarks.model_check [--problem poisson2d:500]

Calibrates the model on this machine (pipekrylov.model.calibrate), then solves with cg
and p-cg on 1 and 2 ranks with an injected reduction latency L of 0, 1, 2 and 4 times the
modelled SpMV+PC time; the model gets G = L.
Prints measured and modelled time per iteration and their ratio.
"""
import argparse
import dataclasses
import os
import sys
import tempfile

from mpi4py import MPI

from pipekrylov import model
from pipekrylov.problems import problem_size
from pipekrylov.scaling import collect, run_series


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", default="poisson2d:500")
    args = parser.parse_args()
    here = model.calibrate(MPI.COMM_SELF)
    n, nnz = problem_size(args.problem)
    work = here.spmv_per_nnz * nnz + 3 * here.vector_per_entry * n
    print(f"calibrated: SpMV {here.spmv_per_nnz * 1e9:.2f} ns/nonzero, vectors "
          f"{here.vector_per_entry * 1e9:.3f} ns/entry; SpMV+PC on 1 rank {work * 1e3:.3f} ms")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", NUMBA_NUM_THREADS="1")
    print(f"{'method':6s} {'ranks':>5s} {'L/(S+M)':>8s} {'measured ms':>12s} {'model ms':>9s} {'ratio':>6s}")
    for factor in (0, 1, 2, 4):
        latency = factor * work
        with tempfile.TemporaryDirectory() as out:
            records = run_series([1, 2], ["cg", "p-cg"], ["--problem", args.problem, "--pc", "jacobi",
                                 "--latency", str(latency), "--maxiter", "200", "--rtol", "0"],
                                 out, env=env, stream=open(os.devnull, "w"))
        machine = InjectedLatency(**dataclasses.asdict(here), latency=latency)
        for row in collect(records):
            predicted = model.time_per_iteration(row["method"], machine, n, nnz, row["ranks"])
            print(f"{row['method']:6s} {row['ranks']:5d} {factor:8d} {row['time_per_iteration'] * 1e3:12.3f} "
                  f"{predicted * 1e3:9.3f} {row['time_per_iteration'] / predicted:6.2f}", flush=True)


@dataclasses.dataclass(frozen=True)
class InjectedLatency(model.Machine):
    """The calibrated machine whose every reduction takes the injected latency (the
    solvers inject it at any rank count; this machine's own Allreduce is a microsecond)."""
    latency: float = 0.0

    def reduction(self, ranks):
        return self.latency


if __name__ == "__main__":
    sys.exit(main())
