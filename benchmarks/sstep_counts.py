"""s-step CG's iterations and attainable accuracy against classic CG and p-CG, and s-step
GMRES's against GMRES and p(1)-GMRES.

    python -m benchmarks.sstep_counts            # Jacobi (the default)
    python -m benchmarks.sstep_counts --pc none
    python -m benchmarks.sstep_counts --gmres    # GMRES(30) on the nonsymmetric matrices

Serial, b = A * ones, on the six SuiteSparse SPD matrices of tests/data and the three
symmetric generators.  Per matrix: the iterations to rtol 1e-8 of CG, derived p-CG and
s-step CG at s = 2, 4, 6, 8, 10, with s-step's blocks ended early (loss of rank) and
restarts from ``b - A x`` (a convergence ``b - A x`` did not confirm) where there were
any; then the attainable accuracy: the true relative residual ``||b - A x|| / ||b||``
after a solve to rtol 1e-14 with three times CG's iterations to 1e-8 as budget.

With ``--gmres``: the four nonsymmetric SuiteSparse matrices and two convection-diffusion
generators, GMRES(30) (DCGS2), p(1)-GMRES(30) and s-step GMRES(30) at s = 2, 4, 6, 8, 10,
with s-step's short blocks and second passes where there were any; the budget of the
accuracy runs is three times GMRES's iterations.
"""
import argparse

import numpy as np
from mpi4py import MPI

import pipekrylov as pk

from benchmarks.matrices import NONSYMMETRIC, SPD, load

S_VALUES = (2, 4, 6, 8, 10)


def problems():
    for name in SPD:
        yield name, load(name)
    for name, make in (("poisson2d", pk.poisson2d), ("poisson3d", pk.poisson3d), ("anisotropic2d", pk.anisotropic2d)):
        A = make(MPI.COMM_SELF, 40 if name != "poisson3d" else 12)
        yield name, A.to_scipy()


def nonsymmetric_problems():
    for name in NONSYMMETRIC:
        yield name, load(name)
    for wind in ((20.0, 10.0), (200.0, 100.0)):
        yield f"convection-diffusion {wind[0]:g}", pk.convection_diffusion2d(MPI.COMM_SELF, 40, wind=wind).to_scipy()


def tables(title, problems, solvers, base, maxiter, notes, kw):
    """The iterations table (``notes(res)``: the s-step counts in brackets) and the
    attainable accuracy table, the accuracy runs' budget three times ``base``'s
    iterations to 1e-8 (``maxiter`` in ``base``'s units)."""
    names = [n for n, _ in solvers]
    print(title)
    print("| matrix | n | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    accuracy = []
    for name, A in problems:
        b = A @ np.ones(A.shape[0])
        true = lambda x: np.linalg.norm(b - A @ x) / np.linalg.norm(b)  # noqa: E731
        cells, reached = [], []
        budget = base(A, b, maxiter)
        for label, solve in solvers:
            res = solve(A, b, rtol=1e-8, maxiter=maxiter, **kw)
            extra = notes(res) if label.startswith("s") else ""
            cells.append(f"{res.iterations}{extra}" if res.info == 0 else f"- ({res.reason})")
            reached.append(true(solve(A, b, rtol=1e-14, maxiter=budget, **kw).x))
        print(f"| {name} | {A.shape[0]:,} | " + " | ".join(cells) + " |", flush=True)
        accuracy.append((name, reached))
    print(f"\nattainable accuracy: ||b - A x|| / ||b|| after rtol 1e-14, budget 3 x {names[0]}'s iterations to 1e-8")
    print("| matrix | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for name, reached in accuracy:
        print(f"| {name} | " + " | ".join(f"{r:.1e}" for r in reached) + " |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pc", choices=["jacobi", "none"], default="jacobi")
    parser.add_argument("--gmres", action="store_true", help="s-step GMRES on the nonsymmetric matrices")
    args = parser.parse_args()
    kw = dict(comm=MPI.COMM_SELF, M=None if args.pc == "none" else args.pc)
    if args.gmres:
        kw["callback_type"] = "x"
        solvers = [("gmres", pk.gmres), ("p(1)-gmres", pk.pipelined("gmres", 1))] + \
            [(f"s = {s}", lambda A, b, s=s, **k: pk.sstep_gmres(A, b, s=s, **k)) for s in S_VALUES]
        tables(f"GMRES(30): iterations to rtol 1e-8, M = {args.pc} (s-step: short blocks / second passes, "
               "where any)", nonsymmetric_problems(), solvers,
               lambda A, b, cycles: max(1, 3 * pk.gmres(A, b, rtol=1e-8, maxiter=cycles, **kw).iterations // 30),
               1000, lambda r: f" ({r.short_blocks}/{r.second_passes})" if r.short_blocks or r.second_passes else "",
               kw)
        return
    solvers = [("cg", pk.cg), ("p-cg", pk.pipelined("cg"))] + \
        [(f"s = {s}", lambda A, b, s=s, **k: pk.sstep_cg(A, b, s=s, **k)) for s in S_VALUES]
    tables(f"iterations to rtol 1e-8, M = {args.pc} (s-step: blocks ended early / restarts from b - A x, "
           "where any)", problems(), solvers,
           lambda A, b, its: 3 * pk.cg(A, b, rtol=1e-8, maxiter=its, **kw).iterations,
           30000, lambda r: f" ({r.short_blocks}/{r.replacements})" if r.short_blocks or r.replacements else "", kw)


if __name__ == "__main__":
    main()
