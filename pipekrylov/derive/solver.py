"""A derived method's loop and what its driver does for it in Python.

:func:`derived_loop` generates the loop of a schedule (:mod:`.loopgen`), compiles its
module (or loads it from the cache) and wraps it in a :class:`DerivedLoop`, the
:class:`~pipekrylov.loops.LoopSpec` a :class:`~pipekrylov.solvers.solver.Solver` runs.
The loop itself starts up, iterates, tests and confirms convergence against ``b - A x``
(starting again from ``x`` where that fails); what happens rarely stays in Python, on
the solver's own operands: residual replacement every ``replace_every`` iterations, the
drift measured every ``CHECK_EVERY`` (automatic replacement), a restart after a
breakdown of the recurrences, finishing a lucky breakdown (a check with a ``finish``), and
telling a breakdown of lost accuracy from one of the matrix.
"""
import ast
import functools
import hashlib
import re

import numpy as np

from ..kernels.compile import compile_source
from ..kernels.workspace import vectors
from ..loops import LoopSpec
from ..runtime import layout as L
from ..solvers.result import Breakdown
from .execute import coefficient
from .loopgen import generate_loop

__all__ = ["DerivedLoop", "derived_loop"]


@functools.lru_cache(maxsize=None)
def derived_loop(code):
    """The :class:`DerivedLoop` of a :class:`.codegen.GeneratedCode` (once per process)."""
    name = code.schedule.name.replace("-", "_")
    loop_code = generate_loop(code, name)
    header = f"# {code.schedule.name}: the loop derived from {code.method.title} (pipekrylov.derive)\n"
    function = compile_source(header + loop_code.source, name, None, fastmath=False, error_model="numpy",
                              refcount=False)
    return DerivedLoop(code, loop_code, function)


