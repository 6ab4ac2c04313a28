"""Time per iteration: derived p-CG against our classic CG and PETSc's cg and pipecg.

    mpiexec -n 1 python -m benchmarks.pipelined [--n 1000] [--iterations 200]
    mpiexec -n 2 python -m benchmarks.pipelined

2D Poisson (n^2 unknowns), Jacobi preconditioner, a fixed number of iterations (rtol 0).
Our solvers run without and with an injected reduction latency L equal to the measured
SpMV time (a reduction never completes earlier than L after it starts); PETSc has no such
knob, so its rows are without.  The share of the latency hidden by p-CG is
1 - (t(L) - t(0)) / L per reduction (from the times; runs with and without L take turns);
the trace gives it directly as 1 - (extra time blocked in the wait) / L.  Classic CG pays
its two reductions in full.
"""
import argparse
import time

import numpy as np
from mpi4py import MPI

import pipekrylov as pk
from benchmarks.common import per_iteration, poisson_with_spmv_time, print_table


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    A, b, spmv = poisson_with_spmv_time(comm, args.n)
    pcg = pk.pipelined("cg")
    its = args.iterations

    rows, per, waits = [], {}, {}
    for name, solver in (("pipekrylov cg", pk.cg), ("pipekrylov p-cg (derived)", pcg)):
        for latency, (t, blocked) in per_iteration(comm, solver, A, b, its, args.repeat, (0.0, spmv)).items():
            per[(name, latency)], waits[(name, latency)] = t, blocked
            rows.append([name, f"{latency * 1e3:.2f}", f"{t * 1e3:.2f}", f"{blocked * 1e3:.2f}"])
    for ksp_type in ("cg", "pipecg"):
        t = petsc_time(comm, A, b, ksp_type, its, args.repeat)
        per[("petsc " + ksp_type, 0.0)] = t
        rows.append([f"PETSc {ksp_type}", "0", f"{t * 1e3:.2f}", "-"])
    if comm.rank == 0:
        print(f"2D Poisson {args.n}x{args.n}, Jacobi, {its} iterations, {comm.size} rank(s); "
              f"SpMV {spmv * 1e3:.2f} ms = injected latency L")
    print_table(comm, ["solver", "latency ms", "ms / iteration", "blocked ms / iteration"], rows)
    if comm.rank == 0:
        cg0, cgL = per[("pipekrylov cg", 0.0)], per[("pipekrylov cg", spmv)]
        p0, pL = per[("pipekrylov p-cg (derived)", 0.0)], per[("pipekrylov p-cg (derived)", spmv)]
        print(f"\nlatency hidden: p-cg {1 - (pL - p0) / spmv:.0%} of its one reduction; "
              f"cg {1 - (cgL - cg0) / (2 * spmv):.0%} of its two")
        name = "pipekrylov p-cg (derived)"
        print(f"by the trace (1 - extra time blocked / L): p-cg "
              f"{1 - (waits[(name, spmv)] - waits[(name, 0.0)]) / spmv:.0%}")
        print(f"p-cg / PETSc pipecg time per iteration (no latency): {p0 / per[('petsc pipecg', 0.0)]:.2f}")
        print(f"p-cg / our cg (no latency): {p0 / cg0:.2f};  with latency L: {pL / cgL:.2f}")


def petsc_time(comm, A, b, ksp_type, its, repeat):
    from pipekrylov.petsc import aij, make_ksp
    M = aij(A)
    ksp = make_ksp(M, ksp_type, "jacobi", rtol=0.0, max_it=its)
    ksp.setConvergenceTest(lambda *args: 0)  # run exactly `its` iterations
    bv, xv = M.createVecs()
    bv.array[:] = b
    best = np.inf
    for _ in range(repeat):
        xv.set(0.0)
        comm.Barrier()
        t0 = time.perf_counter()
        ksp.solve(bv, xv)
        best = min(best, comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
    return best / its


if __name__ == "__main__":
    main()
