"""Make a PETSc KSP, PETSc's own or ours, and solve with it: what the comparisons (tests,
benchmarks, ``python -m pipekrylov compare``) do on both sides."""
import numpy as np
from petsc4py import PETSc

from .binding import aij

__all__ = ["make_ksp", "run_ksp"]


def make_ksp(A, ksp_type, pc="none", *, rtol=1e-8, atol=0.0, max_it=10000, unpreconditioned=False,
             right=False, options=(), prefix=None, comm=None):
    """A KSP set up on ``A``.  Collective.

    Parameters
    ----------
    A : PETSc Mat, or what :func:`aij` takes (a DistributedCSR, a scipy matrix with ``comm``)
    ksp_type : str or class
        PETSc's KSP type ("cg", "pipecg", ...), or one of this package's contexts
        (:class:`~pipekrylov.petsc.PipeCG`, ...), run as ``-ksp_type python``.
    pc : str
        PETSc's PC type.
    unpreconditioned, right :
        The unpreconditioned residual norm; right preconditioning (how ours test and apply).
    options : iterable of (name, value)
        PETSc options under ``prefix``, in force while the KSP is set up (a block-Jacobi's
        sub-PCs read theirs then), removed after.
    """
    mat = A if isinstance(A, PETSc.Mat) else aij(A, comm)
    ksp = PETSc.KSP().create(mat.getComm())
    ksp.setOperators(mat)
    if prefix:
        ksp.setOptionsPrefix(prefix)
    if isinstance(ksp_type, str):
        ksp.setType(ksp_type)
    else:
        ksp.setType("python")
        ksp.setPythonContext(ksp_type())
    if unpreconditioned:
        ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)
    if right:
        ksp.setPCSide(PETSc.PC.Side.RIGHT)
    ksp.getPC().setType(pc)
    database, options = PETSc.Options(prefix), list(options)
    for name, value in options:
        database[name] = value
    try:
        ksp.setFromOptions()
        ksp.setTolerances(rtol=rtol, atol=atol, max_it=max_it)
        ksp.setUp()
    finally:
        for name, _ in options:
            database.delValue(name)
    return ksp


def run_ksp(ksp, b=1.0):
    """Solve from x = 0 with right-hand side ``b`` (a number for every entry, or a vector:
    this rank's rows or the whole).  Collective.

    Returns (iterations, KSPConvergedReason as an int, x: this rank's rows).
    """
    A, _ = ksp.getOperators()
    bv, xv = A.createVecs()
    b = np.asarray(b, dtype=float)
    if b.ndim == 0:
        bv.set(float(b))
    else:
        lo, hi = bv.getOwnershipRange()
        bv.array[:] = b[lo:hi] if b.size == bv.getSize() else b
    xv.set(0.0)
    ksp.solve(bv, xv)
    x = xv.getArray().copy()
    bv.destroy()
    xv.destroy()
    return ksp.getIterationNumber(), int(ksp.getConvergedReason()), x
