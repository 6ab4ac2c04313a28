"""pipekrylov's solvers as PETSc KSP types, driven from petsc4py (issue 6, in progress)."""
import numpy as np
import pytest

PETSc = pytest.importorskip("petsc4py.PETSc")
import pipekrylov as pk  # noqa: E402
import pipekrylov.petsc as pkp  # noqa: E402


def petsc_poisson(comm, n):
    D = pk.poisson2d(comm, n)
    rows = D.to_scipy()
    p = D.partition
    return PETSc.Mat().createAIJ(((p.nlocal, n * n), (p.nlocal, n * n)),
                                 csr=(rows.indptr.astype(PETSc.IntType), rows.indices.astype(PETSc.IntType),
                                      rows.data), comm=comm)


def solve(A, ksp_type, context=None, pc="jacobi"):
    ksp = PETSc.KSP().create(A.getComm())
    ksp.setOperators(A)
    if context is None:
        ksp.setType(ksp_type)
        ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)
        if "bcgs" in ksp_type:  # ours is right preconditioned, as scipy's
            ksp.setPCSide(PETSc.PC.Side.RIGHT)
    else:
        ksp.setType("python")
        ksp.setPythonContext(context())
    ksp.getPC().setType(pc)
    ksp.setTolerances(rtol=1e-8)
    b, x = A.createVecs()
    b.set(1.0)
    ksp.solve(b, x)
    r = b.duplicate()
    A.mult(x, r)
    r.aypx(-1.0, b)
    out = ksp.getIterationNumber(), int(ksp.getConvergedReason()), x.getArray().copy(), r.norm() / b.norm()
    ksp.destroy()
    return out


CASES = [("pipecg", pkp.PipeCG), ("cg", pkp.CG), ("pipebcgs", pkp.PipeBiCGStab), ("bcgs", pkp.BiCGStab)]


@pytest.mark.mpi
@pytest.mark.parametrize("pc", ["jacobi", "bjacobi"])
@pytest.mark.parametrize("theirs,ours", CASES, ids=[c[0] for c in CASES])
def test_same_solution_and_iterations_as_petsc(comm, theirs, ours, pc):
    A = petsc_poisson(comm, 30)
    its_p, reason_p, x_p, res_p = solve(A, theirs, pc=pc)
    its, reason, x, res = solve(A, None, ours, pc=pc)
    assert reason > 0 and reason_p > 0
    # 5%, but at least 3 iterations: BiCGStab variants place their early exit differently
    assert abs(its - its_p) <= max(3, 0.05 * its_p), (its, its_p)
    assert res < 1e-8 * 1.01
    diff = np.sqrt(comm.allreduce(float(np.sum((x - x_p) ** 2))))
    assert diff <= 1e-6 * np.sqrt(comm.allreduce(float(np.sum(x_p ** 2))))


@pytest.mark.mpi
def test_breakdown_is_a_negative_reason_not_a_traceback(comm):
    n = 40
    start, end = n * comm.rank // comm.size, n * (comm.rank + 1) // comm.size
    A = PETSc.Mat().createAIJ(((end - start, n), (end - start, n)), comm=comm)
    A.setUp()
    for i in range(start, end):
        A[i, i] = (i + 1.0) * (1 if i < n // 2 else -1)  # indefinite
    A.assemble()
    its, reason, _, _ = solve(A, None, pkp.PipeCG, pc="none")
    assert reason == int(PETSc.KSP.ConvergedReason.DIVERGED_INDEFINITE_MAT)


@pytest.mark.mpi
@pytest.mark.parametrize("context,depth", [(pkp.PipeLCG, 3), (pkp.PipeLGMRES, 2)])
def test_deep_contexts_solve_with_petsc_pcs_and_show_their_depth(comm, context, depth):
    """p(l)-CG / p(l)-GMRES as KSP types: PETSc's jacobi PC, -ksp_pipekrylov_depth, and
    the same iterations as PETSc's cg / gmres within 10% (their convergence tests differ
    in the norm: natural for p(l)-CG, unpreconditioned for right-preconditioned GMRES)."""
    A = petsc_poisson(comm, 30)
    opts = PETSc.Options()
    opts["ksp_pipekrylov_depth"] = depth
    ksp = PETSc.KSP().create(comm)
    ksp.setOperators(A)
    ksp.setType("python")
    ksp.setPythonContext(context())
    ksp.getPC().setType("jacobi")
    ksp.setTolerances(rtol=1e-8)
    ksp.setFromOptions()
    del opts["ksp_pipekrylov_depth"]
    b, x = A.createVecs()
    b.set(1.0)
    ksp.solve(b, x)
    assert ksp.getConvergedReason() > 0
    assert ksp.getPythonContext().depth == depth
    ours = ksp.getIterationNumber()
    ksp.destroy()
    theirs, reason, _, rel = solve(A, "cg" if context is pkp.PipeLCG else "gmres")
    assert reason > 0 and abs(ours - theirs) <= 0.1 * theirs + depth, (ours, theirs)
