"""Code generation: a Schedule becomes a solver on the runtime.

The generated solver is Python source that reads like the schedule it comes from (print
``solver.source``), plus one Numba kernel per reduction point: the fused update of that
segment with the local dot products of the next reduction, in one pass over memory.
"""
import numpy as np

from ..kernels import dot
from ..kernels.compile import compile_source
from ..solvers.result import Breakdown
from .passes import Img

__all__ = ["generate"]

CHECK_EVERY = 25  # iterations between two measurements of the residual drift


def _storage(img):
    return f"{img.word}{img.version.name}"


def _resolve(version, word):
    while version.kind == "apply":
        word, version = word + version.word, version.arg
    return Img(version, word)


class _Segment:
    """The fused update kernel of one segment."""

    def __init__(self, sched, k):
        aux = sched.reductions.auxiliaries
        sym = aux.symbolic
        self.k = k
        K = len(sym.segments)
        late = [img for seg, img in aux.late if seg == k]
        new = [img for img in aux.maintained if img.version.segment == k]
        nxt = (k + 1) % K
        self.pairs = list(sched.reductions.pairs[nxt])
        end = sym.current[k + 1] if k + 1 < K else {s: sym.final[s] for s in sym.method.state}
        loads, stores, scalars, lines = [], [], [], []
        computed = {}

        def ref(img):
            img = _resolve(*img)
            if img in computed:
                return computed[img]
            name = _storage(img)
            if name not in loads:
                loads.append(name)
            return f"{name}_o"

        def combination(version, word):
            parts = []
            for c, t in version.terms:
                r = ref(_resolve(t, word))
                for sign, factor in c.monomials():
                    for s in factor.split("*") if factor else []:
                        if not s[0].isdigit() and s not in scalars:
                            scalars.append(s)
                    parts.append(f"{sign} {factor + '*' if factor else ''}{r}")
            text = " ".join(parts) or "0.0"
            return text[2:] if text.startswith("+ ") else text

        # late images first (they read only older, stored vectors), then the new versions
        for img in sorted(late, key=lambda i: len(i.word)):
            local = f"{_storage(img)}_l{img.version.id}"
            lines.append(f"{local} = {combination(img.version, img.word)}")
            computed[img] = local
        for img in new:
            local = f"{_storage(img)}_n{img.version.id}"
            lines.append(f"{local} = {combination(img.version, img.word)}")
            computed[img] = local
            if end.get(img.version.name) is img.version:
                stores.append((_storage(img), local))
        dots = []
        for a, b in self.pairs:
            dots.append(f"{self._dot_ref(a, end, computed, ref)} * {self._dot_ref(b, end, computed, ref)}")
        self.arrays = list(dict.fromkeys(loads + [s for s, _ in stores]))
        self.scalars = scalars
        body = [f"def fused({', '.join(self.arrays)}, coef, out):"]
        body += [f"    {s} = coef[{j}]" for j, s in enumerate(scalars)]
        body += [f"    d{j} = 0.0" for j in range(len(dots))]
        body.append(f"    for i in range({self.arrays[0]}.shape[0]):")
        body += [f"        {n}_o = {n}[i]" for n in loads]
        body += [f"        {line}" for line in lines]
        body += [f"        {n}[i] = {local}" for n, local in stores]
        body += [f"        d{j} += {d}" for j, d in enumerate(dots)]
        body += [f"    out[{j}] = d{j}" for j in range(len(dots))]
        self.source = "\n".join(body) + "\n"
        signature = "void(" + ", ".join(["float64[::1]"] * (len(self.arrays) + 2)) + ")"
        self.kernel = compile_source(self.source, "fused", [signature], noalias=True)
        self.coef = np.zeros(max(1, len(scalars)))
        self.out = np.zeros(max(1, len(dots)))
        self.ndots = len(dots)

    @staticmethod
    def _dot_ref(img, end, computed, ref):
        current = end.get(img.version.name)
        target = Img(current, img.word) if current is not None and current.kind != "start" else img
        return computed.get(target) or ref(img)

    def __call__(self, vec, scal):
        for j, s in enumerate(self.scalars):
            self.coef[j] = scal[s]
        self.kernel(*[vec[n] for n in self.arrays], self.coef, self.out)
        return self.out[:self.ndots].copy()


