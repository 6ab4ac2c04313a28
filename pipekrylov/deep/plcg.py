"""p(l)-CG's driver: the shifts, the cycles and the hand-over to p-CG (its loop, one
compiled function for every depth: :mod:`pipekrylov.loops.plcg`).

**Shifts.**  Chebyshev points of ``[0, theta_max + bound]``, with ``theta_max`` the
largest Ritz value of the start's Lanczos steps and ``bound`` its residual norm: the
steps go on past the 2l the start needs until the bound is 1% of it (at most
``estimate_steps``), not counted as iterations, as PETSc's Chebyshev estimates its
eigenvalues.  They are CG's recurrences, one reduction per step, and the start uses the
first 2l of them: the estimate costs its extra steps only, and only once per
:class:`~pipekrylov.Solver` (a solver keeps its shifts across solves, until an update).  ``interval``
(PETSc's ``lmin``, ``lmax``) or ``shifts`` give them instead.

**Cycles.**  A breakdown of the basis (an LDL^T pivot, a square root) or a convergence
that ``b - A x`` does not confirm ends a cycle; the next starts from ``x`` (at
``fallback_depth`` after a breakdown), up to :data:`MAX_RESTARTS` times.

**Hand-over.**  On ill-conditioned matrices the basis drifts from its definition,
exponentially, until a square-root breakdown, whose restart loses the Krylov space.  The
loop measures the drift with one more dot per reduction; before it does harm the same CG
goes on from the iterate and the last search direction as the derivation framework's
p-CG testing the same norm (:meth:`DeepCG.hand_over`); docs/deep.md has the measurements.
"""
import dataclasses

import numpy as np

from ..derive import BASE_METHODS, loop_spec as derived_loop_spec
from ..loops import Labels, LoopSpec
from ..loops import plcg as loop
from ..runtime import layout as L
from ..solvers.driver import Finished, run_events
from ..solvers.result import Breakdown
from ..solvers.solver import made, solve_once
from .basis import BasisBreakdown, BasisDrift, SqrtBreakdown
from .spectrum import chebyshev_shifts, interval_from_ritz, ritz_bound

__all__ = ["plcg", "DeepCG", "MAX_DEPTH", "MAX_RESTARTS"]

MAX_RESTARTS = 50
# Beyond this the shifted basis of a deep pipeline loses more accuracy than the drift check
# and the exact start can make up for: depth 100 took 24x CG's iterations on 2D Poisson.
MAX_DEPTH = 16
# derived p-CG testing the norm p(l)-CG tests: where a drifting basis hands over
CONTINUATION = dataclasses.replace(BASE_METHODS["cg"], norm="natural")
ESTIMATE_TOLERANCE = 0.01   # the estimate stops once the largest Ritz value's bound is this much of it


