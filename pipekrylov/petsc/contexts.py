"""The KSP contexts: one small class per method over a shared base (see
:mod:`pipekrylov.petsc` for the options and what PETSc sees)."""
import atexit
import contextlib
import sys

from petsc4py import PETSc

from ..solvers.result import REASONS
from .binding import Binding

__all__ = ["Context", "Classic", "Derived", "Deep", "CG", "CR", "BiCGStab", "GMRES", "PipeCG", "GroppCG", "PipePRCG", "PipeCG2",
           "PipeCR",
           "PipeBiCGStab", "PipeCGS", "PipeLCG", "PipeLGMRES", "SStepCG", "SStepGMRES", "Flexible", "PipeFCG", "PipeGCR", "PipeFGMRES"]

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


NORMS = {PETSc.KSP.NormType.NONE: "none", PETSc.KSP.NormType.PRECONDITIONED: "preconditioned",
         PETSc.KSP.NormType.UNPRECONDITIONED: "unpreconditioned", PETSc.KSP.NormType.NATURAL: "natural"}
SIDES = {PETSc.PC.Side.LEFT: "left", PETSc.PC.Side.RIGHT: "right", PETSc.PC.Side.SYMMETRIC: "symmetric"}

# Monitors that read more than the residual norm (the iterate, the residual vector): they
# are called as the iterations happen, the KSP's solution vector holding the iterate.
STATEFUL_MONITORS = ("ksp_monitor_true_residual", "ksp_monitor_solution", "ksp_monitor_error",
                     "ksp_monitor_lg_true_residual", "ksp_monitor_max")


def tested_norm(ksp, name):
    """Set the KSP's norm type and PC side to what our methods test: the unpreconditioned
    residual ``||b - A x||_2``, M on the right (CG and CR apply M symmetrically: their
    iterates are those of left preconditioning too), PETSc's (UNPRECONDITIONED, RIGHT).
    PETSc's own default, (PRECONDITIONED, LEFT), is replaced unless the options asked for
    it; anything else asked is refused, at KSPSetUp, with what to give instead."""
    norm, side = ksp.getNormType(), ksp.getPCSide()
    if norm == PETSc.KSP.NormType.UNPRECONDITIONED and side == PETSc.PC.Side.RIGHT:
        return
    options, prefix = PETSc.Options(ksp.getOptionsPrefix()), ksp.getOptionsPrefix() or ""
    asked = [f"-{prefix}{key}" for key in ("ksp_norm_type", "ksp_pc_side") if options.hasName(key)]
    if norm == PETSc.KSP.NormType.PRECONDITIONED and side == PETSc.PC.Side.LEFT and not asked:
        ksp.setNormType(PETSc.KSP.NormType.UNPRECONDITIONED)
        ksp.setPCSide(PETSc.PC.Side.RIGHT)
        return
    raise ValueError(f"{name} tests the unpreconditioned residual norm ||b - A x|| with the preconditioner on the "
                     f"right; it cannot test the {NORMS.get(norm, norm)} norm with {SIDES.get(side, side)} "
                     f"preconditioning ({' '.join(asked) or 'KSPSetNormType/KSPSetPCSide'}): give "
                     "-ksp_norm_type unpreconditioned -ksp_pc_side right, or leave both unset")