class GeneratedSolver:
    """The solver loop for one schedule; call it with a SolverRun."""

    def __init__(self, sched):
        self.schedule = sched
        aux = sched.reductions.auxiliaries
        self.sym = sym = aux.symbolic
        self.method = sym.method
        self.segments = [_Segment(sched, k) for k in range(len(sym.segments))]
        self.start_images = sched.start
        names = {_storage(img) for img in aux.maintained} | {_storage(img) for _, img in aux.direct}
        names |= {_storage(img) for _, img in aux.late} | set(self.method.state)
        names |= {_storage(img) for img in self.start_images}
        names |= {_storage(i) for pairs in sched.reductions.pairs for p in pairs for i in p}
        self.storage = sorted(names - set(self.method.constants))
        self.source = self._describe()
        # scalar expressions compiled once: eval of a code object costs a fraction of a string's
        self.norm = compile(sched.reductions.norm, "<norm>", "eval")
        # residual replacement: every k iterations, and/or the drift checked every CHECK_EVERY
        self.replace_every = sched.replacement.get("every")
        self.check_every = CHECK_EVERY if sched.replacement.get("automatic") else None
        self.steps = [[(st.name, compile(st.expression, st.name, "eval"),
                        (compile(ph.checks[st.name][0], "<check>", "eval"), *ph.checks[st.name])
                        if st.name in ph.checks else None) for st in ph.scalars]
                      for ph in sched.phases]

    def _describe(self):
        out = [f"# generated from: {self.method.title}", str(self.schedule), ""]
        for seg in self.segments:
            out.append(f"# fused kernel of segment {seg.k}:")
            out.append(seg.source)
        return "\n".join(out)

    # -------------------------------------------------------------- running
    def __call__(self, run, state=None):
        """Run from ``run.x``; ``state`` ({name: vector or scalar}) replaces start-up values
        (a warm start, e.g. CG continued from a direction: the images are made from them)
        and the count goes on from ``run.iterations`` without reporting that iteration
        again."""
        method, sched = self.method, self.schedule
        red = run.reduction
        nlocal = len(run.b)
        vec = {name: np.zeros(nlocal) for name in self.storage}
        vec["x"] = run.x
        vec["b"] = run.b
        scal = {}
        self.startup(run, vec, scal, state)
        first = run.iterations
        local = self.first_dots(vec)
        run.replacements = replaced = 0
        restarted_at = None
        K = len(self.segments)
        for iteration in range(first, run.maxiter + 1):
            for k in range(K):
                pending = red.start(local, f"reduction {k}")
                with red.work("overlap"):
                    for img in sched.phases[k].overlap:
                        self._apply(run, img.word[0], vec[_storage(img.parent)], vec[_storage(img)], red)
                scal["d"] = pending.wait()
                if k == 0:
                    rnorm = float(np.sqrt(max(eval(self.norm, {}, scal), 0.0)))
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
                local = self.segments[k](vec, scal)
            else:
                self.end_of_iteration(run, vec, iteration)
            local = self.first_dots(vec) if run.replacements != replaced else local
            replaced = run.replacements
        return vec["x"], run.maxiter, "diverged_its"

    def may_restart(self, iteration, restarted_at):
        """After a breakdown of the scalar recurrences, restart from x?  With automatic
        replacement on, once: a second breakdown within two iterations is real."""
        return bool(self.check_every) and not (restarted_at is not None and iteration - restarted_at <= 2)

    def end_of_iteration(self, run, vec, iteration):
        """Count the iteration; residual replacement every ``replace_every`` iterations, or
        the drift measured every ``check_every``; then the callback."""
        every, check = self.replace_every, self.check_every
        run.iterations = iteration + 1
        if every and run.iterations % every == 0:
            self.replace(run, vec)
        elif check and run.iterations % check == 0:
            self.replace_if_drifted(run, vec)
        run.iterated(vec["x"])

    def _scalars(self, k, scal):
        """The scalar steps of phase k, with their breakdown checks."""
        for name, expression, test in self.steps[k]:
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
        for st in self.method.parsed_startup:
            if st.kind == "apply":
                value = vec[st.source]
                for op in reversed(st.word):
                    out = np.empty_like(value)
                    self._apply(run, op, value, out)
                    value = out
                vec[st.target] = value
            elif st.kind == "zero":
                vec.setdefault(st.target, np.zeros(len(run.b)))[:] = 0.0
            elif st.kind == "lincomb":
                value = sum(float(c.terms.get((), 0)) * vec[v] if not c.symbols() else
                            eval(str(c), {}, scal) * vec[v] for c, v in st.terms)
                vec.setdefault(st.target, np.zeros(len(run.b)))[:] = value
            elif st.kind == "scalar":
                scal[st.target] = eval(st.expression, {}, scal)
            elif st.kind == "dot":
                scal[st.target] = run.reduction.allreduce([vec[st.pair[0]] @ vec[st.pair[1]]], st.target)[0]
        for name, value in (state or {}).items():
            if name in vec:
                vec[name][:] = value
            else:
                scal[name] = value
        self._images(run, vec)

    def _images(self, run, vec):
        for img in self.start_images:
            self._apply(run, img.word[0], vec[_storage(img.parent)], vec[_storage(img)])

    def first_dots(self, vec):
        return np.array([dot(vec[_storage(a)], vec[_storage(b)]) for a, b in self.schedule.reductions.pairs[0]])


def generate(sched):
    """The solver function for a schedule: ``solve(run) -> (x, iterations, reason)``."""
    return GeneratedSolver(sched)