def plcg(A, b, x0=None, *, depth=2, shifts="auto", interval=None, rtol=1e-5, atol=0.0, maxiter=None, M=None,
         callback=None, comm=None, monitor=False, latency=0.0, estimate_steps=30, drift_tol=1e-11,
         fallback_depth=1, loop="auto"):
    """Solve ``A x = b`` (``A`` SPD) by p(l)-CG with pipeline depth ``depth``.  Collective.

    Arguments and result as :func:`pipekrylov.cg`, plus:

    depth : int
        The pipeline depth ``l >= 1``: each reduction is waited for ``l`` operator
        applications after it started.
    shifts : 'auto', number or ``depth`` numbers
        The basis shifts.  ``'auto'``: Chebyshev points of ``[0, theta_max + bound]``, with
        ``theta_max`` the largest Ritz value of the start's Lanczos steps from the initial
        residual and ``bound`` its residual norm (the steps go on, uncounted, until the
        bound is 1% of it, at most ``estimate_steps``; a :class:`~pipekrylov.Solver` keeps
        them for its later solves).  A number gives equal shifts (``0``: the monomial
        basis of PETSc's pipelcg without ``-ksp_pipelcg_lmax``); ``depth`` numbers are
        used as given.
    interval : (lmin, lmax), optional
        Use the Chebyshev points of this interval instead (PETSc's ``lmin``, ``lmax``).
    estimate_steps : int
        At most this many Lanczos steps for the estimate of ``shifts='auto'``.
    drift_tol : float or None
        The drift of the basis (one more dot product per reduction, an entry of ``G``
        also known by symmetry) at which the same CG goes on as derived p-CG (depth 1)
        from the iterate and the last search direction, keeping CG's iteration count;
        relative to ``||z||``, and at least 100 times the floor the first columns leave.
        None: no check.
    fallback_depth : int or None
        The depth to restart at after a breakdown the drift check did not foresee
        (default 1); None restarts at ``depth`` (PETSc's pipelcg stops instead).
    loop : 'auto', 'compiled' or 'python'
        The loop compiled (A a DistributedCSR or a matrix, M None, "jacobi", "ilu0",
        "ic0", "bjacobi"), or the same loop interpreted; ``'auto'`` the compiled loop where
        it applies.  The residual norms are the same, bit for bit; ``result.loop`` says
        which ran.

    The result also has ``restarts`` (cycles ended by a breakdown or a failed
    true-residual check, each restarting from the current iterate), ``shifts`` (those of
    the first cycle), ``depth`` (that of the last cycle, 1 after a hand-over) and
    ``handed_over`` (the iteration from which p-CG went on, or None).  A printing monitor
    reports restarts and the hand-over.  The norm tested is ``||r||_M = sqrt(r^T M r)``
    against ``max(atol, rtol ||b||_M)``; without a preconditioner it is the 2-norm.
    """
    spec = made(lambda: DeepCG(depth, shifts=shifts, interval=interval, estimate_steps=estimate_steps,
                               drift_tol=drift_tol, fallback_depth=fallback_depth), "p(l)-cg")
    return solve_once(spec, A, b, x0, rtol=rtol, atol=atol, maxiter=maxiter, M=M, callback=callback, comm=comm,
                      monitor=monitor, latency=latency, loop=loop)


def _depth(depth):
    if isinstance(depth, bool) or int(depth) != depth or not 1 <= depth <= MAX_DEPTH:
        raise ValueError(f"depth must be an integer from 1 to {MAX_DEPTH}, got {depth!r}")
    return int(depth)


