"""Iterations to rtol 1e-8 of p(l)-CG (l = 1..5) beside CG and PETSc's pipelcg.

    python -m benchmarks.deep_counts [--depths 1 2 3 4 5] [--petsc] [--fallback-depth N|none]
                                     [--drift-tol T|none]

Serial; b = A * ones; the generators without a preconditioner, the SPD matrices of
tests/data with Jacobi.  Prints, per problem: CG's iterations; ours with automatic
shifts (restarts in parentheses, and the iteration from which derived p-CG went on when
the drift check handed over; '-' if it did not reach 1e-8 in 20x CG's iterations;
after a breakdown ours restarts at ``--fallback-depth``, default 1, ``none``: the same depth);
with ``--petsc`` also PETSc's pipelcg at the same depths with its default lmin = lmax = 0
(the monomial basis).
"""
import argparse

import numpy as np
from mpi4py import MPI

import pipekrylov as pk
from pipekrylov.deep import plcg

from benchmarks.matrices import SPD, load


def problems():
    comm = MPI.COMM_SELF
    yield "poisson2d 100^2", pk.poisson2d(comm, 100).to_scipy(), None
    yield "poisson3d 20^3", pk.poisson3d(comm, 20).to_scipy(), None
    yield "anisotropic2d 60^2", pk.anisotropic2d(comm, 60).to_scipy(), None
    for name in SPD:
        yield name, load(name), "jacobi"


def petsc_pipelcg(A, b, depth, pc, maxiter):
    from pipekrylov.petsc import make_ksp, run_ksp
    ksp = make_ksp(A, "pipelcg", pc or "none", max_it=maxiter, options=[("ksp_pipelcg_pipel", depth)])
    its, reason, x = run_ksp(ksp, b)
    return its, reason > 0, np.linalg.norm(b - A @ x) / np.linalg.norm(b)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--petsc", action="store_true")
    parser.add_argument("--fallback-depth", default="1", help="plcg's fallback_depth (a number or 'none')")
    parser.add_argument("--drift-tol", default="1e-11", help="plcg's drift_tol (a number or 'none')")
    args = parser.parse_args()
    fallback = None if args.fallback_depth == "none" else int(args.fallback_depth)
    drift_tol = None if args.drift_tol == "none" else float(args.drift_tol)
    comm = MPI.COMM_SELF
    head = ["problem", "CG"] + [f"p({l})-CG" for l in args.depths]
    if args.petsc:
        head += [f"pipelcg l={l}" for l in args.depths]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name, A, pc in problems():
        b = A @ np.ones(A.shape[0])
        base = pk.cg(A, b, rtol=1e-8, M=pc, maxiter=30000, comm=comm).iterations
        cells = [name, str(base)]
        for l in args.depths:
            r = plcg(A, b, depth=l, rtol=1e-8, M=pc, maxiter=20 * base, comm=comm, fallback_depth=fallback,
                     drift_tol=drift_tol)
            handed = "" if r.handed_over is None else f", p-CG from {r.handed_over}"
            cells.append(f"{r.iterations} ({r.restarts}{handed})" if r.info == 0 else "-")
        if args.petsc:
            for l in args.depths:
                its, ok, true = petsc_pipelcg(A, b, l, pc, 20 * base)
                cells.append(f"{its}" if ok and true < 1e-6 else f"{'stalls' if not ok else 'wrong'} ({true:.0e})")
        print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