@contextlib.contextmanager
def _said(ksp):
    """An error raised to a C application reaches it as a bare PETSc error code (petsc4py
    does not print the exception there): say it on standard error first, once per rank."""
    try:
        yield
    except Exception as exc:
        if not sys.argv or sys.argv == [""]:   # Python embedded by a C application (-python)
            print(f"[{ksp.getComm().getRank()}] pipekrylov: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        raise


class Context:
    """The petsc4py Python KSP context shared by every method: options, set-up, view and
    the solve; a subclass names its method and makes its solver (:meth:`solver`)."""

    method = None
    kind = None
    stride = 1      # iterations between two residual norms (a monitor's numbering after the solve)

    def __init__(self):
        self.latency = 0.0
        self.restart = 30
        self.live_monitor = self.stateful_monitor = False
        self.loop = "auto"
        self.binding = self.solver_ = None
        self.last_result = None

    # -- PETSc's calls -------------------------------------------------------------
    def setFromOptions(self, ksp):
        options = PETSc.Options(ksp.getOptionsPrefix())
        self.latency = options.getReal("ksp_pipekrylov_latency", self.latency)
        self.restart = options.getInt("ksp_gmres_restart", options.getInt("ksp_pipekrylov_restart", self.restart))
        self.live_monitor = options.getBool("ksp_pipekrylov_live_monitor", self.live_monitor)
        self.loop = options.getString("ksp_pipekrylov_loop", self.loop)
        # PETSc's KSPSetFromOptions sets the options' monitors (after this): those that
        # read the iterate make the solves call their monitors live
        self.stateful_monitor = _stateful_monitor(ksp)
        self.options(options)
        self.binding = self.solver_ = None   # options may change the PC and the method: set up again

    def options(self, options):
        """Read the method's own options."""

    def setUp(self, ksp):
        """KSPSetUp: the binding of the KSP's operator and PC, and the solver set up on them
        (its compiled loop, workspace and buffers), once for every solve that follows."""
        if not any(k.handle == ksp.handle for k in _KSPS):   # first: a set-up that raises leaves it a Python KSP too
            _KSPS.append(ksp)
        # the options' stateful monitors again: a context set after KSPSetFromOptions did
        # not read them, yet the KSP has their monitors
        self.stateful_monitor = self.stateful_monitor or _stateful_monitor(ksp)
        with _said(ksp):
            tested_norm(ksp, f"pipekrylov.petsc.{type(self).__name__}")
            self.refuse(PETSc.Options(ksp.getOptionsPrefix()), ksp.getOptionsPrefix() or "")
            self.binding = Binding(ksp)
            self.solver_ = self._solver(ksp)

    def buildSolution(self, ksp, v):
        """The iterate: the solution vector itself.  (PETSc's default for a right PC side
        takes the solution vector for ``M^-1 x`` and applies M to it; ours hold x.)"""
        ksp.getSolution().copy(v)

    def refuse(self, options, prefix):
        """Raise for options this method cannot honour (read at KSPSetUp)."""

    def reset(self, ksp):
        self.binding = self.solver_ = None

    def view(self, ksp, viewer):
        viewer.printfASCII(f"  pipekrylov: {self.kind} {self.method}\n")
        for line in self.describe():
            viewer.printfASCII(f"  {line}\n")
        viewer.printfASCII("  convergence test: ||b - A x||_2 (the unpreconditioned norm), M applied on the right"
                           + (" (symmetrically: CG's iterates are left preconditioning's too)\n"
                              if self.method in ("cg", "cr", "fcg", "cg2") else "\n"))
        if self.binding is not None:
            viewer.printfASCII(f"  preconditioner applied: {self.binding.pc_name}\n")
        if self.last_result is not None:
            viewer.printfASCII(f"  last solve's loop: {self.last_result.loop}\n")
        viewer.printfASCII(f"  injected reduction latency: {self.latency} s\n")

    def describe(self):
        """The method's lines for -ksp_view."""
        return []

    def method_spec(self):
        """``(method, options)`` for :class:`pipekrylov.Solver`."""
        raise NotImplementedError

    def _solver(self, ksp):
        from ..solvers.solver import Solver
        method, options = self.method_spec()
        operator = self.binding.operator
        return Solver(operator, method, M=self.binding.preconditioner(ksp), comm=operator.comm, loop=self.loop,
                      latency=self.latency, **options)

    def solve(self, ksp, b, x):
        if self.binding is None or not self.binding.matches(ksp):
            self.setUp(ksp)
        rtol, atol, divtol, max_it = ksp.getTolerances()
        x0 = x.getArray(readonly=True) if ksp.getInitialGuessNonzero() else None   # (the solve copies it)
        # A monitor is called each iteration only when asked to (a petsc4py monitor, or
        # one that reads the iterate, may inspect the KSP as it goes: the solution vector
        # then holds each iterate); otherwise its lines are given after the solve, from the
        # residual history, which keeps the compiled loop free of calls into Python.
        live = self.live_monitor or self.stateful_monitor or bool(ksp.getMonitor())
        x_now = x.getArray()

        def monitor(its, rnorm):
            ksp.setIterationNumber(its)
            ksp.setResidualNorm(rnorm)
            ksp.logConvergenceHistory(rnorm)
            ksp.monitor(its, rnorm)

        def iterate(xk):
            x_now[:] = xk

        try:
            res = self.solver_.solve(b.getArray(readonly=True), x0, rtol=rtol, atol=atol, maxiter=max_it,
                                     divtol=divtol if 0 < divtol < float("inf") else None,
                                     monitor=monitor if live else False, callback=iterate if live else None)
        except Exception:  # never a traceback inside a PETSc application: a reason instead
            ksp.setConvergedReason(PETSc.KSP.ConvergedReason.DIVERGED_BREAKDOWN)
            raise
        x.getArray()[:] = res.x   # before the monitors: one may look at the solution
        if not live:
            log, show = ksp.logConvergenceHistory, ksp.monitor
            for its, rnorm in enumerate(res.residual_norms.tolist()):
                log(rnorm)
                show(min(its * self.stride, res.iterations), rnorm)
        self.last_result = res   # timings and trace, for pipekrylov.compare
        ksp.setIterationNumber(res.iterations)
        if res.residual_norms.size:
            ksp.setResidualNorm(float(res.residual_norms[-1]))
        reason = REASONS[res.reason] if res.reason in REASONS else -5
        if res.reason == "diverged_its":
            reason = PETSc.KSP.ConvergedReason.DIVERGED_MAX_IT
        ksp.setConvergedReason(reason)


def _stateful_monitor(ksp):
    """Whether the options ask for a monitor that reads the iterate (the true residual's)."""
    prefix = ksp.getOptionsPrefix() or ""
    names = PETSc.Options().getAll()
    return any(prefix + name in names for name in STATEFUL_MONITORS)


class Classic(Context):
    """A classic method (pipekrylov.cg, ...) as a KSP."""

    kind = "classic"
    orthogonalization = "dcgs2"
    single_reduction = False

    def options(self, options):
        # CG's PETSc option: its dots in one reduction (Chronopoulos-Gear), the derived "b-cg"
        if self.method == "cg":
            self.single_reduction = options.getBool("ksp_cg_single_reduction", self.single_reduction)

    def refuse(self, options, prefix):
        if self.method == "gmres":
            self.orthogonalization = gmres_orthogonalization(options, prefix, ("cgs2", "cgs"), "dcgs2")

    def method_spec(self):
        if self.method == "gmres":
            return self.method, {"restart": self.restart, "orthogonalization": self.orthogonalization}
        return ("b-cg" if self.single_reduction else self.method), {}

    def describe(self):
        if self.single_reduction:
            return ["single reduction (Chronopoulos-Gear): one blocking reduction an iteration"]
        if self.method != "gmres":
            return []
        return [f"restart: {self.restart}, classical Gram-Schmidt {GRAM_SCHMIDT[self.orthogonalization]}"]


class Derived(Context):
    """A derived pipelined method (pipekrylov.pipelined(method)) as a KSP: the compiled
    loop where the operator is AIJ and the PC none, Jacobi or ILU(0)/ICC(0) blocks."""

    kind = "derived pipelined"

    def __init__(self):
        super().__init__()
        self.replace_automatic = False
        self.replace_every = None

    def options(self, options):
        self.replace_automatic = options.getBool("ksp_pipekrylov_replacement", self.replace_automatic)
        self.replace_every = options.getInt("ksp_pipekrylov_replace_every", 0) or None

    def method_spec(self):
        return f"p-{self.method}", {"replace_every": self.replace_every, "replace_automatic": self.replace_automatic}

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

    def refuse(self, options, prefix):
        if self.method == "gmres":
            gmres_orthogonalization(options, prefix, ("cgs2",), "cgs2")

    def method_spec(self):
        if self.method == "gmres":
            return f"p({self.depth})-gmres", {"restart": self.restart, "interval": self.interval}
        return "p-cg", {"depth": self.depth, "interval": self.interval, "fallback_depth": self.fallback_depth or None,
                        "drift_tol": self.drift_tol or None}

    def describe(self):
        shifts = f"Chebyshev on [{self.interval[0]}, {self.interval[1]}]" if self.interval else "estimated"
        lines = [f"pipeline depth: {self.depth}, shifts: {shifts}"]
        if self.method == "cg":
            lines.append(f"hand-over to p-CG at drift {self.drift_tol or 'off'}, "
                         f"depth after a breakdown: {self.fallback_depth or self.depth}")
        else:
            lines.append(f"restart: {self.restart}")
        lines.append(f"loop: {self.loop}")
        return lines


class SStep(Context):
    """s-step CG and GMRES (:func:`pipekrylov.sstep_cg`, :func:`pipekrylov.sstep_gmres`) as
    KSPs: ``-ksp_pipekrylov_s`` iterations per reduction (default 4)."""

    kind = "s-step"

    def __init__(self):
        super().__init__()
        self.s = 4

    def options(self, options):
        self.s = options.getInt("ksp_pipekrylov_s", self.s)

    def refuse(self, options, prefix):
        asked = [f"-{prefix}{key}" for key in ("ksp_gmres_modifiedgramschmidt", "ksp_gmres_cgs_refinement_type")
                 if options.hasName(key)]
        if self.method == "gmres" and asked:
            raise ValueError("s-step GMRES orthogonalizes its blocks by block classical Gram-Schmidt and Cholesky "
                             f"QR, twice where once loses accuracy; {' and '.join(asked)} cannot be honoured")

    def method_spec(self):
        if self.method == "gmres":
            return "s-gmres", {"s": self.s, "restart": self.restart}
        return "s-cg", {"s": self.s}

    def describe(self):
        lines = [f"s: {self.s} iterations per reduction (a Newton basis, shifts from the solve's Ritz values)"]
        if self.method == "gmres":
            lines.append(f"restart: {self.restart}, block classical Gram-Schmidt with Cholesky QR, "
                         "a second pass where it loses accuracy")
        return lines + [f"loop: {self.loop}"]


class Flexible(Context):
    """Pipelined flexible CG and GCR (:func:`pipekrylov.pipefcg`, :func:`pipekrylov.pipegcr`)
    as KSPs, with PETSc's options ``-ksp_pipefcg_mmax`` / ``-ksp_pipegcr_mmax`` (15) and
    ``-ksp_pipefcg_truncation_type`` / ``-ksp_pipegcr_truncation_type`` (``notay`` or
    ``standard``).  PIPEGCR's ``w`` is always updated by its recurrence (PETSc's default
    ``-ksp_pipegcr_unroll_w``): asking otherwise is refused."""

    kind = "flexible pipelined"

    def __init__(self):
        super().__init__()
        self.mmax, self.truncation = 15, "notay"

    def options(self, options):
        self.mmax = options.getInt(f"ksp_pipe{self.method}_mmax", self.mmax)
        self.truncation = (options.getString(f"ksp_pipe{self.method}_truncation_type", self.truncation) or "").lower()

    def refuse(self, options, prefix):
        if self.method == "gcr" and not options.getBool("ksp_pipegcr_unroll_w", True):
            raise ValueError(f"-{prefix}ksp_pipegcr_unroll_w false cannot be honoured: PipeGCR updates w = A u by "
                             "its recurrence (PETSc's default), in the iteration's overlap")

    def method_spec(self):
        return f"p-{self.method}", {"mmax": self.mmax, "truncation": self.truncation}

    def describe(self):
        return [f"max previous directions: {self.mmax}, {self.truncation} truncation", f"loop: {self.loop}"]


class PipeCG2(Context):
    """Pipelined CG with one reduction per two iterations (:func:`pipekrylov.pipecg2`,
    PETSc's pipecg2) as a KSP.  Its residual norm is tested every other iteration: a
    monitor shows iterations 0, 2, 4, ...  A live monitor is given each test's iteration;
    the lines printed after the solve (the compiled loop's) are counted by twos, which
    after a pair of one iteration or a restart from ``b - A x`` runs ahead of it."""

    kind = "pipelined"
    method = "cg2"
    stride = 2

    def method_spec(self):
        return "p-cg2", {}

    def describe(self):
        return ["one reduction per two iterations, overlapped with two A and two M", f"loop: {self.loop}"]


class PipeFGMRES(Context):
    """Pipelined flexible GMRES (:func:`pipekrylov.pipefgmres`) as a KSP, with PETSc's
    ``-ksp_gmres_restart`` and ``-ksp_pipefgmres_shift`` (1).  It orthogonalizes by
    classical Gram-Schmidt once, as PETSc's pipefgmres: a refinement or modified
    Gram-Schmidt asked for is refused."""

    kind = "flexible pipelined"
    method = "fgmres"

    def __init__(self):
        super().__init__()
        self.shift = 1.0

    def options(self, options):
        self.shift = options.getReal("ksp_pipefgmres_shift", self.shift)

    def refuse(self, options, prefix):
        gmres_orthogonalization(options, prefix, ("cgs",), "cgs")

    def method_spec(self):
        return "p-fgmres", {"restart": self.restart, "shift": self.shift}

    def describe(self):
        return [f"restart: {self.restart}, shift: {self.shift:g}, classical Gram-Schmidt once", f"loop: {self.loop}"]


REFINEMENTS = {"refine_always": "cgs2", "refine_never": "cgs"}   # PETSc's -ksp_gmres_cgs_refinement_type
GRAM_SCHMIDT = {"cgs2": "twice (refine_always)", "cgs": "once (refine_never)",
                "dcgs2": "twice, the second pass a step late (DCGS2: one reduction a step)"}


def gmres_orthogonalization(options, prefix, allowed, default):
    """The orthogonalization PETSc's options ask of a GMRES: ``default`` where they name
    none, else refine_always's ``"cgs2"`` (classical Gram-Schmidt twice in each step) or
    refine_never's ``"cgs"`` (once); one not ``allowed`` (modified Gram-Schmidt,
    refine_ifneeded, ...) is refused."""
    given = options.hasName("ksp_gmres_cgs_refinement_type")
    refinement = (options.getString("ksp_gmres_cgs_refinement_type", "") or "").lower() if given else ""
    asked = [f"-{prefix}ksp_gmres_modifiedgramschmidt"] if options.hasName("ksp_gmres_modifiedgramschmidt") else []
    if given and REFINEMENTS.get(refinement) not in allowed:
        asked.append(f"-{prefix}ksp_gmres_cgs_refinement_type {refinement}".rstrip())
    if asked:
        can = " or ".join(k for k, v in REFINEMENTS.items() if v in allowed)
        raise ValueError(f"this GMRES orthogonalizes by classical Gram-Schmidt ({can}); "
                         f"{' and '.join(asked)} cannot be honoured")
    return REFINEMENTS[refinement] if refinement else default


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


class GroppCG(Derived):
    method = "cg-gropp"


class PipePRCG(Derived):
    method = "cg-pr"


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


class SStepCG(SStep):
    method = "cg"


class SStepGMRES(SStep):
    method = "gmres"


class PipeFCG(Flexible):
    method = "fcg"


class PipeGCR(Flexible):
    method = "gcr"
