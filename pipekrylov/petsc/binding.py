"""The runtime's view of a PETSc KSP: its AIJ operator as a DistributedCSR, its PC as
the runtime's own preconditioner where they act alike (see :mod:`pipekrylov.petsc`)."""
import time
from contextlib import contextmanager

import numpy as np
from petsc4py import PETSc

from ..parallel.partition import RowPartition
from ..precond import BlockJacobi, Jacobi, Preconditioner, PreconditionerFailure

__all__ = ["Binding", "PETScOperator", "PETScPC", "NullSpaceProjected", "aij"]


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


class PETScPC(Preconditioner):
    """The KSP's PC as a pipekrylov preconditioner: z = PCApply(r)."""

    name = "petsc"

    def __init__(self, pc, mat):
        self.pc = pc
        self.mat = mat

    def apply(self, r, z):
        with _wrapped(self.mat, r, z) as (rv, zv):
            self.pc.apply(rv, zv)


class NullSpaceProjected(Preconditioner):
    """M followed by the removal of the operator's null space, as PETSc's KSPs apply a
    PC when the matrix carries one (``MatSetNullSpace``): ``z = (I - N N^T) M r``.
    (PETSc removes the transpose null space from b before the solve begins.)"""

    name = "null space removed"

    def __init__(self, inner, nullspace, mat):
        self.inner, self.nullspace, self.mat = inner, nullspace, mat

    def apply(self, r, z):
        if self.inner is None:
            z[:] = r
        else:
            self.inner.apply(r, z)
        with _wrapped(self.mat, z) as (zv,):
            self.nullspace.remove(zv)


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
    """AIJ matrices become a DistributedCSR (its SpMV overlaps the halo exchange, and the
    compiled loop runs on it); others are applied by MatMult."""
    if mat.getType() in ("seqaij", "mpiaij", "aij"):
        from ..matrix.distributed import DistributedCSR
        partition = _partition(mat, mat.getComm().tompi4py())
        indptr, indices, data = mat.getValuesCSR()
        return DistributedCSR.from_local_rows(partition, indptr, indices, data, mat.getSize()[1])
    return PETScOperator(mat)


# PETSc PCs that may be ours, in the order tried (a block-Jacobi's sub-PC is not visible
# from petsc4py 3.18: its action tells which factorization it is)
_OURS = {"jacobi": ("jacobi",), "bjacobi": ("ilu0", "ic0"), "ilu": ("ilu0",), "icc": ("ic0",)}


PCAPPLY = "PCApply"   # the binding's M when PETSc's PC is applied (wrapped per solve)


def _preconditioner(pc, A, P, operator, prefix):
    """The KSP's PC as the runtime's own preconditioner where PETSc's does what ours
    does: None for "none", ours for Jacobi and one-block-per-rank ILU(0)/ICC(0) (checked
    by applying both to one vector), else PETSc's PCApply.  Returns (M, name).  Collective."""
    from ..matrix.distributed import DistributedCSR
    kind = pc.getType()
    if kind == "none":
        return None, "none"
    ours_apply = isinstance(operator, DistributedCSR) and P.handle == A.handle   # ours are built from A
    names = _OURS.get(kind, ()) if ours_apply else ()
    if kind == "bjacobi" and PETSc.Options(prefix).getString("sub_pc_type", "") == "icc":
        names = names[::-1]
    for name in names:
        try:
            ours = Jacobi(operator) if name == "jacobi" else BlockJacobi(operator, name)
        except PreconditionerFailure:   # raised on every rank: PETSc's may still apply
            continue
        if _same_action(pc, P, ours, operator):
            return ours, name
    return PCAPPLY, f"PETSc's {kind} (PCApply)"


def _same_action(pc, P, ours, operator):
    """Do PETSc's PC and ``ours`` give the same z for one vector (to 1e-10)?  Collective."""
    from mpi4py import MPI
    p = operator.partition
    r = 2.0 + np.cos(0.7 * np.arange(p.start, p.end))
    theirs, mine = np.zeros(p.nlocal), np.zeros(p.nlocal)
    with _wrapped(P, r, theirs) as (rv, zv):
        pc.apply(rv, zv)
    ours.apply(r, mine)
    local = np.array([np.max(np.abs(theirs - mine), initial=0.0), np.max(np.abs(theirs), initial=0.0)])
    worst = np.empty(2)
    operator.comm.Allreduce(local, worst, op=MPI.MAX)
    return bool(worst[0] <= 1e-10 * worst[1])


def _state(ksp):
    """What a binding is built from: PETSc's matrices (their object states change with
    their values), the operator's null space and the PC's type."""
    A, P = ksp.getOperators()
    nullspace = _null_space(A)
    return (A.handle, A.stateGet(), P.handle, P.stateGet(), ksp.getPC().getType(),
            nullspace.handle if nullspace is not None else 0)


def _null_space(mat):
    """The matrix's null space (MatSetNullSpace), or None."""
    nullspace = mat.getNullSpace()
    return nullspace if nullspace.handle else None


class Binding:
    """The runtime's view of a KSP: its operator as a DistributedCSR (or MatMult) and its
    PC as ours or PETSc's.  Built at KSPSetUp and again when a solve finds the matrices
    changed (new values or a new pattern) or another PC type.  Collective."""

    def __init__(self, ksp):
        A, P = ksp.getOperators()
        pc = ksp.getPC()
        pc.setUp()   # PETSc's factors exist before ours are checked against them
        self.state = _state(ksp)
        self.operator = _operator(A)
        self.M, self.pc_name = _preconditioner(pc, A, P, self.operator, ksp.getOptionsPrefix())
        self.nullspace = _null_space(A)
        if self.nullspace is not None:
            self.pc_name += ", then the operator's null space removed"

    def matches(self, ksp):
        """Are the KSP's matrices (and their values) and PC type what this binding was built
        from?  Local: PETSc changes a matrix's values and a PC's type collectively, so
        every rank answers alike (and a solve pays no reduction for the check)."""
        return self.state == _state(ksp)

    def preconditioner(self, ksp):
        """M: ours, or PETSc's PC wrapped (kept by the context's solver until KSPReset,
        which drops it: no PETSc object outlives the KSP's own set-up); followed by the
        null space's removal where the operator has one (applied from Python then)."""
        M = PETScPC(ksp.getPC(), ksp.getOperators()[1]) if self.M is PCAPPLY else self.M
        if self.nullspace is not None:
            M = NullSpaceProjected(M, self.nullspace, ksp.getOperators()[0])
        return M
