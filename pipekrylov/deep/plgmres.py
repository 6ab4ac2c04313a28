"""p(l)-GMRES's driver: the shifts and the cycles (its loop, one compiled function for every
depth: :mod:`pipekrylov.loops.plgmres`).

**Shifts.**  Real Chebyshev points of ``[min(0, min Re theta), max Re theta + bound]`` of
the Ritz values ``theta`` of Arnoldi steps on ``A M`` from the first residual (``bound``
the residual norm of the rightmost), until that bound is 1% of it (at most
``estimate_steps``): blocking steps, not counted as iterations, once per
:class:`~pipekrylov.Solver` (a solver keeps its shifts until an update).  ``interval`` or ``shifts`` give
them instead.  Real shifts keep the recurrences real; Ghysels et al. also use complex
Leja-ordered Ritz values in pairs.

**Cycles.**  A cycle ends after ``restart`` iterations, at convergence (confirmed against
``b - A x``), or at a square-root breakdown of the basis, after which the next starts from
the iterate reached (:data:`MAX_RESTARTS` times at most, and not where a cycle made no
progress).
"""

from ..loops import Labels, LoopSpec
from ..loops import plgmres as loop
from ..runtime import layout as L
from ..solvers.driver import Finished
from ..solvers.inputs import fitted_restart
from ..solvers.result import Breakdown
from .plcg import _shift_rule, keep, kept
from .spectrum import chebyshev_shifts, estimate_spectrum, interval_from_ritz

__all__ = ["plgmres", "DeepGMRES", "MAX_RESTARTS"]

MAX_RESTARTS = 50


def plgmres(A, b, x0=None, *, depth=1, restart=30, shifts="auto", interval=None, rtol=1e-5, atol=0.0,
            maxiter=None, M=None, callback=None, callback_type=None, comm=None, monitor=False, latency=0.0,
            estimate_steps=30, loop="auto"):
    """Solve ``A x = b`` by p(l)-GMRES(``restart``) with pipeline depth ``depth``.  Collective.

    Arguments and result as :func:`pipekrylov.gmres` (scipy's ``maxiter`` in restart cycles,
    ``callback_type``), plus ``depth`` (``1 <= depth <=
    restart``), ``shifts``, ``interval`` and ``estimate_steps`` as :func:`pipekrylov.deep.plcg`
    (see the module's docstring for the estimate), and ``loop`` (the compiled loop, or the
    same loop interpreted).  The result also has ``restarts`` (cycles cut short by a
    breakdown) and ``shifts``.
    """
    from ..solvers.gmres import scipy_gmres
    from ..solvers.solver import made
    spec = made(lambda: DeepGMRES(depth, restart, shifts=shifts, interval=interval, estimate_steps=estimate_steps),
                "p(l)-gmres")
    return scipy_gmres(spec, A, b, x0, restart=restart, maxiter=maxiter, callback=callback,
                       callback_type=callback_type, monitor=monitor, comm=comm, least=depth, rtol=rtol, atol=atol,
                       M=M, latency=latency, loop=loop)


class DeepGMRES(LoopSpec):
    """p(l)-GMRES's loop and its hooks; options checked here, alike on every rank."""

    def __init__(self, depth, restart=30, shifts="auto", interval=None, estimate_steps=30):
        depth, restart = int(depth), int(restart)
        if depth < 1 or restart < depth:
            raise ValueError(f"need 1 <= depth <= restart, got depth={depth}, restart={restart}")
        self.depth, self.restart, self.estimate_steps = depth, restart, max(1, int(estimate_steps))
        self.rule = _shift_rule(shifts, interval, depth)
        self.options = (shifts, interval, estimate_steps)
        self._fitted = {}   # restart -> this method for a smaller system
        super().__init__(f"p({depth})-gmres", loop.plgmres, Labels(loop.LABELS, columns=True), self._workspace,
                         loop.S_SIZE, self._breakdown, slots=depth + 2, width=restart + depth + 2, norms=1)

    @property
    def key(self):
        return f"{self.name} restart={self.restart} " + " ".join(map(repr, self.options))

    def fitted(self, n):
        m = fitted_restart(self.restart, n, least=self.depth)
        if m == self.restart:
            return self
        if m not in self._fitted:
            self._fitted[m] = DeepGMRES(self.depth, m, *self.options)
        return self._fitted[m]

    def _workspace(self, n, preconditioned):
        return loop.workspace(n, self.depth, self.restart)

    def _breakdown(self, check, value):
        if check == loop.ZERO_COLUMN:
            return Breakdown("diverged_breakdown", "GMRES: zero column in the Hessenberg matrix")
        if check == loop.NO_DESCENT:
            return Breakdown("diverged_breakdown", f"the cycle's basis lost its orthogonality: its update raised "
                                                   f"||b - A x|| to {value:.3e} (taken back)")
        return Breakdown("diverged_breakdown", f"square-root breakdown: argument {value:.3e} <= 0")

    def _w(self, solver, name):
        return solver.W[loop.W_NAMES.index(name)]

    # -------------------------------------------------------------- hooks
    def prepare(self, solver):
        J = self._w(solver, "J")
        J[:] = 0
        J[loop.DEPTH], J[loop.REPORT] = self.depth, 1

    def begin(self, solver, run):
        """The shifts: given, kept from an earlier solve, or estimated now (collective)."""
        rule = self.rule or kept(solver, "shift_rule")
        solver.first_shifts = None
        if rule is None:
            ritz, bound = estimate_spectrum(solver, run.x, run.b, self.estimate_steps, symmetric=False)
            bounds = interval_from_ritz(ritz, bound) if ritz.size else (0.0, 1.0)
            rule = keep(solver, "shift_rule", lambda d: chebyshev_shifts(d, *bounds))
        solver.first_shifts = rule(self.depth)
        self._w(solver, "sigma")[:] = solver.first_shifts
        solver.S[loop.NORM_A] = solver.norm_inf_a   # (collective at the solver's first solve only)
        solver.cycle_start = 0

    def after_test(self, solver, passed):
        """The loop decides (its cycle's reductions in flight complete first)."""
        return int(solver.I[L.RESUME])

    def event(self, solver, run, event):
        if event != L.RESTART:
            return super().event(solver, run, event)
        if self._w(solver, "J")[loop.CAUSE] == loop.NOT_CONFIRMED:
            run.replace_last(float(solver.F[L.VALUE]))
        self._next_cycle(solver)

    def broke_down(self, solver, run, breakdown):
        """A square-root breakdown cuts the cycle short: the next starts from the iterate
        reached; a cycle that made no progress, or too many restarts, end the solve."""
        I = solver.I
        if int(I[L.CHECK]) != loop.SQUARE_ROOT:
            return False
        I[L.RESTARTS] += 1
        if I[L.RESTARTS] > MAX_RESTARTS or I[L.DONE] == solver.cycle_start:
            raise Breakdown("diverged_breakdown", f"{self.name}: {breakdown}")
        self._next_cycle(solver)
        return True

    def _next_cycle(self, solver):
        I = solver.I
        if I[L.DONE] >= I[L.MAXITER]:
            raise Finished("diverged_its")
        self._w(solver, "J")[loop.REPORT] = 0
        solver.cycle_start = int(I[L.DONE])
        I[L.RESUME] = L.FROM_X

    def report(self, solver):
        # (no shifts where the estimate itself broke down)
        return {"shifts": getattr(solver, "first_shifts", None), "depth": self.depth}
