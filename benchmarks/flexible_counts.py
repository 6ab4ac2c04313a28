"""Pipelined flexible CG's iterations against PETSc's pipefcg, under a preconditioner that
changes: block Jacobi, each rank's block solved by k Jacobi-CG steps.

    mpiexec -n 2 python -m benchmarks.flexible_counts
    python -m benchmarks.flexible_counts --spread 6      # rounding's share, one rank

2D Poisson on a 40 x 40 grid, b = 1, rtol 1e-8 (PETSc's with its unpreconditioned norm),
at k = 2 and 8 and four window settings.  Per row, the iterations of PETSc's pipefcg, of
ours under PETSc's PC (its sub-KSP, applied through PCApply) and of ours under
``M="bjacobi-cg(k)"``; "stagnates" where 3,000 iterations did not converge.  With
``--spread N``: the iterations of PETSc's pipefcg, ours and PETSc's fcg for b perturbed
by N different 1e-13 relative perturbations (the first unperturbed).
"""
import argparse

import numpy as np
from mpi4py import MPI

import pipekrylov as pk

SETTINGS = [(15, "notay"), (1, "standard"), (3, "standard"), (15, "standard")]
MAXIT = 3000


def inner_cg(k):
    return [("sub_ksp_type", "cg"), ("sub_pc_type", "jacobi"), ("sub_ksp_max_it", k), ("sub_ksp_rtol", 1e-30),
            ("sub_ksp_convergence_test", "skip")]


def petsc_count(M, kind, k, b, mmax=15, truncation="notay"):
    import pipekrylov.petsc as pkp
    kind = pkp.PipeFCG if kind == "ours" else kind
    options = inner_cg(k) + [("ksp_pipefcg_mmax", mmax), ("ksp_pipefcg_truncation_type", truncation)]
    ksp = pkp.make_ksp(M, kind, "bjacobi", max_it=MAXIT, unpreconditioned=isinstance(kind, str), options=options)
    its, reason, _ = pkp.run_ksp(ksp, b)
    ksp.destroy()
    return its if reason > 0 else None


def shown(its):
    return "stagnates" if its is None else str(its)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spread", type=int, default=0)
    args = parser.parse_args()
    import pipekrylov.petsc as pkp      # PETSc's pipefcg is the reference: petsc4py needed
    comm = MPI.COMM_WORLD
    A = pk.poisson2d(comm, 40)
    M = pkp.aij(A)
    ones = np.ones(A.partition.nlocal)
    if args.spread:
        rows = []
        for k in (2, 4):
            counts = {"PETSc pipefcg": [], "p-fcg": [], "PETSc fcg": []}
            for seed in range(args.spread):
                noise = np.random.default_rng(seed).standard_normal(A.partition.n)[A.partition.start:A.partition.end]
                b = ones + (1e-13 * noise if seed else 0.0)
                counts["PETSc pipefcg"].append(shown(petsc_count(M, "pipefcg", k, b)))
                counts["p-fcg"].append(shown(petsc_count(M, "ours", k, b)))
                counts["PETSc fcg"].append(shown(petsc_count(M, "fcg", k, b)))
            rows += [f"| {k} | {name} | {', '.join(c)} |" for name, c in counts.items()]
        if comm.rank == 0:
            print(f"{comm.size} rank(s), iterations for {args.spread} right-hand sides\n| k | method | iterations |\n"
                  "|---|---|---|\n" + "\n".join(rows))
        return 0
    rows = []
    for k in (2, 8):
        for mmax, truncation in SETTINGS:
            theirs = petsc_count(M, "pipefcg", k, 1.0, mmax, truncation)
            ours = petsc_count(M, "ours", k, 1.0, mmax, truncation)
            native = pk.pipefcg(A, ones, rtol=1e-8, M=f"bjacobi-cg({k})", mmax=mmax, truncation=truncation,
                                maxiter=MAXIT)
            rows.append(f"| {comm.size} | {k} | {mmax}, {truncation} | {shown(theirs)} | {shown(ours)} | "
                        f"{shown(native.iterations if native.info == 0 else None)} |")
    if comm.rank == 0:
        print("| ranks | k | mmax, truncation | PETSc pipefcg | ours, PETSc's PC | ours, native |\n"
              "|---|---|---|---|---|---|\n" + "\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
