"""pipekrylov's solvers as PETSc KSP types (petsc4py Python contexts).

Tested from petsc4py (tests/test_petsc_ksp.py: the generators and every matrix of
tests/data but west0479 (which nothing solves), PETSc's jacobi and bjacobi PCs, 1, 2
and 4 ranks) and from a C application
(tests/test_petsc_c_app.py: Poisson and the SPD matrices loaded with MatLoad, 1 and 2
ranks).  ``python -m pipekrylov compare`` puts PETSc's KSPs and these side by side.

From any PETSc application, C or Python::

    -ksp_type python -ksp_python_type pipekrylov.petsc.PipeCG

(a C program also needs ``-python <interpreter>`` and PYTHONPATH covering this package).
The contexts, one per method:

========================  ==========================================================
``pipekrylov.petsc.CG``          classic CG          ``PipeCG``        derived p-CG
``pipekrylov.petsc.CR``          classic CR          ``PipeCR``        derived p-CR
``pipekrylov.petsc.BiCGStab``    classic BiCGStab    ``PipeBiCGStab``  derived p-BiCGStab
``pipekrylov.petsc.GMRES``       classic GMRES(m)    ``PipeCGS``       derived p-CGS
``pipekrylov.petsc.PipeLCG``     p(l)-CG (deep)      ``PipeLGMRES``    p(l)-GMRES (deep)
========================  ==========================================================

Options under the KSP's prefix: ``-ksp_pipekrylov_replacement`` (automatic residual
replacement), ``-ksp_pipekrylov_replace_every k``, ``-ksp_pipekrylov_latency seconds``,
``-ksp_pipekrylov_restart m`` (GMRES), ``-ksp_pipekrylov_depth l`` and
``-ksp_pipekrylov_lmin/lmax`` (the deep variants' depth and shift interval; by default
the solver estimates it), ``-ksp_pipekrylov_drift_tol t`` (p(l)-CG's hand-over to p-CG,
default 1e-11; 0: off) and ``-ksp_pipekrylov_fallback_depth l`` (its depth after a
breakdown, default 1; 0 keeps the depth); ``-ksp_view`` shows them.  The context implements
``solve`` itself (PETSc's generic loop would add a blocking norm per iteration); it
reports through PETSc: ``-ksp_monitor``, ``-ksp_converged_reason``, ``-ksp_rtol/atol/
max_it``, and breakdowns as negative KSPConvergedReason values.  The preconditioner is the
KSP's own PC (jacobi, bjacobi, gamg, ...).  An AIJ matrix is converted once to the
runtime's distributed CSR (its SpMV overlaps the halo exchange and pokes MPI progress);
any other Mat type is applied through MatMult.
"""
import atexit
import time
from contextlib import contextmanager

import numpy as np
from petsc4py import PETSc

from .parallel.partition import RowPartition
from .precond import _Timed

__all__ = ["CG", "CR", "BiCGStab", "GMRES", "PipeCG", "PipeCR", "PipeBiCGStab", "PipeCGS", "PipeLCG",
           "PipeLGMRES", "aij"]


# KSPs that use our contexts.  petsc4py 3.18 defers the destruction of a parallel KSP
# that a script leaves alive to PetscFinalize, whose KSPReset then calls into the Python
# context after the interpreter has exited (a crash).  While Python is alive, turn them
# into a plain C type, so that no Python is left to call.  (A C application destroys its
# KSP before PetscFinalize.)
_KSPS = []


@atexit.register
def _detach_python():
    for ksp in _KSPS:
        if ksp.handle:
            ksp.setType(PETSc.KSP.Type.PREONLY)
    _KSPS.clear()


class PETScOperator:
    """A PETSc Mat with the runtime's operator interface (applied by MatMult)."""

    def __init__(self, mat):
        self.mat = mat
        self.comm = mat.getComm().tompi4py()
        self.partition = _partition(mat, self.comm)
        self.shape = mat.getSize()
        self.spmv_time, self.spmv_count = 0.0, 0

    def matvec(self, x, y=None, progress=None):
        t0 = time.perf_counter()
        if y is None:
            y = np.empty(self.partition.nlocal)
        with _wrapped(self.mat, x, y) as (xv, yv):
            self.mat.mult(xv, yv)
        self.spmv_time += time.perf_counter() - t0
        self.spmv_count += 1
        return y

    def gather(self, x_local):
        out = np.empty(self.partition.n)
        self.comm.Allgatherv(np.ascontiguousarray(x_local), [out, np.diff(self.partition.starts)])
        return out

    def norm_inf(self):
        return self.mat.norm(PETSc.NormType.INFINITY)