class DeepCG(LoopSpec):
    """p(l)-CG's loop and its hooks (see the module's docstring).  The options are checked
    here, alike on every rank."""

    def __init__(self, depth, shifts="auto", interval=None, estimate_steps=30, drift_tol=1e-11, fallback_depth=1):
        depth = _depth(depth)
        if drift_tol is not None and not (isinstance(drift_tol, (int, float)) and 0 < drift_tol < np.inf):
            raise ValueError(f"drift_tol must be a positive number or None, got {drift_tol!r}")
        self.depth, self.drift_tol = depth, drift_tol
        self.fallback_depth = None if fallback_depth is None else min(_depth(fallback_depth), depth)
        self.estimate_steps = max(1, int(estimate_steps))
        self.rule = _shift_rule(shifts, interval, depth)   # depth -> shifts, or None: estimate them
        super().__init__(f"p({depth})-cg", loop.plcg, Labels(loop.LABELS, columns=True), self._workspace,
                         loop.S_SIZE, self._breakdown, slots=depth + 2, width=max(depth + 2, 6))
        self.options = (shifts, interval, estimate_steps, drift_tol, fallback_depth)

    @property
    def key(self):
        return f"{self.name} " + " ".join(map(repr, self.options))

    def _workspace(self, n, preconditioned):
        return loop.workspace(n, self.depth, self.estimate_steps)

    def _breakdown(self, check, value):
        if check == loop.INDEFINITE:
            return Breakdown("diverged_indefinite_mat", f"matrix is not positive definite: (A v, v) = {value:.3e} <= 0")
        if check == loop.INDEFINITE_PC:
            return Breakdown("diverged_indefinite_pc", f"preconditioner is not positive definite: "
                                                       f"(v, M v) = {value:.3e} (v: b or a residual)")
        if check == loop.PIVOT:
            return BasisBreakdown(f"LDL^T pivot {value:.3e} <= 0")
        if check == loop.SQUARE_ROOT:
            return SqrtBreakdown(-1, value)
        return BasisDrift(-1, value, None)

    def _w(self, solver, name):
        return solver.W[loop.W_NAMES.index(name)]

    # -------------------------------------------------------------- hooks
    def prepare(self, solver):
        if 2 * self.depth >= solver.partition.n:
            raise ValueError(f"depth {self.depth} needs more than {2 * self.depth} unknowns (the start's "
                             f"2l Lanczos steps); this problem has {solver.partition.n}")
        J = self._w(solver, "J")
        J[:] = 0
        J[loop.REPORT] = 1
        solver.S[loop.DRIFT_TOL] = -1.0 if self.drift_tol is None else self.drift_tol
        solver.handed_over, solver.last_breakdown = None, None
        rule = self.rule or kept(solver, "shift_rule")   # a solver keeps its estimate
        self._set_depth(solver, self.depth, rule)
        solver.first_shifts = None if rule is None else rule(self.depth)
        J[loop.ESTIMATING] = rule is None

    def _set_depth(self, solver, depth, rule):
        """The depth of the next cycle, and its shifts where they are known (else the
        cycle's start estimates them)."""
        solver.deep_depth = depth
        self._w(solver, "J")[loop.DEPTH] = depth
        if rule is not None:
            self._w(solver, "sigma")[:depth] = rule(depth)

    def after_test(self, solver, passed):
        """The cycle's first residual is the true one; a later one is confirmed first."""
        if self._w(solver, "J")[loop.FIRST_TEST]:
            return None if passed else loop.LANCZOS
        return L.CONFIRM if passed else L.AFTER_TEST

    def event(self, solver, run, event):
        if event == L.ESTIMATE:
            self._estimate(solver)
        elif event == L.RESTART:   # b - A x did not confirm the convergence
            if solver.I[L.STOP_AT_TEST]:
                run.replace_last(float(solver.F[L.VALUE]))
            cause = self._w(solver, "J")[loop.CAUSE]
            if cause == loop.INVARIANT:
                solver.last_breakdown = "invariant Krylov space, but b - A x fails the test"
            self._restart(solver, run, "true residual check failed" if cause == loop.NOT_CONFIRMED
                          else solver.last_breakdown)
        else:
            super().event(solver, run, event)

    def broke_down(self, solver, run, breakdown):
        if isinstance(breakdown, BasisDrift):
            self.hand_over(solver, run, breakdown)
        if isinstance(breakdown, BasisBreakdown):
            solver.last_breakdown = str(breakdown)
            if self.fallback_depth is not None:
                self._set_depth(solver, self.fallback_depth, self.rule or kept(solver, "shift_rule"))
            self._restart(solver, run, str(breakdown))
            return True
        return False

    def report(self, solver):
        return {"shifts": solver.first_shifts, "depth": solver.deep_depth, "handed_over": solver.handed_over}

    # -------------------------------------------------------------- in Python, rarely
    def _estimate(self, solver):
        """After a Lanczos step of the start while the shifts are unknown: stop estimating
        once the largest Ritz value's bound is ESTIMATE_TOLERANCE of it (or the steps are
        used up), and set the shifts."""
        J = self._w(solver, "J")
        k = int(J[loop.STEPS])
        ritz, bound = ritz_bound(self._w(solver, "tdiag")[:k], self._w(solver, "toff")[:k])
        if bound <= ESTIMATE_TOLERANCE * abs(ritz.max()) or k >= self.estimate_steps or \
                J[loop.ESTIMATING] == loop.FINAL:
            bounds = interval_from_ritz(ritz, bound)
            rule = keep(solver, "shift_rule", lambda d: chebyshev_shifts(d, *bounds))
            solver.first_shifts = rule(self.depth)
            self._set_depth(solver, int(J[loop.DEPTH]), rule)
            J[loop.ESTIMATING] = 0

    def _restart(self, solver, run, cause):
        """The next cycle, from x, at the depth now set."""
        I, J = solver.I, self._w(solver, "J")
        I[L.RESTARTS] += 1
        run.note(f"restart {I[L.RESTARTS]} after iteration {I[L.DONE]} ({cause}), depth {solver.deep_depth}")
        if I[L.RESTARTS] > MAX_RESTARTS:
            raise Breakdown("diverged_breakdown", f"{self.name} restarted {MAX_RESTARTS} times without converging "
                            f"(last: {solver.last_breakdown or 'true residual check'})")
        if I[L.DONE] >= I[L.MAXITER]:
            raise Finished("diverged_its")
        J[loop.REPORT] = 0
        J[loop.IT0] = I[L.DONE]
        I[L.ITERATION] = I[L.DONE]
        I[L.RESUME] = L.FROM_X

    def hand_over(self, solver, run, drift):
        """CG from the iterate and the last search direction, as derived p-CG testing the
        same natural norm; its start-up scalars set so that its first ``beta`` makes the new
        direction A-conjugate to this one (CG's own ``beta`` in exact arithmetic;
        ``gamma_old / alpha_old = (p, A p)`` keeps its ``alpha`` CG's): CG goes on in the
        Krylov space built so far instead of restarting it.  Collective; ends the solve
        (:class:`~pipekrylov.solvers.driver.Finished`) with the p-CG's outcome."""
        I = solver.I
        run.note(f"basis drift {solver.F[L.VALUE]:.1e} after iteration {I[L.DONE]}: CG goes on as p-CG (depth 1)")
        solver.deep_depth, solver.handed_over = 1, int(I[L.DONE])
        sub = kept(solver, "continuation") or \
            keep(solver, "continuation", solver.with_loop(continuation_spec()))
        # the loop made r = b - A x, M r, s = A p and summed (r, M r), (M r, s), (p, s)
        gamma, tau, pi = solver.R.recv[loop.HAND_OVER_SLOT, :3].tolist()
        run.state = {"p": self._w(solver, "p"), "s": self._w(solver, "s")}   # copied into p-CG's own
        if pi > 0 and tau != 0:
            run.state["gamma_old"] = -gamma * pi / tau       # beta = gamma / gamma_old = -tau / pi
            run.state["alpha_old"] = run.state["gamma_old"] / pi
        sub.spec.prepare(sub)
        I[L.WARM], I[L.RESUME], I[L.ITERATION] = 1, L.FROM_X, I[L.DONE]
        I[L.STOP_AT_TEST], run.warm = 1, True   # its first test is the iteration reported last
        raise Finished(*run_events(sub, run))


