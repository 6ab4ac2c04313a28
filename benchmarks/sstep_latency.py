"""s-step CG against CG, p-CG and p(2)-CG, and s-step GMRES against GMRES and p(1)-GMRES,
under an injected reduction latency.

    mpiexec -n 2 python -m benchmarks.sstep_latency
    mpiexec -n 2 python -m benchmarks.sstep_latency --local 1024 4096 --latencies 0 50 100 200
    mpiexec -n 2 python -m benchmarks.sstep_latency --gmres
    mpiexec -n 2 python -m benchmarks.sstep_latency --flexible   # p-FCG and p-GCR instead of s-step

2D Poisson with ``--local`` unknowns per rank, Jacobi, every method on a Solver set up
once (set-up not timed), then whole solves of a fixed number of iterations (rtol 0:
no early stop), the best of ``--repeat`` rounds, the methods interleaved in each round.
A solve's time per iteration (divided by the iterations it made: on the smallest grids
rtol 0 stops at rounding before ``--iterations``) includes its fixed part (the first
residual, the confirmation, a block's start), not subtracted.  p(2)-CG's shifts are given (the interval
(0, 2) holds the Jacobi-scaled spectrum): its estimate is not timed.  s-step's estimate
of lambda_max is made in the untimed first solve and kept, as a Solver keeps it.
A reduction never completes earlier than L after it starts.  Printed: time per iteration
(us) and each against p-CG's.

With ``--gmres``: 2D convection-diffusion (the default wind), Jacobi, GMRES(30) (DCGS2),
p(1)-GMRES(30) and s-step GMRES(30) at s = 4 and 8, each solve to rtol 1e-8 (time to
solution; the iterations, the same for all but rounding, are printed).  The first solve
of each Solver is not timed: s-step's shifts, estimated there, are kept, as a Solver
keeps them; p(1)-GMRES's default estimate runs in every solve.  Printed: time to
solution (ms) and each against p(1)-GMRES's.
"""
import argparse

import numpy as np
from mpi4py import MPI

import pipekrylov as pk
from benchmarks.common import best_times, cpu_name, print_table

METHODS = {"cg": ("cg", {}), "p-cg": ("p-cg", {}), "p(2)-cg": ("p(2)-cg", {"interval": (0.0, 2.0)}),
           "s(4)-cg": ("s-cg", {"s": 4}), "s(8)-cg": ("s-cg", {"s": 8})}


FLEXIBLE_METHODS = {"cg": ("cg", {}), "p-cg": ("p-cg", {}), "p-fcg": ("p-fcg", {}), "p-gcr": ("p-gcr", {})}
GMRES_METHODS = {"gmres": ("gmres", {}), "p(1)-gmres": ("p(1)-gmres", {}), "s(4)-gmres": ("s-gmres", {"s": 4}),
                 "s(8)-gmres": ("s-gmres", {"s": 8})}


def gmres_main(args, comm):
    rows = []
    for local in args.local:
        nx = int(round(np.sqrt(local * comm.size)))
        A = pk.convection_diffusion2d(comm, nx)
        b = A.matvec(np.ones(A.partition.nlocal))
        for latency in args.latencies:
            solvers = {name: pk.Solver(A, method, M="jacobi", latency=latency * 1e-6, **options)
                       for name, (method, options) in GMRES_METHODS.items()}
            its = {name: s.solve(b, rtol=1e-8, maxiter=10000).iterations for name, s in solvers.items()}
            funcs = {name: (lambda s: lambda: s.solve(b, rtol=1e-8, maxiter=10000))(s) for name, s in solvers.items()}
            best = best_times(comm, funcs, args.repeat)
            ms = {name: best[name] * 1e3 for name in GMRES_METHODS}
            rows.append([f"{nx * nx // comm.size:,}", f"{latency:g}"] +
                        [f"{ms[n]:.1f} ({its[n]})" for n in GMRES_METHODS] +
                        [f"{ms[n] / ms['p(1)-gmres']:.2f}" for n in GMRES_METHODS if n != "p(1)-gmres"])
    if comm.rank == 0:
        print(f"time to solution (ms) and iterations, rtol 1e-8, 2D convection-diffusion, Jacobi, GMRES(30), "
              f"{comm.size} rank(s); {cpu_name()}")
    head = ["unknowns/rank", "latency (us)"] + list(GMRES_METHODS) + \
        [f"{n} / p(1)-gmres" for n in GMRES_METHODS if n != "p(1)-gmres"]
    print_table(comm, head, rows)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local", type=int, nargs="+", default=[4096])
    parser.add_argument("--latencies", type=float, nargs="+", default=[0, 50, 100, 200], help="microseconds")
    parser.add_argument("--iterations", type=int, default=120)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--gmres", action="store_true", help="s-step GMRES against GMRES and p(1)-GMRES")
    parser.add_argument("--flexible", action="store_true", help="p-FCG and p-GCR (mmax 15) in place of s-step CG")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    if args.gmres:
        return gmres_main(args, comm)
    methods = FLEXIBLE_METHODS if args.flexible else METHODS
    rows = []
    for local in args.local:
        nx = int(round(np.sqrt(local * comm.size)))
        A = pk.poisson2d(comm, nx)
        b = A.matvec(np.ones(A.partition.nlocal))
        for latency in args.latencies:
            solvers = {name: pk.Solver(A, method, M="jacobi", latency=latency * 1e-6, **options)
                       for name, (method, options) in methods.items()}
            funcs = {name: (lambda s: lambda: s.solve(b, rtol=0.0, maxiter=args.iterations))(s)
                     for name, s in solvers.items()}
            best = best_times(comm, funcs, args.repeat)
            # a solve may stop before maxiter where rtol 0 meets rounding: its own count
            its = {name: s.solve(b, rtol=0.0, maxiter=args.iterations).iterations for name, s in solvers.items()}
            per = {name: best[name] / its[name] * 1e6 for name in methods}
            rows.append([f"{nx * nx // comm.size:,}", f"{latency:g}"] + [f"{per[n]:.1f}" for n in methods] +
                        [f"{per[n] / per['p-cg']:.2f}" for n in methods if n != "p-cg"])
    if comm.rank == 0:
        print(f"time per iteration (us), 2D Poisson, Jacobi, {comm.size} rank(s), {args.iterations} iterations "
              f"per solve; {cpu_name()}")
    head = ["unknowns/rank", "latency (us)"] + list(methods) + [f"{n} / p-cg" for n in methods if n != "p-cg"]
    print_table(comm, head, rows)


if __name__ == "__main__":
    main()