class PETScPC(_Timed):
    """The KSP's PC as a pipekrylov preconditioner: z = PCApply(r)."""

    name = "petsc"

    def __init__(self, pc, mat):
        self.pc = pc
        self.mat = mat

    def apply(self, r, z):
        with _wrapped(self.mat, r, z) as (rv, zv):
            self.pc.apply(rv, zv)


@contextmanager
def _wrapped(mat, *arrays):
    """PETSc Vecs on numpy arrays, destroyed on exit (none outlives the call, so none is
    left for the garbage collector to free after PETSc has finalized)."""
    comm = mat.getComm()
    vecs = [PETSc.Vec().createWithArray(a, comm=comm) for a in arrays]
    try:
        yield vecs
    finally:
        for v in vecs:
            v.destroy()


def aij(A, comm=None):
    """A PETSc AIJ matrix with the values of ``A``.  Collective.

    ``A`` is a DistributedCSR (each rank gives its rows; same row split) or a scipy matrix
    every rank holds whole (rows split as PETSc splits them by default over ``comm``,
    an mpi4py or PETSc communicator, default COMM_SELF).
    """
    import scipy.sparse as sp
    if hasattr(A, "partition"):
        comm, rows, nlocal = A.comm, A.to_scipy(), A.partition.nlocal
    else:
        comm = PETSc.COMM_SELF if comm is None else comm
        mpi = comm.tompi4py() if hasattr(comm, "tompi4py") else comm
        nlocal, _ = PETSc.Sys.splitOwnership(A.shape[0], comm=comm)
        start = mpi.exscan(nlocal) or 0
        rows = sp.csr_matrix(A)[start:start + nlocal]
    return PETSc.Mat().createAIJ(((nlocal, A.shape[0]), (nlocal, A.shape[1])),
                                 csr=(rows.indptr.astype(PETSc.IntType), rows.indices.astype(PETSc.IntType),
                                      rows.data), comm=comm)


def _partition(mat, comm):
    """PETSc's row ownership as a RowPartition.  Collective."""
    ranges = comm.allgather(mat.getOwnershipRange())
    return RowPartition(comm, [r[0] for r in ranges] + [ranges[-1][1]])


def _operator(mat):
    """AIJ matrices become a DistributedCSR (measured faster: benchmarks/spmv.py);
    others are applied by MatMult."""
    if mat.getType() in ("seqaij", "mpiaij", "aij"):
        from .matrix.distributed import DistributedCSR
        partition = _partition(mat, mat.getComm().tompi4py())
        indptr, indices, data = mat.getValuesCSR()
        return DistributedCSR.from_local_rows(partition, indptr, indices, data, mat.getSize()[1])
    return PETScOperator(mat)