def continuation_spec():
    """The loop a hand-over goes on in: derived p-CG testing the natural norm, with
    automatic residual replacement (compiled, or loaded from the cache, at a process's
    first hand-over: a timing that must not include it makes a solver of it first)."""
    return derived_loop_spec(CONTINUATION, replace_automatic=True)


def keep(solver, name, value):
    """Keep ``value`` on ``solver`` while its matrix is the same (an update makes new
    operands: the shifts and the continuation are made anew for the new matrix)."""
    setattr(solver, name, (solver.A_operands, value))
    return value


def kept(solver, name):
    """What :func:`keep` kept for the solver's present matrix, or None."""
    held = getattr(solver, name, None)
    return held[1] if held is not None and held[0] is solver.A_operands else None


def _shift_rule(shifts, interval, depth):
    """``depth -> shifts`` (the depth can drop after a breakdown), or None where they are
    to be estimated.  ``interval=(lmin, lmax)``: its Chebyshev points (PETSc's
    ``-ksp_pipelcg_lmin/lmax``); ``shifts``: ``'auto'`` (estimated), a number (all equal; 0
    is the monomial basis) or ``depth`` values (a smaller depth takes the first ones)."""
    if interval is not None:
        bounds = np.asarray(interval, dtype=np.float64)
        if bounds.shape != (2,) or not np.all(np.isfinite(bounds)) or bounds[0] >= bounds[1]:
            raise ValueError(f"interval must be (lmin, lmax) with lmin < lmax, got {interval!r}")
        return lambda d: chebyshev_shifts(d, *bounds)
    if isinstance(shifts, str):
        if shifts != "auto":
            raise ValueError(f"shifts must be 'auto', a number or {depth} numbers, got {shifts!r}")
        return None
    values = np.atleast_1d(np.asarray(shifts, dtype=np.float64))
    if values.ndim != 1 or not np.all(np.isfinite(values)):
        raise ValueError(f"shifts must be finite numbers, got {shifts!r}")
    if values.size == 1:
        return lambda d: np.full(d, values[0])
    if values.size == depth:
        return lambda d: values[:d]
    raise ValueError(f"shifts: give 'auto', a number or {depth} values, got {values.size} values "
                     "(an interval goes in interval=(lmin, lmax))")
