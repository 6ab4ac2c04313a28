"""The Python loop: generated code (:mod:`.codegen`) run iteration by iteration.

Each iteration, per reduction point: start the reduction, apply the overlapped
operators (poking the reduction between row chunks), wait, test for convergence,
compute the scalars with their breakdown checks, call the segment's fused kernel.
Around that: the start-up, confirming convergence against ``b - A x``, residual
replacement and restarts.  The compiled loop (:mod:`.compiled`) calls the same methods
for everything but the iteration itself, so that the two agree bit for bit.
"""
import numpy as np

from ..kernels import dot
from ..solvers.result import Breakdown
from .execute import Executor

__all__ = ["PythonLoop"]


class PythonLoop:
    """The Python loop of one generated code; call it with a SolverRun."""

    def __init__(self, code):
        self.code = code
        self.method = code.method
        self.schedule = code.schedule

    # -------------------------------------------------------------- running
    def __call__(self, run, state=None):
        """Run from ``run.x``; ``state`` ({name: vector or scalar}) replaces start-up values
        (a warm start, e.g. CG continued from a direction: the images are made from them)
        and the count goes on from ``run.iterations`` without reporting that iteration
        again."""
        method, sched = self.method, self.schedule
        red = run.reduction
        nlocal = len(run.b)
        vec = {name: np.zeros(nlocal) for name in self.code.storage}
        vec["x"] = run.x
        vec["b"] = run.b
        scal = {}
        self.startup(run, vec, scal, state)
        first = run.iterations
        local = self.first_dots(vec)
        run.replacements = replaced = 0
        restarted_at = None
        K = len(self.code.segments)
        for iteration in range(first, run.maxiter + 1):
            for k in range(K):
                pending = red.start(local, f"reduction {k}")
                with red.work("overlap"):
                    for img in sched.phases[k].overlap:
                        self._apply(run, img.word[0], vec[img.parent.name], vec[img.name], red)
                scal["d"] = pending.wait()
                if k == 0:
                    rnorm = float(np.sqrt(max(eval(self.code.norm, {}, scal), 0.0)))
                    reported = state is None or iteration > first
                    if run.converged(iteration, rnorm) if reported else rnorm <= run.atol:
                        # the recursive residual can drift from b - A x: accept only a
                        # true residual that passes too, else restart from x (the drift is
                        # then large against r, and the scalar recurrences, which assume
                        # r, u, w consistent, cannot go on)
                        if run.true_residual_passes(vec["x"], natural=method.norm == "natural"):
                            return vec["x"], iteration, run.stop_reason()
                        self.startup(run, vec, scal)
                        run.replacements += 1
                        break
                    if iteration == run.maxiter:
                        return vec["x"], iteration, "diverged_its"
                try:
                    self._scalars(k, scal)
                except Breakdown as exc:
                    # after a replacement the scalar recurrences may break down; with
                    # replacement on, restart once from x (a second time in a row is real)
                    if not self.may_restart(iteration, restarted_at):
                        self.raise_lost_accuracy(run, vec, exc)
                        raise
                    self.startup(run, vec, scal)
                    run.replacements += 1
                    restarted_at = iteration
                    break
                if k == K - 1:
                    for a, b in sched.carried.items():
                        scal[a] = scal[b]
                local = self.code.segments[k](vec, scal)
            else:
                self.end_of_iteration(run, vec, iteration)
            local = self.first_dots(vec) if run.replacements != replaced else local
            replaced = run.replacements
        return vec["x"], run.maxiter, "diverged_its"

    def may_restart(self, iteration, restarted_at):
        """After a breakdown of the scalar recurrences, restart from x?  With automatic
        replacement on, once: a second breakdown within two iterations is real."""
        return bool(self.code.check_every) and not (restarted_at is not None and iteration - restarted_at <= 2)

    def end_of_iteration(self, run, vec, iteration):
        """Count the iteration; residual replacement every ``replace_every`` iterations, or
        the drift measured every ``check_every``; then the callback."""
        every, check = self.code.replace_every, self.code.check_every
        run.iterations = iteration + 1
        if every and run.iterations % every == 0:
            self.replace(run, vec)
        elif check and run.iterations % check == 0:
            self.replace_if_drifted(run, vec)
        run.iterated(vec["x"])

    def _scalars(self, k, scal):
        """The scalar steps of phase k, with their breakdown checks."""
        for name, expression, test in self.code.steps[k]:
            try:
                scal[name] = eval(expression, {}, scal)
            except ZeroDivisionError:
                scal[name] = np.nan
            if test is not None and not eval(test[0], {}, scal):
                raise Breakdown(test[2], f"p-{self.method.name}: {test[1]} fails "
                                         f"({name} = {scal[name]:.3e})")

    def _drift(self, run, vec):
        """(||b - A x - r||, ||b - A x||, the rounding floor of b - A x): how far the
        recursive residual has drifted from the true one.  Collective: one SpMV, one
        small reduction."""
        m = self.method
        x = vec[m.solution]
        true = vec["b"] - run.A.matvec(x)
        gap = true - vec[m.residual]
        gap2, true2, x2 = run.reduction.allreduce([gap @ gap, true @ true, x @ x], "drift check")
        floor = np.finfo(float).eps * (run.norm_inf_a * np.sqrt(x2) + run.bnorm)
        return np.sqrt(gap2), np.sqrt(true2), floor

    def _drifted(self, gap, true, floor):
        """Drifted: by more than sqrt(eps) ||b - A x|| and more than the rounding error of
        b - A x itself (below that a replacement gains nothing)."""
        return gap > np.sqrt(np.finfo(float).eps) * true and gap > floor

    def replace_if_drifted(self, run, vec):
        """Replace the residual if it has drifted from b - A x, while the solve is not
        about to end.  Collective.  Measured, not estimated, every 25 iterations: a
        replacement below the drift gains nothing, and its perturbation of the
        recurrences costs convergence."""
        gap, true, floor = self._drift(run, vec)
        if self._drifted(gap, true, floor) and true > run.atol:
            self.replace(run, vec)

    def raise_lost_accuracy(self, run, vec, breakdown):
        """A check of the base method (``alpha > 0`` for an indefinite matrix, say) that
        fails once the recurrences have drifted from b - A x tells of lost accuracy, not
        of the matrix: raise that instead.  Collective (the breakdown is on every rank)."""
        gap, true, floor = self._drift(run, vec)
        if self._drifted(gap, true, floor):
            raise Breakdown("diverged_lost_accuracy",
                            f"{breakdown} after the recursive residual drifted from b - A x by "
                            f"{gap / max(true, 1e-300):.1e} of it: the pipelined recurrences lost "
                            f"accuracy (residual replacement, replace_automatic=True, keeps it)") from breakdown

    def replace(self, run, vec):
        """Residual replacement: the residual and every image from their definitions."""
        m = self.method
        run.A.matvec(vec[m.solution], vec[m.residual])
        vec[m.residual][:] = vec["b"] - vec[m.residual]
        for st in m.parsed_invariants:
            self._apply(run, st.word, vec[st.source], vec[st.target])
        self._images(run, vec)
        run.replacements += 1

    @staticmethod
    def _apply(run, op, src, dst, red=None):
        if op == "A":
            run.A.matvec(src, dst, progress=red.progress if red is not None and red.pending else None)
        else:
            run.precondition(src, dst)

    def startup(self, run, vec, scal, state=None):
        """The base method's start-up statements, ``state`` over them, then the images at
        point 0."""
        def operator(op, value):
            out = np.empty_like(value)
            self._apply(run, op, value, out)
            return out

        Executor(len(run.b), operator, lambda value, name: run.reduction.allreduce([value], name)[0],
                 vec, scal)(self.method.parsed_startup)
        for name, value in (state or {}).items():
            if name in vec:
                vec[name][:] = value
            else:
                scal[name] = value
        self._images(run, vec)

    def _images(self, run, vec):
        for img in self.code.start_images:
            self._apply(run, img.word[0], vec[img.parent.name], vec[img.name])

    def first_dots(self, vec):
        return np.array([dot(vec[a.name], vec[b.name]) for a, b in self.schedule.reductions.pairs[0]])