class _Context:
    """The petsc4py Python KSP context shared by every method."""

    method = None
    pipelined = False
    deep = False

    def __init__(self):
        self.depth = 2 if self.method == "cg" else 1
        self.interval = None
        self.fallback_depth = 1
        self.drift_tol = 1e-11
        self.replace_automatic = False
        self.replace_every = None
        self.latency = 0.0
        self.restart = 30
        self.operator = None

    # -- PETSc's calls -------------------------------------------------------------
    def setFromOptions(self, ksp):
        options = PETSc.Options(ksp.getOptionsPrefix())
        self.replace_automatic = options.getBool("ksp_pipekrylov_replacement", self.replace_automatic)
        every = options.getInt("ksp_pipekrylov_replace_every", 0)
        self.replace_every = every or None
        self.latency = options.getReal("ksp_pipekrylov_latency", self.latency)
        self.restart = options.getInt("ksp_pipekrylov_restart", self.restart)
        self.depth = options.getInt("ksp_pipekrylov_depth", self.depth)
        lmin, lmax = options.getReal("ksp_pipekrylov_lmin", 0.0), options.getReal("ksp_pipekrylov_lmax", 0.0)
        self.interval = (lmin, lmax) if lmax > lmin else None
        self.fallback_depth = options.getInt("ksp_pipekrylov_fallback_depth", self.fallback_depth)
        self.drift_tol = options.getReal("ksp_pipekrylov_drift_tol", self.drift_tol)

    def setUp(self, ksp):
        A, _ = ksp.getOperators()
        self.operator = _operator(A)
        _KSPS.append(ksp)

    def reset(self, ksp):
        self.operator = None

    def view(self, ksp, viewer):
        kind = f"derived pipelined {self.method}" if self.pipelined else f"classic {self.method}"
        if self.deep:
            kind = f"p({self.depth})-{self.method}"
        viewer.printfASCII(f"  pipekrylov: {kind}\n")
        if self.deep:
            shifts = f"Chebyshev on [{self.interval[0]}, {self.interval[1]}]" if self.interval else "estimated"
            viewer.printfASCII(f"  pipeline depth: {self.depth}, shifts: {shifts}\n")
            if self.method == "cg":
                viewer.printfASCII(f"  hand-over to p-CG at drift {self.drift_tol or 'off'}, "
                                   f"depth after a breakdown: {self.fallback_depth or self.depth}\n")
        elif self.pipelined:
            viewer.printfASCII(f"  residual replacement: {'automatic' if self.replace_automatic else 'off'}"
                               f"{f', every {self.replace_every}' if self.replace_every else ''}\n")
        viewer.printfASCII(f"  injected reduction latency: {self.latency} s\n")
        if self.method == "gmres":
            viewer.printfASCII(f"  restart: {self.restart}\n")

    def solve(self, ksp, b, x):
        from . import pipelined
        from .solvers.result import REASONS
        import pipekrylov
        if self.operator is None:
            self.setUp(ksp)
        rtol, atol, _, max_it = ksp.getTolerances()
        if self.deep:
            solver = pipelined(self.method, depth=self.depth)
            extra = {"interval": self.interval}
            if self.method == "gmres":
                extra["restart"] = self.restart
            else:
                extra["fallback_depth"] = self.fallback_depth or None
                extra["drift_tol"] = self.drift_tol or None
        elif self.pipelined:
            solver = pipelined(self.method, replace_every=self.replace_every,
                               replace_automatic=self.replace_automatic)
            extra = {}
        else:
            solver = getattr(pipekrylov, self.method)
            extra = {"restart": self.restart} if self.method == "gmres" else {}
        x0 = x.getArray(readonly=True).copy() if ksp.getInitialGuessNonzero() else None
        # made per solve and dropped after it: the context keeps no PETSc object alive
        pc = PETScPC(ksp.getPC(), ksp.getOperators()[0])

        def monitor(its, rnorm):
            ksp.setIterationNumber(its)
            ksp.setResidualNorm(rnorm)
            ksp.logConvergenceHistory(rnorm)
            ksp.monitor(its, rnorm)

        try:
            res = solver(self.operator, b.getArray(readonly=True).copy(), x0, rtol=rtol, atol=atol,
                         maxiter=max_it, M=pc, monitor=monitor, latency=self.latency,
                         comm=self.operator.comm, **extra)
        except Exception:  # never a traceback inside a PETSc application: a reason instead
            ksp.setConvergedReason(PETSc.KSP.ConvergedReason.DIVERGED_BREAKDOWN)
            raise
        x.getArray()[:] = res.x
        self.last_result = res   # timings and trace, for pipekrylov.compare
        ksp.setIterationNumber(res.iterations)
        if res.residual_norms.size:
            ksp.setResidualNorm(float(res.residual_norms[-1]))
        reason = REASONS[res.reason] if res.reason in REASONS else -5
        if res.reason == "diverged_its":
            reason = PETSc.KSP.ConvergedReason.DIVERGED_MAX_IT
        ksp.setConvergedReason(reason)


def _context(name, method, pipelined, deep=False):
    kind = "Deep pipelined" if deep else "Derived pipelined" if pipelined else "Classic"
    return type(name, (_Context,), {"method": method, "pipelined": pipelined, "deep": deep,
                                    "__doc__": f"{kind} {method} as a PETSc KSP (see the module docstring)."})


CG = _context("CG", "cg", False)
CR = _context("CR", "cr", False)
BiCGStab = _context("BiCGStab", "bicgstab", False)
GMRES = _context("GMRES", "gmres", False)
PipeCG = _context("PipeCG", "cg", True)
PipeCR = _context("PipeCR", "cr", True)
PipeBiCGStab = _context("PipeBiCGStab", "bicgstab", True)
PipeCGS = _context("PipeCGS", "cgs", True)
PipeLCG = _context("PipeLCG", "cg", True, deep=True)
PipeLGMRES = _context("PipeLGMRES", "gmres", True, deep=True)
