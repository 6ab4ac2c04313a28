"""Iterations to rtol 1e-8 of the derived methods, their base methods and PETSc's pipelined KSPs.

    python -m benchmarks.derived_counts [--pc jacobi]             # iteration counts
    python -m benchmarks.derived_counts --accuracy [--pc jacobi]  # attainable accuracy


Serial, no preconditioner (or --pc jacobi), b = A * ones, on the real matrices
(tests/data).  Prints, per
matrix and method: the classic method's iterations; the derived pipelined method's without
and with automatic residual replacement (and how many replacements); PETSc's pipelined
counterpart (pipecg, groppcg, pipeprcg, pipecr, pipebcgs); and the true relative residuals at the end.
Gropp's CG ("cg-gropp") and predict-and-recompute CG ("cg-pr") are forms of CG: their
classic column is CG's.
"""
import argparse

import numpy as np
from mpi4py import MPI

import pipekrylov as pk

from benchmarks.matrices import NONSYMMETRIC, SPD, load

PETSC = {"cg": "pipecg", "cg-gropp": "groppcg", "cg-pr": "pipeprcg", "cr": "pipecr", "bicgstab": "pipebcgs"}


def classic(method):
    """The classic solver of a base method (the forms of CG are CG)."""
    return getattr(pk, "cg" if method.startswith("cg-") else method)


def petsc_solve(A, b, ksp_type, pc):
    from pipekrylov.petsc import make_ksp, run_ksp
    ksp = make_ksp(A, ksp_type, pc or "none", max_it=30000, unpreconditioned=ksp_type != "pipecr")
    its, _, x = run_ksp(ksp, b)
    return its, x


def accuracy(pc):
    """Solve to rtol 1e-10 with three times the classic iterations to 1e-8 as budget."""
    kw = dict(comm=MPI.COMM_SELF, M=pc)
    print("| matrix | method | classic | derived | derived + replacement (replacements) |")
    print("|---|---|---|---|---|")
    for method, name in [("cg", "494_bus"), ("cg", "1138_bus"), ("cg", "bcsstk15"), ("cg-gropp", "494_bus"),
                         ("cg-gropp", "1138_bus"), ("cg-gropp", "bcsstk15"),
                         ("cg-pr", "494_bus"), ("cg-pr", "1138_bus"), ("cg-pr", "bcsstk15"),
                         ("cr", "bcsstk15"), ("bicgstab", "orsirr_1"), ("bicgstab", "1138_bus"),
                         ("bicgstab", "bcsstk15")]:
        A = load(name)
        b = A @ np.ones(A.shape[0])
        true = lambda x: np.linalg.norm(b - A @ x) / np.linalg.norm(b)  # noqa: E731
        budget = 3 * classic(method)(A, b, rtol=1e-8, maxiter=30000, **kw).iterations
        runs = [classic(method)(A, b, rtol=1e-10, maxiter=budget, **kw),
                pk.pipelined(method)(A, b, rtol=1e-10, maxiter=budget, **kw),
                pk.pipelined(method, replace_automatic=True)(A, b, rtol=1e-10, maxiter=budget, **kw)]
        print(f"| {name} | {method} | {true(runs[0].x):.1e} | {true(runs[1].x):.1e} | "
              f"{true(runs[2].x):.1e} ({runs[2].replacements}{'' if runs[2].info == 0 else ', ' + runs[2].reason}) |",
              flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--accuracy", action="store_true")
    parser.add_argument("--pc", choices=["jacobi"], default=None)
    args = parser.parse_args()
    if args.accuracy:
        return accuracy(args.pc)
    kw = dict(rtol=1e-8, maxiter=30000, comm=MPI.COMM_SELF, M=args.pc)
    print("| matrix | method | classic | derived | derived + RR (replacements) | PETSc | "
          "true residual: classic / derived / derived + RR / PETSc |")
    print("|---|---|---|---|---|---|---|")
    for name in SPD + NONSYMMETRIC:
        A = load(name)
        b = A @ np.ones(A.shape[0])
        true = lambda x: np.linalg.norm(b - A @ x) / np.linalg.norm(b)  # noqa: E731
        for method in (["cg", "cg-gropp", "cg-pr", "cr"] if name in SPD else []) + ["bicgstab"]:
            base = classic(method)(A, b, **kw)
            if base.info != 0:
                continue
            derived = pk.pipelined(method)(A, b, **kw)
            rr = pk.pipelined(method, replace_automatic=True)(A, b, **kw)
            its, x = petsc_solve(A, b, PETSC[method], args.pc)
            print(f"| {name} | {method} | {base.iterations} | {derived.iterations} | "
                  f"{rr.iterations} ({rr.replacements}) | {its} | {true(base.x):.0e} / "
                  f"{true(derived.x):.0e} / {true(rr.x):.0e} / {true(x):.0e} |", flush=True)


if __name__ == "__main__":
    main()
