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
replacement), ``-ksp_pipekrylov_replace_every k``, ``-ksp_pipekrylov_loop auto|compiled|python``
(the derived methods' loop), ``-ksp_pipekrylov_latency seconds``, ``-ksp_pipekrylov_restart m``
(GMRES), ``-ksp_pipekrylov_depth l`` and ``-ksp_pipekrylov_lmin/lmax`` (the deep variants'
depth and shift interval; by default the solver estimates it), ``-ksp_pipekrylov_drift_tol t``
(p(l)-CG's hand-over to p-CG, default 1e-11; 0: off), ``-ksp_pipekrylov_fallback_depth l``
(its depth after a breakdown, default 1; 0 keeps the depth) and
``-ksp_pipekrylov_live_monitor``; ``-ksp_view`` shows them.

The context implements ``solve`` itself (PETSc's generic loop would add a blocking norm per
iteration) and reports through PETSc: ``-ksp_monitor``, ``-ksp_converged_reason``,
``-ksp_rtol/atol/max_it``, breakdowns as negative KSPConvergedReason values.

**The compiled loop.**  At KSPSetUp the context builds the runtime's distributed matrix
from an AIJ operator (:class:`Binding`: its local rows, split into the diagonal block and
the halo part, with its own halo exchange) and maps the KSP's PC: ``none``, ``jacobi``,
and ``bjacobi`` with ILU(0) or ICC(0) blocks (one per rank; ``ilu``/``icc`` on one rank)
become the runtime's own Jacobi and block-Jacobi factors, computed by pipekrylov from the
matrix and accepted only if they give PETSc's PCApply to 1e-10 on a test vector.  The
derived methods then run on the compiled loop (:mod:`pipekrylov.derive.compiled`), on
arrays, with no call into PETSc per iteration.  Any other PC (gamg, sor, ILU(k), ...) is
applied through PCApply on the Python loop; any other Mat type through MatMult.  A solve
checks the matrices' object states: new values (the same or a new pattern) or another
PC type rebuild the binding, as KSPSetUp would not.

Monitors: with the compiled loop, the residual history is handed to PETSc's monitors
and convergence history after the solve (same lines as live, printed at the end).  A
petsc4py monitor (``ksp.setMonitor``), or ``-ksp_pipekrylov_live_monitor``, is called at
each iteration instead (a call into Python per iteration: measured in docs/compiled-loop.md).
"""
import atexit
import functools
import time
from contextlib import contextmanager

import numpy as np
from petsc4py import PETSc

from .parallel.partition import RowPartition
from .precond import BlockJacobi, Jacobi, Preconditioner, PreconditionerFailure

__all__ = ["CG", "CR", "BiCGStab", "GMRES", "PipeCG", "PipeCR", "PipeBiCGStab", "PipeCGS", "PipeLCG",
           "PipeLGMRES", "Context", "Classic", "Derived", "Deep", "Binding", "aij"]


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


class PETScPC(Preconditioner):
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
    """AIJ matrices become a DistributedCSR (its SpMV overlaps the halo exchange, and the
    compiled loop runs on it); others are applied by MatMult."""
    if mat.getType() in ("seqaij", "mpiaij", "aij"):
        from .matrix.distributed import DistributedCSR
        partition = _partition(mat, mat.getComm().tompi4py())
        indptr, indices, data = mat.getValuesCSR()
        return DistributedCSR.from_local_rows(partition, indptr, indices, data, mat.getSize()[1])
    return PETScOperator(mat)


# PETSc PCs that may be ours, in the order tried (a block-Jacobi's sub-PC is not visible
# from petsc4py 3.18: its action tells which factorization it is)
_OURS = {"jacobi": ("jacobi",), "bjacobi": ("ilu0", "ic0"), "ilu": ("ilu0",), "icc": ("ic0",)}


PCAPPLY = "PCApply"   # the binding's M when PETSc's PC is applied (wrapped per solve)


def _preconditioner(pc, P, operator, prefix):
    """The KSP's PC as the runtime's own preconditioner where PETSc's does what ours
    does: None for "none", ours for Jacobi and one-block-per-rank ILU(0)/ICC(0) (checked
    by applying both to one vector), else PETSc's PCApply.  Returns (M, name).  Collective."""
    from .matrix.distributed import DistributedCSR
    kind = pc.getType()
    if kind == "none":
        return None, "none"
    names = _OURS.get(kind, ()) if isinstance(operator, DistributedCSR) else ()
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
    """What the binding was built from: PETSc's matrices (their object states change with
    their values) and the PC's type."""
    A, P = ksp.getOperators()
    return A.handle, A.stateGet(), P.handle, P.stateGet(), ksp.getPC().getType()


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
        self.M, self.pc_name = _preconditioner(pc, P, self.operator, ksp.getOptionsPrefix())


class Context:
    """The petsc4py Python KSP context shared by every method: options, set-up, view and
    the solve; a subclass names its method and makes its solver (:meth:`solver`)."""

    method = None
    kind = None

    def __init__(self):
        self.latency = 0.0
        self.restart = 30
        self.live_monitor = False
        self.binding = None
        self.last_result = None

    # -- PETSc's calls -------------------------------------------------------------
    def setFromOptions(self, ksp):
        options = PETSc.Options(ksp.getOptionsPrefix())
        self.latency = options.getReal("ksp_pipekrylov_latency", self.latency)
        self.restart = options.getInt("ksp_pipekrylov_restart", self.restart)
        self.live_monitor = options.getBool("ksp_pipekrylov_live_monitor", self.live_monitor)
        self.options(options)

    def options(self, options):
        """Read the method's own options."""

    def setUp(self, ksp):
        self.binding = Binding(ksp)
        _KSPS.append(ksp)

    def reset(self, ksp):
        self.binding = None

    def view(self, ksp, viewer):
        viewer.printfASCII(f"  pipekrylov: {self.kind} {self.method}\n")
        for line in self.describe():
            viewer.printfASCII(f"  {line}\n")
        if self.binding is not None:
            viewer.printfASCII(f"  preconditioner applied: {self.binding.pc_name}\n")
        if self.last_result is not None and hasattr(self.last_result, "loop"):
            viewer.printfASCII(f"  last solve's loop: {self.last_result.loop}\n")
        viewer.printfASCII(f"  injected reduction latency: {self.latency} s\n")

    def describe(self):
        """The method's lines for -ksp_view."""
        return []

    def solver(self):
        """``(solver, extra keyword arguments)`` for this method."""
        raise NotImplementedError

    def solve(self, ksp, b, x):
        from .solvers.result import REASONS
        if self.binding is None or self.binding.state != _state(ksp):
            self.binding = Binding(ksp)
        binding = self.binding
        rtol, atol, _, max_it = ksp.getTolerances()
        solver, extra = self.solver()
        x0 = x.getArray(readonly=True).copy() if ksp.getInitialGuessNonzero() else None
        # A monitor is called each iteration only when asked to (a petsc4py monitor may
        # inspect the KSP as it goes); otherwise its lines are given after the solve, from
        # the residual history, which keeps the compiled loop free of calls into Python.
        live = self.live_monitor or bool(ksp.getMonitor())

        def monitor(its, rnorm):
            ksp.setIterationNumber(its)
            ksp.setResidualNorm(rnorm)
            ksp.logConvergenceHistory(rnorm)
            ksp.monitor(its, rnorm)

        # PETSc's PC is wrapped per solve and dropped after it: the context keeps no PETSc
        # object alive (their destruction stays PETSc's business)
        M = PETScPC(ksp.getPC(), ksp.getOperators()[1]) if binding.M is PCAPPLY else binding.M
        if M is not None:
            M.time, M.count = 0.0, 0   # this solve's timings (ours are kept between solves)
        try:
            res = solver(binding.operator, b.getArray(readonly=True), x0, rtol=rtol, atol=atol,
                         maxiter=max_it, M=M, monitor=monitor if live else False,
                         latency=self.latency, comm=binding.operator.comm, **extra)
        except Exception:  # never a traceback inside a PETSc application: a reason instead
            ksp.setConvergedReason(PETSc.KSP.ConvergedReason.DIVERGED_BREAKDOWN)
            raise
        if not live:
            log, show = ksp.logConvergenceHistory, ksp.monitor
            for its, rnorm in enumerate(res.residual_norms.tolist()):
                log(rnorm)
                show(its, rnorm)
        x.getArray()[:] = res.x
        self.last_result = res   # timings and trace, for pipekrylov.compare
        ksp.setIterationNumber(res.iterations)
        if res.residual_norms.size:
            ksp.setResidualNorm(float(res.residual_norms[-1]))
        reason = REASONS[res.reason] if res.reason in REASONS else -5
        if res.reason == "diverged_its":
            reason = PETSc.KSP.ConvergedReason.DIVERGED_MAX_IT
        ksp.setConvergedReason(reason)


class Classic(Context):
    """A classic method (pipekrylov.cg, ...) as a KSP."""

    kind = "classic"

    def solver(self):
        import pipekrylov
        extra = {"restart": self.restart} if self.method == "gmres" else {}
        return getattr(pipekrylov, self.method), extra

    def describe(self):
        return [f"restart: {self.restart}"] if self.method == "gmres" else []


class Derived(Context):
    """A derived pipelined method (pipekrylov.pipelined(method)) as a KSP: the compiled
    loop where the operator is AIJ and the PC none, Jacobi or ILU(0)/ICC(0) blocks."""

    kind = "derived pipelined"

    def __init__(self):
        super().__init__()
        self.replace_automatic = False
        self.replace_every = None
        self.loop = "auto"

    def options(self, options):
        self.replace_automatic = options.getBool("ksp_pipekrylov_replacement", self.replace_automatic)
        self.replace_every = options.getInt("ksp_pipekrylov_replace_every", 0) or None
        self.loop = options.getString("ksp_pipekrylov_loop", self.loop)

    def solver(self):
        return _derived(self.method, self.replace_every, self.replace_automatic), {"loop": self.loop}

    def describe(self):
        every = f", every {self.replace_every}" if self.replace_every else ""
        return [f"residual replacement: {'automatic' if self.replace_automatic else 'off'}{every}",
                f"loop: {self.loop}"]


class Deep(Context):
    """A deep pipeline (p(l)-CG, p(l)-GMRES of pipekrylov.deep) as a KSP."""

    kind = "deep pipelined"

    def __init__(self):
        super().__init__()
        self.depth = 2 if self.method == "cg" else 1
        self.interval = None
        self.fallback_depth = 1
        self.drift_tol = 1e-11

    def options(self, options):
        self.depth = options.getInt("ksp_pipekrylov_depth", self.depth)
        lmin, lmax = options.getReal("ksp_pipekrylov_lmin", 0.0), options.getReal("ksp_pipekrylov_lmax", 0.0)
        self.interval = (lmin, lmax) if lmax > lmin else None
        self.fallback_depth = options.getInt("ksp_pipekrylov_fallback_depth", self.fallback_depth)
        self.drift_tol = options.getReal("ksp_pipekrylov_drift_tol", self.drift_tol)

    def solver(self):
        from . import pipelined
        extra = {"interval": self.interval}
        if self.method == "gmres":
            extra["restart"] = self.restart
        else:
            extra["fallback_depth"] = self.fallback_depth or None
            extra["drift_tol"] = self.drift_tol or None
        return pipelined(self.method, depth=self.depth), extra

    def describe(self):
        shifts = f"Chebyshev on [{self.interval[0]}, {self.interval[1]}]" if self.interval else "estimated"
        lines = [f"pipeline depth: {self.depth}, shifts: {shifts}"]
        if self.method == "cg":
            lines.append(f"hand-over to p-CG at drift {self.drift_tol or 'off'}, "
                         f"depth after a breakdown: {self.fallback_depth or self.depth}")
        else:
            lines.append(f"restart: {self.restart}")
        return lines


@functools.lru_cache(maxsize=None)
def _derived(method, replace_every, replace_automatic):
    """The derived solver, made once per process (a solve must not pay for its making)."""
    from . import pipelined
    return pipelined(method, replace_every=replace_every, replace_automatic=replace_automatic)


class CG(Classic):
    method = "cg"


class CR(Classic):
    method = "cr"


class BiCGStab(Classic):
    method = "bicgstab"


class GMRES(Classic):
    method = "gmres"


class PipeCG(Derived):
    method = "cg"


class PipeCR(Derived):
    method = "cr"


class PipeBiCGStab(Derived):
    method = "bicgstab"


class PipeCGS(Derived):
    method = "cgs"


class PipeLCG(Deep):
    method = "cg"


class PipeLGMRES(Deep):
    method = "gmres"
