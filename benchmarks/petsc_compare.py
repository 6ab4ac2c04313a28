"""One problem through PETSc's KSPs and pipekrylov's counterparts, in one table.

    mpiexec -n 1 python benchmarks/petsc_compare.py [--n 1000]
    mpiexec -n 2 python benchmarks/petsc_compare.py

2D Poisson (n^2 unknowns), Jacobi PC, rtol 1e-8, unpreconditioned residual norm for
PETSc (as pipekrylov tests it).  Ours run as PETSc KSPs (-ksp_type python), on the same
Mat, Vecs and PC.  Columns: iterations, true relative residual, time per iteration, and
the converged reason (negative: diverged; PETSc's pipelcg, depth 2 here with its default
monomial basis, can be).
"""
import argparse
import time

import numpy as np
from mpi4py import MPI
from petsc4py import PETSc

import pipekrylov as pk
import pipekrylov.petsc as pkp
from common import print_table

PAIRS = [("cg", pkp.CG), ("pipecg", pkp.PipeCG), ("pipecgrr", None), ("pipelcg", None),
         ("bcgs", pkp.BiCGStab), ("pipebcgs", pkp.PipeBiCGStab), ("gmres", pkp.GMRES), ("pgmres", None)]


def run(A, b, ksp_type, context):
    comm = A.getComm()
    ksp = PETSc.KSP().create(comm)
    ksp.setOperators(A)
    if context is None:
        ksp.setType(ksp_type)
        if ksp_type in ("cg", "pipecg", "pipecgrr", "bcgs", "pipebcgs"):
            ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)  # others: their default
        if "bcgs" in ksp_type or "gmres" in ksp_type:
            ksp.setPCSide(PETSc.PC.Side.RIGHT)
        if ksp_type == "pipelcg":  # depth 2, shifts left at PETSc's default (0: monomial basis)
            ksp.setOptionsPrefix("bench_")
            PETSc.Options().setValue("-bench_ksp_pipelcg_pipel", 2)
            ksp.setFromOptions()
    else:
        ksp.setType("python")
        ctx = context()
        ksp.setPythonContext(ctx)
    ksp.getPC().setType("jacobi")
    ksp.setTolerances(rtol=1e-8, max_it=20000)
    x = b.duplicate()
    ksp.setUp()
    comm.tompi4py().Barrier()
    t0 = time.perf_counter()
    ksp.solve(b, x)
    elapsed = comm.tompi4py().allreduce(time.perf_counter() - t0, op=MPI.MAX)
    its = max(ksp.getIterationNumber(), 1)
    r = b.duplicate()
    A.mult(x, r)
    r.aypx(-1.0, b)
    true = r.norm() / b.norm()
    reason = int(ksp.getConvergedReason())
    ksp.destroy()
    return its, reason, true, elapsed / its


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1000)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    D = pk.poisson2d(comm, args.n)
    rows, p = D.to_scipy(), D.partition
    A = PETSc.Mat().createAIJ(((p.nlocal, D.shape[0]), (p.nlocal, D.shape[0])),
                              csr=(rows.indptr.astype(PETSc.IntType), rows.indices.astype(PETSc.IntType),
                                   rows.data), comm=PETSc.COMM_WORLD)
    b = A.createVecRight()
    b.set(1.0)
    table = []
    for ksp_type, context in PAIRS:
        for name, ctx in [(f"PETSc {ksp_type}", None)] + \
                ([(f"pipekrylov.petsc.{context.__name__}", context)] if context else []):
            its, reason, true, per = run(A, b, ksp_type, ctx)
            table.append([name, its, reason, f"{true:.1e}", f"{per * 1e3:.2f}"])
    if comm.rank == 0:
        print(f"2D Poisson {args.n}x{args.n}, Jacobi, rtol 1e-8, {comm.size} rank(s)")
    print_table(comm, ["KSP", "iterations", "reason", "true rel. residual", "ms / iteration"], table)


if __name__ == "__main__":
    main()