class DerivedLoop(LoopSpec):
    """The loop of one derived method and its hooks (see the module's docstring)."""

    confirms = True
    interpreted_if_untyped = True   # a user's method may be beyond Numba

    def __init__(self, code, loop_code, function):
        self.code, self.loop_code = code, loop_code
        self.method = code.method
        self.source = loop_code.source
        self.rows = {name: j for j, (name, _) in enumerate(loop_code.workspace)}
        width = 1 + max(len(ph.pairs) for ph in code.schedule.phases)
        super().__init__(code.schedule.name, function, loop_code.labels + ["drift check"], self._workspace,
                         len(loop_code.scalars), self._breakdown, width=max(width, 3),
                         reductions=len(code.segments))
        self.replace_every = code.replace_every or 0
        self.check_every = code.check_every or 0
        self.digest = "source sha256 " + hashlib.sha256(self.source.encode()).hexdigest()[:16]

    @property
    def key(self):
        return f"{self.name} replace_every={self.replace_every} check_every={self.check_every} {self.digest}"

    def _workspace(self, n, preconditioned):
        lengths = [length for _, length in self.loop_code.workspace]
        spread = iter(vectors(lengths.count(None), n))    # the kernels' vectors, not 4K-aliased
        return tuple(next(spread) if length is None else np.zeros(length) for length in lengths)

    def _breakdown(self, check, value):
        name, condition, reason = self.loop_code.checks[check]
        error = Breakdown(reason, f"{self.name}: {condition} fails ({name} = {value:.3e})")
        error.check = check
        return error

    # -------------------------------------------------------------- hooks
    def prepare(self, solver):
        solver.I[L.REPLACE_EVERY] = self.replace_every
        solver.I[L.CHECK_EVERY] = self.check_every
        solver.restarted_at = None

    def event(self, solver, run, event):
        """STARTED: a warm start's state goes over the start-up's (:meth:`warm_start`);
        RESTART as every method that confirms its tests."""
        if event == L.STARTED:
            for name, value in run.state.items():
                if name in self.loop_code.scalars:
                    solver.S[self.loop_code.scalars.index(name)] = value
                else:
                    self._vector(solver, name)[:] = value
            solver.I[L.RESUME] = L.IMAGES
        else:
            super().event(solver, run, event)

    def iterated(self, solver, run):
        """Residual replacement every ``replace_every`` iterations, or where the drift
        measured every ``check_every`` calls for it; then the first reduction's dots
        again (the last update made them from the replaced vectors)."""
        x, b = run.x, run.b
        done = int(solver.I[L.DONE])
        if self.replace_every and done % self.replace_every == 0:
            self.replace(solver, x, b)
        elif self.check_every and done % self.check_every == 0:
            gap, true, floor = self._drift(solver, x, b)
            if self._drifted(gap, true, floor) and true > solver.F[L.ATOL]:
                self.replace(solver, x, b)
            else:
                return
        else:
            return
        send = solver.R.send[0]
        for j, (a, c) in enumerate(self.code.schedule.reductions.pairs[0]):
            send[j] = self._vector(solver, a.name) @ self._vector(solver, c.name)

    def broke_down(self, solver, run, breakdown):
        """After a replacement the scalar recurrences may break down: with automatic
        replacement on, start again from x once (a second time within two iterations is
        real).  Otherwise a check of the base method (``alpha > 0`` for an indefinite
        matrix, say) that fails once the recurrences have drifted from ``b - A x`` tells of
        lost accuracy, not of the matrix: that is raised instead."""
        I = solver.I
        iteration = int(I[L.ITERATION])
        again = solver.restarted_at is not None and iteration - solver.restarted_at <= 2
        finish = self._finish_of(getattr(breakdown, "check", None))
        if finish is not None and not again:
            # maybe a lucky breakdown: finish the solution, and start again from it; the
            # top of the next iteration confirms convergence against b - A x (if it was
            # not lucky, the check fails again at once and is reported)
            self._finish(solver, run.x, finish, self.loop_code.checks[breakdown.check][0])
            solver.restarted_at = iteration
            I[L.ITERATION] = iteration + 1
            if iteration + 1 > I[L.MAXITER]:
                return False
            I[L.RESUME] = L.FROM_X
            return True
        if self.check_every and not again:
            solver.restarted_at = iteration
            I[L.REPLACEMENTS] += 1
            I[L.ITERATION] = iteration + 1
            if iteration + 1 > I[L.MAXITER]:
                return False
            I[L.RESUME] = L.FROM_X
            return True
        gap, true, floor = self._drift(solver, run.x, run.b)
        if self._drifted(gap, true, floor):
            raise Breakdown("diverged_lost_accuracy",
                            f"{breakdown} after the recursive residual drifted from b - A x by "
                            f"{gap / max(true, 1e-300):.1e} of it: the pipelined recurrences lost "
                            f"accuracy (residual replacement, replace_automatic=True, keeps it)") from breakdown
        if getattr(breakdown, "reason", None) == "diverged_indefinite_mat" and I[L.REPLACEMENTS] > 0:
            # replaced every k iterations, r is fresh but the other recurrences (s = A p)
            # may not be: an SPD matrix fails the check too (494_bus, replace_every=50)
            raise Breakdown(breakdown.reason, f"{breakdown}: A is not positive definite, or the pipelined "
                                              f"recurrences lost accuracy between the {int(I[L.REPLACEMENTS])} "
                                              "residual replacements (replace_automatic=True replaces where they "
                                              "drift)") from breakdown
        return False

    # -------------------------------------------------------------- in Python, rarely
    def _finish_of(self, check):
        """The base method's finish for loop check number ``check``, or None."""
        if check is None:
            return None
        base = _base_name(self.loop_code.checks[check][0])
        return next((f for condition, f in self.method.finishes.items()
                     if base in {n.id for n in ast.walk(ast.parse(condition, mode="eval")) if isinstance(n, ast.Name)}),
                    None)

    def _finish(self, solver, x, finish, at):
        """``x = finish`` in the base method's names, with the values they have in the
        loop when the check of scalar ``at`` fails: each scalar's latest version, each
        vector the loop keeps, or else its base definition applied (``phat = M p``)."""
        version = {}
        for phase in self.code.schedule.phases:
            for st in phase.scalars:
                version[st.source.split("=")[0].strip()] = st.name
                if st.name == at:
                    break
            else:
                continue
            break
        names = self.loop_code.scalars
        scalars = {s: solver.S[names.index(version.get(s, s))] for c, _ in finish.terms for s in c.symbols()}
        new = sum(coefficient(c, scalars) * (x if v == self.method.solution else self._base_vector(solver, v))
                  for c, v in finish.terms)
        x[:] = new

    def _base_vector(self, solver, name):
        if self.loop_vector(name) in self.rows:
            return self._vector(solver, name)
        st = next(st for st in self.method.parsed_iteration if st.target == name and st.kind == "apply")
        return solver.apply(st.word, self._base_vector(solver, st.source), np.empty(solver.partition.nlocal))

    def _vector(self, solver, name):
        return solver.W[self.rows[self.loop_vector(name)]]

    def loop_vector(self, name):
        """A vector's name in the loop (renamed where it is one of the loop's own)."""
        return name if name in self.rows else name + "_"

    def replace(self, solver, x, b):
        """Residual replacement: the residual and every image from their definitions."""
        m = self.method
        r = self._vector(solver, m.residual)
        solver.apply("A", x, r)
        np.subtract(b, r, out=r)
        for st in m.parsed_invariants:
            solver.apply(st.word, self._vector(solver, st.source), self._vector(solver, st.target))
        for img in self.code.start_images:
            solver.apply(img.word[0], self._vector(solver, img.parent.name), self._vector(solver, img.name))
        solver.I[L.REPLACEMENTS] += 1

    def _drift(self, solver, x, b):
        """(||b - A x - r||, ||b - A x||, the rounding floor of b - A x): how far the
        recursive residual has drifted from the true one.  Collective: one operator
        application, one small reduction."""
        true = np.empty_like(x)
        solver.apply("A", x, true)
        np.subtract(b, true, out=true)
        gap = true - self._vector(solver, self.method.residual)
        gap2, true2, x2 = solver.reduce([gap @ gap, true @ true, x @ x], "drift check")
        floor = np.finfo(float).eps * (solver.norm_inf_a * np.sqrt(x2) + solver.F[L.BNORM])
        return np.sqrt(gap2), np.sqrt(true2), floor

    @staticmethod
    def _drifted(gap, true, floor):
        """Drifted: by more than sqrt(eps) ||b - A x|| and more than the rounding error of
        b - A x itself (below that a replacement gains nothing)."""
        return gap > np.sqrt(np.finfo(float).eps) * true and gap > floor


def _base_name(ssa):
    """A scalar's name in the base method (its versions in the loop are name_1, name_2 ...)."""
    return re.sub(r"_\d+$", "", ssa)
