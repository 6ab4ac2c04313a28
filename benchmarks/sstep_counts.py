"""s-step CG's iterations and attainable accuracy against classic CG and p-CG.

    python -m benchmarks.sstep_counts            # Jacobi (the default)
    python -m benchmarks.sstep_counts --pc none

Serial, b = A * ones, on the six SuiteSparse SPD matrices of tests/data and the three
symmetric generators.  Per matrix: the iterations to rtol 1e-8 of CG, derived p-CG and
s-step CG at s = 2, 4, 6, 8, 10, with s-step's blocks ended early (loss of rank) and
restarts from ``b - A x`` (a convergence ``b - A x`` did not confirm) where there were
any; then the attainable accuracy: the true relative residual ``||b - A x|| / ||b||``
after a solve to rtol 1e-14 with three times CG's iterations to 1e-8 as budget.
"""
import argparse

import numpy as np
from mpi4py import MPI

import pipekrylov as pk

from benchmarks.matrices import SPD, load

S_VALUES = (2, 4, 6, 8, 10)


def problems():
    for name in SPD:
        yield name, load(name)
    for name, make in (("poisson2d", pk.poisson2d), ("poisson3d", pk.poisson3d), ("anisotropic2d", pk.anisotropic2d)):
        A = make(MPI.COMM_SELF, 40 if name != "poisson3d" else 12)
        yield name, A.to_scipy()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pc", choices=["jacobi", "none"], default="jacobi")
    args = parser.parse_args()
    M = None if args.pc == "none" else args.pc
    kw = dict(comm=MPI.COMM_SELF, M=M)
    solvers = [("cg", pk.cg), ("p-cg", pk.pipelined("cg"))] + \
        [(f"s = {s}", lambda A, b, s=s, **k: pk.sstep_cg(A, b, s=s, **k)) for s in S_VALUES]
    names = [n for n, _ in solvers]
    print(f"iterations to rtol 1e-8, M = {args.pc} (s-step: blocks ended early / restarts from b - A x, where any)")
    print("| matrix | n | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    accuracy = []
    for name, A in problems():
        b = A @ np.ones(A.shape[0])
        true = lambda x: np.linalg.norm(b - A @ x) / np.linalg.norm(b)  # noqa: E731
        cells, reached = [], []
        budget = 3 * pk.cg(A, b, rtol=1e-8, maxiter=30000, **kw).iterations
        for label, solve in solvers:
            res = solve(A, b, rtol=1e-8, maxiter=30000, **kw)
            extra = f" ({res.short_blocks}/{res.replacements})" if label.startswith("s") and \
                (res.short_blocks or res.replacements) else ""
            cells.append(f"{res.iterations}{extra}" if res.info == 0 else f"- ({res.reason})")
            reached.append(true(solve(A, b, rtol=1e-14, maxiter=budget, **kw).x))
        print(f"| {name} | {A.shape[0]:,} | " + " | ".join(cells) + " |", flush=True)
        accuracy.append((name, reached))
    print("\nattainable accuracy: ||b - A x|| / ||b|| after rtol 1e-14, budget 3 x CG's iterations to 1e-8")
    print("| matrix | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for name, reached in accuracy:
        print(f"| {name} | " + " | ".join(f"{r:.1e}" for r in reached) + " |")


if __name__ == "__main__":
    main()
