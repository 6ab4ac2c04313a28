"""Latency hidden by p(l)-CG: an injected reduction latency of 1, 2 and 4 SpMV times.

    mpiexec -n 1 python -m benchmarks.deep_latency [--n 700] [--iterations 150]
    mpiexec -n 2 python -m benchmarks.deep_latency

2D Poisson (n^2 unknowns), Jacobi, a fixed number of iterations (rtol 0), shifts the
Chebyshev points of (0, 2), the interval of the Jacobi-scaled spectrum (no estimate to time;
an interval 10% too wide costs depth 4 a breakdown or the hand-over to p-CG within 150
iterations).  The runs that hand over are marked.
A reduction never completes earlier than L after it starts.  With t(L) the time per
iteration, the share of the latency hidden is 1 - (t(L) - t(0)) / L (p(l)-CG has one
reduction per iteration; classic CG's two are shown as 1 - (t(L) - t(0)) / 2L).  Since
p(l)-CG waits for a reduction l iterations after starting it, about l iterations' worth
of local work hides it: all of L once l * t(0) >= L.
"""
import argparse

from mpi4py import MPI

import pipekrylov as pk
from benchmarks.common import per_iteration, poisson_with_spmv_time, print_table


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=700)
    parser.add_argument("--iterations", type=int, default=150)
    parser.add_argument("--depths", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--factors", type=float, nargs="+", default=[1.0, 2.0, 4.0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    A, b, spmv = poisson_with_spmv_time(comm, args.n)
    its = args.iterations

    handed_over = set()

    def plcg(A, b, l, **kw):
        res = pk.plcg(A, b, depth=l, interval=(0.0, 2.0), **kw)
        if res.handed_over is not None:
            handed_over.add(f"p({l})-cg")
        return res

    solvers = {"cg": (pk.cg, 2)}
    for l in args.depths:
        solvers[f"p({l})-cg"] = (lambda A, b, l=l, **kw: plcg(A, b, l, **kw), 1)
    rows, hidden = [], {}
    for name, (solver, reductions) in solvers.items():
        times = per_iteration(comm, solver, A, b, its, args.repeat, [0.0] + [f * spmv for f in args.factors])
        t0 = times[0.0][0]
        cells = [name + (" (hands over to p-CG)" if name in handed_over else ""), f"{t0 * 1e3:.2f}"]
        for f in args.factors:
            L = f * spmv
            tL = times[L][0]
            hidden[(name, f)] = 1 - (tL - t0) / (reductions * L)
            cells += [f"{tL * 1e3:.2f}", f"{hidden[(name, f)]:.0%}"]
        rows.append(cells)
    if comm.rank == 0:
        print(f"2D Poisson {args.n}^2, Jacobi, {its} iterations, {comm.size} rank(s); "
              f"SpMV {spmv * 1e3:.2f} ms")
    head = ["method", "ms/it L=0"]
    for f in args.factors:
        head += [f"ms/it L={f:g} SpMV", "hidden"]
    print_table(comm, head, rows)


if __name__ == "__main__":
    main()
